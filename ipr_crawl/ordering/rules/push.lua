--! include _rules.lua
--! include _push.lua
-- push (forward push, Andersen, Chung & Lang, FOCS 2006), twin: push.py. At p's first
-- fetch its mass m = s_p + initial is pushed at once: s_p = (1 - d) m stays as its
-- estimate, d m / n goes to every target: an unfetched target's priority s, a
-- fetched target's residual a; then the largest residuals are pushed on the same way
-- until `budget` edge updates are spent (store/lua/_push.lua: the `resid` index,
-- push_residuals). Records carry the index levels (wide).
RULES.push = {wide = true, setup = push_index}

function RULES.push.first(p, n, P)
  local share = 0
  local m = p.s + P.initial
  p.s = (1 - P.damping) * m
  if n > 0 then share = P.damping * m / n end
  p.a = 0
  return share
end

-- a gain to a known node (r, or nil: a node of another bucket or none)
function RULES.push.gain(X, id, r, gain) X.push_gain(id, r, gain) end

-- the page's own residual (a self-loop) or a re-record that changed its out-degree,
-- then, at its first fetch, the push phase
function RULES.push.after(X, E, P, pid, p, first, shared)
  X.resid_index(pid, p)
  if first then
    return push_residuals(P, X.pushing, X.cache, X.get, X.push_gain, X.resid_index, X.touch, X.resid_top, X.resid_left, shared)
  end
  return 0, 0
end
