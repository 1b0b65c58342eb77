"""The conditional-GET downloader middleware: validators, change detection and
the next visit of every fetched URL (Tamura & Kitsuregawa 2008 §3 (2)-(5)).

On with ``IPR_REVISIT_ENABLED`` (the add-on places it at 580, inside
``HttpCompressionMiddleware`` and ``RedirectMiddleware``, so it sees decoded
bodies of final URLs, and outside ``HttpCacheMiddleware``).

- ``process_request``: a URL fetched before gets ``If-None-Match`` (its stored
  ``ETag``) and ``If-Modified-Since`` (its stored ``Last-Modified``), RFC 9110
  §13.1.2, §13.1.3; a header the request already carries is left alone.
- ``process_response`` classifies the response: ``304`` -> ``not_modified``
  (RFC 9110 §15.4.5); a 2xx -> ``new`` (first fetch), ``changed`` or
  ``unchanged`` by its content digest (``IPR_REVISIT_HASH``: body, visible
  text, or simhash near-duplicates; :mod:`ipr_crawl.contenthash`); 404/410 ->
  ``gone`` (revisits stop). It updates the URL's state with the Last-Modified
  rule (``IPR_REVISIT_USE_LAST_MODIFIED``), asks the policy
  (``IPR_REVISIT_POLICY``) for the next interval and writes state, due time and
  one change event in one script call (:mod:`ipr_crawl.revisit_store`).
- The class is in ``response.flags`` and ``response.meta["ipr_revisit"]``.
  A 304 never reaches a callback as content: it is dropped (``IgnoreRequest``,
  so an errback sees it) unless the request accepts 304 (``handle_httpstatus_list``,
  ``handle_httpstatus_all``, ``HTTPERROR_ALLOWED_CODES``), and then it arrives
  flagged ``not_modified`` with its empty body. An unchanged 200 is dropped the
  same way while ``IPR_REVISIT_SKIP_UNCHANGED`` is on (001 §3 (3): only changed
  content is archived and parsed). Dropped responses settle their lease here;
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

from ipr_crawl.middlewares.linkgraph import _RECORDED  # marks a page as accounted for
from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response, TextResponse

from ipr_crawl.codec import encode_request
from ipr_crawl.config import RevisitConfig
from ipr_crawl.contenthash import digest, same_version
from ipr_crawl.refresher import SIM_TIME_HEADER, Refresher
from ipr_crawl.revisit import access, bucket, next_due, parse_http_date
from ipr_crawl.scheduler import frontier_of, lease_of
from ipr_crawl.urls import canonical_url, node_id

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["FLAGS", "REVISIT_META", "ConditionalGetMiddleware"]

logger = logging.getLogger(__name__)

#: ``response.meta`` key holding the class of a response.
REVISIT_META = "ipr_revisit"
#: Classes (also the response flags).
FLAGS = ("new", "changed", "unchanged", "not_modified", "gone")
#: Meta keys not kept in the stored revisit request.
_DROP_META = (
    "redirect_urls", "redirect_reasons", "redirect_times", "redirect_ttl", "retry_times",
    "download_slot", "download_latency", "depth", "cached_response", "_dont_cache",
    REVISIT_META, _RECORDED, "ipr_lease",
)
_DROP_HEADERS = (b"If-None-Match", b"If-Modified-Since", SIM_TIME_HEADER.encode())


def _header(response: Response, name: bytes) -> str:
    value = response.headers.get(name)
    return value.decode("latin-1").strip() if value else ""


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
    def _refresher(self) -> Refresher | None:
        scheduler = frontier_of(self.crawler)
        refresher = getattr(scheduler, "revisits", None)
        if refresher is None and not self._warned:
            self._warned = True
            logger.warning("ipr-crawl: IPR_REVISIT_ENABLED needs the IprScheduler (the add-on); revisits are off")
        return refresher

    @staticmethod
    def _applies(request: Request) -> bool:
        return (
            request.method == "GET"
            and request.url.startswith(("http://", "https://"))
            and not request.meta.get("dont_revisit")
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

    def _payload(self, request: Request) -> bytes:
        meta = {k: v for k, v in request.meta.items() if k not in _DROP_META}
        revisit = request.replace(dont_filter=True, meta=meta)
        for name in _DROP_HEADERS:
            revisit.headers.pop(name, None)
        try:
            return encode_request(revisit, self.crawler.spider)[0]
        except ValueError:  # a callback that is not a spider method: revisit with parse()
            return encode_request(revisit.replace(callback=None, errback=None), self.crawler.spider)[0]

    # -- Scrapy hooks -----------------------------------------------------------------
    def process_request(self, request: Request) -> None:
        if not self._applies(request):
            return
        refresher = self._refresher()
        if refresher is None:
            return
        if refresher.clock.virtual:
            request.headers[SIM_TIME_HEADER] = repr(refresher.clock.now())
        state = refresher.store.load(node_id(request.url))
        if state is None:
            return
        sent = False
        if state.etag and b"If-None-Match" not in request.headers:
            request.headers[b"If-None-Match"] = state.etag
            sent = True
        if state.last_modified and b"If-Modified-Since" not in request.headers:
            request.headers[b"If-Modified-Since"] = state.last_modified
            sent = True
        if sent:
            self._inc("validators_sent")
        return

    def process_response(self, request: Request, response: Response) -> Response:
        if not self._applies(request):
            return response
        refresher = self._refresher()
        if refresher is None:
            return response
        cfg, store = self.cfg, refresher.store
        status = response.status
        url = request.url
        id_ = node_id(url)
        redirected = request.meta.get("redirect_urls")
        if redirected:  # the URLs that redirected here are not revisited themselves
            store.unschedule([node_id(u) for u in redirected if node_id(u) != id_])
        if status in (404, 410):
            state = store.load(id_)
            if state is not None:
                t = bucket(refresher.clock.now(), cfg.resolution)
                store.record(id_, canonical_url(url), state, None,
                             event={"url": canonical_url(url), "t": t, "kind": "gone", "status": status})
                self._inc("gone")
                response.flags.append("gone")
                request.meta[REVISIT_META] = "gone"
            return response
        if status != 304 and not 200 <= status < 300:
            return response
        state = store.load(id_)
        if status == 304 and state is None:
            return response  # validators we did not send: not ours to classify
        t = bucket(refresher.clock.now(), cfg.resolution)
        etag = _header(response, b"ETag")
        last_modified = _header(response, b"Last-Modified")
        validators = {}
        if etag:
            validators["etag"] = etag
        if last_modified:
            validators["last_modified"] = last_modified
        if status == 304:
            kind = "not_modified"
        else:
            encoding = response.encoding if isinstance(response, TextResponse) else "utf-8"
            validators["digest"] = digest(response.body, cfg.hash_mode, encoding)
            if state is None:
                kind = "new"
            elif same_version(state.digest, validators["digest"], cfg.simhash_distance):
                kind = "unchanged"
            else:
                kind = "changed"
            if "cached" in response.flags:
                self._inc("cached")
        changed = kind == "changed"
        modified_at = parse_http_date(last_modified) if (changed and cfg.use_last_modified) else None
        state, tau = access(cfg.policy, state, t, changed, modified_at, **validators)
        due = next_due(t, tau, cfg.resolution, cfg.min_interval, cfg.max_interval)
        drop = kind == "not_modified" or (kind == "unchanged" and cfg.skip_unchanged)
        payload = self._payload(request) if kind in ("new", "changed") else b""
        event = {
            "url": canonical_url(url), "t": t, "kind": kind, "status": status, "tau": tau, "due": due,
            "m": state.m, "T": state.T, "U": state.U,
        }
        store.record(id_, canonical_url(url), state, due, payload, lease_of(request) if drop else b"", event)
        self._inc(kind)
        logger.debug(
            "ipr-crawl: %s <GET %s>: HTTP %d, next visit in %.3g d%s",
            kind, url, status, tau / 86400, " (dropped: not passed to the spider)" if drop else "",
        )
        response.flags.append(kind)
        request.meta[REVISIT_META] = kind
        if kind == "not_modified" and self._accepts_304(request):
            request.meta[_RECORDED] = True  # settled above; the graph keeps the page's links
            return response
        if drop:
            request.meta[_RECORDED] = True
            raise IgnoreRequest(f"{kind.replace('_', ' ')}: {url}")
        return response
