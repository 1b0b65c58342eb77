"""Revisits end to end: real ``scrapy crawl graph`` processes with the
ConditionalGetMiddleware against ``ipr-crawl serve-changes`` serving real
EmacsWiki change histories (the shipped sample of tests/data: the first 1,100
pages of the shared log and their changes), on the session's real redis-server.

The crawls run on a virtual clock (``IPR_REVISIT_CLOCK=virtual:...``), which
jumps to the next due time whenever the crawl is idle, so a simulated year
takes seconds, and compare their coverage and efficiency with ``revisit-sim``
on the same pages: tolerance 0.01 and 1 % of the accesses (measured: they agree
exactly, same accesses and same versions).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import REPO, TEST_DATA, shared_file
from procs import start_server

from ipr_crawl.evaluation.revisit_sim import Page, load_log, parse_time, simulate, simulate_page
from ipr_crawl.evaluation.revisit_sim import write_log as save_log
from ipr_crawl.ordering.urls import node_id
from ipr_crawl.revisit.budget import explores_new
from ipr_crawl.revisit.policy import DAY, RevisitState, parse_policy, rate_counts
from ipr_crawl.store.revisit import RevisitStore

#: tests/data/SOURCES.md says how this sample was cut from ../shared/data/changes
SAMPLE_CHANGES = TEST_DATA / "emacswiki_changes.first1100.csv.gz"
SAMPLE_PAGES = TEST_DATA / "emacswiki_pages.first1100.csv.gz"

YEAR_START, YEAR_END = "2013-01-01", "2013-12-31T23:59:59"
#: the crawl's last visit day (IPR_REVISIT_UNTIL): visits are at bucket starts, and
#: a visit in a bucket sees all of that bucket's changes, as revisit-sim's last day
LAST_DAY = "2013-12-31"
_STAT = re.compile(r"'ipr/(revisit|pages)/(\w+)': (\d+)")


@pytest.fixture(scope="module")
def emacswiki():
    return load_log(str(SAMPLE_CHANGES), str(SAMPLE_PAGES))


def pick(pages: list[Page], changed: int, still: int, start: str, end: str) -> list[Page]:
    """Pages alive over [start, end]: the ``changed`` with most changes there
    (ties by URL) and the first ``still`` unchanged ones by URL."""
    s, e = parse_time(start), parse_time(end)
    alive = sorted((p for p in pages if p.first_seen <= s and p.last_seen >= e), key=lambda p: p.url)
    n = {p.url: sum(s < c <= e for c in p.changes) for p in alive}
    busy = sorted((p for p in alive if n[p.url]), key=lambda p: (-n[p.url], p.url))
    # a mix of busy and rarely changing pages: every third one of the changed ones
    chosen = busy[: changed // 2] + busy[changed // 2 :: 3][: changed - changed // 2]
    quiet = [p for p in alive if not n[p.url]][:still]
    assert (len(chosen), len(quiet)) == (changed, still), "the change-log sample is too small for this pick"
    return chosen + quiet


def write_log(pages: list[Page], folder: Path) -> tuple[Path, Path]:
    changes, listing = folder / "changes.csv.gz", folder / "pages.csv.gz"
    save_log(pages, changes, listing)
    return changes, listing


@pytest.fixture
def change_server():
    procs = []

    def start(changes: Path, pages: Path, *extra: str) -> str:
        cmd = [sys.executable, "-m", "ipr_crawl.evaluation.serve_changes", "--changes", str(changes), "--pages", str(pages),
               "--port", "0", *extra]
        proc, m = start_server(cmd, r"^serving changes: (\d+) pages at (\S+)")
        procs.append(proc)
        return m[2]

    yield start
    for proc in procs:
        proc.kill()
        proc.communicate(timeout=10)


def crawl(index_url: str, redis_client, crawl_id: str, log: Path, **settings: object) -> tuple[dict[str, int], str]:
    """``scrapy crawl graph`` from the index with revisits on; returns (ipr/* stats, log)."""
    values = {
        "IPR_REDIS_URL": "unix://" + redis_client.socket_file,
        "IPR_CRAWL_ID": crawl_id,
        "IPR_REVISIT_ENABLED": True,
        "IPR_REVISIT_MODE": "continuous",
        "IPR_REVISIT_RESOLUTION_SECS": 86400,
        "IPR_REVISIT_MIN_SECS": 0,
        "IPR_REVISIT_USE_LAST_MODIFIED": False,
        "IPR_REVISIT_POLICY": "mle-mix:0.1-10:15d",  # the papers' policy unless a test names one
        "LOG_LEVEL": "DEBUG",
        "LOG_FILE": str(log),
        **settings,
    }
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={index_url}"]
    for k, v in values.items():
        cmd += ["-s", f"{k}={v}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    text = log.read_text(errors="replace") if log.exists() else ""
    assert proc.returncode == 0, proc.stderr[-3000:] + text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 2000 :][:5000]
    stats = {f"{a}/{b}": int(n) for a, b, n in _STAT.findall(text)}
    return stats, text


def served_url(base: str, url: str) -> str:
    """Where serve-changes at ``base`` serves the logged ``url``: at its path (and query)."""
    parts = urlsplit(url)
    return base + parts.path + (f"?{parts.query}" if parts.query else "")


def crawl_figures(redis_client, crawl_id: str, base: str, pages: list[Page], start: float, end: float) -> dict[str, float]:
    store = RevisitStore(redis_client, crawl_id)
    cov = eff = 0.0
    changed_pages = accesses = fetched = 0
    for p in pages:
        state: RevisitState | None = store.load(node_id(served_url(base, p.url)))
        assert state is not None, p.url
        truth = simulate_page(parse_policy("fixed:1d"), max(p.first_seen, start), min(p.last_seen, end), p.changes)
        got = 1 + state.m
        accesses += state.accesses
        fetched += got
        if truth.change_buckets:
            changed_pages += 1
            cov += got / truth.versions
            eff += got / state.accesses
    return {"coverage": cov / changed_pages, "efficiency": eff / changed_pages, "accesses": accesses, "versions": fetched}


@pytest.mark.parametrize(
    "policy, use_lm",
    [("mle-mix:0.1-10:15d", False), pytest.param("aimd:1d:0.5", False, marks=pytest.mark.slow), ("mle-min:0.1-10:15d", True)],
)
def test_a_simulated_year_matches_revisit_sim(emacswiki, tmp_path, change_server, redis_client, crawl_id, policy, use_lm):
    pages = pick(emacswiki, changed=30, still=10, start=YEAR_START, end=YEAR_END)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--resolution", "1d", "--start", YEAR_START)
    base = index.rsplit("/_ipr/", 1)[0]
    start, end = parse_time(YEAR_START), parse_time(YEAR_END)
    started = time.monotonic()
    stats, log = crawl(
        index, redis_client, crawl_id, tmp_path / "crawl.log",
        IPR_REVISIT_POLICY=policy, IPR_REVISIT_CLOCK=f"virtual:{YEAR_START}", IPR_REVISIT_UNTIL=LAST_DAY,
        IPR_REVISIT_MAX_SECS=0,  # revisit-sim below runs without a bound too
        IPR_REVISIT_USE_LAST_MODIFIED=use_lm,
    )
    wall = time.monotonic() - started
    sim = simulate(pages, [policy], start=start, end=end, use_last_modified=use_lm)["policies"][policy]
    got = crawl_figures(redis_client, crawl_id, base, pages, start, end)
    print(f"{policy} lm={use_lm}: crawl {got} vs revisit-sim coverage {sim['coverage']:.4f} "
          f"efficiency {sim['efficiency']:.4f} accesses {sim['accesses']} versions {sim['versions']} ({wall:.1f} s)")
    assert abs(got["coverage"] - sim["coverage"]) <= 0.01
    assert abs(got["efficiency"] - sim["efficiency"]) <= 0.01
    assert abs(got["accesses"] - sim["accesses"]) <= 0.01 * sim["accesses"]
    assert abs(got["versions"] - sim["versions"]) <= 0.01 * sim["versions"]
    # every access is accounted for, and only new or changed pages reached the spider
    kinds = ("new", "changed", "unchanged", "not_modified")
    index_state = RevisitStore(redis_client, crawl_id).load(node_id(index))
    assert sum(stats.get(f"revisit/{k}", 0) for k in kinds) == got["accesses"] + index_state.accesses
    assert stats["pages/recorded"] == stats["revisit/new"] + stats.get("revisit/changed", 0)
    assert "httperror/response_ignored_count" not in log


def test_with_httpcache_no_double_validators_no_lost_304(emacswiki, tmp_path, change_server, redis_client, crawl_id):
    pages = pick(emacswiki, changed=8, still=4, start="2013-03-01", end="2013-05-01")
    changes, listing = write_log(pages, tmp_path)
    runs = {}
    for cache in (False, True):
        index = change_server(changes, listing, "--resolution", "1d", "--start", "2013-03-01")
        extra = {}
        if cache:
            extra = {
                "HTTPCACHE_ENABLED": True,
                "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy",
                "HTTPCACHE_DIR": str(tmp_path / "cache"),
            }
        cid = f"{crawl_id}-{int(cache)}"
        stats, _ = crawl(
            index, redis_client, cid, tmp_path / f"crawl{int(cache)}.log",
            IPR_REVISIT_POLICY="fixed:3d", IPR_REVISIT_CLOCK="virtual:2013-03-01", IPR_REVISIT_UNTIL="2013-05-01", **extra,
        )
        import urllib.request

        served = urllib.request.urlopen(index.replace("/_ipr/index", "/_ipr/log.tsv")).read().decode()
        rows = [line.split("\t") for line in served.splitlines()]
        runs[cache] = (stats, rows, RevisitStore(redis_client, cid))
    (plain, plain_rows, _), (cached, cached_rows, _) = runs[False], runs[True]
    # one If-None-Match per request at most, in both runs
    assert all(len(r[3].split("|")) <= 1 for r in plain_rows + cached_rows if r[3])
    assert sum(1 for r in plain_rows if r[2] == "304") == plain["revisit/not_modified"] > 0
    # with the cache every 304 the server sent comes back as the cached 200: classified
    # unchanged by its digest, never handed to the spider
    cached_304 = sum(1 for r in cached_rows if r[2] == "304")
    # (the index page has no validators: its revisits are unchanged 200s in both runs)
    assert cached_304 == plain["revisit/not_modified"]
    assert cached["revisit/unchanged"] == plain.get("revisit/unchanged", 0) + cached_304
    assert cached.get("revisit/not_modified", 0) == 0 and cached["revisit/cached"] >= cached_304
    assert cached["revisit/changed"] == plain["revisit/changed"]
    assert cached["pages/recorded"] == plain["pages/recorded"] == plain["revisit/new"] + plain["revisit/changed"]


def test_run_once_resumes_and_304_can_reach_callbacks(emacswiki, tmp_path, change_server, redis_client, crawl_id):
    pages = pick(emacswiki, changed=6, still=4, start=YEAR_START, end=YEAR_END)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--resolution", "1d", "--start", YEAR_START)
    base = index.rsplit("/_ipr/", 1)[0]
    first, _ = crawl(index, redis_client, crawl_id, tmp_path / "a.log",
                     IPR_REVISIT_MODE="run-once", IPR_REVISIT_CLOCK=f"virtual:{YEAR_START}")
    assert first["revisit/new"] == len(pages) + 1  # the pages and the index
    assert "revisit/not_modified" not in first and "revisit/changed" not in first
    # 20 days later: everything is due (tau_2 = 15 d); one pass, then the crawl closes
    second, log = crawl(index, redis_client, crawl_id, tmp_path / "b.log",
                        IPR_REVISIT_MODE="run-once", IPR_REVISIT_CLOCK="virtual:2013-01-21",
                        HTTPERROR_ALLOWED_CODES="304")
    revisited = sum(second.get(f"revisit/{k}", 0) for k in ("changed", "unchanged", "not_modified"))
    assert revisited == len(pages) + 1 and "revisit/new" not in second
    assert second.get("revisit/not_modified", 0) > 0
    assert re.search(r"Crawled \(304\) <GET [^>]+>.*\['not_modified'\]", log)  # reached the callback, flagged
    assert second.get("pages/recorded", 0) == second.get("revisit/changed", 0)  # 304s left the graph alone
    # the history command prints the URL's state and events
    url = base + pages[0].url.split("emacswiki.org", 1)[1]
    out = subprocess.run(
        [sys.executable, "-m", "ipr_crawl.cli", "history", url, "--crawl-id", crawl_id,
         "--redis-url", "unix://" + redis_client.socket_file],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "accesses 2" in out.stdout and "2 events" in out.stdout and " new " in out.stdout


def test_continuous_system_clock_closes_past_the_horizon(emacswiki, tmp_path, change_server, redis_client, crawl_id):
    pages = pick(emacswiki, changed=2, still=2, start=YEAR_START, end=YEAR_END)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--start", "2013-06-01")
    started = time.monotonic()
    stats, _ = crawl(index, redis_client, crawl_id, tmp_path / "c.log", IPR_REVISIT_HORIZON_SECS=3600)
    assert stats["revisit/new"] == len(pages) + 1
    assert time.monotonic() - started < 60  # next visits are 15 days away: nothing to wait for
    store = RevisitStore(redis_client, crawl_id)
    assert store.scheduled() == len(pages) + 1 and store.earliest_due() > time.time() + 14 * DAY


def _budget_year(emacswiki, tmp_path, change_server, redis_client, crawl_id, policy, **settings):
    """A simulated year of 40 EmacsWiki pages (30 that change) crawled in continuous mode
    with ``policy`` and ``settings``; returns (pages, base URL, start, end, crawl log)."""
    pages = pick(emacswiki, changed=30, still=10, start=YEAR_START, end=YEAR_END)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--resolution", "1d", "--start", YEAR_START)
    _, log = crawl(
        index, redis_client, crawl_id, tmp_path / "crawl.log",
        IPR_REVISIT_POLICY=policy, IPR_REVISIT_CLOCK=f"virtual:{YEAR_START}", IPR_REVISIT_UNTIL=LAST_DAY,
        IPR_REVISIT_MAX_SECS=0, IPR_REVISIT_BUDGET_REFRESH_SECS=86400, **settings,
    )
    return pages, index.rsplit("/_ipr/", 1)[0], parse_time(YEAR_START), parse_time(YEAR_END), log


@pytest.mark.parametrize("policy", ["harmonic:8/y", "harmonic:8/y:pool=directory", pytest.param("harmonic:8/y:prior=gamma", marks=pytest.mark.slow),
                                    "harmonic:8/y:new=learn", "harmonic:8/y:new=learn:young=0.5"])
def test_a_simulated_year_under_a_budget(emacswiki, tmp_path, change_server, redis_client, crawl_id, policy):
    """harmonic:8/y end to end: the crawl's refresher solves the budget's multiplier from
    the rate histogram in Redis; the crawl spends the budget (within 5 %) and gives
    revisit-sim's coverage (within 0.03: the crawl also revisits its index page, one
    more URL in the budget). With pool=directory the crawl also keeps the directory sums
    in Redis: one per directory served, every page access interval counted once. With
    prior=gamma it keeps the five moment sums in Redis, the refresher fits the prior to
    them, and the pages' states carry it. With new=learn the exploring URLs (an eighth,
    by a hash of the served URL: revisit-sim gets the served URLs so that it picks the
    same ones) are revisited 3 days after their first fetch, and those first revisits
    are counted in Redis (40 pages give too few for a rate to be learned: that is
    tests/store/test_revisit.py's)."""
    pages, base, start, end, log = _budget_year(emacswiki, tmp_path, change_server, redis_client, crawl_id, policy)
    assert "revisit budget 8/y over" in log
    learn = ":new=learn" in policy
    if learn:
        pages = [replace(p, url=served_url(base, p.url)) for p in pages]
    # prior=gamma couples the URLs through the fitted prior: the crawl's index page, a
    # URL that never changes, is one of them (one such page moved revisit-sim's coverage
    # by up to 0.07 on these 40 pages before MIN_CHANGES), so revisit-sim gets it too
    index_page = Page(url=base + "/_ipr/index", first_seen=start, last_seen=end, changes=[])
    sim = simulate(pages + [index_page] if "prior=gamma" in policy else pages, [policy], start=start,
                   end=end)["policies"][policy]
    got = crawl_figures(redis_client, crawl_id, base, pages, start, end)
    spend = got["accesses"] / len(pages) / ((end - start) / (365 * DAY))
    print(f"{policy}: crawl {got}, {spend:.2f} accesses/page-year; revisit-sim coverage {sim['coverage']:.4f} "
          f"spend {sim['accesses_per_page_year']:.2f}")
    store = RevisitStore(redis_client, crawl_id)
    state = store.budget_state()
    # the budget's account runs from the crawl's start and counts the first fetches, as
    # revisit-sim's does and as a crawl on the system clock does (its first solve comes with
    # its first fetches): on the virtual clock the first solve waits for the first instant
    # after the start (day 3 with new=learn, an exploring URL's revisit; day 46 otherwise),
    # and the spend is the same either way
    assert state["t0"] == start and state["accesses0"] == 0
    assert abs(spend - 8) <= 0.05 * 8
    assert abs(got["coverage"] - sim["coverage"]) <= 0.03
    assert state["nu"] > 0 and 0.5 <= state["gain"] <= 2
    pool = store.rate_pool()
    if policy.endswith("pool=directory"):
        emacs = pool[base + "/emacs/"]  # the 40 pages: their revisits' intervals, changed or not
        assert emacs[0] == got["versions"] - len(pages) and emacs[1] > 0
    else:
        assert pool == {}
    moments = store.rate_moments()
    if policy.endswith("prior=gamma"):
        assert "revisit rate prior fitted to the crawl" in log
        states = [store.load(node_id(served_url(base, p.url))) for p in pages]
        # every page's (changes, time) counted: the sums are the states' own
        assert moments[0] == pytest.approx(sum(rate_counts(s)[0] for s in states) + rate_counts(
            store.load(node_id(base + "/_ipr/index")))[0], rel=1e-9)
        assert state["prior_alpha"] > 0 and state["prior_beta"] > 0
        assert all(s.prior_time > 0 for s in states)
    else:
        assert moments == [0.0] * 5
    counts = store.new_url_counts()
    if learn:
        explored = [p.url for p in pages if explores_new(p.url)]
        revisited = 0
        for url in explored:
            times = [float(e.fields["t"]) for e in store.events(url)]
            if len(times) > 1:
                revisited += 1
                assert times[1] - times[0] == 3 * DAY, (url, times[:3])
        index_explores = explores_new(base + "/_ipr/index")
        assert counts[0] - index_explores == revisited, (counts, revisited, len(explored))
        print(f"new=learn: {len(explored)} of {len(pages)} pages explore; first revisits counted {counts}")
    else:
        assert counts == (0.0, 0.0, 0.0)


def test_a_simulated_year_under_a_budget_and_a_host_cap(emacswiki, tmp_path, change_server, redis_client, crawl_id):
    """harmonic:8/y with IPR_REVISIT_HOST_DELAY_SECS = 2 days: the crawl's 41 URLs are on
    one host, whose budget (8/y each, 0.9 a day) is above its cap (0.5 a day): the host
    is held at the cap and what it cannot take is reported; the crawl spends the cap,
    not the budget, as revisit-sim --host-delay 2d does."""
    policy = "harmonic:8/y"
    pages, base, start, end, log = _budget_year(emacswiki, tmp_path, change_server, redis_client, crawl_id, policy,
                                                IPR_REVISIT_HOST_DELAY_SECS=2 * DAY)
    assert "1 of 1 hosts held at one revisit per 172800 s" in log, log[-3000:]
    assert "'ipr/revisit/unplaced_per_day'" in log
    sim = simulate(pages, [policy], start=start, end=end, host_delay=2 * DAY)["policies"][policy]
    got = crawl_figures(redis_client, crawl_id, base, pages, start, end)
    years = (end - start) / (365 * DAY)
    per_day = (got["accesses"] - len(pages)) / (years * 365)  # revisits a day (first visits aside)
    print(f"{policy}, one revisit per 2 d per host: crawl {got}, {per_day:.3f} revisits/day; revisit-sim coverage "
          f"{sim['coverage']:.4f}, unplaced {sim['unplaced_per_day']:.2f}/day, busiest host-day {sim['max_host_day']}")
    assert per_day <= 0.5 * 1.1, per_day
    assert sim["max_host_day"] <= 1 and sim["unplaced_per_day"] > 0.3
    assert abs(got["coverage"] - sim["coverage"]) <= 0.05
    assert RevisitStore(redis_client, crawl_id).host_multipliers()


def _sitemap_site(emacswiki, tmp_path, change_server, *server_args: str):
    """The sitemap tests' site: 40 EmacsWiki pages (30 that change) over one simulated
    year; returns (pages, index URL, base URL, start, end)."""
    pages = pick(emacswiki, changed=30, still=10, start=YEAR_START, end=YEAR_END)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--resolution", "1d", "--start", YEAR_START, *server_args)
    return pages, index, index.rsplit("/_ipr/", 1)[0], parse_time(YEAR_START), parse_time(YEAR_END)


def _sitemap_crawl(index, base, redis_client, crawl_id, log, policy, on: bool, **settings):
    """The year crawled from the index and the sitemap, IPR_REVISIT_SITEMAP_LASTMOD = ``on``."""
    return crawl(
        f"{index},{base}/_ipr/sitemap.xml", redis_client, crawl_id, log,
        IPR_REVISIT_POLICY=policy, IPR_REVISIT_CLOCK=f"virtual:{YEAR_START}", IPR_REVISIT_UNTIL=LAST_DAY,
        IPR_REVISIT_BUDGET_REFRESH_SECS=86400, IPR_REVISIT_SITEMAP_LASTMOD=on, **settings,
    )


def test_a_sitemaps_lastmod_makes_changed_pages_due(emacswiki, tmp_path, change_server, redis_client):
    """IPR_REVISIT_SITEMAP_LASTMOD: the same simulated year of 40 EmacsWiki pages under
    harmonic:8/y, crawled from the server's index and its sitemap (``/_ipr/sitemap.xml``,
    lastmod = each page's latest change), with and without the setting. With it the
    sitemap is read weekly (52 of the year's 328 accesses), each changed read makes the
    pages it shows changed due at once (within what the budget has left) and holds the
    others: more versions are caught for fewer accesses."""
    policy = "harmonic:8/y"
    pages, index, base, start, end = _sitemap_site(emacswiki, tmp_path, change_server)
    got = {}
    for on in (False, True):
        crawl_id = f"sitemap-{int(on)}-{time.monotonic_ns()}"
        stats, log = _sitemap_crawl(index, base, redis_client, crawl_id, tmp_path / f"crawl{int(on)}.log", policy, on,
                                    IPR_REVISIT_MAX_SECS=0, IPR_REVISIT_SITEMAP_SECS=7 * DAY)
        got[on] = {**crawl_figures(redis_client, crawl_id, base, pages, start, end),
                   "sitemap_due": stats.get("revisit/sitemap_due", 0)}
        if on:
            assert "changed since their last fetch (lastmod), due now" in log
    print(f"{policy}, 40 pages, one year: without the sitemap's lastmod {got[False]}; with it {got[True]}")
    assert got[False]["sitemap_due"] == 0 and got[True]["sitemap_due"] > 0
    assert got[True]["coverage"] > got[False]["coverage"] + 0.02
    assert got[True]["accesses"] <= got[False]["accesses"] * 1.05


@pytest.mark.parametrize("lastmod", [pytest.param("frozen", marks=pytest.mark.slow), "build", pytest.param("partial", marks=pytest.mark.slow)])
def test_a_sitemap_whose_lastmod_is_wrong_costs_nothing(emacswiki, tmp_path, change_server, redis_client, lastmod):
    """The same year and pages as above, the sitemap read daily (the default), but its
    ``<lastmod>`` wrong as sites publish it: ``frozen`` (each page's first version:
    never moves), ``build`` (today, every page, as a site rebuilt daily) or ``partial``
    (frozen for half the pages, true for the others). The crawler
    checks what the sitemap said against what its own fetches found, stops following a
    sitemap that was wrong more often than right, and reads a sitemap of no use less and
    less often: with the setting on, coverage stays that of the crawl without it."""
    policy = "harmonic:8/y"
    site = _sitemap_site(emacswiki, tmp_path, change_server, "--sitemap-lastmod", lastmod)
    # with the setting the year is crawled twice, on two servers: a server's port is part of
    # every URL, so of every node id, and the ids decide the ties of the due set and of the
    # pages a sitemap read makes due. Measured 2026-11-24: the same port gives the same year
    # every time, other ports other years (build: .701 on one, .749-.769 on seven others;
    # on one port the sitemap was never refuted all year, at .761); without the setting
    # .750 on every port. So the coverage compared is the two years' mean.
    again = _sitemap_site(emacswiki, tmp_path, change_server, "--sitemap-lastmod", lastmod)
    got = {}
    for on in (False, True, 2):
        pages, index, base, start, end = again if on == 2 else site
        crawl_id = f"sitemap-{lastmod}-{int(on)}-{time.monotonic_ns()}"
        stats, log = _sitemap_crawl(index, base, redis_client, crawl_id, tmp_path / f"crawl{int(on)}.log", policy,
                                    bool(on))
        got[on] = {**crawl_figures(redis_client, crawl_id, base, pages, start, end),
                   "sitemap_due": stats.get("revisit/sitemap_due", 0),
                   "distrusted": stats.get("revisit/sitemap_distrusted", 0),
                   "most_refuted": max((int(n) for n in re.findall(r"refuted (\d+)", log)), default=0),
                   "checked": sum(int(c) + int(r) for c, r in re.findall(r"confirmed by our fetches (\d+), refuted (\d+)", log)),
                   "index_sitemap": [getattr(RevisitStore(redis_client, crawl_id).load(node_id(u)), "accesses", 0)
                                     for u in (index, f"{base}/_ipr/sitemap.xml")]}
    print(f"{policy}, 40 pages, one year, sitemap lastmod {lastmod}: without the setting {got[False]}; "
          f"with it {got[True]}; again {got[2]}")
    assert (got[True]["coverage"] + got[2]["coverage"]) / 2 >= got[False]["coverage"] - 0.03, got
    # every fetch of the year (first fetches, revisits, index and sitemap reads) within
    # the budget: 8 revisits per URL-year. Measured 2026-11-23: frozen 378 of 378 with the
    # setting (coverage .755), 332 without (.744: the budget's first solve came with the
    # first revisit due, 48 days in); before the check both lost 0.07 of coverage
    urls = len(pages) + 2
    budget = urls * (1 + 8 * (end - start) / (365 * DAY))
    for year in (got[True], got[2]):
        assert year["accesses"] + sum(year["index_sitemap"]) <= budget * 1.05, (got, budget)
        if lastmod == "frozen":  # a sitemap that never changes is not parsed again: read less and less often
            assert year["index_sitemap"][1] <= 12, got
    if lastmod != "frozen":  # a sitemap that changes is parsed and acted on, within the budget
        assert max(got[True]["sitemap_due"], got[2]["sitemap_due"]) >= 1, got
    if lastmod == "partial":  # and checked against the crawl's own fetches: refuted in one year at least
        # (a sitemap half wrong: 5-7 refuted in a read, 2026-11-25). A sitemap wrong everywhere
        # (build) is checked less: since the budget's account counts the first fetches (as
        # revisit-sim's does, 2026-11-25) it leaves no room to follow the sitemap beyond the
        # policy's own revisits, the sitemap makes 12-14 URLs due a year, its reads back off, and
        # 0-3 of its claims are refuted in a read (14-27 before, when the account left the first
        # interval's budget over)
        assert max(got[True]["most_refuted"], got[2]["most_refuted"]) >= 1, got


#: the simulated year of the tldr tests: 2020, to its last second
_TLDR_START, _TLDR_END = "2020-01-01", "2020-12-31T23:59:59"


def _tldr_year(policy, tmp_path, change_server, redis_client, crawl_id):
    """A real crawl of 120 tldr-pages pages of 2020 from several directories (the shared
    tldr log) under ``policy``, on the virtual clock. Returns ``(pages, the crawl's
    index page as a revisit-sim Page, crawl figures, accesses per page-year, the pages'
    revisit states, the crawl's log, base URL, directories)``."""
    from ipr_crawl.revisit.budget import pool_group

    log = load_log(str(shared_file("changes/tldr_changes.csv.gz")), str(shared_file("changes/tldr_pages.csv.gz")))
    start_s, end_s, last_day = _TLDR_START, _TLDR_END, _TLDR_END[:10]
    pages = pick(log, changed=90, still=30, start=start_s, end=end_s)
    directories = {pool_group(p.url) for p in pages}
    assert len(directories) >= 3
    start, end = parse_time(start_s), parse_time(end_s)
    changes, listing = write_log(pages, tmp_path)
    index = change_server(changes, listing, "--resolution", "1d", "--start", start_s)
    base = index.rsplit("/_ipr/", 1)[0]
    index_page = Page(url=base + "/_ipr/index", first_seen=start, last_seen=end, changes=[])
    _, text = crawl(index, redis_client, crawl_id, tmp_path / "crawl.log", IPR_REVISIT_POLICY=policy,
                    IPR_REVISIT_CLOCK=f"virtual:{start_s}", IPR_REVISIT_UNTIL=last_day, IPR_REVISIT_MAX_SECS=0,
                    IPR_REVISIT_BUDGET_REFRESH_SECS=86400)
    got = crawl_figures(redis_client, crawl_id, base, pages, start, end)
    spend = got["accesses"] / len(pages) / ((end - start) / (365 * DAY))
    store = RevisitStore(redis_client, crawl_id)
    states = [store.load(node_id(served_url(base, p.url))) for p in pages]
    scales = [s.prior_scale for s in states]
    print(f"{policy}, {len(pages)} tldr pages of 2020 in {len(directories)} directories: crawl {got}, "
          f"{spend:.2f} accesses/page-year; prior scales {min(scales):.3g}..{max(scales):.3g}")
    return pages, index_page, got, spend, states, text, base, directories


def _tldr_sim(pages, spec):
    return simulate(pages, [spec], start=parse_time(_TLDR_START), end=parse_time(_TLDR_END))["policies"][spec]


@pytest.mark.data
def test_a_simulated_year_with_the_directory_pool_on_tldr_pages(tmp_path, change_server, redis_client, crawl_id):
    """harmonic:8/y:pool=directory through a real crawl of 120 tldr pages of 2020
    (:func:`_tldr_year`): the crawl keeps one pair of sums per directory, URLs get priors
    scaled away from 1, the budget is spent (within 5 %) and the coverage is
    revisit-sim's with the same pool, within 0.03. The responses of one instant do not
    see each other's observations (RatePool), so the crawl's figures do not depend on
    the order in which they arrive nor on the server's port (in every node id, so in the
    order of ties). Measured 2026-11-24: crawl .900, revisit-sim .911, both spending
    7.83; revisit-sim at 7.6–8.4/y gives .895–.911 (40 pages were too few: there
    revisit-sim moved from .828 to .851 between 8/y and 7.6/y)."""
    policy = "harmonic:8/y:pool=directory"
    pages, _, got, spend, states, _, base, directories = _tldr_year(policy, tmp_path, change_server, redis_client,
                                                                    crawl_id)
    sim = _tldr_sim(pages, policy)
    print(f"revisit-sim coverage {sim['coverage']:.4f} spend {sim['accesses_per_page_year']:.2f}")
    pool = RevisitStore(redis_client, crawl_id).rate_pool()
    assert {base + urlsplit(d).path for d in directories} <= set(pool)
    scales = [s.prior_scale for s in states]
    assert min(scales) < 1 < max(scales)
    assert abs(spend - 8) <= 0.05 * 8
    assert abs(got["coverage"] - sim["coverage"]) <= 0.03


@pytest.mark.data
def test_a_simulated_year_with_the_fitted_prior_on_tldr_pages(tmp_path, change_server, redis_client, crawl_id):
    """harmonic:8/y:prior=gamma through the same real crawl (:func:`_tldr_year`): the
    refresher fits the prior, the URLs' states carry it, the budget is spent (within
    5 %), and the coverage lies in revisit-sim's band at 7.6–8.4/y widened by 0.02
    (revisit-sim gets the crawl's index page too: the fitted prior couples the URLs).
    The fitted prior feeds back on a sample this small: revisit-sim's own coverage moves
    by up to 0.07 between budgets within the spend's 5 %. Measured 2026-11-24: crawl
    .869 for 7.65, revisit-sim .928 for 7.95 at 8/y and .873–.945 at 7.6–8.4/y (the same
    120 pages with the fixed prior: .888–.948)."""
    policy = "harmonic:8/y:prior=gamma"
    pages, index_page, got, spend, states, text, _, _ = _tldr_year(policy, tmp_path, change_server, redis_client,
                                                                   crawl_id)
    assert "revisit rate prior fitted to the crawl" in text
    assert all(s.prior_time > 0 for s in states) and len({s.prior_time for s in states}) > 1
    assert abs(spend - 8) <= 0.05 * 8
    band = [_tldr_sim(pages + [index_page], f"harmonic:{b}/y:prior=gamma")["coverage"]
            for b in (7.6, 7.8, 8, 8.2, 8.4)]
    print(f"revisit-sim at 7.6-8.4/y: {min(band):.3f}..{max(band):.3f}")
    assert min(band) - 0.02 <= got["coverage"] <= max(band) + 0.02, band
