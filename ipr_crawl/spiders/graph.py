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
from scrapy.http import HtmlResponse, Response, XmlResponse
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
        settings = self.settings if hasattr(self, "crawler") else None
        get = settings.getbool if settings is not None else (lambda name, default=False: default)
        if get("IPR_GRAPH_STAY_ON_HOSTS", True) and _netloc(url) not in self.hosts:
            return "host"
        if get("IPR_GRAPH_SKIP_QUERY", False) and (parts.query or "cgi" in parts.path.lower()):
            return "query"
        extensions = [e.lower().lstrip(".") for e in settings.getlist("IPR_GRAPH_EXTENSIONS")] if settings else []
        if extensions:
            ext = posixpath.splitext(parts.path)[1].lower().lstrip(".")
            if ext and ext not in extensions:
                return "extension"
        return None

    def _follow(self, url: str) -> bool:
        return self.skip_reason(url) is None

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

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        for url in self.links(response):
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
