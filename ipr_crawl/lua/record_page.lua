-- record_page: page p was fetched; record it with its out-links, register new
-- URLs, apply the ordering's score update and re-score frontier entries in place.
-- KEYS[1] meta  KEYS[2] node  KEYS[3] out  KEYS[4] frontier  KEYS[5] lease  KEYS[6] req
-- ARGV[1] ordering: ipr | blc | ifs | bf | opic | importance | pr | lsf
-- ARGV[2] IPR cut-off: dl1 | pl | vr | ar
-- ARGV[3] initial score added to s_p at its first fetch (ipr; 000 §3: 1)
-- ARGV[4] cut-off parameter: L (pl), theta (vr), threshold (ar)
-- ARGV[5] cap on score updates beyond the direct targets (pl, vr, ar)
-- ARGV[6..9] importance a, b, c, d (004 §2)
-- ARGV[10] lease member to acknowledge, or ''
-- ARGV[11] page id (8 bytes)  ARGV[12] page tie key (site hash for importance/lsf)
-- ARGV[13] n = number of distinct out-links (the caller bounds it)
-- ARGV[14 + 3k], ARGV[15 + 3k], ARGV[16 + 3k]: id, tie key, payload of link k
--   ('' payload: none is stored, as in a replay)
-- Rules at p's first fetch (a page fetched before is re-recorded: out-links
-- replaced, new URLs registered, no score update):
--   ipr (000 §3): s_p += initial, beta = s_p / n to every target (DL1), then
--     pl: breadth-first from the fetched targets, L more updates, each fetched
--         node passing the share it received on, split over its out-links;
--     vr: a fetched node q passes a share beta on when beta / s_q >= theta
--         (s_q before the update); deeper nodes are updated only under that rule;
--     ar: fetched targets accumulate a_q; when a_q / s_q > threshold, a_q is
--         passed on and zeroed.
--   blc, ifs: every target's back-link count (in-degree) += 1.
--   opic (Abiteboul et al. 2003): history a_p += cash s_p; cash s_p / n to every
--     target; s_p = 0.
--   importance (004 §2): f = log2(a*same-site + b*other-site links + 1); every
--     target j gets X(j) += (c if same site else d) * f.
--   pr: none (scores come from the periodic PageRank step); bf, lsf: none.
-- Returns {new URLs, 1 if first fetch else 0, frontier entries re-scored,
--          propagation updates done, propagation entries dropped by the cap}.
-- Cost: O(n + cap) node updates, each O(log F) in the frontier.
local meta, node, out, frontier, lease, req = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ordering, cutoff = ARGV[1], ARGV[2]
local initial, param, cap = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local lease_member, pid, n = ARGV[10], ARGV[11], tonumber(ARGV[13])

if lease_member ~= '' then
  redis.call('ZREM', lease, lease_member)
  if is_token(lease_member) then redis.call('HDEL', req, lease_member) end
end

-- Records read in this call, written back once at the end.
local cache, dirty, order = {}, {}, {}
local function get(id)
  local r = cache[id]
  if r == nil then
    r = rec_get(node, id) or false
    cache[id] = r
  end
  return r or nil
end
local function touch(id)
  if not dirty[id] then dirty[id] = true; order[#order + 1] = id end
end

local p = get(pid)
if not p then
  p = new_record(meta, tonumber(ARGV[12]))
  cache[pid] = p
end
touch(pid)
local first = p.st ~= 2
if p.st == 0 then frontier_remove(meta, frontier, ordering, p, member_of(p, pid)) end
redis.call('HDEL', req, pid)

local share, same_share, other_share = 0, 0, 0
if first then
  p.st = 2
  redis.call('HINCRBY', meta, 'fetched', 1)
  if ordering == 'ipr' then
    p.s = p.s + initial
    if n > 0 then share = p.s / n end
    p.a = 0
  elseif ordering == 'blc' or ordering == 'ifs' then
    share = 1
  elseif ordering == 'opic' then
    if n > 0 then share = p.s / n end
    p.a = p.a + p.s
    p.s = 0
  elseif ordering == 'importance' then
    local same = 0
    for k = 0, n - 1 do
      if tonumber(ARGV[15 + 3 * k]) == p.tie then same = same + 1 end
    end
    local f = math.log(tonumber(ARGV[6]) * same + tonumber(ARGV[7]) * (n - same) + 1) / math.log(2)
    same_share, other_share = tonumber(ARGV[8]) * f, tonumber(ARGV[9]) * f
  end
end
p.od = n

local added = 0
local ids = {}
local queue = {}   -- propagation entries {id, amount}; amount -1: take a_q (ar)
local queued = {}  -- ar: nodes with an entry waiting in `queue`
for k = 0, n - 1 do
  local tid, ttie, payload = ARGV[14 + 3 * k], tonumber(ARGV[15 + 3 * k]), ARGV[16 + 3 * k]
  ids[#ids + 1] = tid
  local gain = share
  if ordering == 'importance' and first then
    if ttie == p.tie then gain = same_share else gain = other_share end
  end
  local r = get(tid)
  if not r then
    r = new_record(meta, ttie)
    r.s = gain
    cache[tid] = r
    touch(tid)
    if payload ~= '' then redis.call('HSET', req, tid, payload) end
    frontier_add(meta, frontier, ordering, r, member_of(r, tid))
    added = added + 1
  elseif gain ~= 0 then
    local before = r.s
    r.s = r.s + gain
    touch(tid)
    if ordering == 'ipr' and r.st == 2 and tid ~= pid then
      if cutoff == 'pl' then
        queue[#queue + 1] = {tid, gain}
      elseif cutoff == 'vr' then
        if before == 0 or gain / before >= param then queue[#queue + 1] = {tid, gain} end
      elseif cutoff == 'ar' then
        r.a = r.a + gain
        if r.a / r.s > param and not queued[tid] then
          queued[tid] = true
          queue[#queue + 1] = {tid, -1}
        end
      end
    end
  end
end
if n > 0 then redis.call('HSET', out, pid, table.concat(ids)) else redis.call('HDEL', out, pid) end

-- Propagation beyond the direct targets (ipr pl / vr / ar), at most `cap` updates.
local updates, dropped = 0, 0
if ordering == 'ipr' and first and cutoff ~= 'dl1' then
  local limit = cap
  if cutoff == 'pl' and param < limit then limit = param end
  local head = 1
  while head <= #queue do
    local qid, amount = queue[head][1], queue[head][2]
    local q = get(qid)
    if updates >= limit then break end
    head = head + 1
    if cutoff == 'ar' then
      amount = q.a
      q.a = 0
      queued[qid] = nil
      touch(qid)
    end
    local links = redis.call('HGET', out, qid)
    local od = links and (#links / 8) or 0
    if od > 0 and amount > 0 then
      local part = amount / od
      for i = 0, od - 1 do
        if updates >= limit then break end
        local rid = string.sub(links, 8 * i + 1, 8 * i + 8)
        local r = get(rid)
        if r then
          local before = r.s
          if cutoff == 'vr' then
            if before == 0 or part / before >= param then
              r.s = r.s + part
              touch(rid)
              updates = updates + 1
              if r.st == 2 then queue[#queue + 1] = {rid, part} end
            end
          else
            r.s = r.s + part
            touch(rid)
            updates = updates + 1
            if r.st == 2 then
              if cutoff == 'pl' then
                queue[#queue + 1] = {rid, part}
              else
                r.a = r.a + part
                if r.a / r.s > param and not queued[rid] then
                  queued[rid] = true
                  queue[#queue + 1] = {rid, -1}
                end
              end
            end
          end
        end
      end
    end
  end
  dropped = #queue - head + 1
end

local rescored = 0
for _, id in ipairs(order) do
  local r = cache[id]
  rec_put(node, id, r)
  if r.st == 0 and id ~= pid and ordering ~= 'bf' and ordering ~= 'lsf' and ordering ~= 'pr' then
    rescored = rescored + redis.call('ZADD', frontier, 'XX', 'CH', zscore(ordering, r), member_of(r, id))
  end
end
return {added, first and 1 or 0, rescored, updates, dropped}
