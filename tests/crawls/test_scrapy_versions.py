"""Every Scrapy of the async ``start()`` era, 2.13 to 2.19
(:mod:`ipr_crawl.scheduler.compat`): real ``scrapy crawl`` runs of a fresh project
(:mod:`userproject`) against the shop site on loopback (:mod:`shopsite`), under the
Scrapy this interpreter has. ``python scripts/oldest_scrapy.py`` runs this file, with a
few crawl tests, under the oldest supported Scrapy."""

from __future__ import annotations

from pathlib import Path

import scrapy as scrapy_package
from userproject import fetched, scrapy

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
