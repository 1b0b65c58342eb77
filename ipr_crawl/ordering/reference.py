"""Pure-Python statement of the orderings' rules (no Scrapy, no Redis).

:class:`ReferenceFrontier` is the same rule as the Lua scripts of ``lua/``,
written plainly: tests check the scripts against it on random graphs, and
:func:`simulate_crawl` uses it to predict the fetch order of a crawl.

Rules (Yamada, Takahashi, Taura, Chikayama 2004):

- **IPR, DL1 cut-off** (§3): at p's first fetch ``s_p += initial`` (1), then
  every distinct out-link target q gets ``s_p / outdeg(p)``; the frontier pops
  the highest ``s``.
- **BLC** (§4.2): priority = number of fetched pages linking to the URL; ties:
  fewer '/' first, then the shorter URL (:func:`ipr_crawl.ordering.urls.tie_key`).
- **BF** (§4.2): discovery order.
- **push** (forward push, Andersen, Chung & Lang, FOCS 2006; on growing graphs Zhang, Lofgren & Goel, KDD 2016): at
  p's first fetch its mass ``m = s_p + initial`` is pushed: ``s_p = (1 - d) m``
  (its estimate), every target gets ``d m / outdeg(p)``, as priority if unfetched,
  as residual ``a`` if fetched; then the residuals of highest level of ``a / outdeg``
  (the mass one edge update moves, to a quarter of an octave: :func:`resid_level`;
  ties: the larger id) are pushed the same way until ``push_budget`` edge updates are spent; a node
  with more out-links than what is left gives its residual up at once and its
  out-links get their shares in this call and the next ones, before any other push.
- **Prior** (``IPR_PRIOR_CRAWL``; the historical strategy, Baeza-Yates, Castillo,
  Marin & Rodriguez, WWW 2005): a URL an earlier crawl knew starts with ``a =
  prior_weight x`` its PageRank there x that crawl's node count; an unfetched node's
  priority is ``s + a``; ``a`` is reset at its fetch.
- Common tie rule (§4.2): equal priorities are fetched in discovery order, and
  the URLs of one page are numbered with the preferred site class first.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipr_crawl.ordering.params import OrderingParams

__all__ = ["ReferenceFrontier", "Node", "priority", "resid_level", "simulate_crawl", "tie_rule_order", "LUA_ORDERINGS"]

QUEUED, FETCHED, FAILED = 0, 2, 3
#: Orderings as the Lua scripts name them.
LUA_ORDERINGS = ("ipr", "push", "blc", "ifs", "bf", "opic", "importance", "pr", "lsf")


def resid_level(x: float) -> int:
    """push: the level of a residual per out-link ``x = a / outdeg`` (> 0) by which the
    push phase picks the next node: ``4 e + floor(8 (m - 1/2))`` with ``x = m 2**e``,
    ``1/2 <= m < 1`` (C ``frexp``), i.e. a quarter of an octave, so levels differ by a
    factor of at most 1.25. Exact in floating point, the same in Lua (``math.frexp``);
    the ``resid`` ZSET keeps it as the score, and a residual that grows within its level
    costs no write to the index (store schema 5).

    >>> [resid_level(x) for x in (1.0, 1.2, 1.25, 1.99, 2.0, 0.001)]
    [4, 4, 5, 7, 8, -36]
    """
    m, e = math.frexp(x)
    return 4 * e + math.floor((m - 0.5) * 8)


@dataclass
class Node:
    """State of one node: ``state`` (0 queued, 2 fetched, 3 failed), ``seq``,
    score ``s``, accumulated ``a``, ``tie`` field, out-links ``out`` once fetched."""

    seq: int
    tie: int
    s: float = 0.0
    a: float = 0.0
    state: int = QUEUED
    outdeg: int = 0
    out: list[Hashable] = field(default_factory=list)


def tie_rule_order(page_site: Hashable, sites: Sequence[Hashable], tie_rule: str) -> list[int]:
    """Indexes of a page's links in the order new URLs get discovery numbers
    (Yamada et al. 2004, §4.2's tie rule): ``"same-site"`` puts links on ``page_site`` first,
    ``"other-site"`` the others first, ``"none"`` keeps document order; order
    within a class is document order. ``sites``: each link's site.

    >>> tie_rule_order("a", ["b", "a", "b"], "same-site")
    [1, 0, 2]
    """
    if tie_rule == "none":
        return list(range(len(sites)))
    same = [i for i, s in enumerate(sites) if s == page_site]
    other = [i for i, s in enumerate(sites) if s != page_site]
    return same + other if tie_rule == "same-site" else other + same


def priority(ordering: str, node: Node) -> float:
    """Frontier priority of a node (higher is fetched first; ties by lower seq).

    >>> priority("blc", Node(seq=1, tie=5, s=2.0))
    33554427.0
    """
    s = node.s + node.a if node.state == QUEUED else node.s  # a queued node's a: its prior
    if ordering == "blc":
        return s * 16777216 - node.tie
    if ordering in ("bf", "lsf", "larger-sites-first"):
        return 0.0
    return s


class ReferenceFrontier:
    """In-memory frontier with exactly the rules of the Lua scripts.

    Node keys are any hashable (node ids of a graph, or 8-byte ids). ``in_flight``
    nodes are popped and not yet recorded, as with leases. Parameters as in
    :class:`~ipr_crawl.ordering.OrderingParams`.
    """

    def __init__(
        self, params: OrderingParams | str = "ipr", prior: dict[Hashable, float] | None = None, **kwargs: Any
    ) -> None:
        if isinstance(params, str):
            kwargs.setdefault("cutoff", "dl1" if params == "ipr" else "")
            params = OrderingParams(ordering=params, **kwargs)
        elif kwargs:
            raise TypeError("ReferenceFrontier: give an OrderingParams or keywords, not both")
        ordering = params.lua_name
        if ordering not in LUA_ORDERINGS:
            raise ValueError(f"unknown ordering {params.ordering!r}")
        self.params = params
        self.ordering = ordering
        self.cutoff = params.cutoff or "dl1"
        self.initial = float(params.initial_score)
        self.param = params.cutoff_param
        self.cap = int(params.propagation_cap)
        self.importance = tuple(float(x) for x in params.importance)
        self.cash = float(params.opic_initial_cash)
        self.budget = int(params.push_budget)
        self.damping = float(params.push_damping)
        self.epsilon = float(params.push_epsilon)
        #: push: the hub being pushed in parts, (key, share per link, next link index)
        self.pushing: tuple[Hashable, float, int] | None = None
        #: IPR_PRIOR_CRAWL: key -> the earlier crawl's PageRank x its node count; a new
        #: node's a is prior_weight x that value (as float32, as the store keeps it)
        self.prior = {k: struct.unpack(">f", struct.pack(">f", v))[0] for k, v in (prior or {}).items()}
        self.prior_weight = float(params.prior_weight)
        self.nodes: dict[Hashable, Node] = {}
        self.in_flight: set[Hashable] = set()
        self.seq = 0
        self.last_propagated = 0
        self.last_dropped = 0

    def _new(self, key: Hashable, tie: int) -> Node:
        self.seq += 1
        node = self.nodes[key] = Node(seq=self.seq, tie=tie)
        if key in self.prior:
            node.a = self.prior_weight * self.prior[key]
        return node

    def enqueue(self, key: Hashable, tie: int) -> int:
        """A request from outside a page (a start URL): 1 if new, 0 if known."""
        if key in self.nodes:
            return 0
        node = self._new(key, tie)
        if self.ordering == "opic":
            node.s = self.cash
        return 1

    def record_page(self, key: Hashable, tie: int, links: Sequence[tuple[Hashable, int]]) -> int:
        """Page ``key`` fetched with distinct ``links`` ``[(key, tie), ...]`` in numbering order.

        Returns the number of new URLs; ``last_propagated`` / ``last_dropped``
        hold the propagation counts of this call.
        """
        self.in_flight.discard(key)
        page = self.nodes.get(key) or self._new(key, tie)
        first = page.state != FETCHED
        n = len(links)
        share = same_share = other_share = 0.0
        if first:
            page.state = FETCHED
            page.a = 0.0  # an unfetched node's a is its prior
            if self.ordering == "ipr":
                page.s = page.s + self.initial
                if n > 0:
                    share = page.s / n
                page.a = 0.0
            elif self.ordering == "push":
                m = page.s + self.initial
                page.s = (1 - self.damping) * m
                if n > 0:
                    share = self.damping * m / n
                page.a = 0.0
            elif self.ordering in ("blc", "ifs"):
                share = 1.0
            elif self.ordering == "opic":
                if n > 0:
                    share = page.s / n
                page.a = page.a + page.s
                page.s = 0.0
            elif self.ordering == "importance":
                a, b, c, d = self.importance
                same = sum(1 for _, t in links if t == page.tie)
                f = math.log(a * same + b * (n - same) + 1) / math.log(2)
                same_share, other_share = c * f, d * f
        page.outdeg = n
        page.out = [t for t, _ in links]
        added = 0
        queue: list[list[Any]] = []
        queued: set[Hashable] = set()
        for target, ttie in links:
            gain = share
            if self.ordering == "importance" and first:
                gain = same_share if ttie == page.tie else other_share
            node = self.nodes.get(target)
            if node is None:
                node = self._new(target, ttie)
                node.s = gain
                added += 1
            elif self.ordering == "push":
                if gain != 0:
                    self._push_gain(node, gain)
            elif gain != 0:
                before = node.s
                node.s = node.s + gain
                if self.ordering == "ipr" and node.state == FETCHED and target != key:
                    if self.cutoff == "pl":
                        queue.append([target, gain])
                    elif self.cutoff == "vr":
                        if before == 0 or gain / before >= self.param:
                            queue.append([target, gain])
                    elif self.cutoff == "ar":
                        node.a = node.a + gain
                        if node.a / node.s > self.param and target not in queued:
                            queued.add(target)
                            queue.append([target, -1.0])
        self.last_propagated = self.last_dropped = 0
        if self.ordering == "ipr" and first and self.cutoff != "dl1":
            self._propagate(queue, queued)
        if self.ordering == "push" and first:
            self._push_residuals()
        return added

    @staticmethod
    def _push_gain(node: Node, gain: float) -> None:
        if node.state == FETCHED:
            node.a = node.a + gain
        else:
            node.s = node.s + gain

    def _indexed(self, node: Node) -> bool:
        """push: the node's residual is one the push phase may pick."""
        return node.state == FETCHED and node.outdeg > 0 and node.a > 0 and node.a >= self.epsilon

    def _push_residuals(self) -> None:
        left, updates = self.budget, 0
        while left > 0:
            if self.pushing is not None:
                qid, part, start = self.pushing
                q = self.nodes[qid]
            else:
                waiting = [(resid_level(n.a / n.outdeg), k) for k, n in self.nodes.items() if self._indexed(n)]
                if not waiting:
                    break
                qid = max(waiting)[1]
                q = self.nodes[qid]
                r = q.a
                q.s = q.s + (1 - self.damping) * r
                q.a = 0.0
                part, start = self.damping * r / len(q.out), 0
            od = len(q.out)
            end = min(od, start + left)
            for rid in q.out[start:end]:
                target = self.nodes.get(rid)
                if target is not None:
                    self._push_gain(target, part)
            if end > start:
                left -= end - start
                updates += end - start
            self.pushing = (qid, part, end) if end < od else None
        self.last_propagated = updates
        self.last_dropped = int(
            left <= 0 and (self.pushing is not None or any(self._indexed(n) for n in self.nodes.values()))
        )

    def _propagate(self, queue: list[list[Any]], queued: set[Hashable]) -> None:
        limit: float = self.cap
        if self.cutoff == "pl" and self.param < limit:
            limit = self.param
        updates = 0
        head = 0
        while head < len(queue):
            qid, amount = queue[head]
            q = self.nodes[qid]
            if updates >= limit:
                break
            head += 1
            if self.cutoff == "ar":
                amount = q.a
                q.a = 0.0
                queued.discard(qid)
            od = len(q.out) if q.state == FETCHED else 0
            if od > 0 and amount > 0:
                part = amount / od
                for rid in q.out:
                    if updates >= limit:
                        break
                    r = self.nodes.get(rid)
                    if r is None:
                        continue
                    before = r.s
                    if self.cutoff == "vr":
                        if before == 0 or part / before >= self.param:
                            r.s = r.s + part
                            updates += 1
                            if r.state == FETCHED:
                                queue.append([rid, part])
                    else:
                        r.s = r.s + part
                        updates += 1
                        if r.state == FETCHED:
                            if self.cutoff == "pl":
                                queue.append([rid, part])
                            else:
                                r.a = r.a + part
                                if r.a / r.s > self.param and rid not in queued:
                                    queued.add(rid)
                                    queue.append([rid, -1.0])
        self.last_propagated = updates
        self.last_dropped = len(queue) - head

    def fail(self, key: Hashable) -> None:
        """A final failure: the node is not fetched again."""
        self.in_flight.discard(key)
        node = self.nodes.get(key)
        if node is not None and node.state == QUEUED:
            node.state = FAILED

    def set_score(self, key: Hashable, score: float) -> None:
        """The ``pr`` ordering's periodic step: overwrite a node's score."""
        self.nodes[key].s = score

    def pop(self) -> Hashable | None:
        """The next node to fetch, now in flight: the highest priority and lowest
        seq; larger-sites-first: the site with most queued URLs (ties by the
        site's decimal hash string), lowest seq in it."""
        queued = [
            (k, n) for k, n in self.nodes.items() if n.state == QUEUED and k not in self.in_flight
        ]
        if not queued:
            return None
        if self.ordering == "lsf":
            pending: dict[str, int] = {}
            for _, node in queued:
                site = f"{node.tie:.0f}"
                pending[site] = pending.get(site, 0) + 1
            best_site = min(pending, key=lambda site: (-pending[site], site))
            key = min((n.seq, k) for k, n in queued if f"{n.tie:.0f}" == best_site)[1]
        else:
            key = min(queued, key=lambda kn: (-priority(self.ordering, kn[1]), kn[1].seq))[0]
        self.in_flight.add(key)
        return key


def simulate_crawl(
    out_links: dict[Hashable, Sequence[Hashable]],
    seeds: Iterable[Hashable],
    ordering: str,
    tie: dict[Hashable, int] | None = None,
    initial_score: float = 1.0,
    limit: int | None = None,
    prior: dict[Hashable, float] | None = None,
    prior_weight: float = 1.0,
) -> list[Hashable]:
    """Fetch order of a one-at-a-time crawl of a graph (no tie-rule reordering:
    one site). ``ordering`` as ``IPR_ORDERING`` (``"ipr:ar"``, ``"blc"``, ...) with
    the default parameters; ``out_links`` in document order; duplicates are
    dropped as the middleware drops them. O(pages × frontier): for small graphs
    and tests. ``prior``: node -> the earlier crawl's PageRank x its node count
    (``IPR_PRIOR_CRAWL``), weighted by ``prior_weight``.
    """
    tie = tie or {}
    name, _, cutoff = ordering.partition(":")
    frontier = ReferenceFrontier(name, prior=prior, initial_score=initial_score, cutoff=cutoff or "dl1",
                                 prior_weight=prior_weight)
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
