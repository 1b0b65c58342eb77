"""Pipelined, non-blocking Redis I/O on the asyncio event loop: :class:`RedisPipe`.

One connection (redis-py's asyncio :class:`redis.asyncio.connection.Connection`, with
the hiredis parser when installed), one writer and one reader task:

- :meth:`RedisPipe.send` queues a :class:`Call` (its Redis commands and the parser of
  their replies) and returns at once. Every call queued in one turn of the event loop
  goes out in **one write**; the next write does not wait for the replies of the
  last (Redis pipelining: "Using pipelining to speedup Redis queries",
  https://redis.io/docs/latest/develop/use/pipelining/). The reader reads the
  replies as they come, in order, and hands each call's parsed value to its ``then``
  on the event loop.
- :meth:`RedisPipe.job` queues a blocking function (a rare call of the store that has
  no :class:`Call` form) in the same order: it runs, through ``run_job`` (the
  scheduler's Redis thread), once every call before it has its reply, and the calls
  after it are written once it is done. So the calls run in the order they were made.
- A connection lost, or a reply that does not come within the client's
  ``socket_timeout``: the pipe breaks (:attr:`RedisPipe.broken`) and hands every call
  not answered, in order, to ``on_broken`` (the scheduler runs them again on its Redis
  thread, which retries; a call written and lost may have run: the store's calls are
  safe to run twice). :meth:`RedisPipe.reset` opens a new connection at the next call.

Every script is loaded (``SCRIPT LOAD``) at the head of a new connection, so an
``EVALSHA`` never meets ``NOSCRIPT`` after a server restart; one that does (an
operator's ``SCRIPT FLUSH``) is run again as a job (redis-py's ``Script`` loads it):
nothing is lost, but the calls written with it in the same write ran before it.

The same design as StackExchange.Redis's multiplexer ("Pipelines and Multiplexers",
its Docs/PipelinesMultiplexers.md) and joomcode/redispipe: callers never wait for each
other's replies; one connection carries them all, replies matched in order.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio.connection as aconn
from redis.commands.core import Script

__all__ = ["PIPE_ERRORS", "Call", "PipeStats", "RedisPipe", "async_connection_factory", "evalsha"]

logger = logging.getLogger(__name__)

#: Errors that break the pipe: the connection is lost or a reply did not come in time.
PIPE_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)


@dataclass(slots=True)
class Call:
    """One store call as Redis commands: ``commands`` (each a tuple of arguments, e.g.
    ``("EVALSHA", sha, 2, key1, key2, arg)``) and ``parse(replies)``, which turns their
    replies (a list, one per command, in order) into the call's value. A reply that is
    an error is a :class:`redis.ResponseError` in that list; ``parse`` is not called then."""

    commands: list[tuple[Any, ...]]
    parse: Callable[[list[Any]], Any]
    #: the key space it runs in (the bucket; 0 without buckets): its server, for
    #: :class:`~ipr_crawl.store.router.PipeRouter`
    route: int = 0


def evalsha(script: Script, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
    """The ``EVALSHA`` command of a redis-py ``Script`` (Redis ``EVALSHA sha numkeys key… arg…``)."""
    return ("EVALSHA", script.sha, len(keys), *keys, *args)


@dataclass(slots=True, eq=False)
class _Item:
    call: Call | None
    then: Callable[[Any], Any] | None
    failed: Callable[[BaseException], Any] | None
    #: the blocking function that gives the same value (for a job, or run again after a break)
    fallback: Callable[[], Any]
    sent_at: float = 0.0
    #: handed to ``on_broken`` by a break: answered there, never written again here
    handed: bool = False


@dataclass(slots=True)
class PipeStats:
    """What a pipe did: ``writes`` (socket writes), ``commands`` written, ``calls`` answered,
    ``jobs`` run in order on the Redis thread, ``breaks``, and the round trip of the last
    replies (``rtt_secs``: an exponential moving average, from a call's write to its reply)."""

    writes: int = 0
    commands: int = 0
    calls: int = 0
    jobs: int = 0
    breaks: int = 0
    rtt_secs: float = 0.0
    rtts: list[float] = field(default_factory=list)


def async_connection_factory(client: redis.Redis) -> Callable[[], aconn.AbstractConnection] | None:
    """A factory of asyncio connections to the same server, with the same options
    (host/port or unix socket, TLS, password, db, timeouts), as ``client``'s pool at the
    time of each connect; None when the pool's connection class has no asyncio twin here
    (Sentinel, a cluster)."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None
    twins: dict[type, type] = {
        redis.connection.Connection: aconn.Connection,
        redis.connection.UnixDomainSocketConnection: aconn.UnixDomainSocketConnection,
        redis.connection.SSLConnection: aconn.SSLConnection,
    }
    cls: Any = twins.get(pool.connection_class)
    if cls is None or pool.connection_kwargs.get("credential_provider") is not None:
        return None  # no twin, or a credential provider of the sync API: keep the blocking path
    accepted: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            accepted |= set(inspect.signature(vars(klass)["__init__"]).parameters)
    # the sync client's own objects (its retry policy, its pool) are not the asyncio ones
    # (a Cluster node's `redis_connect_func` is the sync client's on_connect: READONLY for replicas, not
    # wanted on a master's pipe)
    skip = {"retry", "credential_provider", "event_dispatcher", "connection_pool", "maint_notifications_config",
            "redis_connect_func"}

    def connect() -> aconn.AbstractConnection:
        # read at each connect: a restarted embedded server listens on a new socket, and
        # the retry layer points the pool's options at it (store/retry.py)
        kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in accepted and k not in skip}
        return cls(**kwargs)

    return connect


def _is_load(item: _Item) -> bool:
    return item.call is not None and bool(item.call.commands) and item.call.commands[0][:2] == ("SCRIPT", "LOAD")


class RedisPipe:
    """Calls written without waiting, replies read in order (see the module docstring).

    ``connect()`` makes a new, unconnected :class:`redis.asyncio.connection.Connection`;
    ``scripts`` are loaded at the head of each connection; ``run_job(fn, done)`` runs
    ``fn()`` off the event loop and calls ``done(ok, value)`` on it (the Redis thread);
    ``on_broken(items, exc)`` receives the calls not answered when the pipe breaks, as
    ``(fallback, then, failed)`` triples in order. Everything runs on the event loop's thread.
    """

    def __init__(
        self,
        connect: Callable[[], aconn.AbstractConnection],
        scripts: Sequence[Script],
        run_job: Callable[[Callable[[], Any], Callable[[bool, Any], None]], None],
        on_broken: Callable[[list[tuple[Callable[[], Any], Any, Any]], BaseException], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._connect = connect
        self._scripts = list(scripts)
        self._run_job = run_job
        self._on_broken = on_broken
        self.loop = loop or asyncio.get_running_loop()
        self._conn: aconn.AbstractConnection | None = None
        self._unsent: deque[_Item] = deque()
        self._sent: deque[_Item] = deque()
        self._flush_due = False
        self._writing = False
        #: the calls of the write under way while they are in no queue (it connects)
        self._batch: list[_Item] = []
        self._job_running = False
        self._reader: asyncio.Task[None] | None = None
        self._replies_due = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: the error that broke the pipe (None while it works)
        self.broken: BaseException | None = None
        self.closed = False
        self.stats = PipeStats()
        #: bumped by every break: a write begun before it neither writes nor queues again
        self._epoch = 0
        #: when the pipe last moved (a reply read, a write done, a job done, work queued while idle)
        self._moved_at = time.monotonic()

    # -- the callers' side ---------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Calls and jobs queued and not answered yet."""
        return len(self._unsent) + len(self._sent) + len(self._batch) + int(self._job_running)

    def send(
        self, call: Call, fallback: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """Queue ``call``; ``then(value)`` (or ``failed(exception)`` for an error reply)
        on the event loop once its replies are in. ``fallback()``: the same call, blocking
        (run on the Redis thread if the pipe breaks before the reply). Raises
        :class:`RuntimeError` once the pipe is broken or closed."""
        self._queue(_Item(call, then, failed, fallback))

    def job(
        self, fn: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """Queue a blocking ``fn()`` in the calls' order (run through ``run_job``)."""
        self._queue(_Item(None, then, failed, fn))

    def stalled_for(self) -> float:
        """Seconds the pipe has had calls to write or replies to read without any moving
        (0.0 while it is idle, broken, or a job runs on the Redis thread, which has its own
        bounds). A reply overdue is bounded by ``socket_timeout``; this is the watchdog for
        the rest (:meth:`abandon_if_stalled`)."""
        if self.broken is not None or self.closed or self._job_running:
            return 0.0
        if not (self._unsent or self._sent or self._writing):
            return 0.0
        return time.monotonic() - self._moved_at

    def describe(self) -> str:
        """The pipe's state in one line, for a log."""
        head = self._sent[0] if self._sent else None
        waiting = f", the oldest reply awaited {time.monotonic() - head.sent_at:.1f} s" if head and head.sent_at else ""
        return (f"{len(self._unsent)} calls to write, {len(self._sent)} replies to read{waiting}, "
                f"writing {self._writing}, flush due {self._flush_due}, job running {self._job_running}, "
                f"connected {self._conn is not None}, reader running "
                f"{self._reader is not None and not self._reader.done()}")

    def abandon_if_stalled(self, secs: float) -> bool:
        """The watchdog: a pipe that has not moved for ``secs`` (:meth:`stalled_for`)
        breaks now, with a WARNING that says its state; its calls not answered go to
        ``on_broken``, in order. Returns whether it broke."""
        stalled = self.stalled_for()
        if stalled <= 0.0 or stalled < secs:
            return False
        logger.warning("ipr-crawl: the pipelined Redis connection has not moved for %.0f s (%s); its calls go to "
                       "the Redis thread", stalled, self.describe())
        self._break(TimeoutError(f"the pipelined connection did not move for {stalled:.0f} s"))
        return True

    def _queue(self, item: _Item) -> None:
        if self.broken is not None or self.closed:
            raise RuntimeError("the Redis pipe is broken or closed")
        if not (self._unsent or self._sent or self._writing or self._job_running):
            self._moved_at = time.monotonic()
        self._unsent.append(item)
        self._flush_soon()

    def reset(self) -> None:
        """After a break, once its calls were answered elsewhere: the next call opens a
        new connection."""
        if self.closed or self.broken is None:
            return
        self.broken = None
        self._conn = None
        self._flush_soon()

    def close(self) -> None:
        """Disconnect (calls not answered are dropped: call it once :attr:`outstanding` is 0)."""
        self.closed = True
        self._drop_connection()

    # -- writing ---------------------------------------------------------------------------
    def _flush(self) -> None:
        self._flush_due = False
        if self.broken is not None or self.closed or self._writing or self._job_running:
            return
        batch: list[_Item] = []
        while self._unsent:
            item = self._unsent[0]
            if item.call is None:  # a job: after every reply before it
                if batch or self._sent:
                    break
                self._unsent.popleft()
                self._start_job(item)
                break
            batch.append(self._unsent.popleft())
        if batch:
            self._writing = True
            self._batch = batch
            self._spawn(self._write(batch))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _connection(self, epoch: int) -> aconn.AbstractConnection:
        if self._conn is not None:
            return self._conn
        conn = self._connect()
        await conn.connect()
        if epoch != self._epoch or self.broken is not None or self.closed:  # broke meanwhile: not this one
            self._spawn(conn.disconnect(nowait=True))
            raise self.broken or ConnectionError("the pipe broke while connecting")
        self._conn = conn
        if self._scripts:  # loaded first: no EVALSHA of this connection meets NOSCRIPT
            loads = [("SCRIPT", "LOAD", s.script) for s in self._scripts]
            self._sent.appendleft(_Item(Call(loads, lambda replies: None), None, self._load_failed, lambda: None))
        if self._reader is None or self._reader.done():
            self._reader = self._spawn(self._read_loop())
        return conn

    @staticmethod
    def _load_failed(exc: BaseException) -> None:
        logger.error("ipr-crawl: SCRIPT LOAD failed on the pipelined connection: %s", exc)

    async def _write(self, batch: list[_Item]) -> None:
        epoch = self._epoch
        try:
            conn = await self._connection(epoch)
            now = time.monotonic()
            commands: list[tuple[Any, ...]] = []
            head = self._sent[0] if self._sent and self._sent[0].sent_at == 0.0 else None
            if head is not None:  # the SCRIPT LOADs of a new connection
                commands.extend(head.call.commands)  # type: ignore[union-attr]
                head.sent_at = now
            for item in batch:
                item.sent_at = now
                commands.extend(item.call.commands)  # type: ignore[union-attr]
            self._sent.extend(batch)
            self._batch = []  # in _sent now
            self.stats.writes += 1
            self.stats.commands += len(commands)
            self._replies_due.set()
            if not conn.is_connected:  # dropped by a break: redis-py would connect it again, unread
                raise self.broken or ConnectionError("the pipe's connection was dropped")
            await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
        except Exception as exc:  # noqa: BLE001 - lost, timed out, or closed under the write: a break
            self._writing, self._batch = False, []
            # a batch neither in _sent nor handed on by a break goes back first, in order
            for item in reversed(batch):
                if not item.handed and item not in self._sent:
                    self._unsent.appendleft(item)
            if epoch == self._epoch:
                self._break(exc)
            else:  # a break (and maybe a reset) came during the write: this error is that connection's
                self._flush_soon()
            return
        self._writing, self._batch = False, []
        self._moved_at = time.monotonic()
        self._flush_soon()

    # -- reading ---------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while not self.closed:
            if not self._sent or self._sent[0].sent_at == 0.0:
                self._replies_due.clear()
                await self._replies_due.wait()
                continue
            conn = self._conn
            if conn is None or self.broken is not None:
                return
            item = self._sent[0]
            assert item.call is not None
            replies: list[Any] = []
            try:
                for _ in item.call.commands:
                    try:
                        replies.append(await conn.read_response(disable_decoding=True))
                    except redis.ResponseError as exc:
                        replies.append(exc)
            except asyncio.CancelledError:
                return
            except Exception as exc:  # noqa: BLE001 - lost, timed out, or closed under the read: a break
                self._break(exc)
                return
            if self._sent and self._sent[0] is item:
                self._sent.popleft()
            self._moved_at = time.monotonic()
            try:
                if not item.handed:  # (handed: answered by on_broken already, a break during the read)
                    self._answered(item, replies)
            except Exception:  # a caller's then() raised: logged, the reader goes on
                logger.exception("ipr-crawl: handling a pipelined Redis reply failed")
            if not self._sent:  # a job may wait for every reply
                self._flush_soon()

    def _answered(self, item: _Item, replies: list[Any]) -> None:
        rtt = time.monotonic() - item.sent_at
        self.stats.rtt_secs = rtt if self.stats.calls == 0 else 0.9 * self.stats.rtt_secs + 0.1 * rtt
        self.stats.calls += 1
        errors = [r for r in replies if isinstance(r, redis.ResponseError)]
        if errors and any(isinstance(e, redis.exceptions.NoScriptError) for e in errors):
            # the script cache was flushed under us: run it as a job (redis-py loads it)
            self._unsent.appendleft(_Item(None, item.then, item.failed, item.fallback))
            self._scripts_lost()
            return
        try:
            if errors:
                raise errors[0]
            assert item.call is not None
            value = item.call.parse(replies)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's failed
            self._deliver_error(item, exc)
            return
        if item.then is not None:
            item.then(value)

    def _scripts_lost(self) -> None:
        """NOSCRIPT: load the scripts again at the head of the next write."""
        if self._conn is not None:
            loads = [("SCRIPT", "LOAD", s.script) for s in self._scripts]
            self._unsent.appendleft(_Item(Call(loads, lambda replies: None), None, self._load_failed, lambda: None))

    @staticmethod
    def _deliver_error(item: _Item, exc: BaseException) -> None:
        if item.failed is not None:
            item.failed(exc)
        else:
            logger.error("ipr-crawl: a pipelined Redis call failed: %s", exc, exc_info=(type(exc), exc, exc.__traceback__))

    # -- jobs, breaks ----------------------------------------------------------------------
    def _start_job(self, item: _Item) -> None:
        self._job_running = True
        self.stats.jobs += 1

        def done(ok: bool, value: Any) -> None:
            self._job_running = False
            self._moved_at = time.monotonic()
            try:
                if not ok:
                    self._deliver_error(item, value)
                elif item.then is not None:
                    item.then(value)
            except Exception:  # a caller's then() raised: logged; the calls after it are written
                logger.exception("ipr-crawl: handling a pipelined Redis job's result failed")
            finally:
                self._flush_soon()

        self._run_job(item.fallback, done)

    def _break(self, exc: BaseException) -> None:
        if self.broken is not None or self.closed:
            return
        self.broken = exc
        self.stats.breaks += 1
        self._epoch += 1
        # in order; the SCRIPT LOADs of the lost connection are not handed on
        items = [i for i in (*self._sent, *self._batch, *self._unsent) if not _is_load(i)]
        for item in items:
            item.handed = True
        self._sent.clear()
        self._unsent.clear()
        self._drop_connection()
        self._on_broken([(i.fallback, i.then, i.failed) for i in items], exc)

    def _flush_soon(self) -> None:
        """The one place a flush is scheduled: calls wait, none is due, the pipe works."""
        if self._unsent and not self._flush_due and self.broken is None and not self.closed:
            self._flush_due = True
            self.loop.call_soon(self._flush)

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done() and reader is not asyncio.current_task(self.loop):
            reader.cancel()
        self._replies_due.set()
        if conn is not None:
            self._spawn(conn.disconnect(nowait=True))
