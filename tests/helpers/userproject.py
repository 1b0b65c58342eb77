"""A fresh Scrapy project, as ``scrapy startproject shop`` makes it plus the one
``ADDONS`` line, with spiders using the patterns of real projects, for the
drop-in tests: POST pagination, JSON requests, items in ``meta`` and
``cb_kwargs``, errbacks, retries, redirects, off-site links, CrawlSpider rules,
a sitemap, spider contracts, and an item pipeline that commits every item to
SQLite. :func:`make_project` writes it; :func:`scrapy` runs a command in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

SETTINGS = '''
BOT_NAME = "shop"
SPIDER_MODULES = ["shop.spiders"]
NEWSPIDER_MODULE = "shop.spiders"
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "DEBUG"
RETRY_HTTP_CODES = [503]
ADDONS = {"ipr_crawl.Addon": 0}
'''

ITEMS = '''
import dataclasses
import datetime


@dataclasses.dataclass
class Product:
    category: str = ""
    seen: datetime.datetime | None = None
    name: str | None = None
    price: float | None = None
    url: str = ""
'''

PIPELINES = '''
import asyncio
import sqlite3

from itemadapter import ItemAdapter


class SqlitePipeline:
    """Commits every item (SQLITE_PATH) after SQLITE_DELAY seconds (a database round
    trip): once committed, a kill -9 cannot take it back."""

    def __init__(self, path, delay):
        self.path = path
        self.delay = delay

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.get("SQLITE_PATH"), crawler.settings.getfloat("SQLITE_DELAY"))

    def open_spider(self, spider=None):
        self.db = sqlite3.connect(self.path) if self.path else None
        if self.db is not None:
            self.db.execute("CREATE TABLE IF NOT EXISTS items (url TEXT PRIMARY KEY, n INTEGER)")

    def close_spider(self, spider=None):
        if self.db is not None:
            self.db.close()

    async def process_item(self, item, spider=None):
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.db is not None:
            url = ItemAdapter(item).get("url")
            self.db.execute("INSERT INTO items VALUES (?, 1) ON CONFLICT(url) DO UPDATE SET n = n + 1", (url,))
            self.db.commit()
        return item
'''

SHOP = '''
import dataclasses
import datetime

import scrapy
from scrapy.http import JsonRequest
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule, SitemapSpider
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from shop.items import Product

BASE = "{base}"
SEEN = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


class ShopSpider(scrapy.Spider):
    name = "shop"
    allowed_domains = ["127.0.0.1"]
    start_urls = [BASE + "/"]

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if "/cat/" in url:
                yield scrapy.Request(url, callback=self.parse_category, cb_kwargs={{"category": url.rsplit("/", 1)[-1]}})
            elif "/missing" in url:
                yield scrapy.Request(url, callback=self.parse_product, errback=self.on_error)
            else:
                yield scrapy.Request(url, callback=self.parse_product)
        for page in ("1", "2", "3"):
            yield scrapy.FormRequest(BASE + "/search", formdata={{"page": page}}, callback=self.parse_search)
        yield JsonRequest(BASE + "/api/products", data={{"page": 1}}, callback=self.parse_api)

    def parse_category(self, response, category):
        for href in response.css("a.p::attr(href)").getall():
            item = Product(category=category, seen=SEEN)
            yield response.follow(href, self.parse_product, meta={{"item": item}}, cb_kwargs={{"tags": ("a", 1)}})

    def parse_search(self, response):
        for href in response.css("a.p::attr(href)").getall():
            yield response.follow(href, self.parse_product, meta={{"item": Product(category="search")}})

    def parse_api(self, response):
        data = response.json()
        for n in data["ids"]:
            yield scrapy.Request(f"{{BASE}}/product/{{n}}", callback=self.parse_product,
                                 meta={{"item": {{"category": "api", "n": n}}}})
        if data["next"]:
            yield JsonRequest(BASE + "/api/products", data={{"page": data["next"]}}, callback=self.parse_api)

    def parse_product(self, response, tags=()):
        """A product page.

        @url {base}/product/1
        @returns items 1 1
        @returns requests 0 0
        @scrapes name price url
        """
        found = response.meta.get("item")
        if isinstance(found, dict):
            found = Product(category=found["category"])
        item = found or Product(category="direct")
        price = response.css(".price::text").get()
        yield dataclasses.replace(
            item, name=response.css("h1::text").get(), price=float(price) if price else None, url=response.url,
        )

    def on_error(self, failure):
        yield {{"error": failure.request.url}}


class ShopCrawlSpider(CrawlSpider):
    name = "shopcrawl"
    allowed_domains = ["127.0.0.1"]
    start_urls = [BASE + "/"]
    rules = (
        Rule(LinkExtractor(allow=r"/cat/")),
        Rule(LinkExtractor(allow=r"/product/"), callback="parse_item"),
    )

    def parse_item(self, response):
        yield {{"url": response.url, "name": response.css("h1::text").get()}}


class ShopSitemapSpider(SitemapSpider):
    name = "shopmap"
    sitemap_urls = [BASE + "/sitemap.xml"]

    def parse(self, response):
        yield {{"url": response.url, "name": response.css("h1::text").get()}}


class RedisShopSpider(RedisSpider):
    """scrapy-redis's RedisSpider: start URLs from the Redis list redisshop:start_urls."""

    name = "redisshop"
    allowed_domains = ["127.0.0.1"]

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            if "/cat/" in href or "/product/" in href:
                yield response.follow(href, self.parse)
        if "/product/" in response.url:
            yield {{"url": response.url, "name": response.css("h1::text").get()}}


class RedisShopCrawlSpider(RedisCrawlSpider):
    name = "redisshopcrawl"
    allowed_domains = ["127.0.0.1"]
    rules = (
        Rule(LinkExtractor(allow=r"/cat/")),
        Rule(LinkExtractor(allow=r"/product/"), callback="parse_item"),
    )

    def parse_item(self, response):
        yield {{"url": response.url, "name": response.css("h1::text").get()}}


class WikiSpider(scrapy.Spider):
    """Follows every link of a served graph and yields one item per page."""

    name = "wiki"

    def __init__(self, start_url="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start_url]

    def parse(self, response):
        yield {{"url": response.url}}
        yield from response.follow_all(css="a", callback=self.parse)
'''


def make_project(root: Path, base: str) -> Path:
    """Write the ``shop`` project into ``root`` for the shop site at ``base``
    (``http://127.0.0.1:PORT``); returns ``root``."""
    pkg = root / "shop"
    (pkg / "spiders").mkdir(parents=True, exist_ok=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = shop.settings\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text(SETTINGS)
    (pkg / "items.py").write_text(ITEMS)
    (pkg / "pipelines.py").write_text(PIPELINES)
    (pkg / "spiders" / "__init__.py").write_text("")
    (pkg / "spiders" / "shop.py").write_text(SHOP.format(base=base.rstrip("/")))
    return root


def scrapy(root: Path, *args: str, addon: bool = True, timeout: float = 300,
           settings: dict[str, object] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy ARGS`` in the project; ``addon=False`` adds ``-s IPR_ENABLED=False``."""
    cmd = [sys.executable, "-m", "scrapy", *args]
    for key, value in {**(settings or {}), **({} if addon else {"IPR_ENABLED": False})}.items():
        cmd += ["-s", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)


_CRAWLED = re.compile(r"Crawled \((\d{3})\) <(\w+) (\S+)>")


def fetched(log: str) -> Counter[tuple[str, str, str]]:
    """(status, method, URL) of every ``Crawled`` line of a log, with multiplicity."""
    return Counter(_CRAWLED.findall(log))


def items(path: Path) -> list[str]:
    """The items of a JSON lines feed, each as canonical JSON, sorted."""
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines if line.strip())
