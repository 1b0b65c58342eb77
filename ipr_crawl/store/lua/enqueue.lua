-- enqueue: a request that did not come through record_page (start requests,
-- retries, requests of errbacks, dont_filter requests).
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] id (8 bytes)  ARGV[3] tie key  ARGV[4] payload
-- ARGV[5] '1' if dont_filter  ARGV[6] lease to acknowledge (a retry; _leases.lua lease_arg), or ''
-- ARGV[7] score of a new URL (its rule's start_score: opic, its initial cash; others 0)
-- A new URL joins the frontier (score 0, opic: its initial cash; a: its prior). A known URL
-- is a duplicate unless dont_filter, then it joins the forced queue (FIFO,
-- served before the frontier) under a token 'F' .. 8-byte counter.
-- Returns 1 (new), 2 (forced) or 0 (duplicate, dropped). Cost: O(log F).
--! include _records.lua
--! include _forced.lua
--! include _prior.lua
--! include _leases.lua
--! include _frontier.lua
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ordering, id, payload = ARGV[1], ARGV[2], ARGV[4]
local lease_member, holder = lease_arg(ARGV[6])
if lease_member ~= '' then lease_ack(lease, req, lease_member, holder) end
local r = rec_get(node, id)
if not r then
  r = new_record(meta, tonumber(ARGV[3]))
  r.s = tonumber(ARGV[7]) or 0
  r.a = prior_of(prior_conf(meta), id)
  rec_put(node, id, r)
  if payload ~= '' then redis.call('HSET', req, id, payload) end
  frontier_add(meta, frontier, ordering, r, member_of(r, id))
  return 1
end
if ARGV[5] == '1' then
  forced_add(meta, req, forced, payload)
  return 2
end
return 0
