"""Adding an ordering takes three files: its Lua rule, its Python twin and its
registration. Here an example ordering, ``lifo`` (tests/helpers/lifo_ordering.*), is
registered for these tests only, and its Lua rule run by the real scripts matches its
twin run by ReferenceFrontier step by step on random graphs."""

from __future__ import annotations

import lifo_ordering
import pytest
from hypothesis import HealthCheck, given, settings
from test_rules import crawl_cases, drive

from ipr_crawl.ordering.rules import register, unregister


@pytest.fixture
def lifo():
    register(lifo_ordering)
    yield "lifo"
    unregister(lifo_ordering)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=crawl_cases())
def test_lifo_matches_its_twin(redis_client, lifo, case):
    drive(redis_client, lifo, case)


def test_lifo_pops_the_last_discovered_first(redis_client, lifo):
    # 0 -> 1 2 ; 2 -> 3 ; 1 -> 4: after 0, 2 (newer than 1); after 2, 3; then 1, 4
    case = (5, [[1, 2], [4], [3], [], []], [0] * 5, 0, set(), set())
    assert drive(redis_client, lifo, case) == [0, 2, 3, 1, 4]
