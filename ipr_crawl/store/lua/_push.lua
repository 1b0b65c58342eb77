--! include _derived_keys.lua
--! include _outbox.lua
--! include _seq.lua
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

-- push: a level of `resid` -> its ZADD argument, formatted once per script call
local LEVEL_ARG = {}

-- push only (record_ctx): a fetched node's residual a stays indexed in `resid` (score: the level
-- of a / od, X.level) while it is at least epsilon and the node has out-links to push
-- it to. A record keeps the level Redis has (r.lv, set when read); a flush writes
-- only the levels that changed: most gains stay within their level.
-- Sets X.resid, X.pushing, X.level, X.resid_index, X.resid_top, X.resid_left,
-- X.resid_flush and X.push_gain on the record context X (X.get, X.touch defined);
-- returns X.level.
local function push_index(X, P, shared)
  local resid = derived_key('resid')
  X.resid, X.pushing = resid, derived_key('pushing')
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
  local function level(r)
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
  return level
end
