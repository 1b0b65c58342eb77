--! include _derived_keys.lua
-- A prior (IPR_PRIOR_CRAWL, store/prior.py): the meta fields prior_weight and
-- prior_buckets, read once per call; nil when the crawl has none. A URL the prior
-- knows starts with a = weight x (its PageRank in the earlier crawl x that crawl's
-- node count), float32 in hash `prior:<bucket>`, bucket = the id's last 4 bytes
-- (big-endian uint32) mod prior_buckets. An unfetched node's priority is s + a.
local function prior_conf(meta_key)
  local v = redis.call('HMGET', meta_key, 'prior_weight', 'prior_buckets')
  if not v[2] then return nil end
  return {w = tonumber(v[1]), b = tonumber(v[2])}
end

local function prior_of(pc, id)
  if not pc then return 0 end
  local raw = redis.call('HGET', tail_key('prior:' .. string.format('%d', struct.unpack('>I4', id, 5) % pc.b)), id)
  if not raw then return 0 end
  return pc.w * struct.unpack('>f', raw)
end
