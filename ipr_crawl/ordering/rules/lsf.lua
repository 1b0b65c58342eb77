--! include _rules.lua
-- larger-sites-first ('lsf' in Redis), twin: lsf.py. Priority 0: the frontier ZSET
-- (score 0) is the set of queued members; pops go by the `sites` ZSET (score =
-- -pending URLs of the site) and one seq-ordered ZSET per site, keys
-- `ipr:{crawl}:site:<hash>` (the record's tie is the site hash).
local function site_name(r) return string.format('%.0f', r.tie) end
local function site_key(meta_key, site) return string.sub(meta_key, 1, -5) .. 'site:' .. site end
local function sites_key(meta_key) return string.sub(meta_key, 1, -5) .. 'sites' end

RULES.lsf = {rescore = false}
function RULES.lsf.priority() return 0 end

-- r (member m) joined the frontier: its site queue too
function RULES.lsf.queued(meta_key, r, m)
  local site = site_name(r)
  if redis.call('ZADD', site_key(meta_key, site), r.seq, m) == 1 then
    redis.call('ZINCRBY', sites_key(meta_key), -1, site)
  end
end

-- r (member m) left the frontier: its site queue too
function RULES.lsf.unqueued(meta_key, r, m)
  local site = site_name(r)
  if redis.call('ZREM', site_key(meta_key, site), m) == 1 then
    if tonumber(redis.call('ZINCRBY', sites_key(meta_key), 1, site)) >= 0 then
      redis.call('ZREM', sites_key(meta_key), site)
    end
  end
end

-- Take the next member of the site with most queued URLs (lowest seq in it) out of
-- its site queue and the frontier. nil: no site left; false: the top site's queue
-- was empty (it is dropped; ask again).
function RULES.lsf.pop(meta, frontier)
  local sites = sites_key(meta)
  local top = redis.call('ZRANGE', sites, 0, 0)
  if #top == 0 then return nil end
  local popped = redis.call('ZPOPMIN', site_key(meta, top[1]), 1)
  if #popped == 0 or tonumber(redis.call('ZINCRBY', sites, 1, top[1])) >= 0 then
    redis.call('ZREM', sites, top[1])
  end
  if #popped == 0 then return false end
  redis.call('ZREM', frontier, popped[1])
  return popped[1]
end
