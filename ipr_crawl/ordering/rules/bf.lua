--! include _rules.lua
-- bf (breadth-first, Yamada et al. 2004, §4.2), twin: bf.py: every priority is 0,
-- so the frontier pops in discovery order (seq); no score update.
RULES.bf = {rescore = false}
function RULES.bf.priority() return 0 end
