"""The one loader of the Lua scripts: a script with what it includes, nothing more.

Every script of ``store/lua/`` (frontier and revisit alike) names the files it needs
on lines of its own::

    --! include _leases.lua

and :func:`script_source` builds it: each include in front, once, after what it
includes itself (depth first, in the order written), then the script. An include
is a file of ``store/lua/`` (the shared parts, named ``_*.lua``) or one of the
:data:`GENERATED` ones, written from Python: ``_record_format.lua`` (``REC``,
``REC_SIZE``: :mod:`ipr_crawl.store.record`) and ``_ordering_args.lua``
(``params_from``, ``N_ORDERING_ARGS``: :data:`ipr_crawl.ordering.params.LUA_ARGS`).
A missing include or a cycle raises :class:`LuaIncludeError` naming the chain.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Callable, Sequence

from ipr_crawl.ordering.params import LUA_ARGS
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


#: Includes written from Python definitions, not files: name -> its text.
GENERATED: dict[str, Callable[[], str]] = {
    "_record_format.lua": lua_definitions,
    "_ordering_args.lua": ordering_args,
}


@functools.cache
def script_text(name: str) -> str:
    """The text of one script or include as written (``name`` with its ``.lua``)."""
    if name in GENERATED:
        return GENERATED[name]()
    path = importlib.resources.files("ipr_crawl.store") / "lua" / name
    if not path.is_file():
        raise LuaIncludeError(f"Lua include {name!r}: no such file in ipr_crawl/store/lua/")
    return path.read_text()


def includes_of(text: str) -> list[str]:
    """The includes a script names, in the order written."""
    return INCLUDE.findall(text)


def include_order(name: str, extra: Sequence[str] = ()) -> list[str]:
    """Every file script ``name`` (with ``.lua``) is built from, each once, an include
    after what it includes, the script last. ``extra``: includes put first."""
    done: list[str] = []
    seen: set[str] = set()

    def visit(part: str, chain: tuple[str, ...]) -> None:
        if part in chain:
            raise LuaIncludeError("Lua include cycle: " + " -> ".join([*chain[chain.index(part):], part]))
        if part in seen:
            return
        try:
            text = script_text(part)
        except LuaIncludeError as exc:
            raise LuaIncludeError(f"{exc} (included by {' -> '.join(chain) or 'the caller'})") from None
        for inc in includes_of(text):
            visit(inc, (*chain, part))
        seen.add(part)
        done.append(part)

    for part in (*extra, name):
        visit(part, ())
    return done


def script_source(name: str, shared: Sequence[str] = ()) -> str:
    """Script ``name`` of ``store/lua/`` (without ``.lua``) with its includes in front
    (see the module doc); ``shared``: further includes, put first."""
    return "\n".join(script_text(part) for part in include_order(f"{name}.lua", shared))
