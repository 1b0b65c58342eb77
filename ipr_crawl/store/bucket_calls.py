"""The pipelined calls of bucket mode (:mod:`ipr_crawl.store.buckets`): a
:class:`~ipr_crawl.store.pipe.Call` per bucket, routed to the server that holds the
bucket's slot by :class:`~ipr_crawl.store.router.PipeRouter`, or a
:class:`~ipr_crawl.store.router.Fanout` over several buckets. A call form returns None
where the blocking method must look before it acts (a lease whose bucket this process
does not know, a relay due): the scheduler then runs the blocking method as a job, in
the calls' order."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ipr_crawl.store.pipe import Call
from ipr_crawl.store.record import Link, RecordResult
from ipr_crawl.store.router import Fanout, routed

__all__ = ["BucketBeats", "BucketCalls"]


class BucketCalls:
    """The call forms of :class:`~ipr_crawl.store.buckets.BucketedFrontier` (its
    ``stores``, ``buckets``, ``relay_secs``, the heads last seen and the leases' buckets)."""

    stores: list[Any]
    buckets: int
    relay_secs: float
    last_lost: tuple[int, list[str]]
    _cached: list[tuple[int, float]] | None
    _last_relay: float
    _rotate: int
    _lease_bucket: dict[bytes, int]
    _lost_seen: set[str]

    def _bucket_of_lease(self, lease: bytes, bucket: int | None) -> int:
        raise NotImplementedError  # BucketedFrontier's

    def _outbox(self, source: int, target: int) -> str:
        raise NotImplementedError  # OutboxRelay's

    def pipe_scripts(self) -> list[Any]:
        """The scripts of the pipelined calls (the same in every bucket)."""
        return self.stores[0].pipe_scripts()

    def route_keys(self) -> list[str]:
        """Per route (bucket), a key of its key space: its Cluster slot's (store/router.py)."""
        return [store.keys["meta"] for store in self.stores]

    def record_call(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b"", bucket: int | None = None,
    ) -> Call:
        """:meth:`record_page` as a :class:`~ipr_crawl.store.pipe.Call` on the page's bucket."""
        b = self._bucket_of_lease(lease, bucket)

        def recorded(result: RecordResult) -> RecordResult:
            self._lease_bucket.pop(lease, None)
            return result

        return routed(self.stores[b].record_call(page_id, page_tie, links, lease, bucket=b), b, recorded)

    def enqueue_call(
        self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes = b"", bucket: int | None = None,
        **how: Any,
    ) -> Call | None:
        """:meth:`enqueue` as a Call on the request's bucket; None (the blocking
        :meth:`enqueue`, which settles it first) for a retry whose lease is in another bucket."""
        if bucket is None:
            raise ValueError("bucket mode: enqueue needs the bucket of the request's URL")
        held = self._lease_bucket.get(lease) if lease else None
        if held is not None and held != bucket:
            return None

        def stored(result: int) -> int:
            self._lease_bucket.pop(lease, None)
            return result

        return routed(self.stores[bucket].enqueue_call(id_, tie, payload, dont_filter, lease, **how), bucket, stored)

    def ack_call(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> Call | Fanout | None:
        """:meth:`ack` as calls on the buckets the leases came from; None (the blocking
        :meth:`ack`, which looks) when this process does not know a lease's bucket."""
        groups: dict[int, list[tuple[bytes, bytes]]] = {}
        for member, id_ in leases:
            b = self._lease_bucket.get(member)
            if b is None:
                return None
            groups.setdefault(b, []).append((member, id_))

        def settled(counts: list[int]) -> int:
            for member, _ in leases:
                self._lease_bucket.pop(member, None)
            return sum(counts)

        return Fanout([routed(self.stores[b].ack_call(mode, group), b) for b, group in groups.items()], settled)

    def pending_call(self) -> Fanout:
        """:meth:`pending` as one call per bucket: its ZCARDs and its outboxes' XLENs."""
        parts = []
        for b, store in enumerate(self.stores):
            parts.append(routed(store.pending_call(), b))
            outboxes = [self._outbox(b, t) for t in range(self.buckets) if t != b]
            parts.append(Call([("XLEN", key) for key in outboxes], lambda r: sum(int(x) for x in r), route=b))
        return Fanout(parts, sum)

    def pop_call(
        self, count: int, lease_secs: float, requeue_cap: int = 100, scan: int = 0, busy: Sequence[str] = (),
        offset: int = 0, min_ratio: float = 0.0, holder: str = "",
    ) -> Call | None:
        """:meth:`pop` as a Call on the bucket whose head is best by the heads last seen
        (each pop's reply updates its own); None (the blocking :meth:`pop`, which relays
        the outboxes and reads every head) when ``relay_secs`` has passed, or no bucket
        seems to have anything."""
        heads = self._cached
        if heads is None or time.monotonic() - self._last_relay >= self.relay_secs or not any(
            forced or head != float("inf") for forced, head in heads
        ):
            return None
        self._rotate = (self._rotate + 1) % self.buckets
        b = min(range(self.buckets),
                key=lambda b: (0 if heads[b][0] else 1, heads[b][1], (b - self._rotate) % self.buckets))
        store = self.stores[b]

        def popped(result: tuple[int, list[tuple[bytes, bytes | None]]]) -> tuple[int, list[tuple[bytes, bytes | None]]]:
            moved, got = result
            for member, _ in got:
                self._lease_bucket[member] = b
            head, forced = store.last_head
            heads[b] = (forced, head)
            lost = [h for h in store.last_lost[1] if h not in self._lost_seen]
            self._lost_seen.update(lost)
            self.last_lost = (store.last_lost[0], lost)
            return moved, got

        return routed(store.pop_call(count, lease_secs, requeue_cap, scan, busy, offset, min_ratio, holder), b,
                      popped)


class BucketBeats:
    """The heartbeats of one holder in every bucket, each on a daemon thread of its own:
    one master down (a failover, its retries up to ``IPR_REDIS_RETRY_SECS``) must not
    hold the beats of the other buckets, whose pops would take the holder for lost and
    hand its leases there to others. A bucket whose last beat is still running is
    skipped; a beat waits at most a quarter of the time to live for the others."""

    def __init__(self, stores: list[Any]) -> None:
        self.stores = stores
        self._running: dict[int, threading.Thread] = {}

    def beat(self, holder: str, ttl_secs: float, info: dict[str, Any] | None, renew_only: bool) -> bool:
        """:meth:`FrontierStore.beat` in every bucket: bucket 0's answer (True when it has
        not answered in time); raises the error of a bucket when every bucket failed."""
        results: dict[int, Any] = {}

        def one(b: int) -> None:
            try:
                results[b] = self.stores[b].beat(holder, ttl_secs, info, renew_only)
            except Exception as exc:  # noqa: BLE001 - raised below when every bucket failed
                results[b] = exc

        started = []
        for b in range(len(self.stores)):
            running = self._running.get(b)
            if running is not None and running.is_alive():
                continue
            thread = threading.Thread(target=one, args=(b,), name=f"ipr-heartbeat-bucket-{b}", daemon=True)
            self._running[b] = thread
            thread.start()
            started.append(thread)
        deadline = time.monotonic() + ttl_secs / 4
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        answers = dict(results)
        if answers and len(answers) == len(started) and all(isinstance(v, Exception) for v in answers.values()):
            raise next(iter(answers.values()))
        first = answers.get(0, True)
        return True if isinstance(first, Exception) else bool(first)
