-- Keys beside `lease` (same hash tag, store/keys.py): `lease_by` (member -> holder id),
-- `lease_since` (member -> when an extended lease was first taken, ms), `holders` (holder ->
-- heartbeat deadline, ms); given in KEYS too, after a script's own (keys.py DERIVED_KEYS).
local function lease_by_key(lease) return lease .. '_by' end
local function lease_since_key(lease) return lease .. '_since' end
local function holders_key(lease) return string.sub(lease, 1, -6) .. 'holders' end
