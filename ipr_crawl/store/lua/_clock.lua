-- The crawl's clock: Redis's TIME (ms), never a crawler's, for every lease time,
-- heartbeat deadline and sample (crawlers' clocks disagree: one 30 s ahead took live
-- leases). It never goes back (meta `clock`: the latest time a call read; a failover to
-- a server whose clock is behind keeps it). A gap of more than half `gap_ms` (the holders'
-- time to live: one heartbeat interval) since that call is an outage no crawler could
-- beat through (Redis stopped, restarted, failed over, unreachable; a live crawl calls
-- every half second at least):
-- the deadlines still ahead at its start move on by its length, so a holder that beat
-- before it is not taken for lost. Counted in meta `clock_gaps`. Without `gap_ms` (a
-- call that does not know the holders' time to live) the clock is read, not moved.
local function clock_now(meta, holders, gap_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last = tonumber(redis.call('HGET', meta, 'clock') or '')
  if last and now <= last then return last end
  if not gap_ms then return now end
  if last and now - last > gap_ms / 2 then
    for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, last, '+inf')) do
      redis.call('ZINCRBY', holders, now - last, h)
    end
    redis.call('HINCRBY', meta, 'clock_gaps', 1)
  end
  redis.call('HSET', meta, 'clock', string.format('%.0f', now))
  return now
end
