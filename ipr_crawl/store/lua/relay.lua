-- relay: apply outbox entries of other buckets on this bucket (bucket mode,
-- store/buckets.py), each at most once: per source bucket, the highest entry id
-- applied (stream id ms-seq) is kept in the `hwm` hash (source -> id) and entries at
-- or below it are skipped, so a relay that runs twice, or two relays at once,
-- change nothing more.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req (this bucket)
-- KEYS[6] forced  KEYS[7] unfiltered  KEYS[8] imported_seen  KEYS[9] order (this bucket)
-- KEYS[10..16] store/keys.py DERIVED_KEYS, then this bucket's outboxes, KEYS[#KEYS] hwm
-- ARGV[1..N_ORDERING_ARGS] ordering parameters as record_page.lua
-- then groups: source bucket, number of entries k, then k pairs (stream id, entry)
--   (entry: the cmsgpack list written by out_flush in the source bucket)
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns {entries applied, entries skipped (applied before), new nodes, re-scored}.
-- Cost: O(links in the entries), each O(log F) in the frontier.
--! include _record_ctx.lua
--! include _ordering_args.lua
--! include _store_lost.lua

-- receive(K, P, list): apply one outbox entry's list (out_add's flat layout) on this
-- bucket: a link makes its node if new (with its payload) and gives it its gain as a
-- link of a page recorded here would; a gain only (kind 1) reaches a known node.
-- Returns new nodes, frontier entries re-scored.
local function receive(K, P, list)
  local X = record_ctx(K, P, nil)
  X.bucketed = true
  local added = 0
  for i = 1, #list, 5 do
    local id, tie, gain, payload, kind = list[i], list[i + 1], list[i + 2], list[i + 3], list[i + 4]
    local rp = nil
    if type(kind) == 'table' then kind, rp = kind[1], kind[2] end  -- a link of Scrapy priority rp
    if kind == 0 then
      added = added + X.gain_to(id, tie, payload, gain, nil, rp)
    elseif X.rule.gain then
      X.rule.gain(X, id, X.get(id), gain)
    else
      local r = X.get(id)
      if r then r.s = r.s + gain; X.touch(id) end
    end
  end
  return added, X.flush('')
end

local K = {meta = KEYS[1], node = KEYS[2], frontier = KEYS[3], lease = KEYS[4], req = KEYS[5],
  forced = KEYS[6], unfiltered = KEYS[7], imported_seen = KEYS[8], order = KEYS[9]}
local lost_store = store_lost(K.meta)
if lost_store then return lost_store end
local P = params_from(ARGV, 1)
local hwm = KEYS[#KEYS]
-- a stream id 'ms-seq' as two numbers
local function sid(s)
  local dash = string.find(s, '-', 1, true)
  return tonumber(string.sub(s, 1, dash - 1)), tonumber(string.sub(s, dash + 1))
end
local function after(a_ms, a_seq, b_ms, b_seq) return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq) end
local i = N_ORDERING_ARGS + 1
local applied, skipped, added, rescored = 0, 0, 0, 0
while ARGV[i] do
  local src, k = ARGV[i], tonumber(ARGV[i + 1])
  local last = redis.call('HGET', hwm, src) or '0-0'
  local last_ms, last_seq = sid(last)
  for j = 0, k - 1 do
    local id = ARGV[i + 2 + 2 * j]
    local ms, seq = sid(id)
    if after(ms, seq, last_ms, last_seq) then
      local a, r = receive(K, P, cmsgpack.unpack(ARGV[i + 3 + 2 * j]))
      added, rescored, applied = added + a, rescored + r, applied + 1
      last, last_ms, last_seq = id, ms, seq
    else
      skipped = skipped + 1
    end
  end
  redis.call('HSET', hwm, src, last)
  i = i + 2 + 2 * k
end
return {applied, skipped, added, rescored}
