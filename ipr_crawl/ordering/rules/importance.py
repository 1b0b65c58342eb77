"""importance (Matsuoka, Suzuki, Kishi & Ogawa, §2). Lua twin: ``importance.lua``.

At p's first fetch ``f = log2(a * same-site + b * other-site links + 1)``; every
target j gets ``X(j) += (c if same site else d) * f`` (the record's tie: the site hash).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

NAME = LUA_NAME = "importance"
CUTOFFS: tuple[str, ...] = ()
TIE = "site"


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, Callable[[int], float]]:
    a, b, c, d = f.importance
    n = len(links)
    same = sum(1 for _, t in links if t == page.tie)
    x = math.log(a * same + b * (n - same) + 1) / math.log(2)
    same_share, other_share = c * x, d * x
    return 0.0, lambda tie: same_share if tie == page.tie else other_share
