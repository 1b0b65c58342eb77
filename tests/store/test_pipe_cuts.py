"""The pipelined connection (ipr_crawl/store/pipe.py) under connection cuts: a real
redis-server behind the fault checker's proxy (tests/helpers/cut_proxy.py), calls and
jobs made at random while the proxy resets every connection or drops a reply, calls
handed to a blocking client while the pipe is broken, as the scheduler does
(``RedisCalls._pipe_broken``). Every call gets exactly one answer: a break during a
write once put the write's calls back in the queue after they were handed on, so they
were written again on the next connection and answered twice (a pop's leases handed to
the engine twice), or sat unsent until the next call came."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import time
from typing import Any

import pytest
import redis
from cut_proxy import CutProxy
from procs import RedisServer

from ipr_crawl.store.pipe import Call, RedisPipe, async_connection_factory

INCR = Call([("INCR", "k")], lambda replies: replies[0])


class _Harness:
    """A pipe and a blocking client behind one proxy; answers counted per call."""

    def __init__(self, proxy: CutProxy, loop: asyncio.AbstractEventLoop) -> None:
        self.client = redis.Redis.from_url(proxy.url, socket_timeout=30, socket_connect_timeout=5)
        self.thread = concurrent.futures.ThreadPoolExecutor(1)  # the scheduler's Redis thread
        self.loop = loop
        self.answers: dict[int, int] = {}
        self.away = False
        self.on_thread = 0
        factory = async_connection_factory(self.client)
        assert factory is not None
        self.pipe = RedisPipe(factory, [], self.run_job, self.on_broken, loop)

    def blocking_incr(self) -> Any:
        for _ in range(100):
            try:
                return self.client.incr("k")
            except redis.ConnectionError:
                time.sleep(0.02)
        raise AssertionError("Redis unreachable behind the proxy")

    def run_job(self, fn: Any, done: Any) -> None:
        def finished(fut: Any) -> None:
            exc = fut.exception()
            done(exc is None, fut.result() if exc is None else exc)

        self.loop.run_in_executor(self.thread, fn).add_done_callback(finished)

    def on_thread_call(self, fn: Any, then: Any) -> None:
        self.on_thread += 1

        def finished(fut: Any) -> None:
            self.on_thread -= 1
            if fut.exception() is None and then is not None:
                then(fut.result())
            if self.away and self.on_thread == 0:  # caught up: back on the pipe
                self.away = False
                self.pipe.reset()

        self.loop.run_in_executor(self.thread, fn).add_done_callback(finished)

    def on_broken(self, items: list[Any], exc: BaseException) -> None:
        self.away = True
        for fallback, then, _failed in items:
            self.on_thread_call(fallback, then)
        self.on_thread_call(lambda: None, None)

    def call(self, n: int, job: bool) -> None:
        self.answers[n] = 0

        def then(_: Any) -> None:
            self.answers[n] += 1

        if self.away:
            self.on_thread_call(self.blocking_incr, then)
        elif job:
            self.pipe.job(self.blocking_incr, then=then)
        else:
            self.pipe.send(INCR, self.blocking_incr, then=then)


@pytest.mark.parametrize("seed", [11, 12])
def test_every_call_is_answered_exactly_once_through_cuts(seed, tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    proxy = CutProxy("127.0.0.1", server.port).start()
    rng = random.Random(seed)

    async def main() -> _Harness:
        h = _Harness(proxy, asyncio.get_running_loop())
        n = 0
        end = time.monotonic() + 4.0
        while time.monotonic() < end:
            for _ in range(rng.randint(1, 5)):
                h.call(n, job=rng.random() < 0.1)
                n += 1
            r = rng.random()
            if r < 0.03:
                proxy.cut_all()
            elif r < 0.06:
                proxy.cut_next_reply()
            await asyncio.sleep(rng.choice([0, 0, 0.001, 0.005]))
        settle = time.monotonic() + 15
        while time.monotonic() < settle and not (all(h.answers.values()) and h.pipe.outstanding == 0):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a call written twice would be answered again by now
        h.pipe.close()
        return h

    try:
        h = asyncio.run(main())
        ran = int(server.client().get("k"))
    finally:
        proxy.stop()
        server.kill()
    assert proxy.cuts > 10
    counts = list(h.answers.values())
    assert counts.count(0) == 0, f"{counts.count(0)} of {len(counts)} calls never answered: {h.pipe.describe()}"
    twice = sum(1 for c in counts if c > 1)
    assert twice == 0, f"{twice} of {len(counts)} calls answered more than once"
    # and Redis ran each call at least once (a call lost with its reply ran, and ran again)
    assert ran >= len(counts)
