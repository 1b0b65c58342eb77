"""A TCP proxy in front of a Redis server that can lose a reply: the fault-injection
checker's (tests/faults) "a connection cut after a command was sent and before its
reply".

:class:`CutProxy` listens on a free loopback port (:attr:`CutProxy.url`) and forwards
every connection to ``host:port`` on a thread of its own (an asyncio loop).
:meth:`CutProxy.cut_next_reply` arms it: the next chunk a server sends to a client is
dropped and both sides of that connection are reset (the command ran; its client never
hears of it). :meth:`CutProxy.cut_all` resets every connection at once;
:meth:`CutProxy.slow` delays every reply chunk (a slow network or an overloaded server).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

__all__ = ["CutProxy"]


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a network cut looks to both ends."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class CutProxy:
    """See the module docstring. ``start()`` returns self; ``stop()`` ends it."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.cuts = 0
        self._armed = 0
        self.delay = 0.0  # seconds each reply chunk waits (slow)
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cut-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> CutProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut_next_reply(self) -> None:
        """Drop the next reply any client is sent and reset its connection."""
        self._loop.call_soon_threadsafe(self._arm)

    def cut_all(self) -> None:
        """Reset every connection now."""
        self._loop.call_soon_threadsafe(self._cut_all)

    def slow(self, delay: float) -> None:
        """Delay every reply chunk by ``delay`` s from now on (0: no more)."""
        self.delay = delay

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            self._cut_all()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- on the proxy's loop ------------------------------------------------------------
    def _arm(self) -> None:
        self._armed += 1

    def _cut_all(self) -> None:
        for client, upstream in list(self._pairs):
            _reset(client)
            _reset(upstream)
        self._pairs.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        await asyncio.gather(self._pump(reader, up_writer, pair, replies=False),
                             self._pump(up_reader, writer, pair, replies=True), return_exceptions=True)
        self._pairs.discard(pair)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter], replies: bool) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if replies and self.delay:
                    await asyncio.sleep(self.delay)
                if replies and self._armed:
                    self._armed -= 1
                    self.cuts += 1
                    _reset(pair[0])
                    _reset(pair[1])
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for w in pair:
                if not w.is_closing():
                    w.close()
