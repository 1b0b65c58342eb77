"""The pipelined calls under a Twisted reactor that is not asyncio's: :class:`ThreadedPipe`.

Scrapy's default reactor runs on asyncio, and its reactor-less mode is asyncio alone:
there the pipe (:class:`~ipr_crawl.store.pipe.RedisPipe`, or
:class:`~ipr_crawl.store.router.PipeRouter` for a Cluster or buckets) lives on Scrapy's
own loop. With another ``TWISTED_REACTOR`` (epoll, select, poll) there is no asyncio
loop to put it on. The same pipe then runs on a private asyncio loop in one I/O thread,
and every answer is handed to the reactor's thread (``reactor.callFromThread``): one
design, two placements. The reactor never waits on Redis: a Redis frozen or away stalls
the I/O thread's loop, not the crawl.

:class:`ThreadedPipe` has the pipe's methods, called on the reactor's thread: a call is
passed to the I/O loop with ``call_soon_threadsafe`` (so calls keep the order they were
made in) and its ``then`` / ``failed`` run on the reactor's thread, as do the calls a
break hands on (``on_broken``). A call that reaches a pipe broken meanwhile (the
reactor's thread had not heard of the break yet) is handed on the same way, after the
break's own calls.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadedPipe"]

logger = logging.getLogger(__name__)

Handed = list[tuple[Callable[[], Any], Any, Any]]


class ThreadedPipe:
    """A pipe built by ``make(loop, run_job, on_broken)`` on a private asyncio loop in a
    daemon thread named ``name``; ``run_job(fn, done)`` runs a job off both loops and calls
    ``done(ok, value)`` on the reactor's thread (the scheduler's Redis thread);
    ``on_broken(items, exc)`` and every answer run through ``deliver(fn, *args)`` on the
    reactor's thread (:func:`~ipr_crawl.scheduler.compat.loop_deliverer`)."""

    def __init__(
        self, make: Callable[[asyncio.AbstractEventLoop, Any, Any], Any],
        run_job: Callable[[Callable[[], Any], Callable[[bool, Any], None]], None],
        on_broken: Callable[[Handed, BaseException], None], deliver: Callable[..., Any], name: str,
    ) -> None:
        self._deliver = deliver
        self._on_broken = on_broken
        self._run_job = run_job
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: the calls not answered, by id: (then, failed, fallback); touched on the reactor's thread only
        self._open: dict[int, tuple[Any, Any, Callable[[], Any]]] = {}
        self._ids = itertools.count()
        self.closed = False
        self.pipe = make(self.loop, self._job_on_loop, self._broken_on_loop)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    # -- the pipe's contract, on the reactor's thread ------------------------------------
    @property
    def broken(self) -> BaseException | None:
        return self.pipe.broken

    @property
    def stats(self) -> Any:
        return self.pipe.stats

    @property
    def outstanding(self) -> int:
        """Calls and jobs made and not answered (nor handed on by a break)."""
        return len(self._open)

    def send(
        self, call: Any, fallback: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        self._queue(call, fallback, then, failed)

    def job(
        self, fn: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        self._queue(None, fn, then, failed)

    def _queue(self, call: Any, fallback: Callable[[], Any], then: Any, failed: Any) -> None:
        """A call (``call`` None: a job) passed to the I/O loop, in the order made."""
        if self.closed:
            raise RuntimeError("the Redis pipe is closed")
        key = self._track(then, failed, fallback)
        self.loop.call_soon_threadsafe(self._send_on_loop, key, call, fallback)

    def stalled_for(self) -> float:
        return self.pipe.stalled_for()  # a few reads of the I/O loop's state: a moment's view is enough

    def describe(self) -> str:
        return self.pipe.describe()

    def abandon_if_stalled(self, secs: float) -> bool:
        stalled = self.stalled_for()
        if stalled <= 0.0 or stalled < secs:
            return False
        self.loop.call_soon_threadsafe(self.pipe.abandon_if_stalled, secs)
        return True

    def reset(self) -> None:
        self.loop.call_soon_threadsafe(self.pipe.reset)

    def close(self) -> None:
        """Close the pipe and stop the I/O thread (calls not answered are dropped)."""
        if self.closed:
            return
        self.closed = True

        def stop() -> None:
            self.pipe.close()
            # let the pipe's disconnects run, then stop
            self.loop.call_later(0.05, self.loop.stop)

        try:
            self.loop.call_soon_threadsafe(stop)
        except RuntimeError:  # the loop is closed already
            return
        self._thread.join(timeout=2.0)

    # -- between the threads ---------------------------------------------------------------
    def _track(self, then: Any, failed: Any, fallback: Callable[[], Any]) -> int:
        key = next(self._ids)
        self._open[key] = (then, failed, fallback)
        return key

    def _answer(self, key: int, ok: bool, value: Any) -> None:  # on the reactor's thread
        entry = self._open.pop(key, None)
        if entry is None:
            return
        then, failed, _ = entry
        if ok:
            if then is not None:
                then(value)
        elif failed is not None:
            failed(value)
        else:
            logger.error("ipr-crawl: a pipelined Redis call failed: %s", value,
                         exc_info=(type(value), value, value.__traceback__))

    def _handed(self, keys: list[int], exc: BaseException) -> None:  # on the reactor's thread
        items: Handed = []
        for key in keys:
            entry = self._open.pop(key, None)
            if entry is not None:
                then, failed, fallback = entry
                items.append((fallback, then, failed))
        self._on_broken(items, exc)

    def _send_on_loop(self, key: int, call: Any, fallback: Callable[[], Any]) -> None:  # on the I/O loop
        then = functools.partial(self._deliver, self._answer, key, True)
        failed = functools.partial(self._deliver, self._answer, key, False)
        keyed = functools.partial(_keyed, key, fallback)
        try:
            if call is None:
                self.pipe.job(keyed, then=then, failed=failed)
            else:
                self.pipe.send(call, keyed, then=then, failed=failed)
        except RuntimeError as exc:  # broken (or closed) before the reactor heard: handed on after the break's calls
            self._deliver(self._handed, [key], self.pipe.broken or exc)

    def _broken_on_loop(self, items: Handed, exc: BaseException) -> None:  # on the I/O loop
        self._deliver(self._handed, [fallback.args[0] for fallback, _, _ in items], exc)  # type: ignore[attr-defined]

    def _job_on_loop(self, fn: Callable[[], Any], done: Callable[[bool, Any], None]) -> None:  # on the I/O loop
        def on_loop(ok: bool, value: Any) -> None:
            try:
                self.loop.call_soon_threadsafe(done, ok, value)
            except RuntimeError:  # closed meanwhile
                pass

        self._deliver(self._run_job, fn, on_loop)


def _keyed(key: int, fallback: Callable[[], Any]) -> Any:
    """A call's blocking form, keyed by its id (a break hands the ids on)."""
    return fallback()


def open_pipe(
    store: Any, run_job: Callable[[Callable[[], Any], Callable[[bool, Any], None]], None],
    on_broken: Callable[[Handed, BaseException], None], deliver: Callable[..., Any], name: str,
) -> Any:
    """The pipelined calls of ``store`` (a FrontierStore or a BucketedFrontier): a
    :class:`~ipr_crawl.store.pipe.RedisPipe` to one server, a
    :class:`~ipr_crawl.store.router.PipeRouter` for a Redis Cluster or buckets; on the
    running asyncio loop, else (another Twisted reactor) in a :class:`ThreadedPipe`.
    None for connections with no asyncio twin (Sentinel)."""
    from ipr_crawl.store.connection import is_cluster
    from ipr_crawl.store.pipe import RedisPipe, async_connection_factory
    from ipr_crawl.store.router import PipeRouter, cluster_connect_for

    routed = is_cluster(store.client) or hasattr(store, "stores")
    connect: Any = (cluster_connect_for(store.client, store.route_keys()) if routed
                    else async_connection_factory(store.client))
    if connect is None:
        return None
    kind: Any = PipeRouter if routed else RedisPipe

    def make(loop: asyncio.AbstractEventLoop, job: Any, broken: Any) -> Any:
        return kind(connect, store.pipe_scripts(), job, broken, loop)

    try:
        return make(asyncio.get_running_loop(), run_job, on_broken)
    except RuntimeError:  # no asyncio loop runs: another Twisted reactor
        return ThreadedPipe(make, run_job, on_broken, deliver, name)
