"""Every Scrapy of the async ``start()`` era, 2.13 to 2.19
(:mod:`ipr_crawl.scheduler.compat`): real ``scrapy crawl`` runs of a fresh project
(:mod:`userproject`) against the shop site on loopback (:mod:`shopsite`), under the
Scrapy this interpreter has. ``python scripts/oldest_scrapy.py`` runs this file, with a
few crawl tests, under the oldest supported Scrapy."""

from __future__ import annotations

from pathlib import Path

import scrapy as scrapy_package
from userproject import fetched, scrapy

from ipr_crawl.scheduler import internals
from ipr_crawl.scheduler.compat import SCRAPY_VERSION

REPO = Path(__file__).resolve().parents[2]


def test_the_crawl_runs_on_this_scrapy(shop, tmp_path: Path) -> None:
    root, base = shop
    run = scrapy(root, "crawl", "shop", settings={"LOG_LEVEL": "DEBUG", "IPR_DATA_DIR": tmp_path / "r"})
    assert run.returncode == 0, run.stderr[-4000:]
    assert f"Scrapy {scrapy_package.__version__} started" in run.stderr
    assert "ipr-crawl: crawl 'shop.shop'" in run.stderr  # the add-on was on
    got = fetched(run.stderr)
    assert got[("200", "GET", f"{base}/flaky")] == 1  # a retry settled by the frontier middleware
    assert got[("200", "POST", f"{base}/search")] == 3
    assert " ERROR: " not in run.stderr
    assert "lacks internals" not in run.stderr  # every adapter of scheduler/internals.py found its part
    # Scrapy 2.13 passes spider= to the middlewares; 2.14+ warns about a method requiring it
    assert "requires a spider argument" not in run.stderr


def test_reactorless_mode_crawls_the_same(shop, tmp_path: Path) -> None:
    """Scrapy 2.15+'s reactor-less mode (``TWISTED_REACTOR_ENABLED=False``, which 2.19's
    ``get_crawler()`` picks when no reactor is installed): the same fetches as with the
    reactor, no reactor installed by the add-on, no error."""
    root, base = shop
    settings = {"TWISTED_REACTOR_ENABLED": False, "LOG_LEVEL": "DEBUG", "IPR_DATA_DIR": tmp_path / "r"}
    run = scrapy(root, "crawl", "shop", settings=settings)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "ipr-crawl: crawl 'shop.shop'" in run.stderr  # the add-on was on
    with_reactor = scrapy(root, "crawl", "shop", settings={**settings, "TWISTED_REACTOR_ENABLED": True,
                                                           "IPR_DATA_DIR": tmp_path / "r2"})
    assert with_reactor.returncode == 0, with_reactor.stderr[-4000:]
    assert fetched(run.stderr) == fetched(with_reactor.stderr)
    assert fetched(run.stderr)[("200", "POST", f"{base}/search")] == 3
    assert " ERROR: " not in run.stderr and "Traceback" not in run.stderr, run.stderr[-4000:]
    if SCRAPY_VERSION >= (2, 15):
        assert "twisted.internet.asyncioreactor.AsyncioSelectorReactor" not in run.stderr.split("Spider opened")[0]


def test_every_internal_the_addon_reads_is_on_this_scrapy() -> None:
    """The parts of Scrapy that are not public API and that the add-on reads
    (:mod:`ipr_crawl.scheduler.internals`) exist on this Scrapy, in the form read: the
    engine's slot with ``inprogress`` and ``nextcall``, the downloader's ``active``, the
    scraper's ``slot``, Scrapy's signals on PyDispatcher, ``_find_method``."""
    import inspect

    from scrapy.core.downloader import Downloader, Slot
    from scrapy.core.engine import ExecutionEngine, _Slot
    from scrapy.core.scraper import Scraper

    assert internals.missing(object()) == []  # the imports: PyDispatcher, _find_method
    slot_init = inspect.signature(_Slot.__init__).parameters
    assert "nextcall" in slot_init or "nextcall" in inspect.getsource(_Slot)
    assert "self.inprogress" in inspect.getsource(_Slot)
    assert "self._slot" in inspect.getsource(ExecutionEngine.__init__)
    assert "self.active" in inspect.getsource(Downloader.__init__)
    assert "self.slot" in inspect.getsource(Scraper.__init__)
    assert "self.slots" in inspect.getsource(Downloader.__init__)
    # what slot_view and the polite lease read of a downloader slot (Scrapy before 2.19:
    # randomize_delay required; since: jitter, and randomize_delay deprecated)
    slot = Slot(2, 0.5) if "jitter" in inspect.signature(Slot.__init__).parameters else Slot(2, 0.5, False)
    assert (len(slot.active), len(slot.queue), slot.delay, slot.concurrency, slot.lastseen) == (0, 0, 0.5, 2, 0)
    assert "bootstrap_failed |= not getattr(crawler, \"spider\", None)" in inspect.getsource(
        __import__("scrapy.crawler", fromlist=["CrawlerRunner"]))


def test_a_missing_internal_is_named_once_and_its_fallback_serves(caplog) -> None:
    """On a Scrapy without one of those parts the crawl goes on: one WARNING names what
    is gone, and the public fallbacks give the same answers."""
    import logging

    from scrapy import Spider

    class Engine:  # an engine of a future Scrapy: no _slot, no downloader.active
        downloader = object()
        scraper = object()

    class Crawler:
        engine = Engine()

    with caplog.at_level(logging.WARNING):
        gone = internals.warn_missing(Crawler())
    assert [g.split(" ")[0] for g in gone] == ["engine._slot.nextcall", "engine._slot.inprogress",
                                              "engine.downloader.active", "engine.downloader.slots"]
    assert len([r for r in caplog.records if "lacks internals" in r.getMessage()]) == 1
    assert internals.requests_in_progress(Crawler()) is None and internals.wake_engine(Crawler()) is False
    assert internals.engine_holds_nothing(Crawler()) is False
    assert internals.slot_view(Crawler()) is None  # the heartbeat publishes no slots

    class Shop(Spider):
        name = "shop"

        def parse_item(self, response):
            return None

    spider = Shop()
    found = internals.callback_name(spider, spider.parse_item)
    real = internals._find_method
    try:
        internals._find_method = lambda: None  # type: ignore[assignment]
        assert internals.callback_name(spider, spider.parse_item) == found == "parse_item"
        assert any(g.startswith("scrapy.http.request._find_method") for g in internals.missing(object()))
    finally:
        internals._find_method = real
