"""At-least-once for items, measured with kill -9, and scrapy-redis projects.

- A page is recorded as done only once every item it yielded has left the item
  pipelines, so a crawl killed with SIGKILL again and again, then run to its end,
  has committed every item the same crawl commits when never killed.
- A scrapy-redis project (``REDIS_URL``, ``RedisSpider``/``RedisCrawlSpider``,
  ``RedisPipeline``) keeps one server for the frontier, its start URLs and its items.
"""

from __future__ import annotations

import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_DATA, kill_embedded_redis
from procs import RedisServer, start_server
from userproject import items, make_project, scrapy

REPO = Path(__file__).resolve().parents[2]
HARVARD = TEST_DATA / "harvard500.tsv.gz"


def _committed(db: Path) -> set[str]:
    if not db.exists():
        return set()
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'items'").fetchone():
            return set()
        return {row[0] for row in conn.execute("SELECT url FROM items")}


def _wait_for_progress(db: Path, proc: subprocess.Popen, before: int, timeout: float = 120) -> None:
    """Wait until this run has committed an item of its own (or exited), so that the
    kill lands mid-crawl however slowly Scrapy starts on a loaded machine."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if len(_committed(db)) > before:
            return
        time.sleep(0.1)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_kill_9_loops_lose_no_item(graph_server, tmp_path: Path) -> None:
    served = graph_server(HARVARD)
    root = make_project(tmp_path / "project", "http://127.0.0.1:9")
    common = {
        "ITEM_PIPELINES": '{"shop.pipelines.SqlitePipeline": 100}', "SQLITE_DELAY": 0.05,
        "IPR_LEASE_SECS": 3, "LOG_LEVEL": "INFO", "CONCURRENT_REQUESTS": 8, "DOWNLOAD_DELAY": 0.03,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
    }
    clean = scrapy(root, "crawl", "wiki", "-a", f"start_url={served.seed_url}", settings={
        **common, "SQLITE_PATH": tmp_path / "clean.db", "IPR_DATA_DIR": tmp_path / "clean-redis",
    })
    kill_embedded_redis(tmp_path / "clean-redis")
    assert clean.returncode == 0, clean.stderr[-3000:]
    expected = _committed(tmp_path / "clean.db")
    assert len(expected) > 100

    rng = random.Random(7)
    data = tmp_path / "killed-redis"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "wiki", "-a", f"start_url={served.seed_url}"]
    for key, value in {**common, "SQLITE_PATH": tmp_path / "killed.db", "IPR_DATA_DIR": data}.items():
        cmd += ["-s", f"{key}={value}"]
    kills = 0
    try:
        for _ in range(3):
            before = len(_committed(tmp_path / "killed.db"))
            proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            _wait_for_progress(tmp_path / "killed.db", proc, before)
            time.sleep(rng.uniform(0.3, 1.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.communicate(timeout=60)
        assert kills >= 2, "the crawl ended before it could be killed: nothing was tested"
        before_last = _committed(tmp_path / "killed.db")
        assert before_last < expected  # it was killed mid-crawl
        last = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
        assert last.returncode == 0, last.stderr[-3000:]
    finally:
        kill_embedded_redis(data)
    got = _committed(tmp_path / "killed.db")
    assert expected <= got, f"{len(expected - got)} items lost: {sorted(expected - got)[:5]}"


@pytest.fixture
def shop_and_redis(tmp_path: Path):
    proc, m = start_server([sys.executable, str(REPO / "tests" / "helpers" / "shopsite.py")], r"serving shop at (\S+)")
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield make_project(tmp_path / "project", m[1].rstrip("/")), m[1].rstrip("/"), server
    finally:
        server.kill(signal.SIGTERM)
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.parametrize("spider", ["redisshop", pytest.param("redisshopcrawl", marks=pytest.mark.slow)])
def test_scrapy_redis_spider_and_pipeline_share_one_server(shop_and_redis, tmp_path: Path, spider: str) -> None:
    root, base, server = shop_and_redis
    client = server.client()
    client.lpush(f"{spider}:start_urls", f"{base}/")
    settings = {
        "REDIS_URL": server.url, "ITEM_PIPELINES": '{"scrapy_redis.pipelines.RedisPipeline": 300}',
        "MAX_IDLE_TIME_BEFORE_CLOSE": 3, "LOG_LEVEL": "INFO",
    }
    ours = scrapy(root, "crawl", spider, "-O", f"{tmp_path / 'ours.jsonl'}:jsonlines", settings=settings)
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert "(REDIS_URL, scrapy-redis's connection)" in ours.stderr
    assert client.hget(f"ipr:{{shop.{spider}}}:meta", "schema") is not None  # the frontier is on that server
    assert client.llen(f"{spider}:items") == len(items(tmp_path / "ours.jsonl")) == 11  # RedisPipeline too
    client.lpush(f"{spider}:start_urls", f"{base}/")
    plain = scrapy(root, "crawl", spider, "-O", f"{tmp_path / 'plain.jsonl'}:jsonlines", addon=False,
                   settings={**settings, "ITEM_PIPELINES": "{}"})
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert items(tmp_path / "ours.jsonl") == items(tmp_path / "plain.jsonl")


SCRAPY_REDIS = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler", "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2, "LOG_LEVEL": "DEBUG", "CONCURRENT_REQUESTS": 1,
}


def _urls(log: str) -> list[str]:
    return [url for _, _, url in re.findall(r"Crawled \((\d{3})\) <(\w+) (\S+)>", log)]


def test_a_scrapy_redis_crawl_stopped_midway_is_carried_over(shop_and_redis, tmp_path: Path) -> None:
    """scrapy-redis's own scheduler crawls with RedisCrawlSpider and stops midway
    (CLOSESPIDER_PAGECOUNT, SCHEDULER_PERSIST); a run with the add-on first says what it
    found and how to import it, then imports it (IPR_IMPORT_SCRAPY_REDIS=pickle): the two
    runs' fetches are a single uninterrupted scrapy-redis crawl's, none fetched twice, and
    scrapy-redis's keys stay as they were."""
    root, base, server = shop_and_redis
    client = server.client()
    spider = "redisshopcrawl"
    common = {**SCRAPY_REDIS, "REDIS_URL": server.url}
    client.lpush(f"{spider}:start_urls", f"{base}/")
    whole = scrapy(root, "crawl", spider, "-O", f"{tmp_path / 'whole.jsonl'}:jsonlines", addon=False, settings=common)
    assert whole.returncode == 0, whole.stderr[-3000:]
    client.flushdb()
    client.lpush(f"{spider}:start_urls", f"{base}/")
    first = scrapy(root, "crawl", spider, "-O", f"{tmp_path / 'first.jsonl'}:jsonlines", addon=False,
                   settings={**common, "SCHEDULER_PERSIST": True, "CLOSESPIDER_PAGECOUNT": 4})
    assert first.returncode == 0, first.stderr[-3000:]
    queued, seen = client.zcard(f"{spider}:requests"), client.scard(f"{spider}:dupefilter")
    assert queued > 0 and seen > queued  # stopped midway, with fetched pages behind it

    ipr = {"REDIS_URL": server.url, "MAX_IDLE_TIME_BEFORE_CLOSE": 2, "LOG_LEVEL": "DEBUG"}
    told = scrapy(root, "crawl", spider, settings={**ipr, "IPR_CRAWL_ID": "look"})
    assert told.returncode == 0, told.stderr[-3000:]
    line = next(x for x in told.stderr.splitlines() if "scrapy-redis's crawl of spider" in x)
    assert "WARNING" in line and "IPR_IMPORT_SCRAPY_REDIS=pickle" in line
    assert f"{spider}:requests: {queued} requests" in line and f"{spider}:dupefilter: {seen} fingerprints" in line
    assert _urls(told.stderr) == []

    second = scrapy(root, "crawl", spider, "-O", f"{tmp_path / 'second.jsonl'}:jsonlines",
                    settings={**ipr, "IPR_IMPORT_SCRAPY_REDIS": "pickle"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"{queued} requests into the frontier, {seen} fingerprints" in second.stderr
    one, two, all_ = _urls(first.stderr), _urls(second.stderr), _urls(whole.stderr)
    assert len(all_) > 10 and sorted(one + two) == sorted(all_)  # the union is the whole crawl, nothing fetched twice
    assert len(two) >= queued, second.stderr[-5000:]
    assert sorted(items(tmp_path / "first.jsonl") + items(tmp_path / "second.jsonl")) == items(tmp_path / "whole.jsonl")
    assert (client.zcard(f"{spider}:requests"), client.scard(f"{spider}:dupefilter")) == (queued, seen)
    again = scrapy(root, "crawl", spider, settings={**ipr, "IPR_IMPORT_SCRAPY_REDIS": "pickle"})
    assert again.returncode == 0 and "was carried over before" in again.stderr


@pytest.mark.slow  # ~25 s of real crawls: CI runs it (make test ARGS="-m 'slow or data'")
def test_processes_started_together_carry_a_scrapy_redis_crawl_over_once(shop_and_redis, tmp_path: Path) -> None:
    """Two processes with IPR_IMPORT_SCRAPY_REDIS=pickle started together on a scrapy-redis
    crawl stopped midway, the import slowed (a SCHEDULER_SERIALIZER that takes 0.3 s per
    request, scrapy-redis's own setting) so that the second opens while the first imports:
    the second waits for the import, and the runs' fetches are one uninterrupted
    scrapy-redis crawl's, none twice. Before, the second saw the import's marker, read no
    imported fingerprint yet and refetched pages scrapy-redis had fetched (107, 49, 206,
    39 and 0 pages in five runs of a migration trial)."""
    import os

    root, base, server = shop_and_redis
    client = server.client()
    spider = "redisshopcrawl"
    (root / "shop" / "slowpickle.py").write_text(
        "import pickle, time\n"
        "def loads(s):\n"
        "    time.sleep(0.3)\n"
        "    return pickle.loads(s)\n"
        "def dumps(obj):\n"
        "    return pickle.dumps(obj, protocol=-1)\n"
    )
    common = {**SCRAPY_REDIS, "REDIS_URL": server.url}
    client.lpush(f"{spider}:start_urls", f"{base}/")
    whole = scrapy(root, "crawl", spider, addon=False, settings=common)
    assert whole.returncode == 0, whole.stderr[-3000:]
    client.flushdb()
    client.lpush(f"{spider}:start_urls", f"{base}/")
    first = scrapy(root, "crawl", spider, addon=False, settings={**common, "SCHEDULER_PERSIST": True,
                                                                 "CLOSESPIDER_PAGECOUNT": 4})
    assert first.returncode == 0, first.stderr[-3000:]
    queued = client.zcard(f"{spider}:requests")
    assert queued >= 3, queued  # the import takes a second or more
    ipr = {"REDIS_URL": server.url, "MAX_IDLE_TIME_BEFORE_CLOSE": 2, "LOG_LEVEL": "DEBUG",
           "IPR_IMPORT_SCRAPY_REDIS": "pickle", "SCHEDULER_SERIALIZER": "shop.slowpickle"}
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider]
    for key, value in ipr.items():
        cmd += ["-s", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    procs = [subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    logs = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        logs.append(err)
    imported = [log for log in logs if "requests into the frontier" in log]
    assert len(imported) == 1, [log[-2000:] for log in logs]  # one import
    waited = [log for log in logs if "this one waits for it before crawling" in log]
    assert len(waited) == 1, [log[-3000:] for log in logs]  # the other opened during it, and waited
    fetches = _urls(first.stderr) + [u for log in logs for u in _urls(log)]
    assert sorted(fetches) == sorted(_urls(whole.stderr)), (sorted(fetches), sorted(_urls(whole.stderr)))


@pytest.mark.parametrize("retry", [True, False], ids=["IPR_ITEM_RETRY_ERRORS", "off"])
def test_an_item_a_pipeline_failed_to_store_for_a_while_is_kept(graph_server, tmp_path: Path, retry: bool) -> None:
    """An item pipeline that fails with ConnectionError (its database or Redis away for a
    while) the first time it sees the items of some pages: Scrapy logs each and drops it.
    With IPR_ITEM_RETRY_ERRORS (default) the page is fetched again and its item stored:
    every page's item kept, ``ipr/items/retried`` counts the retries. Off (empty), the
    items are lost as with Scrapy alone: the test measures both."""
    import json

    from procs import fetched, read_log, start_crawl

    served = graph_server(HARVARD)
    out = tmp_path / "items.txt"
    env = {"IPR_TEST_FLAKY_SUFFIXES": "1.html,7.html", "IPR_TEST_FLAKY_OUT": str(out)}
    settings = {"ITEM_PIPELINES": json.dumps({"tests.helpers.flaky_pipeline.FlakyPipeline": 300}),
                "DOWNLOAD_DELAY": 0.005}
    if not retry:
        settings["IPR_ITEM_RETRY_ERRORS"] = ""
    log = tmp_path / "crawl.log"
    proc = start_crawl(served.seed_url, log, settings, env=env, spider_args={"items": "1"})
    assert proc.wait(300) == 0, read_log(log)[-3000:]
    text = read_log(log)
    pages = set(fetched(log))
    flaky = {u for u in pages if u.endswith(("1.html", "7.html"))}
    kept = set(out.read_text().split())
    assert len(flaky) >= 20, len(flaky)
    retried = re.search(r"'ipr/items/retried': (\d+)", text)
    if retry:
        assert kept == pages, sorted(pages - kept)[:10]
        assert retried and int(retried.group(1)) == len(flaky), text[-3000:]
    else:
        assert kept == pages - flaky and not retried
    print(f"\nITEMS retry={retry}: pages {len(pages)}, flaky {len(flaky)}, kept {len(kept)}")
