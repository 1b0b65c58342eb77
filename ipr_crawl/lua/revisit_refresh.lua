-- revisit_refresh: the refresher (001 §3 (6)): URLs whose due time has come move
-- from the due set into the forced queue (served before the frontier), as
-- enqueue.lua puts dont_filter requests there (token 'F' .. 8-byte counter).
-- A moved URL stays in the due set, re-scored to ARGV[3], until the response
-- schedules its next visit: a revisit lost with its process is retried then.
-- KEYS[1] meta  KEYS[2] req  KEYS[3] forced  KEYS[4] due  KEYS[5] revisit_req
-- ARGV[1] now (s since the epoch)  ARGV[2] cap on URLs moved by this call
-- ARGV[3] instant (s) a moved URL is due again if its response never comes
-- Returns {URLs moved, earliest due instant left (string) or false}.
-- Cost: O(cap log D).
local meta, req, forced, due, revisit_req = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local TWO32 = 4294967296
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, id in ipairs(ids) do
  local payload = redis.call('HGET', revisit_req, id)
  if payload then
    local fseq = redis.call('HINCRBY', meta, 'forced_seq', 1)
    local token = 'F' .. struct.pack('>I4I4', math.floor(fseq / TWO32), fseq % TWO32)
    redis.call('HSET', req, token, payload)
    redis.call('ZADD', forced, fseq, token)
    redis.call('ZADD', due, ARGV[3], id)
    moved = moved + 1
  else
    redis.call('ZREM', due, id)  -- nothing to send: the URL cannot be revisited
  end
end
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
return {moved, first[2] or false}
