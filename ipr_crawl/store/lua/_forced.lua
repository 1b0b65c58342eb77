--! include _seq.lua
-- The forced queue (`forced` ZSET, score = forced_seq; served before the frontier,
-- FIFO): dont_filter requests (enqueue.lua) and due revisits (revisit_refresh.lua),
-- each under a token 'F' .. 8-byte forced_seq that owns its payload in `req`.
-- A lease member is a node member (16 bytes) or a token (9 bytes).
local function is_token(m) return #m == 9 end

-- Queue `payload` under a new token.
local function forced_add(meta, req, forced, payload)
  local fseq = redis.call('HINCRBY', meta, 'forced_seq', 1)
  local token = 'F' .. seq8(fseq)
  redis.call('HSET', req, token, payload)
  redis.call('ZADD', forced, fseq, token)
end

-- Put a token taken from the queue back at its own place.
local function forced_return(forced, m)
  local hi, lo = struct.unpack('>I4I4', string.sub(m, 2))
  redis.call('ZADD', forced, hi * TWO32 + lo, m)
end
