"""A real Scrapy project for the companion tests (tests/test_companions.py): the
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
