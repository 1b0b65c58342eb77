-- pop: lease up to `count` requests: first hand back the leases of holders whose
-- heartbeat is gone and leases older than the lease time, then take the forced
-- queue's requests of Scrapy priority >= 0 (highest first, then FIFO), then the frontier
-- (highest priority, then lowest seq; lsf: the site with most queued URLs, then lowest
-- seq in it), then, once the frontier is empty, the forced requests of priority < 0.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] frontier  KEYS[4] lease  KEYS[5] req  KEYS[6] forced
-- ARGV[1] ordering  ARGV[2] unused (0; the time is Redis's, _clock.lua)
-- ARGV[3] lease time (ms, IPR_LEASE_SECS), or
--   "<lease time>:<max age>[:<holder ttl>[:<max releases>]]" (ms; IPR_LEASE_MAX_SECS; 2 x
--   IPR_HEARTBEAT_SECS: an unregistered caller that takes leases is registered with
--   this deadline; IPR_MAX_RELEASES, _reclaim.lua DEAD; '' none): a lease taken (or last
--   extended) before now - lease time goes back, unless its holder is alive (the
--   caller, or a heartbeat in the future) and it was first taken less than max age
--   ago: then it is extended (its score set to now, its first take kept in
--   `lease_since`); a live holder's lease past max age goes back and is counted
--   overdue
-- ARGV[4] count  ARGV[5] cap on expired leases (and on lost holders) handled in this call
-- ARGV[6] holder id of the caller ('' none: only the lease time bounds its leases);
--   a holder is alive while its entry in `holders` (score = heartbeat deadline, ms,
--   written by FrontierStore.beat) is in the future
-- ARGV[7] polite scan S (optional; 0 or absent: plain pop): take from the frontier at
--   most ONE request per download slot, among its first S entries (best first) and
--   the S entries from rank ARGV[8] (mod the frontier's size; a caller moves this
--   window on so that hosts whose URLs rank low are found too), skipping the busy
--   slots ARGV[10..]. ARGV[9] min ratio r (IPR_POLITE_MIN_RATIO): when r > 0 and the
--   best entry's priority p is > 0, both windows hold only entries of priority >= r*p
--   (r = 1: the best's ties only); when the best entry's Scrapy priority is not 0, both
--   windows hold the entries of that priority (_frontier.lua zscore). A request's slot is Scrapy's
--   Downloader.get_slot_key (meta download_slot, else its URL's host name), stored at
--   the head of its payload by scheduler/codec.py. Not for lsf.
-- Returns {expired leases moved back, leases of lost holders moved back, {lost
-- holder ids}, {best frontier ZSET score left ('' when empty), forced requests left,
-- leases of live holders moved back past max age, 1 if the caller was registered again,
-- requests dead-lettered (_reclaim.lua), this call's take (0: none)},
-- member1, payload1, member2, payload2, ...}; a payload is false when no request body
-- is stored (a replay, or lost: the caller decides). The head lets a bucketed crawl
-- (store/buckets.py) keep the buckets' best scores without asking.
-- Cost: O((count + cap) log F); a lost holder: + O(leases in flight), once;
-- polite scan: + O(S) payload reads.
--! include _reclaim.lua
--! include _frontier.lua
--! include _forced.lua
--! include _lease_keys.lua
--! include _orderings.lua
--! include _clock.lua
--! include _store_lost.lua
local meta, node, frontier, lease, req, forced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local lost_store = store_lost(meta)
if lost_store then return lost_store end
local ordering = ARGV[1]
local lease_ms, max_ms, ttl_ms, max_rel = string.match(ARGV[3], '^(%d+):?(%d*):?(%d*):?(%d*)$')
DEAD.limit, DEAD.req = tonumber(max_rel), req
lease_ms = tonumber(lease_ms)
max_ms = tonumber(max_ms) or lease_ms
ttl_ms = tonumber(ttl_ms)
local holders = holders_key()
local now = clock_now(meta, holders, ttl_ms)
local now_s = string.format('%.0f', now)
local count = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local holder = ARGV[6] or ''
local scan = tonumber(ARGV[7] or '0') or 0

-- The caller is alive whatever its heartbeat says (its beat is late, not gone).
local lost = {}
for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', '(' .. now_s, 'LIMIT', 0, cap)) do
  if h ~= holder then lost[#lost + 1] = h end
end
local reclaimed = 0
if #lost > 0 then
  local dead = {}
  for _, h in ipairs(lost) do dead[h] = true end
  reclaimed = reclaim_holders(meta, node, frontier, lease, forced, ordering, dead, true)
  redis.call('HINCRBY', meta, 'holders_lost', #lost)
end

local by = lease_by_key()
local since_key = lease_since_key()
local moved, overdue = 0, 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', lease, '-inf', string.format('%.0f', now - lease_ms), 'LIMIT', 0, cap)) do
  local h = holder_of(redis.call('HGET', by, m))
  local alive = h and h ~= '' and (h == holder or tonumber(redis.call('ZSCORE', holders, h) or '0') > now)
  local since = tonumber(redis.call('HGET', since_key, m) or redis.call('ZSCORE', lease, m))
  if alive and now - since < max_ms then
    redis.call('HSETNX', since_key, m, string.format('%.0f', since))
    redis.call('ZADD', lease, now_s, m)
  else
    if alive then overdue = overdue + 1 end
    moved = moved + lease_requeue(meta, node, frontier, lease, forced, ordering, m, true)
  end
end

local result = {moved, reclaimed, lost, false}
local taken = 0
-- A caller that leases is a registered holder: one found lost (its heartbeat lapsed) and
-- not registered again yet is registered now, so that the leases it takes go back
-- within its heartbeat's time if it dies before its next beat (not after the lease time);
-- it learns it (a paused process drops the requests it held: others may have them now)
local lapsed = 0
if count > 0 and holder ~= '' and ttl_ms and not redis.call('ZSCORE', holders, holder) then
  redis.call('ZADD', holders, string.format('%.0f', now + ttl_ms), holder)
  lapsed = 1
end
-- this call's take (meta `takes`, counted once per call that leases for a holder): each
-- lease is held as '<holder>#<take>', and a settle that names an earlier take of the same
-- member by the same holder settles nothing (_leases.lua same_take)
local take_no = false
local function take(m)
  redis.call('ZADD', lease, now_s, m)
  if holder ~= '' then
    take_no = take_no or redis.call('HINCRBY', meta, 'takes', 1)
    redis.call('HSET', by, m, holder .. '#' .. take_no)
  end
end
-- forced tokens of Scrapy priority >= that of the frontier's best entry (0 when it is
-- empty; _frontier.lua level_of); late: all the rest, once the frontier is empty (_forced.lua)
local function take_forced(late)
  if taken >= count or redis.call('ZCARD', forced) == 0 then return end
  local hi = '+inf'
  if not late then
    local head = redis.call('ZRANGE', frontier, 0, 0, 'WITHSCORES')
    local level = head[2] and math.max(-2048, math.min(2048, level_of(tonumber(head[2])))) or 0
    hi = string.format('(%.0f', FORCED_LATE - level * TWO40)
  end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', forced, '-inf', hi, 'LIMIT', 0, count - taken)) do
    redis.call('ZREM', forced, m)
    take(m)
    result[#result + 1] = m
    result[#result + 1] = redis.call('HGET', req, m)
    taken = taken + 1
  end
end
take_forced(false)
local function lease_it(m)
  take(m)
  result[#result + 1] = m
  result[#result + 1] = redis.call('HGET', req, string.sub(m, 9))
  taken = taken + 1
end
local rule = rule_of(ordering)
if rule.pop then
  while taken < count do
    local m = rule.pop(meta, frontier)
    if m == nil then break end
    if m then lease_it(m) end
  end
elseif scan > 0 and taken < count then
  local busy = {}
  for i = 10, #ARGV do busy[ARGV[i]] = true end
  -- The download slot at the head of a payload (store/payload.py: format byte 2 or 3,
  -- slot length n, n bytes of slot), computed in Python when the request was stored:
  -- no script parses a payload.
  local function slot_of(payload)
    local format = payload and string.byte(payload, 1)
    if format ~= 2 and format ~= 3 then return '' end
    local n = string.byte(payload, 2) or 0
    return string.sub(payload, 3, 2 + n)
  end
  -- `size` entries are eligible: all, or those of priority >= r * the best's
  local size = redis.call('ZCARD', frontier)
  local ratio = tonumber(ARGV[9] or '0') or 0
  if ratio > 0 and size > 0 then
    local best = -tonumber(redis.call('ZRANGE', frontier, 0, 0, 'WITHSCORES')[2])
    local level = level_of(-best)
    if level ~= 0 then  -- a Scrapy priority level of its own: its entries, all of them
      size = redis.call('ZCOUNT', frontier, '-inf', string.format('(%.17g', -(level * LEVEL - LEVEL / 2)))
    elseif best > 0 then
      size = redis.call('ZCOUNT', frontier, '-inf', string.format('%.17g', -ratio * best))
    end
  end
  local entries = {}
  if size > 0 then entries = redis.call('ZRANGE', frontier, 0, math.min(scan, size) - 1) end
  local from = size > 0 and (tonumber(ARGV[8]) or 0) % size or 0
  if from >= scan then
    local last = math.min(from + scan, size) - 1
    for _, m in ipairs(redis.call('ZRANGE', frontier, from, last)) do entries[#entries + 1] = m end
  end
  for _, m in ipairs(entries) do
    if taken >= count then break end
    local payload = redis.call('HGET', req, string.sub(m, 9))
    local slot = slot_of(payload)
    if not busy[slot] then
      busy[slot] = true
      redis.call('ZREM', frontier, m)
      take(m)
      result[#result + 1] = m
      result[#result + 1] = payload
      taken = taken + 1
    end
  end
elseif taken < count then
  local popped = redis.call('ZPOPMIN', frontier, count - taken)
  for i = 1, #popped, 2 do lease_it(popped[i]) end
end
if redis.call('ZCARD', frontier) == 0 then take_forced(true) end
local head = redis.call('ZRANGE', frontier, 0, 0, 'WITHSCORES')
result[4] = {head[2] or '', redis.call('ZCARD', forced), overdue, lapsed, DEAD.n, take_no or 0}
return result
