"""The conditional-GET downloader middleware: validators, change detection and
the next visit of every fetched URL (Tamura & Kitsuregawa 2008 §3 (2)-(5)).

On with ``IPR_REVISIT_ENABLED`` (the add-on places it at 580, inside
``HttpCompressionMiddleware`` and ``RedirectMiddleware``, so it sees decoded
bodies of final URLs, and outside ``HttpCacheMiddleware``).

- ``process_request``: a URL fetched before gets ``If-None-Match`` (its stored
  ``ETag``) and ``If-Modified-Since`` (its stored ``Last-Modified``), RFC 9110
  §13.1.2, §13.1.3; a header the request already carries is left alone.
- ``process_response`` has the response classified by the crawl
  (:class:`ipr_crawl.scheduler.revisits.RevisitObserver`): ``304`` ->
  ``not_modified`` (RFC 9110 §15.4.5); a 2xx -> ``new`` (first fetch), ``changed``
  or ``unchanged`` by its content digest (``IPR_REVISIT_HASH``); 404/410 -> ``gone``
  (revisits stop); the URL's state, next visit and change event are stored.
- The class is in ``response.flags`` and ``response.meta["ipr_revisit"]``.
  A 304 never reaches a callback as content: it is dropped (``IgnoreRequest``,
  so an errback sees it) unless the request accepts 304 (``handle_httpstatus_list``,
  ``handle_httpstatus_all``, ``HTTPERROR_ALLOWED_CODES``), and then it arrives
  flagged ``not_modified`` with its empty body. An unchanged 200 is dropped the
  same way while ``IPR_REVISIT_SKIP_UNCHANGED`` is on (Tamura & Kitsuregawa
  2008, §3 (3): only changed content is archived and parsed). Dropped responses settle their lease here;
  the page's out-links in the graph stay as they were.
- Stats: ``ipr/revisit/{new,changed,unchanged,not_modified,gone,validators_sent,cached}``.
- ``request.meta["dont_revisit"] = True`` keeps a request out of all this.

With Scrapy's ``HttpCacheMiddleware`` (900, closer to the downloader): it runs
after this one on requests, so a stale cached copy's validators (RFC2616Policy)
replace ours - one ``If-None-Match``, never two - and a 304 is turned by the
cache into the cached 200 flagged ``cached``; this middleware then classifies
that body by its digest (``unchanged`` when it is the version seen last), so
no 304 is lost and none reaches a callback. A fresh cache hit never reaches the
network and counts as an access; with the default ``DummyPolicy`` every revisit
is a cache hit, which the middleware warns about.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response

from ipr_crawl.config import RevisitConfig
from ipr_crawl.meta import DONT_REVISIT_META, RECORDED_META, REVISIT_META
from ipr_crawl.scheduler import frontier_of
from ipr_crawl.scheduler.refresher import SIM_TIME_HEADER
from ipr_crawl.scheduler.revisits import FLAGS, RevisitObserver

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["FLAGS", "REVISIT_META", "ConditionalGetMiddleware"]

logger = logging.getLogger(__name__)


class ConditionalGetMiddleware:
    """Downloader middleware of revisits (see the module docstring)."""

    def __init__(self, crawler: Crawler, cfg: RevisitConfig) -> None:
        self.crawler = crawler
        self.cfg = cfg
        settings = crawler.settings
        self.allow_all = settings.getbool("HTTPERROR_ALLOW_ALL")
        self.allowed_codes = {int(c) for c in settings.getlist("HTTPERROR_ALLOWED_CODES")}
        self._warned = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ConditionalGetMiddleware:
        settings = crawler.settings
        if not settings.getbool("IPR_ENABLED", True):
            raise NotConfigured("IPR_ENABLED is off")
        if not settings.getbool("IPR_REVISIT_ENABLED"):
            raise NotConfigured("IPR_REVISIT_ENABLED is off")
        mw = cls(crawler, RevisitConfig.from_settings(settings))
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    def spider_opened(self, spider: Any) -> None:
        s = self.crawler.settings
        if s.getbool("HTTPCACHE_ENABLED") and s.get("HTTPCACHE_POLICY", "").endswith("DummyPolicy"):
            logger.warning(
                "ipr-crawl: HTTPCACHE_ENABLED with DummyPolicy serves every revisit from the cache, "
                "so no change is ever seen; use scrapy.extensions.httpcache.RFC2616Policy"
            )

    # -- helpers ----------------------------------------------------------------------
    def _observer(self) -> RevisitObserver | None:
        scheduler = frontier_of(self.crawler)
        observer = getattr(scheduler, "revisit_observer", None)
        if observer is None and not self._warned:
            self._warned = True
            logger.warning("ipr-crawl: IPR_REVISIT_ENABLED needs the IprScheduler (the add-on); revisits are off")
        return observer

    @staticmethod
    def _applies(request: Request) -> bool:
        return (
            request.method == "GET"
            and request.url.startswith(("http://", "https://"))
            and not request.meta.get(DONT_REVISIT_META)
        )

    def _accepts_304(self, request: Request) -> bool:
        meta = request.meta
        if meta.get("handle_httpstatus_all") or self.allow_all:
            return True
        if "handle_httpstatus_list" in meta:
            return 304 in meta["handle_httpstatus_list"]
        spider = self.crawler.spider
        return 304 in getattr(spider, "handle_httpstatus_list", ()) or 304 in self.allowed_codes

    def _inc(self, key: str, count: int = 1) -> None:
        self.crawler.stats.inc_value(f"ipr/revisit/{key}", count)

    # -- Scrapy hooks -----------------------------------------------------------------
    def process_request(self, request: Request) -> None:
        if not self._applies(request):
            return
        observer = self._observer()
        if observer is None:
            return
        clock = observer.refresher.clock
        if clock.virtual:
            request.headers[SIM_TIME_HEADER] = repr(clock.now())
        sent = False
        for name, value in observer.validators(request).items():
            if name not in request.headers:  # a header the request carries is left alone
                request.headers[name] = value
                sent = True
        if sent:
            self._inc("validators_sent")

    def process_response(self, request: Request, response: Response) -> Response:
        if not self._applies(request):
            return response
        observer = self._observer()
        if observer is None:
            return response
        seen = observer.observe(request, response)
        if seen is None:
            return response
        kind = seen.kind
        self._inc(kind)
        if seen.distrusted is not None:
            self._inc("sitemap_distrusted")
            logger.warning("ipr-crawl: sitemap <GET %s>: its <lastmod> was wrong for %d URL(s) and right for %d, "
                           "by this crawl's own fetches: not followed (read again later and later; "
                           "IPR_REVISIT_SITEMAP_LASTMOD=False stops reading lastmod)", request.url,
                           seen.distrusted.refuted, seen.distrusted.confirmed)
        if seen.sitemap_due:
            self._inc("sitemap_due", seen.sitemap_due)
            logger.info("ipr-crawl: sitemap <GET %s>: %d URL(s) changed since their last fetch (lastmod), due now",
                        request.url, seen.sitemap_due)
        if "cached" in response.flags and kind in ("new", "unchanged", "changed"):
            self._inc("cached")
        response.flags.append(kind)
        request.meta[REVISIT_META] = kind
        if kind == "gone":
            return response
        logger.debug(
            "ipr-crawl: %s <GET %s>: HTTP %d, next visit in %.3g d%s",
            kind, request.url, response.status, seen.tau / 86400,
            " (dropped: not passed to the spider)" if seen.drop else "",
        )
        if kind == "not_modified" and self._accepts_304(request):
            request.meta[RECORDED_META] = True  # settled above; the graph keeps the page's links
            return response
        if seen.drop:
            request.meta[RECORDED_META] = True
            raise IgnoreRequest(f"{kind.replace('_', ' ')}: {request.url}")
        return response
