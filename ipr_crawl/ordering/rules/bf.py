"""bf: breadth-first (Yamada et al. 2004, §4.2): discovery order. Lua twin: ``bf.lua``."""

from __future__ import annotations

from typing import Any

NAME = LUA_NAME = "bf"
CUTOFFS: tuple[str, ...] = ()
TIE = ""
RESCORE = False


def priority(node: Any, s: float) -> float:
    """Every node alike: the lower seq first."""
    return 0.0
