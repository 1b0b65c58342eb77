--! include _record_format.lua
--! include _seq.lua
--! include _derived_keys.lua
-- Node record (value of the `node` hash, field = 8-byte node id; REC is its head,
-- generated from store/record.py):
--   state  B  0 = discovered, not fetched; 2 = fetched; 3 = failed for good
--   seq    d  discovery sequence number (ties of equal priority: lower first)
--   s      d  score: approximate PageRank (ipr), back-link count / in-degree
--             (blc, ifs), cash (opic), importance X (importance), PageRank (pr)
--   a      d  received, not yet propagated score (ipr AR cut-off); OPIC history;
--             push: residual; an unfetched node: its prior (prior_conf), else 0
--   tie    d  blc: min('/' count, 1023) * 2^14 + min(URL length, 16383);
--             importance, larger-sites-first: 52-bit hash of the URL's host:port
--   od     I4 out-degree recorded at fetch
--   then   the out-links of a fetched page, 8-byte ids (od of them), in numbering
--          order: one hash entry per URL holds both (about 8 B per edge); in bucket
--          mode then od bytes, each link's bucket
-- Frontier member = 8-byte big-endian seq .. 8-byte id (member_of).

-- In bucket mode a fetched page's links are followed by one byte per link, its
-- bucket (`lbk`; store/buckets.py), so that push can send a residual to a link of
-- another bucket; the links are the 8 * od bytes after the head.
-- wide: the table gets slots for push's index levels `lv` and `pl` (record_ctx) from
-- the start; keys added to a full table later would make Lua re-hash it.
-- Scrapy's Request.priority of a queued node whose request set one (not 0): hash
-- `rprio` beside `node` (node id -> integer; keys.py DERIVED_KEYS), read into the
-- record as r.rp (nil: 0) while the node is queued, deleted when it is fetched or
-- failed. It is the frontier's first key (_frontier.lua zscore). Looked up only
-- while the hash exists (one EXISTS per call).
local RPRIO = {}
local function rprio_key() return derived_key('rprio') end
local function rprio_any(node_key)
  if RPRIO.any == nil then RPRIO.any = redis.call('EXISTS', rprio_key()) == 1 end
  return RPRIO.any
end
-- a new node's Scrapy priority p (a number, nil or 0: none) on record r
local function rprio_set(node_key, id, r, p)
  p = tonumber(p) or 0
  if p == 0 then return end
  r.rp = p
  redis.call('HSET', rprio_key(), id, p)
  RPRIO.any = true
end
local function rprio_del(node_key, id, r)
  if r then r.rp = nil end
  if rprio_any(node_key) then redis.call('HDEL', rprio_key(), id) end
end

local function rec_get(node_key, id, wide)
  local raw = redis.call('HGET', node_key, id)
  if not raw then return nil end
  local st, seq, s, a, tie, od = struct.unpack(REC, raw)
  local cut = REC_SIZE + 8 * od
  local links, lbk = string.sub(raw, REC_SIZE + 1), nil
  if #raw > cut then links, lbk = string.sub(raw, REC_SIZE + 1, cut), string.sub(raw, cut + 1) end
  local rp = nil  -- its Scrapy priority: no call while this call knows there is none
  if st == 0 and RPRIO.any ~= false and rprio_any(node_key) then rp = tonumber(redis.call('HGET', rprio_key(), id)) end
  if wide then
    return {st = st, seq = seq, s = s, a = a, tie = tie, od = od, links = links, lbk = lbk, lv = nil, pl = nil, rp = rp}
  end
  return {st = st, seq = seq, s = s, a = a, tie = tie, od = od, links = links, lbk = lbk, rp = rp}
end

local function rec_put(node_key, id, r)
  redis.call('HSET', node_key, id,
    struct.pack(REC, r.st, r.seq, r.s, r.a, r.tie, r.od) .. (r.links or '') .. (r.lbk or ''))
end

local function member_of(r, id)
  return seq8(r.seq) .. id
end

local function new_record(meta_key, tie, wide)
  local seq = redis.call('HINCRBY', meta_key, 'seq', 1)
  if wide then return {st = 0, seq = seq, s = 0, a = 0, tie = tie, od = 0, links = '', lbk = nil, lv = nil, pl = nil} end
  return {st = 0, seq = seq, s = 0, a = 0, tie = tie, od = 0, links = ''}
end
