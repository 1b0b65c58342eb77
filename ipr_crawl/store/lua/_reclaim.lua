--! include _records.lua
--! include _lease_keys.lua
--! include _forced.lua
--! include _leases.lua
--! include _frontier.lua
-- A lease that will not be settled by its holder goes back: a forced-queue token
-- to the forced queue (at its own place), a node still unfetched to the frontier.
local function lease_requeue(meta, node, frontier, lease, forced, ordering, m)
  if not lease_holds(lease, m) then return 0 end
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
-- forget those holders. Cost: O(leases in flight), paid once per holder lost.
local function reclaim_holders(meta, node, frontier, lease, forced, ordering, dead)
  local by = redis.call('HGETALL', lease_by_key(lease))
  local n = 0
  for i = 1, #by, 2 do
    if dead[by[i + 1]] then n = n + lease_requeue(meta, node, frontier, lease, forced, ordering, by[i]) end
  end
  local holders = holders_key(lease)
  for h, _ in pairs(dead) do
    redis.call('ZREM', holders, h)
    redis.call('HDEL', holders .. '_info', h)
  end
  return n
end
