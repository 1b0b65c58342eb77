--! include _rules.lua
-- pr (periodic PageRank, Yamada et al. 2004, §4.2), twin: pr.py: no score update at
-- a fetch; the scores come from the PageRank step (set_scores.lua), which re-scores
-- the frontier itself.
RULES.pr = {rescore = false}
