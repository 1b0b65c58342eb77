"""Politeness-aware pops (ipr_crawl/polite.py): real ``scrapy crawl graph`` runs of two
hosts, each a real graph served by ``python -m ipr_crawl.evaluation.serve`` (on 127.0.0.1 and
127.0.0.2, so Scrapy gives them two download slots), with ``DOWNLOAD_DELAY > 0``."""

from __future__ import annotations

import collections
from urllib.parse import urlsplit

import pytest
from conftest import TEST_DATA
from scrapy.settings import Settings

from ipr_crawl.config import DEFAULTS, FrontierConfig, polite_enabled
from ipr_crawl.evaluation.graphio import reachable, read_graph
from ipr_crawl.ordering.reference import simulate_crawl
from ipr_crawl.ordering.urls import canonical_url

HARVARD = TEST_DATA / "harvard500.tsv.gz"


@pytest.fixture
def hosts(graph_server):
    """Factory: ``hosts(graph, "127.0.0.1", "127.0.0.2", ...)`` serves ``graph`` once on
    each address (free ports) and returns ``[(seed node, seed URL, base URL), ...]``."""

    def start(graph, *addresses: str) -> list[tuple[int, str, str]]:
        return [(s.seed, s.seed_url, s.base) for s in (graph_server(graph, host=host) for host in addresses)]

    return start


def _settings(**values):
    s = Settings()
    for k, v in DEFAULTS.items():
        s.set(k, v, priority="addon")
    for k, v in values.items():
        s.set(k, v)
    return s


def test_setting_auto_follows_download_delay():
    assert not polite_enabled(_settings())
    assert polite_enabled(_settings(DOWNLOAD_DELAY=0.5))
    assert polite_enabled(_settings(AUTOTHROTTLE_ENABLED=True))
    assert not polite_enabled(_settings(DOWNLOAD_DELAY=0.5, IPR_POLITE_POP=False))
    assert polite_enabled(_settings(IPR_POLITE_POP="True"))
    cfg = FrontierConfig.from_settings(_settings(DOWNLOAD_DELAY=1), "graph")
    assert cfg.polite_pop and cfg.polite_buffer_size == 64
    with pytest.raises(ValueError, match="IPR_POLITE_POP"):
        polite_enabled(_settings(IPR_POLITE_POP="sometimes"))
    with pytest.raises(ValueError, match="IPR_POLITE_BUFFER_SIZE"):
        FrontierConfig.from_settings(_settings(IPR_POLITE_BUFFER_SIZE=0), "graph")
    assert cfg.polite_min_ratio == 0.0
    assert FrontierConfig.from_settings(_settings(IPR_POLITE_MIN_RATIO="0.1"), "graph").polite_min_ratio == 0.1
    for bad in (-0.1, 1.5, "often"):
        with pytest.raises(ValueError, match="IPR_POLITE_MIN_RATIO"):
            FrontierConfig.from_settings(_settings(IPR_POLITE_MIN_RATIO=bad), "graph")


def _by_host(fetched: list[str]) -> list[str]:
    return [urlsplit(u).hostname for u in fetched]


@pytest.mark.parametrize("min_ratio", [pytest.param(0.0, marks=pytest.mark.slow), 0.5])
def test_two_hosts_interleave_and_nothing_is_lost(min_ratio, hosts, crawl, tmp_path):
    """Every reachable page of both hosts is fetched exactly once (also when
    IPR_POLITE_MIN_RATIO holds back a free host's URLs that rank too low)."""
    graph = read_graph(HARVARD)
    (seed_a, url_a, base_a), (seed_b, url_b, base_b) = hosts(HARVARD, "127.0.0.1", "127.0.0.2")
    run = crawl(
        f"{url_a},{url_b}", tmp_path / "crawl.log",
        {"DOWNLOAD_DELAY": 0.01, "RANDOMIZE_DOWNLOAD_DELAY": False, "IPR_POLITE_POP": True,
         "IPR_POLITE_MIN_RATIO": min_ratio, "IPR_DATA_DIR": tmp_path / "data"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "crawl 'ipr_crawl.graph' closed (finished)" in run.log
    canon = [canonical_url(u) for u in run.fetched]
    assert len(canon) == len(set(canon)), "a page was fetched twice"
    expected = {canonical_url(base_a + p) for p in _paths(graph, seed_a)} | {
        canonical_url(base_b + p) for p in _paths(graph, seed_b)
    }
    assert set(canon) == expected


@pytest.mark.parametrize("ordering", ["ipr", pytest.param("bf", marks=pytest.mark.slow)])
@pytest.mark.parametrize("polite", [True, False])
def test_delay_bound_crawl_does_not_stall_on_one_host(ordering, polite, hosts, crawl, tmp_path):
    """With a delay that binds (each host can take a request only every 50 ms),
    the polite pop keeps the two hosts progressing together: every 10
    consecutive fetches hold both. The same crawl with the plain global pop
    (the control) has runs of one host: the first seed's links come first in
    the global order and fill the downloader with that host's requests."""
    (_, url_a, _), (_, url_b, _) = hosts(HARVARD, "127.0.0.1", "127.0.0.2")
    run = crawl(
        f"{url_a},{url_b}", tmp_path / "crawl.log",
        {"DOWNLOAD_DELAY": 0.05, "RANDOMIZE_DOWNLOAD_DELAY": False, "IPR_POLITE_POP": polite,
         "IPR_ORDERING": ordering, "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 150},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    order = _by_host(run.fetched)
    assert len(order) >= 150 and len(set(run.fetched)) == len(run.fetched)
    one_host = [i for i in range(len(order) - 9) if len(set(order[i : i + 10])) == 1]
    if polite:
        assert not one_host, f"fetches {one_host[0]}..{one_host[0] + 9} all from one host"
    else:
        assert one_host, "the global pop never ran ten fetches on one host: the control shows nothing"
def _paths(graph, seed: int) -> list[str]:
    """Served paths (``/n/<id>.html``, no URL list) of the pages reachable from ``seed``."""
    return [f"/n/{n}.html" for n in reachable(graph, seed)]


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_polite_resume_fetches_the_rest_once(hosts, crawl, tmp_path):
    """Interrupted (as by Ctrl-C) with requests buffered and leased: they are
    handed back at close; the resumed crawl fetches every other page once."""
    graph = read_graph(HARVARD)
    (seed_a, url_a, base_a), (seed_b, url_b, base_b) = hosts(HARVARD, "127.0.0.1", "127.0.0.2")
    settings = {"DOWNLOAD_DELAY": 0.01, "IPR_POLITE_POP": True, "IPR_DATA_DIR": tmp_path / "data"}
    first = crawl(f"{url_a},{url_b}", tmp_path / "run1.log", {**settings, "INTERRUPT_AFTER_PAGES": 150})
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Spider closed (shutdown)" in first.log
    second = crawl(f"{url_a},{url_b}", tmp_path / "run2.log", settings)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "crawl 'ipr_crawl.graph' closed (finished)" in second.log
    both = [canonical_url(u) for u in first.fetched + second.fetched]
    twice = [u for u, c in collections.Counter(both).items() if c > 1]
    assert not twice, f"fetched twice across the runs: {twice[:5]}"
    expected = {canonical_url(base_a + p) for p in _paths(graph, seed_a)} | {
        canonical_url(base_b + p) for p in _paths(graph, seed_b)
    }
    assert set(both) == expected


def test_one_host_keeps_the_exact_order(hosts, crawl, tmp_path):
    """Polite pop on, one host, the sequential settings: the plain order."""
    from ipr_crawl.ordering.urls import tie_key

    ((seed, url, base),) = hosts(HARVARD, "127.0.0.1")
    graph = read_graph(HARVARD)
    back = {canonical_url(base + f"/n/{n}.html"): n for n in graph.nodes}
    tie = {n: tie_key(c) for c, n in back.items()}
    run = crawl(url, tmp_path / "crawl.log", {
        "CONCURRENT_REQUESTS": 1, "IPR_POP_BATCH_SIZE": 1, "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 0,
        "DOWNLOAD_DELAY": 0.001, "IPR_POLITE_POP": True, "IPR_ORDERING": "ipr",
        "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 150,
    })
    assert run.returncode == 0, run.stderr[-3000:]
    got = [back[canonical_url(u)] for u in run.fetched]
    expected = simulate_crawl(graph.out, [seed], "ipr", tie, limit=len(got))
    assert len(got) >= 150
    assert got == expected[: len(got)]


def test_pop_scan_one_per_free_slot(redis_client, crawl_id):
    """pop.lua's polite scan against a real redis-server: busy slots skipped, one
    request per slot, the slot read from meta download_slot or the host name, and
    the moving window finds a host whose URLs all rank low."""
    from scrapy import Request

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.scheduler.codec import decode_request, encode_request
    from ipr_crawl.store import FrontierStore

    store = FrontierStore(redis_client, crawl_id, "bf", cutoff="")
    store.open()

    def add(url, **meta):
        store.enqueue(node_id(url), 0, encode_request(Request(url, meta=meta), None)[0], False)

    for i in range(30):
        add(f"http://a.example:8080/p{i}")
    add("http://B.example/x", download_slot="slot-b")
    add("http://c.example/y")
    for i in range(3):
        add(f"http://late.example/{i}")

    def urls(items):
        return [decode_request(p, None).url for _, p in items]

    _, items = store.pop(8, 60, scan=10, busy=["c.example"])
    assert urls(items) == ["http://a.example:8080/p0"]  # a's best; b and c beyond the window
    _, items = store.pop(8, 60, scan=40, busy=["a.example"])
    assert urls(items) == ["http://b.example/x", "http://c.example/y", "http://late.example/0"]
    _, items = store.pop(8, 60, scan=5, busy=["a.example", "late.example"])
    assert urls(items) == []  # nothing free among the first 5
    _, items = store.pop(8, 60, scan=5, busy=["a.example"], offset=25)
    assert urls(items) == ["http://late.example/1"]  # found by the moving window
    _, items = store.pop(3, 60)  # the plain pop is unchanged: best first
    assert urls(items) == ["http://a.example:8080/p1", "http://a.example:8080/p2", "http://a.example:8080/p3"]
    assert store.counts()["in_flight"] == 8


def test_pop_polite_min_ratio(redis_client, crawl_id):
    """IPR_POLITE_MIN_RATIO: a free slot's best entry is leased only if its priority is
    at least r x the frontier's best (pr ordering: priorities set directly)."""
    from scrapy import Request

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.scheduler.codec import decode_request, encode_request
    from ipr_crawl.store import FrontierStore

    store = FrontierStore(redis_client, crawl_id, "pr", cutoff="")
    store.open()
    scores = {"http://a.example/1": 1.0, "http://a.example/2": 0.9, "http://b.example/1": 0.5,
              "http://c.example/1": 0.2, "http://d.example/1": 0.05}
    for url in scores:
        store.enqueue(node_id(url), 0, encode_request(Request(url), None)[0], False)
    store.set_scores([(node_id(u), s) for u, s in scores.items()])

    def urls(items):
        return sorted(decode_request(p, None).url for _, p in items)

    def pop(ratio, busy=("a.example",), offset=0):
        _, items = store.pop(8, 60, scan=10, busy=list(busy), offset=offset, min_ratio=ratio)
        store.ack("release", [(m, m[8:]) for m, _ in items])
        return urls(items)

    assert pop(0.0) == ["http://b.example/1", "http://c.example/1", "http://d.example/1"]
    assert pop(0.1) == ["http://b.example/1", "http://c.example/1"]  # d: 0.05 < 0.1 x 1.0
    assert pop(0.5) == ["http://b.example/1"]
    assert pop(0.6) == []  # only a's URLs qualify, and a is busy
    assert pop(1.0, busy=()) == ["http://a.example/1"]  # the best's ties only
    assert pop(0.1, offset=3) == ["http://b.example/1", "http://c.example/1"]  # window stays in range


@pytest.mark.parametrize("polite", [pytest.param(True, marks=pytest.mark.slow), False], ids=["polite", "plain"])
def test_pops_lease_no_more_than_the_engine_has_room_for(polite, graph_server, crawl, tmp_path):
    """IPR_WAIT_FOR_PARSE (on by default), in a real crawl of polblogs on 16 loopback
    hosts with a download delay: a pop, polite or plain, leases no more than
    CONCURRENT_REQUESTS less the requests in progress (downloading, waiting for their
    host's delay, or being parsed), and the few a pipelined pop leases ahead of need
    (at most a pop batch: ``Pacing.ahead``). Until 2026-11-25 a polite pop leased half of
    CONCURRENT_REQUESTS whatever was in progress: here 60 of 77 pops asked for more
    than there was room for. Read from ``tests/helpers/lease_probe.py``'s log lines."""
    from lease_probe import LINE

    polblogs, polblogs_urls = TEST_DATA / "polblogs.tsv.gz", TEST_DATA / "polblogs.urls.tsv.gz"
    served = graph_server(polblogs, polblogs_urls, hosts=16)
    run = crawl(served.seed_url, tmp_path / "crawl.log", {
        "SCHEDULER": "tests.helpers.lease_probe.LeaseProbeScheduler", "CONCURRENT_REQUESTS": 4, "DOWNLOAD_DELAY": 0.1,
        "RANDOMIZE_DOWNLOAD_DELAY": False, "IPR_POLITE_POP": polite, "IPR_GRAPH_STAY_ON_HOSTS": False,
        "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 150,
    })
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.fetched) >= 150
    leases = [tuple(int(g) for g in m.groups()) for m in LINE.finditer(run.log)]
    made = [x for x in leases if bool(x[4]) == polite]
    assert len(made) >= 50, f"{len(made)} {'polite' if polite else 'plain'} pops: the crawl did not take that path"
    # count, in progress, concurrency, buffer, polite, ahead, room. The room is the scheduler's
    # own count (Pacing.lease_room), read with in_progress: it follows the rule whatever the
    # machine's speed (a busy machine parses late, and the engine's requests in progress
    # may exceed CONCURRENT_REQUESTS: the room is 0 then, not negative; IPR_SLOW_START makes it
    # smaller at the start)
    assert all(x[6] <= min(max(1, x[2] // 2), max(0, x[2] - x[1])) for x in leases), "room past the rule"
    assert any(x[6] < 2 for x in made), "no pop found the engine nearly full: the test shows nothing"
    # the pipelined pops may lease a few ahead of need (rate x round trip), never past a pop batch
    assert all(x[5] <= max(1, x[2] // 2) for x in leases), "lease-ahead past a pop batch"
    over = [x for x in leases if x[0] > x[6] + x[5]]
    assert not over, f"{len(over)} of {len(leases)} pops asked for more than the engine had room for: {over[:5]}"


def test_a_non_asyncio_reactor_does_not_wait_for_the_engines_heartbeat(hosts, crawl, tmp_path):
    """Polite pop (a download delay) under Twisted's epoll reactor: a pop made while the
    engine asks hands it the requests it leased. Before, it reported none, and the engine
    took them at its next 5 s heartbeat: the first pages came 5 s apart."""
    import re
    from datetime import datetime

    ((_, url, _),) = hosts(HARVARD, "127.0.0.1")
    run = crawl(url, tmp_path / "crawl.log", {
        "DOWNLOAD_DELAY": 0.015, "TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor",
        "IPR_DATA_DIR": tmp_path / "data", "CLOSESPIDER_PAGECOUNT": 40,
    })
    assert run.returncode == 0, run.stderr[-3000:]
    stamps = [datetime.fromisoformat(m) for m in re.findall(r"^(\S+ \S+) \[scrapy.core.engine\] DEBUG: Crawled \(200\)",
                                                           run.log, re.M)]
    assert len(stamps) >= 40
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) < 4, gaps[:10]  # the engine's heartbeat is 5 s
