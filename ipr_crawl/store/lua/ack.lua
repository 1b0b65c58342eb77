-- ack: settle a lease without recording a page: a final download failure
-- ('fail': the URL is marked failed and not retried) or a request the scheduler
-- hands back unsent ('release': the member returns to the forced queue or frontier),
-- or one whose payload was lost ('orphan': the node waits out of the frontier, in
-- `orphans`, for a link or a request to bring it again: _frontier.lua adopt).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] 'fail' | 'release' | 'orphan'
-- ARGV[3 + 2k], ARGV[4 + 2k]: lease k (_leases.lua lease_arg: a lease another holder
--   took since is left alone) and the id of the node it fetches
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns the number of leases settled. Cost: O(k log F).
--! include _records.lua
--! include _lease_keys.lua
--! include _forced.lua
--! include _leases.lua
--! include _frontier.lua
--! include _store_lost.lua
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local ordering, mode = ARGV[1], ARGV[2]
local settled = 0
for i = 3, #ARGV, 2 do
  local m, holder = lease_arg(ARGV[i])
  local id = ARGV[i + 1]
  if lease_holds(lease, m, holder) then  -- settled after what it changes
    settled = settled + 1
    if is_token(m) then
      if mode == 'release' then
        forced_return(forced, m)
      else
        redis.call('HDEL', req, m)
      end
    else
      local r = rec_get(node, id)
      if r and r.st == 0 and mode == 'release' then
        frontier_add(meta, frontier, ordering, r, m)
      elseif r and r.st == 0 and mode == 'orphan' and redis.call('HEXISTS', req, id) == 0 then
        frontier_remove(meta, frontier, ordering, r, m)
        redis.call('SADD', orphans_key(), id)
        redis.call('HINCRBY', meta, 'orphaned', 1)
      end
    end
    if mode == 'fail' then
      local r = rec_get(node, id)
      if r and r.st == 0 then
        r.st = 3
        rec_put(node, id, r)
        frontier_remove(meta, frontier, ordering, r, member_of(r, id))
        rprio_del(node, id, r)
        redis.call('HDEL', req, id)
        redis.call('HINCRBY', meta, 'failed', 1)
      end
      redis.call('HDEL', releases_key(), is_token(m) and m or id)
    end
    lease_settle(lease, m, holder)
  end
end
return settled
