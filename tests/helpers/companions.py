"""A real Scrapy project for the companion tests (tests/crawls/test_companions.py): the
``comp`` project with the add-on on, a spider following every link of a served
site and yielding one item per page, and the probes and companions those tests
put beside the add-on. :func:`make_project` writes it, :func:`run` runs ``scrapy
crawl`` in it and returns what the crawl did (its log, stats and items).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

SETTINGS = '''
BOT_NAME = "comp"
SPIDER_MODULES = ["comp.spiders"]
NEWSPIDER_MODULE = "comp.spiders"
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "DEBUG"
ADDONS = {"ipr_crawl.Addon": 0}
'''

SPIDERS = '''
import scrapy


class PagesSpider(scrapy.Spider):
    """Follows every link from its start URL and yields one item per page."""

    name = "pages"

    def __init__(self, start_url="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        if "/_ipr/" not in response.url:
            # serve-changes writes each page's version number into its body
            yield {"url": response.url, "version": response.xpath("//p[starts-with(., 'version ')]/text()").get()}
        yield from response.follow_all(css="a", callback=self.parse)
'''

PROBES = '''
"""Downloader middlewares around Scrapy's HttpCacheMiddleware (900) that count who
set a request's validators: BeforeCache (899) sees what the layers before the cache
set; AfterCache (950, nearest the downloader) sees what goes out."""

VALIDATORS = (b"If-None-Match", b"If-Modified-Since")


class BeforeCache:
    def process_request(self, request, spider=None):
        request.meta["probe_before_cache"] = {k: request.headers[k] for k in VALIDATORS if k in request.headers}


class AfterCache:
    def __init__(self, stats):
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.stats)

    def process_request(self, request, spider=None):
        if request.meta.pop("probe_before_cache", None):
            self.stats.inc_value("probe/validators/before_cache")  # set by a layer before the cache
        sent = {k: request.headers[k] for k in VALIDATORS if k in request.headers}
        cached = request.meta.get("cached_response")  # a stale copy, which a 304 would bring back
        if cached is None:
            self.stats.inc_value("probe/validators/" + ("sent_without_copy" if sent else "none"))
            return
        copy = {b"If-None-Match": cached.headers.get(b"ETag"), b"If-Modified-Since": cached.headers.get(b"Last-Modified")}
        if not sent:
            self.stats.inc_value("probe/validators/none")
        elif all(copy[k] == v for k, v in sent.items()):
            self.stats.inc_value("probe/validators/of_the_copy")
        else:  # a 304 to these would bring back a copy they do not describe
            self.stats.inc_value("probe/validators/not_of_the_copy")

    def process_response(self, request, response, spider=None):
        self.stats.inc_value(f"probe/network/{response.status}")
        return response
'''

PROBE_MIDDLEWARES = {"comp.probes.BeforeCache": 899, "comp.probes.AfterCache": 950}


def make_project(root: Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write the ``comp`` project into ``root`` (plus ``extra_files``: path inside the
    ``comp`` package -> text); returns ``root``."""
    pkg = root / "comp"
    (pkg / "spiders").mkdir(parents=True, exist_ok=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = comp.settings\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text(SETTINGS)
    (pkg / "probes.py").write_text(PROBES)
    (pkg / "spiders" / "__init__.py").write_text("")
    (pkg / "spiders" / "pages.py").write_text(SPIDERS)
    for name, text in (extra_files or {}).items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return root


_CRAWLED = re.compile(r"Crawled \((\d{3})\) <(\w+) (\S+)>[^\n]*?(?:\['([^\]]*)'\])?\s*$", re.M)
_STAT = re.compile(r"^\s*'([\w/.\-]+)': (\d+),?$", re.M)


@dataclass
class Run:
    """What one ``scrapy crawl`` did: exit status, log (and stderr), the stats with
    integer values, the items (canonical JSON, sorted) and the fetches
    ``(status, method, URL)`` with multiplicity."""

    returncode: int
    log: str
    stats: dict[str, int]
    items: list[str]
    fetched: Counter[tuple[str, str, str]]

    def stat(self, key: str) -> int:
        return self.stats.get(key, 0)


def run(root: Path, spider: str = "pages", *, start_url: str = "", addon: bool = True, name: str = "run",
        settings: dict[str, object] | None = None, timeout: float = 120) -> Run:
    """``scrapy crawl SPIDER -a start_url=URL -O <name>.jsonl -s K=V ...`` in the
    project; ``addon=False`` adds ``-s IPR_ENABLED=False``."""
    log_file, feed = root / f"{name}.log", root / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider, "-O", str(feed)]
    if start_url:
        cmd += ["-a", f"start_url={start_url}"]
    values = {**(settings or {}), **({} if addon else {"IPR_ENABLED": False}), "LOG_FILE": str(log_file)}
    for key, value in values.items():
        cmd += ["-s", f"{key}={json.dumps(value) if isinstance(value, dict) else value}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    log = (log_file.read_text(encoding="utf-8", errors="replace") if log_file.exists() else "") + proc.stderr
    lines = feed.read_text().splitlines() if feed.exists() else []
    items = sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines if line.strip())
    fetched = Counter((m[0], m[1], m[2]) for m in _CRAWLED.findall(log))
    stats_text = log[log.rfind("Dumping Scrapy stats"):] if "Dumping Scrapy stats" in log else ""
    stats = {k: int(v) for k, v in _STAT.findall(stats_text)}
    return Run(proc.returncode, log, stats, items, fetched)


POET_SPIDER = '''
import scrapy
from web_poet import WebPage, field


class VersionPage(WebPage):
    """A page object (web-poet) of a served page: its URL and version."""

    @field
    def url(self):
        return str(self.response.url)

    @field
    def version(self):
        return self.xpath("//p[starts-with(., 'version ')]/text()").get()


class PoetSpider(scrapy.Spider):
    name = "poet"
    custom_settings = {"ADDONS": {"ipr_crawl.Addon": 0, "scrapy_poet.Addon": 300}}

    def __init__(self, start_url="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        yield from response.follow_all(css="a", callback=self.parse_page)

    async def parse_page(self, response, page: VersionPage):
        yield await page.to_item()
'''

OTHER_ADDON = '''
"""Another add-on in the pattern of scrapy-zyte-api's: at add-on priority it sets its
own REQUEST_FINGERPRINTER_CLASS (falling back to the one set before it) and its own
download handlers for http and https."""

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.utils.misc import load_object
from scrapy.utils.request import RequestFingerprinter
from w3lib.url import url_query_cleaner


class Fingerprinter:
    """Scrapy's fingerprint of the URL without its ``ref`` query parameter."""

    def __init__(self, crawler):
        fallback = crawler.settings.get("OTHER_FALLBACK_FINGERPRINTER_CLASS") or RequestFingerprinter
        self.fallback = load_object(fallback)(crawler) if isinstance(fallback, str) else fallback(crawler)
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def fingerprint(self, request):
        self.stats.inc_value("other/fingerprints")
        return self.fallback.fingerprint(request.replace(url=url_query_cleaner(request.url, ["ref"], remove=True)))


class Handler(HTTP11DownloadHandler):
    """Scrapy's HTTP/1.1 handler, counting what it downloads."""

    def __init__(self, crawler):
        super().__init__(crawler)
        self.stats = crawler.stats

    async def download_request(self, request):
        self.stats.inc_value("other/handled")
        return await super().download_request(request)


class OtherAddon:
    def update_settings(self, settings):
        settings.set("OTHER_FALLBACK_FINGERPRINTER_CLASS", settings.get("REQUEST_FINGERPRINTER_CLASS"), "addon")
        settings.set("REQUEST_FINGERPRINTER_CLASS", Fingerprinter, "addon")
        handlers = dict(settings.getdict("DOWNLOAD_HANDLERS"))
        handlers.update(http="comp.otheraddon.Handler", https="comp.otheraddon.Handler")
        settings.set("DOWNLOAD_HANDLERS", handlers, "addon")
'''

REFS_SPIDER = '''
import scrapy


class RefsSpider(scrapy.Spider):
    """Follows every link twice: as it is and with ``?ref=index`` (one page to a
    fingerprinter that leaves ``ref`` out)."""

    name = "refs"

    def __init__(self, start_url="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse_page)
            yield response.follow(href + "?ref=index", self.parse_page)

    def parse_page(self, response):
        yield {"url": response.url.split("?")[0], "version": response.xpath("//p[starts-with(., 'version ')]/text()").get()}
'''


ASYNC_DELTAFETCH = '''
from scrapy_deltafetch import DeltaFetch


class AsyncDeltaFetch(DeltaFetch):
    """scrapy-deltafetch 2.1.0 with the async spider output Scrapy 2.19 asks of a
    spider middleware (its own has only the synchronous one, which Scrapy refuses)."""

    async def process_spider_output_async(self, response, result, spider=None):
        async for r in result:
            for out in self.process_spider_output(response, [r], spider):
                yield out
'''
