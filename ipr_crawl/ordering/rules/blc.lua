--! include _rules.lua
-- blc (Yamada et al. 2004, §4.2), twin: blc.py. Every target's back-link count
-- (in-degree) += 1 at a page's first fetch; priority: more back-links first, ties by
-- the tie key (fewer '/', then the shorter URL: the record's tie).
RULES.blc = {}
function RULES.blc.priority(r, s) return s * 16777216 - r.tie end
function RULES.blc.first() return 1 end
