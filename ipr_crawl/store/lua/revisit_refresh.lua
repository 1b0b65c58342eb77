-- revisit_refresh: the refresher (Tamura & Kitsuregawa 2008, §3 (6)): URLs whose due time has come move
-- from the due set into the forced queue (served before the frontier), as
-- enqueue.lua puts dont_filter requests there (token 'F' .. 8-byte counter).
-- A moved URL leaves `due` for `revisit_out` (scored by when it is due again if
-- its response never comes: a revisit lost with its process); revisit_record.lua
-- takes it out when the response schedules the next visit. Expired entries of
-- `revisit_out` go back to `due` first, due at once.
-- KEYS[1] meta  KEYS[2] req  KEYS[3] forced  KEYS[4] due  KEYS[5] revisit_req
-- KEYS[6] revisit_out
-- ARGV[1] cutoff: move URLs due at or before it (s since the epoch)
-- ARGV[2] cap on URLs moved (and on expired entries put back) by this call
-- ARGV[3] instant (s) a moved URL is due again if its response never comes
-- ARGV[4] now (s): entries of revisit_out older than this go back to `due`
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns {URLs moved, earliest instant (string) in due or revisit_out, or false}.
-- Cost: O(cap log D).
--! include _forced.lua
--! include _store_lost.lua
local meta, req, forced, due, revisit_req, out = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local cap = tonumber(ARGV[2])
local lost = redis.call('ZRANGEBYSCORE', out, '-inf', ARGV[4], 'LIMIT', 0, cap)
for _, id in ipairs(lost) do
  redis.call('ZREM', out, id)
  redis.call('ZADD', due, ARGV[4], id)
end
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', ARGV[1], 'LIMIT', 0, cap)
local moved = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', due, id)
  local payload = redis.call('HGET', revisit_req, id)
  if payload then  -- without a payload the URL cannot be revisited: dropped
    forced_add(meta, req, forced, payload)
    redis.call('ZADD', out, ARGV[3], id)
    moved = moved + 1
  end
end
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
local first_out = redis.call('ZRANGE', out, 0, 0, 'WITHSCORES')
local earliest = first[2]
if first_out[2] and (not earliest or tonumber(first_out[2]) < tonumber(earliest)) then
  earliest = first_out[2]
end
return {moved, earliest or false}
