-- Shared definitions, prepended to every script of this folder by store/frontier.py
-- (script_source), after REC / REC_SIZE (store/record.py) and params_from (the
-- ordering arguments, ordering/params.py's LUA_ARGS).
-- Node record (value of the `node` hash, field = 8-byte node id; REC is its head):
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
-- Frontier member = 8-byte big-endian seq .. 8-byte id; ZSET score = -priority,
-- so ZPOPMIN pops the highest priority and, among equals, the lowest seq.
-- larger-sites-first ('lsf') keeps the frontier ZSET (score 0) as the set of
-- queued members and orders pops by the `sites` ZSET (score = -pending URLs of
-- the site) and one seq-ordered ZSET per site, keys `ipr:{crawl}:site:<hash>`.

local TWO32 = 4294967296



-- In bucket mode a fetched page's links are followed by one byte per link, its
-- bucket (`lbk`; store/buckets.py), so that push can send a residual to a link of
-- another bucket; the links are the 8 * od bytes after the head.
-- wide: the table gets slots for push's index levels `lv` and `pl` (record_ctx) from
-- the start; keys added to a full table later would make Lua re-hash it.
local function rec_get(node_key, id, wide)
  local raw = redis.call('HGET', node_key, id)
  if not raw then return nil end
  local st, seq, s, a, tie, od = struct.unpack(REC, raw)
  local cut = REC_SIZE + 8 * od
  local links, lbk = string.sub(raw, REC_SIZE + 1), nil
  if #raw > cut then links, lbk = string.sub(raw, REC_SIZE + 1, cut), string.sub(raw, cut + 1) end
  if wide then
    return {st = st, seq = seq, s = s, a = a, tie = tie, od = od, links = links, lbk = lbk, lv = nil, pl = nil}
  end
  return {st = st, seq = seq, s = s, a = a, tie = tie, od = od, links = links, lbk = lbk}
end

local function rec_put(node_key, id, r)
  redis.call('HSET', node_key, id,
    struct.pack(REC, r.st, r.seq, r.s, r.a, r.tie, r.od) .. (r.links or '') .. (r.lbk or ''))
end

local function member_of(r, id)
  return struct.pack('>I4I4', math.floor(r.seq / TWO32), r.seq % TWO32) .. id
end

-- An unfetched node's a is its prior (0 without one), see prior_conf.
local function priority(ordering, r)
  local s = r.s
  if r.st == 0 then s = s + r.a end
  if ordering == 'blc' then return s * 16777216 - r.tie end
  if ordering == 'bf' or ordering == 'lsf' then return 0 end
  return s
end

-- ZSET score of a frontier entry, formatted with 17 significant digits: Lua's own
-- number-to-string keeps only 14, which would merge close scores (redis-server 6.2
-- formats a number argument of redis.call with 17 itself; the format here does not
-- depend on the server's version).
local function zscore(ordering, r)
  return string.format('%.17g', -priority(ordering, r))
end

-- A prior (IPR_PRIOR_CRAWL, store/prior.py): the meta fields prior_weight and
-- prior_buckets, read once per call; nil when the crawl has none. A URL the prior
-- knows starts with a = weight x (its PageRank in the earlier crawl x that crawl's
-- node count), float32 in hash `prior:<bucket>`, bucket = the id's last 4 bytes
-- (big-endian uint32) mod prior_buckets. An unfetched node's priority is s + a.
local function prior_conf(meta_key)
  local v = redis.call('HMGET', meta_key, 'prior_weight', 'prior_buckets')
  if not v[2] then return nil end
  return {w = tonumber(v[1]), b = tonumber(v[2]), base = string.sub(meta_key, 1, -5) .. 'prior:'}
end

local function prior_of(pc, id)
  if not pc then return 0 end
  local raw = redis.call('HGET', pc.base .. string.format('%d', struct.unpack('>I4', id, 5) % pc.b), id)
  if not raw then return 0 end
  return pc.w * struct.unpack('>f', raw)
end

local function new_record(meta_key, tie, wide)
  local seq = redis.call('HINCRBY', meta_key, 'seq', 1)
  if wide then return {st = 0, seq = seq, s = 0, a = 0, tie = tie, od = 0, links = '', lbk = nil, lv = nil, pl = nil} end
  return {st = 0, seq = seq, s = 0, a = 0, tie = tie, od = 0, links = ''}
end

-- A lease member is a node member (16 bytes) or a forced-queue token ('F' .. 8 bytes).
local function is_token(m) return #m == 9 end

-- Keys beside `lease` (same hash tag): `lease_by` (lease member -> holder id) and
-- `holders` (holder id -> heartbeat deadline, ms), store/keys.py.
local function lease_by_key(lease) return lease .. '_by' end
local function holders_key(lease) return string.sub(lease, 1, -6) .. 'holders' end

-- Settle lease `m` (it no longer has a holder); 1 if it was in flight.
local function lease_settle(lease, m)
  redis.call('HDEL', lease_by_key(lease), m)
  return redis.call('ZREM', lease, m)
end

local function site_name(r) return string.format('%.0f', r.tie) end
local function site_key(meta_key, site) return string.sub(meta_key, 1, -5) .. 'site:' .. site end
local function sites_key(meta_key) return string.sub(meta_key, 1, -5) .. 'sites' end

-- Put a queued node into the frontier (and its site queue for lsf).
local function frontier_add(meta_key, frontier, ordering, r, m)
  redis.call('ZADD', frontier, zscore(ordering, r), m)
  if ordering == 'lsf' then
    local site = site_name(r)
    if redis.call('ZADD', site_key(meta_key, site), r.seq, m) == 1 then
      redis.call('ZINCRBY', sites_key(meta_key), -1, site)
    end
  end
end

-- A lease that will not be settled by its holder goes back: a forced-queue token
-- to the forced queue (at its own place), a node still unfetched to the frontier.
local function lease_requeue(meta, node, frontier, lease, forced, ordering, m)
  if lease_settle(lease, m) == 0 then return 0 end
  if is_token(m) then
    local hi, lo = struct.unpack('>I4I4', string.sub(m, 2))
    redis.call('ZADD', forced, hi * TWO32 + lo, m)
  else
    local id = string.sub(m, 9)
    local r = rec_get(node, id)
    if r and r.st == 0 then frontier_add(meta, frontier, ordering, r, m) end
  end
  return 1
end

-- Hand back every lease of the holders in `dead` (a set: holder id -> true) and
-- forget those holders. Cost: O(leases in flight), paid once per holder lost.
local function reclaim_holders(meta, node, frontier, lease, forced, ordering, dead)
  local by = redis.call('HGETALL', lease_by_key(lease))
  local n = 0
  for i = 1, #by, 2 do
    if dead[by[i + 1]] then n = n + lease_requeue(meta, node, frontier, lease, forced, ordering, by[i]) end
  end
  local holders = holders_key(lease)
  for h, _ in pairs(dead) do
    redis.call('ZREM', holders, h)
    redis.call('HDEL', holders .. '_info', h)
  end
  return n
end

-- Take a node out of the frontier (and its site queue for lsf); 1 if it was there.
local function frontier_remove(meta_key, frontier, ordering, r, m)
  local removed = redis.call('ZREM', frontier, m)
  if ordering == 'lsf' and removed == 1 then
    local site = site_name(r)
    if redis.call('ZREM', site_key(meta_key, site), m) == 1 then
      if tonumber(redis.call('ZINCRBY', sites_key(meta_key), 1, site)) >= 0 then
        redis.call('ZREM', sites_key(meta_key), site)
      end
    end
  end
  return removed
end
