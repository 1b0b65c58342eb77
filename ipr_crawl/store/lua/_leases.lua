--! include _lease_keys.lua
--! include _forced.lua
-- Leases (`lease` ZSET: lease member -> time taken, ms), _lease_keys.lua.

-- A lease as a settling call names it (store/settling.py, settle_arg): '' (none), or
-- one byte (the member's length), the member, then the caller's holder id ('' none) and,
-- for a lease the caller saw taken, '#' and the take (pop.lua): the settle names one take.
-- Returns member, holder.
local function lease_arg(a)
  if a == '' then return '', '' end
  local n = string.byte(a, 1)
  return string.sub(a, 2, n + 1), string.sub(a, n + 2)
end

-- Whether `lease_by` value `h` is the lease a settle names as `holder`: the same holder
-- and, when both name a take, the same take (a settle sent again, by redis-py or after a
-- reconnect, of an earlier take of the same member by the same holder settles nothing).
local function same_take(h, holder)
  if h == holder then return true end
  local named = string.find(holder, '#', 1, true) and string.find(h, '#', 1, true)
  return not named and holder_of(h) == holder_of(holder)
end

-- Whether lease `m` is in flight and `holder`'s (nil or '': anyone's): a settling call
-- checks with it, writes what the settling changes, and settles the lease last.
local function lease_holds(lease, m, holder)
  local h = holder and holder ~= '' and redis.call('HGET', lease_by_key(), m)
  return (not h or same_take(h, holder)) and redis.call('ZSCORE', lease, m) ~= false
end

-- Settle lease `m` (it no longer has a holder); 1 if it was in flight. `holder` (the
-- settling caller's id; nil or '': anyone, a reclaim): a lease another holder took
-- since (reclaimed, then leased again) is that holder's, and is left alone (0).
local function lease_settle(lease, m, holder)
  local by = lease_by_key()
  local h = holder and holder ~= '' and redis.call('HGET', by, m)
  if h and not same_take(h, holder) then return 0 end
  redis.call('HDEL', by, m)
  redis.call('HDEL', lease_since_key(), m)
  return redis.call('ZREM', lease, m)
end

-- Settle the lease of a request that was fetched (or is being retried): a
-- forced-queue token's payload goes with it, unless the lease was no longer in
-- flight (a late record of a lease reclaimed and queued again: the queued token
-- keeps its payload). Returns lease_settle's answer.
local function lease_ack(lease, req, m, holder)
  local settled = lease_settle(lease, m, holder)
  if settled == 1 and is_token(m) then redis.call('HDEL', req, m) end
  if settled == 1 then redis.call('HDEL', releases_key(), is_token(m) and m or string.sub(m, 9)) end
  return settled
end
