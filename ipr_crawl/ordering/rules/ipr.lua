--! include _rules.lua
-- ipr (Yamada et al. 2004, §3), twin: ipr.py. At p's first fetch s_p += initial, then
-- beta = s_p / n to every target (DL1); the cut-offs pass scores on beyond the
-- targets, at most P.cap updates (P.param: L of pl, theta of vr, threshold of ar):
--   pl: breadth-first from the fetched targets, L more updates, each fetched node
--       passing the share it received on, split over its out-links;
--   vr: a fetched node q passes a share beta on when beta / s_q >= theta (s_q
--       before the update); deeper nodes are updated only under that rule;
--   ar: fetched targets accumulate a_q; when a_q / s_q > threshold, a_q is passed
--       on and zeroed.
-- E (record's, one page): queue = propagation entries {id, amount} (amount -1: take
-- a_q, ar), queued = ar's nodes with an entry waiting in queue.
RULES.ipr = {}

function RULES.ipr.first(p, n, P)
  local share = 0
  p.s = p.s + P.initial
  if n > 0 then share = p.s / n end
  p.a = 0
  return share
end

-- a known target r (id tid) got `gain` (its score was `before`)
function RULES.ipr.on_link(E, P, pid, tid, r, gain, before)
  if gain ~= 0 and r.st == 2 and tid ~= pid then
    local cutoff, param, queue = P.cutoff, P.param, E.queue
    if cutoff == 'pl' then
      queue[#queue + 1] = {tid, gain}
    elseif cutoff == 'vr' then
      if before == 0 or gain / before >= param then queue[#queue + 1] = {tid, gain} end
    elseif cutoff == 'ar' then
      r.a = r.a + gain
      if r.a / r.s > param and not E.queued[tid] then
        E.queued[tid] = true
        queue[#queue + 1] = {tid, -1}
      end
    end
  end
end

-- Propagation beyond the direct targets (pl / vr / ar), at most `cap` updates.
-- Returns the updates done and the entries dropped by the cap.
function RULES.ipr.after(X, E, P, pid, p, first)
  local cutoff, param, cap = P.cutoff, P.param, P.cap
  local updates, dropped = 0, 0
  if first and cutoff ~= 'dl1' then
    local get, touch, queue, queued = X.get, X.touch, E.queue, E.queued
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
  return updates, dropped
end
