"""Pure-Python statement of the orderings' rules (no Scrapy, no Redis).

:class:`ReferenceFrontier` is the same rule as the Lua scripts of ``lua/``,
written plainly: tests check the scripts against it on random graphs, and
:func:`simulate_crawl` uses it to predict the fetch order of a crawl.

Rules (Yamada, Takahashi, Taura, Chikayama 2004):

- **IPR, DL1 cut-off** (§3): at p's first fetch ``s_p += initial`` (1), then
  every distinct out-link target q gets ``s_p / outdeg(p)``; the frontier pops
  the highest ``s``.
- **BLC** (§4.2): priority = number of fetched pages linking to the URL; ties:
  fewer '/' first, then the shorter URL (:func:`ipr_crawl.urls.tie_key`).
- **BF** (§4.2): discovery order.
- Common tie rule (§4.2): equal priorities are fetched in discovery order, and
  the URLs of one page are numbered with the preferred site class first.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ReferenceFrontier", "Node", "priority", "simulate_crawl"]

QUEUED, FETCHED, FAILED = 0, 2, 3


@dataclass
class Node:
    """State of one node: ``state`` (0 queued, 2 fetched, 3 failed), ``seq``, ``s``, ``tie``."""

    seq: int
    tie: int
    s: float = 0.0
    state: int = QUEUED
    outdeg: int = 0


def priority(ordering: str, node: Node) -> float:
    """Frontier priority of a node (higher is fetched first; ties by lower seq).

    >>> priority("blc", Node(seq=1, tie=5, s=2.0))
    33554427.0
    """
    if ordering == "blc":
        return node.s * 16777216 - node.tie
    if ordering == "ipr":
        return node.s
    return 0.0


class ReferenceFrontier:
    """In-memory frontier with exactly the rules of the Lua scripts.

    Node keys are any hashable (node ids of a graph, or 8-byte ids). ``in_flight``
    nodes are popped and not yet recorded, as with leases.
    """

    def __init__(self, ordering: str = "ipr", initial_score: float = 1.0) -> None:
        if ordering not in ("ipr", "blc", "bf"):
            raise ValueError(f"unknown ordering {ordering!r}")
        self.ordering = ordering
        self.initial = float(initial_score)
        self.nodes: dict[Hashable, Node] = {}
        self.in_flight: set[Hashable] = set()
        self.seq = 0

    def _new(self, key: Hashable, tie: int) -> Node:
        self.seq += 1
        node = self.nodes[key] = Node(seq=self.seq, tie=tie)
        return node

    def enqueue(self, key: Hashable, tie: int) -> int:
        """A request from outside a page (a start URL): 1 if new, 0 if known."""
        if key in self.nodes:
            return 0
        self._new(key, tie)
        return 1

    def record_page(self, key: Hashable, tie: int, links: Sequence[tuple[Hashable, int]]) -> int:
        """Page ``key`` fetched with distinct ``links`` ``[(key, tie), ...]`` in numbering order.

        Returns the number of new URLs.
        """
        self.in_flight.discard(key)
        page = self.nodes.get(key) or self._new(key, tie)
        first = page.state != FETCHED
        beta = 0.0
        n = len(links)
        if first:
            page.state = FETCHED
            if self.ordering == "ipr":
                page.s = page.s + self.initial
                if n > 0:
                    beta = page.s / n
            elif self.ordering == "blc":
                beta = 1.0
        page.outdeg = n
        added = 0
        for target, ttie in links:
            if target == key:
                page.s = page.s + beta
                continue
            node = self.nodes.get(target)
            if node is None:
                node = self._new(target, ttie)
                node.s = beta
                added += 1
            elif beta != 0:
                node.s = node.s + beta
        return added

    def fail(self, key: Hashable) -> None:
        """A final failure: the node is not fetched again."""
        self.in_flight.discard(key)
        node = self.nodes.get(key)
        if node is not None and node.state == QUEUED:
            node.state = FAILED

    def pop(self) -> Hashable | None:
        """The queued node of highest priority (lowest seq among equals), now in flight."""
        best, best_key = None, None
        for key, node in self.nodes.items():
            if node.state != QUEUED or key in self.in_flight:
                continue
            rank = (-priority(self.ordering, node), node.seq)
            if best is None or rank < best:
                best, best_key = rank, key
        if best_key is not None:
            self.in_flight.add(best_key)
        return best_key


def simulate_crawl(
    out_links: dict[Hashable, Sequence[Hashable]],
    seeds: Iterable[Hashable],
    ordering: str,
    tie: dict[Hashable, int] | None = None,
    initial_score: float = 1.0,
    limit: int | None = None,
) -> list[Hashable]:
    """Fetch order of a one-at-a-time crawl of a graph (no tie-rule reordering:
    one site). ``out_links`` in document order; duplicates are dropped as the
    middleware drops them. O(pages × frontier): for small graphs and tests.
    """
    tie = tie or {}
    frontier = ReferenceFrontier(ordering, initial_score)
    for seed in seeds:
        frontier.enqueue(seed, tie.get(seed, 0))
    order: list[Hashable] = []
    while limit is None or len(order) < limit:
        key = frontier.pop()
        if key is None:
            break
        order.append(key)
        seen: dict[Hashable, None] = {}
        for target in out_links.get(key, ()):
            seen.setdefault(target, None)
        frontier.record_page(key, tie.get(key, 0), [(t, tie.get(t, 0)) for t in seen])
    return order
