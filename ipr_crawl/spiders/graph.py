"""The bundled ``graph`` spider: follow every link, stay on the start hosts.

``scrapy crawl graph -a start_urls=URL[,URL...]`` follows ``<a href>``,
``<frame src>`` (and ``<iframe src>``: links inside a frame count as links of the
framing page) and ``<meta http-equiv=refresh>`` (Matsukubo & Hayashi, 003 §3.1),
on the hosts and ports of its start URLs unless ``IPR_GRAPH_STAY_ON_HOSTS`` is
off. The link filters of ALGORITHMS.md §1.3 are settings, off by default:
``IPR_GRAPH_HTTP_ONLY``, ``IPR_GRAPH_SKIP_QUERY`` (query strings and ``cgi``)
and ``IPR_GRAPH_EXTENSIONS`` (only these file extensions; a path without one
is kept). It yields no items: the link graph lives in the frontier.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.http import Response, TextResponse
from w3lib.html import get_meta_refresh

__all__ = ["GraphSpider"]


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{(parts.hostname or '').lower()}:{port}"


class GraphSpider(Spider):
    """Follows every link of every page (see the module docstring)."""

    name = "graph"

    def __init__(self, start_urls: str | list[str] = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(start_urls, str):
            start_urls = [u.strip() for u in start_urls.split(",") if u.strip()]
        if not start_urls:
            raise ValueError("graph spider: give -a start_urls=URL[,URL...]")
        for url in start_urls:
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"graph spider: start URL {url!r} is not http(s)")
        self.start_urls = list(start_urls)
        self.hosts = {_netloc(u) for u in self.start_urls}

    async def start(self) -> AsyncIterator[Any]:
        for url in self.start_urls:
            yield Request(url, callback=self.parse)

    def _follow(self, url: str) -> bool:
        parts = urlsplit(url)
        settings = self.settings
        if parts.scheme not in ("http", "https"):
            return False
        if settings.getbool("IPR_GRAPH_STAY_ON_HOSTS", True) and _netloc(url) not in self.hosts:
            return False
        if settings.getbool("IPR_GRAPH_SKIP_QUERY") and (parts.query or "cgi" in parts.path.lower()):
            return False
        extensions = [e.lower().lstrip(".") for e in settings.getlist("IPR_GRAPH_EXTENSIONS")]
        if extensions:
            ext = posixpath.splitext(parts.path)[1].lower().lstrip(".")
            if ext and ext not in extensions:
                return False
        return True

    def links(self, response: Response) -> Iterator[str]:
        """Absolute URLs of the page's links, in document order."""
        if not isinstance(response, TextResponse):
            return
        for href in response.xpath("//a/@href | //area/@href | //frame/@src | //iframe/@src").getall():
            href = href.strip()
            if href and not href.startswith(("javascript:", "mailto:", "#")):
                yield response.urljoin(href)
        _delay, refresh = get_meta_refresh(response.text, response.url)
        if refresh:
            yield refresh

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        for url in self.links(response):
            if self._follow(url):
                yield Request(url, callback=self.parse)
