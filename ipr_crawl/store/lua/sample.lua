-- sample: at most one sample of the crawl's counts per interval, whichever process
-- asks first, appended to the `timeline` stream (capped): the report's curves and
-- the status command's pages/s.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] forced
-- KEYS[6] due (revisits)  KEYS[7] timeline
-- ARGV[1] unused (0; the time is Redis's, _clock.lua)  ARGV[2] interval (ms)  ARGV[3] approximate cap of the stream (XADD MAXLEN ~)
-- Returns 1 if a sample was written, else 0 (and 0, nothing written, when the crawl's meta
-- is gone: _store_lost.lua; the calls that change the crawl say so). Cost: O(log H) (H: holders).
--! include _lease_keys.lua
--! include _clock.lua
--! include _store_lost.lua
local meta = KEYS[1]
if store_lost(meta) then return 0 end
local now = clock_now(meta, holders_key())
local now_s = string.format('%.0f', now)
local last = tonumber(redis.call('HGET', meta, 'sampled_at') or '0') or 0
if now - last < tonumber(ARGV[2]) then return 0 end
redis.call('HSET', meta, 'sampled_at', now_s)
local c = redis.call('HMGET', meta, 'fetched', 'failed')
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[3], '*',
  't', now_s, 'fetched', c[1] or '0', 'failed', c[2] or '0',
  'known', redis.call('HLEN', KEYS[2]), 'frontier', redis.call('ZCARD', KEYS[3]),
  'forced', redis.call('ZCARD', KEYS[5]), 'in_flight', redis.call('ZCARD', KEYS[4]),
  'holders', redis.call('ZCOUNT', holders_key(), '(' .. now_s, '+inf'),
  'due', redis.call('ZCARD', KEYS[6]))
return 1
