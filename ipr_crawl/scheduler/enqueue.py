"""Storing a request: :class:`Enqueuer`, behind ``IprScheduler.enqueue_request``.

A new request goes to the frontier (a duplicate is dropped unless ``dont_filter``); a
request carrying a lease came out of a fetch: a retry settles the old lease and goes to
the forced queue, a redirect records the redirecting page as fetched with one out-link,
its target. A request that cannot be stored without pickle stays in this process's
memory (:meth:`Enqueuer.keep_local`), served before the frontier.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from scrapy import Request, Spider
from scrapy.dupefilters import RFPDupeFilter

from ipr_crawl.config import FrontierConfig
from ipr_crawl.meta import lease_of
from ipr_crawl.ordering.urls import bucket_of, node_id, tie_for
from ipr_crawl.scheduler.codec import Unstorable, encode_request
from ipr_crawl.scheduler.identity import RequestIdentity
from ipr_crawl.scheduler.leasing import Leases
from ipr_crawl.scheduler.redis_calls import RedisCalls
from ipr_crawl.store import Link

__all__ = ["Enqueuer"]

# the scheduler's log lines keep their logger's name
logger = logging.getLogger("ipr_crawl.scheduler.core")


class Enqueuer:
    """The requests one scheduler stores: ``calls`` makes the Redis calls, ``leases``
    settles the leases a redirect or a retry carries; ``settings`` the crawl's (for
    ``SCHEDULER_DEBUG``); ``spider`` is set when the scheduler opens, ``heartbeat_on``
    once its heartbeat beats (a crawl other processes may share)."""

    spider: Spider
    heartbeat_on = False
    #: ``dropped(request)``: a request found a duplicate after ``enqueue`` returned True
    #: (the pipelined connection): sends Scrapy's ``request_dropped``, as the engine does
    dropped: Callable[[Request], Any] | None = None

    def __init__(
        self, config: FrontierConfig, calls: RedisCalls, leases: Leases, identity: RequestIdentity, settings: Any,
        stats_inc: Callable[..., None],
    ) -> None:
        self.config = config
        self.calls = calls
        self.leases = leases
        self.identity = identity
        self.settings = settings
        self.stats_inc = stats_inc
        #: requests that cannot be stored without pickle: kept in this process (FIFO)
        self.local: deque[Request] = deque()
        self.local_seen: set[bytes] = set()
        #: the kinds of request already warned about (once each)
        self.warned: set[str] = set()
        self.logged = False
        #: (time.monotonic(), whether another process of the crawl was alive) of the last look
        self._shared_seen: tuple[float, bool] | None = None
        #: forced enqueues sent (their op ids: FrontierStore.enqueue)
        self._ops = 0
        #: Scrapy's own duplicate filter, for its log line and its ``dupefilter/filtered``
        #: stat only (the frontier decides what is a duplicate); DUPEFILTER_DEBUG honoured
        self.dupefilter = RFPDupeFilter(debug=settings.getbool("DUPEFILTER_DEBUG"))

    def enqueue(self, request: Request) -> bool:
        """Store ``request``; False (Scrapy logs it as dropped) for a duplicate: a
        request whose frontier id (Scrapy's fingerprint, :mod:`ipr_crawl.scheduler.identity`)
        is known, unless ``dont_filter``.

        A request carrying a lease came out of a fetch: a retry settles the old
        lease and goes to the forced queue; a redirect records the redirecting page
        as fetched with one out-link, its target. A request that cannot be stored
        without pickle stays in this process's memory (:meth:`keep_local`).

        Through the pipelined connection (:attr:`RedisCalls.on_pipe`) nothing is waited
        for: it returns True, and a request the reply finds to be a duplicate is
        reported as Scrapy's engine reports a False: ``request_dropped``
        (:attr:`dropped`).
        """
        try:
            payload, _ = encode_request(request, self.spider)
        except (ValueError, Unstorable) as exc:
            return self.keep_local(request, exc)
        lease = lease_of(request)
        rid = self.identity.of(request)
        redirected = request.meta.get("redirect_urls")
        if lease and redirected:
            source_id = self.leases.id_of(lease, None) or node_id(redirected[-1])
            if source_id == rid and not request.dont_filter:
                # A page redirecting to itself (Scrapy's dupefilter would drop the
                # redirect): settled as failed, so that it does not stay half-queued.
                self.calls.submit(self.calls.store.ack, "fail", [(lease, rid)],
                                  call=self.calls.call_of("ack", "fail", [(lease, rid)]))
                self.leases.held.pop(lease, None)
                self.stats_inc("ipr/frontier/redirect_loop")
                logger.info("ipr-crawl: %s redirects to itself; marked failed", request.url)
                return False
            if source_id != rid:
                source = redirected[-1]
                order = self.config.ordering
                link = Link(rid, tie_for(order, request.url), payload, bucket_of(request.url, self.config.cluster_buckets))
                args = (source_id, tie_for(order, source), [link], lease)
                where = self.bucket(source)
                self.leases.held.pop(lease, None)
                self.stats_inc("ipr/frontier/redirects")
                other_bucket = link.bucket != where.get("bucket", 0) and not request.dont_filter

                def redirect_recorded(added: int) -> bool:  # queued by the record: new, or again (Scrapy's rule)
                    if other_bucket:
                        # bucket mode, a target on another host's bucket: it went to the outbox
                        # (queued there unless that bucket knows it already)
                        self.count_enqueued(1, "redis")
                        return True
                    if added and request.dont_filter:  # not in Scrapy's duplicate filter: see _store
                        self.calls.submit(functools.partial(self.calls.store.mark_unfiltered, rid, **where), adds=False)
                    if added or not request.dont_filter:
                        self.count_enqueued(added, "redis")
                        return bool(added)
                    # a dont_filter target the crawl knows: to the forced queue
                    return self._store(request, rid, payload, b"")

                return self._now_or_later(
                    request, functools.partial(self.calls.store.record_page, *args, **where),
                    self.calls.call_of("record", *args, **where), lambda result: redirect_recorded(result.added + result.refetched),
                )
        return self._store(request, rid, payload, lease)

    def _store(self, request: Request, rid: bytes, payload: bytes, lease: bytes) -> bool:
        """enqueue.lua for ``request`` (see :meth:`enqueue`)."""
        tie = tie_for(self.config.ordering, request.url)
        force = request.dont_filter
        # A start request (dont_filter, as Scrapy's start_urls make it) in a crawl other live
        # processes share: its URL is fetched once for the crawl, not once per process.
        start_known = force and not lease and request.meta.get("is_start_request") and self.shared_now()
        if lease:
            self.leases.held.pop(lease, None)

        def stored(result: int) -> bool:
            if start_known and not result:
                self.stats_inc("ipr/frontier/start_known")
                if "start_known" not in self.warned:
                    self.warned.add("start_known")
                    logger.info("ipr-crawl: start URLs the crawl already knows are not fetched again by this "
                                "process: other processes share the crawl (first: %s)", request.url)
                return False
            if result == 2 and not force:  # Scrapy's duplicate rule: only dont_filter requests had brought it
                self.stats_inc("ipr/frontier/unfiltered_refetch")
            else:
                if not result:
                    self.dupefilter.log(request, self.spider)  # Scrapy's line and stat
                self.stats_inc(("ipr/frontier/duplicate", "ipr/frontier/new", "ipr/frontier/forced")[result])
            if result:
                self.count_enqueued(1, "redis")
            return result != 0

        args = (rid, tie, payload, force, lease)
        where: dict[str, Any] = self.bucket(request.url)
        if start_known:
            where["shared_start"] = True
        elif force:  # queued once, even if the call is sent again after its reply was lost
            self._ops += 1
            where["op"] = f"{self.calls.store.holder}:{self._ops}"
        elif self.identity.seen_fingerprints is not None:
            where["seen_fp"] = self.identity.seen_fingerprints.of(request)
        if request.priority:  # Scrapy's order first (a retry's RETRY_PRIORITY_ADJUST included)
            where["priority"] = request.priority
        return self._now_or_later(
            request, functools.partial(self.calls.store.enqueue, *args, **where),
            self.calls.call_of("enqueue", *args, **where), stored,
        )

    def _now_or_later(
        self, request: Request, fn: Callable[[], Any], call: Any, then: Callable[[Any], bool],
    ) -> bool:
        """``then(fn())`` now (calls made in place: another reactor while Redis answers, a
        scheduler driven by hand), or True now and ``then`` once the reply is in: through the
        pipelined connection (``call`` given), or queued on the Redis thread (while Redis is
        away, ``IPR_REDIS_THREAD=always``), so that it never waits. A False then is
        reported as ``request_dropped``."""
        if call is None and (self.calls.io is None or self.calls.on_loop):
            return then(self.calls.sync(fn))

        def answered(result: Any) -> None:
            if not then(result) and self.dropped is not None:
                self.dropped(request)

        self.calls.submit(fn, then=answered, call=call)
        return True

    def shared_now(self) -> bool:
        """Whether another process of the crawl is alive (its heartbeat ahead); looked
        up at most once a second."""
        if not self.heartbeat_on:
            return False
        now = time.monotonic()
        if self._shared_seen is None or now - self._shared_seen[0] > 1.0:
            try:
                alive, _ = self.calls.sync(self.calls.store.holder_counts)
            except TimeoutError:  # Redis away: as last seen (alone, if never)
                return self._shared_seen is not None and self._shared_seen[1]
            self._shared_seen = (now, alive > 1)
        return self._shared_seen[1]

    def bucket(self, url: str) -> dict[str, int]:
        """The store's ``bucket`` argument for ``url`` in bucket mode (IPR_CLUSTER_BUCKETS > 1)."""
        n = self.config.cluster_buckets
        return {"bucket": bucket_of(url, n)} if n > 1 else {}

    def keep_local(self, request: Request, reason: Exception) -> bool:
        """Keep a request that cannot be stored in this process's memory (FIFO, served
        before the frontier, never seen by another process; lost if this process
        dies). A duplicate (its id known to the crawl or kept here already) is
        dropped unless ``dont_filter``. Logged with a WARNING once per kind of reason."""
        rid = self.identity.of(request)
        if not request.dont_filter and (rid in self.local_seen or self.calls.sync(self.calls.store.known, rid)):
            self.stats_inc("ipr/frontier/duplicate")
            self.dupefilter.log(request, self.spider)
            return False
        if not request.dont_filter:  # Scrapy's duplicate filter never sees a dont_filter request
            self.local_seen.add(rid)
        kind = f"{reason.where} ({reason.kind})" if isinstance(reason, Unstorable) else "callback"
        if kind not in self.warned:
            self.warned.add(kind)
            what = (
                f"{reason.where} holds a {reason.kind}" if isinstance(reason, Unstorable)
                else f"its callback or errback is not a method of the spider ({reason})"
            )
            logger.warning(
                "ipr-crawl: %s cannot be stored in the frontier: %s, which needs pickle. It stays in "
                "this process's memory (not shared with other processes, lost if this one dies); "
                "so will every request like it", request, what,
            )
        if self.settings.getbool("SCHEDULER_DEBUG") and not self.logged:  # Scrapy's own line
            self.logged = True
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - no more unserializable "
                "requests will be logged (stats being collected)", {"request": request, "reason": reason},
            )
        self.local.append(request)
        self.stats_inc("ipr/frontier/local")
        self.stats_inc("scheduler/unserializable")
        self.count_enqueued(1, "memory")
        return True

    def refused(self, requests: list[Request], duplicates: bool) -> None:
        """Link requests a page's record did not queue (recording.py): ``duplicates``, each
        logged and counted as Scrapy's duplicate filter does (``Filtered duplicate
        request``, ``dupefilter/filtered``); each gets Scrapy's ``request_dropped``, as its
        engine sends it for a request the scheduler refused."""
        for request in requests:
            if duplicates:
                self.dupefilter.log(request, self.spider)
            if self.dropped is not None:
                self.dropped(request)

    def count_enqueued(self, count: int, where: str) -> None:
        if count:
            self.stats_inc("scheduler/enqueued", count)
            self.stats_inc(f"scheduler/enqueued/{where}", count)
