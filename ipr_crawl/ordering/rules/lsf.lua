--! include _derived_keys.lua
--! include _rules.lua
-- larger-sites-first ('lsf' in Redis), twin: lsf.py. Priority 0: the frontier ZSET
-- (score 0) is the set of queued members; pops go by the `sites` ZSET (site hash ->
-- -pending URLs of the site) and the site queues, one ZSET `siteq` of members
-- 8-byte site hash .. frontier member, all scored 0: ordered by site, then by seq
-- (the record's tie is the site hash). Both keys are given in KEYS (keys.py DERIVED_KEYS).
local function site_name(r) return string.format('%.0f', r.tie) end
local function site8(name)  -- big-endian, as seq8 (the hash has 52 bits)
  local n = tonumber(name)
  return struct.pack('>I4I4', math.floor(n / 4294967296), n % 4294967296)
end
local function sites_key() return derived_key('sites') end
local function siteq_key() return derived_key('siteq') end

RULES.lsf = {rescore = false}
function RULES.lsf.priority() return 0 end

-- r (member m) joined the frontier: its site queue too
function RULES.lsf.queued(meta_key, r, m)
  local site = site_name(r)
  if redis.call('ZADD', siteq_key(), 0, site8(site) .. m) == 1 then
    redis.call('ZINCRBY', sites_key(), -1, site)
  end
end

-- r (member m) left the frontier: its site queue too
function RULES.lsf.unqueued(meta_key, r, m)
  local site = site_name(r)
  if redis.call('ZREM', siteq_key(), site8(site) .. m) == 1 then
    if tonumber(redis.call('ZINCRBY', sites_key(), 1, site)) >= 0 then
      redis.call('ZREM', sites_key(), site)
    end
  end
end

-- Take the next member of the site with most queued URLs (lowest seq in it) out of
-- its site queue and the frontier. nil: no site left; false: the top site's queue
-- was empty (it is dropped; ask again).
function RULES.lsf.pop(meta, frontier)
  local sites, siteq = sites_key(), siteq_key()
  local top = redis.call('ZRANGE', sites, 0, 0)
  if #top == 0 then return nil end
  local s8 = site8(top[1])
  -- the site's first member: the smallest above s8 itself and below s8 .. 17 x 0xff
  local first = redis.call('ZRANGEBYLEX', siteq, '(' .. s8, '(' .. s8 .. string.rep('\255', 17), 'LIMIT', 0, 1)
  if #first == 1 then redis.call('ZREM', siteq, first[1]) end
  if #first == 0 or tonumber(redis.call('ZINCRBY', sites, 1, top[1])) >= 0 then
    redis.call('ZREM', sites, top[1])
  end
  if #first == 0 then return false end
  local m = string.sub(first[1], 9)
  redis.call('ZREM', frontier, m)
  return m
end
