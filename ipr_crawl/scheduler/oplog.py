"""The scheduler's lines for an operator: why an idle crawl stays open, the periodic
frontier line (``IPR_LOGSTATS_INTERVAL``), and the close's summary."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FrontierLine", "close_summary", "closed_without_redis_line", "log_wait", "redis_stopped_line"]

# the scheduler's log lines keep their logger's name
logger = logging.getLogger("ipr_crawl.scheduler.core")


def log_wait(store: Any, holder: str, lease_secs: float) -> None:
    """Say why an idle crawl stays open: what holds the requests in flight."""
    counts = store.counts()
    if counts["frontier"] or counts["forced"] or not counts["in_flight"]:
        return
    parts = []
    for h in store.holders():
        if not h["in_flight"]:
            continue
        if h["holder"] == holder:
            parts.append(f"{h['in_flight']} held by this process (being fetched, parsed or recorded)")
            continue
        if not h["holder"]:
            now = store.redis_time()  # leases and heartbeats are on Redis's clock (_clock.lua)
            oldest = store.oldest_lease() or now
            parts.append(
                f"{h['in_flight']} without a live holder (they go back at the latest in "
                f"{max(0.0, oldest + lease_secs - now):.0f} s, IPR_LEASE_SECS)"
            )
        elif h["alive"]:
            now = store.redis_time()
            parts.append(f"{h['in_flight']} held by process {h['holder']} (alive, last heartbeat "
                         f"{max(0.0, now - (h['last_beat'] or now)):.0f} s ago)")
        else:
            parts.append(f"{h['in_flight']} held by process {h['holder']}, whose heartbeat stopped "
                         "(handed back at the next pop)")
    logger.info("ipr-crawl: waiting for %d requests in flight: %s", counts["in_flight"], "; ".join(parts))


class FrontierLine:
    """The periodic INFO line; it keeps the last count of fetched pages for the rate."""

    def __init__(self) -> None:
        #: (time.monotonic(), pages fetched by the crawl) at the last line
        self.last: tuple[float, int] | None = None

    def log(self, store: Any) -> None:
        """The periodic INFO line (``IPR_LOGSTATS_INTERVAL``): frontier size, requests in
        flight and by how many processes, pages recorded per minute by the whole crawl,
        and the best frontier URL with its score."""
        from ipr_crawl.store.inspect import top

        counts = store.counts()
        now = time.monotonic()
        rate = ""
        if self.last is not None:
            t0, fetched0 = self.last
            rate = f"{(counts['fetched'] - fetched0) * 60 / max(now - t0, 1e-9):.0f} pages/min recorded, "
        self.last = (now, counts["fetched"])
        best = top(store, 1, in_links=False)
        head = f"best {best[0]['score']:.4g} {best[0]['url']}" if best else "frontier empty"
        alive, _ = store.holder_counts()
        logger.info(
            "ipr-crawl: %d in frontier (+%d forced), %d in flight (%d processes), %s%d fetched in all; %s",
            counts["frontier"], counts["forced"], counts["in_flight"], alive, rate, counts["fetched"], head,
        )


#: Close reasons that leave a crawl to resume at its next run: a signal (Ctrl-C, scrapyd's
#: cancel), Redis away or full, the memory limit (MEMUSAGE_LIMIT_MB, a crash by another name).
#: A kill or a crash never reaches the close. Every other reason is a deliberate close
#: (``CLOSESPIDER_*``, a spider's ``CloseSpider``): an end, like ``finished``.
INTERRUPTED_REASONS = frozenset({
    "shutdown", "ipr_redis_unavailable", "ipr_redis_full", "ipr_store_lost", "memusage_exceeded",
})


#: What a finished crawl's next run does, by the closing run's settings (config.next_run).
NEXT_RUN = {
    "afresh": "run again, it starts afresh with this crawl's graph as its prior (with SCHEDULER_PERSIST=True "
              "it is kept{left}; with IPR_REVISIT_ENABLED it revisits)",
    "persist": "run again with SCHEDULER_PERSIST=True, as this run, it is kept{left}, and fetches only requests "
               "it has not seen; without it, it starts afresh with this crawl's graph as its prior",
    "revisits": "run again with IPR_REVISIT_ENABLED, as this run, it revisits its pages when they are due; "
                "without it, it starts afresh with this crawl's graph as its prior",
}


def close_summary(store: Any, config: Any, reason: str, local_left: bool, stats_set: Callable[[str, Any], None]) -> None:
    """At close: the crawl's sizes as ``ipr/crawl/*`` stats (apart from the live
    ``ipr/frontier/*`` counters of this process, some of the same names) and one line. The
    crawl is marked finished (a next run with ``config.next_run`` "afresh" starts afresh,
    with this crawl's graph as its prior; "persist" and "revisits" go on with it) when it
    closed ``finished`` with nothing pending anywhere (and nothing left in this process's
    memory, ``local_left``), or when this process, the last of the crawl alive, closed it
    deliberately (a reason not in :data:`INTERRUPTED_REASONS`: ``CLOSESPIDER_*``,
    ``CloseSpider``). ``config``: the :class:`~ipr_crawl.config.FrontierConfig`. Call it
    after this process's holder was released."""
    crawl_id = config.crawl_id
    counts = store.counts()
    for name, value in counts.items():
        stats_set(f"ipr/crawl/{name}", value)
    logger.info("ipr-crawl: crawl %r closed (%s): %s", crawl_id, reason, counts)
    if counts.get("orphans"):
        logger.warning("ipr-crawl: crawl %r: %d queued URLs lost their request in Redis (lost writes) and no page "
                       "linked to them again since: not fetched (stat ipr/crawl/orphans)", crawl_id, counts["orphans"])
    pending = counts["frontier"] + counts["forced"] + counts["in_flight"]
    if reason == "finished":
        ended = not local_left and not pending
    elif reason in INTERRUPTED_REASONS:
        ended = False
    else:
        alive, _ = store.holder_counts()
        ended = not alive
        if alive:
            logger.info("ipr-crawl: this process stopped (%s); %d other processes of crawl %r go on (CLOSESPIDER_* "
                        "limits count each process's own pages, items and time)", reason, alive, crawl_id)
        elif pending:
            logger.info("ipr-crawl: crawl %r ended by %s with %d requests not fetched (a deliberate close is an end; "
                        "only a signal, a kill, a crash or Redis away leave a crawl to resume)", crawl_id, reason,
                        pending)
    if not ended:
        return
    from ipr_crawl.store.archive import mark_finished

    mark_finished(store.client, crawl_id, reason, counts["fetched"], counts["failed"], config.next_run)
    stats_set("ipr/finished", 1)
    logger.info("ipr-crawl: crawl %r finished: %s", crawl_id, NEXT_RUN[config.next_run].format(
        left=" and goes on with the requests not fetched" if pending else ""))


def closed_without_redis_line(crawl_id: str, reason: str, exc: BaseException | None, held: int) -> None:
    """The crawl closed without Redis (away, or full: nothing more written): the ``held``
    leases of this process stay leased. Not said for a Redis without the crawl
    (``ipr_store_lost``): it holds no lease to hand back."""
    from ipr_crawl.store.memory import is_full

    if reason == "ipr_store_lost":  # said by redis_stopped_line; nothing is left to hand back
        return
    full = reason == "ipr_redis_full" or bool(exc and is_full(exc))
    how = "without writing to Redis, which is full" if full else f"without Redis ({exc or 'unreachable'})"
    if reason == "finished":  # Scrapy was closing it as finished: Redis's reason is the crawl's (as in its stats)
        reason = "ipr_redis_full" if full else "ipr_redis_unavailable"
    logger.error(
        "ipr-crawl: crawl %r closed (%s) %s: %d requests leased by this process stay "
        "leased; the next run of the crawl hands them back at its first pop (this process's "
        "heartbeat stops), or they go back when their leases expire (IPR_LEASE_SECS)",
        crawl_id, reason, how, held,
    )


def redis_stopped_line(
    where: str, exc: BaseException, waited: float, retry_secs: float, full_client: Any, closing: bool = False,
    lost: bool = False,
) -> None:
    """The crawl stops: Redis unreachable through ``waited`` s of retries, or, with
    ``full_client`` (the crawl's client), full: it refused a write (``OOM``; ``closing``:
    a write of the close, the crawl then not marked finished), or, ``lost``, it answers
    without the crawl (``IPR_STORE_LOST``)."""
    if lost:
        logger.error("ipr-crawl: %s answers but no longer holds the crawl (%s); stopping the crawl (reason "
                     "ipr_store_lost, exit status 1). What was not fetched is not known to this Redis: restore its "
                     "data (its RDB or append-only file) and run again, or start the crawl afresh", where, exc)
        return
    if full_client is None:
        logger.error("ipr-crawl: %s unreachable for %.1f s of retries (IPR_REDIS_RETRY_SECS=%g): %s; stopping the "
                     "crawl (reason ipr_redis_unavailable). Nothing is lost: start it again when Redis is back",
                     where, waited, retry_secs, exc)
        return
    from ipr_crawl.store.memory import memory_line

    logger.error("ipr-crawl: %s is full (%s) and refused a write of the crawl; %s. Nothing is lost: the requests "
                 "this process leased stay leased for the next run. Raise the server's maxmemory (CONFIG SET "
                 "maxmemory ...) or free memory, then run again", where,
                 memory_line(full_client) or "its memory cannot be read",
                 "it closes without being marked finished" if closing else "stopping the crawl (reason ipr_redis_full)")


def moved_back_lines(
    config: Any, stats_inc: Callable[..., None], reclaimed: int, lost: list[str], expired: int, overdue: int,
    dead: int,
) -> None:
    """What a pop moved back, as stats and lines: the ``reclaimed`` leases of the ``lost``
    holders, ``expired`` leases, ``overdue`` leases of live holders past
    ``IPR_LEASE_MAX_SECS``, and ``dead`` requests dead-lettered (``IPR_MAX_RELEASES``)."""
    if lost:
        stats_inc("ipr/lease/lost_holders", len(lost))
        stats_inc("ipr/lease/reclaimed", reclaimed)
        logger.info("ipr-crawl: %d requests leased by %s went back to the frontier: heartbeat silent for more than "
                    "%.0f s (2 × IPR_HEARTBEAT_SECS)", reclaimed, ", ".join(lost), 2 * config.heartbeat_secs)
    if expired:
        stats_inc("ipr/lease/expired", expired)
        logger.info("ipr-crawl: %d leases older than IPR_LEASE_SECS=%g went back to the frontier",
                    expired, config.lease_secs)
    if overdue:
        stats_inc("ipr/lease/overdue", overdue)
        logger.warning("ipr-crawl: %d requests leased by live processes for more than IPR_LEASE_MAX_SECS=%g went "
                       "back to the frontier (fetched again): a download or an item pipeline that slow? Raise "
                       "IPR_LEASE_MAX_SECS", overdue, config.lease_max_secs)
    if dead:
        stats_inc("ipr/lease/dead_lettered", dead)
        logger.warning("ipr-crawl: %d requests were handed out more than IPR_MAX_RELEASES=%d times, each time lost "
                       "with its process: settled as failed (`ipr-crawl status` names them; `ipr-crawl "
                       "release-leases --dead` puts them back)", dead, config.max_releases)
