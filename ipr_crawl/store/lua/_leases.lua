--! include _lease_keys.lua
--! include _forced.lua
-- Leases (`lease` ZSET: lease member -> time taken, ms), _lease_keys.lua.

-- Settle lease `m` (it no longer has a holder); 1 if it was in flight.
local function lease_settle(lease, m)
  redis.call('HDEL', lease_by_key(lease), m)
  return redis.call('ZREM', lease, m)
end

-- Settle the lease of a request that was fetched (or is being retried): a
-- forced-queue token's payload goes with it, unless the lease was no longer in
-- flight (a late record of a lease reclaimed and queued again: the queued token
-- keeps its payload). Returns lease_settle's answer.
local function lease_ack(lease, req, m)
  local settled = lease_settle(lease, m)
  if settled == 1 and is_token(m) then redis.call('HDEL', req, m) end
  return settled
end
