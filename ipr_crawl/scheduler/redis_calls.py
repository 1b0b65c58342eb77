"""Where the scheduler's Redis calls are made: :class:`RedisCalls`.

``IPR_REDIS_THREAD=auto``: pipelined on Scrapy's asyncio loop (store/pipe.py; a Redis
Cluster and buckets through store/router.py), or, without an asyncio loop, on the event
loop one attempt each (one server) or on the Redis thread. A call that fails hands
every call to the Redis thread (:mod:`ipr_crawl.scheduler.redis_thread`), which retries
(``IPR_REDIS_RETRY_SECS``) until it has caught up. Calls run in the order they were made
(docs/architecture.md, "The event loop never waits on Redis").
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import ClusterError, TryAgainError

from ipr_crawl.scheduler.redis_thread import SWITCH_INTERVAL, RedisThread
from ipr_crawl.store import Link, RecordResult
from ipr_crawl.store.keys import is_store_lost
from ipr_crawl.store.memory import is_full
from ipr_crawl.store.pipe import Call, RedisPipe
from ipr_crawl.store.pipe_thread import ThreadedPipe, open_pipe
from ipr_crawl.store.retry import RedisRetry
from ipr_crawl.store.router import PipeRouter

__all__ = ["CLOSE_WITHOUT_REDIS_SECS", "REDIS_DOWN", "SYNC_WHILE_AWAY_SECS", "RedisCalls"]

logger = logging.getLogger("ipr_crawl.scheduler.core")

#: Errors of a Redis that stays unreachable after IPR_REDIS_RETRY_SECS of retries.
#: Redis unreachable: a connection error, a timeout, or a Redis Cluster that did not
#: settle (CLUSTERDOWN, TRYAGAIN, redis-py's "TTL exhausted" of redirections) through
#: every retry (store/retry.py)
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError, ClusterError, TryAgainError)


def stops_the_crawl(exc: BaseException) -> bool:
    """Redis unreachable for good (:data:`REDIS_DOWN`), full (a write refused: ``OOM``), or
    no longer holding the crawl (``IPR_STORE_LOST``: restarted empty, flushed)."""
    return isinstance(exc, REDIS_DOWN) or is_full(exc) or is_store_lost(exc)


#: While Redis is away, how long a call the event loop waits for (the call still runs later) (s).
SYNC_WHILE_AWAY_SECS = 0.5
#: At close, how long to wait for a Redis found unreachable before closing without it (s).
CLOSE_WITHOUT_REDIS_SECS = 1.0
#: breaks of the pipe in a row with no reply while the Redis thread's calls succeed: then off the pipe
DEAD_PIPES_LIMIT = 5
#: seconds the pipe's calls may stand still before the watchdog breaks it (RedisCalls.watch_pipe)
PIPE_STALL_SECS = 10.0
_T = TypeVar("_T")



class RedisCalls:
    """The store calls of one scheduler: on the event loop or on its Redis thread.

    ``store``, ``io`` and ``retry`` are set when the scheduler opens; ``on_down(exc)`` is
    called once Redis stayed unreachable through every retry (the crawl then closes);
    ``stats_inc(key)`` counts the hand-overs. ``gen``: bumped by every call that may add."""

    store: Any  # FrontierStore, or BucketedFrontier (IPR_CLUSTER_BUCKETS > 1)

    def __init__(
        self, retry_secs: float, on_down: Callable[[BaseException], None], stats_inc: Callable[[str], None],
    ) -> None:
        self.retry_secs = retry_secs
        self.on_down = on_down
        self.stats_inc = stats_inc
        #: the thread that makes the Redis calls of the steady state (redis_thread.py)
        self.io: RedisThread | None = None
        self.retry: RedisRetry | None = None
        #: True once Redis stayed unreachable for IPR_REDIS_RETRY_SECS (crawl closing)
        self.down = False
        #: IPR_REDIS_THREAD=auto on one server: Redis calls on the event loop while it answers
        self.loop_mode = False
        #: a call failed on the event loop: the calls go to the Redis thread until it caught up
        self.away = False
        #: bumped by every queued call that may change what is pending
        self.gen = 0
        #: the switch interval this scheduler asked for (IPR_GIL_SWITCH_SECS), while it runs
        self._switch_interval: float | None = None
        #: the pipelined calls (store/pipe.py, router.py, pipe_thread.py): the steady
        #: state's calls while Redis answers (IPR_REDIS_THREAD=auto)
        self.pipe: RedisPipe | PipeRouter | ThreadedPipe | None = None
        # breaks of the pipe with no reply since the last reconnect, in a row: the thread's
        # client reaches Redis, the pipe's connection does not (see _pipe_broken)
        self._dead_pipes = 0
        self._calls_at_reset = 0
        #: called when Redis answers again after calls failed (the scheduler's Leases.revived)
        self.on_back: Callable[[], None] | None = None

    def start_thread(self, name: str, gil_switch_secs: float) -> None:
        """Start the Redis thread (none without an event loop to hand results to: a
        scheduler driven by hand makes its calls inline); ``gil_switch_secs`` > 0 shortens
        Python's switch interval while it runs (``IPR_GIL_SWITCH_SECS``)."""
        try:
            io = RedisThread(name)
        except RuntimeError:  # no event loop to hand results to (a scheduler driven by hand): calls made inline
            self.io = None
            return
        self.io = io
        io.start()
        self._gil_switch_secs = gil_switch_secs

    def _shorten_switch_interval(self) -> None:
        """``IPR_GIL_SWITCH_SECS``, for a crawl whose steady-state calls are on the Redis thread."""
        gil_switch_secs = getattr(self, "_gil_switch_secs", 0.0)
        if gil_switch_secs > 0 and self._switch_interval is None:
            # The crawler keeps the interpreter busy; each time the Redis thread's
            # socket call returns it waits for it, by default up to 5 ms (CPython's
            # switch interval): a pop's reply would reach the engine that late.
            self._switch_interval = gil_switch_secs
            SWITCH_INTERVAL.shorten(gil_switch_secs)

    def enter_loop_mode(self, wanted: bool, in_place: bool = True) -> None:
        """The steady state: with ``wanted`` (``IPR_REDIS_THREAD=auto``), calls pipelined on
        the asyncio loop (:meth:`start_pipe`); without one, made on the event loop, one
        attempt each, where ``in_place`` (one server, no buckets), else on the Redis thread."""
        if wanted and self.io is not None and self.start_pipe():
            self.loop_mode = False
            return
        self.loop_mode = self.io is not None and wanted and in_place
        if self.io is not None:
            self._shorten_switch_interval()
        if self.loop_mode and self.retry is not None:
            self.retry.loop_thread = threading.get_ident()

    def start_pipe(self) -> bool:
        """Open the pipelined calls (store/pipe_thread.py's ``open_pipe``): on Scrapy's
        asyncio loop, else in an I/O thread of their own; False for connections with no
        asyncio twin (Sentinel)."""
        from ipr_crawl.scheduler.compat import loop_deliverer

        io = self.io
        assert io is not None

        def run_job(fn: Callable[[], Any], done: Callable[[bool, Any], None]) -> None:
            io.submit(fn, then=lambda value: done(True, value), failed=lambda exc: done(False, exc))

        self.pipe = open_pipe(self.store, run_job, self._pipe_broken, loop_deliverer(), f"{io.name}-pipe")
        return self.pipe is not None

    def call_of(self, name: str, *args: Any, **kwargs: Any) -> Call | None:
        """The store's ``<name>_call(*args, **kwargs)`` (a :class:`~ipr_crawl.store.pipe.Call`)
        while :attr:`on_pipe`, else None (the blocking function is used)."""
        if not self.on_pipe:
            return None
        return getattr(self.store, f"{name}_call")(*args, **kwargs)

    @property
    def pipe_rtt_secs(self) -> float:
        """The pipelined calls' round trip (s, a moving average; 0 off the pipe)."""
        return self.pipe.stats.rtt_secs if self.pipe is not None and self.on_pipe else 0.0

    @property
    def on_pipe(self) -> bool:
        """Whether calls go through the pipe now: it is open and Redis answers."""
        return self.pipe is not None and not self.away and not self.down and self._dead_pipes < DEAD_PIPES_LIMIT

    @property
    def quiet(self) -> bool:
        """Whether every call made so far has its answer (none to write or read on the
        pipe, none queued on the Redis thread)."""
        pipe_busy = self.pipe is not None and self.pipe.broken is None and self.pipe.outstanding > 0
        return not pipe_busy and (self.io is None or self.io.in_flight == 0)

    def watch_pipe(self) -> None:
        """Once a second: a pipe whose calls stopped moving for :data:`PIPE_STALL_SECS`
        breaks (:meth:`RedisPipe.abandon_if_stalled`), its calls go to the Redis thread."""
        if self.pipe is not None and self.on_pipe and self.pipe.abandon_if_stalled(PIPE_STALL_SECS):
            self.stats_inc("ipr/redis/pipe_stalls")

    def _count_pipe_break(self, exc: BaseException) -> None:
        """A break of the pipelined connection: counted in a row while no reply came since
        the last reconnect; at :data:`DEAD_PIPES_LIMIT` the calls stay off the pipe."""
        assert self.pipe is not None
        answered = self.pipe.stats.calls != self._calls_at_reset
        self._dead_pipes = 0 if answered else self._dead_pipes + 1
        if self._dead_pipes == DEAD_PIPES_LIMIT:
            logger.warning("ipr-crawl: the pipelined Redis connection failed %d times in a row without a "
                           "reply while the Redis thread's connection works (%s); this crawl's calls stay "
                           "on the Redis thread", DEAD_PIPES_LIMIT, exc)

    def _pipe_broken(self, items: list[tuple[Callable[[], Any], Any, Any]], exc: BaseException) -> None:
        """The pipelined connection broke (Redis away): its calls not answered, in order, and
        every call from now on go to the Redis thread, which retries (``IPR_REDIS_RETRY_SECS``),
        until it has caught up; then a new connection."""
        self._count_pipe_break(exc)
        if not self.away:
            self.away = True
            self.stats_inc("ipr/redis/handovers")
            logger.warning("ipr-crawl: the pipelined Redis connection failed (%s); %s and every call "
                           "after them go to the Redis thread, which retries for up to %.0f s "
                           "(IPR_REDIS_RETRY_SECS) while the crawl goes on", exc,
                           "1 call" if len(items) == 1 else f"{len(items)} calls", self.retry_secs)
        assert self.io is not None
        for fallback, then, failed in items:
            self.io.submit(fallback, then=self.then_caught_up(then), failed=failed or self.failed)
        if not items:
            self.io.submit(lambda: None, then=self.then_caught_up(None), failed=self.failed)

    def stop_thread(self, stats_set: Callable[[str, Any], None]) -> None:
        """Stop the Redis thread, restore the switch interval; the event loop's waits
        (``ipr/redis/loop_wait_*``) and the thread's CPU as stats."""
        if self._switch_interval is not None:
            SWITCH_INTERVAL.restore(self._switch_interval)
            self._switch_interval = None
        if self.pipe is not None:
            self.pipe.close()
            st = self.pipe.stats
            stats_set("ipr/redis/writes", st.writes)
            stats_set("ipr/redis/pipelined_calls", st.calls)
            stats_set("ipr/redis/pipelined_commands", st.commands)
            stats_set("ipr/redis/pipe_jobs", st.jobs)
            stats_set("ipr/redis/pipe_breaks", st.breaks)
            stats_set("ipr/redis/rtt_ms", round(st.rtt_secs * 1000, 3))
        if self.io is not None:
            self.io.stop()
            stats_set("ipr/redis/loop_wait_secs", round(self.io.blocked.total_secs, 6))
            stats_set("ipr/redis/loop_waits", self.io.blocked.calls)
            stats_set("ipr/redis/loop_wait_p99_ms", round(self.io.blocked.p99_ms(), 3))
            stats_set("ipr/redis/thread_cpu_secs", round(self.io.cpu_secs, 3))

    def finish(
        self, fn: Callable[..., Any], *args: Any, what: str,
        without_redis: Callable[[BaseException | None], None], closed: Callable[[], None],
    ) -> Any:
        """``fn(*args)`` on the Redis thread after every call queued before it (the
        close); a Deferred that fires once it has run, or at most
        :data:`CLOSE_WITHOUT_REDIS_SECS` after Redis was found unreachable
        (``without_redis(error)`` then); ``closed()`` is called before it fires.
        ``what``: for the log line of another error."""
        from twisted.internet import defer

        from ipr_crawl.scheduler.compat import looping_call

        assert self.io is not None
        done: defer.Deferred[None] = defer.Deferred()
        state: dict[str, Any] = {"finished": False, "started": time.monotonic()}

        def finished(_: Any) -> None:
            state["finished"] = True

        def failed(exc: BaseException) -> None:
            state["finished"] = True
            if stops_the_crawl(exc):
                if is_full(exc):  # said in one line; the exit status 1 (the crawl is not marked finished)
                    self.on_down(exc)
                without_redis(exc)
            else:
                logger.error("ipr-crawl: %s: %s", what, exc, exc_info=(type(exc), exc, exc.__traceback__))

        if self.on_pipe:
            assert self.pipe is not None
            self.pipe.job(functools.partial(fn, *args), then=finished, failed=failed)
        else:
            if self.on_loop and hasattr(self.store, "settle_record"):
                # the last page's record call, sent on the event loop: its reply read there, its
                # `then` (stats, signals, wake) run there, not on the thread that closes
                try:
                    self.loop_call(self.store.settle_record)  # Redis away: handed to the thread
                except redis.ResponseError as exc:
                    self.failed(exc)
            self.io.submit(fn, *args, then=finished, failed=failed)

        def poll() -> None:
            if state["finished"]:
                pass
            elif self.down or (
                # Redis failing for a second already, or since the close began
                self.retry is not None and self.retry.failing_for() > 0
                and max(self.retry.failing_for(), time.monotonic() - state["started"]) >= CLOSE_WITHOUT_REDIS_SECS
            ):
                without_redis(self.retry.last_error if self.retry else None)
            else:
                return
            watch.stop()
            closed()
            done.callback(None)

        watch = looping_call(poll)
        watch.start(0.05, now=False)
        return done

    @property
    def on_loop(self) -> bool:
        """Whether Redis calls are made on the event loop now: ``IPR_REDIS_THREAD=auto``
        (one server, no buckets) and Redis answering. Else they are queued on the Redis
        thread (:mod:`ipr_crawl.scheduler.redis_thread`), which retries while Redis is away."""
        return self.loop_mode and not self.away

    def guard(self, fn: Callable[..., _T], *args: Any, default: Any = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, or ``default`` when Redis is unreachable for good, or
        away for longer than a call waited for may wait (:meth:`sync`'s
        :class:`TimeoutError`: the call still runs later)."""
        if self.down:
            return default
        try:
            return fn(*args, **kwargs)
        except TimeoutError:
            return default
        except redis.RedisError as exc:
            if not stops_the_crawl(exc):
                raise
            self.on_down(exc)
            return default

    def hand_over(self, exc: BaseException) -> Any:
        """A call on the event loop failed (Redis away): from now on every call goes to the
        Redis thread, which retries (``IPR_REDIS_RETRY_SECS``), until it has caught up."""
        if not self.away:
            self.away = True
            self.stats_inc("ipr/redis/handovers")
            logger.warning("ipr-crawl: Redis call failed on the event loop (%s); the calls go to the Redis thread, "
                           "which retries for up to %.0f s (IPR_REDIS_RETRY_SECS) while the crawl goes on",
                           exc, self.retry_secs)
        assert self.io is not None
        taken = self.store.take_outstanding() if hasattr(self.store, "take_outstanding") else None
        if taken is None:
            return None
        # the last page's record call, sent and not answered: again, there; its `then` returned
        argv, then = taken
        self.io.submit(self.store.record_argv, argv, then=self.then_caught_up(then), failed=self.failed)
        return then

    def caught_up(self, _: Any = None) -> None:
        """The Redis thread answered and has nothing queued: calls go back to the event loop."""
        if self.away and self.io is not None and self.io.in_flight == 0 and not self.down and (
            self.retry is None or self.retry.failing_for() == 0
        ):
            self.away = False
            if self.pipe is not None and self._dead_pipes < DEAD_PIPES_LIMIT:
                self._calls_at_reset = self.pipe.stats.calls
                self.pipe.reset()
            logger.info("ipr-crawl: Redis answers again; its calls are back on the event loop")
            if self.on_back is not None:  # leases a lost reply gave this process unknowingly go back
                self.on_back()

    def submit(
        self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], Any] | None = None, adds: bool = True,
        call: Call | None = None, failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """``fn(*args)`` (a store call), then ``then(result)`` on the event loop: written to
        the pipelined connection while :attr:`on_pipe` (``call``: the same call as commands,
        e.g. :meth:`FrontierStore.pop_call`; without it ``fn`` runs on the Redis thread in
        the calls' order), at once while :attr:`on_loop`, else queued on the Redis thread.
        A Redis that stays unreachable stops the crawl (``on_down``); another error goes to
        ``failed`` (default: logged). ``adds``: the call may add requests (what
        ``has_pending_requests`` saw before is stale)."""
        if self.down:
            return
        if adds:
            self.gen += 1
        failed = failed or self.failed
        if self.on_pipe:
            assert self.pipe is not None
            blocking = functools.partial(fn, *args)
            if call is not None:
                self.pipe.send(call, blocking, then=then, failed=failed)
            else:
                self.pipe.job(blocking, then=then, failed=failed)
            return
        if self.io is None:  # no event loop to hand results to: at once
            result = self.guard(fn, *args)
            if then is not None and not self.down:
                then(result)
            return
        if self.on_loop:
            ok, result = self.loop_call(fn, *args)
            if ok:
                if then is not None:
                    then(result)
                return
        self.io.submit(fn, *args, then=self.then_caught_up(then), failed=failed)

    def deferred(self, fn: Callable[..., Any], *args: Any, adds: bool = True) -> Any:
        """``fn(*args)`` in the calls' order and never waited for on the event loop (while
        :attr:`on_pipe`, a job on the Redis thread once every call before it is answered;
        while Redis is away, queued on the Redis thread, which retries for up to
        ``IPR_REDIS_RETRY_SECS``): a :class:`~twisted.internet.defer.Deferred` of its
        result, fired on the event loop. It fails with the call's exception; Redis
        unreachable for good also stops the crawl (``on_down``), and once it has, every
        call fails with :class:`redis.ConnectionError` at once. For the middlewares'
        store calls (the conditional-GET middleware's)."""
        from twisted.internet.defer import Deferred

        d: Any = Deferred()

        def failed(exc: BaseException) -> None:
            if isinstance(exc, REDIS_DOWN):
                self.on_down(exc)
            d.errback(exc)

        if self.down:
            d.errback(redis.ConnectionError("Redis is unreachable; the crawl is stopping"))
            return d
        try:
            self.submit(fn, *args, then=d.callback, failed=failed, adds=adds)
        except Exception as exc:  # raised at once (on the loop, or without a thread)
            if not d.called:
                failed(exc)
            return d
        if self.down and not d.called:  # it found Redis gone at once (guard)
            d.errback(redis.ConnectionError("Redis is unreachable; the crawl is stopping"))
        return d

    def loop_call(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """``fn(*args)`` on the event loop, its wait counted in ``ipr/redis/loop_wait_*``:
        ``(True, result)``, or, when Redis failed, ``(False, the then of the record call
        handed over with it)`` and every call goes to the Redis thread (:meth:`hand_over`)."""
        assert self.io is not None
        started = time.perf_counter()
        try:
            result = fn(*args)
        except REDIS_DOWN as exc:
            return False, self.hand_over(exc)
        self.io.blocked.add(time.perf_counter() - started)
        return True, result

    def then_caught_up(self, then: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
        """``then``, followed by :meth:`caught_up` (for calls queued on the Redis thread)."""
        def done(result: Any) -> None:
            if then is not None:
                then(result)
            self.caught_up()

        return done

    def sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` waited for: for start-up, close and rare calls. While Redis is away,
        on the Redis thread after every call queued before it (counted in
        ``ipr/redis/loop_wait_*``); raises :class:`TimeoutError` after
        :data:`SYNC_WHILE_AWAY_SECS` (the call still runs later)."""
        self.gen += 1
        if self.io is None:
            return fn(*args)
        if self.on_loop or self.on_pipe:
            ok, result = self.loop_call(fn, *args)
            if ok:
                return result
        return self.io.call(fn, *args, timeout=SYNC_WHILE_AWAY_SECS if self.away else None)

    def submit_record(
        self, page_id: bytes, tie: int, links: list[Link], lease: bytes, where: dict[str, int],
        then: Callable[[RecordResult], None], failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """A page's record call. On the event loop it is sent without waiting and its reply
        read when the next page is recorded or before the next pop
        (:meth:`FrontierStore.send_record_page`): the crawler parses the next page while
        Redis runs the script. Through the pipelined connection it travels with the calls
        made in the same turn of the loop (the lease's settling is in the same script).
        ``failed(exc)``: the call failed with another error than Redis away (a script
        error): default, logged."""
        failed = failed or self.failed
        if self.on_pipe:
            assert self.pipe is not None
            self.gen += 1
            self.pipe.send(
                self.store.record_call(page_id, tie, links, lease, **where),
                functools.partial(self.store.record_page, page_id, tie, links, lease, **where),
                then=then, failed=failed,
            )
            return
        if self.on_loop and hasattr(self.store, "take_outstanding"):
            self.gen += 1
            # the send, and the last page's reply read
            try:
                ok, handed = self.loop_call(functools.partial(self.store.send_record_page, page_id, tie, links,
                                                              lease, then=then, **where))
            except redis.ResponseError as exc:
                failed(exc)
                return
            if ok or handed is then:  # handed: this page's call was the outstanding one, on the thread now
                return
        record = functools.partial(self.store.record_page, page_id, tie, links, lease, **where)
        self.submit(record, then=then, failed=failed)

    def failed(self, exc: BaseException) -> None:
        """A call on the Redis thread failed: Redis gone for good, or full, stops the crawl; else logged."""
        if stops_the_crawl(exc):
            self.on_down(exc)
        else:
            logger.error("ipr-crawl: a Redis call failed: %s", exc, exc_info=(type(exc), exc, exc.__traceback__))
