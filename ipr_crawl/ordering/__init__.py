"""Pure rules of the frontier orderings (no Scrapy, no Redis, no Twisted).

- :mod:`~ipr_crawl.ordering.params`: the orderings, their parameters and defaults
  (:class:`OrderingParams`, the one owner of the Lua argument list).
- :mod:`~ipr_crawl.ordering.reference`: the rules written plainly
  (:class:`ReferenceFrontier`), against which the Lua scripts are tested.
- :mod:`~ipr_crawl.ordering.urls`: a URL's canonical form, node id, site and tie keys.
- :mod:`~ipr_crawl.ordering.pagerank`: the ``pr`` ordering's power iteration (numpy/scipy).
"""

from ipr_crawl.ordering.params import LUA_NAMES, ORDERINGS, TIE_RULES, OrderingParams, parse_ordering
from ipr_crawl.ordering.reference import ReferenceFrontier, priority, simulate_crawl, tie_rule_order

__all__ = [
    "LUA_NAMES", "ORDERINGS", "TIE_RULES", "OrderingParams", "ReferenceFrontier", "parse_ordering",
    "priority", "simulate_crawl", "tie_rule_order",
]
