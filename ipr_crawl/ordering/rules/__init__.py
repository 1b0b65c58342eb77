"""The orderings' rules, one module each, beside its Lua twin of the same name
(``<name>.py`` and ``<name>.lua``), and their registry.

A rule module names its ordering (``NAME``, the ``IPR_ORDERING`` value; ``LUA_NAME``,
the name inside Redis), its cut-offs (``CUTOFFS``) and what the record's tie holds
(``TIE``: ``"url"``, ``"site"`` or ``""``), and defines the parts of the rule it has,
each optional, as its Lua twin does (``store/lua/_rules.lua`` lists the Lua side):
``priority(node, s)`` (default ``s``), ``RESCORE`` (default True), ``start_score(params)``
(a URL from outside a page; default 0), ``first(f, page, links) -> (share, link_gain)``
(at a page's first fetch), ``gain(node, amount)`` (a known node's gain; default
``s += amount``), ``on_link(...)``, ``after(f, state)`` and ``pop(f, queued)``; ``f``
is the :class:`~ipr_crawl.ordering.reference.ReferenceFrontier`.

Adding an ordering: its two files here and one line in :data:`BUILTIN` (or
:func:`register` at run time, as a test does).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ipr_crawl.ordering.rules import bf, blc, ifs, importance, ipr, lsf, opic, pr, push

__all__ = ["BUILTIN", "LUA_NAMES", "ORDERINGS", "RULES", "TIE_BY", "lua_source", "register", "rule_of", "unregister"]

#: The orderings of this release, in the order ``IPR_ORDERING``'s help lists them.
BUILTIN: tuple[ModuleType, ...] = (ipr, push, blc, ifs, importance, pr, opic, lsf, bf)

#: Lua name -> rule module.
RULES: dict[str, ModuleType] = {}
#: ``IPR_ORDERING`` value -> its cut-offs.
ORDERINGS: dict[str, tuple[str, ...]] = {}
#: Short names used inside Redis (``store/lua/``) for orderings with long names.
LUA_NAMES: dict[str, str] = {}
#: What the record's ``tie`` field holds under each ordering that has one (both names):
#: ``url``, the BLC tie key of the URL; ``site``, the hash of its site. Other orderings: 0.
TIE_BY: dict[str, str] = {}


def register(rule: ModuleType) -> None:
    """Make ``rule`` an ordering: the scripts built afterwards and the reference know it."""
    RULES[rule.LUA_NAME] = rule
    ORDERINGS[rule.NAME] = tuple(rule.CUTOFFS)
    if rule.NAME != rule.LUA_NAME:
        LUA_NAMES[rule.NAME] = rule.LUA_NAME
    if rule.TIE:
        TIE_BY[rule.NAME] = TIE_BY[rule.LUA_NAME] = rule.TIE


def unregister(rule: ModuleType) -> None:
    """Undo :func:`register` (a test's ordering)."""
    RULES.pop(rule.LUA_NAME, None)
    ORDERINGS.pop(rule.NAME, None)
    LUA_NAMES.pop(rule.NAME, None)
    for name in (rule.NAME, rule.LUA_NAME):
        TIE_BY.pop(name, None)


for _rule in BUILTIN:
    register(_rule)


def rule_of(ordering: str) -> ModuleType | None:
    """The rule of an ordering by either of its names, or None."""
    return RULES.get(LUA_NAMES.get(ordering, ordering))


def lua_source(lua_name: str) -> str:
    """The Lua twin of a registered rule: the ``.lua`` file beside its module."""
    rule = RULES[lua_name]
    return Path(str(rule.__file__)).with_suffix(".lua").read_text(encoding="utf-8")
