"""The pipelined calls of a Redis Cluster and of buckets: :class:`PipeRouter`.

One crawl's keys share one hash tag, so they live on one Cluster slot; a crawl split
into buckets (:mod:`ipr_crawl.store.buckets`) has one hash tag, so one slot, per bucket.
A *route* is such a key space: route ``b`` is bucket ``b`` (route 0 alone without
buckets). The router keeps one :class:`~ipr_crawl.store.pipe.RedisPipe` per server
(a Cluster master, or the one server of buckets without a Cluster) and writes each
:class:`~ipr_crawl.store.pipe.Call` to the pipe of its route's server, found from
redis-py's Cluster client (``nodes_manager``, the slot map it keeps up to date).
A :class:`Fanout` is one store call made of calls on several routes (a pop's pending
check over every bucket, an ack of leases from several buckets): its parts go out on
their pipes together and its value is computed once every part has answered.

What the router keeps of :class:`~ipr_crawl.store.pipe.RedisPipe`'s contract:

- calls keep the order they were made in on each route (each route is on one pipe,
  whose calls keep their order), and a page's record, its ack and the next pop travel
  together in one write per server;
- a *job* (a blocking function of the store: a relay of bucket mode, a revisit
  refresh) runs once every call before it has its answer, on every route, and the calls
  after it are written once it is done;
- a break of any pipe (a connection lost, a reply late, ``MOVED``/``ASK``/``TRYAGAIN``/
  ``CLUSTERDOWN``/``LOADING`` of a slot that moved or a master that failed over, or
  ``NOSCRIPT``) breaks the router: every call not answered, in the order they were made,
  goes to ``on_broken`` as the blocking function that gives the same value (the
  scheduler runs them on its Redis thread, whose Cluster client follows the redirects
  and retries; the store's calls are safe to run twice). :meth:`PipeRouter.reset` then
  reads the slot map again at the next call.

The same design as StackExchange.Redis's ConnectionMultiplexer (one multiplexed
connection per server, a Cluster as the set of them: its Docs/PipelinesMultiplexers.md)
and joomcode/redispipe's cluster router (implicit pipelining per node).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio.connection as aconn
from redis.commands.core import Script
from redis.exceptions import AskError, BusyLoadingError, ClusterDownError, MovedError, NoScriptError, TryAgainError

from ipr_crawl.store.pipe import Call, PipeStats, RedisPipe, async_connection_factory

__all__ = ["REROUTE_ERRORS", "Fanout", "PipeRouter", "cluster_connect_for", "routed"]

logger = logging.getLogger(__name__)

#: Replies that say the call must go elsewhere or later: the router breaks and the
#: blocking client (which follows redirects and retries) runs its calls.
REROUTE_ERRORS = (MovedError, AskError, TryAgainError, ClusterDownError, BusyLoadingError, NoScriptError,
                  redis.ReadOnlyError)


@dataclass(slots=True)
class Fanout:
    """One store call made of :class:`~ipr_crawl.store.pipe.Call` s on several routes
    (each part's ``route``): ``parse(values)`` turns the parts' values, in the order of
    ``parts``, into the call's value. A part whose reply is an error makes the whole call
    fail with the first such error, once every part has answered."""

    parts: list[Call]
    parse: Callable[[list[Any]], Any]


@dataclass(slots=True, eq=False)
class _Item:
    seq: int
    call: Call | Fanout | None  # None: a job
    then: Callable[[Any], Any] | None
    failed: Callable[[BaseException], Any] | None
    fallback: Callable[[], Any]
    left: int = 0
    values: list[Any] = field(default_factory=list)
    error: BaseException | None = None


def cluster_connect_for(
    client: Any, route_keys: Sequence[str],
) -> Callable[[int], tuple[Hashable, Callable[[], aconn.AbstractConnection]]] | None:
    """For :class:`PipeRouter`: ``connect_for(route)`` gives the server that holds
    ``route_keys[route]`` (its ``host:port``) and a factory of asyncio connections to it.
    ``client`` is a redis-py ``RedisCluster`` (the master that owns the key's slot in
    its slot map, read at each call) or a plain ``Redis`` (its one server for every
    route). None when the client's connections have no asyncio twin
    (:func:`~ipr_crawl.store.pipe.async_connection_factory`)."""
    nodes = getattr(client, "nodes_manager", None)
    if nodes is None:
        factory = async_connection_factory(client)
        if factory is None:
            return None
        return lambda route: ("server", factory)

    def connect_for(route: int) -> tuple[Hashable, Callable[[], aconn.AbstractConnection]]:
        node = nodes.get_node_from_slot(client.keyslot(route_keys[route]))
        conn = node.redis_connection or client.get_redis_connection(node)
        factory = async_connection_factory(conn)
        if factory is None:
            raise redis.ConnectionError(f"no asyncio connection for the Cluster node {node.name}")
        return node.name, factory

    # a node's connection class must have an asyncio twin (TLS, unix sockets, password: yes)
    try:
        connect_for(0)
    except (redis.RedisError, KeyError, AttributeError):
        return None
    return connect_for


class PipeRouter:
    """Pipelined calls over the servers of a Redis Cluster or of buckets (see the module
    docstring). The same methods as :class:`~ipr_crawl.store.pipe.RedisPipe`, which the
    scheduler's :class:`~ipr_crawl.scheduler.redis_calls.RedisCalls` uses:
    ``connect_for(route)`` gives a route's server (any hashable name) and a factory of its
    connections (:func:`cluster_connect_for`); ``scripts``, ``run_job``, ``on_broken`` and
    ``loop`` as RedisPipe's. Everything runs on the event loop's thread."""

    def __init__(
        self,
        connect_for: Callable[[int], tuple[Hashable, Callable[[], aconn.AbstractConnection]]],
        scripts: Sequence[Script],
        run_job: Callable[[Callable[[], Any], Callable[[bool, Any], None]], None],
        on_broken: Callable[[list[tuple[Callable[[], Any], Any, Any]], BaseException], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._connect_for = connect_for
        self._scripts = list(scripts)
        self._run_job = run_job
        self._on_broken = on_broken
        self.loop = loop or asyncio.get_running_loop()
        #: server name -> its pipe; route -> server name (read again after a reset)
        self._pipes: dict[Hashable, RedisPipe] = {}
        self._route_server: dict[int, Hashable] = {}
        self._seq = itertools.count()
        #: calls written to the pipes and not answered, by seq (their order)
        self._inflight: dict[int, _Item] = {}
        #: calls and jobs not written yet: behind a job, in order
        self._held: deque[_Item] = deque()
        self._job_running = False
        self.broken: BaseException | None = None
        self.closed = False
        self._stats = PipeStats()
        # the counts of pipes closed by breaks (stats)
        self._retired = PipeStats()

    # -- RedisPipe's contract -----------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Calls and jobs queued and not answered yet."""
        return len(self._inflight) + len(self._held) + int(self._job_running)

    @property
    def stats(self) -> PipeStats:
        """The pipes' writes, commands and round trip, the router's answered calls, jobs and breaks."""
        live = list(self._pipes.values())
        st = self._stats
        st.writes = self._retired.writes + sum(p.stats.writes for p in live)
        st.commands = self._retired.commands + sum(p.stats.commands for p in live)
        rtts = [p.stats.rtt_secs for p in live if p.stats.calls]
        if rtts:
            st.rtt_secs = max(rtts)
        return st

    def send(
        self, call: Call | Fanout, fallback: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """Queue ``call`` (see :meth:`RedisPipe.send`); raises :class:`RuntimeError` once
        the router is broken or closed."""
        self._queue(_Item(next(self._seq), call, then, failed, fallback))

    def job(
        self, fn: Callable[[], Any], then: Callable[[Any], Any] | None = None,
        failed: Callable[[BaseException], Any] | None = None,
    ) -> None:
        """Queue a blocking ``fn()`` in the calls' order (see :meth:`RedisPipe.job`)."""
        self._queue(_Item(next(self._seq), None, then, failed, fn))

    def stalled_for(self) -> float:
        """The longest :meth:`RedisPipe.stalled_for` of the pipes."""
        if self.broken is not None or self.closed:
            return 0.0
        return max((p.stalled_for() for p in self._pipes.values()), default=0.0)

    def describe(self) -> str:
        """The router's state in one line, for a log."""
        pipes = "; ".join(f"{name}: {p.describe()}" for name, p in self._pipes.items())
        return (f"{len(self._inflight)} calls awaited, {len(self._held)} held, job running {self._job_running}; "
                f"{pipes}")

    def abandon_if_stalled(self, secs: float) -> bool:
        """The watchdog (:meth:`RedisPipe.abandon_if_stalled`): a pipe that has not moved
        for ``secs`` breaks the router."""
        stalled = self.stalled_for()
        if stalled <= 0.0 or stalled < secs:
            return False
        logger.warning("ipr-crawl: the pipelined Redis connections have not moved for %.0f s (%s); their calls go "
                       "to the Redis thread", stalled, self.describe())
        self._break(TimeoutError(f"the pipelined connections did not move for {stalled:.0f} s"))
        return True

    def reset(self) -> None:
        """After a break, once its calls were answered elsewhere: the next call reads the
        slot map and opens new connections."""
        if self.closed or self.broken is None:
            return
        self.broken = None
        self._route_server.clear()
        self._pump()

    def close(self) -> None:
        """Disconnect every pipe (calls not answered are dropped: call it once
        :attr:`outstanding` is 0)."""
        self.closed = True
        self._retire_pipes()

    # -- routing -------------------------------------------------------------------------
    def _queue(self, item: _Item) -> None:
        if self.broken is not None or self.closed:
            raise RuntimeError("the Redis pipes are broken or closed")
        self._held.append(item)
        self._pump()

    def _pump(self) -> None:
        """Write the held calls, in order, up to the first job; start that job once every
        call before it has its answer."""
        while self._held and self.broken is None and not self.closed and not self._job_running:
            head = self._held[0]
            if head.call is None:
                if self._inflight:
                    return
                self._held.popleft()
                self._start_job(head)
                return
            self._held.popleft()
            try:
                self._write(head)
            except Exception as exc:  # noqa: BLE001 - no server for a route (a slot map being rebuilt): a break
                self._held.appendleft(head)
                self._break(exc)
                return

    def _pipe_of(self, route: int) -> RedisPipe:
        server = self._route_server.get(route)
        pipe = self._pipes.get(server) if server is not None else None
        if pipe is None or pipe.broken is not None or pipe.closed:
            server, factory = self._connect_for(route)
            self._route_server[route] = server
            pipe = self._pipes.get(server)
            if pipe is None or pipe.broken is not None or pipe.closed:
                pipe = RedisPipe(factory, self._scripts, self._no_job, functools.partial(self._pipe_broken, server),
                                 self.loop)
                self._pipes[server] = pipe
        return pipe

    def _write(self, item: _Item) -> None:
        call = item.call
        parts: list[Call] = call.parts if isinstance(call, Fanout) else [call]  # type: ignore[list-item]
        pipes = [self._pipe_of(part.route) for part in parts]  # raises before anything is written
        self._inflight[item.seq] = item
        item.left = len(parts)
        item.values = [None] * len(parts)
        if not parts:
            self.loop.call_soon(self._finish, item)
            return
        for i, (part, pipe) in enumerate(zip(parts, pipes)):
            pipe.send(
                part, _never, then=functools.partial(self._part_done, item, i),
                failed=functools.partial(self._part_failed, item, i),
            )

    def _part_done(self, item: _Item, i: int, value: Any) -> None:
        if self.broken is not None or item.seq not in self._inflight:
            return
        item.values[i] = value
        item.left -= 1
        if item.left == 0:
            self._finish(item)

    def _part_failed(self, item: _Item, i: int, exc: BaseException) -> None:
        if self.broken is not None or item.seq not in self._inflight:
            return
        if isinstance(exc, REROUTE_ERRORS):  # the slot moved, a failover, a script flush: the blocking client's
            self._break(exc)
            return
        item.error = item.error or exc
        item.left -= 1
        if item.left == 0:
            self._finish(item)

    def _finish(self, item: _Item) -> None:
        if self._inflight.pop(item.seq, None) is None:
            return
        self._stats.calls += 1
        try:
            if item.error is not None:
                raise item.error
            call = item.call
            value = call.parse(item.values) if isinstance(call, Fanout) else item.values[0]
        except Exception as exc:  # noqa: BLE001 - handed to the caller's failed
            _deliver_error(item, exc)
        else:
            try:
                if item.then is not None:
                    item.then(value)
            except Exception:  # a caller's then() raised: logged, the router goes on
                logger.exception("ipr-crawl: handling a pipelined Redis reply failed")
        if not self._inflight:
            self._pump()

    # -- jobs, breaks ----------------------------------------------------------------------
    def _start_job(self, item: _Item) -> None:
        self._job_running = True
        self._stats.jobs += 1

        def done(ok: bool, value: Any) -> None:
            self._job_running = False
            try:
                if not ok:
                    _deliver_error(item, value)
                elif item.then is not None:
                    item.then(value)
            except Exception:  # a caller's then() raised: logged; the calls after it are written
                logger.exception("ipr-crawl: handling a pipelined Redis job's result failed")
            finally:
                self._pump()

        self._run_job(item.fallback, done)

    @staticmethod
    def _no_job(fn: Callable[[], Any], done: Callable[[bool, Any], None]) -> None:
        # a pipe of the router runs no job; one that asks (NOSCRIPT) breaks the router
        done(False, NoScriptError("NOSCRIPT: a script of a routed call was flushed"))

    def _pipe_broken(self, server: Hashable, items: list[Any], exc: BaseException) -> None:
        if self._pipes.get(server) is not None:
            self._break(exc)

    def _break(self, exc: BaseException) -> None:
        if self.broken is not None or self.closed:
            return
        self.broken = exc
        self._stats.breaks += 1
        items = [self._inflight[seq] for seq in sorted(self._inflight)] + list(self._held)
        self._inflight.clear()
        self._held.clear()
        self._retire_pipes()
        self._on_broken([(i.fallback, i.then, i.failed) for i in items], exc)

    def _retire_pipes(self) -> None:
        pipes, self._pipes = self._pipes, {}
        for pipe in pipes.values():
            self._retired.writes += pipe.stats.writes
            self._retired.commands += pipe.stats.commands
            pipe.close()


def _never() -> Any:  # a part's blocking form: the router hands on whole calls, never parts
    raise AssertionError("a routed part is never run alone")


def _deliver_error(item: _Item, exc: BaseException) -> None:
    if item.failed is not None:
        item.failed(exc)
    else:
        logger.error("ipr-crawl: a pipelined Redis call failed: %s", exc, exc_info=(type(exc), exc, exc.__traceback__))


def routed(call: Call, route: int, after: Callable[[Any], Any] | None = None) -> Call:
    """``call`` on ``route``; ``after(value)`` (if given) gives the value instead."""
    call.route = route
    if after is not None:
        parse = call.parse
        call.parse = lambda replies: after(parse(replies))
    return call

