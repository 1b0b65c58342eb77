-- Keys beside `lease` (same hash tag, store/keys.py): `lease_by` (member -> holder id),
-- `lease_since` (member -> when an extended lease was first taken, ms), `holders` (holder ->
-- heartbeat deadline, ms); given in KEYS too, after a script's own (keys.py DERIVED_KEYS).
local function lease_by_key(lease) return lease .. '_by' end
local function lease_since_key(lease) return lease .. '_since' end
local function holders_key(lease) return string.sub(lease, 1, -6) .. 'holders' end
-- `releases` (node id or token -> times its lease went back: holder lost, lease expired) and
-- `dead_letter` (member -> payload of a request handed out again too often: _reclaim.lua)
local function releases_key(lease) return string.sub(lease, 1, -6) .. 'releases' end
local function dead_letter_key(lease) return string.sub(lease, 1, -6) .. 'dead_letter' end
