"""The one Lua loader (ipr_crawl.store.lua_loader): every script, frontier and revisit
alike, is built from its explicit includes, each once, after what it includes; a
script carries only what it uses, and names every include it uses."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from ipr_crawl.ordering.rules import RULES
from ipr_crawl.store import lua_loader
from ipr_crawl.store.lua_loader import (
    GENERATED,
    LuaIncludeError,
    include_order,
    includes_of,
    script_source,
    script_text,
)

LUA = resources.files("ipr_crawl.store") / "lua"
#: The scripts the store registers (FrontierStore, RevisitStore).
SCRIPTS = sorted(e.name[:-4] for e in LUA.iterdir() if e.name.endswith(".lua") and not e.name.startswith("_"))
INCLUDES = sorted([*(e.name for e in LUA.iterdir() if e.name.startswith("_")), *GENERATED, *(f"rule:{n}" for n in RULES)])
#: Built size of each script for the bf ordering (whose rule is two lines), lines, at
#: most (the sizes of this release, a little over): a script that starts carrying what
#: it does not use grows past its bound.
MAX_LINES = {
    "ack": 382, "beat": 42, "dead_return": 312, "enqueue": 429, "pop": 619, "record_page": 715, "relay": 507,
    "release_holder": 452, "replay": 688, "replay_record": 659, "revisit_record": 230, "revisit_refresh": 86, "sample": 108,
    "set_scores": 259, "mark_unfiltered": 21,
}


@pytest.fixture(autouse=True)
def _scripts_as_written(monkeypatch):
    """The scripts as shipped, without the tests' key check (tests/conftest.py)."""
    monkeypatch.delenv("IPR_LUA_CHECK_KEYS", raising=False)


TOP_LOCAL = re.compile(r"^local (?:function (\w+)|([\w, ]+?)\s*=)", re.M)


def _code(text: str) -> str:
    """The text without its comments (no script has '--' inside a string)."""
    return re.sub(r"--.*", "", text)


def _defines(text: str) -> set[str]:
    """The top-level locals a file defines."""
    names: set[str] = set()
    for fn, variables in TOP_LOCAL.findall(_code(text)):
        names |= {fn} if fn else {v.strip() for v in variables.split(",")}
    return names


def _uses(text: str, name: str, skip_definition: bool = False) -> int:
    """How often ``name`` is read or called in ``text`` (not as a field: ``X.name``)."""
    count = len(re.findall(rf"(?<![\w.:]){re.escape(name)}\b", _code(text)))
    return count - 1 if skip_definition else count


def test_the_scripts_are_all_found() -> None:
    assert {"record_page", "pop", "sample", "revisit_record", "revisit_refresh"} <= set(SCRIPTS)
    assert len(SCRIPTS) == len(MAX_LINES), sorted(set(SCRIPTS) ^ set(MAX_LINES))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_include_resolves_once_in_dependency_order(name: str) -> None:
    order = include_order(f"{name}.lua")
    assert order[-1] == f"{name}.lua" and len(order) == len(set(order))
    for k, part in enumerate(order):
        for inc in includes_of(script_text(part)):
            assert inc in order[:k], f"{part} includes {inc}, which comes after it"
    src = script_source(name)
    assert src == "\n".join(script_text(p) for p in order)
    bf = script_source(name, ordering="bf")
    assert bf.count("\n") + 1 <= MAX_LINES[name], f"{name}: {bf.count(chr(10)) + 1} lines"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_built_for_an_ordering_carries_its_rule_only(name: str) -> None:
    """FrontierStore builds its scripts for its ordering: such a build is the bf build
    and the ordering's own rule with what that rule includes, nothing of another."""
    base = set(include_order(f"{name}.lua", ordering="bf")) - {"rule:bf"}
    for ordering in RULES:
        parts = include_order(f"{name}.lua", ordering=ordering)
        assert [p for p in parts if p.startswith("rule:")] in ([], [f"rule:{ordering}"]), (name, ordering)
        own = set(include_order(f"rule:{ordering}"))
        assert set(parts) - base <= own, (name, ordering, sorted(set(parts) - base - own))


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_carries_no_include_it_does_not_use(name: str) -> None:
    """Each include of the built script defines something the rest of it reads, and
    the script's own local functions are all called."""
    order = include_order(f"{name}.lua")
    texts = {part: script_text(part) for part in order}
    for part in order[:-1]:
        if part.startswith("rule:"):
            continue  # an ordering's rule, reached by its name (rule_of): next test
        rest = "\n".join(text for p, text in texts.items() if p != part)
        assert any(_uses(rest, n) for n in _defines(texts[part])), f"{name}: {part} is not used"
    own = _code(texts[order[-1]])
    unused = [n for n in re.findall(r"^local function (\w+)", own, re.M) if _uses(own, n, skip_definition=True) < 1]
    assert not unused, f"{name}: defines and never uses {unused}"


@pytest.mark.parametrize("part", [*(f"{s}.lua" for s in SCRIPTS), *INCLUDES])
def test_includes_are_explicit_and_needed(part: str) -> None:
    """A file names each include whose definitions it uses (not one it gets by chance
    through another), and each include it names gives it something it uses."""
    text = script_text(part)
    own = includes_of(text)
    mine = _defines(text)
    for inc in own:
        if inc.startswith("rule:"):
            continue  # an ordering's rule (RULES.<name> = ...), reached by its name
        given = _defines(script_text(inc))
        assert any(_uses(text, n) for n in given), f"{part}: includes {inc} and uses none of {sorted(given)}"
    by_name = {n: inc for inc in INCLUDES for n in _defines(script_text(inc))}
    needs = {by_name[n] for n in by_name if n not in mine and _uses(text, n)}
    assert needs <= set(own), f"{part}: uses definitions of {sorted(needs - set(own))} without including them"


def test_each_definition_has_one_owner() -> None:
    owners: dict[str, str] = {}
    for inc in INCLUDES:
        for n in _defines(script_text(inc)):
            assert n not in owners, f"{n}: defined in {owners[n]} and {inc}"
            owners[n] = inc


def test_sample_carries_no_record_rule() -> None:
    src = script_source("sample")
    assert include_order("sample.lua") == ["_derived_keys.lua", "_lease_keys.lua", "_clock.lua", "_store_lost.lua", "sample.lua"]
    assert script_source("sample", ordering="push") == src
    for absent in ("record_ctx", "rec_get", "REC =", "params_from", "zscore", "forced_add"):
        assert absent not in src


def test_the_forced_queue_token_is_built_once() -> None:
    """enqueue.lua (dont_filter) and revisit_refresh.lua (due revisits) queue through
    one helper (_forced.lua's forced_add); no script packs a token itself."""
    for name in SCRIPTS:
        assert "'F' .." not in _code(script_text(f"{name}.lua")), name
    assert "_forced.lua" in include_order("revisit_refresh.lua")
    assert _uses(script_text("revisit_refresh.lua"), "forced_add") == 1
    assert _uses(script_text("enqueue.lua"), "forced_add") == 1
    assert sum("'F' .." in _code(script_text(inc)) for inc in INCLUDES) == 1


def test_a_missing_include_and_a_cycle_are_named(monkeypatch) -> None:
    texts = {
        "a.lua": "--! include _b.lua\nreturn 1\n",
        "_b.lua": "--! include _c.lua\n",
        "_c.lua": "--! include _b.lua\n",
        "d.lua": "--! include _seq.lua\n--! include _nope.lua\n",
    }
    real = lua_loader.script_text

    def fake(name: str, ordering: str | None = None) -> str:
        return texts[name] if name in texts else real(name, ordering)

    monkeypatch.setattr(lua_loader, "script_text", fake)
    with pytest.raises(LuaIncludeError, match=r"cycle: _b.lua -> _c.lua -> _b.lua"):
        include_order("a.lua")
    with pytest.raises(LuaIncludeError, match=r"'_nope.lua': no such file .* \(included by d.lua\)"):
        include_order("d.lua")
