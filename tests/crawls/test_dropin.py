"""Drop-in: a Scrapy project with the one ``ADDONS`` line fetches the same requests
and keeps the same items as without it (only the order changes), and Scrapy's
commands give the same output. Real ``scrapy`` runs of a fresh project
(:mod:`userproject`) against a real shop site on loopback (:mod:`shopsite`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from userproject import fetched, items, scrapy

REPO = Path(__file__).resolve().parents[2]


def _crawl(root: Path, spider: str, out: Path, addon: bool, **settings: object):
    run = scrapy(root, "crawl", spider, "-O", f"{out}:jsonlines", addon=addon,
                 settings={"IPR_DATA_DIR": out.parent / f"redis-{out.stem}", **settings})
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def _same_as_plain(root: Path, spider: str, tmp_path: Path) -> dict[bool, Any]:
    """Crawl ``spider`` with the add-on and without: the same fetches and the same items
    (each run's output in ``<spider>-True.jsonl`` / ``<spider>-False.jsonl``). Returns the
    runs by ``addon``."""
    runs = {addon: _crawl(root, spider, tmp_path / f"{spider}-{addon}.jsonl", addon=addon) for addon in (True, False)}
    assert items(tmp_path / f"{spider}-True.jsonl") == items(tmp_path / f"{spider}-False.jsonl")
    assert fetched(runs[True].stderr) == fetched(runs[False].stderr)
    return runs


@pytest.mark.parametrize("spider", ["shop", "shopcrawl", "shopmap"])
def test_same_requests_and_items_as_without_the_addon(shop, tmp_path: Path, spider: str) -> None:
    root, base = shop
    plain = _crawl(root, spider, tmp_path / "plain.jsonl", addon=False)
    ours = _crawl(root, spider, tmp_path / "ours.jsonl", addon=True)
    assert "ipr-crawl: crawl 'shop." + spider + "'" in ours.stderr  # the add-on was on
    assert "ipr-crawl" not in plain.stderr
    assert fetched(ours.stderr) == fetched(plain.stderr)
    assert items(tmp_path / "ours.jsonl") == items(tmp_path / "plain.jsonl")
    assert items(tmp_path / "ours.jsonl")  # the comparison is not vacuous
    if spider == "shop":
        got = fetched(ours.stderr)
        assert got[("200", "POST", f"{base}/search")] == 3  # POST pagination: one URL, three bodies
        assert got[("200", "POST", f"{base}/api/products")] == 2
        assert got[("200", "GET", f"{base}/flaky")] == 1  # after one retry of its 503
        assert f"Retrying <GET {base}/flaky>" in ours.stderr and f"Retrying <GET {base}/flaky>" in plain.stderr
        redirect = f"Redirecting (302) to <GET {base}/product/20> from <GET {base}/go/20>"
        assert redirect in ours.stderr and redirect in plain.stderr
        assert got[("200", "GET", f"{base}/product/20")] == 1
        feed = [json.loads(x) for x in items(tmp_path / "ours.jsonl")]
        assert {"error": f"{base}/missing"} in feed  # errback output kept
        assert {x.get("category") for x in feed} >= {"books", "music", "search", "api", "direct"}  # meta items
        assert all(x["seen"].startswith("2026-01-01") for x in feed if x.get("category") == "books")
        for stats in (ours.stderr, plain.stderr):
            assert "'offsite/filtered': 1" in stats
        assert "offsite.invalid" not in "".join(line for line in ours.stderr.splitlines() if "Crawled" in line)
        assert "ipr/frontier/ignored" not in ours.stderr and "downloader/exception_count" not in ours.stderr
        assert "'ipr/frontier/local'" not in ours.stderr  # everything was storable
        assert re.search(r"'scheduler/enqueued': \d+", ours.stderr) and "'scheduler/dequeued/redis'" in ours.stderr


def test_unstorable_meta_stays_in_memory_with_one_warning(shop, tmp_path: Path) -> None:
    root, base = shop
    spider = root / "shop" / "spiders" / "odd.py"
    spider.write_text(
        "import scrapy, threading\n"
        "class OddSpider(scrapy.Spider):\n"
        "    name = 'odd'\n"
        f"    start_urls = ['{base}/cat/books']\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a.p::attr(href)').getall():\n"
        "            yield response.follow(href, self.parse_product, meta={'lock': threading.Lock()})\n"
        "    def parse_product(self, response):\n"
        "        yield {'url': response.url, 'lock': type(response.meta['lock']).__name__}\n"
    )
    ours = _crawl(root, "odd", tmp_path / "ours.jsonl", addon=True)
    plain = _crawl(root, "odd", tmp_path / "plain.jsonl", addon=False)
    assert "ipr-crawl" not in plain.stderr
    assert items(tmp_path / "ours.jsonl") == items(tmp_path / "plain.jsonl")
    assert len(items(tmp_path / "ours.jsonl")) == 6
    warnings = [line for line in ours.stderr.splitlines() if "WARNING: ipr-crawl" in line and "meta['lock']" in line]
    assert len(warnings) == 1, warnings
    assert "'ipr/frontier/local': 6" in ours.stderr


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_commands_give_the_same_output(shop, tmp_path: Path) -> None:
    root, base = shop
    url = f"{base}/product/4"
    for args in (
        ("fetch", "--nolog", url),
        ("shell", url, "-c", "(response.status, response.css('h1::text').get())"),
        ("parse", "--nolog", "--spider", "shop", "-c", "parse_product", url),
    ):
        plain = scrapy(root, *args, addon=False, timeout=120)
        ours = scrapy(root, *args, addon=True, timeout=120)
        assert plain.returncode == ours.returncode == 0, (args, ours.stderr[-2000:])
        assert ours.stdout == plain.stdout and "Product 4" in ours.stdout, args
    check_plain = scrapy(root, "check", "shop", addon=False, timeout=120)
    check_ours = scrapy(root, "check", "shop", addon=True, timeout=120)
    assert check_plain.returncode == check_ours.returncode == 0, check_ours.stderr[-2000:]
    assert re.search(r"Ran [1-9]\d* contracts", check_ours.stderr)
    assert check_ours.stderr.split("Ran ")[1].split(" in ")[0] == check_plain.stderr.split("Ran ")[1].split(" in ")[0]
    assert not (root / ".scrapy" / "ipr").exists() or not any((root / ".scrapy" / "ipr").iterdir())


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_runspider_and_a_rerun(shop, tmp_path: Path) -> None:
    root, base = shop
    first = _crawl(root, "shop", tmp_path / "one.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis")
    again = _crawl(root, "shop", tmp_path / "two.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis")
    assert "finished before" not in first.stderr
    # a finished crawl run again starts afresh, as plain Scrapy does (the first run is its prior)
    rerun = [line for line in again.stderr.splitlines() if "finished before" in line]
    assert len(rerun) == 1 and "started afresh" in rerun[0] and "kept as 'shop.shop~1'" in rerun[0], rerun
    assert items(tmp_path / "two.jsonl") == items(tmp_path / "one.jsonl")
    # SCHEDULER_PERSIST=True keeps it finished: only what it has not seen is fetched
    kept = _crawl(root, "shop", tmp_path / "kept.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis",
                  SCHEDULER_PERSIST=True)
    assert "kept finished (SCHEDULER_PERSIST)" in kept.stderr
    assert len(items(tmp_path / "kept.jsonl")) < len(items(tmp_path / "one.jsonl"))
    # its close and `status` say what a next run does: under SCHEDULER_PERSIST it goes on
    assert "run again, it starts afresh" in first.stderr and "run again, it starts afresh" not in kept.stderr
    assert "run again with SCHEDULER_PERSIST=True, as this run, it is kept" in kept.stderr
    status = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "status", "--crawl-id", "shop.shop",
                             "--data-dir", str(tmp_path / "redis")], cwd=root, capture_output=True, text=True, timeout=60)
    assert "its last run had SCHEDULER_PERSIST=True: run so again, it goes on" in status.stdout, status.stdout
    fresh = _crawl(root, "shop", tmp_path / "three.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis", IPR_RESET=True)
    assert "reset (IPR_RESET)" in fresh.stderr
    assert items(tmp_path / "three.jsonl") == items(tmp_path / "one.jsonl")
    flush = _crawl(root, "shop", tmp_path / "four.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis",
                   SCHEDULER_FLUSH_ON_START=True)
    assert items(tmp_path / "four.jsonl") == items(tmp_path / "one.jsonl")
    assert "reset (SCHEDULER_FLUSH_ON_START)" in flush.stderr
    cli = [sys.executable, "-m", "ipr_crawl.cli", "reset", "--crawl-id", "shop.shop", "--data-dir", str(tmp_path / "redis")]
    reset = subprocess.run(cli, cwd=root, capture_output=True, text=True, timeout=60)
    assert reset.returncode == 0 and "keys deleted" in reset.stdout, reset.stderr
    again = subprocess.run(cli, cwd=root, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "no crawl 'shop.shop'" in again.stderr
    after = _crawl(root, "shop", tmp_path / "five.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis")
    assert "finished before" not in after.stderr
    assert items(tmp_path / "five.jsonl") == items(tmp_path / "one.jsonl")
    # another process crawls it now (its heartbeat alive): a reset would drop its work, so
    # this process joins it and says so
    from ipr_crawl.store import FrontierStore, connect

    client = connect("", str(tmp_path / "redis"))
    FrontierStore(client, "shop.shop", "bf").beat("elsewhere:1:abcdef", 300)
    client.shutdown()
    joined = _crawl(root, "shop", tmp_path / "six.jsonl", addon=True, IPR_DATA_DIR=tmp_path / "redis", IPR_RESET=True)
    assert "IPR_RESET ignored: crawl 'shop.shop' is being crawled by 1 other process(es) now" in joined.stderr
    assert "reset (IPR_RESET)" not in joined.stderr


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_bad_settings_and_overrides_say_so_in_one_line(shop, tmp_path: Path) -> None:
    root, _ = shop
    cases = {
        "IPR_LEASE_SECS=inf": ("IPR_LEASE_SECS='inf' must be a finite number",),
        "IPR_REDIS_URL=redis://127.0.0.1:1/0": ("cannot reach Redis at redis://127.0.0.1:1/0",),
        "SCHEDULER=scrapy_redis.scheduler.Scheduler": ("SCHEDULER='scrapy_redis.scheduler.Scheduler' replaces",),
        "IPR_ORDERING=best": ("IPR_ORDERING='best' is not an ordering",),
    }
    for setting, expected in cases.items():
        key, _, value = setting.partition("=")
        run = scrapy(root, "crawl", "shop", settings={key: value, "LOG_LEVEL": "INFO", "IPR_DATA_DIR": tmp_path / "r"})
        assert run.returncode != 0, setting
        errors = [line for line in run.stderr.splitlines() if " ERROR: " in line]
        assert len(errors) == 1 and all(e in errors[0] for e in expected), (setting, errors)
        assert "Traceback" not in run.stderr, setting
    # a crawl written with another ordering, kept finished (SCHEDULER_PERSIST: else a
    # finished crawl run again starts afresh, in any ordering)
    kept = {"IPR_DATA_DIR": tmp_path / "o", "SCHEDULER_PERSIST": True}
    first = scrapy(root, "crawl", "shop", settings={"IPR_ORDERING": "bf", **kept, "LOG_LEVEL": "INFO"})
    assert first.returncode == 0, first.stderr[-3000:]
    second = scrapy(root, "crawl", "shop", settings={**kept, "LOG_LEVEL": "INFO"})
    errors = [line for line in second.stderr.splitlines() if " ERROR: " in line]
    assert second.returncode != 0 and len(errors) == 1 and "is ordered by 'bf', not 'push'" in errors[0], errors
    assert "Traceback" not in second.stderr
    debug = scrapy(root, "crawl", "shop", settings={**kept, "LOG_LEVEL": "DEBUG"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr  # LOG_LEVEL=DEBUG keeps it
    # ... after the same one line, first (Scrapy's default LOG_LEVEL is DEBUG)
    errors = [line for line in debug.stderr.splitlines() if " ERROR: " in line]
    assert errors and "ipr-crawl: " in errors[0] and "is ordered by 'bf', not 'push'" in errors[0], errors


def test_runspider_and_bench(shop, tmp_path: Path) -> None:
    root, base = shop
    spider = tmp_path / "single.py"
    spider.write_text(
        "import scrapy\n"
        "class Single(scrapy.Spider):\n"
        "    name = 'single'\n"
        f"    start_urls = ['{base}/']\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a::attr(href)').getall():\n"
        "            if '/cat/' in href or '/product/' in href:\n"
        "                yield response.follow(href, self.parse)\n"
        "        yield {'url': response.url}\n"
    )
    outs = {}
    for addon in (True, False):
        out = tmp_path / f"single-{addon}.jsonl"
        run = scrapy(root, "runspider", str(spider), "-O", f"{out}:jsonlines", addon=addon,
                     settings={"IPR_DATA_DIR": tmp_path / "rs"})
        assert run.returncode == 0, run.stderr[-3000:]
        assert ("ipr-crawl: crawl 'shop.single'" in run.stderr) == addon
        outs[addon] = items(out)
    assert outs[True] == outs[False] and len(outs[True]) == 14  # the index, 2 categories, 11 products
    bench = scrapy(root, "bench", settings={"CLOSESPIDER_TIMEOUT": 2}, timeout=120)
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert "ipr-crawl: off for `scrapy bench`" in bench.stderr and "Spider closed (closespider_timeout)" in bench.stderr


def test_jobdir_and_dupefilter_are_explained(shop, tmp_path: Path) -> None:
    root, _ = shop
    run = scrapy(root, "crawl", "shop", settings={
        "JOBDIR": tmp_path / "job", "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
        "DEPTH_PRIORITY": 1, "IPR_DATA_DIR": tmp_path / "r", "LOG_LEVEL": "INFO",
        # scheduler settings the add-on's scheduler does not read (Scrapy's, scrapy-redis's)
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "SCHEDULER_START_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue", "SCHEDULER_IDLE_BEFORE_CLOSE": 10,
    })
    assert run.returncode == 0, run.stderr[-3000:]
    # Request.priority orders the frontier: DEPTH_PRIORITY needs no word
    assert not [line for line in run.stderr.splitlines() if "DEPTH_PRIORITY" in line and "WARNING" in line]
    for needle in ("JOBDIR=", "DUPEFILTER_CLASS=",
                   "SCHEDULER_PRIORITY_QUEUE='scrapy.pqueues.DownloaderAwarePriorityQueue' is not used",
                   "SCHEDULER_START_MEMORY_QUEUE='scrapy.squeues.FifoMemoryQueue' is not used",
                   "SCHEDULER_IDLE_BEFORE_CLOSE='10' is not used"):
        assert sum(needle in line and "WARNING" in line for line in run.stderr.splitlines()) == 1, needle
    # the settings a project does not set get no warning
    assert "SCHEDULER_MEMORY_QUEUE=" not in run.stderr and "SCHEDULER_QUEUE_CLASS=" not in run.stderr


def test_scrapys_own_dupefilter_given_as_a_class_gets_no_warning(caplog) -> None:
    """``DUPEFILTER_CLASS`` set to Scrapy's ``RFPDupeFilter`` class (not its import path) is
    what the frontier does already: no warning (issue 50: it got a false one)."""
    import logging

    from scrapy.dupefilters import BaseDupeFilter, RFPDupeFilter
    from scrapy.settings import Settings

    from ipr_crawl.addon import Addon

    with caplog.at_level(logging.WARNING, logger="ipr_crawl.addon"):
        Addon._warn_changed_meanings(Settings({"DUPEFILTER_CLASS": RFPDupeFilter}))
        assert caplog.records == []
        Addon._warn_changed_meanings(Settings({"DUPEFILTER_CLASS": BaseDupeFilter}))
    assert ["DUPEFILTER_CLASS='scrapy.dupefilters.BaseDupeFilter' is not used" in r.getMessage()
            for r in caplog.records] == [True]


def test_the_link_graph_middleware_goes_below_the_lowest_order_listed(caplog) -> None:
    """The add-on's order for its spider middleware: -1000, or one below the lowest the
    project lists; a project that orders it above one of its own is warned, naming it."""
    from scrapy.settings import Settings

    from ipr_crawl.addon import SPIDER_MIDDLEWARE_ORDER, _engine_end
    from ipr_crawl.middlewares.linkgraph import LinkGraphMiddleware, nearer_the_engine

    assert _engine_end(Settings()) == SPIDER_MIDDLEWARE_ORDER
    assert _engine_end(Settings({"SPIDER_MIDDLEWARES": {"a.B": -5000, "a.C": 5, "a.D": None}})) == -5001
    assert _engine_end(Settings({"SPIDER_MIDDLEWARES": {"a.B": -2000.5}})) == -2002
    mws = {"a.B": 3, "a.C": 700, LinkGraphMiddleware: 10}
    assert nearer_the_engine(Settings({"SPIDER_MIDDLEWARES": mws})) == ["a.B"]
    mws = {"a.B": 3, "ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware": -1}
    assert nearer_the_engine(Settings({"SPIDER_MIDDLEWARES": mws})) == []


def test_a_callback_copying_response_meta_gets_its_own_lease(shop, tmp_path: Path) -> None:
    """A callback that passes ``response.meta`` on to new ``dont_filter`` requests (a common
    pattern) copies the add-on's ``ipr_lease``: each new request must get a lease of its
    own, not be taken for a retry of its parent's (issue 50, item 7). The same fetches
    and items as plain Scrapy."""
    root, base = shop
    (root / "shop" / "spiders" / "copier.py").write_text(
        "import scrapy\n"
        "from scrapy import signals\n"
        "class Copier(scrapy.Spider):\n"
        "    name = 'copier'\n"
        f"    start_urls = ['{base}/cat/books']\n"
        "    @classmethod\n"
        "    def from_crawler(cls, crawler, *args, **kwargs):\n"
        "        spider = super().from_crawler(crawler, *args, **kwargs)\n"
        "        crawler.signals.connect(spider.scheduled, signal=signals.request_scheduled)\n"
        "        return spider\n"
        "    def scheduled(self, request, spider):\n"
        "        self.logger.info('scheduled %s carrying lease %r', request.url, request.meta.get('ipr_lease'))\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a.p::attr(href)').getall():\n"
        "            yield scrapy.Request(response.urljoin(href), self.parse_product, meta=response.meta,\n"
        "                                 dont_filter=True)\n"
        "        yield response.request.replace(callback=self.parse_again, dont_filter=True)\n"
        "    def parse_again(self, response):\n"
        "        yield {'url': response.url, 'again': True}\n"
        "    def parse_product(self, response):\n"
        "        yield {'url': response.url}\n"
    )
    runs = _same_as_plain(root, "copier", tmp_path)
    assert len(items(tmp_path / "copier-True.jsonl")) == 7  # the products and the category page fetched again
    scheduled = re.findall(r"scheduled (\S+) carrying lease (\S+)", runs[True].stderr)
    assert len(scheduled) == 8 and {lease for _, lease in scheduled} == {"None"}, scheduled  # the start, 7 more


def test_two_start_urls_redirecting_to_one_page_fetch_it_twice_as_scrapy(shop, tmp_path: Path) -> None:
    """Two start URLs (``dont_filter``) redirecting to one page: Scrapy fetches it twice (a
    redirect keeps ``dont_filter``), and so does the add-on, not three times (Scrapy's
    ``test_engine.py::TestEngine::test_crawler``: the second redirect's target was queued
    both by its record, under Scrapy's rule for a URL only ``dont_filter`` requests had
    brought, and in the forced queue)."""
    root, base = shop
    (root / "shop" / "spiders" / "twice.py").write_text(
        "import scrapy\n"
        "class Twice(scrapy.Spider):\n"
        "    name = 'twice'\n"
        f"    start_urls = ['{base}/go/1', '{base}/go/1?again=1']\n"
        "    def parse(self, response):\n"
        "        yield {'url': response.url}\n"
    )
    runs = _same_as_plain(root, "twice", tmp_path)
    assert fetched(runs[False].stderr)[("200", "GET", f"{base}/product/1")] == 2


def test_a_custom_fingerprinter_hashes_each_link_once(shop, tmp_path: Path) -> None:
    """A project's own ``REQUEST_FINGERPRINTER_CLASS`` (here one that caches nothing and
    counts its calls per request object): the add-on asks it once per request the spider
    made, as Scrapy's duplicate filter does (issue 50, item 8; it asked twice). A request
    popped from the frontier is another object, rebuilt from its payload, and is asked
    again (Scrapy never rebuilds one)."""
    root, base = shop
    (root / "shop" / "counting.py").write_text(
        "import collections, logging\n"
        "from scrapy.utils.request import RequestFingerprinter\n"
        "CALLS = collections.Counter()\n"
        "class CountingFingerprinter(RequestFingerprinter):\n"
        "    def fingerprint(self, request):\n"
        "        # a request as the spider made it (not a probe of its URL, not one rebuilt from the frontier)\n"
        "        if request.callback is not None and 'ipr_lease' not in request.meta:\n"
        "            CALLS[request] += 1\n"
        "        return super().fingerprint(request)\n"
    )
    (root / "shop" / "spiders" / "counted.py").write_text(
        "import scrapy\n"
        "from shop import counting\n"
        "class Counted(scrapy.Spider):\n"
        "    name = 'counted'\n"
        f"    start_urls = ['{base}/cat/books']\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a.p::attr(href)').getall():\n"
        "            yield response.follow(href, self.parse_product)\n"
        "    def parse_product(self, response):\n"
        "        yield {'url': response.url}\n"
        "    def closed(self, reason):\n"
        "        self.logger.info('fingerprint calls per request: %s', sorted(set(counting.CALLS.values())))\n"
    )
    calls = {}
    for addon in (True, False):
        run = _crawl(root, "counted", tmp_path / f"c-{addon}.jsonl", addon=addon,
                     REQUEST_FINGERPRINTER_CLASS="shop.counting.CountingFingerprinter")
        assert len(items(tmp_path / f"c-{addon}.jsonl")) == 6
        calls[addon] = re.search(r"fingerprint calls per request: (\[.*\])", run.stderr)[1]
    assert calls[True] == calls[False] == "[1]", calls


def test_a_retry_waits_for_the_requests_of_higher_priority_as_in_scrapy(shop, tmp_path: Path) -> None:
    """A retry carries ``RETRY_PRIORITY_ADJUST`` (-1): Scrapy fetches it once no request of
    priority 0 is left, so with one request at a time the retried page (``/flaky``: 503,
    then 200) is the crawl's last fetch, with and without the add-on (issue 50, item 4:
    the add-on's forced queue served it next, before the frontier)."""
    from procs import start_server
    from userproject import make_project

    order = {}
    for addon in (True, False):
        proc, m = start_server([sys.executable, str(Path(__file__).parents[1] / "helpers" / "shopsite.py")],
                               r"serving shop at (\S+)")  # a fresh site: /flaky fails once per server
        try:
            root = make_project(tmp_path / f"project-{addon}", m[1].rstrip("/"))
            run = _crawl(root, "shop", tmp_path / f"retry-{addon}.jsonl", addon=addon, CONCURRENT_REQUESTS=1)
        finally:
            proc.kill()
            proc.communicate(timeout=10)
        # the responses in order: "Retrying" for the 503 (RetryMiddleware), "Crawled (200)" after
        order[addon] = re.findall(r"(Crawled \(\d+\)|Retrying) <(?:GET|POST) ([^>\s]+)>", run.stderr)
    for addon, crawled in order.items():
        flaky = [k for k, (_, url) in enumerate(crawled) if url.endswith("/flaky")]
        assert [crawled[k][0] for k in flaky] == ["Retrying", "Crawled (200)"], (addon, crawled)
        assert flaky[1] == len(crawled) - 1 and flaky[1] - flaky[0] > 1, (addon, crawled)


def test_requests_yielded_before_a_callback_raises_are_kept(shop, tmp_path: Path) -> None:
    root, base = shop
    (root / "shop" / "spiders" / "raiser.py").write_text(
        "import scrapy\n"
        "class Raiser(scrapy.Spider):\n"
        "    name = 'raiser'\n"
        f"    start_urls = ['{base}/cat/books']\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a.p::attr(href)').getall():\n"
        "            yield response.follow(href, self.parse_product)\n"
        "        raise ValueError('after yielding')\n"
        "    def parse_product(self, response):\n"
        "        yield {'url': response.url}\n"
    )
    runs = _same_as_plain(root, "raiser", tmp_path)
    assert len(items(tmp_path / "raiser-True.jsonl")) == 6
    assert "ValueError: after yielding" in runs[True].stderr


def test_dont_filter_duplicates_of_a_queued_url_are_all_fetched(shop, tmp_path: Path) -> None:
    """A URL's request waiting in the frontier and dont_filter copies of it (Scrapy's own
    test_start_dupes, CONCURRENT_REQUESTS=1): every one is fetched, each with its own
    callback, as without the add-on. Before, fetching a copy took the waiting request
    out of the frontier (one fetch and one item fewer), or dropped it as undecodable."""
    root, base = shop
    (root / "shop" / "spiders" / "dupes.py").write_text(
        "import scrapy\n"
        "class Dupes(scrapy.Spider):\n"
        "    name = 'dupes'\n"
        "    async def start(self):\n"
        "        for path in ('/cat/books', '/cat/music'):\n"
        f"            yield scrapy.Request('{base}' + path, callback=self.first)\n"
        "            for n in range(2):\n"
        f"                yield scrapy.Request('{base}' + path, dont_filter=True, cb_kwargs={{'n': n}})\n"
        "    def first(self, response):\n"
        "        yield {'url': response.url, 'by': 'first'}\n"
        "    def parse(self, response, n):\n"
        "        yield {'url': response.url, 'by': n}\n"
    )
    runs = {addon: _crawl(root, "dupes", tmp_path / f"d-{addon}.jsonl", addon=addon, CONCURRENT_REQUESTS=1)
            for addon in (True, False)}
    assert items(tmp_path / "d-True.jsonl") == items(tmp_path / "d-False.jsonl")
    assert len(items(tmp_path / "d-True.jsonl")) == 6
    assert fetched(runs[True].stderr) == fetched(runs[False].stderr)
    assert "undecodable" not in runs[True].stderr


def test_a_crawlspider_whose_pages_link_back_to_its_start_urls_keeps_scrapys_items(shop, tmp_path: Path) -> None:
    """Scrapy's start requests are dont_filter: their URLs never enter the duplicate filter,
    so a link back to a start URL is fetched once more and its rule's callback yields the
    item. The same with the add-on, for a start URL fetched directly (/cat/books, linked
    from /) and one reached by a redirect (/go/3 -> /product/3, linked from /cat/books)."""
    root, base = shop
    (root / "shop" / "spiders" / "back.py").write_text(
        "from scrapy.linkextractors import LinkExtractor\n"
        "from scrapy.spiders import CrawlSpider, Rule\n"
        "class Back(CrawlSpider):\n"
        "    name = 'back'\n"
        "    allowed_domains = ['127.0.0.1']\n"
        f"    start_urls = ['{base}/', '{base}/cat/books', '{base}/go/3']\n"
        "    rules = (Rule(LinkExtractor(allow=r'/cat/'), callback='item', follow=True),\n"
        "             Rule(LinkExtractor(allow=r'/product/'), callback='item'))\n"
        "    def item(self, response):\n"
        "        yield {'url': response.url}\n"
    )
    runs = {addon: _crawl(root, "back", tmp_path / f"b-{addon}.jsonl", addon=addon) for addon in (True, False)}
    ours, plain = items(tmp_path / "b-True.jsonl"), items(tmp_path / "b-False.jsonl")
    assert ours == plain
    assert ours.count(json.dumps({"url": f"{base}/cat/books"})) == 1
    assert ours.count(json.dumps({"url": f"{base}/product/3"})) == 1
    assert fetched(runs[True].stderr) == fetched(runs[False].stderr)
    assert fetched(runs[True].stderr)[("200", "GET", f"{base}/cat/books")] == 2
    # /product/3 is fetched twice either way: by the redirect and by the first link to it, in either order
    assert re.search(r"'ipr/frontier/unfiltered_refetch': [12],", runs[True].stderr)


def test_items_a_spider_middleware_drops_before_the_pipelines_do_not_keep_pages_in_flight(shop, tmp_path: Path) -> None:
    """A spider middleware at order 5 drops some items. With the link-graph middleware at
    the engine's end of the chain (the add-on's default) it never sees them: the crawl
    ends with the same fetches and items as without the add-on, and no warning. A
    project that puts the link-graph middleware at 10 (nearer the spider than the
    dropper) is warned at start, and the pages whose items were dropped are recorded
    once the engine is idle (a WARNING says so): before, they waited in flight for items
    that never left the pipelines, and the crawl with them."""
    root, base = shop
    (root / "shop" / "dropper.py").write_text(
        "class DropBooks:\n"
        "    async def process_spider_output(self, response, result, spider=None):\n"
        "        async for x in result:\n"
        "            if not (isinstance(x, dict) and '/cat/books' in x.get('url', '')):\n"
        "                yield x\n"
    )
    (root / "shop" / "spiders" / "drops.py").write_text(
        "import scrapy\n"
        "class Drops(scrapy.Spider):\n"
        "    name = 'drops'\n"
        f"    start_urls = ['{base}/']\n"
        "    def parse(self, response):\n"
        "        yield {'url': response.url}\n"
        "        for href in response.css('a::attr(href)').getall():\n"
        "            if '/cat/' in href or '/product/' in href:\n"
        "                yield response.follow(href)\n"
    )
    link = "ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware"
    runs = {}
    for name, addon, middlewares in (("plain", False, {"shop.dropper.DropBooks": 5}),
                                     ("default", True, {"shop.dropper.DropBooks": 5}),
                                     ("at10", True, {"shop.dropper.DropBooks": 5, link: 10})):
        out = tmp_path / f"x-{name}.jsonl"
        runs[name] = scrapy(root, "crawl", "drops", "-O", f"{out}:jsonlines", addon=addon, timeout=120,
                            settings={"SPIDER_MIDDLEWARES": json.dumps(middlewares), "LOG_LEVEL": "DEBUG",
                                      "IPR_DATA_DIR": tmp_path / f"r-{name}"})
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    for name in ("default", "at10"):
        assert items(tmp_path / f"x-{name}.jsonl") == items(tmp_path / "x-plain.jsonl"), name
        assert fetched(runs[name].stderr) == fetched(runs["plain"].stderr), name
        assert "closed (finished)" in runs[name].stderr
    assert "never reached the item pipelines" not in runs["default"].stderr
    assert "are nearer the engine than LinkGraphMiddleware" not in runs["default"].stderr
    assert "the spider middlewares shop.dropper.DropBooks are nearer the engine" in runs["at10"].stderr
    assert "never reached the item pipelines" in runs["at10"].stderr
    assert "'ipr/pages/items_dropped_before_pipelines': 1" in runs["at10"].stderr


def test_user_spider_middlewares_at_any_order_see_every_request(shop, tmp_path: Path) -> None:
    """Counting spider middlewares at orders 1, 5, 500 and 950 see the same requests and
    items with the add-on as without it, and the crawl fetches the same pages. With the
    link-graph middleware at 10 (before), those at 1 and 5 saw no request at all: it held
    every request and recorded it itself."""
    root, _ = shop
    (root / "shop" / "counting.py").write_text(
        "import json, os\n"
        "from scrapy import Request, signals\n"
        "class Base:\n"
        "    order = 0\n"
        "    def __init__(self, crawler):\n"
        "        self.seen = {'requests': [], 'items': 0}\n"
        "        crawler.signals.connect(self.closed, signals.spider_closed)\n"
        "    @classmethod\n"
        "    def from_crawler(cls, crawler):\n"
        "        return cls(crawler)\n"
        "    async def process_spider_output(self, response, result, spider=None):\n"
        "        async for x in result:\n"
        "            if isinstance(x, Request):\n"
        "                self.seen['requests'].append(x.method + ' ' + x.url)\n"
        "            else:\n"
        "                self.seen['items'] += 1\n"
        "            yield x\n"
        "    def closed(self, spider):\n"
        "        with open(os.environ['COUNTS'] + f'.{self.order}', 'w') as f:\n"
        "            json.dump(self.seen, f)\n"
        + "".join(f"class At{n}(Base):\n    order = {n}\n" for n in (1, 5, 500, 950))
    )
    middlewares = {f"shop.counting.At{n}": n for n in (1, 5, 500, 950)}
    seen: dict[bool, dict[int, Any]] = {}
    runs = {}
    for addon in (True, False):
        counts = tmp_path / f"counts-{addon}"
        out = tmp_path / f"mw-{addon}.jsonl"
        cmd_settings = {"SPIDER_MIDDLEWARES": json.dumps(middlewares), "IPR_DATA_DIR": tmp_path / f"r-{addon}"}
        import os
        os.environ["COUNTS"] = str(counts)
        try:
            runs[addon] = scrapy(root, "crawl", "shop", "-O", f"{out}:jsonlines", addon=addon, settings=cmd_settings)
        finally:
            del os.environ["COUNTS"]
        assert runs[addon].returncode == 0, runs[addon].stderr[-3000:]
        seen[addon] = {n: json.loads(Path(f"{counts}.{n}").read_text()) for n in (1, 5, 500, 950)}
    assert "ipr-crawl: crawl 'shop.shop'" in runs[True].stderr
    assert fetched(runs[True].stderr) == fetched(runs[False].stderr)
    assert items(tmp_path / "mw-True.jsonl") == items(tmp_path / "mw-False.jsonl")
    for n in (1, 5, 500, 950):
        ours, plain = seen[True][n], seen[False][n]
        assert sorted(ours["requests"]) == sorted(plain["requests"]), n
        assert ours["items"] == plain["items"], n
        assert len(plain["requests"]) > 20 and plain["items"] > 10, (n, plain)  # not vacuous
    print("requests seen at 1/5/500/950 with the add-on:", [len(seen[True][n]["requests"]) for n in (1, 5, 500, 950)])


def test_the_projects_middleware_orders_win(shop, tmp_path: Path) -> None:
    """A project that orders the add-on's spider middleware itself (555, by import path)
    and disables its downloader middleware (None) gets exactly that (Scrapy's
    setdefault_in_component_priority_dict). Before, the add-on's 10 and 1 replaced them."""
    root, _ = shop
    run = scrapy(root, "crawl", "shop", settings={
        "SPIDER_MIDDLEWARES": '{"ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware": 555}',
        "DOWNLOADER_MIDDLEWARES": '{"ipr_crawl.middlewares.frontier.FrontierDownloaderMiddleware": null}',
        "LOG_LEVEL": "INFO", "IPR_DATA_DIR": tmp_path / "r", "CLOSESPIDER_PAGECOUNT": 3,
    })
    assert run.returncode == 0, run.stderr[-3000:]
    spider_mw = run.stderr[run.stderr.index("Enabled spider middlewares"):].split("]")[0]
    names = re.findall(r"'([\w.]+)'", spider_mw)
    link = names.index("ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware")
    errors = names.index("scrapy.spidermiddlewares.httperror.HttpErrorMiddleware")  # 50
    assert link > errors and names[link + 1].endswith("RefererMiddleware"), names  # 700
    downloader_mw = run.stderr[run.stderr.index("Enabled downloader middlewares"):].split("]")[0]
    assert "FrontierDownloaderMiddleware" not in downloader_mw


def test_scrapys_signals_and_duplicate_filter_stats_are_the_same(shop, tmp_path: Path) -> None:
    """request_scheduled and request_dropped counted by an extension, dupefilter/filtered
    and the "Filtered duplicate request" line: equal with and without the add-on, for a
    spider whose pages link to each other (duplicates), with DUPEFILTER_DEBUG off and on.
    Before, the add-on sent no request_dropped for duplicate links and counted no
    dupefilter/filtered."""
    root, base = shop
    (root / "shop" / "counter.py").write_text(
        "from scrapy import signals\n"
        "class Count:\n"
        "    @classmethod\n"
        "    def from_crawler(cls, crawler):\n"
        "        o = cls()\n"
        "        o.stats = crawler.stats\n"
        "        crawler.signals.connect(o.scheduled, signals.request_scheduled)\n"
        "        crawler.signals.connect(o.dropped, signals.request_dropped)\n"
        "        return o\n"
        "    def scheduled(self, request, spider):\n"
        "        self.stats.inc_value('test/scheduled')\n"
        "    def dropped(self, request, spider):\n"
        "        self.stats.inc_value('test/dropped')\n"
    )
    (root / "shop" / "spiders" / "links.py").write_text(
        "import scrapy\n"
        "class Links(scrapy.Spider):\n"
        "    name = 'links'\n"
        f"    start_urls = ['{base}/']\n"
        "    def parse(self, response):\n"
        "        for href in response.css('a::attr(href)').getall() * 2:\n"
        "            if '/cat/' in href or '/product/' in href:\n"
        "                yield response.follow(href)\n"
        "        yield response.follow('/cat/books')\n"
    )
    for debug in (False, True):
        stats = {}
        for addon in (True, False):
            run = scrapy(root, "crawl", "links", addon=addon, settings={
                "EXTENSIONS": '{"shop.counter.Count": 0}', "DUPEFILTER_DEBUG": debug, "LOG_LEVEL": "DEBUG",
                "IPR_DATA_DIR": tmp_path / f"r{debug}"})
            assert run.returncode == 0, run.stderr[-3000:]
            got = {k: int(v) for k, v in re.findall(r"'(test/\w+|dupefilter/filtered)': (\d+)", run.stderr)}
            lines = run.stderr.count("Filtered duplicate request")
            stats[addon] = (got, lines)
        assert stats[True] == stats[False], (debug, stats)
        assert stats[True][0]["dupefilter/filtered"] > 10 and stats[True][0]["test/dropped"] > 10
        assert stats[True][1] == (stats[True][0]["dupefilter/filtered"] if debug else 1)


def test_a_request_that_escapes_the_engine_does_not_keep_the_crawl_open(shop, tmp_path: Path) -> None:
    """A downloader that returns another type than a response (Scrapy's own
    test_download_wrong_type): the engine logs the error and forgets the request, with
    no errback. Plain Scrapy loses it and finishes; with the add-on its lease kept the
    crawl open for IPR_LEASE_SECS and then failed again. Now it is marked failed once
    the engine is idle: the same fetches and items as plain Scrapy, and the crawl ends."""
    root, base = shop
    (root / "shop" / "wrongtype.py").write_text(
        "from scrapy.core.downloader import Downloader\n"
        "class WrongTypeDownloader(Downloader):\n"
        "    def fetch(self, request, *args, **kwargs):\n"
        "        if request.url.endswith('/cat/music'):\n"
        "            return 'not a response'\n"
        "        return super().fetch(request, *args, **kwargs)\n"
    )
    runs = {addon: scrapy(root, "crawl", "shop", "-O", f"{tmp_path / f'w-{addon}.jsonl'}:jsonlines", addon=addon,
                          timeout=120, settings={"DOWNLOADER": "shop.wrongtype.WrongTypeDownloader",
                                                 "IPR_DATA_DIR": tmp_path / f"redis-{addon}"})
            for addon in (True, False)}
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-4000:]
        assert "expected Response or Request, got <class 'str'>" in run.stderr
    assert items(tmp_path / "w-True.jsonl") == items(tmp_path / "w-False.jsonl")
    assert items(tmp_path / "w-True.jsonl")
    assert fetched(runs[True].stderr) == fetched(runs[False].stderr)
    assert ("GET", f"{base}/cat/music") not in {(m, u) for _, m, u in fetched(runs[True].stderr)}
    assert "1 requests left Scrapy's engine without a response or an error" in runs[True].stderr
    assert "'ipr/lease/escaped': 1" in runs[True].stderr
