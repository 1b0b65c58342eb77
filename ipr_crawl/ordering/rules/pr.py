"""pr: periodic PageRank (Yamada et al. 2004, §4.2). Lua twin: ``pr.lua``.

No score update at a fetch: the scores come from the periodic PageRank step
(:mod:`ipr_crawl.ordering.pagerank`, ``set_scores.lua``; ``ReferenceFrontier.set_score``).
"""

from __future__ import annotations

NAME = LUA_NAME = "pr"
CUTOFFS: tuple[str, ...] = ()
TIE = ""
RESCORE = False
