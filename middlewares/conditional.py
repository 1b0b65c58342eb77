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
- Stats: ``ipr/revisit/{new,changed,unchanged,not_modified,gone,validators_sent,cached,cache_hit}``.
- ``request.meta["ipr_dont_revisit"] = True`` keeps a request out of all this (the
  former key ``"dont_revisit"`` still works, with a deprecation warning).

With Scrapy's ``HttpCacheMiddleware`` (``HTTPCACHE_ENABLED``; 900, closer to the
downloader) one layer sets a request's validators, never both, and the cache's
copies are told apart from fetches:

- this middleware sets none; :class:`CacheValidatorsMiddleware` (right after the
  cache, 901) does, for a request that carries none yet: when the cache holds a
  stale copy (which it returns on a 304), that copy's ``ETag`` / ``Last-Modified``
  (``RFC2616Policy`` leaves a ``Cache-Control: no-cache`` copy without them), so a
  304 never brings back a copy other than the one it validated; with no copy, the
  crawl's own, unless the cache's policy would store the 304 as the page
  (``DummyPolicy``): then the request goes out unconditional.
- a 304 the cache turned into its copy (flagged ``cached``) is classified by its
  digest (``unchanged`` when it is the version seen last) and counted as an access;
  a copy served without the server (fresh, or stale for a failed download or a
  5xx) is not an access (:meth:`RevisitObserver.cache_hit`): the URL is due again
  one interval later, outside the revisit budget's spend (``ipr/revisit/cache_hit``).
- with ``DummyPolicy`` every revisit is a fresh copy and no change is ever seen: a
  warning at start says so (use ``RFC2616Policy``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import load_object
from twisted.python.failure import Failure

from ipr_crawl.config import RevisitConfig
from ipr_crawl.meta import NETWORK_STATUS_META, RECORDED_META, REVISIT_META, dont_revisit
from ipr_crawl.scheduler import scheduler_of
from ipr_crawl.scheduler.compat import SpiderArg
from ipr_crawl.scheduler.internals import cache_skips, cached_copy
from ipr_crawl.scheduler.refresher import SIM_TIME_HEADER
from ipr_crawl.scheduler.revisits import FLAGS, RevisitObserver

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["CACHE_MIDDLEWARE", "FLAGS", "REVISIT_META", "CacheValidatorsMiddleware", "ConditionalGetMiddleware",
           "http_cache_on"]

logger = logging.getLogger(__name__)

#: Scrapy's HTTP cache middleware, as DOWNLOADER_MIDDLEWARES_BASE names it.
CACHE_MIDDLEWARE = "scrapy.downloadermiddlewares.httpcache.HttpCacheMiddleware"
_VALIDATORS = (b"If-None-Match", b"If-Modified-Since")


def http_cache_on(settings: Any) -> bool:
    """Whether Scrapy's ``HttpCacheMiddleware`` runs: ``HTTPCACHE_ENABLED`` and not
    disabled (``None``) in ``DOWNLOADER_MIDDLEWARES``."""
    return settings.getbool("HTTPCACHE_ENABLED") and settings.getwithbase("DOWNLOADER_MIDDLEWARES").get(
        CACHE_MIDDLEWARE, 900) is not None


async def in_crawl_order(crawler: Crawler, fn: Any, *args: Any, adds: bool = True) -> Any:
    """``fn(*args)``, a revisit store call, in the order of the crawl's Redis calls and off
    the event loop, with their away semantics: retried while Redis is away
    (:meth:`~ipr_crawl.scheduler.redis_calls.RedisCalls.deferred`). Its exception is raised
    here; a Redis error settles no page as failed (the scheduler hands its lease back:
    :meth:`~ipr_crawl.scheduler.IprScheduler.settle_failure`)."""
    calls = getattr(scheduler_of(crawler), "calls", None)
    if calls is None:
        return fn(*args)
    d = calls.deferred(fn, *args, adds=adds)
    if d.called:  # answered at once (a scheduler driven without an event loop)
        box: list[Any] = []
        d.addBoth(box.append)
        if isinstance(box[0], Failure):
            box[0].raiseException()
        return box[0]
    return await maybe_deferred_to_future(d)


class ConditionalGetMiddleware:
    """Downloader middleware of revisits (see the module docstring)."""

    def __init__(self, crawler: Crawler, cfg: RevisitConfig, behind_cache: bool = False) -> None:
        self.crawler = crawler
        self.cfg = cfg
        #: Scrapy's HTTP cache runs: CacheValidatorsMiddleware sets the validators
        self.behind_cache = behind_cache
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
        mw = cls(crawler, RevisitConfig.from_settings(settings), http_cache_on(settings))
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    def spider_opened(self, spider: Any) -> None:
        from scrapy.extensions.httpcache import DummyPolicy

        policy = self.crawler.settings.get("HTTPCACHE_POLICY")
        try:
            policy = load_object(policy) if isinstance(policy, str) else policy
        except (ImportError, ValueError, NameError):
            return  # Scrapy's HttpCacheMiddleware says so itself
        if self.behind_cache and isinstance(policy, type) and issubclass(policy, DummyPolicy):
            logger.warning(
                "ipr-crawl: HTTPCACHE_POLICY DummyPolicy serves every revisit from the cache (not counted as an "
                "access), so no change is ever seen: use scrapy.extensions.httpcache.RFC2616Policy"
            )

    # -- helpers ----------------------------------------------------------------------
    def _observer(self) -> RevisitObserver | None:
        scheduler = scheduler_of(self.crawler)
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
            and not dont_revisit(request)
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
    async def process_request(self, request: Request, spider: SpiderArg = None) -> None:
        if not self._applies(request):
            return
        observer = self._observer()
        if observer is None:
            return
        clock = observer.refresher.clock
        if clock.virtual:
            request.headers[SIM_TIME_HEADER] = repr(clock.now())
        if self.behind_cache:
            return  # CacheValidatorsMiddleware sets them, after the cache
        sent = False
        for name, value in (await in_crawl_order(self.crawler, observer.validators, request, adds=False)).items():
            if name not in request.headers:  # a header the request carries is left alone
                request.headers[name] = value
                sent = True
        if sent:
            self._inc("validators_sent")

    async def process_response(self, request: Request, response: Response, spider: SpiderArg = None) -> Response:
        if not self._applies(request):
            return response
        observer = self._observer()
        if observer is None:
            return response
        if "cached" in response.flags and request.meta.get(NETWORK_STATUS_META) != 304:
            # the cache's copy, without the server's say: not an access
            seen = await in_crawl_order(self.crawler, observer.cache_hit, request, response)
            if seen is not None and seen.kind == "cache_hit":
                self._inc("cache_hit")
                return response
        else:
            seen = await in_crawl_order(self.crawler, observer.observe, request, response)
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


class CacheValidatorsMiddleware:
    """The validators of revisits beside Scrapy's ``HttpCacheMiddleware``, placed by the
    add-on right after it (nearer the downloader), see the module docstring: a
    request that carries no validators gets those of the cache's stale copy (RFC 9111
    §4.3.1: a 304 then validates the copy the cache returns), or with no copy the
    crawl's own (RFC 9110 §13.1), unless the cache's policy would store a 304 as the
    page. It notes the status the server answered with in
    ``request.meta["_ipr_network_status"]``: a response flagged ``cached`` without it
    never reached the server. ``NotConfigured`` without revisits or the cache."""

    def __init__(self, crawler: Crawler, policy: Any) -> None:
        self.crawler = crawler
        self.policy = policy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CacheValidatorsMiddleware:
        settings = crawler.settings
        if not (settings.getbool("IPR_ENABLED", True) and settings.getbool("IPR_REVISIT_ENABLED")):
            raise NotConfigured("revisits are off")
        if not http_cache_on(settings):
            raise NotConfigured("Scrapy's HTTP cache is off")
        return cls(crawler, load_object(settings["HTTPCACHE_POLICY"])(settings))

    def _stores_304(self, request: Request) -> bool:
        """Whether the cache would keep a 304 to ``request`` as the page's copy."""
        if cache_skips(request):
            return False
        return bool(self.policy.should_cache_response(Response(request.url, status=304), request))

    async def process_request(self, request: Request) -> None:
        request.meta.pop(NETWORK_STATUS_META, None)
        if not ConditionalGetMiddleware._applies(request) or any(k in request.headers for k in _VALIDATORS):
            return  # set by the cache's policy, or by the spider: left alone
        copy = cached_copy(request)
        if copy is not None:
            headers = {b"If-None-Match": copy.headers.get(b"ETag"), b"If-Modified-Since": copy.headers.get(b"Last-Modified")}
        elif self._stores_304(request):
            return
        else:
            observer = getattr(scheduler_of(self.crawler), "revisit_observer", None)
            headers = {}
            if observer is not None:
                headers = dict(await in_crawl_order(self.crawler, observer.validators, request, adds=False))
        sent = False
        for name, value in headers.items():
            if value:
                request.headers[name] = value
                sent = True
        if sent:
            self.crawler.stats.inc_value("ipr/revisit/validators_sent")

    def process_response(self, request: Request, response: Response) -> Response:
        if "cached" not in response.flags:
            request.meta[NETWORK_STATUS_META] = response.status
        return response
