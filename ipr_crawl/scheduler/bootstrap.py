"""Opening a crawl: finding its Redis, and what this run does with what the crawl holds.

:func:`scrapy_redis_settings` and :meth:`Bootstrap.connect` find the server
(``IPR_REDIS_URL``, scrapy-redis's, or the embedded one); :meth:`Bootstrap.open_crawl`
resets it, resumes it, or, for a crawl marked finished, keeps it or archives it and
starts afresh with the archive as its prior (:mod:`ipr_crawl.store.archive`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from ipr_crawl.config import FrontierConfig
from ipr_crawl.redis_location import embedded_data_dir as project_data_dir
from ipr_crawl.redis_location import scrapy_redis_settings as project_uses_scrapy_redis
from ipr_crawl.scheduler.heartbeat import gone_here, holder_info
from ipr_crawl.scheduler.migrate import carry_over
from ipr_crawl.scheduler.refresher import Refresher
from ipr_crawl.scheduler.revisits import RevisitObserver
from ipr_crawl.store import adopt, archive, connect, crawl_keys, redact
from ipr_crawl.store.buckets import open_frontier
from ipr_crawl.store.connection import is_cluster
from ipr_crawl.store.memory import RedisFull, check_eviction, is_full
from ipr_crawl.store.retry import RedisRetry
from ipr_crawl.store.revisit import RevisitStore

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["Bootstrap", "embedded_data_dir", "open_crawl", "scrapy_redis_client", "scrapy_redis_settings"]

# the scheduler's log lines keep their logger's name
logger = logging.getLogger("ipr_crawl.scheduler.core")

#: a crawl another process kept finished this recently (s) was opened by a process of
#: this run: not a crawl stopped at its end
JOINED_SECS = 30.0


def scrapy_redis_settings(crawler: Crawler) -> str:
    """Why the crawl uses scrapy-redis's server when ``IPR_REDIS_URL`` is empty (``""``:
    it does not): :func:`ipr_crawl.redis_location.scrapy_redis_settings` of the crawler's
    settings and spider class."""
    return project_uses_scrapy_redis(crawler.settings, getattr(crawler, "spidercls", None))


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


def embedded_data_dir() -> str:
    """``.scrapy/ipr`` of the project, made if missing (:func:`ipr_crawl.redis_location.embedded_data_dir`)."""
    return project_data_dir(createdir=True)


class Bootstrap:
    """What :meth:`IprScheduler.open <ipr_crawl.scheduler.IprScheduler.open>` does before
    the crawl runs: ``crawler`` and ``config`` the crawl's, ``revisits_on``
    ``IPR_REVISIT_ENABLED``, ``holder`` this process's lease holder id,
    ``stats_set(key, value)`` the crawl's stats."""

    def __init__(
        self, crawler: Crawler, config: FrontierConfig, revisits_on: bool, holder: str,
        stats_set: Callable[[str, Any], None],
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.revisits_on = revisits_on
        self.holder = holder
        self.stats_set = stats_set

    def connect(self, retry: RedisRetry) -> tuple[redis.Redis, str, str]:
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
        data_dir = cfg.data_dir or embedded_data_dir()
        client = connect("", data_dir, cfg.appendfsync, retry=retry)
        return client, f"embedded Redis in {os.path.abspath(data_dir)}", data_dir

    def open_crawl(self, client: Any, store: Any, where: str) -> None:
        """Open (or resume) the crawl in ``store`` on ``client`` (``where``: for the log):
        ``IPR_RESET``/``SCHEDULER_FLUSH_ON_START``, a finished crawl kept or started
        afresh, the opening line, the buckets' spread and the prior."""
        cfg = self.config
        settings = self.crawler.settings
        reset = "IPR_RESET" if settings.getbool("IPR_RESET") else (
            "SCHEDULER_FLUSH_ON_START" if settings.getbool("SCHEDULER_FLUSH_ON_START") else "")
        claimed = bool(reset) and self.claim_reset(client, reset)
        # checked with the claim held: a process that reset and opened it first is registered
        running = [h["holder"] for h in store.holders() if h.get("alive") and h["holder"] != self.holder] if claimed else []
        if running:  # other processes crawl it now: a reset would drop their work
            logger.warning("ipr-crawl: %s ignored: crawl %r is being crawled by %d other process(es) now (%s); "
                           "this process joins it. Stop them first to start it afresh", reset, cfg.crawl_id,
                           len(running), ", ".join(running[:3]))
        if claimed and not running:
            dropped = store.drop(keep=(archive.rerun_key(cfg.crawl_id),))
            logger.info(
                "ipr-crawl: crawl %r reset (%s): %d keys deleted", cfg.crawl_id, reset, dropped,
            )
            rerun = None
        else:
            rerun = self.finished_before(client)
        try:
            self._open_store(client, store, where, rerun)
        except BaseException:  # e.g. the crawl closed under its open: let go of the rerun key at once
            self.rerun_failed(client, rerun)
            raise
        finally:
            if claimed:
                archive.release(client, cfg.crawl_id, self.holder)

    def claim_reset(self, client: Any, reset: str) -> bool:
        """``reset`` (``IPR_RESET``) in several processes started together deletes the
        crawl once: the first to take its claim key (:func:`archive.claim`, SET NX) resets
        it and holds the key until the crawl is open again; the others wait for that, then
        join it (False). Raises :class:`~ipr_crawl.store.archive.ArchiveBusy` when the
        claim is not let go within its expiry."""
        crawl_id = self.config.crawl_id
        if archive.claim(client, crawl_id, self.holder):
            return True
        logger.info("ipr-crawl: %s: another process (%s) resets crawl %r now: this process waits for it and "
                    "joins the new crawl", reset, archive.rerun_holder(client, crawl_id), crawl_id)
        archive.wait_for_rerun(client, crawl_id, timeout=archive.STALE_CLAIM_SECS + 10)
        return False

    def _open_store(self, client: Any, store: Any, where: str, rerun: dict[str, Any] | None) -> None:
        """:meth:`open_crawl` once the crawl's rerun case is known (``rerun``, of
        :meth:`finished_before`): open the store, start it afresh or keep it, the
        opening line, the buckets' spread, the prior, then the rerun key's release."""
        cfg = self.config
        settings = self.crawler.settings
        if not client.exists(store.keys["meta"]):
            # registered before the crawl exists: a process that opens it next sees this one crawling
            store.beat(self.holder, 2 * cfg.heartbeat_secs, holder_info(self.holder, getattr(self.crawler.spider, "name", "")))
        resumed = store.open()
        if rerun is not None and rerun["case"] == "afresh":
            self.start_afresh(client, rerun)
            store.refresh_prior()  # the archive may be its prior: its calls name the buckets in KEYS
        elif rerun is not None:  # kept: it goes on, no longer finished
            from ipr_crawl.store.archive import clear_finished

            clear_finished(client, cfg.crawl_id)
        counts = store.counts()
        # live processes only: one of this machine killed a moment ago still has a heartbeat
        others = [h for h in store.holders()
                  if h.get("alive") and h["holder"] != self.holder and not gone_here(h, self.holder)]
        state = self.opening(resumed, len(others))
        logger.info(
            "ipr-crawl: crawl %r ordered by %s on %s (%s): %d known URLs, %d fetched, "
            "%d in frontier, %d in flight",
            cfg.crawl_id,
            cfg.params.label,
            where,
            state,
            counts["known"],
            counts["fetched"],
            counts["frontier"] + counts["forced"],
            counts["in_flight"],
        )
        self.stats_set("ipr/resumed", int(resumed))
        if cfg.cluster_buckets > 1:
            self.log_buckets(client, store)
        if cfg.prior_crawl:
            self.install_prior(client)
            store.refresh_prior()  # its calls name the prior's buckets in KEYS
        if rerun is not None and rerun["case"] == "afresh":
            # last: processes of the crawl that started beside this one wait for it (store/archive.py)
            from ipr_crawl.store.archive import release

            client.hset(store.keys["meta"], mapping={"rerun_of": rerun["archive"], "rerun_at": repr(time.time())})
            release(client, cfg.crawl_id, self.holder)
        pending = counts["frontier"] + counts["forced"] + counts["in_flight"]
        # another process of this run opened it (and kept it, finished): not a crawl stopped at its end
        joined = others or _float(client.hget(store.keys["meta"], "kept_at")) > time.time() - JOINED_SECS
        if resumed and rerun is None and not pending and counts["fetched"] and not self.revisits_on and not joined:
            logger.warning(
                "ipr-crawl: crawl %r has nothing left to fetch (%d pages fetched, %d failed) but did not "
                "close as finished (it was stopped at its end, or by an older ipr-crawl): "
                "resumed; this run fetches only requests the crawl has not seen (start requests "
                "with dont_filter are fetched again). To crawl it again from the start: "
                "-s IPR_RESET=True, or `ipr-crawl reset --crawl-id %s`%s",
                cfg.crawl_id, counts["fetched"], counts["failed"], cfg.crawl_id,
                "" if settings.get("IPR_CRAWL_ID") else "; for a new crawl beside it: -s IPR_CRAWL_ID=<new id>",
            )

    @staticmethod
    def opening(resumed: bool, others: int) -> str:
        """The opening line's state: ``new``; ``joined`` when other live processes crawl it
        (their heartbeats: a process that creates a crawl registers at once); else ``resumed``."""
        if not resumed:
            return "new"
        if others:
            return f"joined: {others} other process{'es' if others > 1 else ''} crawl it"
        return "resumed"

    def finished_before(self, client: Any) -> dict[str, Any] | None:
        """Before the crawl opens: if it was marked finished (at the close of its last run), what this
        run does with it. With revisits on, or ``SCHEDULER_PERSIST=True``, it is kept and
        resumed (no longer marked); else its keys are archived as ``<id>~<n>``
        (:mod:`ipr_crawl.store.archive`) and ``{"case": "afresh", "archive", "finished"}``
        is returned for :meth:`start_afresh`; ``{"case": "kept"}`` (the mark is removed
        once the crawl opened). None for a crawl not marked finished, or when another
        process of the crawl started it afresh (this one waited for it)."""
        cfg = self.config
        holder = archive.rerun_holder(client, cfg.crawl_id)
        info = archive.finished_info(client, cfg.crawl_id) if holder is None else None
        if holder is None and info is None:
            return None
        if info is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["at"] or 0))
            settings = self.crawler.settings
            kept = ("revisits" if self.revisits_on
                    else "persist" if settings.getbool("SCHEDULER_PERSIST") else "")
            if kept:
                self.stats_set("ipr/rerun", "kept")
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
                claimed = {"case": "afresh", "finished": when, "fetched": info["fetched"]}
                try:
                    if archive.finished_info(client, cfg.crawl_id) is None:  # another process did it meanwhile
                        archive.release(client, cfg.crawl_id, self.holder)
                        return None
                    target = archive.archive(client, cfg.crawl_id, cluster=is_cluster(client))
                except BaseException:
                    self.rerun_failed(client, claimed)
                    raise
                return {**claimed, "archive": target}
        logger.info("ipr-crawl: crawl %r finished before; another process starts it afresh: waiting for it",
                    cfg.crawl_id)
        archive.wait_for_rerun(client, cfg.crawl_id, timeout=archive.STALE_CLAIM_SECS + 10)
        return None

    def start_afresh(self, client: Any, rerun: dict[str, Any]) -> None:
        """The crawl, marked finished, was archived as ``rerun["archive"]`` and opened
        afresh: the archive becomes its prior (as ``IPR_PRIOR_CRAWL`` would; an explicit
        ``IPR_PRIOR_CRAWL`` wins), archives beyond ``IPR_KEEP_CRAWLS`` are deleted, and
        one line says so."""
        from ipr_crawl.store.prior import install_prior

        cfg = self.config
        target = rerun["archive"]
        self.stats_set("ipr/rerun", "afresh")
        if cfg.keep_crawls > 0:
            self.stats_set("ipr/rerun_of", target)
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
            info = install_prior(client, cfg.crawl_id, target, cfg.params.prior_weight,
                                 log=lambda msg: logger.info("ipr-crawl: prior: %s", msg))
            self.stats_set("ipr/prior/urls", info["urls"])
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

    def rerun_failed(self, client: Any, rerun: dict[str, Any] | None) -> None:
        """The start failed while this process started a finished crawl afresh: let go of
        its ``rerun`` key, so that the next start does not wait for it to expire. Called
        wherever a start can fail once the key is taken: around :meth:`_open_store`, and
        in :meth:`finished_before` around the archive."""
        if rerun is not None and rerun["case"] == "afresh":
            from ipr_crawl.store.archive import release

            try:
                release(client, self.config.crawl_id, self.holder)
            except redis.RedisError:
                pass  # it expires (store/archive.py STALE_CLAIM_SECS)

    def log_buckets(self, client: Any, store: Any) -> None:
        """Bucket mode: say how many masters the buckets' slots lie on (a warning when a
        cluster has masters that hold none)."""
        n = self.config.cluster_buckets
        if not is_cluster(client):
            logger.info("ipr-crawl: crawl %r split into %d buckets on one server", self.config.crawl_id, n)
            return
        used = {client.get_node_from_key(bucket.keys["meta"]).name for bucket in store.stores}
        masters = len(client.get_primaries())
        log = logger.info if len(used) >= masters else logger.warning
        log("ipr-crawl: crawl %r split into %d buckets on %d of the cluster's %d masters%s", self.config.crawl_id,
            n, len(used), masters, "" if len(used) >= masters else
            " (the buckets' hash tags fell on fewer slots' masters; more buckets spread the crawl wider)")

    def install_prior(self, client: Any) -> None:
        """``IPR_PRIOR_CRAWL``: the earlier crawl's PageRank becomes this crawl's prior
        (:func:`ipr_crawl.store.prior.install_prior`). Raises :class:`~ipr_crawl.store.prior.PriorError`."""
        from ipr_crawl.store.prior import install_prior

        cfg = self.config
        t0 = time.monotonic()
        info = install_prior(client, cfg.crawl_id, cfg.prior_crawl, cfg.params.prior_weight,
                             log=lambda msg: logger.info("ipr-crawl: prior: %s", msg))
        self.stats_set("ipr/prior/urls", info["urls"])
        logger.info(
            "ipr-crawl: prior from crawl %r: %d URLs, weight %g (%s in %.1f s)",
            cfg.prior_crawl, info["urls"], info["weight"],
            ("PageRank computed and installed" if info["computed"] else "installed") if info["installed"]
            else "kept from this crawl's start", time.monotonic() - t0,
        )


def _float(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return 0.0


#: Spiders whose crawl ipr-crawl refused to open (:func:`refusal_of`): the errors Scrapy
#: logs for them afterwards (its CoreStats closing a spider that never opened) are
#: consequences of the refusal, said once already (``ipr_crawl.addon.OneLineErrors``).
REFUSED_SPIDERS: weakref.WeakSet[Any] = weakref.WeakSet()


def refusal_of(exc: BaseException | None) -> BaseException | None:
    """The refusal of ipr-crawl's in ``exc`` or its causes (a bad setting, Redis unreachable,
    a crawl written by an incompatible version or ordering, a prior that cannot be read),
    or None."""
    from ipr_crawl.config import SettingError
    from ipr_crawl.store import FrontierUnavailable, IncompatibleCrawl
    from ipr_crawl.store.prior import PriorError

    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (SettingError, FrontierUnavailable, IncompatibleCrawl, PriorError)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def note_refusal(failure: Any, spider: Any) -> Any:
    """Errback of a crawl's open: a refusal's spider joins :data:`REFUSED_SPIDERS`; the
    failure is passed on."""
    if refusal_of(failure.value):
        REFUSED_SPIDERS.add(spider)
    return failure


def open_crawl(sched: Any, spider: Any, retry: RedisRetry) -> None:
    """``IprScheduler.open``'s blocking part, on a worker thread (or in place when no event
    loop runs): connect, open (or resume) the crawl, its revisit store; sets the
    scheduler's ``where``, ``store``, ``revisits`` and ``revisit_observer``. Raises what
    :meth:`Bootstrap.connect` and :meth:`Bootstrap.open_crawl` raise; a Redis too full to
    take the crawl's first writes is a refusal (:class:`~ipr_crawl.store.memory.RedisFull`)."""
    boot = Bootstrap(sched.crawler, sched.config, sched.revisit_config is not None, sched.holder, sched._stats_set)
    client, where, _ = boot.connect(retry)
    sched.where = where
    try:
        _open_on(sched, spider, boot, client, where)
    except redis.ResponseError as exc:
        if not is_full(exc):
            raise
        raise RedisFull(where, client) from exc


def _open_on(sched: Any, spider: Any, boot: Bootstrap, client: Any, where: str) -> None:
    """:func:`open_crawl` once connected."""
    cfg = sched.config
    eviction = check_eviction(client, where, cfg.redis_allow_eviction)  # refuses a Redis that may evict the crawl
    store = open_frontier(client, cfg.crawl_id, cfg.params, cfg.cluster_buckets, exact=cfg.pop_batch_size == 1)
    store.holder = sched.holder  # every settle names it: a lease another process took since is left alone
    store.lease_max_secs = cfg.lease_max_secs  # a live holder's leases are kept up to this age
    store.holder_ttl_secs = 2 * cfg.heartbeat_secs  # a lapsed holder that pops is registered again
    store.max_releases = cfg.max_releases  # a request lost with its holder more often: dead-lettered
    if cfg.redis_wait_replicas:
        store.wait_for_replicas(cfg.redis_wait_replicas, cfg.redis_wait_ms,
                                on_short=lambda: sched._stats_inc("ipr/redis/wait_short"))
    try:
        boot.open_crawl(client, store, where)
    except BaseException:  # the start failed: this process crawls nothing (its holder goes at once)
        with contextlib.suppress(Exception):
            store.release("holder", sched.holder)
        raise
    if sched.revisit_config is not None:
        revisit_store = RevisitStore(client, cfg.crawl_id, sched.revisit_config.events_maxlen)
        revisit_store.holder = sched.holder
        sched.revisits = sched.leases.revisits = Refresher(revisit_store, store, sched.revisit_config)
        sched.revisit_observer = RevisitObserver(sched.revisits, sched.revisit_config, spider)
    sched.store = sched.calls.store = store
    if eviction and client.hsetnx(crawl_keys(cfg.crawl_id)["meta"], "said_eviction", "1"):  # once per crawl
        logger.warning("ipr-crawl: %s", eviction)
    carry_over(sched, spider, client, store)  # scrapy-redis's queue and duplicate filter of this spider
