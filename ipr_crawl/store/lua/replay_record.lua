-- replay_record: record the given pages, in the given order, from the `graph`
-- hash (no pops): the link-extension part of priority determination when run
-- under the `bf` ordering (Yamada et al. 2004, Fig. 10), timed by `ipr-crawl simulate`.
-- KEYS as replay.lua; ARGV[1..12] ordering parameters; ARGV[13..] page ids.
-- Returns the number of pages recorded. Cost: O(sum of out-degrees).
--! include _record.lua
--! include _graph.lua
--! include _ordering_args.lua
local K = {meta = KEYS[1], node = KEYS[2], frontier = KEYS[3], lease = KEYS[4], req = KEYS[5],
  forced = KEYS[7], unfiltered = KEYS[8], imported_seen = KEYS[9], order = KEYS[10]}
local graph = KEYS[6]
local P = params_from(ARGV, 1)
for i = N_ORDERING_ARGS + 1, #ARGV do
  local pid = ARGV[i]
  local ptie, n, lids, lties, lpay = graph_page(graph, pid)
  record(K, P, '', pid, ptie, n, lids, lties, lpay)
end
return #ARGV - N_ORDERING_ARGS
