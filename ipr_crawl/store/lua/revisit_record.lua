-- revisit_record: after an access to a URL, store its revisit state (Tamura & Kitsuregawa 2008, §4.1:
-- T, U, m, t_c,min, last interval, validators, hash), schedule its next visit in
-- the due set (or stop revisiting it), optionally settle its lease (a response
-- that will not reach record_page: 304, unchanged), and append one change event
-- to the crawl's bounded change stream.
-- KEYS[1] revisit  KEYS[2] due  KEYS[3] revisit_req  KEYS[4] changes  KEYS[5] lease  KEYS[6] req
-- KEYS[7] revisit_out (revisits in flight, revisit_refresh.lua)
-- KEYS[8] rates: the histogram of estimated change rates (bin -> URLs), harmonic policy
-- KEYS[9] rate_pool: changes and exposure per directory (fields x:<group>, e:<group>),
--   the prior of harmonic's rate estimate (revisit/budget.py RatePool); and, for
--   prior=gamma, the five sums of revisit/budget.py RateMoments (fields mom:<name>)
-- KEYS[10..] store/keys.py DERIVED_KEYS, then meta (the crawl's: _store_lost.lua)
-- ARGV[1] node id (8 bytes)   ARGV[2] packed state (msgpack, revisit_store.py)
-- ARGV[3] next due instant (s since the epoch, decimal) or '' to stop revisiting
-- ARGV[4] request payload for revisits (codec.py), or '' to keep the stored one
-- ARGV[5] lease to settle here (_leases.lua lease_arg), or ''
-- ARGV[6] approximate length cap of the change stream (XADD MAXLEN ~)
-- ARGV[7] the URL's previous rate bin, or '' (none)  ARGV[8] its new rate bin, or '';
--   prefixed '!' when the access is not one of the budget's spend (a copy Scrapy's HTTP
--   cache served: the URL is binned, the spend not counted)
-- ARGV[9] the URL's group in rate_pool, or '' (not pooled)  ARGV[10] 1 if the access
-- interval ending now had a change, else 0  ARGV[11] its length (s, decimal)
-- ARGV[12] what the access adds to the five RateMoments sums, comma-separated decimals, or ''
-- ARGV[13] an explored first revisit (harmonic new=learn): "changed (0/1),length (s)", or '';
--   added to the fields new:n, new:x, new:e of rate_pool
-- ARGV[14 + 2k], ARGV[15 + 2k]: field and value k of the change event (none: no event)
-- Before any write: the error IPR_STORE_LOST when the crawl's meta is gone (_store_lost.lua).
-- Returns 1 if a lease was settled, else 0 (and 0 for a repeat of a call that ran: it
-- changes nothing). Cost: O(log D) plus O(fields).
--! include _leases.lua
--! include _derived_keys.lua
--! include _store_lost.lua
local revisit, due, revisit_req, changes, lease, req = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost_store = store_lost(tail_key('meta'))
if lost_store then return lost_store end
local id = ARGV[1]
-- the same call again (its reply was lost and it was sent again): the same packed state
-- (an access's time and count are in it) and the same due time: done already
if redis.call('HGET', revisit, id) == ARGV[2] then
  local at = redis.call('ZSCORE', due, id)
  if (ARGV[3] == '' and not at) or (at and ARGV[3] ~= '' and tonumber(at) == tonumber(ARGV[3])) then return 0 end
end
redis.call('ZREM', KEYS[7], id)
redis.call('HSET', revisit, id, ARGV[2])
if ARGV[3] ~= '' then
  redis.call('ZADD', due, ARGV[3], id)
else
  redis.call('ZREM', due, id)
  redis.call('HDEL', revisit_req, id)
end
if ARGV[4] ~= '' then redis.call('HSET', revisit_req, id, ARGV[4]) end
local new_bin, spend = ARGV[8], true
if string.sub(new_bin, 1, 1) == '!' then new_bin, spend = string.sub(new_bin, 2), false end
if new_bin ~= '' and spend then redis.call('HINCRBY', KEYS[8], 'accesses', 1) end  -- the budget's spend
if ARGV[7] ~= new_bin then
  if ARGV[7] ~= '' and tonumber(redis.call('HINCRBY', KEYS[8], ARGV[7], -1)) <= 0 then
    redis.call('HDEL', KEYS[8], ARGV[7])
  end
  if new_bin ~= '' then redis.call('HINCRBY', KEYS[8], new_bin, 1) end
end
if ARGV[9] ~= '' then
  redis.call('HINCRBYFLOAT', KEYS[9], 'x:' .. ARGV[9], ARGV[10])
  redis.call('HINCRBYFLOAT', KEYS[9], 'e:' .. ARGV[9], ARGV[11])
end
if ARGV[12] ~= '' then
  local names = {'x', 'T', 'xx', 'xT', 'TT'}
  local k = 0
  for d in string.gmatch(ARGV[12], '[^,]+') do
    k = k + 1
    redis.call('HINCRBYFLOAT', KEYS[9], 'mom:' .. names[k], d)
  end
end
if ARGV[13] ~= '' then
  local c, len = string.match(ARGV[13], '^([01]),(.+)$')
  if c then
    redis.call('HINCRBYFLOAT', KEYS[9], 'new:n', 1)
    redis.call('HINCRBYFLOAT', KEYS[9], 'new:x', c)
    redis.call('HINCRBYFLOAT', KEYS[9], 'new:e', len)
  end
end
if #ARGV >= 15 then
  local event = {}
  for i = 14, #ARGV, 2 do
    event[#event + 1] = ARGV[i]
    event[#event + 1] = ARGV[i + 1]
  end
  redis.call('XADD', changes, 'MAXLEN', '~', ARGV[6], '*', unpack(event))
end
-- the lease last: a call that fails before it leaves the page leased
local m, holder = lease_arg(ARGV[5])
if m ~= '' then return lease_ack(lease, req, m, holder) end
return 0
