"""Start URLs from Redis (``IPR_START_URLS_KEY``), read as scrapy-redis's
``RedisSpider`` reads them: real redis-server, real ``scrapy crawl graph``
processes without ``-a start_urls``, a served real graph."""

from __future__ import annotations

import collections
import json
import re
import time

import pytest
from conftest import TEST_DATA
from procs import fetched, read_log, start_crawl, wait_all

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph
from ipr_crawl.ordering.urls import canonical_url

HARVARD = TEST_DATA / "harvard500.tsv.gz"
KEY = "ipr:{%(crawl_id)s}:start_urls"


def stat(text: str, name: str) -> int:
    m = re.search(rf"'{re.escape(name)}': (\d+)", text)
    return int(m.group(1)) if m else 0


def nodes_fetched(graph, served, logs):
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph, None).items()}
    return [back[canonical_url(u)] for log in logs for u in fetched(log)]


@pytest.mark.parametrize("kind", ["list", "set", pytest.param("zset", marks=pytest.mark.slow)])
def test_start_urls_from_a_redis_key(kind, graph_server, redis_server, tmp_path):
    """URLs and JSON entries pushed to ipr:{crawl}:start_urls start the crawl;
    each entry is read once, bad entries are dropped with a stat."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    client = redis_server.client()
    key = "ipr:{seeded}:start_urls"
    entries = [
        served.seed_url,
        json.dumps({"url": served.seed_url, "meta": {"from": "redis"}}),  # a duplicate: fetched once
        "ftp://127.0.0.1/not-http",
        "{not json",
    ]
    if kind == "list":
        client.rpush(key, *entries)
    elif kind == "set":
        client.sadd(key, *entries)
    else:
        client.zadd(key, {e: i for i, e in enumerate(reversed(entries))})
    log = tmp_path / "crawl.log"
    proc = start_crawl("", log, {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "seeded",
                                 "IPR_START_URLS_KEY": KEY})
    assert proc.wait(180) == 0, read_log(log)[-3000:]
    text = read_log(log)
    assert "reading start URLs from Redis key 'ipr:{seeded}:start_urls'" in text
    assert stat(text, "ipr/start_urls/read") == 4 and stat(text, "ipr/start_urls/invalid") == 2
    assert text.count("dropping start URL entry") == 2
    assert client.exists(key) == 0
    got = nodes_fetched(graph, served, [log])
    assert len(got) == len(set(got)) and set(got) == set(reachable(graph, served.seed))


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_two_processes_wait_for_start_urls_and_share_the_crawl(graph_server, redis_server, tmp_path):
    """Two processes start with an empty key and wait (IPR_START_URLS_IDLE_SECS);
    one URL is pushed: one process reads it, both crawl (the other learns the
    start host from Redis), every page is fetched once, both close."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "waiting", "IPR_START_URLS_KEY": KEY,
                "IPR_START_URLS_IDLE_SECS": 6, "DOWNLOAD_DELAY": 0.03}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl("", log, settings) for log in logs]
    deadline = time.monotonic() + 60
    while not all("reading start URLs from Redis" in read_log(log) for log in logs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.1)
    redis_server.client().rpush("ipr:{waiting}:start_urls", served.seed_url)
    codes = wait_all(procs, timeout=240)
    texts = [read_log(log) for log in logs]
    assert codes == [0, 0], [t[-2000:] for t in texts]
    assert sorted(stat(t, "ipr/start_urls/read") for t in texts) == [0, 1]
    got = nodes_fetched(graph, served, logs)
    twice = [n for n, c in collections.Counter(got).items() if c > 1]
    assert not twice and set(got) == set(reachable(graph, served.seed))
    counts = [len(fetched(log)) for log in logs]
    assert all(c > 0 for c in counts), counts
    assert redis_server.client().sismember("ipr:{waiting}:start_hosts", served.base[len("http://"):])


def test_graph_spider_needs_start_urls_or_a_key(graph_server, tmp_path):
    served = graph_server(HARVARD)
    log = tmp_path / "crawl.log"
    proc = start_crawl("", log, {"IPR_DATA_DIR": tmp_path / "data"})
    assert proc.wait(60) != 0
    assert "give -a start_urls=URL[,URL...] or set IPR_START_URLS_KEY" in read_log(log)
    del served
