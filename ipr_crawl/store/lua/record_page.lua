-- record_page: page p was fetched; record it with its out-links, register new
-- URLs, apply the ordering's score update and re-score frontier entries in place.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req
-- KEYS[6] forced  KEYS[7] unfiltered  KEYS[8] imported_seen  KEYS[9] order
-- KEYS[10..16] store/keys.py DERIVED_KEYS, then (bucket mode) this bucket's outboxes (_outbox.lua)
-- ARGV[1] ordering: ipr | push | blc | ifs | bf | opic | importance | pr | lsf
-- ARGV[2] IPR cut-off: dl1 | pl | vr | ar
-- ARGV[3] initial score added to s_p at its first fetch (ipr; Yamada et al. 2004, §3: 1)
-- ARGV[4] cut-off parameter: L (pl), theta (vr), threshold (ar)
-- ARGV[5] cap on score updates beyond the direct targets (pl, vr, ar)
-- ARGV[6..9] importance a, b, c, d (Matsuoka et al., §2)
-- ARGV[10..12] push: budget (edge updates per page), damping d, epsilon
-- ARGV[13] lease to acknowledge (_leases.lua lease_arg), or ''
-- ARGV[14] page id (8 bytes)  ARGV[15] page tie key (site hash for importance/lsf)
-- ARGV[16] n = number of distinct out-links (the caller bounds it)
-- ARGV[17 + 3k], ARGV[18 + 3k], ARGV[19 + 3k]: id, tie key, payload of link k
--   ('' payload: none is stored, as in a replay)
-- ARGV[17 + 3n] (bucket mode, optional) this bucket's number; ARGV[18 + 3n] n bytes,
--   the bucket of each link: links of other buckets go to the outbox (record's bk); both ''
--   when not in bucket mode but ARGV[19 + 3n] is given
-- ARGV[19 + 3n] (optional, a crawl carried over from scrapy-redis) the links' scrapy-redis
--   fingerprints, 40 hex digits each (blanks: none): _dupes.lua imported_hit; '' when
--   not, but ARGV[20 + 3n] is given
-- ARGV[20 + 3n] (optional) the links' Scrapy Request.priority, 4 bytes each (big-endian
--   signed): a new URL's first frontier key (_frontier.lua zscore)
-- Rules at p's first fetch (a page fetched before is re-recorded: out-links
-- replaced, new URLs registered, no score update):
--   ipr (Yamada et al. 2004, §3): s_p += initial, beta = s_p / n to every target (DL1), then
--     pl: breadth-first from the fetched targets, L more updates, each fetched
--         node passing the share it received on, split over its out-links;
--     vr: a fetched node q passes a share beta on when beta / s_q >= theta
--         (s_q before the update); deeper nodes are updated only under that rule;
--     ar: fetched targets accumulate a_q; when a_q / s_q > threshold, a_q is
--         passed on and zeroed.
--   blc, ifs: every target's back-link count (in-degree) += 1.
--   opic (Abiteboul et al. 2003): history a_p += cash s_p; cash s_p / n to every
--     target; s_p = 0.
--   importance (Matsuoka et al., §2): f = log2(a*same-site + b*other-site links + 1); every
--     target j gets X(j) += (c if same site else d) * f.
--   push (forward push, Andersen, Chung & Lang, FOCS 2006): m = s_p + initial;
--     s_p = (1 - d) m (its estimate), d m / n to every target: an unfetched
--     target's priority s, a fetched target's residual a; then the largest
--     residuals are pushed on the same way until `budget` edge updates are spent
--     (push_residuals).
--   pr: none (scores come from the periodic PageRank step); bf, lsf: none.
-- Arguments are checked and the records read before the first write: a malformed call
-- is an IPR_BAD_RECORD error, a record that cannot be decoded a script error, both with
-- nothing written.
-- Returns {new URLs, 1 if first fetch else 0, frontier entries re-scored,
--          propagation updates done, propagation entries dropped by the cap
--          (push: edge updates of the push phase, 1 if its budget ran out with work left),
--          known links queued again by Scrapy's duplicate rule (enqueue.lua `unfiltered`),
--          the 0-based indexes of the links queued (the others were duplicates)}.
-- Cost: O(n + cap) node updates, each O(log F) in the frontier.
--! include _record.lua
--! include _ordering_args.lua
--! include _store_lost.lua
local K = {meta = KEYS[1], node = KEYS[2], frontier = KEYS[3], lease = KEYS[4], req = KEYS[5],
  forced = KEYS[6], unfiltered = KEYS[7], imported_seen = KEYS[8], order = KEYS[9]}
local lost_store = store_lost(K.meta)
if lost_store then return lost_store end
local n = tonumber(ARGV[16])
if not n or n < 0 or n % 1 ~= 0 then return redis.error_reply('IPR_BAD_RECORD record_page: link count ' .. tostring(ARGV[16])) end
local lids, lties, lpay = {}, {}, {}
for k = 0, n - 1 do
  lids[k + 1], lties[k + 1], lpay[k + 1] = ARGV[17 + 3 * k], tonumber(ARGV[18 + 3 * k]), ARGV[19 + 3 * k]
end
local bk
if ARGV[17 + 3 * n] and ARGV[17 + 3 * n] ~= '' then bk = {own = tonumber(ARGV[17 + 3 * n]), of = ARGV[18 + 3 * n]} end
local P = params_from(ARGV, 1)
P.fps = ARGV[19 + 3 * n]
if P.fps == '' then P.fps = nil end
P.rps = ARGV[20 + 3 * n]
if P.rps == '' then P.rps = nil end
local bad = record_args_error(ARGV[14], tonumber(ARGV[15]), n, lids, lties, bk, P.fps, P.rps)
if bad then return redis.error_reply('IPR_BAD_RECORD record_page: ' .. bad .. '; nothing written') end
local added, first, rescored, updates, dropped, refetched, queued =
  record(K, P, ARGV[13], ARGV[14], tonumber(ARGV[15]), n, lids, lties, lpay, nil, bk)
return {added, first and 1 or 0, rescored, updates, dropped, refetched, queued}
