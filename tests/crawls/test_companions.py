"""The companions Scrapy users run beside a scheduler, each in a real project
(tests/helpers/companions.py) against a real local site, with and without the add-on:
Scrapy's HTTP cache (DummyPolicy, RFC2616Policy; with and without revisits),
scrapy-deltafetch, scrapy-poet page objects, Spidermon, and another add-on that sets
its own ``REQUEST_FINGERPRINTER_CLASS`` and download handlers. The site is
``ipr-crawl serve-changes`` serving real EmacsWiki pages of the shipped change-log
sample (tests/data/SOURCES.md), on the session's real redis-server. A companion
whose package is missing is skipped, naming it (the ``companions`` extra).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from companions import ASYNC_DELTAFETCH, OTHER_ADDON, POET_SPIDER, PROBE_MIDDLEWARES, REFS_SPIDER, make_project, run
from conftest import REPO, TEST_DATA
from procs import start_server

from ipr_crawl.evaluation.revisit_sim import load_log, parse_time, write_log
from ipr_crawl.evaluation.serve_changes import ChangeSite
from ipr_crawl.ordering.urls import node_id
from ipr_crawl.store.revisit import RevisitStore

RFC2616 = "scrapy.extensions.httpcache.RFC2616Policy"
DUMMY = "scrapy.extensions.httpcache.DummyPolicy"
#: the simulated instants of the crawls: a first crawl, then one after every page is due
FIRST, LATER, LATEST = "2013-03-01", "2013-06-15", "2013-10-01"
#: index URL -> (instant -> {page URL: version served then}), per served site
SITE_VERSIONS: dict = {}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """serve-changes with 10 EmacsWiki pages of the shipped sample alive from FIRST to
    LATEST (the 7 that change most there, 3 that do not), clock stopped at FIRST;
    yields ``(index URL, base)``."""
    pages = load_log(str(TEST_DATA / "emacswiki_changes.first1100.csv.gz"),
                     str(TEST_DATA / "emacswiki_pages.first1100.csv.gz"))
    s, e = parse_time(FIRST), parse_time(LATEST)
    alive = sorted((p for p in pages if p.first_seen <= s and p.last_seen >= e), key=lambda p: p.url)
    changes = {p.url: sum(s < c <= e for c in p.changes) for p in alive}
    busy = sorted((p for p in alive if changes[p.url]), key=lambda p: (-changes[p.url], p.url))[:7]
    chosen = busy + [p for p in alive if not changes[p.url]][:3]
    folder = tmp_path_factory.mktemp("site")
    write_log(chosen, folder / "changes.csv.gz", folder / "pages.csv.gz")
    proc, m = start_server(
        [sys.executable, "-m", "ipr_crawl.evaluation.serve_changes", "--changes", str(folder / "changes.csv.gz"),
         "--pages", str(folder / "pages.csv.gz"), "--port", "0", "--resolution", "1d", "--start", FIRST],
        r"^serving changes: (\d+) pages at (\S+)",
    )
    index = m[2]
    served = ChangeSite(chosen, parse_time(FIRST), resolution=86400)
    SITE_VERSIONS[index] = lambda t: {index.rsplit("/_ipr/", 1)[0] + path: served.version(p, t)[0]
                                      for path, p in served.by_path.items()}
    yield index, index.rsplit("/_ipr/", 1)[0]
    proc.kill()
    proc.communicate(timeout=10)


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path / "proj")


def store_settings(redis_client, crawl_id: str, **more: object) -> dict[str, object]:
    return {"IPR_REDIS_URL": "unix://" + redis_client.socket_file, "IPR_CRAWL_ID": crawl_id, **more}


def ok(r):
    assert r.returncode == 0, r.log[-4000:]
    assert "Traceback" not in r.log, r.log[r.log.index("Traceback") - 1500:][:5000]
    return r


# -- Scrapy's HTTP cache ----------------------------------------------------------------
@pytest.mark.parametrize("policy", [DUMMY, RFC2616])
def test_httpcache_without_revisits_same_requests_and_items(site, project, redis_client, crawl_id, policy):
    """A crawl and its rerun (served from the cache) fetch the same requests, with the
    same cache flags, and keep the same items with the add-on as without."""
    index, _ = site

    def sequence(addon: bool):
        cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": policy, "HTTPCACHE_DIR": f"cache-{addon}"}
        settings = {**store_settings(redis_client, crawl_id), **cache}
        return [ok(run(project, start_url=index, addon=addon, name=f"{n}{addon}", settings=settings)) for n in "ab"]

    (plain1, plain2), (ipr1, ipr2) = parallel(lambda: sequence(False), lambda: sequence(True))
    assert ipr1.fetched == plain1.fetched and ipr2.fetched == plain2.fetched
    assert ipr1.items == plain1.items and ipr2.items == plain2.items and len(ipr1.items) == 10
    for key in ("httpcache/hit", "httpcache/miss", "httpcache/store", "httpcache/revalidate"):
        assert ipr2.stat(key) == plain2.stat(key), key
    if policy == DUMMY:  # the rerun is served from the cache alone
        assert ipr2.stat("httpcache/hit") == 11 and ipr2.stat("httpcache/miss") == 0
    else:  # Cache-Control: no-cache pages are fetched again in full; the index is not stored
        assert ipr2.stat("httpcache/invalidate") == 10


def revisit_settings(redis_client, crawl_id: str, clock: str, **more: object) -> dict[str, object]:
    return store_settings(
        redis_client, crawl_id, IPR_REVISIT_ENABLED=True, IPR_REVISIT_MODE="run-once",
        IPR_REVISIT_CLOCK=f"virtual:{clock}", IPR_REVISIT_RESOLUTION_SECS=86400, **more,
    )


def truth(pages_url: str, at: str) -> dict[str, str]:
    """URL -> the version serve-changes serves at ``at`` (its own rule, in-process)."""
    return {url: f"version {v}" for url, v in SITE_VERSIONS[pages_url](parse_time(at)).items()}


def versions(r) -> dict[str, str]:
    return {json.loads(i)["url"]: json.loads(i)["version"] for i in r.items}


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_httpcache_rfc2616_with_revisits(site, project, redis_client, crawl_id):
    """RFC2616Policy beside revisits. The first crawl is the same as without the add-on.
    The cache's copy is from FIRST, the crawl's last fetch from LATER (a crawl without
    the cache between): at LATEST the validators that go out are the copy's, set by one
    layer (a 304 brings that copy back); no page reaches the spider older than served;
    a 304 the cache turned into its copy is "unchanged" in the change history."""
    index, base = site
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": RFC2616, "HTTPCACHE_DIR": "cache",
             "DOWNLOADER_MIDDLEWARES": PROBE_MIDDLEWARES}
    plain = ok(run(project, start_url=index, addon=False, name="plain", settings={**cache, "HTTPCACHE_DIR": "c0"}))
    first = ok(run(project, start_url=index, name="first", settings={**revisit_settings(redis_client, crawl_id, FIRST), **cache}))
    assert first.fetched == plain.fetched and first.items == plain.items
    ok(run(project, start_url=index, name="later", settings=revisit_settings(redis_client, crawl_id, LATER)))
    latest = ok(run(project, start_url=index, name="latest", settings={**revisit_settings(redis_client, crawl_id, LATEST), **cache}))
    probe = {k: v for k, v in latest.stats.items() if k.startswith(("probe/", "ipr/revisit", "httpcache"))}
    print(probe)
    now = truth(index, LATEST)
    stale = {u: v for u, v in versions(latest).items() if v != now[u]}
    events = [e.fields["kind"] for e in RevisitStore(redis_client, crawl_id).events(count=1000)][-11:]
    print("stale", stale, "events", events)
    assert latest.stat("probe/validators/before_cache") == 0
    assert latest.stat("probe/validators/not_of_the_copy") == 0 and latest.stat("probe/validators/of_the_copy") == 10
    assert not stale
    moved = sum(now[u] != v for u, v in truth(index, LATER).items())
    assert latest.stat("ipr/revisit/changed") == moved
    # every page, the index revisited and the index as start URL: nothing else
    assert latest.stat("ipr/revisit/unchanged") == 12 - moved
    # the pages the same since FIRST: a 304, turned into the cached copy, "unchanged"
    assert latest.stat("httpcache/revalidate") == latest.stat("probe/network/304") > 0
    assert latest.stat("ipr/revisit/not_modified") == 0


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_httpcache_dummy_with_revisits(site, project, redis_client, crawl_id):
    """DummyPolicy beside revisits: a crawl without the cache, then the cache turned on
    (empty: every request a miss) at LATER, then at LATEST (every request a hit). The
    misses go out without validators (a 304 would be kept as the page's copy); a hit
    is not an access (the budget's spend and the URLs' states stay as they were); a
    crawl without the add-on served from that cache gets every page's content."""
    index, base = site
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_POLICY": DUMMY, "HTTPCACHE_DIR": "cache",
             "DOWNLOADER_MIDDLEWARES": PROBE_MIDDLEWARES}
    ok(run(project, start_url=index, name="first", settings=revisit_settings(redis_client, crawl_id, FIRST)))
    store = RevisitStore(redis_client, crawl_id)
    later = ok(run(project, start_url=index, name="later", settings={**revisit_settings(redis_client, crawl_id, LATER), **cache}))
    print({k: v for k, v in later.stats.items() if k.startswith(("probe/", "ipr/revisit", "httpcache"))})
    assert "DummyPolicy" in later.log  # the start-up warning
    assert later.stat("probe/network/304") == 0 and later.stat("probe/validators/sent_without_copy") == 0
    spent = store.budget_accesses()
    states = {u: store.load(node_id(u)).accesses for u in truth(index, LATER)}
    latest = ok(run(project, start_url=index, name="latest", settings={**revisit_settings(redis_client, crawl_id, LATEST), **cache}))
    print({k: v for k, v in latest.stats.items() if k.startswith(("probe/", "ipr/revisit", "httpcache"))})
    # every page, the index revisited and the index as start URL
    assert latest.stat("httpcache/hit") == 12 and latest.stat("ipr/revisit/cache_hit") == 12
    assert store.budget_accesses() == spent
    assert {u: store.load(node_id(u)).accesses for u in states} == states
    # Scrapy alone, served from the same cache: every page with its content, as at LATER
    plain = ok(run(project, start_url=index, addon=False, name="plain", settings=cache))
    assert versions(plain) == truth(index, LATER)


def parallel(*calls):
    """Run the crawl sequences ``calls`` side by side (each a function of no
    argument); returns their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


# -- scrapy-deltafetch ---------------------------------------------------------------------
@pytest.mark.slow  # six crawls: CI runs it (make test ARGS="-m 'slow or data'")
def test_deltafetch_reruns_and_revisits(site, project, redis_client, crawl_id):
    """scrapy-deltafetch drops the links to pages that gave items before (2.1.0 under
    Scrapy 2.19: with an async spider output, companions.ASYNC_DELTAFETCH). Its rerun
    with the add-on fetches and keeps the same as without it (the index alone, no
    item). It never sees revisits: the scheduler hands them to the engine, past the
    spider middlewares, so with revisits on the due pages are fetched again and the
    changed ones give their items again."""
    pytest.importorskip("scrapy_deltafetch", reason="scrapy-deltafetch is not installed (the companions extra)")
    index, _ = site
    (project / "comp" / "deltafetch.py").write_text(ASYNC_DELTAFETCH)
    delta = {"DELTAFETCH_ENABLED": True, "SPIDER_MIDDLEWARES": {"comp.deltafetch.AsyncDeltaFetch": 100}}

    def sequence(addon: bool, revisits: bool):
        tag = f"{addon}{revisits}"
        s = {**delta, "DELTAFETCH_DIR": f"delta-{tag}"}
        if revisits:
            return [ok(run(project, start_url=index, name=f"d{tag}{n}",
                           settings={**s, **revisit_settings(redis_client, crawl_id, at)})) for n, at in ((1, FIRST), (2, LATER))]
        s.update(store_settings(redis_client, f"{crawl_id}-{tag}"))
        return [ok(run(project, start_url=index, addon=addon, name=f"d{tag}{n}", settings=s)) for n in (1, 2)]

    (plain1, plain2), (ipr1, ipr2), (rev1, rev2) = parallel(
        lambda: sequence(False, False), lambda: sequence(True, False), lambda: sequence(True, True))
    assert ipr1.fetched == plain1.fetched == rev1.fetched and ipr1.items == plain1.items == rev1.items
    assert ipr2.fetched == plain2.fetched and ipr2.items == plain2.items == []
    assert ipr2.log.count("Ignoring already visited") == plain2.log.count("Ignoring already visited") == 10
    # revisits: every page due again is fetched, past DeltaFetch; the changed give items
    moved = sum(truth(index, FIRST)[u] != v for u, v in truth(index, LATER).items())
    assert rev2.stat("ipr/revisit/refreshed") == 11 and len(rev2.items) == rev2.stat("ipr/revisit/changed") == moved > 0


# -- scrapy-poet / web-poet ------------------------------------------------------------------
def test_scrapy_poet_page_objects(site, project):
    """A callback taking a web-poet page object (scrapy-poet's add-on, which sets its
    own REQUEST_FINGERPRINTER_CLASS): the same requests and items with the add-on."""
    pytest.importorskip("scrapy_poet", reason="scrapy-poet is not installed (the companions extra)")
    pytest.importorskip("web_poet", reason="web-poet is not installed (the companions extra)")
    index, _ = site
    (project / "comp" / "spiders" / "poet.py").write_text(POET_SPIDER)
    plain, ipr = parallel(lambda: ok(run(project, "poet", start_url=index, addon=False, name="poet0")),
                          lambda: ok(run(project, "poet", start_url=index, name="poet1")))
    assert ipr.fetched == plain.fetched and ipr.items == plain.items
    assert versions(ipr) == truth(index, FIRST)
    assert "ipr_crawl.scheduler.IprScheduler" in ipr.log and "ScrapyPoetRequestFingerprinter" in ipr.log


# -- another add-on's fingerprinter and download handlers -------------------------------------
@pytest.fixture
def other_project(project):
    (project / "comp" / "otheraddon.py").write_text(OTHER_ADDON)
    (project / "comp" / "spiders" / "refs.py").write_text(REFS_SPIDER)
    return project


def test_another_addons_fingerprinter_and_download_handlers(site, other_project, redis_client, crawl_id):
    """An add-on setting REQUEST_FINGERPRINTER_CLASS and the http/https download
    handlers (scrapy-zyte-api's pattern), before or after ipr-crawl's add-on: its
    handler downloads every request, its fingerprinter is the crawl's, and the crawl
    fetches and keeps the same as without ipr-crawl."""
    index, _ = site
    other = "comp.otheraddon.OtherAddon"

    def crawl(name: str, addons: dict[str, int], addon: bool = True):
        s = {"ADDONS": addons, **store_settings(redis_client, f"{crawl_id}-{name}")}
        return ok(run(other_project, start_url=index, addon=addon, name=name, settings=s))

    plain, before, after = parallel(
        lambda: crawl("plain", {other: 0}, addon=False),
        lambda: crawl("before", {other: 0, "ipr_crawl.Addon": 10}),
        lambda: crawl("after", {"ipr_crawl.Addon": 0, other: 10}),
    )
    assert plain.stat("other/handled") == 11 and len(plain.items) == 10
    for r in (before, after):
        assert r.fetched == plain.fetched and r.items == plain.items
        assert r.stat("other/handled") == 11 and r.stat("other/fingerprints") > 0
        assert "ipr_crawl.scheduler.IprScheduler" in r.log


def test_a_fingerprinter_that_merges_urls(site, other_project, redis_client, crawl_id):
    """Every link twice, as it is and with ``?ref=index``, which the other add-on's
    fingerprinter leaves out: Scrapy alone fetches each page once (11 requests), and so
    does the crawl with ipr-crawl, the same URLs with the same items (each ``?ref``
    link merged into its page's node: ``ipr/links/merged``)."""
    index, _ = site

    def crawl(name: str, addon: bool):
        s = {"ADDONS": {"ipr_crawl.Addon": 0, "comp.otheraddon.OtherAddon": 10},
             **store_settings(redis_client, f"{crawl_id}-{name}")}
        return ok(run(other_project, "refs", start_url=index, name=name, addon=addon, settings=s))

    plain, ours = parallel(lambda: crawl("plain", False), lambda: crawl("ours", True))
    assert plain.stat("other/handled") == 11 and len(plain.items) == 10
    assert ours.stat("other/handled") == 11
    assert ours.fetched == plain.fetched and ours.items == plain.items
    assert ours.stat("ipr/links/merged") == 10


# -- Spidermon ------------------------------------------------------------------------------
CLOSE_SUITE = '''
from spidermon import MonitorSuite
from spidermon.contrib.scrapy.monitors import ErrorCountMonitor, FinishReasonMonitor, ItemCountMonitor


class CloseSuite(MonitorSuite):
    monitors = [ItemCountMonitor, FinishReasonMonitor, ErrorCountMonitor]
'''


def docs_monitor() -> str:
    """The example monitor of docs/companions.md (its first ``# monitors.py`` block)."""
    text = (REPO / "docs" / "companions.md").read_text(encoding="utf-8")
    return text.split("```python\n# monitors.py\n", 1)[1].split("```", 1)[0]


def test_spidermon_stats_monitors_and_a_periodic_frontier_monitor(site, project, redis_client, crawl_id):
    """Spidermon's stats monitors at close and the docs' frontier monitor every second
    of a crawl with the add-on: every monitor passes."""
    pytest.importorskip("spidermon", reason="spidermon is not installed (the companions extra)")
    index, _ = site
    (project / "comp" / "monitors.py").write_text(docs_monitor())
    (project / "comp" / "close_suite.py").write_text(CLOSE_SUITE)
    r = ok(run(project, start_url=index, name="mon", settings={
        **store_settings(redis_client, crawl_id), "DOWNLOAD_DELAY": 0.25,
        "SPIDERMON_ENABLED": True, "EXTENSIONS": {"spidermon.contrib.scrapy.extensions.Spidermon": 500},
        "SPIDERMON_SPIDER_CLOSE_MONITORS": "comp.close_suite.CloseSuite", "SPIDERMON_MIN_ITEMS": 10,
        "SPIDERMON_MAX_ERRORS": 0, "SPIDERMON_PERIODIC_MONITORS": {"comp.monitors.FrontierSuite": 1},
    }))
    assert r.stat("ipr/pages/recorded") == 11 and len(r.items) == 10
    assert "monitor/frontier" in r.stats  # the periodic pass ran, with the frontier open
    assert r.log.count("[Spidermon] ipr-crawl frontier/frontier size... OK") >= 1
    assert "[Spidermon] FAILED" not in r.log and "... ERROR" not in r.log and "... FAIL" not in r.log
    for monitor in ("Extracted Items Monitor/test_stat_monitor", "Finish Reason Monitor/Should have the expected finished reason(s)"):
        assert f"[Spidermon] {monitor}... OK" in r.log
