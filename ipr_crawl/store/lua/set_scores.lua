-- set_scores: overwrite the score of given nodes and re-score their frontier
-- entries in place (the periodic PageRank step of the `pr` ordering, computed
-- in Python; Yamada et al. 2004 §4.2 "PR").
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4..] store/keys.py DERIVED_KEYS (rprio: _records.lua)
-- ARGV[1] ordering  ARGV[2k], ARGV[2k+1]: node id (8 bytes), new score (17 digits)
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns the number of frontier entries whose score changed. Cost: O(k log F).
--! include _records.lua
--! include _frontier.lua
--! include _store_lost.lua
local meta, node, frontier = KEYS[1], KEYS[2], KEYS[3]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local ordering = ARGV[1]
local changed = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local r = rec_get(node, id)
  if r then
    r.s = tonumber(ARGV[i + 1])
    rec_put(node, id, r)
    if r.st == 0 then
      changed = changed + redis.call('ZADD', frontier, 'XX', 'CH', zscore(ordering, r), member_of(r, id))
    end
  end
end
return changed
