--! include _seq.lua
-- The forced queue (`forced` ZSET): dont_filter requests, retries, due revisits, each under
-- a token 'F' .. 8-byte key owning its payload in `req`; key = score = (2048 - Scrapy's priority)
-- * 2^40 + forced_seq (bucket b: its bits 32-39 = b + 1). From FORCED_LATE (priority < 0) pop.lua serves them after the frontier. A lease member: a node member (16 B) or a token (9 B).
local function is_token(m) return #m == 9 end
local TWO40, FORCED_LATE = 1099511627776, 2049 * 1099511627776

-- Queue `payload` under a new token, at Scrapy priority `prio` (nil: 0).
local function forced_add(meta, req, forced, payload, prio)
  local key = (2048 - (tonumber(prio) or 0)) * TWO40 + redis.call('HINCRBY', meta, 'forced_seq', 1)
  local token = 'F' .. seq8(key)
  redis.call('HSET', req, token, payload)
  redis.call('ZADD', forced, string.format('%.0f', key), token)
end

-- Put a token taken from the queue back at its own place.
local function forced_return(forced, m)
  local hi, lo = struct.unpack('>I4I4', string.sub(m, 2))
  redis.call('ZADD', forced, hi * TWO32 + lo, m)
end
