-- A page of a replay graph (replay.lua's `graph` hash): its own tie and its links
-- as record's arrays (no payloads). Returns ptie, n, lids, lties, lpay.
local function graph_page(graph_key, pid)
  local raw = redis.call('HGET', graph_key, pid) or struct.pack('>d', 0)
  local ptie = struct.unpack('>d', raw)
  local n = (#raw - 8) / 16
  local lids, lties, lpay = {}, {}, {}
  for k = 0, n - 1 do
    local at = 9 + 16 * k
    lids[k + 1] = string.sub(raw, at, at + 7)
    lties[k + 1] = struct.unpack('>d', raw, at + 8)
    lpay[k + 1] = ''
  end
  return ptie, n, lids, lties, lpay
end
