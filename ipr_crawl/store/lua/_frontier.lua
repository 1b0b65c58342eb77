--! include _records.lua
--! include _orderings.lua
--! include _derived_keys.lua
-- The frontier: ZSET of member_of(record, id) (8-byte big-endian seq .. 8-byte id),
-- score = -priority, so ZPOPMIN pops the highest priority and, among equals, the
-- lowest seq; an ordering may keep more beside it (its rule's queued / unqueued:
-- lsf's site queues).

-- An unfetched node's a is its prior (0 without one), see prior_conf.
local function priority(ordering, r)
  local s = r.s
  if r.st == 0 then s = s + r.a end
  local rule = rule_of(ordering).priority
  if rule then return rule(r, s) end
  return s
end

-- Scrapy's Request.priority is the first key, the ordering's priority p the second:
-- a node of Scrapy priority 0 (nearly every one) is scored -p itself; one of priority
-- rp != 0 (r.rp, _records.lua) is scored -(rp * LEVEL + g(p)), g a monotone map of p
-- into (-LEVEL / 2, LEVEL / 2) that keeps a relative precision of about 1e-12 at any
-- magnitude. Level 0's own p must stay within +-LEVEL / 2 (2.1e9) to keep its place.
local LEVEL = 4294967296
local function level_score(rp, p)
  local g = math.log(1 + math.abs(p) * 1e12) * 1048576  -- < 7.8e8 for any double p
  if p < 0 then g = -g end
  return rp * LEVEL + g
end
-- The Scrapy priority of the frontier entry of ZSET score z.
local function level_of(z)
  return math.floor((-z + LEVEL / 2) / LEVEL)
end

-- ZSET score of a frontier entry, formatted with 17 significant digits: Lua's own
-- number-to-string keeps only 14, which would merge close scores (redis-server 6.2
-- formats a number argument of redis.call with 17 itself; the format here does not
-- depend on the server's version).
local function zscore(ordering, r)
  local p = priority(ordering, r)
  if r.rp then p = level_score(r.rp, p) end
  return string.format('%.17g', -p)
end

-- Put a queued node into the frontier (and, lsf, its site queue).
local function frontier_add(meta_key, frontier, ordering, r, m)
  redis.call('ZADD', frontier, zscore(ordering, r), m)
  local queued = rule_of(ordering).queued
  if queued then queued(meta_key, r, m) end
end

-- Take a node out of the frontier (and, lsf, its site queue); 1 if it was there.
local function frontier_remove(meta_key, frontier, ordering, r, m)
  local removed = redis.call('ZREM', frontier, m)
  local unqueued = rule_of(ordering).unqueued
  if unqueued and removed == 1 then unqueued(meta_key, r, m) end
  return removed
end

-- Orphans: queued nodes whose request payload was lost (Redis lost the writes: a
-- failover, an AOF loss), set aside by ack.lua's 'orphan' out of the frontier, in the
-- set `orphans` beside `node` (keys.py DERIVED_KEYS). adopt(...) gives orphan id (record
-- r) the payload a link or a request brings and puts it back into the frontier; 1 if
-- it did. One EXISTS per call while there are none.
local ORPHANS = {}
local function orphans_key() return derived_key('orphans') end
local function adopt(meta_key, node_key, req, frontier, ordering, id, r, payload)
  if payload == '' or r.st ~= 0 then return 0 end
  local key = orphans_key()
  if ORPHANS.any == nil then ORPHANS.any = redis.call('EXISTS', key) == 1 end
  if not ORPHANS.any or redis.call('SREM', key, id) == 0 then return 0 end
  redis.call('HSET', req, id, payload)
  frontier_add(meta_key, frontier, ordering, r, member_of(r, id))
  return 1
end
