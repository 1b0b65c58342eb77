"""The tests' key check of the Lua scripts (ipr_crawl/store/lua_keys.py): a script that
touches a key it was not given in KEYS stops with an error naming the script, the
command and the key; the keys still built inside the scripts are listed, and each entry
of that list names a key some script really builds."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from ipr_crawl.ordering.rules import RULES, lua_source
from ipr_crawl.store.lua_keys import BUILT_IN_SCRIPT, key_check_on, with_key_check


def test_the_tests_run_every_script_with_the_check():
    assert key_check_on(), "tests/conftest.py sets IPR_LUA_CHECK_KEYS"


def test_a_key_not_in_keys_stops_the_script_with_its_name(redis_client):
    probe = redis_client.register_script(with_key_check(
        "probe", "redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1] .. ':other')"))
    with pytest.raises(redis.ResponseError, match=r"ipr key check: probe: GET k1:other not in KEYS"):
        probe(keys=["k1"])
    assert probe(keys=["k1", "k1:other"]) is None  # given: runs
    # pcall is checked too; a key listed as built inside a script passes
    listed = redis_client.register_script(with_key_check("listed", "return redis.pcall('GET', KEYS[1] .. ':prior:7')"))
    assert listed(keys=["ipr:{c}:meta"]) is None


def test_each_listed_key_is_built_by_some_script():
    texts = [e.read_text() for e in (resources.files("ipr_crawl.store") / "lua").iterdir() if e.name.endswith(".lua")]
    texts += [lua_source(name) for name in RULES]
    code = "\n".join(re.sub(r"--.*", "", t) for t in texts)
    for pattern in BUILT_IN_SCRIPT:
        name = re.match(r":([a-z_]+)", pattern).group(1)
        assert re.search(rf"'(?:[a-z_]*[:_])?{name}[:']|\.\. '_?{name.split('_')[-1]}'", code), pattern
