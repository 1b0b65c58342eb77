-- record_page: page p was fetched; record it with its out-links, register new
-- URLs, apply the ordering's score update and re-score frontier entries in place.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] out  KEYS[4] frontier  KEYS[5] lease  KEYS[6] req
-- ARGV[1] ordering: 'ipr' | 'blc' | 'bf'
-- ARGV[2] initial score added to s_p at its first fetch (ipr; 000 §3: 1)
-- ARGV[3] lease member to acknowledge, or ''
-- ARGV[4] page id (8 bytes)   ARGV[5] page tie key
-- ARGV[6] n = number of distinct out-links (the caller bounds it)
-- ARGV[7 + 3k], ARGV[8 + 3k], ARGV[9 + 3k]: id, tie key, request payload of link k
-- Rule (000 §3, DL1): first fetch of p: s_p += initial; beta = s_p / n added to every
-- target (including p itself on a self-loop). BLC: every target's back-link count += 1.
-- A page fetched before is re-recorded (out-links replaced, new URLs registered)
-- without a second score update.
-- Returns {new URLs registered, 1 if first fetch else 0, frontier entries re-scored}.
-- Cost: O(n) commands plus O(n log F) for the frontier.
local meta, node, out, frontier, lease, req = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ordering = ARGV[1]
local initial = tonumber(ARGV[2])
local lease_member = ARGV[3]
local pid = ARGV[4]
local n = tonumber(ARGV[6])

if lease_member ~= '' then
  redis.call('ZREM', lease, lease_member)
  if is_token(lease_member) then redis.call('HDEL', req, lease_member) end
end

local p = rec_get(node, pid)
if not p then p = new_record(meta, tonumber(ARGV[5])) end
local first = p.st ~= 2
if p.st == 0 then redis.call('ZREM', frontier, member_of(p, pid)) end
redis.call('HDEL', req, pid)

local beta = 0
if first then
  p.st = 2
  if ordering == 'ipr' then
    p.s = p.s + initial
    if n > 0 then beta = p.s / n end
  elseif ordering == 'blc' then
    beta = 1
  end
  redis.call('HINCRBY', meta, 'fetched', 1)
end
p.od = n

local added, rescored = 0, 0
local ids = {}
for k = 0, n - 1 do
  local tid, ttie, payload = ARGV[7 + 3 * k], tonumber(ARGV[8 + 3 * k]), ARGV[9 + 3 * k]
  ids[#ids + 1] = tid
  if tid == pid then
    p.s = p.s + beta
  else
    local r = rec_get(node, tid)
    if not r then
      r = new_record(meta, ttie)
      r.s = beta
      rec_put(node, tid, r)
      redis.call('HSET', req, tid, payload)
      redis.call('ZADD', frontier, zscore(ordering, r), member_of(r, tid))
      added = added + 1
    elseif beta ~= 0 then
      r.s = r.s + beta
      rec_put(node, tid, r)
      if r.st == 0 and ordering ~= 'bf' then
        rescored = rescored + redis.call('ZADD', frontier, 'XX', 'CH', zscore(ordering, r), member_of(r, tid))
      end
    end
  end
end
rec_put(node, pid, p)
if n > 0 then redis.call('HSET', out, pid, table.concat(ids)) else redis.call('HDEL', out, pid) end
return {added, first and 1 or 0, rescored}
