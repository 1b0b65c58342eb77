"""blc: back-link count (Yamada et al. 2004, §4.2). Lua twin: ``blc.lua``.

Every target's back-link count (in-degree) += 1 at a page's first fetch; priority:
more back-links first, ties by the tie key (fewer '/', then the shorter URL:
:func:`ipr_crawl.ordering.urls.tie_key`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NAME = LUA_NAME = "blc"
CUTOFFS: tuple[str, ...] = ()
TIE = "url"


def priority(node: Any, s: float) -> float:
    return s * 16777216 - node.tie


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, None]:
    return 1.0, None
