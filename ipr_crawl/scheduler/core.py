"""``IprScheduler``: Scrapy's scheduler backed by the Redis frontier.

``next_request`` leases requests from the frontier in small batches (one
round trip per batch); a response (recorded by the link-graph
spider middleware), a final failure (the frontier downloader middleware) or a
request handed back at close settles the lease. Each lease names its holder, this
process, which beats (:mod:`ipr_crawl.scheduler.heartbeat`); the leases of a holder
silent for 2 × ``IPR_HEARTBEAT_SECS`` return to the frontier at the next pop, and
any lease older than ``IPR_LEASE_SECS``. The crawl is over when the frontier,
the forced queue and the in-flight set are all empty, across every process of
the crawl.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.project import data_path

from ipr_crawl.config import FrontierConfig, RevisitConfig
from ipr_crawl.meta import LEASE_META, lease_of
from ipr_crawl.ordering.urls import bucket_of, node_id, tie_for
from ipr_crawl.scheduler.codec import PayloadError, Unstorable, decode_request, encode_request
from ipr_crawl.scheduler.compat import close_spider
from ipr_crawl.scheduler.heartbeat import Heartbeat, new_holder_id
from ipr_crawl.scheduler.identity import RequestIdentity
from ipr_crawl.scheduler.polite import PolitePop
from ipr_crawl.scheduler.recording import PageRecorder
from ipr_crawl.scheduler.redis_thread import RedisThread
from ipr_crawl.scheduler.refresher import Refresher
from ipr_crawl.scheduler.revisits import RevisitObserver
from ipr_crawl.store import Link, RecordResult, adopt, connect, redact
from ipr_crawl.store.buckets import open_frontier
from ipr_crawl.store.connection import is_cluster
from ipr_crawl.store.retry import RedisRetry
from ipr_crawl.store.revisit import RevisitStore

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["IprScheduler", "frontier_of"]

logger = logging.getLogger(__name__)


_by_crawler: weakref.WeakKeyDictionary[Any, IprScheduler] = weakref.WeakKeyDictionary()
#: Errors of a Redis that stays unreachable after IPR_REDIS_RETRY_SECS of retries.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
#: A pop's answer: revisits refreshed, unplaced/day, unreadable states, leases moved back,
#: (reclaimed, lost holders), [(lease member, payload)], and whether anything is pending.
_Popped = tuple[int, float, int, int, tuple[int, list[str]], list[tuple[bytes, bytes | None]], bool]
#: While Redis is away, how long a call the event loop must wait for (enqueue_request) is
#: waited for before the crawl goes on (the call still runs later) (s).
SYNC_WHILE_AWAY_SECS = 0.5
#: At close, how long to wait for a Redis found unreachable before closing without it (s).
CLOSE_WITHOUT_REDIS_SECS = 1.0
_T = TypeVar("_T")


def _guarded(default: Any) -> Callable[[Callable[..., _T]], Callable[..., _T]]:
    """Scheduler method returning ``default`` instead of raising once Redis is
    unreachable for good (the crawl is then being stopped cleanly)."""

    def wrap(method: Callable[..., _T]) -> Callable[..., _T]:
        @functools.wraps(method)
        def guarded(self: IprScheduler, *args: Any, **kwargs: Any) -> Any:
            if self.redis_down:
                return default
            try:
                return method(self, *args, **kwargs)
            except REDIS_DOWN as exc:
                self.redis_unavailable(exc)
                return default

        return guarded

    return wrap


def frontier_of(crawler: Crawler) -> IprScheduler | None:
    """The open :class:`IprScheduler` of ``crawler``, or None if it runs another scheduler."""
    return _by_crawler.get(crawler)



def scrapy_redis_settings(crawler: Crawler) -> str:
    """Why the crawl uses scrapy-redis's server when ``IPR_REDIS_URL`` is empty:
    the scrapy-redis setting the project sets (``REDIS_URL``, ``REDIS_HOST``,
    ``REDIS_PORT``, ``REDIS_PARAMS``), or its spider being a scrapy-redis
    ``RedisSpider``/``RedisCrawlSpider``, or ``RedisPipeline`` being on; ``""``: none."""
    settings = crawler.settings
    for name in ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_PARAMS"):
        if settings.get(name):
            return name
    spidercls = getattr(crawler, "spidercls", None)
    if isinstance(spidercls, type) and any(
        base.__module__.startswith("scrapy_redis.") for base in spidercls.__mro__
    ):
        return f"spider {spidercls.__name__}"
    pipelines = settings.getdict("ITEM_PIPELINES")
    if any(str(k).startswith("scrapy_redis.") for k in pipelines):
        return "RedisPipeline"
    return ""


def scrapy_redis_client(settings: Any) -> redis.Redis:
    """A client of the server scrapy-redis's own helper
    (``scrapy_redis.connection.get_redis_from_settings``) connects to, with replies
    as bytes (the frontier's values are binary; ``REDIS_DECODE_RESPONSES`` is
    ignored for it)."""
    from scrapy.settings import Settings
    from scrapy_redis.connection import get_redis_from_settings

    copy = Settings(settings.copy_to_dict())
    params = dict(copy.getdict("REDIS_PARAMS"))
    params.pop("decode_responses", None)
    copy.set("REDIS_PARAMS", params, priority="cmdline")
    copy.set("REDIS_DECODE_RESPONSES", False, priority="cmdline")
    return get_redis_from_settings(copy)


def _embedded_data_dir() -> str:
    """``.scrapy/ipr`` of the project; of the working folder when the settings
    module is known but no ``scrapy.cfg`` is (a scrapyd job)."""
    try:
        return data_path("ipr", createdir=True)
    except NotConfigured:
        path = os.path.abspath(os.path.join(".scrapy", "ipr"))
        os.makedirs(path, exist_ok=True)
        return path



class _AsyncioCall:
    """An asyncio ``call_later`` handle with Twisted's ``IDelayedCall.active()``."""

    def __init__(self, loop: Any, handle: Any) -> None:
        self.loop, self.handle = loop, handle

    def active(self) -> bool:
        return not self.handle.cancelled() and self.handle.when() > self.loop.time()

    def cancel(self) -> None:
        self.handle.cancel()

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
        self._buffer: deque[tuple[bytes, Request]] = deque()
        self._last_wait_log = 0.0
        self._pages_since_pr = 0
        #: True once Redis stayed unreachable for IPR_REDIS_RETRY_SECS (crawl closing)
        self.redis_down = False
        #: politeness-aware choice among leased requests (polite.py), when IPR_POLITE_POP
        self.polite = PolitePop(crawler, config.polite_buffer_size, config.lease_secs / 2) if config.polite_pop else None
        #: the frontier id of a request (Scrapy's fingerprint decides)
        self.identity = RequestIdentity(crawler.request_fingerprinter)
        #: requests that cannot be stored without pickle: kept in this process (FIFO)
        self._local: deque[Request] = deque()
        self._local_seen: set[bytes] = set()
        self._local_warned: set[str] = set()
        self._local_logged = False
        #: records parsed pages (the link-graph middleware's calls)
        self.recorder = PageRecorder(self, crawler)
        #: this process's name on its leases (host:pid:random)
        self.holder = new_holder_id()
        self.heartbeat: Heartbeat | None = None
        self._logstats: Any = None
        self._logstats_last: tuple[float, int] | None = None
        #: the thread that makes the Redis calls of the steady state (redis_thread.py)
        self.io: RedisThread | None = None
        self._retry: RedisRetry | None = None
        #: a pop queued and not answered yet
        self._popping = False
        #: leases this process took and has not settled (lease member -> None)
        self._held: dict[bytes, None] = {}
        #: bumped by every queued call that may change what is pending
        self._gen = 0
        #: (generation, time.monotonic(), pending?) of the last check, and whether one is queued
        self._pending_seen: tuple[int, float, bool] | None = None
        #: (generation, time.monotonic()) of the last pop that found nothing
        self._empty_pop: tuple[int, float] | None = None
        self._checking = False
        self._closing = False
        #: IPR_REDIS_THREAD=auto on one server: Redis calls on the event loop while it answers
        self._loop_mode = False
        #: a call failed on the event loop: the calls go to the Redis thread until it caught up
        self._away = False
        #: Python's thread switch interval before IPR_GIL_SWITCH_SECS replaced it
        self._switch_interval: float | None = None
        #: (time.monotonic(), whether another process of the crawl was alive) of the last look
        self._shared_seen: tuple[float, bool] | None = None
        #: a wake of the engine due soon, while requests in flight elsewhere keep the crawl open
        self._recheck: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> IprScheduler:
        """Read and check the settings (a bad one raises :class:`ValueError` naming it);
        Redis is reached in :meth:`open`."""
        settings = crawler.settings
        spider_name = getattr(crawler.spider, "name", "") or getattr(crawler.spidercls, "name", "")
        revisits = RevisitConfig.from_settings(settings) if settings.getbool("IPR_REVISIT_ENABLED") else None
        return cls(crawler, FrontierConfig.from_settings(settings, spider_name), revisits)

    def _connect(self, retry: RedisRetry) -> tuple[redis.Redis, str, str]:
        """The crawl's Redis client, where it is (for the log) and the embedded data
        folder (or ""): ``IPR_REDIS_URL``; else scrapy-redis's server when the project
        uses scrapy-redis (:func:`scrapy_redis_settings`); else the embedded server."""
        cfg = self.config
        if cfg.redis_url:
            client = connect(cfg.redis_url, "", retry=retry, tls=cfg.redis_tls)
            kind = "Redis Cluster" if is_cluster(client) else "Redis"
            return client, f"{kind} at {redact(cfg.redis_url)}", ""
        source = scrapy_redis_settings(self.crawler)
        if source:
            client = scrapy_redis_client(self.crawler.settings)
            kwargs = client.connection_pool.connection_kwargs
            where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
            return adopt(client, where, retry=retry), f"Redis at {where} ({source}, scrapy-redis's connection)", ""
        data_dir = cfg.data_dir or _embedded_data_dir()
        client = connect("", data_dir, cfg.appendfsync, retry=retry)
        return client, f"embedded Redis in {os.path.abspath(data_dir)}", data_dir

    # -- BaseScheduler -------------------------------------------------------------
    def open(self, spider: Spider) -> None:
        """Connect to the crawl's Redis and open (or resume) the crawl.

        Raises :class:`~ipr_crawl.store.FrontierUnavailable` when Redis cannot be
        reached, :class:`~ipr_crawl.store.IncompatibleCrawl` for a crawl written by
        another schema or ordering."""
        self.spider = spider
        cfg = self.config
        retry = RedisRetry(
            cfg.redis_retry_secs, cfg.redis_backoff_secs,
            on_error=lambda exc: self._stats_inc("ipr/redis/errors"),
        )
        self._retry = retry
        client, where, _ = self._connect(retry)
        self.where = where
        self.store = open_frontier(client, cfg.crawl_id, cfg.params, cfg.cluster_buckets, exact=cfg.pop_batch_size == 1)
        if cfg.redis_wait_replicas:
            self.store.wait_for_replicas(cfg.redis_wait_replicas, cfg.redis_wait_ms,
                                         on_short=lambda: self._stats_inc("ipr/redis/wait_short"))
        settings = self.crawler.settings
        if settings.getbool("IPR_RESET") or settings.getbool("SCHEDULER_FLUSH_ON_START"):
            dropped = self.store.drop()
            logger.info(
                "ipr-crawl: crawl %r reset (%s): %d keys deleted", cfg.crawl_id,
                "IPR_RESET" if settings.getbool("IPR_RESET") else "SCHEDULER_FLUSH_ON_START", dropped,
            )
            rerun = None
        else:
            rerun = self._finished_before(client)
        resumed = self.store.open()
        if rerun is not None and rerun["case"] == "afresh":
            self._start_afresh(client, rerun)
        elif rerun is not None:  # kept: it goes on, no longer finished
            from ipr_crawl.store.archive import clear_finished

            clear_finished(client, cfg.crawl_id)
        counts = self.store.counts()
        logger.info(
            "ipr-crawl: crawl %r ordered by %s on %s (%s): %d known URLs, %d fetched, "
            "%d in frontier, %d in flight",
            cfg.crawl_id,
            cfg.params.label,
            where,
            "resumed" if resumed else "new",
            counts["known"],
            counts["fetched"],
            counts["frontier"] + counts["forced"],
            counts["in_flight"],
        )
        self._stats_set("ipr/resumed", int(resumed))
        if cfg.cluster_buckets > 1:
            self._log_buckets(client)
        if cfg.prior_crawl:
            try:
                self._install_prior(client)
            except BaseException:
                self._rerun_failed(client, rerun)
                raise
        if rerun is not None and rerun["case"] == "afresh":
            # last: processes of the crawl that started beside this one wait for it (store/archive.py)
            from ipr_crawl.store.archive import release

            client.hset(self.store.keys["meta"], mapping={"rerun_of": rerun["archive"], "rerun_at": repr(time.time())})
            release(client, cfg.crawl_id, self.holder)
        pending = counts["frontier"] + counts["forced"] + counts["in_flight"]
        if resumed and rerun is None and not pending and counts["fetched"] and self.revisit_config is None:
            logger.warning(
                "ipr-crawl: crawl %r has nothing left to fetch (%d pages fetched, %d failed) but did not "
                "close as finished (it was stopped at its end, or by an older ipr-crawl): "
                "resumed; this run fetches only requests the crawl has not seen (start requests "
                "with dont_filter are fetched again). To crawl it again from the start: "
                "-s IPR_RESET=True, or `ipr-crawl reset --crawl-id %s`%s",
                cfg.crawl_id, counts["fetched"], counts["failed"], cfg.crawl_id,
                "" if settings.get("IPR_CRAWL_ID") else "; for a new crawl beside it: -s IPR_CRAWL_ID=<new id>",
            )
        if self.revisit_config is not None:
            self.revisits = Refresher(
                RevisitStore(client, cfg.crawl_id, self.revisit_config.events_maxlen), self.store, self.revisit_config
            )
            self.revisit_observer = RevisitObserver(self.revisits, self.revisit_config, spider)
        try:
            self.io = RedisThread(f"ipr-redis-{cfg.crawl_id}")
        except RuntimeError:  # no event loop to hand results to (a scheduler driven by hand): calls made inline
            self.io = None
        else:
            self.io.start()
            if cfg.gil_switch_secs > 0:
                # The crawler keeps the interpreter busy; each time the Redis thread's
                # socket call returns it waits for it, by default up to 5 ms (CPython's
                # switch interval): a pop's reply would reach the engine that late.
                self._switch_interval = sys.getswitchinterval()
                sys.setswitchinterval(cfg.gil_switch_secs)
        if not cfg.redis_url and not scrapy_redis_settings(self.crawler):
            from twisted.internet import reactor

            retry.on_revived = lambda: reactor.callFromThread(self._revived, time.time())
        self._start_heartbeat(spider)
        _by_crawler[self.crawler] = self

    def _finished_before(self, client: Any) -> dict[str, Any] | None:
        """Before the crawl opens: if it was marked finished (``_close_store``), what this
        run does with it. With revisits on, or ``SCHEDULER_PERSIST=True``, it is kept and
        resumed (no longer marked); else its keys are archived as ``<id>~<n>``
        (:mod:`ipr_crawl.store.archive`) and ``{"case": "afresh", "archive", "finished"}``
        is returned for :meth:`_start_afresh`; ``{"case": "kept"}`` (the mark is removed
        once the crawl opened). None for a crawl not marked finished, or when another
        process of the crawl started it afresh (this one waited for it)."""
        from ipr_crawl.store import archive

        cfg = self.config
        holder = archive.rerun_holder(client, cfg.crawl_id)
        info = archive.finished_info(client, cfg.crawl_id) if holder is None else None
        if holder is None and info is None:
            return None
        if info is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["at"] or 0))
            settings = self.crawler.settings
            kept = ("revisits" if self.revisit_config is not None
                    else "persist" if settings.getbool("SCHEDULER_PERSIST") else "")
            if kept:
                self._stats_set("ipr/rerun", "kept")
                logger.info(
                    "ipr-crawl: crawl %r finished before (%s, %d pages fetched): %s", cfg.crawl_id, when,
                    info["fetched"],
                    "kept, revisits on (IPR_REVISIT_ENABLED): this run revisits what is due" if kept == "revisits"
                    else "kept finished (SCHEDULER_PERSIST): this run fetches only requests the crawl has not "
                    "seen (start requests with dont_filter are fetched again); without SCHEDULER_PERSIST it "
                    "would start afresh",
                )
                return {"case": "kept"}
            if archive.claim(client, cfg.crawl_id, self.holder):
                if archive.finished_info(client, cfg.crawl_id) is None:  # another process did it meanwhile
                    archive.release(client, cfg.crawl_id, self.holder)
                    return None
                target = archive.archive(client, cfg.crawl_id, cluster=is_cluster(client))
                return {"case": "afresh", "archive": target, "finished": when, "fetched": info["fetched"]}
        logger.info("ipr-crawl: crawl %r finished before; another process starts it afresh: waiting for it",
                    cfg.crawl_id)
        archive.wait_for_rerun(client, cfg.crawl_id, timeout=archive.STALE_CLAIM_SECS + 10)
        return None

    def _start_afresh(self, client: Any, rerun: dict[str, Any]) -> None:
        """The crawl, marked finished, was archived as ``rerun["archive"]`` and opened
        afresh: the archive becomes its prior (as ``IPR_PRIOR_CRAWL`` would; an explicit
        ``IPR_PRIOR_CRAWL`` wins), archives beyond ``IPR_KEEP_CRAWLS`` are deleted, and
        one line says so."""
        from ipr_crawl.store import archive
        from ipr_crawl.store.prior import install_prior

        cfg = self.config
        target = rerun["archive"]
        self._stats_set("ipr/rerun", "afresh")
        if cfg.keep_crawls > 0:
            self._stats_set("ipr/rerun_of", target)
        t0 = time.monotonic()
        if cfg.prior_crawl:
            prior = f"IPR_PRIOR_CRAWL={cfg.prior_crawl!r} is the prior (set by the user)"
        elif cfg.keep_crawls == 0:
            prior = "no prior"
        elif cfg.cluster_buckets > 1:
            prior = "no prior (IPR_CLUSTER_BUCKETS > 1 takes none)"
        elif cfg.ordering in ("bf", "larger-sites-first"):
            prior = f"no prior (IPR_ORDERING={cfg.ordering!r} takes none)"
        else:
            try:
                info = install_prior(client, cfg.crawl_id, target, cfg.params.prior_weight,
                                     log=lambda msg: logger.info("ipr-crawl: prior: %s", msg))
            except BaseException:
                self._rerun_failed(client, rerun)
                raise
            self._stats_set("ipr/prior/urls", info["urls"])
            prior = (f"its graph ({info['urls']} URLs) is the prior (weight {info['weight']:g}, "
                     f"{time.monotonic() - t0:.1f} s)")
        dropped = archive.prune(client, cfg.crawl_id, cfg.keep_crawls, spare=cfg.prior_crawl)
        kept = (f"the finished crawl is kept as {target!r}" if cfg.keep_crawls > 0
                else "the finished crawl is deleted (IPR_KEEP_CRAWLS=0)")
        older = [cid for cid, _ in dropped if cid != target]
        logger.info(
            "ipr-crawl: crawl %r finished before (%s, %d pages fetched): started afresh, %s; %s%s. To keep a "
            "finished crawl instead: -s SCHEDULER_PERSIST=True",
            cfg.crawl_id, rerun["finished"], rerun["fetched"], prior, kept,
            f"; older crawls deleted (IPR_KEEP_CRAWLS={cfg.keep_crawls}): {', '.join(older)}" if older else "",
        )

    def _rerun_failed(self, client: Any, rerun: dict[str, Any] | None) -> None:
        """The start failed while this process started a finished crawl afresh: let go of
        its ``rerun`` key, so that the next start does not wait for it to expire."""
        if rerun is not None and rerun["case"] == "afresh":
            from ipr_crawl.store.archive import release

            try:
                release(client, self.config.crawl_id, self.holder)
            except redis.RedisError:
                pass  # it expires (store/archive.py STALE_CLAIM_SECS)

    def _log_buckets(self, client: Any) -> None:
        """Bucket mode: say how many masters the buckets' slots lie on (a warning when a
        cluster has masters that hold none)."""
        n = self.config.cluster_buckets
        if not is_cluster(client):
            logger.info("ipr-crawl: crawl %r split into %d buckets on one server", self.config.crawl_id, n)
            return
        used = {client.get_node_from_key(store.keys["meta"]).name for store in self.store.stores}
        masters = len(client.get_primaries())
        log = logger.info if len(used) >= masters else logger.warning
        log("ipr-crawl: crawl %r split into %d buckets on %d of the cluster's %d masters%s", self.config.crawl_id,
            n, len(used), masters, "" if len(used) >= masters else
            " (the buckets' hash tags fell on fewer slots' masters; more buckets spread the crawl wider)")

    def _install_prior(self, client: Any) -> None:
        """``IPR_PRIOR_CRAWL``: the earlier crawl's PageRank becomes this crawl's prior
        (:func:`ipr_crawl.store.prior.install_prior`). Raises :class:`~ipr_crawl.store.prior.PriorError`."""
        from ipr_crawl.store.prior import install_prior

        cfg = self.config
        t0 = time.monotonic()
        info = install_prior(client, cfg.crawl_id, cfg.prior_crawl, cfg.params.prior_weight,
                             log=lambda msg: logger.info("ipr-crawl: prior: %s", msg))
        self._stats_set("ipr/prior/urls", info["urls"])
        logger.info(
            "ipr-crawl: prior from crawl %r: %d URLs, weight %g (%s in %.1f s)",
            cfg.prior_crawl, info["urls"], info["weight"],
            ("PageRank computed and installed" if info["computed"] else "installed") if info["installed"]
            else "kept from this crawl's start", time.monotonic() - t0,
        )

    def _start_heartbeat(self, spider: Spider) -> None:
        from twisted.internet import reactor, task

        # From here on (the crawl's steady state) the event loop makes one attempt per Redis
        # call and never sits in a retry: IPR_REDIS_THREAD=auto on one server.
        self._loop_mode = (
            self.io is not None and self.config.redis_thread == "auto" and self.config.cluster_buckets == 1
            and not is_cluster(self.store.client)
        )
        if self._loop_mode and self._retry is not None:
            self._retry.loop_thread = threading.get_ident()

        def lost_holder() -> None:
            reactor.callFromThread(self.wake)

        cfg = self.config
        self.heartbeat = Heartbeat(
            self.store, self.holder, cfg.heartbeat_secs,
            {"host": self.holder.rsplit(":", 2)[0], "pid": os.getpid(), "spider": spider.name, "started": time.time()},
            on_lost_holder=lost_holder, timeline_secs=cfg.timeline_secs,
        )
        self.heartbeat.start()
        if cfg.timeline_secs > 0:
            self.store.sample(cfg.timeline_secs)  # the timeline starts with the crawl
        if cfg.logstats_interval > 0:
            self._logstats = task.LoopingCall(lambda: self._submit(self.log_frontier, adds=False))
            self._logstats.start(cfg.logstats_interval, now=False)

    # -- Redis calls: on the event loop while Redis answers, else on the Redis thread ---------
    @property
    def on_loop(self) -> bool:
        """Whether Redis calls are made on the event loop now: ``IPR_REDIS_THREAD=auto``
        (one server, no buckets) and Redis answering. Else they are queued on the Redis
        thread (:mod:`ipr_crawl.scheduler.redis_thread`), which retries while Redis is away."""
        return self._loop_mode and not self._away

    def _hand_over(self, exc: BaseException) -> Any:
        """A call on the event loop failed (Redis away): from now on every call goes to the
        Redis thread, which retries (``IPR_REDIS_RETRY_SECS``), until it has caught up."""
        if not self._away:
            self._away = True
            self._stats_inc("ipr/redis/handovers")
            logger.warning("ipr-crawl: Redis call failed on the event loop (%s); the calls go to the Redis thread, "
                           "which retries for up to %.0f s (IPR_REDIS_RETRY_SECS) while the crawl goes on",
                           exc, self.config.redis_retry_secs)
        assert self.io is not None
        taken = self.store.take_outstanding() if hasattr(self.store, "take_outstanding") else None
        if taken is None:
            return None
        # the last page's record call, sent and not answered: again, there; its `then` returned
        argv, then = taken
        self.io.submit(self.store.record_argv, argv, then=self._then_caught_up(then), failed=self._failed)
        return then

    def _caught_up(self, _: Any = None) -> None:
        """The Redis thread answered and has nothing queued: calls go back to the event loop."""
        if self._away and self.io is not None and self.io.in_flight == 0 and not self.redis_down and (
            self._retry is None or self._retry.failing_for() == 0
        ):
            self._away = False
            logger.info("ipr-crawl: Redis answers again; its calls are back on the event loop")

    def _submit(
        self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], Any] | None = None, adds: bool = True
    ) -> None:
        """``fn(*args)`` (a store call), then ``then(result)`` on the event loop: at once while
        :attr:`on_loop`, else queued on the Redis thread. A Redis that stays unreachable
        stops the crawl (:meth:`redis_unavailable`); another error is logged. ``adds``: the
        call may add requests (what :meth:`has_pending_requests` saw before is stale)."""
        if self.redis_down:
            return
        if adds:
            self._gen += 1
        if self.io is None:  # no event loop to hand results to: at once
            result = self.guard(fn, *args)
            if then is not None and not self.redis_down:
                then(result)
            return
        if self.on_loop:
            ok, result = self._loop_call(fn, *args)
            if ok:
                if then is not None:
                    then(result)
                return
        self.io.submit(fn, *args, then=self._then_caught_up(then), failed=self._failed)

    def _loop_call(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """``fn(*args)`` on the event loop, its wait counted in ``ipr/redis/loop_wait_*``:
        ``(True, result)``, or, when Redis failed, ``(False, the then of the record call
        handed over with it)`` and every call goes to the Redis thread (:meth:`_hand_over`)."""
        assert self.io is not None
        started = time.perf_counter()
        try:
            result = fn(*args)
        except REDIS_DOWN as exc:
            return False, self._hand_over(exc)
        self.io.blocked.add(time.perf_counter() - started)
        return True, result

    def _then_caught_up(self, then: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
        def done(result: Any) -> None:
            if then is not None:
                then(result)
            self._caught_up()

        return done

    def _sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` waited for: for start-up, close and rare calls. While Redis is away,
        on the Redis thread after every call queued before it (counted in
        ``ipr/redis/loop_wait_*``); raises :class:`TimeoutError` after
        :data:`SYNC_WHILE_AWAY_SECS` (the call still runs later)."""
        self._gen += 1
        if self.io is None:
            return fn(*args)
        if self.on_loop:
            ok, result = self._loop_call(fn, *args)
            if ok:
                return result
        return self.io.call(fn, *args, timeout=SYNC_WHILE_AWAY_SECS if self._away else None)

    def submit_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
        then: Callable[[RecordResult], None],
    ) -> None:
        """A page's record call (:class:`~ipr_crawl.scheduler.recording.PageRecorder`). On
        the event loop it is sent without waiting and its reply read when the next page is
        recorded or before the next pop (:meth:`FrontierStore.send_record_page`): the
        crawler parses the next page while Redis runs the script."""
        if self.on_loop and hasattr(self.store, "take_outstanding"):
            self._gen += 1
            # the send, and the last page's reply read
            ok, handed = self._loop_call(functools.partial(self.store.send_record_page, page_id, tie, links,
                                                           lease, then=then, **where))
            if ok or handed is then:  # handed: this page's call was the outstanding one, on the thread now
                return
        record = functools.partial(self.store.record_page, page_id, tie, links, lease, **where)
        self._submit(record, then=then)

    def sync_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
    ) -> RecordResult:
        """A page's record call, waited for (``IPR_RECORD_PIPELINED=False``)."""
        return self._sync(functools.partial(self.store.record_page, page_id, tie, links, lease, **where))

    @property
    def concurrency(self) -> int:
        """``CONCURRENT_REQUESTS`` (at least 1)."""
        return self._concurrency

    def settled(self, lease: bytes) -> None:
        """A lease of this process was settled (its page recorded)."""
        if lease:
            self._held.pop(lease, None)

    def _revived(self, at: float) -> None:
        """The embedded server was restarted from its append-only file, which may miss the
        last second of writes: the leases this process no longer holds go back now (their
        pages are fetched again), not after ``IPR_LEASE_SECS``. ``at``: when it restarted.

        First every call queued on the Redis thread before now has its answer handled (a
        pop retried across the restart leased with the time of its first attempt: its
        requests must be in :attr:`_held` before the look)."""
        if self.io is not None and self.io.alive:
            self.io.submit(lambda: None, then=lambda _: self._release_stale(at), failed=self._failed)
        else:
            self._release_stale(at)

    def _release_stale(self, at: float) -> None:
        keep = set(self._held)

        def done(released: int) -> None:
            self._stats_inc("ipr/lease/released_after_restart", released)
            if released:
                logger.warning("ipr-crawl: %d requests this process had settled before the embedded Redis "
                               "restarted (the settling was lost with its last writes) went back to the frontier",
                               released)

        self._submit(self.store.release_stale, self.holder, keep, at, then=done)

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, REDIS_DOWN):
            self.redis_unavailable(exc)
        else:
            logger.error("ipr-crawl: a Redis call failed: %s", exc, exc_info=(type(exc), exc, exc.__traceback__))

    def log_frontier(self) -> None:
        """The periodic INFO line (``IPR_LOGSTATS_INTERVAL``): frontier size, requests in
        flight and by how many processes, pages recorded per minute by the whole crawl,
        and the best frontier URL with its score."""
        from ipr_crawl.store.inspect import top

        counts = self.store.counts()
        now = time.monotonic()
        rate = ""
        if self._logstats_last is not None:
            t0, fetched0 = self._logstats_last
            rate = f"{(counts['fetched'] - fetched0) * 60 / max(now - t0, 1e-9):.0f} pages/min recorded, "
        self._logstats_last = (now, counts["fetched"])
        best = top(self.store, 1, in_links=False)
        head = f"best {best[0]['score']:.4g} {best[0]['url']}" if best else "frontier empty"
        alive, _ = self.store.holder_counts()
        logger.info(
            "ipr-crawl: %d in frontier (+%d forced), %d in flight (%d processes), %s%d fetched in all; %s",
            counts["frontier"], counts["forced"], counts["in_flight"], alive, rate, counts["fetched"], head,
        )

    def close(self, reason: str) -> Any:
        """Settle what this process holds and close; a Deferred that fires when the
        calls queued on the Redis thread have run, or at most
        :data:`CLOSE_WITHOUT_REDIS_SECS` after Redis was found unreachable (the crawl
        then closes without it: its leases stay for the next run)."""
        if getattr(self, "store", None) is None:  # open() failed
            return None
        self._closing = True
        if self._recheck is not None and self._recheck.active():
            self._recheck.cancel()
        if self._logstats is not None and self._logstats.running:
            self._logstats.stop()
        if self.heartbeat is not None:
            self.heartbeat.stop()
        io = self.io
        if io is None or not io.alive:
            buffered = list(self._buffer)
            self._buffer.clear()
            try:
                self._close_store(reason, buffered)
            except REDIS_DOWN as exc:
                self._closed_without_redis(reason, exc)
            self._closed()
            return None
        from twisted.internet import defer, task

        done: defer.Deferred[None] = defer.Deferred()
        state: dict[str, Any] = {"finished": False, "started": time.monotonic()}

        def finished(_: Any) -> None:
            state["finished"] = True

        def failed(exc: BaseException) -> None:
            state["finished"] = True
            if isinstance(exc, REDIS_DOWN):
                self._closed_without_redis(reason, exc)
            else:
                logger.error("ipr-crawl: closing crawl %r: %s", self.config.crawl_id, exc,
                             exc_info=(type(exc), exc, exc.__traceback__))

        buffered = list(self._buffer)
        self._buffer.clear()
        io.submit(self._close_store, reason, buffered, then=finished, failed=failed)

        def poll() -> None:
            if state["finished"]:
                pass
            elif self.redis_down or (
                # Redis failing for a second already, or since the close began
                self._retry is not None and self._retry.failing_for() > 0
                and max(self._retry.failing_for(), time.monotonic() - state["started"]) >= CLOSE_WITHOUT_REDIS_SECS
            ):
                self._closed_without_redis(reason, self._retry.last_error if self._retry else None)
            else:
                return
            watch.stop()
            self._closed()
            done.callback(None)

        watch = task.LoopingCall(poll)
        watch.start(0.05, now=False)
        return done

    def _closed(self) -> None:
        _by_crawler.pop(self.crawler, None)
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        if self.io is not None:
            self.io.stop()
            self._stats_set("ipr/redis/loop_wait_secs", round(self.io.blocked.total_secs, 6))
            self._stats_set("ipr/redis/loop_waits", self.io.blocked.calls)
            self._stats_set("ipr/redis/loop_wait_p99_ms", round(self.io.blocked.p99_ms(), 3))
            self._stats_set("ipr/redis/thread_cpu_secs", round(self.io.cpu_secs, 3))
        if not self.redis_down:
            self.store.client.close()

    def _closed_without_redis(self, reason: str, exc: BaseException | None) -> None:
        held = len(self._held)
        self._stats_set("ipr/lease/held_at_close", held)
        logger.error(
            "ipr-crawl: crawl %r closed (%s) without Redis (%s): %d requests leased by this process stay "
            "leased; the next run of the crawl hands them back at its first pop (this process's "
            "heartbeat stops), or they go back when their leases expire (IPR_LEASE_SECS)",
            self.config.crawl_id, reason, exc or "unreachable", held,
        )

    def redis_unavailable(self, exc: Exception) -> None:
        """Redis stayed unreachable through every retry: stop the crawl cleanly.

        Nothing enqueued is lost: requests leased by this process stay in the
        crawl's in-flight set and go back to the frontier when their leases
        expire; a page whose record failed is fetched again.
        """
        if self.redis_down:
            return
        self.redis_down = True
        self._stats_inc("ipr/redis/unavailable")
        where = redact(self.config.redis_url) if self.config.redis_url else "the embedded Redis"
        logger.error(
            "ipr-crawl: Redis at %s unreachable after %.0f s of retries (IPR_REDIS_RETRY_SECS): "
            "%s; stopping the crawl (reason ipr_redis_unavailable). Nothing is lost: start it "
            "again when Redis is back",
            where, self.config.redis_retry_secs, exc,
        )
        # The crawl failed: `scrapy crawl` exits with status 1, as for a crawl whose
        # spider could not start (Scrapy's CrawlerProcess.bootstrap_failed reads it).
        self.crawler.signals.connect(self._mark_failed, signal=signals.engine_stopped)
        if not self._closing:
            close_spider(self.crawler, "ipr_redis_unavailable")

    def _mark_failed(self) -> None:
        """``engine_stopped`` of a crawl stopped for ``ipr_redis_unavailable``: Scrapy's
        crawl command exits with status 1 when the crawler has no spider at the end."""
        self.crawler.spider = None

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
        """A leased request failed for good: mark its URL failed and settle the lease
        (once: a second call for the same lease does nothing). Counted in
        ``ipr/frontier/failed`` or, for an :class:`~scrapy.exceptions.IgnoreRequest`,
        ``ipr/frontier/ignored``. Returns whether this call settled it."""
        lease = lease_of(request)
        if not lease or self.redis_down:
            return False
        kind = "ignored" if isinstance(exception, IgnoreRequest) else "failed"

        def settled(count: int) -> None:
            self._held.pop(lease, None)
            if count:
                self._stats_inc(f"ipr/frontier/{kind}")

        self._submit(self.store.ack, "fail", [(lease, self._id_of(lease, request))], then=settled)
        return True

    def guard(self, fn: Callable[..., _T], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, or ``default`` when Redis is unreachable for good
        (for the middlewares' store calls)."""
        if self.redis_down:
            return default
        try:
            return fn(*args, **kwargs)
        except REDIS_DOWN as exc:
            self.redis_unavailable(exc)
            return default

    def _close_store(self, reason: str, buffered: list[tuple[bytes, Request]]) -> None:
        """At close, on the Redis thread after every queued call: hand back the
        ``buffered`` requests and the leases this process did not settle, log the counts."""
        self.store.close()  # the last page's record reply (and its stats)
        if buffered:
            released = self.store.ack("release", [(m, self._id_of(m, r)) for m, r in buffered])
            self._stats_inc("ipr/lease/released", released)
        if self._local:
            logger.warning(
                "ipr-crawl: %d requests kept in this process's memory (they cannot be stored "
                "without pickle) were not fetched before the crawl closed (%s); they are lost",
                len(self._local), reason,
            )
            self._stats_set("ipr/frontier/local_lost", len(self._local))
        if self.heartbeat is not None:
            # leases this process took and never settled (requests the engine dropped
            # at close): back to the frontier now, not after IPR_LEASE_SECS
            released, _ = self.store.release("holder", self.holder)
            if released:
                self._stats_inc("ipr/lease/released", released)
                logger.info("ipr-crawl: %d requests leased by this process and not settled went back to "
                            "the frontier", released)
        if self.config.timeline_secs > 0:
            self.store.sample(0)  # the timeline ends with the crawl as it closed
        counts = self.store.counts()
        for name, value in counts.items():
            self._stats_set(f"ipr/frontier/{name}", value)
        logger.info("ipr-crawl: crawl %r closed (%s): %s", self.config.crawl_id, reason, counts)
        if reason == "finished" and not self._local and not counts["frontier"] + counts["forced"] + counts["in_flight"]:
            # nothing pending in the whole crawl: its next run starts afresh (open)
            from ipr_crawl.store.archive import mark_finished

            mark_finished(self.store.client, self.config.crawl_id, reason, counts["fetched"], counts["failed"])
            self._stats_set("ipr/finished", 1)
            logger.info(
                "ipr-crawl: crawl %r finished: run again, it starts afresh with this crawl's graph as its prior "
                "(with SCHEDULER_PERSIST=True it stays finished; with IPR_REVISIT_ENABLED it revisits)",
                self.config.crawl_id,
            )

    def has_pending_requests(self) -> bool:
        """Whether requests remain, for this process or another of the crawl. Never waits
        on Redis: the answer of the last check (an empty pop's, or one queued on the Redis
        thread after every call that could add requests; at most 1 s old), else True and
        a check is queued (its answer wakes the engine). True while Redis is unreachable
        (the crawl is closing: not "finished")."""
        if self.redis_down or self._buffer or self._local:
            return True
        if self.io is None:
            return bool(self.guard(self._pending_now, default=True))
        if self._popping:  # its answer says, and wakes the engine
            return True
        seen = self._pending_seen
        if seen is not None and seen[0] == self._gen and time.monotonic() - seen[1] < 1.0:
            if seen[2]:
                self._recheck_soon()
            return seen[2]
        if self.on_loop:
            ok, pending = self._loop_call(self._pending_now)
            if ok:
                self._pending_seen = (self._gen, time.monotonic(), pending)
                if pending:
                    self._recheck_soon()
                return bool(pending)
        if not self._checking:
            self._checking = True
            gen = self._gen
            self.io.submit(self._pending_now, then=lambda pending: self._pending_checked(gen, pending),
                           failed=self._check_failed)
        return True

    def _recheck_soon(self, delay: float = 0.5) -> None:
        """Ask the engine again in ``delay`` s while this process has nothing to fetch and
        the crawl stays open (requests in flight elsewhere, or being recorded), instead of
        at the engine's 5 s heartbeat: the last process closes soon after the last fetch."""
        if self._recheck is not None and self._recheck.active():
            return
        if "twisted.internet.reactor" in sys.modules:
            from twisted.internet import reactor

            if reactor.running:
                self._recheck = cast(Any, reactor).callLater(delay, self.wake)
                return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs (a test calling the scheduler directly)
            return
        self._recheck = _AsyncioCall(loop, loop.call_later(delay, self.wake))

    def _pending_now(self) -> bool:
        """On the Redis thread: whether the crawl has requests not settled (or revisits to wait for)."""
        self.store.settle_record()
        pending = self.store.pending()
        if pending and time.monotonic() - self._last_wait_log > 30:
            self._log_wait()
        if not pending and self.revisits is not None:
            return bool(self.revisits.keeps_open())
        return pending > 0

    def _pending_checked(self, gen: int, pending: bool) -> None:
        self._checking = False
        self._pending_seen = (gen, time.monotonic(), pending)
        self.wake()

    def _check_failed(self, exc: BaseException) -> None:
        self._checking = False
        self._failed(exc)

    def _log_wait(self) -> None:
        """Say why an idle crawl stays open: what holds the requests in flight."""
        self._last_wait_log = time.monotonic()
        counts = self.store.counts()
        if counts["frontier"] or counts["forced"] or not counts["in_flight"]:
            return
        parts = []
        for h in self.store.holders():
            if not h["in_flight"] or h["holder"] == self.holder:
                continue
            if not h["holder"]:
                oldest = self.store.oldest_lease() or time.time()
                parts.append(
                    f"{h['in_flight']} without a live holder (they go back at the latest in "
                    f"{max(0.0, oldest + self.config.lease_secs - time.time()):.0f} s, IPR_LEASE_SECS)"
                )
            elif h["alive"]:
                parts.append(f"{h['in_flight']} held by process {h['holder']} (alive, last heartbeat "
                             f"{max(0.0, time.time() - (h['last_beat'] or time.time())):.0f} s ago)")
            else:
                parts.append(f"{h['in_flight']} held by process {h['holder']}, whose heartbeat stopped "
                             "(handed back at the next pop)")
        logger.info(
            "ipr-crawl: waiting for %d requests in flight elsewhere: %s", counts["in_flight"],
            "; ".join(parts) or "held by this process",
        )

    @_guarded(False)
    def enqueue_request(self, request: Request) -> bool:
        """Store ``request``; False (Scrapy logs it as dropped) for a duplicate: a
        request whose frontier id (Scrapy's fingerprint, :mod:`ipr_crawl.scheduler.identity`)
        is known, unless ``dont_filter``.

        A request carrying a lease came out of a fetch: a retry settles the old
        lease and goes to the forced queue; a redirect records the redirecting page
        as fetched with one out-link, its target. A request that cannot be stored
        without pickle stays in this process's memory (:meth:`keep_local`).
        """
        try:
            payload, _ = encode_request(request, self.spider)
        except (ValueError, Unstorable) as exc:
            return self.keep_local(request, exc)
        lease = lease_of(request)
        rid = self.identity.of(request)
        redirected = request.meta.get("redirect_urls")
        if lease and redirected:
            source_id = self._id_of(lease, None) or node_id(redirected[-1])
            if source_id == rid and not request.dont_filter:
                # A page redirecting to itself (Scrapy's dupefilter would drop the
                # redirect): settled as failed, so that it does not stay half-queued.
                self._sync(self.store.ack, "fail", [(lease, rid)])
                self._held.pop(lease, None)
                self._stats_inc("ipr/frontier/redirect_loop")
                logger.info("ipr-crawl: %s redirects to itself; marked failed", request.url)
                return False
            if source_id != rid:
                source = redirected[-1]
                order = self.config.ordering
                link = Link(rid, tie_for(order, request.url), payload, bucket_of(request.url, self.config.cluster_buckets))
                added = self._sync(functools.partial(
                    self.store.record_page, source_id, tie_for(order, source), [link], lease, **self._bucket(source),
                )).added
                self._held.pop(lease, None)
                self._stats_inc("ipr/frontier/redirects")
                if link.bucket != self._bucket(source).get("bucket", 0) and not request.dont_filter:
                    # bucket mode, a target on another host's bucket: it went to the outbox
                    # (queued there unless that bucket knows it already)
                    self._count_enqueued(1, "redis")
                    return True
                if added or not request.dont_filter:
                    self._count_enqueued(added, "redis")
                    return bool(added)
                lease = b""
        tie = tie_for(self.config.ordering, request.url)
        force = request.dont_filter
        # A start request (dont_filter, as Scrapy's start_urls make it) in a crawl other live
        # processes share: its URL is fetched once for the crawl, not once per process.
        start_known = force and not lease and request.meta.get("is_start_request") and self._shared_now()
        if start_known:
            force = False
        result = self._sync(functools.partial(
            self.store.enqueue, rid, tie, payload, force, lease, **self._bucket(request.url)
        ))
        if lease:
            self._held.pop(lease, None)
        if start_known and not result:
            self._stats_inc("ipr/frontier/start_known")
            if "start_known" not in self._local_warned:
                self._local_warned.add("start_known")
                logger.info("ipr-crawl: start URLs the crawl already knows are not fetched again by this "
                            "process: other processes share the crawl (first: %s)", request.url)
            return False
        self._stats_inc(("ipr/frontier/duplicate", "ipr/frontier/new", "ipr/frontier/forced")[result])
        if result:
            self._count_enqueued(1, "redis")
        return result != 0

    def _shared_now(self) -> bool:
        """Whether another process of the crawl is alive (its heartbeat ahead); looked
        up at most once a second."""
        if self.heartbeat is None:
            return False
        now = time.monotonic()
        if self._shared_seen is None or now - self._shared_seen[0] > 1.0:
            alive, _ = self._sync(self.store.holder_counts)
            self._shared_seen = (now, alive > 1)
        return self._shared_seen[1]

    def _bucket(self, url: str) -> dict[str, int]:
        """The store's ``bucket`` argument for ``url`` in bucket mode (IPR_CLUSTER_BUCKETS > 1)."""
        n = self.config.cluster_buckets
        return {"bucket": bucket_of(url, n)} if n > 1 else {}

    def keep_local(self, request: Request, reason: Exception) -> bool:
        """Keep a request that cannot be stored in this process's memory (FIFO, served
        before the frontier, never seen by another process; lost if this process
        dies). A duplicate (its id known to the crawl or kept here already) is
        dropped unless ``dont_filter``. Logged with a WARNING once per kind of reason."""
        rid = self.identity.of(request)
        if not request.dont_filter and (rid in self._local_seen or self._sync(self.store.known, rid)):
            self._stats_inc("ipr/frontier/duplicate")
            return False
        self._local_seen.add(rid)
        kind = f"{reason.where} ({reason.kind})" if isinstance(reason, Unstorable) else "callback"
        if kind not in self._local_warned:
            self._local_warned.add(kind)
            what = (
                f"{reason.where} holds a {reason.kind}" if isinstance(reason, Unstorable)
                else f"its callback or errback is not a method of the spider ({reason})"
            )
            logger.warning(
                "ipr-crawl: %s cannot be stored in the frontier: %s, which needs pickle. It stays in "
                "this process's memory (not shared with other processes, lost if this one dies); "
                "so will every request like it", request, what,
            )
        if self.crawler.settings.getbool("SCHEDULER_DEBUG") and not self._local_logged:  # Scrapy's own line
            self._local_logged = True
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - no more unserializable "
                "requests will be logged (stats being collected)", {"request": request, "reason": reason},
            )
        self._local.append(request)
        self._stats_inc("ipr/frontier/local")
        self._stats_inc("scheduler/unserializable")
        self._count_enqueued(1, "memory")
        return True

    def _id_of(self, member: bytes, request: Request | None) -> bytes:
        """The frontier id a lease ``member`` settles: its last 8 bytes for a frontier
        member, the request's identity for a forced-queue token (b'' if unknown)."""
        if len(member) == 16:
            return member[8:]
        return self.identity.of(request) if request is not None else b""

    def _count_enqueued(self, count: int, where: str) -> None:
        if count:
            self._stats_inc("scheduler/enqueued", count)
            self._stats_inc(f"scheduler/enqueued/{where}", count)

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

        self._submit(self.store.pagerank_step, self.config.params.pr_damping, then=done)

    @_guarded(None)
    def next_request(self) -> Request | None:
        """The next request, from this process's buffer of leased requests; never waits
        on Redis. An empty buffer queues a pop on the Redis thread (after this process's
        record calls, so that it sees their links) and returns None; the pop's answer
        wakes the engine, which asks again."""
        if self._local:
            self._stats_inc("scheduler/dequeued")
            self._stats_inc("scheduler/dequeued/memory")
            return self._local.popleft()
        if self._pacing and not self._buffer and self._held_back():
            return None
        if self.polite is not None:
            picked = self.polite.take(self._buffer, self._lease_more, self._release)
            if picked is None:
                return None
            member, request = picked
        else:
            # slow start: lease no more than may leave now (a request leased ahead
            # would be chosen before the pages now in progress are recorded)
            if not self._buffer:
                room = self._lease_room() if self._pacing else self._pop_batch()
                if room > 0:
                    self._refill(room)  # on the event loop: done now; on the Redis thread: later
                if not self._buffer:
                    return None
            member, request = self._buffer.popleft()
            if not self._pacing and len(self._buffer) <= self._pop_batch() // 2:
                self._refill(self._pop_batch())  # ahead of need: the next ones come while this one downloads
        self._stats_inc("ipr/frontier/popped")
        self._stats_inc("scheduler/dequeued")
        self._stats_inc("scheduler/dequeued/redis")
        return request

    def _held_back(self) -> bool:
        """``IPR_SLOW_START``: True while the engine already has as many requests in
        progress as this process has sent pages to be recorded (at least 1). The allowance grows by
        one per recorded page (it doubles each round trip, as TCP's slow start) until it
        reaches ``CONCURRENT_REQUESTS``; the engine asks again after each response.
        ``IPR_WAIT_FOR_PARSE``: also True while ``CONCURRENT_REQUESTS`` requests are
        downloading or being parsed; the engine asks again when a page's parse ends.
        Counted as ``ipr/frontier/slow_start_waits`` while the allowance grows, else
        ``ipr/frontier/parse_waits``."""
        if self._lease_room() > 0:
            return False
        self._stats_inc("ipr/frontier/slow_start_waits" if self._ramping else "ipr/frontier/parse_waits")
        return True

    @property
    def _ramping(self) -> bool:
        """``IPR_SLOW_START`` and this process has sent fewer pages to be recorded
        than ``CONCURRENT_REQUESTS``: the allowance is still growing."""
        return self.config.slow_start and self.recorder.sent < self._concurrency

    @property
    def _pacing(self) -> bool:
        """Whether pops are held to :meth:`_lease_room` (``IPR_SLOW_START`` or
        ``IPR_WAIT_FOR_PARSE``)."""
        return self.config.slow_start or self.config.wait_for_parse

    def _lease_room(self) -> int:
        """How many requests to lease now, at most :meth:`_pop_batch`: the allowance less
        the engine's requests in progress (downloading or being parsed: Scrapy's engine
        counts a request until its response is scraped). The allowance is
        ``CONCURRENT_REQUESTS``, and under ``IPR_SLOW_START`` the pages this process sent
        to be recorded (at least 1) until those reach it. Once they have, without
        ``IPR_WAIT_FOR_PARSE``, the batch size whatever is in progress."""
        ramping = self._ramping
        if not ramping and not self.config.wait_for_parse:
            return self._pop_batch()
        allowance = max(1, self.recorder.sent) if ramping else self._concurrency
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        in_progress = len(getattr(slot, "inprogress", ()) or ())
        return min(self._pop_batch(), max(0, allowance - in_progress))

    def _pop_batch(self) -> int:
        """Requests leased per pop: ``IPR_POP_BATCH_SIZE``, at most half of
        ``CONCURRENT_REQUESTS`` (at least 1). A request leased ahead is chosen before the
        pages in progress are recorded; leasing more at once than the engine runs at once
        would make the order staler than the concurrency itself does."""
        return min(self.config.pop_batch_size, max(1, self._concurrency // 2))

    def wake(self) -> None:
        """Ask the engine for requests now. The link-graph middleware stores a page's
        new requests in Redis instead of passing them to the engine, whose ``crawl()``
        would do this; without it an engine that found the frontier empty while pages
        were being parsed waits for the next download or its 5 s heartbeat."""
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    @_guarded(0)
    def __len__(self) -> int:
        return len(self._local) + len(self._buffer) + self._sync(self.store.pending)

    # -- internals -------------------------------------------------------------------
    def _lease_more(self, busy: list[str]) -> int:
        """Polite pop: lease up to :meth:`_pop_batch` more (under ``IPR_SLOW_START`` or
        ``IPR_WAIT_FOR_PARSE``, :meth:`_lease_room`: none while the engine has as many
        requests in progress as allowed, whatever the buffer holds for busy slots), one
        per download slot not in ``busy`` (pop.lua's scan); how many came. A request
        leased for a free slot and not handed out at once waits in the buffer and is
        chosen before the pages in progress are recorded, as in a plain pop."""
        assert self.polite is not None  # only called by PolitePop.take
        if self._pacing and self._held_back():
            return 0
        room = self._lease_room() if self._pacing else self._pop_batch()
        if room <= 0 or self._popping:
            return 0
        self.polite.cursor = (self.polite.cursor + self.config.polite_scan) % (1 << 40)
        return self._refill(room, self.config.polite_scan, busy, self.polite.cursor, self.config.polite_min_ratio)

    def _release(self, items: list[tuple[bytes, Request]]) -> None:
        """Hand buffered requests back to the frontier (their leases settled)."""
        for member, _ in items:
            self._held.pop(member, None)
        self._submit(self.store.ack, "release", [(m, self._id_of(m, r)) for m, r in items],
                     then=lambda released: self._stats_inc("ipr/lease/released", released))

    def _refill(
        self, count: int = 0, scan: int = 0, busy: list[str] | None = None, offset: int = 0, min_ratio: float = 0.0
    ) -> int:
        """Lease ``count`` (default :meth:`_pop_batch`) requests into the buffer (``scan``,
        ``busy``: :meth:`FrontierStore.pop`): at once on the event loop (returns how many
        came), or queued on the Redis thread unless a pop is queued already (returns 0:
        they come with :meth:`_popped`)."""
        if self._popping or self.redis_down:
            return 0
        empty = self._empty_pop
        if empty is not None and empty[0] == self._gen and time.monotonic() - empty[1] < 1.0:
            return 0  # the last pop found nothing and nothing was recorded since
        gen = self._gen
        args = (count or self._pop_batch(), scan, list(busy or ()), offset, min_ratio)
        if self.on_loop:
            ok, result = self._loop_call(self._pop_now, *args)
            if ok:
                self._popped(result, gen, wake=False)  # the engine is asking: no need to wake it
                return len(result[5])
        if self.io is None:
            self._popped(self._pop_now(*args), gen, wake=False)
            return 0

        def failed(exc: BaseException) -> None:
            self._popping = False
            self._failed(exc)

        self._popping = True
        self.io.submit(self._pop_now, *args, then=self._then_caught_up(lambda result: self._popped(result, gen)),
                       failed=failed)
        return 0

    def _pop_now(self, count: int, scan: int, busy: list[str], offset: int, min_ratio: float) -> _Popped:
        """On the Redis thread: due revisits into the forced queue, then one pop."""
        # This process's last page recorded first: the pop sees its links.
        self.store.settle_record()
        refreshed, unplaced, unreadable = 0, 0.0, 0
        if self.revisits is not None:
            refreshed = self.revisits.refresh()
            unplaced = self.revisits.unplaced_per_day
            unreadable = self.revisits.store.unreadable
        expired, items = self.store.pop(
            count, self.config.lease_secs, self.config.requeue_batch_size,
            scan, busy, offset, min_ratio, holder=self.holder,
        )
        # nothing to lease: is anything left at all (what has_pending_requests answers)?
        pending = self._pending_now() if not items else True
        return refreshed, unplaced, unreadable, expired, self.store.last_lost, items, pending

    def _popped(self, result: _Popped, gen: int, wake: bool = True) -> None:
        """A pop's answer, on the event loop: decode into the buffer, wake the engine."""
        self._popping = False
        refreshed, unplaced, unreadable, expired, (reclaimed, lost), items, pending = result
        if not items:
            now = time.monotonic()
            self._empty_pop = (gen, now)
            self._pending_seen = (gen, now, pending)
        if self.revisits is not None:
            self._stats_inc("ipr/revisit/refreshed", refreshed)
            if unplaced:
                self._stats_set("ipr/revisit/unplaced_per_day", round(unplaced, 3))
            if unreadable:
                self._stats_set("ipr/revisit/unreadable_states", unreadable)
        if lost:
            self._stats_inc("ipr/lease/lost_holders", len(lost))
            self._stats_inc("ipr/lease/reclaimed", reclaimed)
            logger.info(
                "ipr-crawl: %d requests leased by %s went back to the frontier: heartbeat silent for "
                "more than %.0f s (2 × IPR_HEARTBEAT_SECS)", reclaimed, ", ".join(lost), 2 * self.config.heartbeat_secs,
            )
        expired -= reclaimed
        if expired:
            self._stats_inc("ipr/lease/expired", expired)
            logger.info("ipr-crawl: %d leases older than IPR_LEASE_SECS=%g went back to the frontier",
                        expired, self.config.lease_secs)
        undecodable: list[tuple[bytes, bytes]] = []
        for member, payload in items:
            self._held[member] = None
            try:
                if payload is None:
                    raise PayloadError("request payload missing")
                request = decode_request(payload, self.spider)
            except PayloadError as exc:
                logger.error("ipr-crawl: dropping an undecodable request %s: %s", member.hex(), exc)
                self._stats_inc("ipr/codec/undecodable")
                undecodable.append((member, member[8:] if len(member) == 16 else b""))
                self._held.pop(member, None)
                continue
            request.meta[LEASE_META] = member.hex()
            self._buffer.append((member, request))
        if undecodable:
            self._submit(self.store.ack, "fail", undecodable)
        if not self._closing and (wake or (items and not self._buffer)):
            # the engine asks again (after a pop whose requests were all undecodable, or
            # none: is the crawl over?), else it would wait for its 5 s heartbeat
            self.wake()

    def _stats_inc(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)

    def _stats_set(self, key: str, value: Any) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.set_value(key, value)
