"""push: forward push (Andersen, Chung & Lang, FOCS 2006; on growing graphs Zhang,
Lofgren & Goel, KDD 2016). Lua twin: ``push.lua`` (its index: ``store/lua/_push.lua``).

At p's first fetch its mass ``m = s_p + initial`` is pushed: ``s_p = (1 - d) m`` (its
estimate), every target gets ``d m / outdeg(p)``, as priority if unfetched, as
residual ``a`` if fetched; then the residuals of highest level of ``a / outdeg`` (the
mass one edge update moves, to a quarter of an octave: :func:`resid_level`; ties: the
larger id) are pushed the same way until ``push_budget`` edge updates are spent; a
node with more out-links than what is left gives its residual up at once and its
out-links get their shares in this call and the next ones, before any other push.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

NAME = LUA_NAME = "push"
CUTOFFS: tuple[str, ...] = ()
TIE = ""
FETCHED = 2


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


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, None]:
    n = len(links)
    m = page.s + f.initial
    page.s = (1 - f.damping) * m
    share = f.damping * m / n if n > 0 else 0.0
    page.a = 0.0
    return share, None


def gain(node: Any, amount: float) -> None:
    """A known node gets ``amount``: as its residual if fetched, else as its priority."""
    if node.state == FETCHED:
        node.a = node.a + amount
    else:
        node.s = node.s + amount


def indexed(f: Any, node: Any) -> bool:
    """The node's residual is one the push phase may pick."""
    return node.state == FETCHED and node.outdeg > 0 and node.a > 0 and node.a >= f.epsilon


def after(f: Any, state: dict[str, Any]) -> None:
    """After a first fetch's links: the push phase, ``f.budget`` edge updates at most."""
    left, updates = f.budget, 0
    while left > 0:
        if f.pushing is not None:
            qid, part, start = f.pushing
            q = f.nodes[qid]
        else:
            waiting = [(resid_level(n.a / n.outdeg), k) for k, n in f.nodes.items() if indexed(f, n)]
            if not waiting:
                break
            qid = max(waiting)[1]
            q = f.nodes[qid]
            r = q.a
            q.s = q.s + (1 - f.damping) * r
            q.a = 0.0
            part, start = f.damping * r / len(q.out), 0
        od = len(q.out)
        end = min(od, start + left)
        for rid in q.out[start:end]:
            target = f.nodes.get(rid)
            if target is not None:
                gain(target, part)
        if end > start:
            left -= end - start
            updates += end - start
        f.pushing = (qid, part, end) if end < od else None
    f.last_propagated = updates
    f.last_dropped = int(left <= 0 and (f.pushing is not None or any(indexed(f, n) for n in f.nodes.values())))
