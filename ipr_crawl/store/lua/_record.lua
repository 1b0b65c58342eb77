-- record(K, P, lease_member, pid, ptie, n, lids, lties, lpay): the rule of
-- record_page.lua (see its header), shared with replay.lua. K: key names
-- {meta, node, frontier, lease, req}; P: {ordering, cutoff, initial, param,
-- cap, ia, ib, ic, id}; links as three arrays of length n (ids, tie numbers,
-- payloads). Returns added, first (boolean), rescored, updates, dropped.
-- `shared` (optional, replay.lua): {cache = {}, dirty = {}} kept across pages of
-- one call; records are then written back by the caller (flush_records), once.
-- push (forward push, Andersen, Chung & Lang, FOCS 2006; on growing graphs Zhang, Lofgren & Goel, KDD 2016): after a
-- page's own push, push the residuals of fetched nodes on, largest residual per
-- out-link first (the mass one edge update moves: `resid` ZSET, score = its level,
-- a quarter of an octave, X.level = reference.py's resid_level; among equal levels the
-- larger id; plain largest-residual order, Gauss-Southwell, did worse,
-- docs/orderings.md), until P.budget edge updates are spent. A
-- node with more out-links than what is left gives up its whole residual at once;
-- its out-links get their share in this call and the next ones, before any other
-- push (key `pushing`: 8-byte id .. share (double) .. next link index (uint32)).
-- pushing: its key; cache: the record cache (id -> record, false: none in Redis);
-- get / push_gain / resid_index / touch / resid_top / resid_left:
-- record's closures over it (push_gain(id, nil, gain, c): a link without
-- a record here, sent to its bucket c in bucket mode, else dropped; resid_top(): the
-- node `resid` would have on top if the pending index changes were written, nil if
-- none; resid_left(): whether any residual is still indexed).
-- shared (replay.lua's cache across pages, or nil): `pushing` is then read once per
-- call and written back by flush_records, and so are the index changes (`resid`).
-- Returns the edge updates done, and 1 if the budget ran out with work left, else 0.
local function push_residuals(P, pushing, cache, get, push_gain, resid_index, touch, resid_top, resid_left, shared)
  local left, updates = P.budget, 0
  -- the hub being pushed in parts: read once, written back once at the end
  local raw0
  if shared and shared.pushing ~= nil then
    raw0 = shared.pushing or nil
  else
    raw0 = redis.call('GET', pushing)
    if shared then shared.pushing, shared.pushing_read, shared.pushing_key = raw0 or false, raw0 or false, pushing end
  end
  local cur = raw0
  while left > 0 do
    local qid, part, from
    if cur then
      qid = string.sub(cur, 1, 8)
      part, from = struct.unpack('>dI4', cur, 9)
    else
      qid = resid_top()
      if not qid then break end
      local q = get(qid)
      local r = q.a
      q.s = q.s + (1 - P.damping) * r
      q.a = 0
      touch(qid)
      resid_index(qid, q)
      part, from = P.damping * r / (#q.links / 8), 0
    end
    local q = get(qid)
    local links, lbk = q.links, q.lbk
    local od = #links / 8
    local to = math.min(od, from + left)
    for i = from, to - 1 do
      local rid = string.sub(links, 8 * i + 1, 8 * i + 8)
      -- get(rid), its cache hit read here: a call less per edge update
      local r = cache[rid]
      if r == nil then r = get(rid) end
      push_gain(rid, r or nil, part, lbk and string.byte(lbk, i + 1))
    end
    if to > from then
      left = left - (to - from)
      updates = updates + (to - from)
    end
    if to < od then
      cur = qid .. struct.pack('>dI4', part, to)
    else
      cur = nil
    end
  end
  if shared then
    shared.pushing = cur or false
  elseif cur ~= raw0 then
    if cur then redis.call('SET', pushing, cur) else redis.call('DEL', pushing) end
  end
  local dropped = 0
  if left <= 0 and (cur or resid_left()) then dropped = 1 end
  return updates, dropped
end

-- Outbox entries (bucket mode, IPR_CLUSTER_BUCKETS > 1, store/buckets.py): links
-- and score gains for nodes of other buckets, collected by out_add(box, c, id,
-- tie, gain, payload, kind) in a table (bucket c -> flat list) and written by
-- out_flush(meta, box): one entry per bucket reached, XADD to `outbox:<c>` with an
-- id of the server's clock (ms-seq, increasing), field e = cmsgpack of {id, tie,
-- gain, payload, kind, ...}; kind 0 = a link (the node is created there if new), 1 = a
-- gain only (push: a residual pushed on). A clock id, not a counter: after a failover
-- that lost this bucket's last writes, the promoted replica's new entries still get
-- ids above those the target applied (the failover takes longer than clock skew).
local function out_add(box, c, id, tie, gain, payload, kind)
  local l = box[c]
  if not l then l = {}; box[c] = l end
  l[#l + 1] = id; l[#l + 1] = tie; l[#l + 1] = gain; l[#l + 1] = payload; l[#l + 1] = kind
end

local function out_flush(meta, box)
  local base = string.sub(meta, 1, -5)
  for c, l in pairs(box) do
    redis.call('XADD', base .. 'outbox:' .. c, '*', 'e', cmsgpack.pack(l))
  end
end

-- push: a level of `resid` -> its ZADD argument, formatted once per script call
local LEVEL_ARG = {}

-- The record cache of one call and the score rules that do not depend on the
-- page being recorded, shared by record and receive (relay.lua). Returns a table:
--   get(id) -> record or nil; touch(id): mark written back at the end;
--   push_gain(id, r, gain, c) (push): `gain` reaches node id (r its record, or nil: a
--     node of bucket c, known from the linking page's record, gets it through the outbox);
--   resid_index(id, r) (push); gain_to(id, tie, payload, gain) -> 1 if a new node was
--     made (s = gain, a = its prior, into the frontier), else 0 and the record and
--     its score before (ipr, blc, ifs, opic, importance: s += gain; push: push_gain);
--   flush(pid) -> frontier entries re-scored (write-back and ZADD XX of the dirty
--     records, pid excepted); box: outbox entries (out_add).
-- K: key names; P: ordering parameters; shared: replay.lua's cache kept across pages.
local function record_ctx(K, P, shared)
  local meta, node, frontier, req, ordering = K.meta, K.node, K.frontier, K.req, P.ordering
  local cache, written, dirty, order = {}, {}, {}, {}
  if shared then cache, written = shared.cache, shared.dirty end
  local X = {cache = cache, box = {}, bucketed = false}
  local wide = ordering == 'push'
  X.wide = wide
  local base = string.sub(meta, 1, -5)
  local level  -- push: X.level, set below
  function X.get(id)
    local r = cache[id]
    if r == nil then
      r = rec_get(node, id, wide) or false
      if r and level then r.lv = level(r) end
      cache[id] = r
    end
    return r or nil
  end
  function X.touch(id)
    if not dirty[id] then dirty[id] = true; order[#order + 1] = id; written[id] = true end
  end
  -- push only: a fetched node's residual a stays indexed in `resid` (score: the level
  -- of a / od, X.level) while it is at least epsilon and the node has out-links to push
  -- it to. A record keeps the level Redis has (r.lv, set when read); a flush writes
  -- only the levels that changed: most gains stay within their level
  if ordering == 'push' then
    local resid = base .. 'resid'
    X.resid, X.pushing = resid, base .. 'pushing'
    -- index changes wait in `pend` (id -> its record, whose state when written
    -- decides) and go to Redis in one ZADD and one ZREM per flush: at the end of each
    -- record call, or of a whole replay call (`shared.resid`: Redis's `resid` then does
    -- not change during the call, so what was read of it stays valid). Until then the
    -- top is found without writing them (resid_top): the best of the pending records
    -- (their levels now, kept by level in `bkt`: level -> {id -> true}, `cnt`: level ->
    -- ids, `maxlv`: the highest level with any) and of the entries Redis has that are
    -- not pending (their ids read in Redis's order, `top`, from position `ti`). The same
    -- node as a ZREVRANGE after a flush: a pending record's level in Redis is stale, the
    -- others' are exact; among equal levels the larger id (bytes, as the ZSET orders
    -- members).
    -- X.level(r): 4 e + floor(8 (m - 1/2)), a / od = m 2^e (frexp), nil when not indexed
    local R = shared and shared.resid
    if not R then
      -- by level (bkt, cnt) only across the pages of a replay call: one page's pending
      -- records are few, and with one page per call keeping their levels cost more than
      -- scanning them (0.5 % of a crawl's record call, docs/orderings.md)
      if shared then
        R = {pend = {}, npend = 0, bkt = {}, cnt = {}, nlv = 0, maxlv = nil, top = {}, ti = 1, key = {}}
        shared.resid = R
      else
        R = {pend = {}, npend = 0, top = {}, ti = 1}
      end
    end
    local eps = P.epsilon
    local frexp, floor = math.frexp, math.floor
    function level(r)
      local a = r.a
      if r.st == 2 and r.od > 0 and a > 0 and a >= eps then
        local m, e = frexp(a / r.od)
        return e * 4 + floor((m - 0.5) * 8)
      end
      return nil
    end
    X.level = level
    -- an id's order as a number, hi 2^32 + lo rounded to a double (cached in R.key when
    -- first compared): a larger key means a larger id; equal keys are decided by id_after
    local function idkey(id)
      local h, l = struct.unpack('>I4I4', id)
      local k = h * TWO32 + l
      R.key[id] = k
      return k
    end
    -- r.pl: a pending record's level now, set at each change (every change of a
    -- fetched record's a or od is followed by resid_index)
    if not shared then
      -- one page per call: a few pending records, scanned by resid_top
      function X.resid_index(id, r)
        r.pl = level(r)
        local pend = R.pend
        if not pend[id] then pend[id] = r; R.npend = R.npend + 1 end
      end
    else
      function X.resid_index(id, r)
        local lv = level(r)
        local pend, bkt, cnt = R.pend, R.bkt, R.cnt
        if pend[id] then
          local old = r.pl
          if old == lv then return end
          if old then
            bkt[old][id] = nil
            local c = cnt[old] - 1
            if c == 0 then
              bkt[old], cnt[old] = nil, nil
              R.nlv = R.nlv - 1
              if old == R.maxlv then
                if R.nlv == 0 then
                  R.maxlv = nil
                else
                  local l = old - 1
                  while not cnt[l] do l = l - 1 end
                  R.maxlv = l
                end
              end
            else
              cnt[old] = c
            end
          end
        else
          pend[id] = r
          R.npend = R.npend + 1
        end
        r.pl = lv
        if lv then
          local b = bkt[lv]
          if b then
            b[id] = true
            cnt[lv] = cnt[lv] + 1
          else
            bkt[lv], cnt[lv] = {[id] = true}, 1
            R.nlv = R.nlv + 1
            if not R.maxlv or lv > R.maxlv then R.maxlv = lv end
          end
        end
      end
    end
    -- whether a residual is still indexed once the pending changes are written: across
    -- a replay call's pages, by its top (the index is written at the end of the call);
    -- with one page per call, write the index, then count it (cheaper than a search)
    function X.resid_left()
      if shared then return X.resid_top() ~= nil end
      X.resid_flush()
      return redis.call('ZCARD', resid) > 0
    end
    -- the pending changes are written at the end of the record call (of the replay call:
    -- flush_records); nothing asks for the top after that, so `top` and the levels are
    -- not reset
    function X.resid_flush()
      if R.npend == 0 then return end
      local add, rem = {}, {}
      for id, r in pairs(R.pend) do
        local lv = r.pl
        if lv ~= r.lv then
          if lv then
            local z = LEVEL_ARG[lv]
            if not z then z = string.format('%d', lv); LEVEL_ARG[lv] = z end
            add[#add + 1] = z; add[#add + 1] = id
          else
            rem[#rem + 1] = id
          end
          r.lv = lv
        end
      end
      R.pend, R.npend = {}, 0
      for i = 1, #add, 2000 do
        redis.call('ZADD', resid, unpack(add, i, math.min(#add, i + 1999)))
      end
      for i = 1, #rem, 1000 do
        redis.call('ZREM', resid, unpack(rem, i, math.min(#rem, i + 999)))
      end
    end
    -- a > b for 8-byte ids, as memcmp orders them (Lua's string < uses strcoll)
    local function id_after(a, b)
      local ah, al = struct.unpack('>I4I4', a)
      local bh, bl = struct.unpack('>I4I4', b)
      return ah > bh or (ah == bh and al > bl)
    end
    function X.resid_top()
      local bid, bk, blv = nil, nil, nil
      local key = R.key
      if R.bkt then
        blv = R.maxlv
        if blv then
          for id in pairs(R.bkt[blv]) do
            local k = key[id] or idkey(id)
            if not bid or k > bk or (k == bk and id_after(id, bid)) then bid, bk = id, k end
          end
        end
      else
        for id, r in pairs(R.pend) do
          local lv = r.pl
          if lv and (not blv or lv > blv or (lv == blv and id_after(id, bid))) then bid, blv = id, lv end
        end
      end
      local pend, top, i = R.pend, R.top, R.ti
      while true do
        if i > #top then
          -- a pending entry stays pending until the flush: read past the first ones in
          -- larger steps
          local k = #top
          local more = redis.call('ZREVRANGE', resid, k, k + ((shared and k >= 8) and 15 or 1))
          if #more == 0 then break end
          for j = 1, #more do top[k + j] = more[j] end
        end
        local id = top[i]
        if not pend[id] then
          -- not pending: its record's level is the one Redis has (r.lv)
          local r = X.get(id)
          if r and r.lv then
            local lv = r.lv
            if not blv or lv > blv then
              bid = id
            elseif lv == blv then
              if not R.bkt then
                if id_after(id, bid) then bid = id end
              else
                local k = key[id] or idkey(id)
                if k > bk or (k == bk and id_after(id, bid)) then bid = id end
              end
            end
            break
          elseif r then
            -- indexed in Redis but not by today's parameters (a crawl resumed with
            -- another IPR_PUSH_EPSILON): the flush removes it
            r.lv = -1
            X.resid_index(id, r)
          end
        end
        i = i + 1
      end
      R.ti = i
      return bid
    end
    local touch, resid_index = X.touch, X.resid_index
    function X.push_gain(id, r, gain, c)
      if not r then
        if c then out_add(X.box, c, id, 0, gain, '', 1) end
        return
      end
      touch(id)
      if r.st == 2 then
        r.a = r.a + gain
        resid_index(id, r)
      else
        r.s = r.s + gain
      end
    end
  end
  local pc  -- prior_conf, read at the first new URL (false: none)
  function X.gain_to(id, tie, payload, gain)
    local r = X.get(id)
    if not r then
      r = new_record(meta, tie, wide)
      r.s = gain
      if pc == nil then pc = prior_conf(meta) or false end
      r.a = prior_of(pc, id)
      cache[id] = r
      X.touch(id)
      if payload ~= '' then redis.call('HSET', req, id, payload) end
      frontier_add(meta, frontier, ordering, r, member_of(r, id))
      return 1
    end
    local before = r.s
    if ordering == 'push' then
      if gain ~= 0 then X.push_gain(id, r, gain) end
    elseif gain ~= 0 then
      r.s = r.s + gain
      X.touch(id)
    end
    return 0, r, before
  end
  function X.flush(pid)
    local rescored = 0
    if X.resid_flush then
      if shared then shared.resid_flush = X.resid_flush else X.resid_flush() end
    end
    -- one ZADD XX for all re-scored entries (in chunks): a call per entry costs
    -- more than the entries do
    local rescore = ordering ~= 'bf' and ordering ~= 'lsf' and ordering ~= 'pr'
    local zargs = {'XX', 'CH'}
    for _, id in ipairs(order) do
      local r = cache[id]
      if not shared then rec_put(node, id, r) end
      if rescore and r.st == 0 and id ~= pid then
        zargs[#zargs + 1] = zscore(ordering, r); zargs[#zargs + 1] = member_of(r, id)
        if #zargs >= 2002 then
          rescored = rescored + redis.call('ZADD', frontier, unpack(zargs))
          zargs = {'XX', 'CH'}
        end
      end
    end
    if #zargs > 2 then rescored = rescored + redis.call('ZADD', frontier, unpack(zargs)) end
    out_flush(meta, X.box)
    return rescored
  end
  return X
end

-- bk (bucket mode, optional): {own = this bucket's number, of = n bytes, the bucket of
-- each link}; a link of another bucket is recorded among p's out-links (its bucket in
-- the record's bucket bytes) and sent with its gain through the outbox instead of
-- being scored here.
local function record(K, P, lease_member, pid, ptie, n, lids, lties, lpay, shared, bk)
  local meta, frontier, lease, req = K.meta, K.frontier, K.lease, K.req
  local ordering, cutoff, param, cap, initial = P.ordering, P.cutoff, P.param, P.cap, P.initial

  if lease_member ~= '' then
    lease_settle(lease, lease_member)
    if is_token(lease_member) then redis.call('HDEL', req, lease_member) end
  end

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

-- receive(K, P, list): apply one outbox entry's list (out_add's flat layout) on this
-- bucket: a link makes its node if new (with its payload) and gives it its gain as a
-- link of a page recorded here would; a gain only (kind 1) reaches a known node.
-- Returns new nodes, frontier entries re-scored.
local function receive(K, P, list)
  local X = record_ctx(K, P, nil)
  X.bucketed = true
  local added = 0
  for i = 1, #list, 5 do
    local id, tie, gain, payload, kind = list[i], list[i + 1], list[i + 2], list[i + 3], list[i + 4]
    if kind == 0 then
      added = added + X.gain_to(id, tie, payload, gain)
    elseif P.ordering == 'push' then
      X.push_gain(id, X.get(id), gain)
    else
      local r = X.get(id)
      if r then r.s = r.s + gain; X.touch(id) end
    end
  end
  return added, X.flush('')
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
