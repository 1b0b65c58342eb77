-- beat: renew a holder's heartbeat deadline on Redis's clock (_clock.lua).
-- KEYS[1] meta  KEYS[2] holders  KEYS[3] holders_info
-- ARGV[1] holder id  ARGV[2] its time to live (ms: 2 x IPR_HEARTBEAT_SECS)
-- ARGV[3] '1': renew only (a holder not registered stays so: a beat that lands after its
--   release at close does not bring it back)  ARGV[4] its info (JSON; '' none: kept)
-- Returns 1 if the holder was registered before this beat, else 0. Cost: O(log H).
--! include _clock.lua
local meta, holders, ttl = KEYS[1], KEYS[2], tonumber(ARGV[2])
local now = clock_now(meta, holders, ttl)
local was = redis.call('ZSCORE', holders, ARGV[1]) ~= false
if was or ARGV[3] ~= '1' then
  redis.call('ZADD', holders, string.format('%.0f', now + ttl), ARGV[1])
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], ARGV[1], ARGV[4]) end
end
return was and 1 or 0
