--! include _derived_keys.lua
-- Outbox entries (bucket mode, IPR_CLUSTER_BUCKETS > 1, store/buckets.py): links
-- and score gains for nodes of other buckets, collected by out_add(box, c, id,
-- tie, gain, payload, kind) in a table (bucket c -> flat list) and written by
-- out_flush(meta, box): one entry per bucket reached, XADD to `outbox:<c>` with an
-- id of the server's clock (ms-seq, increasing), field e = cmsgpack of {id, tie,
-- gain, payload, kind, ...}; kind 0 = a link (the node is created there if new), 1 = a
-- gain only (push: a residual pushed on), {0, rp} = a link of Scrapy priority rp. A clock id, not a counter: after a failover
-- that lost this bucket's last writes, the promoted replica's new entries still get
-- ids above those the target applied (the failover takes longer than clock skew).
local function out_add(box, c, id, tie, gain, payload, kind)
  local l = box[c]
  if not l then l = {}; box[c] = l end
  l[#l + 1] = id; l[#l + 1] = tie; l[#l + 1] = gain; l[#l + 1] = payload; l[#l + 1] = kind
end

local function out_flush(meta, box)
  for c, l in pairs(box) do
    redis.call('XADD', tail_key('outbox:' .. c), '*', 'e', cmsgpack.pack(l))
  end
end
