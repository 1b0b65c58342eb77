"""``IprScheduler``: Scrapy's scheduler backed by the Redis frontier.

``next_request`` leases requests in small batches; a response (recorded by the
link-graph spider middleware), a final failure or a hand-back at close settles the
lease. Leases name their holder, this process, which beats (heartbeat.py). The crawl
is over when the frontier, the forced queue and the in-flight set are empty, across
every process of the crawl.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.http import Response

from ipr_crawl.config import FrontierConfig, RevisitConfig
from ipr_crawl.scheduler.bootstrap import note_refusal, open_crawl, scrapy_redis_settings
from ipr_crawl.scheduler.closing import close_crawl, stop_crawl
from ipr_crawl.scheduler.compat import loop_deliverer, looping_call, off_loop, when_reactor_runs
from ipr_crawl.scheduler.dispensing import next_leased
from ipr_crawl.scheduler.enqueue import Enqueuer
from ipr_crawl.scheduler.heartbeat import Heartbeat, holder_info, new_holder_id
from ipr_crawl.scheduler.identity import RequestIdentity
from ipr_crawl.scheduler.internals import slot_view, warn_missing
from ipr_crawl.scheduler.leasing import Leases
from ipr_crawl.scheduler.oplog import FrontierLine
from ipr_crawl.scheduler.pacing import Pacing
from ipr_crawl.scheduler.polite import PolitePop
from ipr_crawl.scheduler.recording import PageRecorder
from ipr_crawl.scheduler.redis_calls import CLOSE_WITHOUT_REDIS_SECS as CLOSE_WITHOUT_REDIS_SECS
from ipr_crawl.scheduler.redis_calls import RedisCalls
from ipr_crawl.scheduler.redis_thread import RedisThread
from ipr_crawl.scheduler.refresher import Refresher
from ipr_crawl.scheduler.revisits import RevisitObserver
from ipr_crawl.store import Link, RecordResult
from ipr_crawl.store.connection import is_cluster
from ipr_crawl.store.retry import RedisRetry

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["IprScheduler", "frontier_of"]

logger = logging.getLogger(__name__)


_by_crawler: weakref.WeakKeyDictionary[Any, IprScheduler] = weakref.WeakKeyDictionary()
_T = TypeVar("_T")


def _guarded(default: Any) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """Scheduler method returning ``default`` instead of raising once Redis is
    unreachable for good (the crawl is then being stopped cleanly)."""

    def wrap(method: Callable[..., _T]) -> Callable[..., _T]:
        @functools.wraps(method)
        def guarded(self: IprScheduler, *args: Any, **kwargs: Any) -> Any:
            return self.calls.guard(method, self, *args, default=default, **kwargs)

        return guarded

    return wrap


def scheduler_of(crawler: Crawler) -> IprScheduler | None:
    """The open :class:`IprScheduler` of ``crawler``, or None if it runs another scheduler."""
    return _by_crawler.get(crawler)


frontier_of = scheduler_of  # the former name (it returns the scheduler, not the frontier), kept


class IprScheduler(BaseScheduler):
    """Scheduler whose queue is the crawl's frontier in Redis (see module doc).

    Built by :meth:`from_crawler` from checked settings; :meth:`open` connects
    (as Scrapy's own scheduler builds its queues in ``open``), so ``store`` and
    ``spider`` exist from ``open`` on, which Scrapy calls before any other method.
    """

    store: Any  # FrontierStore, or BucketedFrontier (IPR_CLUSTER_BUCKETS > 1)
    spider: Spider
    #: the revisit refresher (refresher.py), when IPR_REVISIT_ENABLED
    revisits: Refresher | None = None
    #: classifies responses for the conditional-GET middleware, when IPR_REVISIT_ENABLED
    revisit_observer: RevisitObserver | None = None

    def __init__(self, crawler: Crawler, config: FrontierConfig, revisit_config: RevisitConfig | None = None) -> None:
        self.crawler = crawler
        self.config = config
        self._concurrency = max(1, crawler.settings.getint("CONCURRENT_REQUESTS", 16))
        #: the revisit settings when IPR_REVISIT_ENABLED, else None
        self.revisit_config = revisit_config
        self._pages_since_pr = 0
        #: where the Redis calls are made: on the event loop or the Redis thread (redis_calls.py)
        self.calls = RedisCalls(config.redis_retry_secs, self.redis_unavailable, self._stats_inc)
        #: politeness-aware choice among leased requests (polite.py), when IPR_POLITE_POP
        self.polite = PolitePop(crawler, config.polite_buffer_size, config.lease_secs / 2) if config.polite_pop else None
        #: the frontier id of a request (Scrapy's fingerprint decides)
        self.identity = RequestIdentity(crawler.request_fingerprinter)
        #: records parsed pages (the link-graph middleware's calls)
        self.recorder = PageRecorder(self, crawler)
        #: how many requests to lease now, and waking the engine (pacing.py)
        self.pacing = Pacing(crawler, config, self._concurrency, lambda: self.recorder.sent, self._stats_inc,
                             lambda: sum(1 for r in self.leases.held.values() if r is not None))
        #: this process's name on its leases (host:pid:random)
        self.holder = new_holder_id()
        self.heartbeat: Heartbeat | None = None
        self._logstats: Any = None
        self._idle_watch: Any = None
        self._frontier_line = FrontierLine()
        #: the leased requests (buffer, held leases, pops, the pending check: leasing.py)
        self.leases = Leases(config, self.calls, self.pacing, self.identity, self.holder, self._stats_inc,
                             self._stats_set)
        #: stores requests; keeps those that cannot be stored in this process (enqueue.py)
        self.enqueuer = Enqueuer(config, self.calls, self.leases, self.identity, crawler.settings, self._stats_inc)
        # a request found a duplicate once Redis answered: Scrapy's signal, as its engine sends it for a False
        self.calls.on_back = lambda: self.leases.revived()  # a failover, a restart
        self.enqueuer.dropped = lambda r: crawler.signals.send_catch_log(signals.request_dropped, request=r,
                                                                         spider=self.spider)
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> IprScheduler:
        """Read and check the settings (a bad one raises :class:`ValueError` naming it);
        Redis is reached in :meth:`open`."""
        settings = crawler.settings
        spider_name = getattr(crawler.spider, "name", "") or getattr(crawler.spidercls, "name", "")
        revisits = RevisitConfig.from_settings(settings) if settings.getbool("IPR_REVISIT_ENABLED") else None
        return cls(crawler, FrontierConfig.from_settings(settings, spider_name), revisits)

    # -- BaseScheduler -------------------------------------------------------------
    def open(self, spider: Spider) -> Any:
        """Connect to the crawl's Redis and open (or resume) the crawl, off the event loop
        (starting the embedded server, archiving a finished crawl, computing a prior take
        seconds): a Deferred that fires once it is done, as Scrapy's ``BaseScheduler.open``
        may return (None when no event loop runs: done in place).

        Fails with :class:`~ipr_crawl.store.FrontierUnavailable` when Redis cannot be
        reached, :class:`~ipr_crawl.store.IncompatibleCrawl` for a crawl written by
        another schema or ordering."""
        self.spider = self.leases.spider = self.enqueuer.spider = spider
        cfg = self.config
        retry = RedisRetry(
            cfg.redis_retry_secs, cfg.redis_backoff_secs,
            on_error=lambda exc: self._stats_inc("ipr/redis/errors"),
        )
        self.calls.retry = retry
        opened = off_loop(functools.partial(open_crawl, self, spider, retry), lambda _: self._started(spider, retry))
        if opened is not None:  # a refusal: Scrapy's follow-on errors for this spider are not news
            opened.addErrback(note_refusal, spider)
        return opened

    def _started(self, spider: Spider, retry: RedisRetry) -> None:
        """:meth:`open`'s end, on the event loop: the Redis I/O, the heartbeat. Under a
        reactor that does not run yet (Scrapy's CrawlerProcess opens the crawl before
        ``reactor.run()`` under epoll) the calls are made in place until it runs."""
        self._start_io(retry)
        if self.io is None:
            self.pacing.on_loop(None)
            when_reactor_runs(functools.partial(self._start_io, retry))
        self._start_heartbeat(spider)
        _by_crawler[self.crawler] = self
        warn_missing(self.crawler)  # Scrapy internals this Scrapy lacks, in one WARNING

    def _start_io(self, retry: RedisRetry) -> None:
        """The Redis thread, then the steady state's calls: pipelined (``IPR_REDIS_THREAD=auto``)
        or in place on one server (:meth:`RedisCalls.enter_loop_mode`)."""
        cfg = self.config
        if self._closing or self.io is not None:
            return
        self.calls.start_thread(f"ipr-redis-{cfg.crawl_id}", cfg.gil_switch_secs)
        if self.io is None:
            return
        self.leases.watch_recovery(retry, embedded=not cfg.redis_url and not scrapy_redis_settings(self.crawler))
        one_server = cfg.cluster_buckets == 1 and not is_cluster(self.store.client)
        self.calls.enter_loop_mode(cfg.redis_thread == "auto", in_place=one_server)
        self.pacing.on_loop(loop_deliverer())  # the heartbeat thread's wake-up, handed to the event loop

    def _start_heartbeat(self, spider: Spider) -> None:
        cfg = self.config
        self.heartbeat = Heartbeat(
            self.store, self.holder, cfg.heartbeat_secs,
            holder_info(self.holder, spider.name),
            on_lost_holder=self.wake, timeline_secs=cfg.timeline_secs, on_lapse=self.pacing.later(self.leases.lapsed),
            slots=lambda: slot_view(self.crawler),
        )
        self.heartbeat.start()
        self.enqueuer.heartbeat_on = True
        if cfg.timeline_secs > 0:
            self.store.sample(cfg.timeline_secs)  # the timeline starts with the crawl
        if cfg.logstats_interval > 0:
            self._logstats = looping_call(lambda: self.calls.submit(self.log_frontier, adds=False))
            self._logstats.start(cfg.logstats_interval, now=False)
        self._idle_watch = looping_call(self._idle_check)
        self._idle_watch.start(1.0, now=False)

    # -- Redis calls: on the event loop while Redis answers, else on the Redis thread ---------
    @property
    def io(self) -> RedisThread | None:  # the Redis thread (redis_thread.py)
        return self.calls.io

    @property
    def redis_down(self) -> bool:
        """True once Redis stayed unreachable for IPR_REDIS_RETRY_SECS (crawl closing)."""
        return self.calls.down

    def submit_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
        then: Callable[[RecordResult], None],
    ) -> None:
        """A page's record call (:class:`~ipr_crawl.scheduler.recording.PageRecorder`),
        not waited for on the event loop (:meth:`RedisCalls.submit_record`)."""
        self.calls.submit_record(page_id, tie, links, lease, where, then, functools.partial(self.leases.record_failed, lease))

    def sync_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
    ) -> RecordResult:
        """A page's record call, waited for (``IPR_RECORD_PIPELINED=False``)."""
        return self.calls.sync(functools.partial(self.store.record_page, page_id, tie, links, lease, **where))

    @property
    def concurrency(self) -> int:  # CONCURRENT_REQUESTS (at least 1)
        return self._concurrency

    def settled(self, lease: bytes) -> None:  # a lease of this process was settled (its page recorded)
        if lease:
            self.leases.held.pop(lease, None)

    def log_frontier(self) -> None:
        """The periodic INFO line (``IPR_LOGSTATS_INTERVAL``, :class:`FrontierLine`)."""
        self._frontier_line.log(self.store)

    def close(self, reason: str) -> Any:
        """Settle what this process holds and close (:func:`~ipr_crawl.scheduler.closing.close_crawl`);
        a Deferred that fires when the calls queued on the Redis thread have run, or at most
        :data:`CLOSE_WITHOUT_REDIS_SECS` after Redis was found unreachable (the crawl
        then closes without it: its leases stay for the next run)."""
        if getattr(self, "store", None) is None:  # open() failed
            return None
        return close_crawl(self, reason, lambda: _by_crawler.pop(self.crawler, None))

    def redis_unavailable(self, exc: BaseException) -> None:
        """Redis stayed unreachable through every retry, is full or lost the crawl: stop
        the crawl cleanly, exit status 1 (:func:`~ipr_crawl.scheduler.closing.stop_crawl`)."""
        stop_crawl(self, exc)

    @property
    def redis(self) -> redis.Redis:
        """The client of the crawl's Redis (for the start-URL readers)."""
        return self.store.client

    # -- the middlewares' calls ---------------------------------------------------------
    def record_page(self, response: Response, requests: list[Request]) -> list[Request]:
        """Record ``response``'s page with the link requests its callback yielded
        (once per response; :class:`~ipr_crawl.scheduler.recording.PageRecorder`).
        Returns the requests that could not be stored and go to the engine as they are.
        While Redis is unreachable for good, returns ``[]``: the page's lease stays,
        so the page is fetched again and yields them again."""
        return self.guard(self.recorder.record, response, requests, default=[])

    def item_yielded(self, response: Response) -> None:
        """The callback of ``response`` yielded an item: the page is recorded only once
        the item has left the item pipelines (at-least-once for items)."""
        self.recorder.item_yielded(response)

    def settle_failure(self, request: Request, exception: BaseException) -> bool:
        """A leased request failed for good (:meth:`Leases.settle_failure`)."""
        return self.leases.settle_failure(request, exception)

    def guard(self, fn: Callable[..., _T], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, or ``default`` when Redis is unreachable for good
        (for the middlewares' store calls)."""
        return self.calls.guard(fn, *args, default=default, **kwargs)

    def has_pending_requests(self) -> bool:
        """Whether requests remain, for this process or another of the crawl; never waits
        on Redis and writes nothing (:meth:`Leases.has_pending`). False once closed."""
        return not self._closing and self.leases.has_pending(len(self.enqueuer.local))

    def _idle_check(self) -> None:
        """Once a second: the pipe's watchdog (:meth:`RedisCalls.watch_pipe`); what the idle
        engine shows: pages whose items a spider middleware dropped are recorded
        (:meth:`PageRecorder.record_stranded`), escaped requests settled (:meth:`Leases.settle_escaped`)."""
        self.calls.watch_pipe()
        idle = not self._closing and self.pacing.engine_idle()
        if not (idle and self.recorder.record_stranded()):
            self.leases.settle_escaped(idle, self.settle_failure)

    def maybe_pagerank_step(self) -> None:
        """``pr`` ordering: one power iteration over the collected graph every
        ``IPR_PR_INTERVAL_PAGES`` first fetches (Yamada et al. 2004, §4.2), computed in Python."""
        self._pages_since_pr += 1
        if self._pages_since_pr < self.config.params.pr_interval_pages:
            return
        self._pages_since_pr = 0
        started = time.monotonic()

        def done(result: tuple[int, int]) -> None:
            nodes, changed = result
            self._stats_inc("ipr/pr/steps")
            logger.info(
                "ipr-crawl: PageRank step over %d nodes in %.2f s, %d frontier entries re-scored",
                nodes, time.monotonic() - started, changed,
            )

        self.calls.submit(self.store.pagerank_step, self.config.params.pr_damping, then=done)

    @_guarded(None)
    def next_request(self) -> Request | None:
        """The next request, from this process's buffer of leased requests; never waits
        on Redis. An empty buffer queues a pop on the Redis thread (after this process's
        record calls, so that it sees their links) and returns None; the pop's answer
        wakes the engine, which asks again (:func:`~ipr_crawl.scheduler.dispensing.next_leased`).
        None once closed."""
        return None if self._closing else next_leased(self)

    def _refill(
        self, count: int = 0, scan: int = 0, busy: list[str] | None = None, offset: int = 0, min_ratio: float = 0.0
    ) -> int:
        """Lease requests into the buffer (:meth:`Leases.refill`); how many came at once."""
        return self.leases.refill(count, scan, busy, offset, min_ratio)

    def wake(self) -> None:
        """Ask the engine for requests now (:meth:`Pacing.wake`)."""
        self.pacing.wake()

    @_guarded(False)
    def enqueue_request(self, request: Request) -> bool:
        """Store ``request``; False (Scrapy logs it as dropped) for a duplicate: a
        request whose frontier id (Scrapy's fingerprint, :mod:`ipr_crawl.scheduler.identity`)
        is known, unless ``dont_filter`` (:meth:`Enqueuer.enqueue`: retries, redirects).
        False once closed (nothing is written then)."""
        return not self._closing and self.enqueuer.enqueue(request)

    def refused(self, requests: list[Request], duplicates: bool) -> None:
        """Link requests a page's record did not queue (:meth:`Enqueuer.refused`)."""
        self.enqueuer.refused(requests, duplicates)

    def keep_local(self, request: Request, reason: Exception) -> bool:
        """Keep a request that cannot be stored in this process's memory (:meth:`Enqueuer.keep_local`)."""
        return self.enqueuer.keep_local(request, reason)

    @_guarded(0)
    def __len__(self) -> int:
        return len(self.enqueuer.local) + len(self.leases.buffer) + self.calls.sync(self.store.pending)

    # -- internals -------------------------------------------------------------------
    def _stats_inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)

    def _stats_set(self, key: str, value: Any) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(key, value)
