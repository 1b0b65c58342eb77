--! include _derived_keys.lua
-- Keys beside `lease` (same hash tag, store/keys.py), from KEYS (keys.py DERIVED_KEYS, after
-- a script's own): `lease_by` (member -> '<holder id>#<take>': the holder and the pop call
-- that took it, pop.lua; a lease taken by an earlier release: the holder id alone), `lease_since` (member -> when an
-- extended lease was first taken, ms), `holders` (holder -> heartbeat deadline, ms) and
-- `holders_info` (holder -> its JSON info).
local function lease_by_key() return derived_key('lease_by') end
local function lease_since_key() return derived_key('lease_since') end
local function holders_key() return derived_key('holders') end
local function holders_info_key() return derived_key('holders_info') end
-- `releases` (node id or token -> times its lease went back: holder lost, lease expired) and
-- `dead_letter` (member -> payload of a request handed out again too often: _reclaim.lua)
local function releases_key() return derived_key('releases') end
local function dead_letter_key() return derived_key('dead_letter') end
-- The holder id of a `lease_by` value (nil for nil).
local function holder_of(v) return v and (string.match(v, '^(.*)#%d+$') or v) end
