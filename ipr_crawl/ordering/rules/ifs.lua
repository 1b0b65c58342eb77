--! include _rules.lua
-- ifs, twin: ifs.py: every target's in-degree += 1 at a page's first fetch, the
-- highest first (blc without its tie key).
RULES.ifs = {}
function RULES.ifs.first() return 1 end
