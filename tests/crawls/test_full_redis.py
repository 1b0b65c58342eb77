"""A full Redis loses nothing and says so (issue 51, item 3): real ``scrapy crawl`` runs
against a real redis-server with a small ``maxmemory``, for each kind of
``maxmemory-policy``.

- ``allkeys-*`` may evict the crawl's keys: refused at start, in one line naming the
  policy and the fix, unless ``IPR_REDIS_ALLOW_EVICTION``; another crawl's keys on the
  server are left alone.
- ``noeviction``: full at start, the crawl is refused in one line; filled under a crawl,
  the first write Redis refuses (``OOM``) stops it (reason ``ipr_redis_full``, or at its
  close) with one line, exit status 1 and the process's leases kept; once ``maxmemory``
  is raised, the next run finishes the crawl and every page has been fetched.
- ``volatile-*``: accepted, with one line naming the crawl's keys that carry an expiry.
"""

from __future__ import annotations

import collections
import re
import time

import pytest
from conftest import TEST_DATA
from procs import RedisServer, fetched, read_log, start_crawl

from ipr_crawl.evaluation.graphio import reachable, read_graph
from ipr_crawl.ordering.urls import canonical_url

POLBLOGS, POLBLOGS_URLS = TEST_DATA / "polblogs.tsv.gz", TEST_DATA / "polblogs.urls.tsv.gz"
HARVARD = TEST_DATA / "harvard500.tsv.gz"
@pytest.fixture
def small_redis(tmp_path):
    """A redis-server with a ``maxmemory`` (set by each test)."""
    with RedisServer(tmp_path / "redis", appendfsync="everysec") as server:
        client = server.client()
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 100_000)
        yield server, client


def _crawl(served, server, log, **settings):
    proc = start_crawl(served.seed_url, log, {"IPR_REDIS_URL": server.url, "IPR_CRAWL_ID": "full",
                                              **settings})
    return proc.wait(300), read_log(log)


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if " ERROR: " in line]


def test_a_policy_that_evicts_any_key_is_refused_in_one_line(graph_server, small_redis, tmp_path):
    server, client = small_redis
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.set("another:crawl", "x" * 1000)
    served = graph_server(HARVARD)
    code, log = _crawl(served, server, tmp_path / "refused.log")
    assert code == 1, log[-3000:]
    (error,) = _errors(log)
    assert "ERROR: ipr-crawl: " in error and "maxmemory-policy allkeys-lru" in error and "noeviction" in error
    assert "IPR_REDIS_ALLOW_EVICTION" in error and "Crawled (" not in log
    assert client.get("another:crawl") == b"x" * 1000 and not list(client.scan_iter("ipr:*"))
    # allowed: the crawl runs, and says once what it risks
    client.config_set("maxmemory", 50_000_000)  # room enough: this run is about the start
    code, log = _crawl(served, server, tmp_path / "allowed.log", IPR_REDIS_ALLOW_EVICTION=True)
    assert code == 0, log[-3000:]
    assert sum("allowed by IPR_REDIS_ALLOW_EVICTION" in line and "WARNING" in line for line in log.splitlines()) == 1


def test_a_volatile_policy_is_accepted_naming_the_keys_with_an_expiry(graph_server, small_redis, tmp_path):
    server, client = small_redis
    client.config_set("maxmemory", 0)
    client.config_set("maxmemory-policy", "volatile-lru")
    client.config_set("maxmemory", 50_000_000)
    served = graph_server(HARVARD)
    code, log = _crawl(served, server, tmp_path / "volatile.log")
    assert code == 0, log[-3000:]
    lines = [line for line in log.splitlines() if "maxmemory-policy volatile-lru" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and "op:<holder>:<n>" in lines[0], lines


def _full_line(log: str) -> None:
    full = [e for e in _errors(log) if " is full (used " in e]
    assert len(full) == 1 and "Nothing is lost" in full[0] and "maxmemory" in full[0], _errors(log)
    assert "Traceback" not in log, log[-3000:]


def test_a_full_redis_stops_the_crawl_and_the_next_run_finishes_it(graph_server, small_redis, tmp_path):
    """Full before the crawl's first write: refused at start in one line, exit status 1,
    nothing fetched; with ``maxmemory`` raised the next run crawls it all."""
    server, client = small_redis
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", client.info("memory")["used_memory"] - 1000)
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    code, first = _crawl(served, server, tmp_path / "full.log", LOG_LEVEL="INFO")
    assert code == 1, first[-3000:]
    (error,) = _errors(first)
    assert "ERROR: ipr-crawl: " in error and " is full (used " in error and "refused the crawl's first write" in error
    assert "Traceback" not in first and "'downloader/response_count'" not in first, first[-3000:]
    client.config_set("maxmemory", 0)  # the operator raises the limit
    code, second = _crawl(served, server, tmp_path / "again.log")
    assert code == 0 and "Spider closed (finished)" in second, second[-3000:]
    assert {canonical_url(u) for u in fetched(tmp_path / "again.log")} == {
        canonical_url(served.base + f"/n/{n}.html") for n in reachable(graph, served.seed)}


def test_a_redis_filled_under_a_crawl_loses_nothing(graph_server, small_redis, tmp_path):
    """Full from the 50th page on. Redis refuses a script whose first write adds while it
    is full, and lets one that has begun writing go on past ``maxmemory``. A page's record
    used to delete its frontier entry and settle its lease first, so the whole crawl ran
    on past the limit (958 pages recorded, 1.5 MB used of 1.3 MB) until its close was
    refused. The scripts now write what a settling changes before they settle (nothing
    lost if one fails halfway): the next record is refused, with one ERROR line, exit
    status 1, the crawl not marked finished, its leases kept. With ``maxmemory`` raised,
    the next run resumes it (joining the stopped process until that one's heartbeat
    lapses: it could not write its release) and every page is fetched."""
    server, client = small_redis
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 0)
    graph = read_graph(POLBLOGS)
    served = graph_server(POLBLOGS, POLBLOGS_URLS)
    proc = start_crawl(served.seed_url, tmp_path / "full.log", {"IPR_REDIS_URL": server.url, "IPR_CRAWL_ID": "full",
                                                                "DOWNLOAD_DELAY": 0.02})
    deadline = time.monotonic() + 120
    while len(fetched(tmp_path / "full.log")) < 50 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    client.config_set("maxmemory", client.info("memory")["used_memory"] - 100_000)  # full from now on
    code, first = proc.wait(300), read_log(tmp_path / "full.log")
    assert code == 1, first[-3000:]
    _full_line(first)
    assert "'ipr/finished'" not in first
    # one reason, in the stats and the lines, whether Redis refused a record or the close's writes
    assert "'finish_reason': 'ipr_redis_full'" in first and "closed (finished) without" not in first, first[-3000:]
    client.config_set("maxmemory", 0)  # the operator raises the limit
    code, second = _crawl(served, server, tmp_path / "again.log")
    assert code == 0, second[-3000:]
    assert re.search(r"\((resumed|joined: 1 other process crawl it)\)", second), second[:3000]
    assert "Spider closed (finished)" in second and "'ipr/finished': 1" in second
    urls = [canonical_url(u) for log in ("full.log", "again.log") for u in fetched(tmp_path / log)]
    assert len(set(urls)) == len(reachable(graph, served.seed))
    twice = [u for u, n in collections.Counter(urls).items() if n > 1]
    assert len(twice) <= 16, twice  # at most the requests in flight when Redis refused the write


def test_redis_full_while_scrapy_closes_a_crawl_as_finished_gives_one_reason(caplog):
    """Redis refuses the close's own writes while Scrapy closes the crawl as finished (a
    migration trial: two processes on a server already full): the close line and
    Scrapy's ``finish_reason`` both say ``ipr_redis_full`` (before: "closed (finished)
    without writing to Redis, which is full" and finish_reason 'finished', exit 1)."""
    import logging

    import redis
    from scrapy.statscollectors import MemoryStatsCollector
    from scrapy.utils.test import get_crawler

    from ipr_crawl.scheduler.internals import mark_crawl_failed
    from ipr_crawl.scheduler.oplog import closed_without_redis_line

    crawler = get_crawler()
    crawler.stats = MemoryStatsCollector(crawler)
    crawler.stats.set_value("finish_reason", "finished")  # CoreStats at spider_closed
    oom = redis.exceptions.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")
    with caplog.at_level(logging.ERROR):
        closed_without_redis_line("c", "finished", oom, 3)
    assert "crawl 'c' closed (ipr_redis_full) without writing to Redis, which is full" in caplog.text
    mark_crawl_failed(crawler, "ipr_redis_full")  # at engine_stopped
    assert crawler.stats.get_value("finish_reason") == "ipr_redis_full" and crawler.spider is None
    crawler.stats.set_value("finish_reason", "shutdown")  # an interrupted crawl keeps its reason
    mark_crawl_failed(crawler, "ipr_redis_full")
    assert crawler.stats.get_value("finish_reason") == "shutdown"
