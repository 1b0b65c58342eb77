"""The one loader of the Lua scripts: a script with what it includes, nothing more.

Every script of ``store/lua/`` (frontier and revisit alike) names the files it needs
on lines of its own::

    --! include _leases.lua

and :func:`script_source` builds it: each include in front, once, after what it
includes itself (depth first, in the order written), then the script. An include
is a file of ``store/lua/`` (the shared parts, named ``_*.lua``), an ordering's rule
``rule:<name>`` (``ipr_crawl/ordering/rules/<name>.lua``, beside its Python twin) or
one of the :data:`GENERATED` ones, written from Python: ``_record_format.lua``
(``REC``, ``REC_SIZE``: :mod:`ipr_crawl.store.record`), ``_ordering_args.lua``
(``params_from``, ``N_ORDERING_ARGS``: :data:`ipr_crawl.ordering.params.LUA_ARGS`) and
``_orderings.lua`` (every registered ordering's rule, or the one a script is built
for, and ``rule_of``: :mod:`ipr_crawl.ordering.rules`) and ``_derived_keys.lua``
(``derived_key``, ``tail_key``: the keys :data:`ipr_crawl.store.keys.DERIVED_KEYS`
names, taken from ``KEYS``, where no script builds a key name). A missing include or a cycle
raises :class:`LuaIncludeError` naming the chain.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Callable, Sequence

from ipr_crawl.ordering.params import LUA_ARGS
from ipr_crawl.ordering.rules import RULES, lua_source
from ipr_crawl.store.keys import DERIVED_KEYS
from ipr_crawl.store.lua_keys import key_check_on, with_key_check
from ipr_crawl.store.record import lua_definitions

__all__ = ["GENERATED", "LuaIncludeError", "include_order", "includes_of", "script_source", "script_text"]

#: An include line: ``--! include <file>`` alone on its line.
INCLUDE = re.compile(r"^--! include (\S+)[ \t]*$", re.M)


class LuaIncludeError(ValueError):
    """A script names an include that does not exist, or its includes form a cycle."""


def ordering_args() -> str:
    """``params_from(argv, i)``: the ordering arguments of :data:`LUA_ARGS` as a table
    (the first two are strings, the rest numbers), and ``N_ORDERING_ARGS``."""
    fields = []
    for k, name in enumerate(LUA_ARGS):
        value = f"argv[i + {k}]" if k else "argv[i]"
        fields.append(f"{name} = {value if k < 2 else f'tonumber({value})'}")
    return (
        f"local N_ORDERING_ARGS = {len(LUA_ARGS)}\n"
        "local function params_from(argv, i)\n  return {" + ", ".join(fields) + "}\nend\n"
    )


def orderings(only: str | None = None) -> str:
    """``_orderings.lua``: an include line for each registered ordering's rule (or for
    ``only``'s, a Lua name), then ``rule_of(name)``: its rule table, or an empty one
    for a name no rule has (the frontier's defaults: priority s, no score update)."""
    names = list(RULES) if only is None else [only] if only in RULES else []
    return "--! include _rules.lua\n" + "".join(f"--! include rule:{name}\n" for name in names) + (
        "local NO_RULE = {}\n"
        "local function rule_of(ordering) return RULES[ordering] or NO_RULE end\n"
    )


def derived_keys() -> str:
    """``_derived_keys.lua``: every key a script touches beside its own is taken from its
    ``KEYS``, never built from another key's name (Redis's EVAL documentation, "Script
    parameterization"; on a Redis Cluster a key built in a script is not checked before it
    runs). ``derived_key(name)``: the callers put :data:`DERIVED_KEYS` in that order after a
    script's own keys, found by the first (``lease_by``); ``tail_key(name)``: a key after them
    (a bucket's ``outbox:<b>``, a prior's ``prior:<b>``), by its name after the hash tag. An
    error names a key not given."""
    offsets = ", ".join(f"{name} = {i}" for i, name in enumerate(DERIVED_KEYS))
    first = DERIVED_KEYS[0]
    return (
        "-- store/keys.py DERIVED_KEYS, each key's place after the first (generated: lua_loader.py)\n"
        f"local DERIVED = {{{offsets}}}\n"
        "local DERIVED_AT, TAIL = nil, nil\n"
        "local function derived_key(name)\n"
        "  if DERIVED_AT == nil then\n"
        "    for i = 1, #KEYS do\n"
        f"      if string.sub(KEYS[i], -{len(first) + 1}) == ':{first}' then DERIVED_AT = i; break end\n"
        "    end\n"
        "    if DERIVED_AT == nil then error('ipr: no store/keys.py DERIVED_KEYS in KEYS') end\n"
        "  end\n"
        "  return KEYS[DERIVED_AT + DERIVED[name]]\n"
        "end\n"
        "local function tail_key(name)\n"
        "  if TAIL == nil then\n"
        "    derived_key('lease_by')\n"
        "    TAIL = {}\n"
        f"    for i = DERIVED_AT + {len(DERIVED_KEYS)}, #KEYS do\n"
        "      local k = KEYS[i]\n"
        "      local at = string.find(k, '}:', 1, true)\n"
        "      if at then TAIL[string.sub(k, at + 2)] = k end\n"
        "    end\n"
        "  end\n"
        "  local k = TAIL[name]\n"
        "  if k == nil then error('ipr: key ' .. name .. ' not given in KEYS') end\n"
        "  return k\n"
        "end\n"
    )


#: Includes written from Python definitions, not files: name -> its text.
GENERATED: dict[str, Callable[[], str]] = {
    "_derived_keys.lua": derived_keys,
    "_record_format.lua": lua_definitions,
    "_ordering_args.lua": ordering_args,
    "_orderings.lua": orderings,
}


@functools.cache
def _file(name: str) -> str:
    path = importlib.resources.files("ipr_crawl.store") / "lua" / name
    if not path.is_file():
        raise LuaIncludeError(f"Lua include {name!r}: no such file in ipr_crawl/store/lua/")
    return path.read_text()


def script_text(name: str, ordering: str | None = None) -> str:
    """The text of one script or include as written (``name`` with its ``.lua``, or
    ``rule:<ordering>``); ``ordering``: the one ordering ``_orderings.lua`` includes."""
    if name == "_orderings.lua":
        return orderings(ordering)
    if name in GENERATED:
        return GENERATED[name]()
    if name.startswith("rule:"):
        if name[5:] not in RULES:
            raise LuaIncludeError(f"Lua include {name!r}: no such ordering in ipr_crawl.ordering.rules")
        return lua_source(name[5:])
    return _file(name)


def includes_of(text: str) -> list[str]:
    """The includes a script names, in the order written."""
    return INCLUDE.findall(text)


def include_order(name: str, extra: Sequence[str] = (), ordering: str | None = None) -> list[str]:
    """Every file script ``name`` (with ``.lua``) is built from, each once, an include
    after what it includes, the script last. ``extra``: includes put first;
    ``ordering``: the only ordering whose rule it gets (default: every one)."""
    done: list[str] = []
    seen: set[str] = set()

    def visit(part: str, chain: tuple[str, ...]) -> None:
        if part in chain:
            raise LuaIncludeError("Lua include cycle: " + " -> ".join([*chain[chain.index(part):], part]))
        if part in seen:
            return
        try:
            text = script_text(part, ordering)
        except LuaIncludeError as exc:
            raise LuaIncludeError(f"{exc} (included by {' -> '.join(chain) or 'the caller'})") from None
        for inc in includes_of(text):
            visit(inc, (*chain, part))
        seen.add(part)
        done.append(part)

    for part in (*extra, name):
        visit(part, ())
    return done


def script_source(name: str, shared: Sequence[str] = (), ordering: str | None = None) -> str:
    """Script ``name`` of ``store/lua/`` (without ``.lua``) with its includes in front
    (see the module doc); ``shared``: further includes, put first; ``ordering`` (a Lua
    name): the script carries that ordering's rule only, not every one. With
    ``IPR_LUA_CHECK_KEYS`` (the tests), every key it touches is checked against its
    KEYS (:mod:`ipr_crawl.store.lua_keys`)."""
    source = "\n".join(script_text(part, ordering) for part in include_order(f"{name}.lua", shared, ordering))
    return with_key_check(name, source) if key_check_on() else source
