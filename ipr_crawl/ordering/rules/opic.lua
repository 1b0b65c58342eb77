--! include _rules.lua
-- opic (Abiteboul et al. 2003), twin: opic.py: at p's first fetch its history
-- a_p += cash s_p, cash s_p / n to every target, s_p = 0 (a start URL's cash is
-- enqueue.lua's ARGV[7]).
RULES.opic = {}
function RULES.opic.first(p, n)
  local share = 0
  if n > 0 then share = p.s / n end
  p.a = p.a + p.s
  p.s = 0
  return share
end
