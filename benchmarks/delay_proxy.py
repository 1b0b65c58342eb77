"""A TCP proxy that delays every chunk by a fixed one-way delay, both directions, order
kept (issue 47): Redis at a distance for ``crawl_rate.py --rtt-ms``.

It listens on ``--listen-host``:``--listen-port`` (``0``: a free port) and forwards each
connection to ``--to`` (``unix:/path`` or ``host:port``). Every chunk read from one side
is written to the other ``--delay-ms`` milliseconds after it was read (per connection
and direction: a queue of (due time, bytes), drained in order by a timer at the head's
due time; never reordered), so a request/reply round trip takes ``2 × delay`` more than
without the proxy, plus the proxy's own cost: two more loopback hops and a Python read
and write each way (~0.1 ms a round trip at ``--delay-ms 0``) and the timer's wake-up
(up to ~0.07 ms each way). Measured on an idle 2-core machine, 200 sequential redis-py
PINGs: 0.03 ms each direct, 0.13 ms at ``--delay-ms 0``, 1.16-1.26 ms at 0.5, 5.3 ms at 2.5.

Timers: the event loop runs on :class:`selectors.SelectSelector` (``select(2)``,
microsecond timeouts); epoll's timeouts are whole milliseconds, which would turn a
0.5 ms delay into ~1 ms.

When it listens it prints ``listening <host> <port>`` on stdout (one line, flushed). On
SIGTERM / SIGINT it stops and writes its counters as JSON to ``--stats`` (if given):
``connections``; ``c2s_chunks`` / ``c2s_bytes``: what it read from clients (each read
is one or more writes of a client, coalesced when they came faster than it read);
``s2c_chunks`` / ``s2c_bytes``: the same from the server; ``cpu``: its own CPU seconds;
``wall``: seconds it ran.

    python benchmarks/delay_proxy.py --listen-port 0 --to unix:/tmp/redis.sock --delay-ms 0.5 \\
        [--stats stats.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import selectors
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

#: The counters written to ``--stats``.
COUNTERS = ("connections", "c2s_chunks", "c2s_bytes", "s2c_chunks", "s2c_bytes")


class DelayedPipe:
    """One direction of one connection: :meth:`push` ``data`` (``None``: end of stream)
    now, it is written to ``dst`` ``delay`` seconds later, after everything pushed before."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float, on_eof: Any) -> None:
        self.loop = loop
        self.delay = delay
        self.on_eof = on_eof
        self.dst: asyncio.Transport | None = None
        self.queue: deque[tuple[float, bytes | None]] = deque()
        self.timer: asyncio.TimerHandle | None = None

    def push(self, data: bytes | None) -> None:
        if self.delay <= 0 and not self.queue:
            self._deliver(data)
            return
        due = self.loop.time() + self.delay
        self.queue.append((due, data))
        if self.timer is None:
            self.timer = self.loop.call_at(due, self._drain)

    def _drain(self) -> None:
        """Write the head (its due time came) and whatever else is due, in order; set
        the timer for the next head."""
        self.timer = None
        now = self.loop.time()
        out: list[bytes] = []
        first = True
        while self.queue and (first or self.queue[0][0] <= now):
            first = False
            _, data = self.queue.popleft()
            if data is None:
                self._flush(out)
                self._deliver(None)
                self.queue.clear()
                return
            out.append(data)
        self._flush(out)
        if self.queue:
            self.timer = self.loop.call_at(self.queue[0][0], self._drain)

    def _flush(self, out: list[bytes]) -> None:
        if out and self.dst is not None and not self.dst.is_closing():
            self.dst.write(b"".join(out))
        out.clear()

    def _deliver(self, data: bytes | None) -> None:
        if data is None:
            self.on_eof()
        elif self.dst is not None and not self.dst.is_closing():
            self.dst.write(data)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()


class _Side(asyncio.Protocol):
    """The protocol of one socket of a :class:`Connection` (``"client"`` or ``"server"``)."""

    def __init__(self, conn: Connection, side: str) -> None:
        self.conn = conn
        self.side = side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn.made(self.side, transport)

    def data_received(self, data: bytes) -> None:
        self.conn.received(self.side, data)

    def eof_received(self) -> bool:
        self.conn.received(self.side, None)
        return True  # keep the transport open: the EOF goes to the other side after the delay

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.lost(self.side)


class Connection:
    """One proxied connection: the client's socket, the upstream socket, a
    :class:`DelayedPipe` each way. The client is not read until upstream is connected."""

    def __init__(self, proxy: DelayProxy) -> None:
        self.proxy = proxy
        loop = proxy.loop
        self.client: asyncio.Transport | None = None
        self.server: asyncio.Transport | None = None
        self.c2s = DelayedPipe(loop, proxy.delay, lambda: self._eof("server"))
        self.s2c = DelayedPipe(loop, proxy.delay, lambda: self._eof("client"))
        self.eofs: set[str] = set()
        self.closed = False

    def made(self, side: str, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        _nodelay(transport)
        if side == "client":
            self.client = transport
            self.s2c.dst = transport
            transport.pause_reading()
            self.proxy.connections.add(self)
            self.proxy.counts["connections"] += 1
            self.proxy.loop.create_task(self._connect_upstream())
        else:
            self.server = transport
            self.c2s.dst = transport

    async def _connect_upstream(self) -> None:
        try:
            await self.proxy.open_upstream(lambda: _Side(self, "server"))
        except OSError as exc:
            print(f"delay_proxy: upstream {self.proxy.target}: {exc}", file=sys.stderr, flush=True)
            self.close()
            return
        if self.client is not None and not self.client.is_closing():
            self.client.resume_reading()
        else:
            self.close()

    def received(self, side: str, data: bytes | None) -> None:
        counts = self.proxy.counts
        if side == "client":
            if data is not None:
                counts["c2s_chunks"] += 1
                counts["c2s_bytes"] += len(data)
            self.c2s.push(data)
        else:
            if data is not None:
                counts["s2c_chunks"] += 1
                counts["s2c_bytes"] += len(data)
            self.s2c.push(data)

    def _eof(self, to: str) -> None:
        """The other side's end of stream reaches ``to`` (after the delay)."""
        transport = self.server if to == "server" else self.client
        self.eofs.add(to)
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()
        else:
            self.close()
        if len(self.eofs) == 2:
            self.close()

    def lost(self, side: str) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.c2s.cancel()
        self.s2c.cancel()
        for transport in (self.client, self.server):
            if transport is not None and not transport.is_closing():
                transport.close()
        self.proxy.connections.discard(self)


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class DelayProxy:
    """The proxy: ``start`` listens, each accepted client gets a :class:`Connection`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, target: str, delay: float) -> None:
        self.loop = loop
        self.target = target
        self.delay = delay
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.connections: set[Connection] = set()
        self.server: asyncio.AbstractServer | None = None

    async def open_upstream(self, factory: Any) -> Any:
        if self.target.startswith("unix:"):
            return await self.loop.create_unix_connection(factory, self.target[5:])
        host, _, port = self.target.rpartition(":")
        return await self.loop.create_connection(factory, host or "127.0.0.1", int(port))

    async def start(self, host: str, port: int) -> int:
        self.server = await self.loop.create_server(lambda: _Side(Connection(self), "client"), host, port)
        return int(self.server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.close()


def _tight_timer_slack() -> None:
    """Linux: timer slack 1 ns (``prctl(PR_SET_TIMERSLACK)``) instead of 50 µs, so a
    timer fires when due rather than up to 50 µs late; a no-op where it fails."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen-host", default="127.0.0.1")
    ap.add_argument("--listen-port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--to", required=True, help="upstream: unix:/path or host:port")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay, each direction")
    ap.add_argument("--stats", default="", help="write the counters here (JSON) on exit")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0, cpu0 = time.monotonic(), time.process_time()
    _tight_timer_slack()
    # select(2): microsecond timeouts (epoll's are whole milliseconds)
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    asyncio.set_event_loop(loop)
    proxy = DelayProxy(loop, args.to, args.delay_ms / 1000)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def serve() -> None:
        port = await proxy.start(args.listen_host, args.listen_port)
        print(f"listening {args.listen_host} {port}", flush=True)
        await stop.wait()
        proxy.stop()

    try:
        loop.run_until_complete(serve())
    finally:
        if args.stats:
            Path(args.stats).write_text(json.dumps({
                **proxy.counts, "delay_ms": args.delay_ms, "to": args.to,
                "cpu": time.process_time() - cpu0, "wall": time.monotonic() - t0,
            }))
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
