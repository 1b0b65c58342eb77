--! include _records.lua
--! include _forced.lua
--! include _frontier.lua
--! include _outbox.lua
--! include _record_ctx.lua
--! include _leases.lua
-- record(K, P, lease_member, pid, ptie, n, lids, lties, lpay): the rule of
-- record_page.lua (see its header), shared with replay.lua. K: key names
-- {meta, node, frontier, lease, req}; P: {ordering, cutoff, initial, param,
-- cap, ia, ib, ic, id}; links as three arrays of length n (ids, tie numbers,
-- payloads). Returns added, first (boolean), rescored, updates, dropped, refetched
-- (known URLs only dont_filter requests brought, queued again: _record_ctx.lua gain_to),
-- and the 0-based indexes of the links queued (new, queued again, or sent to another
-- bucket's outbox): the others were duplicates.
-- `shared` (optional, replay.lua): {cache = {}, dirty = {}} kept across pages of
-- one call; records are then written back by the caller (flush_records), once.

-- bk (bucket mode, optional): {own = this bucket's number, of = n bytes, the bucket of
-- each link}; a link of another bucket is recorded among p's out-links (its bucket in
-- the record's bucket bytes) and sent with its gain through the outbox instead of
-- being scored here.
local function record(K, P, lease_member, pid, ptie, n, lids, lties, lpay, shared, bk)
  local meta, frontier, lease, req = K.meta, K.frontier, K.lease, K.req
  local ordering = P.ordering

  local lease_m, holder = lease_arg(lease_member)

  local X = record_ctx(K, P, shared)
  X.bucketed = bk ~= nil
  local get, touch, cache, rule = X.get, X.touch, X.cache, X.rule

  -- Read before the first write: the page's record and its links' (of this bucket) are
  -- decoded into the cache now, so that a record that cannot be read fails the call with
  -- nothing written (Redis does not undo a script's writes when it fails halfway).
  for k = 1, n do
    if not (bk and string.byte(bk.of, k) ~= bk.own) then get(lids[k]) end
  end
  local p = get(pid)
  if not p then
    p = new_record(meta, ptie, X.wide)
    cache[pid] = p
  end
  touch(pid)
  local first = p.st ~= 2
  -- a dont_filter request (a forced-queue token) fetched: the URL's own request, queued or
  -- in flight, keeps its place and its payload, as Scrapy still fetches it (the page is
  -- recorded now, and again as a refetch when that one comes)
  local own = not is_token(lease_m)
  local dequeue = own and p.st == 0 and member_of(p, pid)

  local share, link_gain = 0, nil
  if first then
    p.st = 2
    p.a = 0  -- an unfetched node's a is its prior
    -- the ordering's rule at a first fetch (ordering/rules/<name>.lua)
    if rule.first then share, link_gain = rule.first(p, n, P, lties) end
  end
  p.od = n

  local added = 0
  local ids = {}
  -- the rule's state of this page (ipr: its propagation queue)
  local E = {queue = {}, queued = {}}
  local on_link = rule.on_link
  local fps = P.fps  -- record_page.lua: scrapy-redis fingerprints of the links, 40 hex digits each
  local rps = P.rps  -- record_page.lua: the links' Scrapy priorities, 4 bytes each
  local queued = {}
  for k = 0, n - 1 do
    local tid, ttie, payload = lids[k + 1], lties[k + 1], lpay[k + 1]
    ids[#ids + 1] = tid
    local gain = share
    if link_gain then gain = link_gain(ttie) end
    local c = bk and string.byte(bk.of, k + 1)
    if c and c ~= bk.own then
      local rp = rps and struct.unpack('>i4', rps, 4 * k + 1)
      out_add(X.box, c, tid, ttie, gain, payload, (rp and rp ~= 0) and {0, rp} or 0)
      queued[#queued + 1] = k
    else
      local again = X.refetched
      local new, r, before = X.gain_to(tid, ttie, payload, gain, fps and string.sub(fps, 40 * k + 1, 40 * k + 40),
        rps and struct.unpack('>i4', rps, 4 * k + 1))
      added = added + new
      if new == 1 or X.refetched > again then queued[#queued + 1] = k end
      if r and new == 0 and on_link then on_link(E, P, pid, tid, r, gain, before) end
    end
  end
  p.links = table.concat(ids)
  if bk then p.lbk = bk.of else p.lbk = nil end

  -- the rule's work beyond the direct targets (ipr's cut-offs, push's push phase)
  local updates, dropped = 0, 0
  if rule.after then updates, dropped = rule.after(X, E, P, pid, p, first, shared) end

  local rescored = X.flush(pid)
  -- the fetch settled last: a call that fails before leaves the page leased, fetched again
  if first then
    redis.call('HINCRBY', meta, 'fetched', 1)
    redis.call('APPEND', K.order, pid)  -- the fetch order, 8 bytes a page (store/keys.py)
  end
  if dequeue then frontier_remove(meta, frontier, ordering, p, dequeue) end
  if first then rprio_del(K.node, pid, p) end
  if own then redis.call('HDEL', req, pid) end
  if lease_m ~= '' then lease_ack(lease, req, lease_m, holder) end
  return added, first, rescored, updates, dropped, X.refetched, queued
end

-- What is wrong with a page's arguments (record_page.lua's ARGV, parsed), or nil: checked
-- before anything is written. Ids are 8 bytes, ties numbers; `bk.of`, the fingerprints
-- and the priorities one entry per link.
local function record_args_error(pid, ptie, n, lids, lties, bk, fps, rps)
  if not pid or #pid ~= 8 or not ptie then return 'the page id or tie' end
  for k = 1, n do
    if not lids[k] or #lids[k] ~= 8 or not lties[k] then return 'link ' .. (k - 1) .. ': its id or tie' end
  end
  if bk and (not bk.own or not bk.of or #bk.of ~= n) then return 'the links\' buckets' end
  if fps and #fps ~= 40 * n then return 'the links\' fingerprints' end
  if rps and #rps ~= 4 * n then return 'the links\' priorities' end
  return nil
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
