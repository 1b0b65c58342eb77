-- Keys beside `lease` (same hash tag): `lease_by` (lease member -> holder id),
-- `lease_since` (lease member -> when an extended lease was first taken, ms) and
-- `holders` (holder id -> heartbeat deadline, ms), store/keys.py.
local function lease_by_key(lease) return lease .. '_by' end
local function lease_since_key(lease) return lease .. '_since' end
local function holders_key(lease) return string.sub(lease, 1, -6) .. 'holders' end
