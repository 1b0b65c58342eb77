"""The scheduler's close, and its stop when Redis fails for good: what
:meth:`IprScheduler.close <ipr_crawl.scheduler.core.IprScheduler.close>` and
:meth:`~ipr_crawl.scheduler.core.IprScheduler.redis_unavailable` delegate to.

A close settles what this process holds: the requests it leased and did not hand out
go back to the frontier, then the leases it took and never settled, the timeline's
last sample, the crawl's counts and, when nothing is pending anywhere, the mark that
it finished (:func:`~ipr_crawl.scheduler.oplog.close_summary`). With Redis away or
full nothing more is written: its leases stay for the next run.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Request, signals

from ipr_crawl.scheduler.compat import close_spider, off_loop
from ipr_crawl.scheduler.internals import mark_crawl_failed
from ipr_crawl.scheduler.oplog import close_summary, closed_without_redis_line, redis_stopped_line
from ipr_crawl.scheduler.redis_calls import REDIS_DOWN
from ipr_crawl.store import redact
from ipr_crawl.store.connection import close_client
from ipr_crawl.store.keys import is_store_lost
from ipr_crawl.store.memory import is_full

__all__ = ["close_crawl", "stop_crawl"]

logger = logging.getLogger("ipr_crawl.scheduler.core")


def close_crawl(sched: Any, reason: str, forget: Any) -> Any:
    """:meth:`IprScheduler.close`: stop the timers and the heartbeat, then settle on the
    Redis thread after every queued call (a Deferred), in place when it does not run,
    or not at all when Redis is down; ``forget()`` drops the scheduler from its
    crawler's registry once closed."""
    sched._closing = sched.leases.closing = True
    if sched.leases.recheck is not None and sched.leases.recheck.active():
        sched.leases.recheck.cancel()
    for timer in (sched._logstats, sched._idle_watch):
        if timer is not None and timer.running:
            timer.stop()
    if sched.heartbeat is not None:
        # a beat in progress cannot register the holder again after its release (it only
        # renews, FrontierStore.beat's renew_only): no need to wait for it
        sched.heartbeat.stop(timeout=0.2)

    def closed() -> None:
        forget()
        sched.calls.stop_thread(sched._stats_set)
        stop = None if sched.redis_down else close_client(sched.store.client)
        if stop is not None:  # the embedded server, stopped off the event loop if no one else uses it
            off_loop(stop, lambda _: None)

    io = sched.io
    if sched.calls.down:  # Redis away or full: nothing more is written, the leases stay for the next run
        closed_without_redis(sched, reason, sched.calls.retry.last_error if sched.calls.retry else None)
        closed()
        return None
    buffered = list(sched.leases.buffer)
    sched.leases.buffer.clear()
    if io is None or not io.alive:
        try:
            close_store(sched, reason, buffered)
        except REDIS_DOWN as exc:
            closed_without_redis(sched, reason, exc)
        closed()
        return None
    return sched.calls.finish(
        close_store, sched, reason, buffered, what=f"closing crawl {sched.config.crawl_id!r}",
        without_redis=lambda exc: closed_without_redis(sched, reason, exc), closed=closed,
    )


def close_store(sched: Any, reason: str, buffered: list[tuple[bytes, Request]]) -> None:
    """At close, on the Redis thread after every queued call: hand back the
    ``buffered`` requests and the leases this process did not settle, log the counts."""
    store = sched.store
    store.close()  # the last page's record reply (and its stats)
    if buffered:
        released = store.ack("release", [(m, sched.leases.id_of(m, r)) for m, r in buffered])
        sched._stats_inc("ipr/lease/released", released)
    local = sched.enqueuer.local
    if local:
        logger.warning(
            "ipr-crawl: %d requests kept in this process's memory (they cannot be stored "
            "without pickle) were not fetched before the crawl closed (%s); they are lost",
            len(local), reason,
        )
        sched._stats_set("ipr/frontier/local_lost", len(local))
    if sched.heartbeat is not None:
        # leases this process took and never settled (requests the engine dropped
        # at close): back to the frontier now, not after IPR_LEASE_SECS
        released, _ = store.release("holder", sched.holder)
        if released:
            sched._stats_inc("ipr/lease/released", released)
            logger.info("ipr-crawl: %d requests leased by this process and not settled went back to "
                        "the frontier", released)
    if sched.config.timeline_secs > 0:
        store.sample(0)  # the timeline ends with the crawl as it closed
    close_summary(store, sched.config, reason, bool(local), sched._stats_set)


def closed_without_redis(sched: Any, reason: str, exc: BaseException | None) -> None:
    """The close without Redis: the leases this process holds stay (a line says how many)."""
    held = len(sched.leases.held) + sched.leases.pops_out  # a pop written and unanswered may have leased
    sched._stats_set("ipr/lease/held_at_close", held)
    closed_without_redis_line(sched.config.crawl_id, reason, exc, held)


def stop_crawl(sched: Any, exc: BaseException) -> None:
    """:meth:`IprScheduler.redis_unavailable`: Redis stayed unreachable through every
    retry, is full (it refused a write, ``OOM``) or answers without the crawl
    (``IPR_STORE_LOST``): stop the crawl cleanly, exit status 1 (reason
    ``ipr_redis_unavailable``, ``ipr_redis_full``, ``ipr_store_lost``). Requests leased
    by this process stay in the in-flight set of a store that holds them."""
    if sched.calls.down:
        return
    sched.calls.down = True
    lost = is_store_lost(exc)  # Redis answers, without the crawl: restarted empty, flushed
    full = not lost and is_full(exc)  # a write refused for lack of memory (OOM)
    reason = "ipr_store_lost" if lost else "ipr_redis_full" if full else "ipr_redis_unavailable"
    sched._stats_inc({"ipr_store_lost": "ipr/redis/store_lost", "ipr_redis_full": "ipr/redis/full"}.get(
        reason, "ipr/redis/unavailable"))
    cfg = sched.config
    where = getattr(sched, "where", "") or (f"Redis at {redact(cfg.redis_url)}" if cfg.redis_url
                                            else "the embedded Redis")
    waited = sched.calls.retry.failing_for() if sched.calls.retry is not None else 0.0
    redis_stopped_line(where, exc, waited or cfg.redis_retry_secs, cfg.redis_retry_secs,
                       sched.store.client if full else None, sched._closing, lost)
    # the crawl failed: `scrapy crawl` exits 1, finish_reason `reason` even in a close (internals)
    crawler = sched.crawler
    crawler.signals.connect(lambda: mark_crawl_failed(crawler, reason), signals.engine_stopped, weak=False)
    if not sched._closing:
        close_spider(crawler, reason)
