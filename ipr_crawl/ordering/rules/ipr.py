"""ipr: incremental PageRank approximation (Yamada, Takahashi, Taura & Chikayama 2004,
§3) and its cut-offs. Lua twin: ``ipr.lua``.

At p's first fetch ``s_p += initial`` (1), then every distinct out-link target q gets
``s_p / outdeg(p)`` (DL1); the PL, VR and AR cut-offs pass scores on beyond the
targets, at most ``propagation_cap`` updates; the frontier pops the highest ``s``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

NAME = LUA_NAME = "ipr"
CUTOFFS: tuple[str, ...] = ("dl1", "pl", "vr", "ar")
TIE = ""
FETCHED = 2


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, None]:
    n = len(links)
    page.s = page.s + f.initial
    share = page.s / n if n > 0 else 0.0
    page.a = 0.0
    return share, None


def on_link(f: Any, state: dict[str, Any], key: Hashable, target: Hashable, node: Any, gain: float,
            before: float) -> None:
    """A known ``target`` (``node``, score ``before`` the gain) got ``gain`` from page ``key``."""
    if node.state != FETCHED or target == key:
        return
    queue, queued = state["queue"], state["queued"]
    if f.cutoff == "pl":
        queue.append([target, gain])
    elif f.cutoff == "vr":
        if before == 0 or gain / before >= f.param:
            queue.append([target, gain])
    elif f.cutoff == "ar":
        node.a = node.a + gain
        if node.a / node.s > f.param and target not in queued:
            queued.add(target)
            queue.append([target, -1.0])


def after(f: Any, state: dict[str, Any]) -> None:
    """After a first fetch's links: the cut-off's propagation (not for DL1)."""
    if f.cutoff != "dl1":
        _propagate(f, state["queue"], state["queued"])


def _propagate(f: Any, queue: list[list[Any]], queued: set[Hashable]) -> None:
    limit: float = f.cap
    if f.cutoff == "pl" and f.param < limit:
        limit = f.param
    updates = 0
    head = 0
    while head < len(queue):
        qid, amount = queue[head]
        q = f.nodes[qid]
        if updates >= limit:
            break
        head += 1
        if f.cutoff == "ar":
            amount = q.a
            q.a = 0.0
            queued.discard(qid)
        od = len(q.out) if q.state == FETCHED else 0
        if od > 0 and amount > 0:
            part = amount / od
            for rid in q.out:
                if updates >= limit:
                    break
                r = f.nodes.get(rid)
                if r is None:
                    continue
                before = r.s
                if f.cutoff == "vr":
                    if before == 0 or part / before >= f.param:
                        r.s = r.s + part
                        updates += 1
                        if r.state == FETCHED:
                            queue.append([rid, part])
                else:
                    r.s = r.s + part
                    updates += 1
                    if r.state == FETCHED:
                        if f.cutoff == "pl":
                            queue.append([rid, part])
                        else:
                            r.a = r.a + part
                            if r.a / r.s > f.param and rid not in queued:
                                queued.add(rid)
                                queue.append([rid, -1.0])
    f.last_propagated = updates
    f.last_dropped = len(queue) - head
