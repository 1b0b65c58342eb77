-- Scrapy's duplicate rule for a URL only dont_filter requests brought (enqueue.lua adds
-- it to `unfiltered`): the first filtered request for it is not a duplicate. True (and
-- the URL leaves `unfiltered`) if `id` is there and the request has its payload (a link
-- sent without one is left for the next that has it).
local function unfiltered_hit(unfiltered, id, payload)
  if payload == '' then return false end
  return redis.call('SREM', unfiltered, id) == 1
end

-- A URL scrapy-redis's duplicate filter saw before the crawl was carried over
-- (scheduler/migrate.py copies its fingerprints into `imported_seen`): `fp` is the
-- request's fingerprint as scrapy-redis's RFPDupeFilter computes it (40 hex digits; ''
-- or blanks: none). True if it is there: the URL is known as fetched, not queued.
local function imported_hit(imported, fp)
  if not fp or fp == '' or string.byte(fp, 1) == 32 then return false end
  return redis.call('SISMEMBER', imported, fp) == 1
end
