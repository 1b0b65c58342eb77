"""Malformed input against a real crawl: every case of ``tests/helpers/badsite.py``
(headers, URLs, bodies, 100,000 out-links, redirect loops, statuses), served
by a real twisted.web server on loopback, crawled by ONE real ``scrapy crawl
graph`` (the server doubles as the crawl's HTTP proxy, so links to IDNA hosts
need no DNS), plus crawl ids with ``{}`` and spaces.

Each case is a test: the crawl finished (not crashed), the case's log lines
(a fetch line, a "not following ... (reason)" line, Scrapy's own line, ...)
are there, and no traceback names the case.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from badsite import CASES, MANY_LINKS
from conftest import REPO
from procs import read_log, start_crawl, start_server
from scrapy.settings import Settings

#: Bound of the record call of one page in this crawl.
MAX_LINKS = 500


@pytest.fixture(scope="module")
def badsite():
    proc, m = start_server([sys.executable, str(REPO / "tests" / "helpers" / "badsite.py"), "--port", "0"],
                           r"^serving badsite at (http://127\.0\.0\.1:\d+)/", timeout=30)
    yield m.group(1)
    proc.kill()
    proc.communicate(timeout=10)


@pytest.fixture(scope="module")
def bad_crawl(badsite, tmp_path_factory):
    """One crawl of the whole bad site; returns (exit code, log text, seconds)."""
    tmp = tmp_path_factory.mktemp("bad")
    log = tmp / "crawl.log"
    started = time.monotonic()
    proc = start_crawl(badsite + "/", log, {
        "IPR_DATA_DIR": tmp / "data",
        "IPR_GRAPH_STAY_ON_HOSTS": False,  # the server is the proxy for every host
        "IPR_MAX_LINKS_PER_PAGE": MAX_LINKS,
        "URLLENGTH_LIMIT": 16384,
        # (the default IPR_LEASE_SECS: a 20 s lease let a slow 50 MB download expire and go out twice under load)
        "RETRY_TIMES": 1,
        "DOWNLOAD_TIMEOUT": 30,
        "CLOSESPIDER_TIMEOUT": 300,
        "CONCURRENT_REQUESTS": 8,
    }, env={"http_proxy": badsite, "HTTP_PROXY": badsite, "no_proxy": "", "NO_PROXY": ""})
    try:
        code = proc.wait(420)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, read_log(log), time.monotonic() - started


def _regex(pattern: str, base: str) -> str:
    return pattern.replace("{base}", re.escape(base)).replace("{hostre}", re.escape(base[len("http://"):]))


def test_the_bad_crawl_finishes(bad_crawl):
    code, log, secs = bad_crawl
    assert code == 0, log[-3000:]
    assert "Closing spider (finished)" in log, log[-3000:]
    # Scrapy's own "Error downloading <GET url>" lines carry a traceback; no other error does.
    for marker in ("Spider error processing", "Error while handling downloader output",
                   "Unhandled error", "Scheduler close failure", "Error while removing request",
                   "Error while enqueuing scrape", "Error caught on signal handler"):
        assert marker not in log, log[log.index(marker) - 500:][:4000]
    tracebacks = log.count("Traceback (most recent call last)")
    assert tracebacks <= len(re.findall(r"ERROR: Error downloading <GET ", log)), log[-4000:]
    closed = re.search(r"crawl 'ipr_crawl.graph' closed \(finished\): (\{.*\})", log)
    assert closed, log[-3000:]
    counts = eval(closed.group(1))
    assert counts["frontier"] == counts["forced"] == counts["in_flight"] == 0
    # Every known URL settled: fetched (a 404 is a fetched page without links) or failed.
    assert counts["fetched"] + counts["failed"] == counts["known"], counts
    assert counts["failed"] < 20, counts
    pages = re.findall(r"Crawled \(\d+\) <GET (\S+)>", log)
    twice = {u for u in pages if pages.count(u) > 1}
    # Only the 500 is fetched again (RetryMiddleware's retry, via the forced queue).
    assert twice <= {u for u in twice if u.endswith("/r/status-500")}, twice
    print(f"\nbad input: {len(CASES)} cases crawled in {secs:.1f} s; frontier at close {counts}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_case(case, bad_crawl, badsite):
    code, log, _ = bad_crawl
    assert code == 0
    for pattern in case.expect:
        assert re.search(_regex(pattern, badsite), log), f"{case.name}: no log line {pattern!r}"
    # No spider error names the case's page. (Scrapy's "Error while handling
    # downloader output" line names no URL: test_the_bad_crawl_finishes checks
    # that it appears nowhere in the log.)
    entry = re.escape(badsite + case.entry)
    assert not re.search(rf"Spider error processing <GET {entry}", log)


def test_many_links_work_is_bounded_and_counted(bad_crawl):
    """The 100,000-link page: MAX_LINKS links recorded, the rest counted, and
    only MAX_LINKS of its targets (404s) fetched."""
    _, log, _ = bad_crawl
    over = int(re.search(r"'ipr/links/over_cap': (\d+)", log).group(1))
    assert over >= MANY_LINKS - MAX_LINKS
    fetched_many = len(re.findall(r"Crawled \(404\) <GET \S+/m/\d+>", log))
    assert fetched_many == MAX_LINKS


def test_redirect_loops_end_and_are_settled(bad_crawl, badsite):
    """Loops are cut by the graph (each URL is fetched once) and the 25-hop
    chain by REDIRECT_MAX_TIMES; nothing stays leased (the crawl finished)."""
    _, log, _ = bad_crawl
    base = re.escape(badsite)
    assert len(re.findall(rf"Redirecting \(302\) to <GET {base}/r/loop-self> from", log)) == 1
    assert len(re.findall(rf"Redirecting \(302\) to <GET {base}/r/loop-two-b> from", log)) == 1
    hops = re.findall(rf"Redirecting \(302\) to <GET {base}/r/chain-25/(\d+)>", log)
    assert len(hops) == len(set(hops))
    # The endless chain (/r/chain-25 -> /0 -> /1 -> ...) stops after Scrapy's
    # REDIRECT_MAX_TIMES (20) hops: the hop count travels with the request
    # through Redis (its meta is stored with it).
    limit = Settings().getint("REDIRECT_MAX_TIMES")
    assert sorted(map(int, hops)) == list(range(limit)), hops
    assert re.search(rf"Discarding <GET {base}/r/chain-25/{limit - 1}>: max redirections reached", log)


# -- the header cases again, with conditional GETs ----------------------------------------
HEADER_CASES = [c for c in CASES if c.kind == "h"]


@pytest.fixture(scope="module")
def revisit_crawls(badsite, tmp_path_factory):
    """The header cases crawled twice with revisits on (issue 4's conditional-GET
    middleware): the second run sends the malformed validators back."""
    tmp = tmp_path_factory.mktemp("revisit")
    settings = {"IPR_DATA_DIR": tmp / "data", "IPR_REVISIT_ENABLED": True, "IPR_REVISIT_POLICY": "fixed:1s",
                "IPR_REVISIT_MIN_SECS": 0}
    logs = []
    for run in (1, 2):
        log = tmp / f"run{run}.log"
        proc = start_crawl(badsite + "/h/", log, settings)
        assert proc.wait(180) == 0, read_log(log)[-3000:]
        logs.append(read_log(log))
        time.sleep(1.1)  # every page is due again (fixed:1s)
    return logs


@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_header_case_revisited_with_conditional_get(case, revisit_crawls, badsite):
    first, second = revisit_crawls
    url = re.escape(badsite + case.entry)
    assert re.search(rf"Crawled \(200\) <GET {url}>", first)
    assert re.search(rf"<GET {url}>", second), f"{case.name} not revisited"
    for log in (first, second):
        assert "closed (finished)" in log
        assert "Spider error processing" not in log and "Traceback" not in log


# -- crawl ids -------------------------------------------------------------------------
@pytest.mark.parametrize("crawl_id", ["with {braces}", "{", "}x"])
def test_crawl_id_with_braces_is_refused_before_the_crawl(crawl_id, badsite, tmp_path):
    log = tmp_path / "crawl.log"
    proc = start_crawl(badsite + "/h/etag-empty", log, {"IPR_DATA_DIR": tmp_path / "data", "IPR_CRAWL_ID": crawl_id})
    code = proc.wait(60)
    text = read_log(log)
    assert code != 0
    assert f"IPR_CRAWL_ID={crawl_id!r}: no '{{' or '}}'" in text
    assert "Crawled (" not in text


@pytest.mark.parametrize("crawl_id", ["with spaces in it", "  padded  ", "ünïcödé-id", "x" * 500])
def test_odd_crawl_ids_work(crawl_id, badsite, tmp_path):
    log = tmp_path / "crawl.log"
    proc = start_crawl(badsite + "/h/etag-empty", log, {"IPR_DATA_DIR": tmp_path / "data", "IPR_CRAWL_ID": crawl_id})
    code = proc.wait(120)
    text = read_log(log)
    assert code == 0, text[-2000:]
    assert "closed (finished)" in text and f"Crawled (200) <GET {badsite}/h/etag-empty>" in text


def test_at_least_fifty_cases():
    assert len(CASES) + 7 >= 50
    assert len({c.name for c in CASES}) == len(CASES)
    assert Path(REPO / "tests" / "helpers" / "badsite.py").exists()
