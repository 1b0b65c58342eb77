"""larger-sites-first (``lsf`` in Redis). Lua twin: ``lsf.lua``.

Pops the site with most queued URLs (ties by the site's decimal hash string), the
lowest seq in it; no score update (the record's tie: the site hash).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

NAME = "larger-sites-first"
LUA_NAME = "lsf"
CUTOFFS: tuple[str, ...] = ()
TIE = "site"
RESCORE = False


def priority(node: Any, s: float) -> float:
    return 0.0


def pop(f: Any, queued: Sequence[tuple[Hashable, Any]]) -> Hashable:
    """The next key among ``queued`` ``[(key, node), ...]`` (not empty)."""
    pending: dict[str, int] = {}
    for _, node in queued:
        site = f"{node.tie:.0f}"
        pending[site] = pending.get(site, 0) + 1
    best_site = min(pending, key=lambda site: (-pending[site], site))
    return min((n.seq, k) for k, n in queued if f"{n.tie:.0f}" == best_site)[1]
