--! include _records.lua
--! include _lease_keys.lua
--! include _forced.lua
--! include _leases.lua
--! include _frontier.lua
-- The dead-letter limit (IPR_MAX_RELEASES): set by the script before it reclaims.
-- limit: how often a lease may go back for a lost holder or its age (nil: no limit); req:
-- the payloads; n: requests dead-lettered by this call (BullMQ's maxStalledCount).
local DEAD = {limit = nil, req = nil, n = 0}

-- Settle request `m` as failed for good, its payload kept in `dead_letter` for an
-- operator to put back (release-leases --dead): handed out more than DEAD.limit times,
-- each time lost with its holder (a page that crashes every crawler that fetches it).
local function to_dead_letter(meta, node, frontier, lease, ordering, m)
  local key = is_token(m) and m or string.sub(m, 9)
  redis.call('HSET', dead_letter_key(), m, redis.call('HGET', DEAD.req, key) or '')
  redis.call('HDEL', DEAD.req, key)
  redis.call('HDEL', releases_key(), key)
  if not is_token(m) then
    local r = rec_get(node, key)
    if r and r.st == 0 then
      r.st = 3
      rec_put(node, key, r)
      frontier_remove(meta, frontier, ordering, r, m)
      rprio_del(node, key, r)
      redis.call('HINCRBY', meta, 'failed', 1)
    end
  end
  redis.call('HINCRBY', meta, 'dead_lettered', 1)
  DEAD.n = DEAD.n + 1
end

-- A lease that will not be settled by its holder goes back: a forced-queue token
-- to the forced queue (at its own place), a node still unfetched to the frontier;
-- `counted` (a lost holder, an expired lease: not a hand-back) and past DEAD.limit: failed.
local function lease_requeue(meta, node, frontier, lease, forced, ordering, m, counted)
  if not lease_holds(lease, m) then return 0 end
  if counted and DEAD.limit then
    local key = is_token(m) and m or string.sub(m, 9)
    if redis.call('HINCRBY', releases_key(), key, 1) > DEAD.limit then
      to_dead_letter(meta, node, frontier, lease, ordering, m)
      lease_settle(lease, m)
      return 0
    end
  end
  if is_token(m) then
    forced_return(forced, m)
  else
    local id = string.sub(m, 9)
    local r = rec_get(node, id)
    if r and r.st == 0 then frontier_add(meta, frontier, ordering, r, m) end
  end
  return lease_settle(lease, m)  -- last: a call that fails before leaves it leased
end

-- Hand back every lease of the holders in `dead` (a set: holder id -> true) and
-- forget those holders (`counted`: lost, not closing: lease_requeue). Cost: O(leases in
-- flight), paid once per holder lost.
local function reclaim_holders(meta, node, frontier, lease, forced, ordering, dead, counted)
  local by = redis.call('HGETALL', lease_by_key())
  local n = 0
  for i = 1, #by, 2 do
    if dead[holder_of(by[i + 1])] then n = n + lease_requeue(meta, node, frontier, lease, forced, ordering, by[i], counted) end
  end
  local holders = holders_key()
  for h, _ in pairs(dead) do
    redis.call('ZREM', holders, h)
    redis.call('HDEL', holders_info_key(), h)
  end
  return n
end
