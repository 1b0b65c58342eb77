-- record(K, P, lease_member, pid, ptie, n, lids, lties, lpay): the rule of
-- record_page.lua (see its header), shared with replay.lua. K: key names
-- {meta, node, frontier, lease, req}; P: {ordering, cutoff, initial, param,
-- cap, ia, ib, ic, id}; links as three arrays of length n (ids, tie numbers,
-- payloads). Returns added, first (boolean), rescored, updates, dropped.
-- `shared` (optional, replay.lua): {cache = {}, dirty = {}} kept across pages of
-- one call; records are then written back by the caller (flush_records), once.
-- push (forward push, Andersen, Chung & Lang, FOCS 2006; on growing graphs Zhang, Lofgren & Goel, KDD 2016): after a
-- page's own push, push the residuals of fetched nodes on, largest residual per
-- out-link first (the mass one edge update moves: `resid` ZSET, score = a / od;
-- plain largest-residual order, Gauss-Southwell, did worse, docs/orderings.md), until
-- P.budget edge updates are spent. A
-- node with more out-links than what is left gives up its whole residual at once;
-- its out-links get their share in this call and the next ones, before any other
-- push (key `pushing`: 8-byte id .. share (double) .. next link index (uint32)).
-- resid, pushing: the two keys; get / push_gain / resid_index / touch: record's
-- closures over its record cache.
-- Returns the edge updates done, and 1 if the budget ran out with work left, else 0.
local function push_residuals(P, resid, pushing, get, push_gain, resid_index, touch)
  local left, updates = P.budget, 0
  while left > 0 do
    local qid, part, from
    local raw = redis.call('GET', pushing)
    if raw then
      qid = string.sub(raw, 1, 8)
      part, from = struct.unpack('>dI4', raw, 9)
    else
      local top = redis.call('ZREVRANGE', resid, 0, 0)
      if #top == 0 then break end
      qid = top[1]
      local q = get(qid)
      local r = q.a
      q.s = q.s + (1 - P.damping) * r
      q.a = 0
      touch(qid)
      resid_index(qid, q)
      part, from = P.damping * r / (#q.links / 8), 0
    end
    local q = get(qid)
    local od = #q.links / 8
    local to = math.min(od, from + left)
    for i = from, to - 1 do
      local rid = string.sub(q.links, 8 * i + 1, 8 * i + 8)
      local r = get(rid)
      if r then push_gain(rid, r, part) end
    end
    if to > from then
      left = left - (to - from)
      updates = updates + (to - from)
    end
    if to < od then
      redis.call('SET', pushing, qid .. struct.pack('>dI4', part, to))
    elseif raw then
      redis.call('DEL', pushing)
    end
  end
  local dropped = 0
  if left <= 0 and (redis.call('EXISTS', pushing) == 1 or redis.call('ZCARD', resid) > 0) then dropped = 1 end
  return updates, dropped
end

local function record(K, P, lease_member, pid, ptie, n, lids, lties, lpay, shared)
  local meta, node, frontier, lease, req = K.meta, K.node, K.frontier, K.lease, K.req
  local ordering, cutoff, initial, param, cap = P.ordering, P.cutoff, P.initial, P.param, P.cap

  if lease_member ~= '' then
    lease_settle(lease, lease_member)
    if is_token(lease_member) then redis.call('HDEL', req, lease_member) end
  end

  -- Records read in this call, written back once at the end.
  local cache, written, dirty, order = {}, {}, {}, {}
  if shared then cache, written = shared.cache, shared.dirty end
  local function get(id)
    local r = cache[id]
    if r == nil then
      r = rec_get(node, id) or false
      cache[id] = r
    end
    return r or nil
  end
  local function touch(id)
    if not dirty[id] then dirty[id] = true; order[#order + 1] = id; written[id] = true end
  end
  -- push only (not built for the other orderings): its two keys; resid_index(id, r)
  -- keeps a fetched node's residual a indexed in `resid` (score a / od) while it is at
  -- least epsilon and the node has out-links to push it to; push_gain(id, r, gain):
  -- `gain` reaches node `id`, an unfetched node's priority, a fetched one's residual
  local resid, pushing, resid_index, push_gain
  if ordering == 'push' then
    local base = string.sub(meta, 1, -5)
    resid, pushing = base .. 'resid', base .. 'pushing'
    resid_index = function(id, r)
      if r.st == 2 and r.od > 0 and r.a > 0 and r.a >= P.epsilon then
        redis.call('ZADD', resid, string.format('%.17g', r.a / r.od), id)
      else
        redis.call('ZREM', resid, id)
      end
    end
    push_gain = function(id, r, gain)
      touch(id)
      if r.st == 2 then
        r.a = r.a + gain
        resid_index(id, r)
      else
        r.s = r.s + gain
      end
    end
  end

  local p = get(pid)
  if not p then
    p = new_record(meta, ptie)
    cache[pid] = p
  end
  touch(pid)
  local first = p.st ~= 2
  if p.st == 0 then frontier_remove(meta, frontier, ordering, p, member_of(p, pid)) end
  redis.call('HDEL', req, pid)

  local share, same_share, other_share = 0, 0, 0
  if first then
    p.st = 2
    p.a = 0  -- an unfetched node's a is its prior
    redis.call('HINCRBY', meta, 'fetched', 1)
    -- the fetch order, 8 bytes per page (`order`, store/keys.py): the report's
    -- PageRank-over-time curve
    redis.call('APPEND', string.sub(meta, 1, -5) .. 'order', pid)
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
    elseif ordering == 'push' then
      -- the page's mass m (received + start mass) is pushed at once: (1 - d) m
      -- stays as its estimate, d m / n goes to each out-link; a = its residual
      local m = p.s + initial
      p.s = (1 - P.damping) * m
      if n > 0 then share = P.damping * m / n end
      p.a = 0
    elseif ordering == 'importance' then
      local same = 0
      for k = 0, n - 1 do
        if lties[k + 1] == p.tie then same = same + 1 end
      end
      local f = math.log(P.ia * same + P.ib * (n - same) + 1) / math.log(2)
      same_share, other_share = P.ic * f, P.id * f
    end
  end
  p.od = n

  local added = 0
  local pc  -- prior_conf, read at the first new URL (false: none)
  local ids = {}
  local queue = {}   -- propagation entries {id, amount}; amount -1: take a_q (ar)
  local queued = {}  -- ar: nodes with an entry waiting in `queue`
  for k = 0, n - 1 do
    local tid, ttie, payload = lids[k + 1], lties[k + 1], lpay[k + 1]
    ids[#ids + 1] = tid
    local gain = share
    if ordering == 'importance' and first then
      if ttie == p.tie then gain = same_share else gain = other_share end
    end
    local r = get(tid)
    if not r then
      r = new_record(meta, ttie)
      r.s = gain
      if pc == nil then pc = prior_conf(meta) or false end
      r.a = prior_of(pc, tid)
      cache[tid] = r
      touch(tid)
      if payload ~= '' then redis.call('HSET', req, tid, payload) end
      frontier_add(meta, frontier, ordering, r, member_of(r, tid))
      added = added + 1
    elseif ordering == 'push' then
      if gain ~= 0 then push_gain(tid, r, gain) end
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
  p.links = table.concat(ids)

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
      local links = q.links
      local od = #links / 8
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

  if ordering == 'push' then
    -- the page's own residual (a self-loop) or a re-record that changed its out-degree
    resid_index(pid, p)
    if first then updates, dropped = push_residuals(P, resid, pushing, get, push_gain, resid_index, touch) end
  end

  local rescored = 0
  for _, id in ipairs(order) do
    local r = cache[id]
    if not shared then rec_put(node, id, r) end
    if r.st == 0 and id ~= pid and ordering ~= 'bf' and ordering ~= 'lsf' and ordering ~= 'pr' then
      rescored = rescored + redis.call('ZADD', frontier, 'XX', 'CH', zscore(ordering, r), member_of(r, id))
    end
  end
  return added, first, rescored, updates, dropped
end

-- Write back the records a replay call kept in `shared` (see record).
local function flush_records(node_key, shared)
  for id in pairs(shared.dirty) do rec_put(node_key, id, shared.cache[id]) end
end

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
