"""One I/O thread that makes the scheduler's Redis calls off Scrapy's event loop.

Scrapy's scheduler API is synchronous (``next_request()`` returns a request or
None), and every Redis command of redis-py's blocking client waits for its reply.
Made on the reactor thread, each call stops the crawl for a round trip (and, while
Redis is away, for the whole retry budget, ``IPR_REDIS_RETRY_SECS``). The scheduler
hands its calls to one daemon thread instead: while Redis is away (``IPR_REDIS_THREAD=auto``,
the default: while it answers, the calls are made on the event loop, one attempt each),
or always (``IPR_REDIS_THREAD=always``):

- :meth:`RedisThread.submit` queues a call and returns at once; its result (or
  its exception) is handed to ``then`` (or ``failed``) on the event loop, through
  ``reactor.callFromThread`` (or the running asyncio loop's
  ``call_soon_threadsafe`` when no Twisted reactor is installed);
- :meth:`RedisThread.call` queues a call and waits for it (start-up, close and rare
  calls: a redirect, a request kept in memory); the time the loop waits is counted
  in :attr:`RedisThread.blocked`.

Calls run one at a time, in the order they were queued, so a pop queued after a
page's record call sees that page recorded: the exact order at
``CONCURRENT_REQUESTS=1`` does not depend on threads. Why a thread and not redis-py's
asyncio client: the same store code (its Lua scripts, the Redis Cluster and Sentinel
clients, the bounded retries of :mod:`ipr_crawl.store.retry`, the embedded server)
serves every reactor Scrapy supports, and the heartbeat already runs on a thread of
its own (docs/architecture.md, "The event loop never waits on Redis").

The thread waits for the interpreter each time one of its socket calls returns; the
scheduler shortens Python's switch interval while the crawl runs
(``IPR_GIL_SWITCH_SECS``), else a busy crawler would keep every reply waiting up to
5 ms. ``IPR_PROFILE_REDIS_THREAD=<file>`` in the environment writes a cProfile of the
thread there (``python -m cProfile`` sees only the main thread).
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ipr_crawl.scheduler.compat import loop_deliverer

__all__ = ["SWITCH_INTERVAL", "BlockedTime", "RedisThread", "SwitchInterval"]

logger = logging.getLogger(__name__)

_STOP = object()


class BlockedTime:
    """How long the event loop waited on Redis: a total and the longest waits.

    ``total_secs`` (seconds), ``calls`` (waits counted) and :meth:`p99_ms`, the 99th
    percentile of the waits in milliseconds, over at most the last 100,000 waits.
    """

    def __init__(self, keep: int = 100_000) -> None:
        self.total_secs = 0.0
        self.calls = 0
        self._keep = keep
        self._waits: list[float] = []

    def add(self, secs: float) -> None:
        self.total_secs += secs
        self.calls += 1
        if len(self._waits) >= self._keep:
            del self._waits[: self._keep // 2]
        self._waits.append(secs)

    def p99_ms(self) -> float:
        """The 99th percentile of the waits, in ms (0.0 before the first)."""
        if not self._waits:
            return 0.0
        ordered = sorted(self._waits)
        return 1000.0 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


class RedisThread:
    """A daemon thread running queued Redis calls in order (see the module docstring).

    ``in_flight`` counts the :meth:`submit` calls whose result has not reached the
    event loop yet; it is read and written on the event loop only.
    """

    def __init__(self, name: str = "ipr-redis", deliver: Callable[..., Any] | None = None) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._deliver = deliver or loop_deliverer()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.in_flight = 0
        self.blocked = BlockedTime()
        #: submitted calls that have run (read on any thread)
        self.done = 0
        #: CPU seconds the thread has used (redis-py's work: packing commands, reading replies)
        self.cpu_secs = 0.0
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    @property
    def name(self) -> str:
        """The thread's name."""
        return self._thread.name

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """Queue ``fn(*args)``; ``then(result)`` or ``failed(exception)`` run on the event
        loop when it is done (without ``failed``, an exception is logged as an ERROR)."""
        self.in_flight += 1
        self._jobs.put((fn, args, then, failed))

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """``fn(*args)`` run on the thread after every call queued before it; waits for
        it and returns its result or raises its exception. Raises :class:`TimeoutError`
        after ``timeout`` seconds (the call still runs later). From the thread itself
        (a callback of a queued call) it runs ``fn`` at once."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return fn(*args)
        done = threading.Event()
        box: list[Any] = []

        def job() -> None:
            try:
                box.append((True, fn(*args)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        started = time.perf_counter()
        self._jobs.put((job, (), _STOP, None))
        finished = done.wait(timeout)
        self.blocked.add(time.perf_counter() - started)
        if not finished:
            raise TimeoutError(f"Redis call {getattr(fn, '__name__', fn)} still running after {timeout} s")
        ok, value = box[0]
        if ok:
            return value
        raise value

    def stop(self) -> None:
        """End the thread once the calls queued so far have run (it does not wait)."""
        self._jobs.put(None)

    def _run(self) -> None:
        import os

        if os.environ.get("IPR_PROFILE_REDIS_THREAD"):
            import cProfile

            prof = cProfile.Profile()
            try:
                prof.runcall(self._run2)
            finally:
                prof.dump_stats(os.environ["IPR_PROFILE_REDIS_THREAD"])
            return
        self._run2()

    def _run2(self) -> None:
        started = time.thread_time()
        while True:
            self.cpu_secs = time.thread_time() - started
            job = self._jobs.get()
            if job is None:
                return
            fn, args, then, failed = job
            if then is _STOP:  # a call() job: it hands its own result back
                fn()
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop
                self.done += 1
                self._deliver(self._finish, failed, exc, False)
            else:
                self.done += 1
                self._deliver(self._finish, then, result, True)

    def _finish(self, callback: Callable[[Any], Any] | None, value: Any, ok: bool) -> None:
        self.in_flight -= 1
        if callback is not None:
            callback(value)
        elif not ok:
            logger.error("ipr-crawl: a Redis call failed", exc_info=(type(value), value, value.__traceback__))


class SwitchInterval:
    """Python's thread switch interval, shared by every scheduler of the process: the
    shortest asked for while any runs, Python's own again once the last has stopped
    (two crawlers in one process stop in any order)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: list[float] = []
        self.original = 0.0

    def shorten(self, secs: float) -> None:
        with self.lock:
            if not self.asked:
                self.original = sys.getswitchinterval()
            self.asked.append(secs)
            sys.setswitchinterval(min(self.asked))

    def restore(self, secs: float) -> None:
        with self.lock:
            if secs in self.asked:
                self.asked.remove(secs)
            sys.setswitchinterval(min(self.asked) if self.asked else self.original)


#: The process's one :class:`SwitchInterval` (``IPR_GIL_SWITCH_SECS``).
SWITCH_INTERVAL = SwitchInterval()
