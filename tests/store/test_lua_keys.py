"""The tests' key check of the Lua scripts (ipr_crawl/store/lua_keys.py): a script that
touches a key it was not given in KEYS stops with an error naming the script, the
command and the key; no key is excepted."""

from __future__ import annotations

import pytest
import redis

from ipr_crawl.store.lua_keys import BUILT_IN_SCRIPT, key_check_on, with_key_check


def test_the_tests_run_every_script_with_the_check():
    assert key_check_on(), "tests/conftest.py sets IPR_LUA_CHECK_KEYS"


def test_a_key_not_in_keys_stops_the_script_with_its_name(redis_client):
    probe = redis_client.register_script(with_key_check(
        "probe", "redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1] .. ':other')"))
    with pytest.raises(redis.ResponseError, match=r"ipr key check: probe: GET k1:other not in KEYS"):
        probe(keys=["k1"])
    assert probe(keys=["k1", "k1:other"]) is None  # given: runs
    # pcall is checked too: a prior bucket the caller did not name stops the script
    built = redis_client.register_script(with_key_check("built", "return redis.pcall('GET', KEYS[1] .. ':prior:7')"))
    with pytest.raises(redis.ResponseError, match=r"ipr key check: built: GET ipr:\{c\}:meta:prior:7 not in KEYS"):
        built(keys=["ipr:{c}:meta"])


def test_no_key_is_excepted_from_the_check():
    """Every key a script touches is passed in KEYS: the list of exceptions is empty
    (the prior's buckets and the site queues were the last ones; the tests that run
    crawls with a prior and with larger-sites-first run under this check)."""
    assert BUILT_IN_SCRIPT == ()
