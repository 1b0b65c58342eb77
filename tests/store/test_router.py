"""The pipelined calls of a Redis Cluster and of buckets (ipr_crawl/store/router.py)
against a real 3-master Cluster: each bucket's calls go to the master that holds its
slot, in the order they were made in that bucket, a call over several buckets is answered once all its parts are, and a
slot moved under the calls (MOVED) hands every call not answered on, in order, as the
blocking calls that give the same values."""

from __future__ import annotations

import asyncio
from pipes import run_job_inline, until
from typing import Any

from redis.crc import key_slot

from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.store import Link, connect
from ipr_crawl.store.buckets import BucketedFrontier
from ipr_crawl.store.keys import crawl_keys
from ipr_crawl.store.retry import RedisRetry
from ipr_crawl.store.router import PipeRouter, cluster_connect_for


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _router(store: BucketedFrontier, broken: list[Any]) -> PipeRouter:
    connect_for = cluster_connect_for(store.client, store.route_keys())
    assert connect_for is not None

    return PipeRouter(connect_for, store.pipe_scripts(), run_job_inline, lambda items, exc: broken.append((exc, items)))


def _bucketed(cluster: Any, cid: str, buckets: int = 3) -> BucketedFrontier:
    client = connect(cluster.url, "", retry=RedisRetry(30))
    store = BucketedFrontier(client, cid, OrderingParams(ordering="bf"), buckets)
    store.open()
    return store


def test_bucket_calls_go_to_their_masters_in_order(cluster):
    store = _bucketed(cluster, "rt")
    owners = {cluster.master_of(crawl_keys(f"rt:{b}")["meta"]) for b in range(3)}
    got: list[tuple[str, Any]] = []
    broken: list[Any] = []

    async def main() -> PipeRouter:
        router = _router(store, broken)
        for b in range(3):  # one seed per bucket, each in its own key space
            router.send(store.enqueue_call(nid(10 + b), 0, f"p{b}".encode(), False, bucket=b), lambda: None,
                        then=lambda v, b=b: got.append((f"enq{b}", v)))
        router.send(store.pending_call(), lambda: None, then=lambda v: got.append(("pending", v)))
        router.job(lambda: store.pop(3, 600), then=lambda v: got.append(("job pop", v)))
        await until(lambda: len(got) == 5)
        leased = got[-1][1][1]
        # a record on bucket 0 with links into buckets 0 and 2 (the one to 2 goes to bucket 0's outbox)
        member = next(m for m, p in leased if p == b"p0")
        links = [Link(nid(20), 0, b"q0", bucket=0), Link(nid(22), 0, b"q2", bucket=2)]
        router.send(store.record_call(nid(10), 0, links, member, bucket=0), lambda: None,
                    then=lambda v: got.append(("rec", v)))
        router.send(store.ack_call("release", [(m, m[-8:]) for m, p in leased if p != b"p0"]), lambda: None,
                    then=lambda v: got.append(("ack", v)))
        router.send(store.pending_call(), lambda: None, then=lambda v: got.append(("pending2", v)))
        await until(lambda: len(got) == 8)
        router.close()
        return router

    router = asyncio.run(main())
    assert not broken, broken
    names = [name for name, _ in got]
    # order is kept per key space (bucket), not across them: the three buckets' enqueues in any
    # order; a call over every bucket after each bucket's calls before it; a job after every call
    assert sorted(names[:3]) == ["enq0", "enq1", "enq2"] and names[3:5] == ["pending", "job pop"], names
    assert sorted(names[5:7]) == ["ack", "rec"] and names[7] == "pending2", names
    values = dict(got)
    assert (values["enq0"], values["enq1"], values["enq2"]) == (1, 1, 1)
    assert values["pending"] == 3
    assert sorted(p for _, p in values["job pop"][1]) == [b"p0", b"p1", b"p2"]
    assert values["rec"].added == 1  # the link in its own bucket; the other is in the outbox
    assert values["ack"] == 2
    # the two released, the new link in bucket 0, the outbox entry for bucket 2
    assert values["pending2"] == 4
    assert len(router._pipes) == 0 and router.stats.writes >= 3  # closed; every master written to
    assert len(owners) >= 2  # the buckets lie on more than one master: the test routes for real
    store.client.close()


def test_a_moved_slot_hands_the_calls_on_in_order(cluster):
    """The slot of bucket 0 moved to another master between the router's connect and its
    calls: the first reply is MOVED, the router breaks, and every call not answered goes
    to ``on_broken`` in the order it was made, as the blocking call."""
    store = _bucketed(cluster, "mv", buckets=2)
    broken: list[Any] = []
    got: list[Any] = []

    async def main() -> None:
        router = _router(store, broken)
        router.send(store.pending_call(), lambda: "pending fallback", then=got.append)
        await until(lambda: len(got) == 1)  # connected to bucket 0's master
        key = crawl_keys("mv:0")["meta"]
        source = cluster.master_of(key)
        target = next(p for p in cluster.masters_now() if p != source)
        cluster.move_slot(key_slot(key.encode()), target, keys_per_step=100, pause=0.0)
        for n in range(3):
            router.send(store.enqueue_call(nid(n), 0, b"p", False, bucket=0), lambda n=n: f"enqueue {n}",
                        then=got.append)
        await until(lambda: bool(broken))
        with_calls = router.outstanding
        router.close()
        assert with_calls == 0

    asyncio.run(main())
    assert got == [0]
    (exc, items), = broken
    assert "MOVED" in str(exc) or type(exc).__name__ == "MovedError", exc
    assert [fallback() for fallback, _, _ in items] == ["enqueue 0", "enqueue 1", "enqueue 2"]
    store.client.close()


def test_a_pop_redis_py_sent_again_on_a_cluster_is_reported_like_one_the_crawl_retried(cluster, monkeypatch):
    """On a Cluster, redis-py sends a command again itself after an attempt that lost its
    connection. The pop's first attempt ran on the real master and its reply was lost (the
    connection dropped as the reply came: the fault injected here): redis-py's second
    attempt leased again, and the first lease is held unknowingly. The crawl's RedisRetry
    is told (``on_recovered``) as after its own retries, so the scheduler hands back what
    it does not hold."""
    import redis
    from redis.connection import AbstractConnection

    from ipr_crawl.store import FrontierStore

    client = connect(cluster.url, "", retry=RedisRetry(30))
    store = FrontierStore(client, "lostpop", "bf")
    store.open()
    for n in range(3):
        store.enqueue(nid(n), 0, b"p%d" % n, False)
    store.pop(1, 60)  # the script loaded on its master: the next reply read is the pop's
    recovered: list[int] = []
    client.ipr_retry.on_recovered = lambda: recovered.append(1)
    original = AbstractConnection.read_response
    armed = [True]

    def reply_lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = original(self, *args, **kwargs)
        if armed[0]:
            armed[0] = False
            self.disconnect()
            raise redis.ConnectionError("the reply was lost (injected)")
        return reply

    monkeypatch.setattr(AbstractConnection, "read_response", reply_lost)
    _, items = store.pop(1, 60)
    monkeypatch.undo()
    assert not armed[0] and len(items) == 1
    assert client.zcard(store.keys["lease"]) == 3  # the first pop's, the lost reply's, the one handed out
    assert recovered == [1]
    store.drop()
    client.close()
