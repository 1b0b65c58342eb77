--! include _records.lua
--! include _forced.lua
--! include _frontier.lua
--! include _outbox.lua
--! include _record_ctx.lua
--! include _leases.lua
--! include _push.lua
-- record(K, P, lease_member, pid, ptie, n, lids, lties, lpay): the rule of
-- record_page.lua (see its header), shared with replay.lua. K: key names
-- {meta, node, frontier, lease, req}; P: {ordering, cutoff, initial, param,
-- cap, ia, ib, ic, id}; links as three arrays of length n (ids, tie numbers,
-- payloads). Returns added, first (boolean), rescored, updates, dropped.
-- `shared` (optional, replay.lua): {cache = {}, dirty = {}} kept across pages of
-- one call; records are then written back by the caller (flush_records), once.

-- bk (bucket mode, optional): {own = this bucket's number, of = n bytes, the bucket of
-- each link}; a link of another bucket is recorded among p's out-links (its bucket in
-- the record's bucket bytes) and sent with its gain through the outbox instead of
-- being scored here.
local function record(K, P, lease_member, pid, ptie, n, lids, lties, lpay, shared, bk)
  local meta, frontier, lease, req = K.meta, K.frontier, K.lease, K.req
  local ordering, cutoff, param, cap, initial = P.ordering, P.cutoff, P.param, P.cap, P.initial

  if lease_member ~= '' then lease_ack(lease, req, lease_member) end

  local X = record_ctx(K, P, shared)
  X.bucketed = bk ~= nil
  local get, touch, cache = X.get, X.touch, X.cache

  local p = get(pid)
  if not p then
    p = new_record(meta, ptie, X.wide)
    cache[pid] = p
  end
  touch(pid)
  local first = p.st ~= 2
  if not is_token(lease_member) then
    if p.st == 0 then frontier_remove(meta, frontier, ordering, p, member_of(p, pid)) end
    redis.call('HDEL', req, pid)
  end
  -- else a dont_filter request (a forced-queue token) was fetched: the URL's own request,
  -- queued or in flight, keeps its place and its payload, as Scrapy still fetches it (the
  -- page is recorded now, and again as a refetch when that one comes)

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
    local c = bk and string.byte(bk.of, k + 1)
    if c and c ~= bk.own then
      out_add(X.box, c, tid, ttie, gain, payload, 0)
    else
      local new, r, before = X.gain_to(tid, ttie, payload, gain)
      added = added + new
      if new == 0 and ordering == 'ipr' and gain ~= 0 and r.st == 2 and tid ~= pid then
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
  if bk then p.lbk = bk.of else p.lbk = nil end

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
    X.resid_index(pid, p)
    if first then
      updates, dropped = push_residuals(P, X.pushing, cache, get, X.push_gain, X.resid_index, touch, X.resid_top, X.resid_left, shared)
    end
  end

  return added, first, X.flush(pid), updates, dropped
end

-- Write back the records a replay call kept in `shared` (see record), push's index
-- changes (`resid`, record_ctx) and its hub in parts (`pushing`, push_residuals).
local function flush_records(node_key, shared)
  if shared.resid_flush then shared.resid_flush() end
  for id in pairs(shared.dirty) do rec_put(node_key, id, shared.cache[id]) end
  if shared.pushing_key and shared.pushing ~= shared.pushing_read then
    if shared.pushing then
      redis.call('SET', shared.pushing_key, shared.pushing)
    else
      redis.call('DEL', shared.pushing_key)
    end
  end
end
