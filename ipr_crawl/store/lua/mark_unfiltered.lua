-- mark_unfiltered: node ARGV[1] was brought by a dont_filter redirect and recorded as new
-- (record_page.lua): it joins `unfiltered` (enqueue.lua says why).
-- KEYS[1] meta  KEYS[2] unfiltered
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns SADD's answer (1: added). Cost: O(1).
--! include _store_lost.lua
local lost_store = store_lost(KEYS[1])
if lost_store then return lost_store end
return redis.call('SADD', KEYS[2], ARGV[1])
