"""The requests this process leased: :class:`Leases`.

A pop leases a batch from the frontier (``pop.lua``, after this process's last record
call, so that it sees its links) into a buffer of decoded requests that
``next_request`` hands out; each lease is held until its page is recorded, it fails,
or it is handed back. :meth:`Leases.pending_now` answers whether the crawl has
requests left (for ``has_pending_requests``), and an idle process asks the engine
again soon while requests in flight elsewhere keep the crawl open.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import redis
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest

from ipr_crawl.config import FrontierConfig
from ipr_crawl.meta import LEASE_META, lease_of
from ipr_crawl.scheduler.codec import PayloadError, decode_request
from ipr_crawl.scheduler.compat import loop_deliverer
from ipr_crawl.scheduler.identity import RequestIdentity
from ipr_crawl.scheduler.oplog import log_wait, moved_back_lines
from ipr_crawl.scheduler.pacing import Pacing
from ipr_crawl.scheduler.redis_calls import REDIS_DOWN, RedisCalls, stops_the_crawl
from ipr_crawl.scheduler.refresher import Refresher

__all__ = ["Leases"]

# the scheduler's log lines keep their logger's name
logger = logging.getLogger("ipr_crawl.scheduler.core")

#: A pop's answer: revisits refreshed, unplaced/day, unreadable states, leases moved back,
#: (reclaimed, lost holders), [(lease member, payload)], and whether anything is pending.
_Popped = tuple[int, float, int, int, tuple[int, list[str]], list[tuple[bytes, bytes | None]], bool]

class _AsyncioCall:
    """An asyncio ``call_later`` handle with Twisted's ``IDelayedCall.active()``."""

    def __init__(self, loop: Any, handle: Any) -> None:
        self.loop, self.handle = loop, handle

    def active(self) -> bool:
        return not self.handle.cancelled() and self.handle.when() > self.loop.time()

    def cancel(self) -> None:
        self.handle.cancel()


class Leases:
    """The leases of one scheduler: ``buffer`` the leased requests not handed out yet
    (lease member, request), ``held`` every lease taken and not settled. ``calls`` makes
    the Redis calls, ``pacing`` sizes the pops and wakes the engine; ``spider`` and
    ``revisits`` are set when the scheduler opens."""

    spider: Spider
    #: the revisit refresher (refresher.py), when IPR_REVISIT_ENABLED
    revisits: Refresher | None = None

    def __init__(
        self, config: FrontierConfig, calls: RedisCalls, pacing: Pacing, identity: RequestIdentity, holder: str,
        stats_inc: Any, stats_set: Any,
    ) -> None:
        self.config = config
        self.calls = calls
        self.pacing = pacing
        self.identity = identity
        self.holder = holder
        self.stats_inc = stats_inc
        self.stats_set = stats_set
        self.buffer: deque[tuple[bytes, Request]] = deque()
        #: leases this process took and has not settled (lease member -> the request once
        #: handed to the engine, None while buffered)
        self.held: dict[bytes, Request | None] = {}
        #: (time.monotonic(), lease members) handed out and still held when the engine was
        #: last seen idle (settle_escaped)
        self.escaped_seen: tuple[float, set[bytes]] | None = None
        #: a pop queued and not answered yet
        self.popping = False
        #: requests asked for by pipelined pops not answered (at a close without Redis they
        #: may be leased: a pop written before Redis went away may have run)
        self.pops_out = 0
        #: (generation, time.monotonic(), pending?) of the last check, and whether one is queued
        self.pending_seen: tuple[int, float, bool] | None = None
        #: (generation, time.monotonic()) of the last pop that found nothing
        self.empty_pop: tuple[int, float] | None = None
        self.checking = False
        #: the scheduler is closing: a pop's answer wakes the engine no more
        self.closing = False
        #: a wake of the engine due soon, while requests in flight elsewhere keep the crawl open
        self.recheck: Any = None
        self.last_wait_log = 0.0
        #: set_aside said its WARNING
        self.warned_lost = False

    @property
    def store(self) -> Any:
        """The crawl's store (FrontierStore, or BucketedFrontier)."""
        return self.calls.store

    def id_of(self, member: bytes, request: Request | None) -> bytes:
        """The frontier id a lease ``member`` settles: its last 8 bytes for a frontier
        member, the request's identity for a forced-queue token (b'' if unknown)."""
        if len(member) == 16:
            return member[8:]
        return self.identity.of(request) if request is not None else b""

    def release(self, items: Sequence[tuple[bytes, Request | None]], stat: str = "ipr/lease/released") -> None:
        """Hand requests back to the frontier (their leases settled; counted in ``stat``)."""
        for member, _ in items:
            self.held.pop(member, None)
        leases = [(m, self.id_of(m, r)) for m, r in items]
        self.calls.submit(self.store.ack, "release", leases, call=self.calls.call_of("ack", "release", leases),
                          then=lambda released: self.stats_inc(stat, released))

    def lapsed(self, taken_again: Sequence[bytes] = ()) -> None:
        """The heartbeat of this process lapsed (found by its heartbeat thread, or by a pop that
        registered it again) and its leases went to others: the buffered requests go, not
        fetched; their hand-back names this holder, so only a lease still its own returns
        (ack.lua). ``taken_again``: members that pop leased anew, dropped with no hand-back."""
        if self.buffer:
            items, again = list(self.buffer), set(taken_again)
            self.buffer.clear()
            self.stats_inc("ipr/lease/dropped_after_lapse", len(items))
            logger.warning("ipr-crawl: this process's heartbeat lapsed and its leases went to others: the %d "
                           "requests it held are dropped, not fetched", len(items))
            self.release([(m, r) for m, r in items if m not in again])  # `again`: in `held` for the new lease

    def refill(
        self, count: int = 0, scan: int = 0, busy: list[str] | None = None, offset: int = 0, min_ratio: float = 0.0
    ) -> int:
        """Lease ``count`` (default :meth:`Pacing.pop_batch`) requests into the buffer (``scan``,
        ``busy``: :meth:`FrontierStore.pop`): at once on the event loop (returns how many
        came), or queued on the Redis thread unless a pop is queued already (returns 0:
        they come with :meth:`popped`)."""
        if self.popping or self.calls.down:
            return 0
        empty = self.empty_pop
        if empty is not None and empty[0] == self.calls.gen and time.monotonic() - empty[1] < 1.0:
            return 0  # the last pop found nothing and nothing was recorded since
        gen = self.calls.gen
        args = (count or self.pacing.pop_batch(), scan, list(busy or ()), offset, min_ratio)
        if self.calls.on_pipe and self.revisits is None:
            self.pipe_pop(gen, *args)
            return 0
        if self.calls.on_loop:
            ok, result = self.calls.loop_call(self.pop_now, *args)
            if ok:
                self.popped(result, gen, wake=False)  # the engine is asking: no need to wake it
                return len(result[5])
        if self.calls.io is None:
            result = self.pop_now(*args)
            self.popped(result, gen, wake=False)
            return len(result[5])  # the engine is asking: it takes them now (0 would leave them to its heartbeat)

        def failed(exc: BaseException) -> None:
            self.popping = False
            self.calls.failed(exc)

        self.popping = True
        # on the Redis thread, in the calls' order (pipelined with revisits: a job there)
        self.calls.submit(self.pop_now, *args, then=lambda result: self.popped(result, gen), failed=failed, adds=False)
        return 0

    def pipe_pop(self, gen: int, count: int, scan: int, busy: list[str], offset: int, min_ratio: float) -> None:
        """A pop written to the pipelined connection (after this process's record calls, in
        the same write when made in the same turn of the loop); its answer wakes the engine.
        A pop that finds nothing is followed by a look at what is pending."""
        cfg = self.config
        self.popping = True
        self.pops_out += count
        pop_args = (count, cfg.lease_secs, cfg.requeue_batch_size, scan, busy, offset, min_ratio)

        def answered(result: tuple[int, list[tuple[bytes, bytes | None]]]) -> None:
            self.pops_out -= count
            expired, items = result
            if items:
                self.popped((0, 0.0, 0, expired, self.store.last_lost, items, True), gen)
                return
            lost = self.store.last_lost

            def counted(pending: int) -> None:
                self.popped((0, 0.0, 0, expired, lost, items, pending > 0), gen)
                if pending and time.monotonic() - self.last_wait_log > 30:
                    self.last_wait_log = time.monotonic()
                    self.calls.submit(log_wait, self.store, self.holder, cfg.lease_secs, adds=False)

            self.calls.submit(self.store.pending, then=counted, adds=False, call=self.store.pending_call(),
                              failed=failed)

        def failed(exc: BaseException) -> None:
            self.popping = False
            if not isinstance(exc, REDIS_DOWN):  # Redis gone: it may have run (counted at close)
                self.pops_out -= count
            self.calls.failed(exc)

        self.calls.submit(functools.partial(self.store.pop, holder=self.holder), *pop_args, then=answered,
                          failed=failed, call=self.store.pop_call(*pop_args, holder=self.holder), adds=False)

    def pop_now(self, count: int, scan: int, busy: list[str], offset: int, min_ratio: float) -> _Popped:
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
        pending = self.pending_now() if not items else True
        return refreshed, unplaced, unreadable, expired, self.store.last_lost, items, pending

    def popped(self, result: _Popped, gen: int, wake: bool = True) -> None:
        """A pop's answer, on the event loop: decode into the buffer, wake the engine."""
        self.popping = False
        refreshed, unplaced, unreadable, expired, (reclaimed, lost), items, pending = result
        if not items:
            now = time.monotonic()
            self.empty_pop = (gen, now)
            self.pending_seen = (gen, now, pending)
        if self.revisits is not None:
            self.stats_inc("ipr/revisit/refreshed", refreshed)
            if unplaced:
                self.stats_set("ipr/revisit/unplaced_per_day", round(unplaced, 3))
            if unreadable:
                self.stats_set("ipr/revisit/unreadable_states", unreadable)
        moved_back_lines(self.config, self.stats_inc, reclaimed, lost, expired - reclaimed,
                         getattr(self.store, "last_overdue", 0), self.store.take_dead_lettered())
        if self.store.take_lapsed():  # registered again by this pop: what it held before is others'
            self.lapsed([m for m, _ in items])
        undecodable: list[tuple[bytes, bytes]] = []
        orphans: list[tuple[bytes, bytes]] = []
        for member, payload in items:
            self.held[member] = None
            if payload is None and len(member) == 16:  # a queued URL whose request Redis lost
                orphans.append((member, member[8:]))
                self.held.pop(member, None)
                continue
            try:
                if payload is None:
                    raise PayloadError("request payload missing")
                request = decode_request(payload, self.spider)
            except PayloadError as exc:
                logger.error("ipr-crawl: dropping an undecodable request %s: %s", member.hex(), exc)
                self.stats_inc("ipr/codec/undecodable")
                undecodable.append((member, member[8:] if len(member) == 16 else b""))
                self.held.pop(member, None)
                continue
            request.meta[LEASE_META] = member.hex()
            self.buffer.append((member, request))
        if undecodable:
            self.calls.submit(self.store.ack, "fail", undecodable, call=self.calls.call_of("ack", "fail", undecodable))
        if orphans:
            self.set_aside(orphans)
        if not self.closing and (wake or (items and not self.buffer)):
            # the engine asks again (after a pop whose requests were all undecodable, or
            # none: is the crawl over?), else it would wait for its 5 s heartbeat
            self.pacing.wake()

    def pending_now(self) -> bool:
        """On the Redis thread: whether the crawl has requests not settled (or revisits to wait for)."""
        self.store.settle_record()
        pending = self.store.pending()
        if pending and time.monotonic() - self.last_wait_log > 30:
            self.last_wait_log = time.monotonic()
            log_wait(self.store, self.holder, self.config.lease_secs)
        if not pending and self.revisits is not None:
            return bool(self.revisits.keeps_open())
        return pending > 0

    def pending_checked(self, gen: int, pending: bool) -> None:
        self.checking = False
        self.pending_seen = (gen, time.monotonic(), pending)
        self.pacing.wake()

    def check_failed(self, exc: BaseException) -> None:
        self.checking = False
        self.calls.failed(exc)

    def recheck_soon(self, delay: float = 0.5) -> None:
        """Ask the engine again in ``delay`` s while this process has nothing to fetch and
        the crawl stays open (requests in flight elsewhere, or being recorded), instead of
        at the engine's 5 s heartbeat: the last process closes soon after the last fetch."""
        if self.recheck is not None and self.recheck.active():
            return
        if "twisted.internet.reactor" in sys.modules:
            from twisted.internet import reactor

            if reactor.running:
                self.recheck = cast(Any, reactor).callLater(delay, self.pacing.wake)
                return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop runs (a test calling the scheduler directly)
            return
        self.recheck = _AsyncioCall(loop, loop.call_later(delay, self.pacing.wake))

    def has_pending(self, local: int) -> bool:
        """Whether requests remain, for this process or another of the crawl. Never waits
        on Redis: the answer of the last check (an empty pop's, or one queued on the Redis
        thread after every call that could add requests; at most 1 s old), else True and
        a check is queued (its answer wakes the engine). True while Redis is unreachable
        (the crawl is closing: not "finished"). ``local``: requests kept in this
        process's memory."""
        if self.calls.down or self.buffer or local:
            return True
        if self.calls.io is None:
            return bool(self.calls.guard(self.pending_now, default=True))
        if self.popping:  # its answer says, and wakes the engine
            return True
        seen = self.pending_seen
        if seen is not None and seen[0] == self.calls.gen and time.monotonic() - seen[1] < 1.0:
            if seen[2]:
                self.recheck_soon()
            return seen[2]
        if self.calls.on_loop:
            ok, pending = self.calls.loop_call(self.pending_now)
            if ok:
                self.pending_seen = (self.calls.gen, time.monotonic(), pending)
                if pending:
                    self.recheck_soon()
                return bool(pending)
        if not self.checking:
            self.checking = True
            gen = self.calls.gen
            if self.calls.on_pipe and self.revisits is None:  # the count alone, pipelined
                self.calls.submit(self.store.pending, then=lambda n: self.pending_checked(gen, n > 0), adds=False,
                                  call=self.store.pending_call(), failed=self.check_failed)
            else:  # on the Redis thread, in the calls' order
                self.calls.submit(self.pending_now, then=lambda pending: self.pending_checked(gen, pending),
                                  adds=False, failed=self.check_failed)
        return True

    def handed_out(self, member: bytes, request: Request) -> None:
        """``request`` (lease ``member``) goes to the engine."""
        if member in self.held:
            self.held[member] = request

    def set_aside(self, lost: list[tuple[bytes, bytes]]) -> None:
        """Queued URLs whose request payload Redis lost (a failover or an AOF ``everysec``
        loss took the writes): not failed, set aside (ack.lua ``orphan``) until a page
        links to them or a request names them again, which brings the request back
        (_frontier.lua ``adopt``). The link cache is dropped with the stat, so this
        process sends every link's request again. Counted in ``ipr/frontier/payload_lost``."""
        self.stats_inc("ipr/frontier/payload_lost", len(lost))
        # one WARNING per process; the count goes on in the stat, and the close names those left
        log = logger.info if self.warned_lost else logger.warning
        self.warned_lost = True
        log("ipr-crawl: %d queued URLs lost their request in Redis (lost writes: a failover, an AOF loss); they "
            "wait for a page that links to them again (first node %s; stat ipr/frontier/payload_lost)",
            len(lost), lost[0][1].hex())
        self.calls.submit(self.store.ack, "orphan", lost, call=self.calls.call_of("ack", "orphan", lost))

    def settle_escaped(self, engine_idle: bool, settle: Any) -> None:
        """Settle as failed the leases this process handed to the engine that the engine
        no longer holds: a request can leave Scrapy's engine without a response, an
        exception or an errback (a downloader returning another type, a scraper that
        raises on enqueue; the engine logs the error), and plain Scrapy loses it then too.
        Its lease would keep the crawl open until ``IPR_LEASE_SECS`` and hand it out again
        to fail the same way. A lease counts as escaped when the engine was idle (nothing
        downloading, in progress or being scraped: ``engine_idle``) at two checks at least
        1 s apart and the lease was held at both, with every Redis call answered at both
        (:attr:`RedisCalls.quiet`: a page's record call still on its way settles its lease
        when it is answered). ``settle(request,
        exception)``: :meth:`IprScheduler.settle_failure`. Counted in ``ipr/lease/escaped``."""
        if not engine_idle or self.calls.away or self.calls.down or not self.calls.quiet:
            # (while a call waits for its answer, or Redis is away, the pages' record calls
            # may be among them: their requests left the engine, they did not escape)
            self.escaped_seen = None
            return
        out = {member for member, request in self.held.items() if request is not None}
        now = time.monotonic()
        seen = self.escaped_seen
        if seen is None or not out:
            self.escaped_seen = (now, out) if out else None
            return
        if now - seen[0] < 1.0:
            return
        escaped = out & seen[1]
        self.escaped_seen = None
        for member in escaped:
            request = self.held[member]
            assert request is not None
            settle(request, RuntimeError("the request left Scrapy's engine without a response, an error or an errback"))
        if escaped:
            self.stats_inc("ipr/lease/escaped", len(escaped))
            logger.warning("ipr-crawl: %d requests left Scrapy's engine without a response or an error (see the "
                           "engine's ERROR lines above); marked failed, as plain Scrapy loses them", len(escaped))

    def settle_failure(self, request: Request, exception: BaseException) -> bool:
        """A leased request failed for good: mark its URL failed and settle the lease
        (once: a second call for the same lease does nothing). Counted in
        ``ipr/frontier/failed`` or, for an :class:`~scrapy.exceptions.IgnoreRequest`,
        ``ipr/frontier/ignored``. A Redis error (a middleware's store call) is not the
        page's: its lease is handed back and the URL fetched again
        (``ipr/frontier/released_after_redis_error``). Returns whether this call settled it."""
        lease = lease_of(request)
        if not lease or self.calls.down:
            return False
        if isinstance(exception, redis.RedisError):  # Redis's fault, not the page's: fetched again
            logger.warning("ipr-crawl: <%s %s> failed on a Redis error (%s); handed back to the frontier, "
                           "not marked failed", request.method, request.url, exception)
            kind, mode = "released_after_redis_error", "release"
        else:
            kind, mode = ("ignored" if isinstance(exception, IgnoreRequest) else "failed"), "fail"

        def settled(count: int) -> None:
            self.held.pop(lease, None)
            if count:
                self.stats_inc(f"ipr/frontier/{kind}")

        leases = [(lease, self.id_of(lease, request))]
        self.calls.submit(self.calls.store.ack, mode, leases, then=settled, call=self.calls.call_of("ack", mode, leases))
        return True

    def record_failed(self, lease: bytes, exc: BaseException) -> None:
        """A page's record call failed. Redis away for good stops the crawl (the lease
        stays in Redis, handed back at the next run); another error (a script error, a
        full Redis) is logged, and the page's lease goes back to the frontier, so the
        page is fetched again and its links recorded then, instead of waiting in flight
        (``ipr/lease/released_after_record_error``)."""
        if stops_the_crawl(exc) or not lease:  # Redis away or full: the lease stays for the next run
            self.calls.failed(exc)
            return
        logger.error("ipr-crawl: recording a page failed (%s); its lease goes back to the frontier and the page "
                     "is fetched again", exc)
        self.release([(lease, None)], stat="ipr/lease/released_after_record_error")

    def watch_recovery(self, retry: Any, embedded: bool) -> None:
        """Have :meth:`revived` run on the event loop whenever ``retry`` (the crawl's
        :class:`~ipr_crawl.store.retry.RedisRetry`) got a command through after failed
        attempts (an attempt whose reply was lost may have run: a pop sent twice leases
        twice), and, ``embedded``, after it restarted the embedded server."""
        deliver = loop_deliverer()

        def back() -> None:
            deliver(self.revived)

        retry.on_recovered = back
        if embedded:
            retry.on_revived = back

    def revived(self) -> None:
        """The embedded server was restarted from its append-only file, which may miss the
        last second of writes: the leases this process no longer holds go back now (their
        pages are fetched again), not after ``IPR_LEASE_SECS``.

        Redis's clock is read in the calls' order (lease times are on it): every call made
        before has its answer handled before the look (its requests are in :attr:`held`),
        and a lease a later pop takes is younger than the time read, so it stays."""
        read = self.store.redis_time
        if self.calls.on_pipe:
            self.calls.submit(read, then=self.release_stale, adds=False)
        elif self.calls.io is not None and self.calls.io.alive:
            self.calls.io.submit(read, then=self.release_stale, failed=self.calls.failed)
        else:
            self.release_stale(read())

    def release_stale(self, before: float) -> None:
        """Hand back the leases this process took before ``before`` (s on Redis's clock) and
        no longer holds."""
        keep = set(self.held)

        def done(released: int) -> None:
            self.stats_inc("ipr/lease/released_after_restart", released)
            if released:
                logger.warning("ipr-crawl: %d requests leased to this process that it does not hold (a settling "
                               "lost with a restarted server's last writes, or a pop whose reply was lost) went "
                               "back to the frontier", released)

        self.calls.submit(self.store.release_stale, self.holder, keep, before, then=done)
