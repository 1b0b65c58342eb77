"""opic (Abiteboul, Preda & Cobena 2003). Lua twin: ``opic.lua``.

At p's first fetch its history ``a_p += cash s_p``, cash ``s_p / n`` to every target,
``s_p = 0``; a start URL gets ``opic_initial_cash``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NAME = LUA_NAME = "opic"
CUTOFFS: tuple[str, ...] = ()
TIE = ""


def start_score(params: Any) -> float:
    """The score of a URL enqueued from outside a page (a start URL): its cash."""
    return float(params.opic_initial_cash)


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, None]:
    n = len(links)
    share = page.s / n if n > 0 else 0.0
    page.a = page.a + page.s
    page.s = 0.0
    return share, None
