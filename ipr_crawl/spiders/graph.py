"""The bundled ``graph`` spider: follow every link, stay on the start hosts.

``scrapy crawl graph -a start_urls=URL[,URL...]`` follows ``<a href>``,
``<frame src>`` (and ``<iframe src>``: links inside a frame count as links of the
framing page) and ``<meta http-equiv=refresh>`` (Matsukubo & Hayashi, §3.1),
on the hosts and ports of its start URLs unless ``IPR_GRAPH_STAY_ON_HOSTS`` is
off. The link filters of Matsukubo & Hayashi are settings, off by default:
``IPR_GRAPH_HTTP_ONLY``, ``IPR_GRAPH_SKIP_QUERY`` (query strings and ``cgi``)
and ``IPR_GRAPH_EXTENSIONS`` (only these file extensions; a path without one
is kept). It yields no items (the link graph lives in the frontier) unless given
``-a items=1``: then one per page, ``{"url": ..., "links": <links found>}``.

Start URLs can also come from Redis (``IPR_START_URLS_KEY``,
:mod:`ipr_crawl.spiders.redis_start`); ``-a start_urls`` may then be left out.
The hosts of every start URL are kept in the crawl's Redis
(``ipr:{<crawl id>}:start_hosts``), so every process of the crawl stays on the
hosts of start URLs any of them read.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.http import HtmlResponse, Response, XmlResponse
from w3lib.html import get_meta_refresh

from ipr_crawl.spiders.redis_start import RedisStartUrlsMixin

__all__ = ["GraphSpider"]


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{(parts.hostname or '').lower()}:{port}"


class GraphSpider(RedisStartUrlsMixin, Spider):
    """Follows every link of every page (see the module docstring)."""

    name = "graph"

    def __init__(self, start_urls: str | list[str] = "", *args: Any, items: str | bool = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: ``-a items=1``: one item per page (``{"url", "links"}``), e.g. to check a crawl's items
        self.yield_items = str(items).strip().lower() in ("1", "true", "yes", "on")
        if isinstance(start_urls, str):
            start_urls = [u.strip() for u in start_urls.split(",") if u.strip()]
        for url in start_urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"graph spider: start URL {url!r} is not http(s)")
        self.start_urls = list(start_urls)
        self.hosts = {_netloc(u) for u in self.start_urls}
        self._not_hosts: dict[str, float] = {}  # host -> when Redis last said "not a start host"
        self._filter_settings: tuple[bool, bool, frozenset[str]] | None = None

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> GraphSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if not spider.start_urls and not crawler.settings.get("IPR_START_URLS_KEY"):
            raise ValueError("graph spider: give -a start_urls=URL[,URL...] or set IPR_START_URLS_KEY")
        return spider

    def _hosts_key(self) -> str:
        return f"ipr:{{{self._start_crawl_id()}}}:start_hosts" if self._start_client is not None else ""

    def _start_crawl_id(self) -> str:
        from ipr_crawl.scheduler import scheduler_of

        frontier = scheduler_of(self.crawler)
        return frontier.config.crawl_id if frontier is not None else self.name

    def on_start_url(self, url: str) -> None:
        host = _netloc(url)
        self.hosts.add(host)
        if self._start_client is not None:
            self._start_client.sadd(self._hosts_key(), host)

    def _known_host(self, host: str) -> bool:
        """A start host of this process, or (reading start URLs from Redis) of any
        process of the crawl; Redis is asked at most every 5 s per unknown host."""
        if host in self.hosts:
            return True
        if self._start_client is None:
            return False
        now = time.monotonic()
        if now - self._not_hosts.get(host, -10.0) < 5.0:
            return False
        if self._start_client.sismember(self._hosts_key(), host):
            self.hosts.add(host)
            return True
        self._not_hosts[host] = now
        return False

    async def start(self) -> AsyncIterator[Any]:
        if self._open_start_urls():
            for url in self.start_urls:  # shared with the processes that read Redis
                self.on_start_url(url)
        for url in self.start_urls:
            yield Request(url, callback=self.parse)
        if self._start_client is not None:
            for request in self.read_start_requests():
                yield request

    def skip_reason(self, url: str) -> str | None:
        """Why ``url`` is not followed, or None to follow it.

        ``"fragment"`` (an href that is only ``#...``), ``"scheme"`` (not http or
        https: ``mailto:``, ``javascript:``, ``ftp:``, ...), ``"invalid"`` (no
        host, a port out of range, an unclosed IPv6 bracket, ...), ``"host"``
        (``IPR_GRAPH_STAY_ON_HOSTS``), ``"query"`` (``IPR_GRAPH_SKIP_QUERY``),
        ``"extension"`` (``IPR_GRAPH_EXTENSIONS``).

        >>> GraphSpider(start_urls="http://a.example/").skip_reason("mailto:x@a.example")
        'scheme'
        """
        if url.startswith("#"):
            return "fragment"
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            return "invalid"
        if parts.scheme.lower() not in ("http", "https"):
            return "scheme"
        if not parts.hostname:
            return "invalid"
        stay_on_hosts, skip_query, extensions = self._filters()
        if stay_on_hosts and not self._known_host(_netloc(url)):
            return "host"
        if skip_query and (parts.query or "cgi" in parts.path.lower()):
            return "query"
        if extensions:
            ext = posixpath.splitext(parts.path)[1].lower().lstrip(".")
            if ext and ext not in extensions:
                return "extension"
        return None

    def _filters(self) -> tuple[bool, bool, frozenset[str]]:
        """``(IPR_GRAPH_STAY_ON_HOSTS, IPR_GRAPH_SKIP_QUERY, IPR_GRAPH_EXTENSIONS)``, read
        from the crawl's settings once (the defaults before a crawler is attached)."""
        if self._filter_settings is not None:
            return self._filter_settings
        if not hasattr(self, "crawler"):
            return True, False, frozenset()
        settings = self.settings
        self._filter_settings = (
            settings.getbool("IPR_GRAPH_STAY_ON_HOSTS", True),
            settings.getbool("IPR_GRAPH_SKIP_QUERY", False),
            frozenset(e.lower().lstrip(".") for e in settings.getlist("IPR_GRAPH_EXTENSIONS")),
        )
        return self._filter_settings

    def links(self, response: Response) -> Iterator[str]:
        """The page's links in document order: absolute URLs, or the href as
        written when it cannot be joined (an invalid URL) or is only a
        ``#fragment``."""
        if not isinstance(response, (HtmlResponse, XmlResponse)):
            # JSON, plain text, images, ...: no links (a JsonResponse cannot even be xpath'ed).
            self.crawler.stats.inc_value("ipr/graph/not_html")
            self.logger.debug("no links in %s (%s)", response.url[:300], type(response).__name__)
            return
        for href in response.xpath("//a/@href | //area/@href | //frame/@src | //iframe/@src").getall():
            href = href.strip()
            if not href:
                continue
            if href.startswith("#"):
                yield href
                continue
            try:
                yield response.urljoin(href)
            except ValueError:
                yield href
        _delay, refresh = get_meta_refresh(response.text, response.url)
        if refresh:
            yield refresh

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        links = 0
        for url in self.links(response):
            links += 1
            reason = self.skip_reason(url)
            if reason is None:
                try:
                    request = Request(url, callback=self.parse)
                except ValueError:  # e.g. a host IDNA cannot encode
                    reason = "invalid"
                else:
                    yield request
                    continue
            self.crawler.stats.inc_value(f"ipr/graph/skipped/{reason}")
            self.logger.debug("not following %s (%s)", url[:300], reason)
        if self.yield_items:
            yield {"url": response.url, "links": links}
