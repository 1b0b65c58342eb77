"""ifs: in-degree first (blc without its tie key). Lua twin: ``ifs.lua``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NAME = LUA_NAME = "ifs"
CUTOFFS: tuple[str, ...] = ()
TIE = ""


def first(f: Any, page: Any, links: Sequence[tuple[Any, int]]) -> tuple[float, None]:
    return 1.0, None
