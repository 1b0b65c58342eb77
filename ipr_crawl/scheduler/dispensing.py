"""What :meth:`IprScheduler.next_request <ipr_crawl.scheduler.core.IprScheduler.next_request>`
hands the engine: requests kept in this process's memory first, then the buffer of
leased requests, refilled by pops ahead of need (:class:`~ipr_crawl.scheduler.leasing.Leases`),
paced by slow start and the pages being parsed (:class:`~ipr_crawl.scheduler.pacing.Pacing`),
or chosen per download slot by the polite pop (:class:`~ipr_crawl.scheduler.polite.PolitePop`).
Never waits on Redis: an empty buffer queues a pop and answers None; the pop's answer
wakes the engine."""

from __future__ import annotations

from typing import Any

from scrapy import Request

__all__ = ["lease_more", "next_leased"]


def next_leased(sched: Any) -> Request | None:
    """The next request for the engine, or None (see the module docstring)."""
    if sched.enqueuer.local:
        sched._stats_inc("scheduler/dequeued")
        sched._stats_inc("scheduler/dequeued/memory")
        return sched.enqueuer.local.popleft()
    pacing, leases = sched.pacing, sched.leases
    if pacing.active and not leases.buffer and pacing.held_back():
        return None
    if sched.polite is not None:
        picked = sched.polite.take(leases.buffer, lambda busy: lease_more(sched, busy), leases.release)
        if picked is None:
            return None
        member, request = picked
    else:
        # slow start: lease no more than may leave now (a request leased ahead
        # would be chosen before the pages now in progress are recorded)
        ahead = pacing.ahead(sched.calls.pipe_rtt_secs)  # pipelined pops: a few more
        if not leases.buffer:
            room = pacing.lease_room() if pacing.active else pacing.pop_batch()
            if room > 0:
                sched._refill(min(room + ahead, pacing.pop_batch()))  # now, or later (pipe, thread)
            if not leases.buffer:  # the engine waits for a pop's round trip (if one is on its way)
                sched._stats_inc("ipr/redis/pop_waits", int(leases.popping))
                return None
        member, request = leases.buffer.popleft()
        if not pacing.active and len(leases.buffer) <= pacing.pop_batch() // 2:
            sched._refill(pacing.pop_batch())  # ahead of need: the next ones come while this one downloads
        elif ahead >= 2 and len(leases.buffer) < (ahead + 1) // 2:  # far from Redis: keep a few
            sched._refill(ahead)
    leases.handed_out(member, request)
    pacing.took()
    sched._stats_inc("ipr/frontier/popped")
    sched._stats_inc("scheduler/dequeued")
    sched._stats_inc("scheduler/dequeued/redis")
    return request


def lease_more(sched: Any, busy: list[str]) -> int:
    """Polite pop: lease up to :meth:`Pacing.pop_batch` more (under ``IPR_SLOW_START`` or
    ``IPR_WAIT_FOR_PARSE``, :meth:`Pacing.lease_room`: none while the engine has as many
    requests in progress as allowed, whatever the buffer holds for busy slots), one
    per download slot not in ``busy`` (pop.lua's scan); how many came. A request
    leased for a free slot and not handed out at once waits in the buffer and is
    chosen before the pages in progress are recorded, as in a plain pop."""
    pacing, polite, cfg = sched.pacing, sched.polite, sched.config
    if pacing.active and pacing.held_back():
        return 0
    room = pacing.lease_room() if pacing.active else pacing.pop_batch()
    if room <= 0 or sched.leases.popping:
        return 0
    polite.cursor = (polite.cursor + cfg.polite_scan) % (1 << 40)
    return sched._refill(room, cfg.polite_scan, busy, polite.cursor, cfg.polite_min_ratio)
