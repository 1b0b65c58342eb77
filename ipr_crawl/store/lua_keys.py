"""The key check of the Lua scripts: every key a script touches must be one it was given
in ``KEYS``.

Redis runs a script atomically, but does not undo what it wrote before an error; in a
Redis Cluster, a key a script builds itself (instead of receiving it in ``KEYS``) is
not checked before the script runs, so during a slot migration the script fails with
"non local key" halfway (Redis's EVAL documentation, "Script parameterization": "all
keys used by the script must be passed in KEYS"; Redis Cluster specification, "Scripts
and transactions"). The tests run every script with this check
(``IPR_LUA_CHECK_KEYS=1``, set by ``tests/conftest.py`` for the test run and the
``scrapy crawl`` processes it starts): :func:`with_key_check` wraps each
``redis.call``/``redis.pcall`` so that a key neither in ``KEYS`` nor listed in
:data:`BUILT_IN_SCRIPT` raises a script error naming the script, the command and the key.

:data:`BUILT_IN_SCRIPT` is the list of keys still built inside the scripts: it is empty
and may only stay so. Off (the default, and in every crawl), the scripts are exactly as written.
"""

from __future__ import annotations

import os
import re

__all__ = ["BUILT_IN_SCRIPT", "KEY_CHECK_ENV", "key_check_on", "with_key_check"]

#: The environment variable that turns the check on (any value but "" and "0").
KEY_CHECK_ENV = "IPR_LUA_CHECK_KEYS"

#: Keys the scripts may build from another key without receiving them in KEYS, as Lua
#: patterns on the key's name (anchored at its end). Each would be a place where a
#: script can fail halfway during a Cluster slot migration; none is left (the prior's
#: buckets are named by the caller, store/pipelined.py ``prior_keys``; larger-sites-first
#: keeps its site queues in one key, ``siteq``).
BUILT_IN_SCRIPT: tuple[str, ...] = ()

_CALL = re.compile(r"\bredis\.(p?call)\(")


def key_check_on() -> bool:
    """Whether :data:`KEY_CHECK_ENV` asks for the check."""
    return os.environ.get(KEY_CHECK_ENV, "") not in ("", "0")


def with_key_check(name: str, source: str) -> str:
    """``source`` (script ``name``, its includes in front) with every ``redis.call(`` and
    ``redis.pcall(`` checked: the command's first argument (the key, for every command
    the scripts use but ``TIME``, which has none) must be in ``KEYS`` or match :data:`BUILT_IN_SCRIPT`, else the
    script stops with an error ``ipr key check: <name>: <command> <key> not in KEYS``."""
    built = ", ".join(f"'{pattern}'" for pattern in BUILT_IN_SCRIPT)
    prologue = (
        "local __declared = {}\n"
        "for _, k in ipairs(KEYS) do __declared[k] = true end\n"
        f"local __built = {{{built}}}\n"
        "local function __key(cmd, key)\n"
        "  if __declared[key] then return end\n"
        "  for _, p in ipairs(__built) do if string.find(key, p) then return end end\n"
        f"  error('ipr key check: {name}: ' .. cmd .. ' ' .. tostring(key) .. ' not in KEYS')\n"
        "end\n"
        "local function __call(cmd, key, ...)\n"
        "  if cmd == 'TIME' then return redis.call(cmd) end\n"
        "  __key(cmd, key) return redis.call(cmd, key, ...)\n"
        "end\n"
        "local function __pcall(cmd, key, ...) __key(cmd, key) return redis.pcall(cmd, key, ...) end\n"
    )
    return prologue + _CALL.sub(lambda m: f"__{m.group(1)}(", source)
