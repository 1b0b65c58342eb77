--! include _sites.lua
-- The frontier: ZSET of member_of(record, id) (8-byte big-endian seq .. 8-byte id),
-- score = -priority, so ZPOPMIN pops the highest priority and, among equals, the
-- lowest seq; lsf adds its site queues (_sites.lua).

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
