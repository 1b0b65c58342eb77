-- pop: lease up to `count` requests: first move expired leases back, then take
-- the forced queue (FIFO), then the frontier (highest priority, then lowest seq;
-- lsf: the site with most queued URLs, then lowest seq in it).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] now (ms)  ARGV[3] lease deadline (ms)  ARGV[4] count
-- ARGV[5] cap on expired leases moved back in this call
-- Returns {expired moved back, member1, payload1, member2, payload2, ...}; a
-- payload is false when no request body is stored (a replay, or lost: the
-- caller decides). Cost: O((count + cap) log F).
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ordering = ARGV[1]
local deadline = tonumber(ARGV[3])
local count = tonumber(ARGV[4])

local expired = redis.call('ZRANGEBYSCORE', lease, '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[5]))
for _, m in ipairs(expired) do
  redis.call('ZREM', lease, m)
  if is_token(m) then
    local hi, lo = struct.unpack('>I4I4', string.sub(m, 2))
    redis.call('ZADD', forced, hi * TWO32 + lo, m)
  else
    local id = string.sub(m, 9)
    local r = rec_get(node, id)
    if r and r.st == 0 then frontier_add(meta, frontier, ordering, r, m) end
  end
end

local result = {#expired}
local taken = 0
if count > 0 then
  local tokens = redis.call('ZRANGE', forced, 0, count - 1)
  for _, m in ipairs(tokens) do
    redis.call('ZREM', forced, m)
    redis.call('ZADD', lease, deadline, m)
    result[#result + 1] = m
    result[#result + 1] = redis.call('HGET', req, m)
    taken = taken + 1
  end
end
local function lease_it(m)
  redis.call('ZADD', lease, deadline, m)
  result[#result + 1] = m
  result[#result + 1] = redis.call('HGET', req, string.sub(m, 9))
  taken = taken + 1
end
if ordering == 'lsf' then
  local sites = sites_key(meta)
  while taken < count do
    local top = redis.call('ZRANGE', sites, 0, 0)
    if #top == 0 then break end
    local skey = site_key(meta, top[1])
    local popped = redis.call('ZPOPMIN', skey, 1)
    if #popped == 0 or tonumber(redis.call('ZINCRBY', sites, 1, top[1])) >= 0 then
      redis.call('ZREM', sites, top[1])
    end
    if #popped > 0 then
      redis.call('ZREM', frontier, popped[1])
      lease_it(popped[1])
    end
  end
elseif taken < count then
  local popped = redis.call('ZPOPMIN', frontier, count - taken)
  for i = 1, #popped, 2 do lease_it(popped[i]) end
end
return result
