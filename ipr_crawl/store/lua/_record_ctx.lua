--! include _records.lua
--! include _prior.lua
--! include _frontier.lua
--! include _outbox.lua
--! include _push.lua
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
  if wide then level = push_index(X, P, shared, base) end
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
