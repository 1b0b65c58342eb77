"""Real processes: a graph served over HTTP by ``python -m ipr_crawl.evaluation.serve`` and
crawled by ``scrapy crawl graph`` with the embedded Redis."""

from __future__ import annotations

import collections
import re
from urllib.parse import urlsplit

import pytest
from conftest import DATA, TEST_DATA

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph, read_urls
from ipr_crawl.ordering.reference import simulate_crawl
from ipr_crawl.ordering.urls import canonical_url, node_id, tie_for, tie_key

EMACS = DATA / "emacswiki.tsv.gz"
EMACS_URLS = DATA / "emacswiki.urls.tsv.gz"
HARVARD = TEST_DATA / "harvard500.tsv.gz"
POLBLOGS = TEST_DATA / "polblogs.tsv.gz"
POLBLOGS_URLS = TEST_DATA / "polblogs.urls.tsv.gz"

PAGES = 300
#: One page at a time, and the engine waits until a page is parsed (and so
#: recorded) before it leases the next request: Scrapy's own way
#: (SCRAPER_SLOT_MAX_ACTIVE_SIZE=0), beside IPR_WAIT_FOR_PARSE (on by default; without
#: either the next pop overtakes the record and the order departs from simulate_crawl
#: at the third fetch).
SEQUENTIAL = {"CONCURRENT_REQUESTS": 1, "IPR_POP_BATCH_SIZE": 1, "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 0}


@pytest.fixture(scope="module")
def emacs():
    graph = read_graph(EMACS)
    return graph, read_urls(EMACS_URLS)


def node_map(graph, urls, base):
    """(canonical URL -> node, node -> tie key) for the pages served at ``base``."""
    canon = {n: canonical_url(base + p) for n, p in page_paths(graph, urls).items()}
    back = {c: n for n, c in canon.items()}
    assert len(back) == len(canon), "two served pages share a canonical URL"
    return back, {n: tie_key(c) for n, c in canon.items()}


def assert_exact_order(got: list, expected: list, at_least: int) -> None:
    """The crawl's fetches ``got`` equal the simulation's ``expected`` over their common
    length, which is at least ``at_least``; a failure names the first fetch that differs."""
    k = min(len(got), len(expected))
    assert k >= at_least
    mismatch = next((i for i in range(k) if got[i] != expected[i]), None)
    assert mismatch is None, (
        f"fetch #{mismatch} is node {got[mismatch]}, simulation says {expected[mismatch]} "
        f"(next fetched {got[mismatch:mismatch + 5]}, simulated {expected[mismatch:mismatch + 5]})"
    )


@pytest.mark.parametrize(
    "ordering,pipelined",
    [("ipr", True), ("bf", True), *(pytest.param(o, p, marks=pytest.mark.slow)  # the long ones: CI runs them
     for o, p in [("ipr", False), ("blc", True), ("ipr:ar", True), ("opic", True), ("ifs", True)])],
)
def test_fetch_order_matches_simulation(ordering, pipelined, emacs, graph_server, crawl, tmp_path):
    """The exact order, with the record reply read at the next pop
    (IPR_RECORD_PIPELINED, default) and waited for (off)."""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    tie = {n: tie_for(ordering.partition(":")[0], c) for c, n in back.items()}
    run = crawl(
        served.seed_url,
        tmp_path / "crawl.log",
        {**SEQUENTIAL, "IPR_ORDERING": ordering, "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": PAGES,
         "IPR_RECORD_PIPELINED": pipelined},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.statuses and set(run.statuses) == {200}
    got = [back[canonical_url(u)] for u in run.fetched]
    assert got[0] == served.seed
    assert len(got) == len(set(got)), "a page was fetched twice"
    expected = simulate_crawl(graph.out, [served.seed], ordering, tie, limit=len(got))
    assert_exact_order(got, expected, 250)
    # The orderings really differ on this graph (the test is not vacuous).
    if ordering != "bf":
        assert got != simulate_crawl(graph.out, [served.seed], "bf", tie, limit=len(got))


@pytest.mark.parametrize("pipelined", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_push_fetch_order_matches_simulation_by_url_ids(pipelined, emacs, graph_server, crawl, tmp_path):
    """The default ordering, ``push``, in exact order. Among residuals of one level it
    pushes the larger node id first, and a crawl's ids are hashes of the URLs
    (:func:`~ipr_crawl.ordering.urls.node_id`; the served port is part of them): the
    simulation runs on those ids, so that its ties are the crawl's. (On the graph's own
    node numbers the crawl leaves the simulation after about 120 fetches, at a different
    fetch in each run.)"""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    nid = {n: node_id(c) for c, n in back.items()}
    run = crawl(served.seed_url, tmp_path / "crawl.log",
                {**SEQUENTIAL, "IPR_ORDERING": "push", "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": PAGES,
                 "IPR_RECORD_PIPELINED": pipelined})
    assert run.returncode == 0, run.stderr[-3000:]
    got = [nid[back[canonical_url(u)]] for u in run.fetched]
    out = {nid[n]: [nid[t] for t in targets] for n, targets in graph.out.items()}
    expected = simulate_crawl(out, [nid[served.seed]], "push", limit=len(got))
    assert_exact_order(got, expected, 250)
    assert "'ipr/push/updates'" in run.log  # the push phase ran: its ties were exercised


def test_one_request_at_a_time_is_the_exact_order_at_the_default_pop_batch(emacs, graph_server, crawl, tmp_path):
    """CONCURRENT_REQUESTS=1 with IPR_POP_BATCH_SIZE left at its default (8): a pop
    leases at most half the concurrency (at least 1), so each request is still chosen
    with every earlier page recorded, and the crawl is the simulation's exact order.
    Leasing 8 at once would choose 8 pages with one page's links."""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    tie = {n: tie_for("ipr", c) for c, n in back.items()}
    settings = {k: v for k, v in SEQUENTIAL.items() if k != "IPR_POP_BATCH_SIZE"}
    run = crawl(served.seed_url, tmp_path / "crawl.log",
                {**settings, "IPR_ORDERING": "ipr", "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 120})
    assert run.returncode == 0, run.stderr[-3000:]
    got = [back[canonical_url(u)] for u in run.fetched]
    expected = simulate_crawl(graph.out, [served.seed], "ipr", tie, limit=len(got))
    assert_exact_order(got, expected, 100)


def test_depth_priority_is_the_first_key_as_in_scrapy(emacs, graph_server, crawl, tmp_path):
    """``DEPTH_PRIORITY=1`` (Scrapy's breadth-first recipe: a link request's priority is
    minus its depth) with one request at a time: Scrapy's priority queue fetches the
    pages in order of depth, and so does the frontier, whose first key is
    ``Request.priority`` (the ordering's score only orders pages of one depth). Without
    it, the ``ipr`` ordering goes deeper early."""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    depth = {served.seed: 0}
    frontier = [served.seed]
    while frontier:
        nxt = []
        for u in frontier:
            for v in graph.out.get(u, ()):
                if v not in depth:
                    depth[v] = depth[u] + 1
                    nxt.append(v)
        frontier = nxt
    depths = {}
    pages = 1 + sum(1 for d in depth.values() if d == 1) + 60  # into depth 2
    for label, extra in (("depth", {"DEPTH_PRIORITY": 1}), ("plain", {})):
        run = crawl(served.seed_url, tmp_path / f"{label}.log",
                    {**SEQUENTIAL, **extra, "IPR_ORDERING": "ipr", "IPR_DATA_DIR": tmp_path / label,
                     "CLOSESPIDER_PAGECOUNT": pages})
        assert run.returncode == 0, run.stderr[-3000:]
        depths[label] = [depth[back[canonical_url(u)]] for u in run.fetched]
    assert len(depths["depth"]) >= pages and max(depths["depth"]) >= 2
    assert depths["depth"] == sorted(depths["depth"]), depths["depth"]
    assert depths["plain"] != sorted(depths["plain"])  # the ordering alone does not crawl by depth


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_wait_for_parse_one_request_at_a_time_is_the_exact_order_without_scraper_backout(emacs, graph_server, crawl,
                                                                                      tmp_path):
    """IPR_WAIT_FOR_PARSE with CONCURRENT_REQUESTS=1 and Scrapy's scraper left as it is
    (SCRAPER_SLOT_MAX_ACTIVE_SIZE at its default): the engine asks for the next request
    as soon as a download ends, while the page is still being parsed; the scheduler
    waits until the parse ends (and the page is recorded), so the crawl is the
    simulation's exact order."""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    tie = {n: tie_for("ipr", c) for c, n in back.items()}
    run = crawl(served.seed_url, tmp_path / "crawl.log",
                {"CONCURRENT_REQUESTS": 1, "IPR_WAIT_FOR_PARSE": True, "IPR_ORDERING": "ipr",
                 "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 120})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "'ipr/frontier/parse_waits'" in run.log
    got = [back[canonical_url(u)] for u in run.fetched]
    expected = simulate_crawl(graph.out, [served.seed], "ipr", tie, limit=len(got))
    assert_exact_order(got, expected, 100)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_polite_pop_one_request_at_a_time_is_the_exact_order_on_many_hosts(graph_server, crawl, tmp_path):
    """IPR_POLITE_POP on, CONCURRENT_REQUESTS=1, IPR_POP_BATCH_SIZE at its default, the
    polblogs graph served on 16 loopback hosts: with no download delay every host is
    free whenever the engine asks, and a polite pop leases at most half the concurrency
    (at least 1), so the crawl is the simulation's exact order. Leasing one request per
    free host (up to 8) at once would hand out the second-best of the first pop next."""
    from ipr_crawl.evaluation.serve import host_addresses

    graph, urls = read_graph(POLBLOGS), read_urls(POLBLOGS_URLS)
    served = graph_server(POLBLOGS, POLBLOGS_URLS, hosts=16)
    port = served.base.rsplit(":", 1)[1]
    address = host_addresses(urls, 16)
    back = {canonical_url(f"http://{address[n]}:{port}{p}"): n for n, p in page_paths(graph, urls).items()}
    settings = {k: v for k, v in SEQUENTIAL.items() if k != "IPR_POP_BATCH_SIZE"}
    run = crawl(served.seed_url, tmp_path / "crawl.log",
                {**settings, "IPR_ORDERING": "ipr", "IPR_POLITE_POP": True, "IPR_TIE_RULE": "none",
                 "IPR_GRAPH_STAY_ON_HOSTS": False, "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 120})
    assert run.returncode == 0, run.stderr[-3000:]
    got = [back[canonical_url(u)] for u in run.fetched]
    assert len({urlsplit(u).hostname for u in run.fetched}) >= 4, "the crawl did not reach several hosts"
    expected = simulate_crawl(graph.out, [served.seed], "ipr", limit=len(got))
    assert_exact_order(got, expected, 100)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_resume_fetches_the_rest_once(graph_server, crawl, tmp_path):
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    back, _ = node_map(graph, None, served.base)
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data, "INTERRUPT_AFTER_PAGES": 100})
    assert first.returncode == 0, first.stderr[-3000:]
    assert "(new)" in first.log and "Spider closed (shutdown)" in first.log  # interrupted, as by Ctrl-C
    assert 100 <= len(first.fetched) < 300
    second = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data})
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed" in second.log
    assert "'ipr/resumed': 1" in second.log
    assert "crawl 'ipr_crawl.graph' closed (finished)" in second.log
    both = [back[canonical_url(u)] for u in first.fetched + second.fetched]
    twice = [n for n, c in collections.Counter(both).items() if c > 1]
    assert not twice, f"fetched twice across the runs: {twice[:10]}"
    assert set(both) == set(reachable(graph, served.seed))
    assert second.fetched, "the second run fetched nothing"


def test_requests_redis_lost_are_not_failed_and_come_back_with_a_link(graph_server, crawl, tmp_path, redis_client,
                                                                       crawl_id):
    """Lost writes (a failover with asynchronous replication, an AOF ``everysec`` loss)
    can leave a queued URL without its request. A run interrupted after 40 pages; 30
    queued requests deleted, as the lost writes; the resumed run fails none of them:
    each waits aside until a page links to it again, and the crawl ends with every URL
    it knows fetched but those no later page linked to, which its last line names."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    back, _ = node_map(graph, None, served.base)
    shared = {"IPR_REDIS_URL": "unix://" + redis_client.socket_file, "IPR_CRAWL_ID": crawl_id}
    first = crawl(served.seed_url, tmp_path / "run1.log", {**shared, "INTERRUPT_AFTER_PAGES": 40})
    assert first.returncode == 0, first.stderr[-3000:]
    req = f"ipr:{{{crawl_id}}}:req"
    lost = [f for f in redis_client.hkeys(req) if len(f) == 8][:30]
    assert len(lost) == 30
    redis_client.hdel(req, *lost)
    second = crawl(served.seed_url, tmp_path / "run2.log", shared)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sum("WARNING" in line and "lost their request in Redis (lost writes: a" in line
               for line in second.log.splitlines()) == 1  # once; the rest at INFO
    assert re.search(r"'ipr/frontier/payload_lost': 30\b", second.log), second.log[-3000:]
    assert "'ipr/crawl/failed': 0" in second.log
    both = {back[canonical_url(u)] for u in first.fetched + second.fetched}
    orphans = int(redis_client.scard(f"ipr:{{{crawl_id}}}:orphans"))
    # every URL the crawl knows is fetched or waits aside; none failed, none left queued (the
    # pages only those that stay aside link to are not known: what the lost writes cost)
    assert len(both) + orphans == redis_client.hlen(f"ipr:{{{crawl_id}}}:node")
    assert len(both) > 400 and orphans < 30  # most came back with a link from a page fetched after
    if orphans:
        assert f"{orphans} queued URLs lost their request in Redis (lost writes) and no page" in second.log


def test_unknown_ordering_fails_the_crawl(graph_server, crawl, tmp_path):
    served = graph_server(HARVARD)
    run = crawl(served.seed_url, tmp_path / "crawl.log", {"IPR_ORDERING": "nope", "IPR_DATA_DIR": tmp_path / "data"}, timeout=120)
    assert run.returncode != 0
    out = run.stderr + run.log
    assert "IPR_ORDERING" in out and "nope" in out
    assert not run.fetched


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_crawl_from_redirecting_seed(graph_server, crawl, tmp_path):
    """``/_ipr/seed`` 302-redirects to the seed page: the redirect is recorded
    as a page with one out-link and the whole graph is fetched once."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    back, _ = node_map(graph, None, served.base)
    run = crawl(served.base + "/_ipr/seed", tmp_path / "crawl.log", {"IPR_DATA_DIR": tmp_path / "data"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Redirecting (302)" in run.log
    assert "'ipr/frontier/redirects': 1" in run.log
    got = [back[canonical_url(u)] for u in run.fetched]
    assert got[0] == served.seed
    assert len(got) == len(set(got))
    assert set(got) == set(reachable(graph, served.seed))


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_resume_with_another_ordering_is_refused(graph_server, crawl, tmp_path):
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data, "INTERRUPT_AFTER_PAGES": 20})
    assert first.returncode == 0, first.stderr[-3000:]
    second = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data, "IPR_ORDERING": "blc"}, timeout=120)
    out = second.log + second.stderr
    assert "IncompatibleCrawl" in out and "push" in out and "IPR_ORDERING" in out
    assert not second.fetched
    assert second.returncode != 0


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_resume_after_a_killed_crawl(graph_server, crawl, tmp_path):
    """SIGKILL mid-crawl: the leases of requests in flight expire
    (IPR_LEASE_SECS) and the resumed crawl fetches everything left."""
    import re
    import subprocess
    import sys
    import time

    from conftest import REPO, kill_embedded_redis

    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    back, _ = node_map(graph, None, served.base)
    data, log1 = tmp_path / "data", tmp_path / "run1.log"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={served.seed_url}",
           "-s", f"IPR_DATA_DIR={data}", "-s", f"LOG_FILE={log1}", "-s", "DOWNLOAD_DELAY=0.02",
           "-s", "IPR_REDIS_APPENDFSYNC=always",
           # The default IPR_LEASE_SECS (600 s): the dead run's leases come back
           # because its heartbeat stops, within 2 x IPR_HEARTBEAT_SECS.
           "-s", "IPR_HEARTBEAT_SECS=1"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if log1.exists() and log1.read_text().count("Crawled (200)") >= 60:
                break
            assert proc.poll() is None, "the crawl ended before it could be killed"
            time.sleep(0.05)
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed = re.findall(r"Crawled \(200\) <GET (\S+)>", log1.read_text())
    assert 60 <= len(killed) < 500
    try:
        second = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data, "IPR_HEARTBEAT_SECS": 1},
                       timeout=90)
    finally:
        kill_embedded_redis(data)  # the killed run's server, if the second run left it
    assert re.search(r"requests leased by \S+ went back to the frontier: heartbeat silent", second.log), second.log[-3000:]
    assert "IPR_LEASE_SECS" not in second.log  # nothing waited for a lease to expire
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed" in second.log and "closed (finished)" in second.log
    both = [back[canonical_url(u)] for u in killed + second.fetched]
    assert set(both) == set(reachable(graph, served.seed))
    # Only pages in flight (or fetched, not yet recorded) at the kill come twice.
    twice = [n for n, c in collections.Counter(both).items() if c > 1]
    assert len(twice) <= 16 + 8, twice
    assert len(set(second.fetched)) == len(second.fetched)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_slow_start_chooses_the_first_pages_with_their_predecessors_links(emacs, graph_server, crawl, tmp_path):
    """IPR_SLOW_START (default): with CONCURRENT_REQUESTS=16 the first pages still come in
    the exact order (each chosen after the one before was recorded), the allowance then
    grows; without it the first 16 leave together, chosen from the seed's links alone."""
    graph, urls = emacs
    served = graph_server(EMACS, EMACS_URLS)
    back, _ = node_map(graph, urls, served.base)
    expected = simulate_crawl(graph.out, [served.seed], "push", limit=20)
    runs = {}
    for slow in (True, False):
        run = crawl(served.seed_url, tmp_path / f"slow{slow}.log",
                    {"IPR_DATA_DIR": tmp_path / f"data{slow}", "CLOSESPIDER_PAGECOUNT": 60,
                     "CONCURRENT_REQUESTS": 16, "IPR_SLOW_START": slow})
        assert run.returncode == 0, run.stderr[-3000:]
        runs[slow] = ([back[canonical_url(u)] for u in run.fetched], run.log)
    got, log = runs[True]
    assert got[:3] == expected[:3], (got[:6], expected[:6])
    assert "'ipr/frontier/slow_start_waits'" in log
    assert "'ipr/frontier/slow_start_waits'" not in runs[False][1]
    assert set(got[:16]) != set(runs[False][0][:16])  # the choice differs, not only the arrival order
