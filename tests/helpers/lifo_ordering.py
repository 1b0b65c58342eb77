"""lifo: an example ordering (tests only): the URL discovered last is fetched first.
Lua twin: ``lifo_ordering.lua``; registered by tests/store/test_adding_an_ordering.py."""

from __future__ import annotations

from typing import Any

NAME = LUA_NAME = "lifo"
CUTOFFS: tuple[str, ...] = ()
TIE = ""
RESCORE = False


def priority(node: Any, s: float) -> float:
    return float(node.seq)
