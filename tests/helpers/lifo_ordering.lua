--! include _rules.lua
-- lifo (an example, registered by tests/store/test_adding_an_ordering.py only): the URL
-- discovered last is fetched first (depth-first-like); no score update. Twin:
-- lifo_ordering.py.
RULES.lifo = {rescore = false}
function RULES.lifo.priority(r) return r.seq end
