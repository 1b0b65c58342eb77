"""Recording a parsed page: one atomic record call with its out-links.

While a callback runs, the link-graph spider middleware holds back the Requests
it yields; when it is done, :meth:`PageRecorder.record` makes ONE script call
(``record_page.lua``) that records the page as fetched with its distinct
out-links, registers the new URLs with their request payloads, applies the
ordering's score update (IPR DL1 or BLC, Yamada et al. 2004, §3, §4.2) and
re-scores affected frontier entries in place.

The call is not waited for (``IPR_RECORD_PIPELINED``, on by default): it is sent
and its reply read when the next page is recorded or before the next pop
(:meth:`ipr_crawl.store.FrontierStore.send_record_page`), or, while Redis is away or
with ``IPR_REDIS_THREAD=always``, queued on the scheduler's Redis thread
(:mod:`ipr_crawl.scheduler.redis_thread`); the crawler parses the next page while Redis
runs the script. A URL counts as known
to Redis (no payload sent again, :class:`~ipr_crawl.scheduler.linkcache.LinkIds`)
only once its reply has come back.

Links are ordered by the tie rule (``IPR_TIE_RULE``: same-site or other-site
URLs of the page first, document order within a class) before new URLs get
their discovery numbers; after ``IPR_MAX_LINKS_PER_PAGE`` distinct links the
requests that follow are not even canonicalized: they are dropped, counted
(``ipr/links/over_cap``) and logged once per page.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from scrapy import Request, Spider, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from ipr_crawl.config import FrontierConfig
from ipr_crawl.meta import RECORDED_META, lease_of
from ipr_crawl.ordering.reference import tie_rule_order
from ipr_crawl.ordering.urls import bucket_of, canonical_url, node_id, site_of, tie_for
from ipr_crawl.scheduler.codec import Unstorable, encode_request
from ipr_crawl.scheduler.identity import RequestIdentity
from ipr_crawl.scheduler.internals import request_scheduled_receivers, send_to_receiver
from ipr_crawl.scheduler.item_retry import ItemRetry
from ipr_crawl.scheduler.linkcache import LinkIds
from ipr_crawl.store import Link, RecordResult

__all__ = ["PageRecorder", "RecordingHost", "order_links"]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")


class RecordingHost(Protocol):
    """What :class:`PageRecorder` asks of the crawl process it records for (the
    scheduler, :class:`ipr_crawl.scheduler.IprScheduler`): its settings, the request
    identity, the spider (once open), the engine's concurrency, and the calls that send a
    record, wake the engine and guard against a Redis gone for good."""

    config: FrontierConfig
    identity: RequestIdentity
    spider: Spider

    @property
    def concurrency(self) -> int:
        """``CONCURRENT_REQUESTS`` (at least 1)."""
        ...

    def guard(self, fn: Callable[..., _T], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, or ``default`` once Redis is unreachable for good."""
        ...

    def wake(self) -> None:
        """Ask the engine for requests now."""
        ...

    def submit_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
        then: Callable[[RecordResult], None],
    ) -> None:
        """A page's record call, not waited for; ``then(result)`` on the event loop."""
        ...

    def sync_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
    ) -> RecordResult:
        """A page's record call, waited for (``IPR_RECORD_PIPELINED=False``)."""
        ...

    def settled(self, lease: bytes) -> None:
        """A lease of this process was settled (its page recorded)."""
        ...

    def keep_local(self, request: Request, reason: Exception) -> bool:
        """Keep a request that cannot be stored in this process's memory."""
        ...

    def refused(self, requests: list[Request], duplicates: bool) -> None:
        """Link requests not queued: Scrapy's duplicate-filter line and stat, ``request_dropped``."""
        ...

    def maybe_pagerank_step(self) -> None:
        """``pr`` ordering: a page fetched for the first time (a PageRank step now and then)."""
        ...


def order_links(page_url: str, urls: list[str], tie_rule: str) -> list[int]:
    """Indexes of ``urls`` in the order new URLs get discovery numbers.

    ``tie_rule`` ``"same-site"`` puts URLs on the page's site (host:port) first,
    ``"other-site"`` the others first, ``"none"`` keeps document order; order
    within a class is document order (Yamada et al. 2004, §4.2).

    >>> order_links("http://a/", ["http://b/", "http://a/x"], "same-site")
    [1, 0]
    """
    return tie_rule_order(site_of(page_url), [site_of(u) for u in urls], tie_rule)


class PageRecorder:
    """Records parsed pages of one crawl process (see the module docstring).

    At-least-once for items: a page whose callback yielded items is recorded (its
    lease settled, the page marked fetched) only after every one of them has left
    the item pipelines (``item_scraped``, ``item_dropped`` or ``item_error``), so a
    process killed before that fetches the page again and yields its items again.
    """

    def __init__(self, host: RecordingHost, crawler: Any) -> None:
        self.host = host
        self.crawler = crawler
        #: canonical URLs and ids of raw URLs, ids recorded by this process (linkcache.py)
        self.ids = LinkIds()
        self._redis_errors = 0
        #: pages this process has sent to be recorded (IPR_SLOW_START's allowance)
        self.sent = 0
        #: id(response) -> [response, items still in the pipelines, requests held or None]
        self._waiting: dict[int, list[Any]] = {}
        self._warned_stranded = False  # record_stranded's WARNING: once
        #: the request_scheduled receivers last seen (their ids) and what link_receivers made of them
        self._receivers: tuple[list[tuple[int, int]], list[tuple[Any, dict[str, Any] | None]]] | None = None
        #: a page whose item failed in the pipelines with a passing error is fetched again
        self.item_retry = ItemRetry(crawler, host.config.item_retry_errors, host.config.max_releases)
        signals_ = self.crawler.signals
        signals_.connect(self._item_failed, signal=signals.item_error)
        for signal in (signals.item_scraped, signals.item_dropped):
            signals_.connect(self._item_left, signal=signal)

    # -- at-least-once ------------------------------------------------------------------
    def item_yielded(self, response: Response) -> None:
        """The callback of ``response`` yielded an item (counted until it leaves the pipelines)."""
        entry = self._waiting.setdefault(id(response), [response, 0, None])
        entry[1] += 1

    def _item_failed(self, item: Any = None, response: Response | None = None, failure: Any = None,
                     **kwargs: Any) -> None:
        """``item_error``: the page is fetched again when the error may pass (item_retry.py),
        sent before the page's record, so a crash between them loses no item."""
        if response is not None:
            self.item_retry.item_error(response, failure)
        self._item_left(item, response)

    def _item_left(self, item: Any = None, response: Response | None = None, **kwargs: Any) -> None:
        entry = self._waiting.get(id(response)) if response is not None else None
        if entry is None or entry[0] is not response:
            return
        entry[1] -= 1
        if entry[1] <= 0 and entry[2] is not None:
            del self._waiting[id(response)]
            self.host.guard(self._record_now, response, entry[2], default=[])

    def record_stranded(self) -> int:
        """With Scrapy's engine idle (nothing downloading or being scraped, so every item
        that reached the item pipelines has left them): record the pages whose callbacks
        ended while items they yielded had not left: a spider middleware nearer the engine
        than ipr-crawl's dropped them. Their pages would otherwise stay in flight. Returns
        how many (``ipr/pages/items_dropped_before_pipelines``; one WARNING)."""
        stranded = [(key, entry) for key, entry in self._waiting.items() if entry[2] is not None]
        for key, entry in stranded:
            del self._waiting[key]
            self.host.guard(self._record_now, entry[0], entry[2], default=[])
        if stranded:
            self.crawler.stats.inc_value("ipr/pages/items_dropped_before_pipelines", len(stranded))
            if not self._warned_stranded:
                self._warned_stranded = True
                logger.warning(
                    "ipr-crawl: %d pages yielded items that never reached the item pipelines (a spider "
                    "middleware nearer the engine than ipr-crawl's LinkGraphMiddleware dropped them?); recorded "
                    "once Scrapy's engine was idle (first: %s)", len(stranded), stranded[0][1][0].url)
        return len(stranded)

    def record(self, response: Response, requests: list[Request]) -> list[Request]:
        """Record ``response``'s page once, now or when its items have left the
        pipelines; returns the requests that could not be stored (they go to the
        engine as they are)."""
        entry = self._waiting.get(id(response))
        if entry is not None and entry[0] is response and entry[1] > 0:
            entry[2] = requests  # recorded by _item_left when the last item has left
            return []
        self._waiting.pop(id(response), None)
        return self._record_now(response, requests)

    def scheduled(self, request: Request, receivers: list[tuple[Any, dict[str, Any] | None]] | None) -> bool:
        """Scrapy's ``request_scheduled`` signal, as the engine sends it before it
        schedules a request (``send_catch_log``: errors logged, IgnoreRequest not):
        False when a receiver (the offsite middleware, for one) raised IgnoreRequest.
        ``receivers`` from :meth:`link_receivers` (the per-call introspection of
        ``send_catch_log`` cost a fifth of a crawl's speed); None: through
        ``send_catch_log`` (a Scrapy whose signals are not on PyDispatcher)."""
        if receivers is None:
            results = self.crawler.signals.send_catch_log(
                signals.request_scheduled, request=request, spider=self.host.spider, dont_log=IgnoreRequest)
            return not any(isinstance(getattr(r, "value", None), IgnoreRequest) for _, r in results)
        for receiver, fixed in receivers:
            try:
                if fixed is not None:
                    receiver(request=request, **fixed)
                else:
                    send_to_receiver(receiver, self.crawler, request=request, spider=self.host.spider)
            except IgnoreRequest:
                return False
            except Exception:
                logger.error("Error caught on signal handler: %(receiver)s", {"receiver": receiver}, exc_info=True)
        return True

    def link_receivers(self) -> list[tuple[Any, dict[str, Any] | None]] | None:
        """The live ``request_scheduled`` receivers, each with the keyword arguments
        it takes besides ``request`` (None: let PyDispatcher's ``robustApply`` work them
        out); None where Scrapy's signals do not say (:mod:`ipr_crawl.scheduler.internals`)."""
        sender = self.crawler.signals.sender  # the crawler (Scrapy's SignalManager)
        live = request_scheduled_receivers(self.crawler)
        if live is None:
            return None
        # bound methods are made anew at each look-up: keyed by their object and function
        key = [(id(getattr(r, "__self__", r)), id(getattr(r, "__func__", r))) for r in live]
        if self._receivers is not None and self._receivers[0] == key:
            return self._receivers[1]  # the same receivers as for the last page: their signatures are known
        found: list[tuple[Any, dict[str, Any] | None]] = []
        spider = self.host.spider
        for receiver in live:
            try:
                params = inspect.signature(receiver).parameters
            except (TypeError, ValueError):
                found.append((receiver, None))
                continue
            if any(p.kind is p.VAR_KEYWORD for p in params.values()) or "request" not in params:
                found.append((receiver, None))
                continue
            extra = {"spider": spider, "signal": signals.request_scheduled, "sender": sender}
            found.append((receiver, {k: v for k, v in extra.items() if k in params}))
        self._receivers = (key, found)
        return found

    def _distinct(
        self, response: Response, requests: list[Request],
    ) -> tuple[dict[bytes, Request], list[str], list[Request], list[Request]]:
        """The page's distinct link requests (id -> request) with their canonical URLs, the
        requests that repeat one of them, and those past ``IPR_MAX_LINKS_PER_PAGE``."""
        identity = self.host.identity
        cfg = self.host.config
        lookup = self.ids.lookup
        seen: dict[bytes, Request] = {}
        canon: list[str] = []
        repeats: list[Request] = []
        over: list[Request] = []
        # Work bounded by IPR_MAX_LINKS_PER_PAGE: once that many distinct links
        # are found, the requests after them are dropped (ipr/links/over_cap).
        for k, request in enumerate(requests):
            if len(seen) >= cfg.max_links_per_page:
                over = requests[k:]
                break
            if identity.is_link(request):
                url, rid = identity.link(request, *lookup(request.url))
            else:  # POST, a body, ...: an entry of its own (Scrapy's fingerprint)
                url, rid = canonical_url(request.url), identity.of(request)
            if rid not in seen:
                seen[rid] = request
                canon.append(url)
            else:
                repeats.append(request)
        if identity.merged:
            self.crawler.stats.set_value("ipr/links/merged", identity.merged)
        if over:
            self.crawler.stats.inc_value("ipr/links/over_cap", len(over))
            logger.info(
                "ipr-crawl: %s: %d distinct out-links recorded (IPR_MAX_LINKS_PER_PAGE), "
                "the %d link requests after them dropped", response.url[:300], cfg.max_links_per_page, len(over),
            )
        return seen, canon, repeats, over

    def _record_now(self, response: Response, requests: list[Request]) -> list[Request]:
        meta = response.meta if response.request is not None else {}
        if meta.get(RECORDED_META):
            return requests
        frontier = self.host
        identity = frontier.identity
        cfg = frontier.config
        stats = self.crawler.stats
        # Redis may have restarted and lost writes (an error, or a request found lost)
        errors = stats.get_value("ipr/redis/errors", 0) + stats.get_value("ipr/frontier/payload_lost", 0)
        if errors != self._redis_errors:
            self._redis_errors = errors
            self.ids.forget()
        seen, canon, repeats, over = self._distinct(response, requests)
        unique = list(seen.items())
        links: list[Link] = []
        link_requests: list[Request] = []  # the request of each link
        # A URL this process recorded before is in Redis: no payload (the script
        # stores one only for a new URL) and, but for importance, no tie key. In bucket
        # mode (IPR_CLUSTER_BUCKETS) only a URL of the page's own bucket: one of another
        # bucket reaches it later, through the outbox, and always carries its payload.
        tie_needed = cfg.ordering == "importance"
        srfp = identity.seen_fingerprints  # a crawl carried over from scrapy-redis
        nb = cfg.cluster_buckets
        page_url = response.url
        own = bucket_of(page_url, nb)
        for i in order_links(response.url, canon, cfg.tie_rule):
            rid, request = unique[i]
            b = bucket_of(canon[i], nb) if nb > 1 else 0
            if b == own and self.ids.is_known(rid):
                links.append(Link(rid, tie_for(cfg.ordering, canon[i]) if tie_needed else 0, b"", b))
                link_requests.append(request)
                continue
            try:
                payload, _ = encode_request(request, frontier.spider)
            except (ValueError, Unstorable) as exc:  # kept in memory by the scheduler, with a warning
                frontier.keep_local(request, exc)
                continue
            links.append(Link(rid, tie_for(cfg.ordering, canon[i]), payload, b, srfp.of(request) if srfp else "",
                              request.priority))
            link_requests.append(request)
        request_ = response.request
        lease = lease_of(request_) if request_ is not None else b""
        page_id = node_id(page_url) if request_ is None or identity.is_link(request_) else identity.of(request_)
        ids = [page_id, *(link.id for link in links)]
        local = [page_id, *(link.id for link in links if link.bucket == own)] if nb > 1 else ids
        if request_ is not None and request_.dont_filter:
            # a page only dont_filter requests may have brought: a link to it needs its payload
            # (Scrapy's duplicate rule fetches it again, enqueue.lua `unfiltered`)
            local = local[1:]
        where = {"bucket": own} if nb > 1 else {}
        refused = (repeats, over, link_requests)
        self.sent += 1
        if cfg.slow_start and self.sent <= frontier.concurrency:
            frontier.wake()  # the allowance grew: the engine may take one more now
        if cfg.record_pipelined:
            # not waited for: the crawler goes on parsing while Redis runs the script
            frontier.submit_record(page_id, tie_for(cfg.ordering, page_url), links, lease, where,
                                   lambda res: self._recorded(res, ids, refused, local, lease))
            if any(link.payload for link in links):  # new URLs, probably: see wake()
                frontier.wake()
        else:
            res = frontier.sync_record(page_id, tie_for(cfg.ordering, page_url), links, lease, where)
            self._recorded(res, ids, refused, local, lease)
        if request_ is not None:
            request_.meta[RECORDED_META] = True
        return []

    def _recorded(
        self, res: RecordResult, ids: list[bytes], refused: tuple[list[Request], list[Request], list[Request]],
        local: list[bytes], lease: bytes = b"",
    ) -> None:
        """One page's record_page reply came: its ``ids`` (the page, then its
        links) are in Redis from now on (``local``: those in the page's own bucket, which
        this process may send without payload); stats, wake and ``pr``'s PageRank step.
        ``refused``: link requests that repeated a link of the page, those past
        ``IPR_MAX_LINKS_PER_PAGE``, and the request of each link sent (those not queued
        were duplicates): Scrapy's duplicate-filter line and stat, and ``request_dropped``
        (:meth:`RecordingHost.refused`)."""
        self.ids.remember(local)
        frontier = self.host
        frontier.settled(lease)
        stats = self.crawler.stats
        if stats is None:
            return
        links = len(ids) - 1
        if res.added or res.refetched:
            frontier.wake()
        push = frontier.config.ordering == "push"
        if res.propagated:
            stats.inc_value("ipr/push/updates" if push else "ipr/propagation/updates", res.propagated)
        if res.dropped:
            stats.inc_value("ipr/push/budget_exhausted" if push else "ipr/propagation/dropped", res.dropped)
        if res.first and frontier.config.ordering == "pr":
            frontier.maybe_pagerank_step()
        stats.inc_value("ipr/pages/recorded")
        stats.inc_value("ipr/pages/first_fetch" if res.first else "ipr/pages/refetched")
        stats.inc_value("ipr/links/seen", links)
        stats.inc_value("ipr/links/new", res.added)
        queued = res.added + res.refetched
        if queued:  # what Scrapy's scheduler would have counted for these requests
            stats.inc_value("scheduler/enqueued", queued)
            stats.inc_value("scheduler/enqueued/redis", queued)
        if res.refetched:
            stats.inc_value("ipr/frontier/unfiltered_refetch", res.refetched)
        stats.inc_value("ipr/links/rescored", res.rescored)
        repeats, over, link_requests = refused
        stats.inc_value("ipr/frontier/duplicate", len(repeats) + links - queued)
        if res.queued is not None:
            fresh = set(res.queued)
            repeats = repeats + [r for k, r in enumerate(link_requests) if k not in fresh]
        if repeats:
            frontier.refused(repeats, duplicates=True)
        if over:
            frontier.refused(over, duplicates=False)

