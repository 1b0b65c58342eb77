"""A real graph replayed through the frontier's scripts, without HTTP: pop one URL,
"fetch" it by reading its out-links from the graph, record it, repeat
(:func:`run_ordering`), or the same loop inside Redis (:func:`run_ordering_in_redis`).
What :mod:`ipr_crawl.evaluation.simulate` measures; the store is
:class:`ipr_crawl.store.ReplayStore`, the same Lua scripts as a crawl.

A node ``n`` of the graph is the 8-byte id ``n`` big-endian (:func:`graph_node_id`);
its site and its tie field are those of its URL when the graph has a URL map
(:class:`Replay`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ipr_crawl.evaluation.graphio import Graph
from ipr_crawl.ordering.reference import tie_rule_order
from ipr_crawl.ordering.urls import site_hash, site_of, tie_by, tie_key
from ipr_crawl.store import Link
from ipr_crawl.store.replay import ReplayStore

__all__ = ["Replay", "graph_node_id", "link_extension_seconds", "load_replay_graph", "run_ordering",
           "run_ordering_in_redis"]


def graph_node_id(n: int) -> bytes:
    """The store's 8-byte id of graph node ``n`` (big-endian).

    >>> graph_node_id(258).hex()
    '0000000000000102'
    """
    return n.to_bytes(8, "big")


class Replay:
    """One graph prepared for replays: node sites, tie keys and link orders.

    ``urls`` gives hosts (``site_of``) and BLC tie keys (``tie_key`` of the URL);
    without it every node is its own site and the BLC tie key is 0.
    ``tie_rule``: ``same-site`` | ``other-site`` | ``none`` (Yamada et al. 2004, §4.2).
    """

    def __init__(self, graph: Graph, urls: dict[int, str] | None, tie_rule: str = "same-site") -> None:
        self.graph = graph
        self.urls = urls
        self.tie_rule = tie_rule
        self._site: dict[int, str] = {}
        self._site_hash: dict[str, int] = {}

    def site(self, n: int) -> str:
        s = self._site.get(n)
        if s is None:
            url = self.urls.get(n) if self.urls else None
            s = site_of(url) if url else f"node-{n}"
            self._site[n] = s
        return s

    def tie(self, ordering: str, n: int) -> int:
        """The record's tie field for node ``n`` under ``ordering``: the rule is
        :func:`ipr_crawl.ordering.urls.tie_by`'s, applied to the node's URL as the map
        gives it (no URL: tie key 0, and the site ``node-<n>``)."""
        by = tie_by(ordering)
        if by == "url":
            url = self.urls.get(n) if self.urls else None
            return tie_key(url) if url else 0
        if by == "site":
            s = self.site(n)
            h = self._site_hash.get(s)
            if h is None:
                h = self._site_hash[s] = site_hash(s)
            return h
        return 0

    def links(self, n: int) -> list[int]:
        """Distinct out-links of ``n`` in the order new URLs are numbered."""
        targets = list(dict.fromkeys(self.graph.out.get(n, ())))
        if self.tie_rule == "none" or len(targets) < 2:
            return targets
        order = tie_rule_order(self.site(n), [self.site(t) for t in targets], self.tie_rule)
        return [targets[i] for i in order]


def run_ordering(
    replay: Replay,
    store: ReplayStore,
    ordering: str,
    seed: int,
    budget: int,
    pr_interval: int,
    damping: float,
    progress: Any = None,
) -> dict[str, Any]:
    """Replay through ``store`` until ``budget`` pages or an empty frontier.

    Returns ``{"order": [...], "pop_seconds", "record_seconds", "pr_seconds",
    "propagated", "dropped"}``.
    """
    store.open()
    store.enqueue(graph_node_id(seed), replay.tie(ordering, seed), b"", False)
    order: list[int] = []
    t_pop = t_rec = t_pr = 0.0
    propagated = dropped = 0
    since_pr = 0
    perf = time.perf_counter
    tie = replay.tie
    while len(order) < budget:
        t0 = perf()
        _, items = store.pop(1, 3600)
        t1 = perf()
        t_pop += t1 - t0
        if not items:
            break
        member = items[0][0]
        n = int.from_bytes(member[8:], "big")
        order.append(n)
        links = [Link(graph_node_id(t), tie(ordering, t), b"") for t in replay.links(n)]
        t2 = perf()
        res = store.record_page(member[8:], tie(ordering, n), links, member)
        t_rec += perf() - t2
        propagated += res.propagated
        dropped += res.dropped
        if ordering == "pr" and res.first:
            since_pr += 1
            if since_pr >= pr_interval:
                since_pr = 0
                t3 = perf()
                store.pagerank_step(damping)
                t_pr += perf() - t3
        if progress is not None:
            progress.update(1)
    return {"order": order, "pop_seconds": t_pop, "record_seconds": t_rec, "pr_seconds": t_pr,
            "propagated": propagated, "dropped": dropped}


def load_replay_graph(replay: Replay, store: ReplayStore, ordering: str, nodes: Sequence[int]) -> None:
    """Put the out-links of ``nodes`` into the store's ``graph`` hash for replay.lua."""
    tie = replay.tie
    store.load_graph(
        (graph_node_id(n), tie(ordering, n), [(graph_node_id(t), tie(ordering, t)) for t in replay.links(n)])
        for n in nodes
    )


def run_ordering_in_redis(
    replay: Replay,
    store: ReplayStore,
    ordering: str,
    seed: int,
    budget: int,
    pr_interval: int,
    damping: float,
    progress: Any = None,
    batch: int = 500,
) -> dict[str, Any]:
    """As :func:`run_ordering`, but the pop-record loop runs inside Redis
    (replay.lua) over the graph loaded with :func:`load_replay_graph`, ``batch``
    pages per call: the same rules without a round trip per page."""
    store.open()
    store.enqueue(graph_node_id(seed), replay.tie(ordering, seed), b"", False)
    order: list[int] = []
    t_rec = t_pr = 0.0
    propagated = dropped = 0
    since_pr = 0
    perf = time.perf_counter
    while len(order) < budget:
        count = min(batch, budget - len(order))
        if ordering == "push":  # keep one call's push work well under Redis' script time limit
            count = min(count, max(1, 50000 // max(1, store.params.push_budget)))
        if ordering == "pr":
            count = min(count, pr_interval - since_pr)
        t0 = perf()
        ids, first, upd, drop = store.replay(count)
        t_rec += perf() - t0
        order.extend(int.from_bytes(i, "big") for i in ids)
        propagated += upd
        dropped += drop
        if progress is not None:
            progress.update(len(ids))
        if ordering == "pr":
            since_pr += first
            if since_pr >= pr_interval:
                since_pr = 0
                t1 = perf()
                store.pagerank_step(damping)
                t_pr += perf() - t1
        if len(ids) < count:
            break
    return {"order": order, "pop_seconds": 0.0, "record_seconds": t_rec, "pr_seconds": t_pr,
            "propagated": propagated, "dropped": dropped}


def link_extension_seconds(
    replay: Replay, store: ReplayStore, order: Sequence[int], in_redis: bool
) -> float:
    """Time of recording the same pages in the same order under ``bf`` (graph
    extension only, no score update), the way the run itself recorded them."""
    store.open()
    if order:
        store.enqueue(graph_node_id(order[0]), 0, b"", False)
    total = 0.0
    perf = time.perf_counter
    if in_redis:
        ids = [graph_node_id(n) for n in order]
        for i in range(0, len(ids), 500):
            t0 = perf()
            store.replay_record(ids[i : i + 500])
            total += perf() - t0
        return total
    for n in order:
        links = [Link(graph_node_id(t), 0, b"") for t in replay.links(n)]
        t0 = perf()
        store.record_page(graph_node_id(n), 0, links)
        total += perf() - t0
    return total
