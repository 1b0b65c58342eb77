"""The scheduler's Redis thread (ipr_crawl/scheduler/redis_thread.py): calls run one
at a time in the order they were queued, results and errors come back through the
event loop's hand-over, ``call`` waits and counts the wait. The crawls that use it
are in test_crawl.py and test_faults.py."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from ipr_crawl.scheduler.redis_thread import BlockedTime, RedisThread


class Loop:
    """A stand-in for the event loop: what the thread hands over waits here until run."""

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue = queue.SimpleQueue()

    def deliver(self, fn, *args) -> None:
        self.calls.put((fn, args))

    def run(self, n: int, timeout: float = 5.0) -> None:
        for _ in range(n):
            fn, args = self.calls.get(timeout=timeout)
            fn(*args)


def test_calls_run_in_order_and_results_come_back_on_the_loop():
    loop = Loop()
    io = RedisThread("t", deliver=loop.deliver)
    io.start()
    ran: list[int] = []
    got: list[tuple[str, int]] = []
    threads: list[str] = []

    def work(i: int) -> int:
        threads.append(threading.current_thread().name)
        time.sleep(0.001 * (5 - i))  # later calls are quicker: order is the queue's, not the clock's
        ran.append(i)
        return i * 10

    for i in range(5):
        io.submit(work, i, then=lambda r: got.append(("ok", r)))
    assert io.in_flight == 5
    loop.run(5)
    assert ran == [0, 1, 2, 3, 4]
    assert got == [("ok", 0), ("ok", 10), ("ok", 20), ("ok", 30), ("ok", 40)]
    assert set(threads) == {"t"}
    assert io.in_flight == 0
    io.stop()


def test_an_error_goes_to_failed_and_call_raises_it_after_the_queued_calls():
    loop = Loop()
    io = RedisThread("t", deliver=loop.deliver)
    io.start()
    order: list[str] = []
    errors: list[BaseException] = []

    def boom() -> None:
        order.append("boom")
        raise ConnectionError("away")

    io.submit(lambda: order.append("first"))
    io.submit(boom, failed=errors.append)
    with pytest.raises(KeyError):
        io.call(lambda: (order.append("call"), {}["x"]))
    assert order == ["first", "boom", "call"]  # call() ran after what was queued before it
    loop.run(2)
    assert len(errors) == 1 and isinstance(errors[0], ConnectionError)
    assert io.blocked.calls == 1 and io.blocked.total_secs > 0
    io.stop()


def test_call_times_out_and_runs_inline_once_the_thread_is_gone():
    loop = Loop()
    io = RedisThread("t", deliver=loop.deliver)
    io.start()
    release = threading.Event()
    io.submit(lambda: release.wait(5))
    with pytest.raises(TimeoutError):
        io.call(lambda: 1, timeout=0.05)
    release.set()
    io.stop()
    io._thread.join(5)
    assert io.call(lambda: 7) == 7  # no thread: at once, in the caller's


def test_blocked_time_p99():
    b = BlockedTime(keep=1000)
    for _ in range(99):
        b.add(0.001)
    b.add(0.5)
    assert b.calls == 100 and abs(b.total_secs - 0.599) < 1e-9
    assert b.p99_ms() == pytest.approx(500.0)
    assert BlockedTime().p99_ms() == 0.0


def test_two_schedulers_restore_pythons_switch_interval_in_any_order():
    """IPR_GIL_SWITCH_SECS is process-wide: the shortest asked for while any scheduler
    runs, Python's own again once the last has stopped, whichever stops first."""
    import sys

    from ipr_crawl.scheduler.redis_thread import SwitchInterval

    own = sys.getswitchinterval()
    switch = SwitchInterval()
    try:
        switch.shorten(0.0002)  # crawler A
        switch.shorten(0.001)  # crawler B
        assert sys.getswitchinterval() == pytest.approx(0.0002)
        switch.restore(0.0002)  # A stops first
        assert sys.getswitchinterval() == pytest.approx(0.001)
        switch.restore(0.001)
        assert sys.getswitchinterval() == pytest.approx(own)
    finally:
        sys.setswitchinterval(own)


def test_a_call_waited_for_while_redis_is_away_gives_the_default():
    """len(scheduler) and the other guarded calls wait for the Redis thread while Redis
    is away, at most SYNC_WHILE_AWAY_SECS; the TimeoutError that ends the wait gives the
    method's default (the call still runs later) instead of escaping into Scrapy's
    engine, and the crawl is not stopped for it."""
    from ipr_crawl.scheduler.redis_calls import RedisCalls

    downs: list[Exception] = []
    calls = RedisCalls(60.0, downs.append, lambda name: None)

    def waited() -> int:
        raise TimeoutError("Redis call pending still running after 0.5 s")

    assert calls.guard(waited, default=0) == 0
    assert downs == [] and not calls.down


def test_the_close_hands_the_last_record_reply_to_the_event_loop(redis_client, crawl_id):
    """Calls made on the event loop (``IPR_REDIS_THREAD=auto`` without the pipelined
    connection): the last page's record call is sent and its reply not read when the
    crawl closes. Its ``then`` (stats, signals, waking Scrapy's engine, which asks asyncio
    for the thread's loop) runs on the event loop's thread, not on the Redis thread that
    runs the close (issue 49: "There is no current event loop in thread 'ipr-redis-…'")."""
    import asyncio

    from ipr_crawl.scheduler.redis_calls import RedisCalls
    from ipr_crawl.store import FrontierStore, Link

    store = FrontierStore(redis_client, crawl_id, "ipr")
    store.open()
    seen: list[tuple[str, int]] = []

    def then(result) -> None:
        asyncio.get_event_loop()  # what Scrapy's call_later does: raises on another thread
        seen.append((threading.current_thread().name, result.added))

    async def crawl() -> None:
        calls = RedisCalls(5.0, lambda exc: None, lambda name: None)
        calls.store = store
        calls.start_thread("ipr-redis-t", 0.0)
        calls.loop_mode = True  # as for a client without an asyncio twin (Sentinel) or another reactor
        calls.submit_record(b"page-001", 0, [Link(b"page-002", 0, b"p")], b"", {}, then)  # node ids: 8 bytes
        assert seen == []  # sent, not read
        closed: list[bool] = []
        done = calls.finish(store.close, what="closing", without_redis=lambda exc: None,
                            closed=lambda: closed.append(True))
        await done.asFuture(asyncio.get_running_loop())
        calls.stop_thread(lambda key, value: None)
        assert closed == [True]

    asyncio.run(crawl())
    assert seen == [(threading.main_thread().name, 1)]
