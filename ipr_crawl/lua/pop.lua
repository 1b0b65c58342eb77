-- pop: lease up to `count` requests: first move expired leases back, then take
-- the forced queue (FIFO), then the frontier (highest priority, then lowest seq).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] now (ms)  ARGV[3] lease deadline (ms)  ARGV[4] count
-- ARGV[5] cap on expired leases moved back in this call
-- Returns {expired moved back, member1, payload1, member2, payload2, ...}; a
-- payload is false when the request body is missing (the caller drops it).
-- Cost: O((count + cap) log F).
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
    if r and r.st == 0 then redis.call('ZADD', frontier, zscore(ordering, r), m) end
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
if taken < count then
  local popped = redis.call('ZPOPMIN', frontier, count - taken)
  for i = 1, #popped, 2 do
    local m = popped[i]
    redis.call('ZADD', lease, deadline, m)
    result[#result + 1] = m
    result[#result + 1] = redis.call('HGET', req, string.sub(m, 9))
  end
end
return result
