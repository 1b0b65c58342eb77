-- dead_return: put the dead-lettered requests back (an operator's `ipr-crawl
-- release-leases --dead`, once what crashed the crawlers is fixed): a forced-queue token
-- to the forced queue at its own place, a URL settled as failed by the limit queued again.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns the number put back. Cost: O(D log F), D requests dead-lettered.
--! include _records.lua
--! include _lease_keys.lua
--! include _forced.lua
--! include _frontier.lua
--! include _store_lost.lua
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local ordering = ARGV[1]
local letters = dead_letter_key()
local all = redis.call('HGETALL', letters)
local n = 0
for i = 1, #all, 2 do
  local m, payload = all[i], all[i + 1]
  if is_token(m) then
    if payload ~= '' then
      redis.call('HSET', req, m, payload)
      forced_return(forced, m)
      n = n + 1
    end
  else
    local id = string.sub(m, 9)
    local r = rec_get(node, id)
    if r and r.st == 3 and payload ~= '' then
      r.st = 0
      rec_put(node, id, r)
      redis.call('HSET', req, id, payload)
      frontier_add(meta, frontier, ordering, r, m)
      redis.call('HINCRBY', meta, 'failed', -1)
      n = n + 1
    end
  end
  redis.call('HDEL', letters, m)
end
return n
