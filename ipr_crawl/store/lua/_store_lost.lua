-- The crawl's store is the one its processes opened while its `meta` has its ordering
-- (create_meta writes it first). A script that finds it gone returns the error
-- IPR_STORE_LOST before it writes (store/keys.py STORE_LOST): Redis restarted empty, a
-- replica promoted before it synced, a FLUSHDB. Writing on would start a new, empty
-- crawl under the same id, which then "finishes" with most of its pages never fetched.
local function store_lost(meta)
  if redis.call('HEXISTS', meta, 'ordering') == 1 then return nil end
  return redis.error_reply('IPR_STORE_LOST ' .. meta .. ' is gone: this Redis no longer holds the crawl '
    .. '(restarted empty, a replica promoted before it synced, or flushed)')
end
