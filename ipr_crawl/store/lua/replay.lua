-- replay: the frontier driven over a graph held in Redis, for `ipr-crawl
-- simulate` and the benchmarks: up to `count` times, pop the best URL (as
-- pop.lua, without a lease: nothing is in flight in a replay), read its
-- out-links from the `graph` hash instead of fetching it, and record it with
-- the same rule as record_page.lua (the shared `record` function). Records
-- are cached across the pages of one call and written back once at the end.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req
-- KEYS[6] graph (node id -> 8-byte double own tie .. n x (8-byte id,
--   8-byte double tie), links in numbering order)
-- KEYS[7] forced  KEYS[8] unfiltered  KEYS[9] imported_seen  KEYS[10] order
-- ARGV[1..12] ordering parameters as record_page.lua ARGV[1..12]  ARGV[13] count
-- Returns {pages recorded first, propagation updates, propagation drops, id1, id2, ...}
-- (ids in fetch order). Cost: O(count * (outdegree + cap) log F).
--! include _record.lua
--! include _orderings.lua
--! include _graph.lua
--! include _ordering_args.lua
local K = {meta = KEYS[1], node = KEYS[2], frontier = KEYS[3], lease = KEYS[4], req = KEYS[5],
  forced = KEYS[7], unfiltered = KEYS[8], imported_seen = KEYS[9], order = KEYS[10]}
local graph = KEYS[6]
local P = params_from(ARGV, 1)
local count = tonumber(ARGV[N_ORDERING_ARGS + 1])
local result = {0, 0, 0}
local shared = {cache = {}, dirty = {}}
local rule = rule_of(P.ordering)
for _ = 1, count do
  local m
  if rule.pop then
    m = rule.pop(K.meta, K.frontier)
    if m == nil then break end
  else
    local popped = redis.call('ZPOPMIN', K.frontier, 1)
    if #popped == 0 then break end
    m = popped[1]
  end
  if m then
    local pid = string.sub(m, 9)
    local ptie, n, lids, lties, lpay = graph_page(graph, pid)
    local _, first, _, updates, dropped = record(K, P, '', pid, ptie, n, lids, lties, lpay, shared)
    if first then result[1] = result[1] + 1 end
    result[2] = result[2] + updates
    result[3] = result[3] + dropped
    result[#result + 1] = pid
  end
end
flush_records(K.node, shared)
return result
