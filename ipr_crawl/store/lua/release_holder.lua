-- release_holder: hand back the leases of one holder, or of every holder that is
-- not alive, or every lease (an operator's `ipr-crawl release-leases`; a crawler
-- closing hands back its own).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] the holders' time to live (ms: the outage gap of _clock.lua; '' none)
-- ARGV[3] 'holder': the holder ARGV[4] (which is then forgotten);
--         'dead': holders whose heartbeat is gone, and leases without a live holder;
--         'all': every lease in flight (every crawler of the crawl is stopped).
-- ARGV[5] IPR_MAX_RELEASES ('' none): 'dead' counts each lease it moves back (_reclaim.lua)
-- Returns {leases moved back, {holders forgotten}}. Cost: O(leases in flight).
--! include _reclaim.lua
--! include _lease_keys.lua
--! include _clock.lua
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ordering, mode = ARGV[1], ARGV[3]
DEAD.limit, DEAD.req = tonumber(ARGV[5] or ''), req
local holders = holders_key()
local now = string.format('%.0f', clock_now(meta, holders, tonumber(ARGV[2])))
local forgotten = {}
local dead = {}
local alive = {}
if mode == 'holder' then
  dead[ARGV[4]] = true
  forgotten[1] = ARGV[4]
else
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '(' .. now, '+inf')) do alive[h] = true end
  for _, h in ipairs(redis.call('ZRANGE', holders, 0, -1)) do
    if mode == 'all' or not alive[h] then dead[h] = true; forgotten[#forgotten + 1] = h end
  end
end
local n = reclaim_holders(meta, node, frontier, lease, forced, ordering, dead, mode == 'dead')
if mode ~= 'holder' then
  -- leases without a holder entry (schema 3, or a holder already forgotten), or all
  local by = lease_by_key()
  for _, m in ipairs(redis.call('ZRANGE', lease, 0, -1)) do
    local h = holder_of(redis.call('HGET', by, m))
    if mode == 'all' or not h or not alive[h] then
      n = n + lease_requeue(meta, node, frontier, lease, forced, ordering, m, mode == 'dead')
    end
  end
end
return {n, forgotten}
