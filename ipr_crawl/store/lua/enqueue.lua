-- enqueue: a request that did not come through record_page (start requests,
-- retries, requests of errbacks, dont_filter requests).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- KEYS[7] unfiltered  KEYS[8] imported_seen  KEYS[9..] store/keys.py DERIVED_KEYS, then (optional,
--   dont_filter, ARGV[9] > 0) the last key: enq:<op>, this call's
--   id; a call sent again (its reply lost) finds it and queues nothing more
-- ARGV[1] ordering  ARGV[2] id (8 bytes)  ARGV[3] tie key  ARGV[4] payload
-- ARGV[5] '1' dont_filter, 's' a start request of a crawl other processes share (dont_filter,
--   but a known URL is a duplicate: fetched once for the crawl), '0' filtered
-- ARGV[6] lease to acknowledge (a retry; _leases.lua lease_arg), or ''
-- ARGV[7] score of a new URL (its rule's start_score: opic, its initial cash; others 0)
-- ARGV[8] (optional) scrapy-redis's fingerprint of a filtered request, in a crawl carried over
--   from scrapy-redis: a new URL its duplicate filter saw is recorded as fetched and dropped
-- ARGV[9] how long enq:<op> lives (ms; 0: no such key)  ARGV[10] (optional) Scrapy's Request.priority of a
--   dont_filter request (a retry's carries RETRY_PRIORITY_ADJUST): its place in the forced queue
-- A new URL joins the frontier (score 0, opic: its initial cash; a: its prior); one a
-- dont_filter request brought joins `unfiltered` too. A known URL is a duplicate unless
-- dont_filter, then it joins the forced queue (by priority, then FIFO; _forced.lua) under a
-- token 'F' .. 8-byte key. Scrapy's duplicate rule: a dont_filter request never enters
-- the duplicate filter, so the first filtered request for a URL only dont_filter requests
-- brought is fetched (forced queue) and takes the URL out of `unfiltered`
-- (_records.lua unfiltered_hit).
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns 1 (new), 2 (forced) or 0 (duplicate, dropped). Cost: O(log F).
--! include _records.lua
--! include _forced.lua
--! include _dupes.lua
--! include _prior.lua
--! include _leases.lua
--! include _frontier.lua
--! include _store_lost.lua
local meta, node, frontier, lease, req, forced, unfiltered = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local ordering, id, payload = ARGV[1], ARGV[2], ARGV[4]
local lease_member, holder = lease_arg(ARGV[6])
-- the settled lease (a retry's) last: a call that fails before it leaves it leased
local function settled(v)
  if lease_member ~= '' then lease_ack(lease, req, lease_member, holder) end
  return v
end
local r = rec_get(node, id)
if not r and imported_hit(KEYS[8], ARGV[8]) then
  r = new_record(meta, tonumber(ARGV[3]))
  r.st = 2
  rec_put(node, id, r)
  return settled(0)
end
if not r then
  r = new_record(meta, tonumber(ARGV[3]))
  r.s = tonumber(ARGV[7]) or 0
  r.a = prior_of(prior_conf(meta), id)
  rec_put(node, id, r)
  if payload ~= '' then redis.call('HSET', req, id, payload) end
  rprio_set(node, id, r, ARGV[10])
  frontier_add(meta, frontier, ordering, r, member_of(r, id))
  if ARGV[5] ~= '0' then redis.call('SADD', unfiltered, id) end
  return settled(1)
end
-- a queued URL whose request was lost (_frontier.lua adopt) takes this one: queued again
if ARGV[5] ~= '1' and adopt(meta, node, req, frontier, ordering, id, r, payload) == 1 then return settled(1) end
if ARGV[5] == '1' and ARGV[9] ~= '0' and not redis.call('SET', KEYS[#KEYS], '1', 'PX', ARGV[9], 'NX') then
  return settled(2)  -- applied before (a call sent again)
end
if ARGV[5] == '1' or (ARGV[5] == '0' and unfiltered_hit(unfiltered, id, payload)) then
  forced_add(meta, req, forced, payload, ARGV[10])
  return settled(2)
end
return settled(0)
