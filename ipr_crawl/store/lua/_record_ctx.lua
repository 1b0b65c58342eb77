--! include _records.lua
--! include _forced.lua
--! include _dupes.lua
--! include _prior.lua
--! include _frontier.lua
--! include _outbox.lua
--! include _orderings.lua
-- The record cache of one call and the score rules that do not depend on the
-- page being recorded, shared by record and receive (relay.lua). Returns a table:
--   rule: the ordering's rule (_rules.lua); wide: records carry push's index slots;
--   get(id) -> record or nil; touch(id): mark written back at the end;
--   gain_to(id, tie, payload, gain, fp, rp) -> 1 if a new node was made (s = gain, a = its
--     prior, rp its Scrapy priority (_records.lua rprio_set), into the frontier), else 0 and the record and its score before (s += gain,
--     or the rule's gain: push's push_gain); a known URL only dont_filter requests
--     brought is queued in the forced queue once (unfiltered_hit; X.refetched counts them);
--     fp: scrapy-redis's fingerprint of the link (a crawl carried over from scrapy-redis):
--     a new URL its duplicate filter saw is made a fetched node, 0 and no record returned;
--   flush(pid) -> frontier entries re-scored (write-back and ZADD XX of the dirty
--     records, pid excepted, unless the rule says rescore = false); box: outbox
--     entries (out_add);
--   and what the rule's setup adds (push, _push.lua's push_index: push_gain,
--     resid_index, resid_top, resid_left, resid_flush).
-- K: key names (meta, node, frontier, req, forced, unfiltered, imported_seen, order); P: ordering parameters; shared: replay.lua's cache kept across pages.
local function record_ctx(K, P, shared)
  local meta, node, frontier, req, ordering = K.meta, K.node, K.frontier, K.req, P.ordering
  local cache, written, dirty, order = {}, {}, {}, {}
  if shared then cache, written = shared.cache, shared.dirty end
  local X = {cache = cache, box = {}, bucketed = false}
  local rule = rule_of(ordering)
  X.rule = rule
  local wide = rule.wide == true
  X.wide = wide
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
  if rule.setup then level = rule.setup(X, P, shared) end
  local pc  -- prior_conf, read at the first new URL (false: none)
  -- URLs only dont_filter requests brought (enqueue.lua): looked up only while there are any
  local unf = K.unfiltered
  local unf_any = redis.call('EXISTS', unf) == 1
  X.refetched = 0
  function X.gain_to(id, tie, payload, gain, fp, rp)
    local r = X.get(id)
    if not r and imported_hit(K.imported_seen, fp) then
      r = new_record(meta, tie, wide)
      r.st = 2
      cache[id] = r
      X.touch(id)
      return 0
    end
    if not r then
      r = new_record(meta, tie, wide)
      r.s = gain
      if pc == nil then pc = prior_conf(meta) or false end
      r.a = prior_of(pc, id)
      cache[id] = r
      X.touch(id)
      if payload ~= '' then redis.call('HSET', req, id, payload) end
      rprio_set(node, id, r, rp)
      frontier_add(meta, frontier, ordering, r, member_of(r, id))
      return 1
    end
    adopt(meta, node, req, frontier, ordering, id, r, payload)  -- an orphan takes the link's request
    if unf_any and unfiltered_hit(unf, id, payload) then
      forced_add(meta, req, K.forced, payload)
      X.refetched = X.refetched + 1
    end
    local before = r.s
    if gain ~= 0 then
      if rule.gain then
        rule.gain(X, id, r, gain)
      else
        r.s = r.s + gain
        X.touch(id)
      end
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
    local rescore = rule.rescore ~= false
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
