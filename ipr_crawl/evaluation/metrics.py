"""Crawl-ordering quality measures of Yamada, Takahashi, Taura & Chikayama 2004,
§4.3 (criteria A and B).

Pure functions over node ids and a final PageRank computed on the whole graph
(e.g. :func:`ipr_crawl.evaluation.graphio.pagerank`).  No Scrapy or Redis imports.

* Criterion A: share of the top pages (top 0.1 %, 1 %, 10 % by final PageRank)
  already fetched, as a curve over the number of pages fetched.
* Criterion B: sum of the final PageRank of the pages fetched so far.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import accumulate

__all__ = ["top_set", "criterion_a_curve", "share_at", "criterion_b_curve"]


def top_set(pagerank: dict[int, float], candidates: Iterable[int], fraction: float) -> set[int]:
    """The ``ceil(fraction * len(candidates))`` candidates of highest PageRank.

    Ties are broken by ascending id.  Duplicate candidates count once.  A
    tiny tolerance keeps e.g. ``0.001 * 100000`` from rounding up to 101.

    Raises:
        ValueError: ``fraction`` outside ``[0, 1]``.
        KeyError: a candidate has no PageRank.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    cands = sorted(set(candidates), key=lambda n: (-pagerank[n], n))
    k = math.ceil(fraction * len(cands) - 1e-9)
    return set(cands[:k])


def criterion_a_curve(fetch_order: Sequence[int], top: set[int]) -> list[float]:
    """Criterion A: ``curve[i]`` = share of ``top`` fetched among the first
    ``i + 1`` pages of ``fetch_order`` (in ``[0, 1]``; a page fetched twice
    counts once).  ``len(curve) == len(fetch_order)``.

    Raises:
        ValueError: ``top`` is empty.
    """
    if not top:
        raise ValueError("top set is empty")
    seen: set[int] = set()
    hits = 0
    total = len(top)
    curve: list[float] = []
    for n in fetch_order:
        if n in top and n not in seen:
            seen.add(n)
            hits += 1
        curve.append(hits / total)
    return curve


def share_at(curve: Sequence[float], fraction_of_pages: float, total_pages: int) -> float:
    """The curve's value after ``max(1, floor(fraction_of_pages * total_pages))``
    pages; if the crawl fetched fewer pages, its last value.

    Raises:
        ValueError: ``curve`` is empty.
    """
    if not curve:
        raise ValueError("empty curve")
    k = max(1, math.floor(fraction_of_pages * total_pages + 1e-9))
    return curve[min(k, len(curve)) - 1]


def criterion_b_curve(fetch_order: Sequence[int], pagerank: dict[int, float]) -> list[float]:
    """Criterion B: ``curve[i]`` = sum of the final PageRank of the distinct
    pages among the first ``i + 1`` fetched (a refetch adds 0; a page with no
    PageRank, e.g. outside the graph, adds 0).  Non-decreasing; at most 1 when
    PageRank sums to 1.
    """
    seen: set[int] = set()

    def gain(n: int) -> float:
        if n in seen:
            return 0.0
        seen.add(n)
        return pagerank.get(n, 0.0)

    return list(accumulate(gain(n) for n in fetch_order))


def criterion_c(fetch_order: Sequence[int], pagerank: dict[int, float], universe: Iterable[int], c: float = 1.0) -> float:
    """Criterion C of Yamada et al. 2004 §4.3, normalised by its worst case.

    ``Σ_i |orderT(i) − orderR(i)| / sqrt(orderT(i) + c)`` over the fetched pages,
    ``orderT`` the 1-based fetch position, ``orderR`` the 1-based rank by true
    PageRank within ``universe`` (ties by id); divided by the same sum for the
    worst case, fetching the same number of pages of ``universe`` in ascending
    PageRank. 0 is the ideal order, 1 the worst; dimensionless.
    """
    ranked = sorted(universe, key=lambda n: (-pagerank[n], n))
    rank = {n: i + 1 for i, n in enumerate(ranked)}
    seen: set[int] = set()
    order = [n for n in fetch_order if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]
    k = len(order)

    def cost(seq: Sequence[int]) -> float:
        return sum(abs(t - rank[n]) / math.sqrt(t + c) for t, n in enumerate(seq, start=1))

    worst = cost(list(reversed(ranked))[:k])
    return cost(order) / worst if worst > 0 else 0.0


def degree_thresholds(out: dict[int, list[int]], nodes: Iterable[int], fraction: float = 0.001) -> tuple[int, int]:
    """Authority and hub thresholds of Matsukubo & Hayashi (§4): the smallest
    in-degree (out-degree) among the top ``fraction`` of pages by in-degree
    (out-degree). Returns ``(in-degree threshold, out-degree threshold)``."""
    nodes = list(nodes)
    indeg: dict[int, int] = dict.fromkeys(nodes, 0)
    for _src, targets in out.items():
        for t in set(targets):
            indeg[t] = indeg.get(t, 0) + 1
    k = max(1, math.ceil(fraction * len(nodes)))
    ins = sorted((indeg.get(n, 0) for n in nodes), reverse=True)
    outs = sorted((len(set(out.get(n, ()))) for n in nodes), reverse=True)
    return ins[k - 1], outs[k - 1]
