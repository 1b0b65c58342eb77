"""Pure-Python statement of the orderings' rules (no Scrapy, no Redis).

:class:`ReferenceFrontier` is the same rule as the Lua scripts of ``lua/``,
written plainly: tests check the scripts against it on random graphs, and
:func:`simulate_crawl` uses it to predict the fetch order of a crawl. Each
ordering's own rule is its module of :mod:`ipr_crawl.ordering.rules` (beside its
Lua twin); this frontier dispatches through that registry.

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

import struct
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.rules import RULES, rule_of
from ipr_crawl.ordering.rules import push as push_rule
from ipr_crawl.ordering.rules.push import resid_level

__all__ = ["ReferenceFrontier", "Node", "priority", "resid_level", "simulate_crawl", "tie_rule_order", "LUA_ORDERINGS"]

QUEUED, FETCHED, FAILED = 0, 2, 3
#: Orderings of this release as the Lua scripts name them (the registry:
#: :data:`ipr_crawl.ordering.rules.RULES`).
LUA_ORDERINGS = tuple(RULES)


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
    rule = getattr(rule_of(ordering), "priority", None)
    return float(rule(node, s)) if rule else s


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
        if ordering not in RULES:
            raise ValueError(f"unknown ordering {params.ordering!r}")
        self.params = params
        #: the ordering's rule (ipr_crawl.ordering.rules)
        self.rule = RULES[ordering]
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
        start_score = getattr(self.rule, "start_score", None)
        if start_score is not None:
            node.s = start_score(self.params)
        return 1

    def record_page(self, key: Hashable, tie: int, links: Sequence[tuple[Hashable, int]]) -> int:
        """Page ``key`` fetched with distinct ``links`` ``[(key, tie), ...]`` in numbering order.

        Returns the number of new URLs; ``last_propagated`` / ``last_dropped``
        hold the propagation counts of this call.
        """
        self.in_flight.discard(key)
        page = self.nodes.get(key) or self._new(key, tie)
        first = page.state != FETCHED
        rule = self.rule
        share: float = 0.0
        link_gain = None
        if first:
            page.state = FETCHED
            page.a = 0.0  # an unfetched node's a is its prior
            if hasattr(rule, "first"):
                share, link_gain = rule.first(self, page, links)
        page.outdeg = len(links)
        page.out = [t for t, _ in links]
        added = 0
        state: dict[str, Any] = {"queue": [], "queued": set()}  # the rule's, for this page
        gain_rule = getattr(rule, "gain", None)
        on_link = getattr(rule, "on_link", None)
        for target, ttie in links:
            gain = share if link_gain is None else link_gain(ttie)
            node = self.nodes.get(target)
            if node is None:
                node = self._new(target, ttie)
                node.s = gain
                added += 1
            elif gain != 0:
                before = node.s
                if gain_rule is not None:
                    gain_rule(node, gain)
                else:
                    node.s = node.s + gain
                if on_link is not None:
                    on_link(self, state, key, target, node, gain, before)
        self.last_propagated = self.last_dropped = 0
        if first and hasattr(rule, "after"):
            rule.after(self, state)
        return added

    def _indexed(self, node: Node) -> bool:
        """push: the node's residual is one the push phase may pick (its rule's)."""
        return push_rule.indexed(self, node)

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
        if hasattr(self.rule, "pop"):
            key = self.rule.pop(self, queued)
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
