"""One crawl over many Redis Cluster masters: the frontier split into buckets by host.

With ``IPR_CLUSTER_BUCKETS`` = B > 1, bucket b of crawl ``c`` is a whole
:class:`~ipr_crawl.store.FrontierStore` under its own hash tag, ``ipr:{c:b}:*`` (so
Redis Cluster places the buckets on different slots, and so on different masters),
and the crawl-wide ``ipr:{c}:meta`` holds the schema, the ordering and B. A URL's
bucket is its host's (:func:`ipr_crawl.ordering.urls.bucket_of`): a host's URLs, its
leases and the politeness of its download slot stay in one bucket.

A page is recorded by its own bucket's script; the links it has to other buckets,
with the score each would get (the ordering's share, or a pushed residual), are
written in the same atomic call as one outbox entry per bucket reached (stream
``outbox:<c>`` of the source bucket, ids from the server's clock). A relay (any process,
:meth:`BucketedFrontier.relay`, run by :meth:`~BucketedFrontier.pop` every
``relay_secs`` and whenever the frontiers look empty) applies them on their bucket
(relay.lua), at most once each: the target keeps, per source, the highest sequence
id applied; entries are trimmed from the source only after that. After a failover
that lost a source's last writes, its new entries still get ids above those applied
(the promoted replica's clock is past them), so none is skipped by mistake. This is the
message-passing partition of the crawlers that scale (Mercator, Heydon & Najork 1999,
§3.5; UbiCrawler, Boldi et al. 2004), with link-based scores carried in the messages.

Pops go to the bucket whose best queued entry is best (read in one pipelined round
trip per pop); a crawl is finished when every bucket's frontier, forced queue,
leases and outboxes are empty (:meth:`~BucketedFrontier.pending`).

What it costs and what it changes are measured in docs/scaling.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.store.bucket_calls import BucketBeats, BucketCalls
from ipr_crawl.store.frontier import FrontierStore, IncompatibleCrawl, create_meta
from ipr_crawl.store.keys import SCHEMA_VERSION, crawl_keys
from ipr_crawl.store.record import Link, NodeRecord, RecordResult
from ipr_crawl.store.relay import OutboxRelay

__all__ = ["BucketedFrontier", "open_frontier"]

logger = logging.getLogger(__name__)

#: Move a bucket's forced_seq into its own range (ARGV[1] = its base, (b + 1) * 2**32), once,
#: atomically (processes open a crawl together): _forced.lua numbers tokens from it. A
#: token's key is (2048 - priority) * 2**40 + seq, so seq stays below 2**40: the bucket is
#: bits 32-39 of it (IPR_CLUSTER_BUCKETS <= 255), 2**32 tokens per bucket. A counter of the
#: layout before (bucket b from (b + 1) * 2**40, which overlapped the priority bits) keeps
#: its count in the new range; tokens queued under it keep their keys.
_FORCED_BASE = """
local base, two40 = tonumber(ARGV[1]), 1099511627776
local c = tonumber(redis.call('HGET', KEYS[1], 'forced_seq') or '0')
if c >= two40 then c = c % two40 end
if c < base then redis.call('HSET', KEYS[1], 'forced_seq', string.format('%.0f', base + c)) end
return 1
"""


def open_frontier(
    client: redis.Redis, crawl_id: str, params: OrderingParams, buckets: int = 1, exact: bool = False,
) -> Any:
    """A :class:`FrontierStore` (``buckets`` = 1) or a :class:`BucketedFrontier`
    (``exact``: relay and read every bucket's head before each pop, for
    ``IPR_POP_BATCH_SIZE=1``)."""
    if buckets <= 1:
        return FrontierStore(client, crawl_id, params)
    return BucketedFrontier(client, crawl_id, params, buckets, relay_secs=0.0 if exact else 0.2)


def _per_bucket(name: str, doc: str) -> Any:
    """A :class:`BucketedFrontier` attribute set in every bucket's store (read from bucket 0's)."""
    def put(self: Any, value: Any) -> None:
        for store in self.stores:
            setattr(store, name, value)

    return property(lambda self: getattr(self.stores[0], name), put, doc=doc)


class BucketedFrontier(OutboxRelay, BucketCalls):
    """The frontier of one crawl split into ``buckets`` FrontierStores by host.

    The methods are those of :class:`FrontierStore` the scheduler calls; the ones that
    add a request or record a page take the ``bucket`` of its URL
    (:func:`~ipr_crawl.ordering.urls.bucket_of`) and each :class:`Link` carries its
    own. A lease is settled in the bucket it was taken from (remembered by this
    process). Raises what FrontierStore raises.
    """

    holder = _per_bucket("holder", "The lease holder id of this process, named in every bucket's settles.")
    lease_max_secs = _per_bucket("lease_max_secs", "How long a live holder's lease is kept (FrontierStore's).")
    holder_ttl_secs = _per_bucket("holder_ttl_secs", "A lapsed holder that pops is registered again for this long.")
    max_releases = _per_bucket("max_releases", "IPR_MAX_RELEASES: a lease lost more often is dead-lettered.")

    def __init__(
        self, client: redis.Redis, crawl_id: str, params: OrderingParams, buckets: int,
        relay_secs: float = 0.2, relay_batch: int = 500,
    ) -> None:
        if not 2 <= buckets <= 255:
            raise ValueError(f"buckets={buckets}: 2 to 255 (1 is a plain FrontierStore)")
        self.client = client
        self.crawl_id = crawl_id
        self.params = params
        self.ordering = params.ordering
        self.cutoff = params.cutoff
        self.buckets = buckets
        self.keys = crawl_keys(crawl_id)
        self.stores = [FrontierStore(client, f"{crawl_id}:{b}", params) for b in range(buckets)]
        for b, store in enumerate(self.stores):
            store.buckets = buckets
            # its outboxes, one per other bucket (_outbox.lua writes them): in every record call's KEYS
            store._record_keys += [self._outbox(b, c) for c in range(buckets) if c != b]
        self.relay_secs = relay_secs
        self.relay_batch = relay_batch
        self._last_relay = 0.0
        self._lease_bucket: dict[bytes, int] = {}
        self._rotate = 0
        # the buckets' heads as last seen: read every relay_secs, updated by each pop's reply
        self._cached: list[tuple[int, float]] | None = None
        self.last_lost: tuple[int, list[str]] = (0, [])
        #: counters of this process: outbox entries relayed, skipped (applied before)
        self.relayed = 0
        self.relay_skipped = 0
        #: bytes of the outbox entries this process read for relaying
        self.relayed_bytes = 0
        #: relays whose target's replicas did not confirm them in time (nothing trimmed)
        self.relay_held = 0
        # WAIT after a relay call, before its entries are trimmed from their source:
        # (replicas, timeout ms); on a Redis Cluster 1 replica for up to 100 ms unless
        # wait_for_replicas says more. A short WAIT holds that bucket's relays for 1 s.
        from ipr_crawl.store.connection import is_cluster

        self._wait: tuple[int, int] | None = (1, 100) if is_cluster(client) else None
        self._relay_paused = [0.0] * buckets
        self._lost_seen: set[str] = set()
        self._beats = BucketBeats(self.stores)

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> bool:
        """Write or check the crawl-wide schema, ordering and bucket count, then open
        every bucket. Returns True for a resume; raises :class:`IncompatibleCrawl` for
        a crawl written with another schema, ordering or bucket count."""
        k = self.keys["meta"]
        if create_meta(self.client, k, {"ordering": self.params.label, "buckets": self.buckets,
                                         "created": time.time()}):
            resumed = False
        else:
            schema, stored, buckets = self.client.hmget(k, "schema", "ordering", "buckets")
            if buckets is None:
                raise IncompatibleCrawl(
                    f"crawl {self.crawl_id!r} was made with one bucket; this run has IPR_CLUSTER_BUCKETS="
                    f"{self.buckets}. Use the same IPR_CLUSTER_BUCKETS or another IPR_CRAWL_ID")
            if int(buckets) != self.buckets:
                raise IncompatibleCrawl(
                    f"crawl {self.crawl_id!r} is split into {int(buckets)} buckets (IPR_CLUSTER_BUCKETS); this "
                    f"run has {self.buckets}. Use the same IPR_CLUSTER_BUCKETS or another IPR_CRAWL_ID")
            # schema 4 -> 5 -> 6: each bucket upgrades its own keys as it opens (store/upgrade.py)
            if schema is None or int(schema) not in (4, 5, SCHEMA_VERSION):
                raise IncompatibleCrawl(
                    f"crawl {self.crawl_id!r} was written with schema {schema!r}; this is ipr-crawl schema "
                    f"{SCHEMA_VERSION}. Use another IPR_CRAWL_ID or delete its keys")
            label = stored.decode() if isinstance(stored, bytes) else stored
            if label != self.params.label:
                raise IncompatibleCrawl(
                    f"crawl {self.crawl_id!r} is ordered by {label!r}, not {self.params.label!r}; its "
                    "scores mean something else. To crawl it afresh: -s IPR_RESET=True (or `ipr-crawl reset "
                    f"--crawl-id {self.crawl_id}`); else use the same IPR_ORDERING or another IPR_CRAWL_ID")
            resumed = True
        for b, store in enumerate(self.stores):
            store.open()
            self.client.hset(store.keys["meta"], "bucket", b)
            # forced-queue tokens unique across buckets and apart from the priority bits:
            # bucket b counts from (b + 1) * 2**32 (_FORCED_BASE)
            self.client.eval(_FORCED_BASE, 1, store.keys["meta"], (b + 1) << 32)
        self.client.hset(k, "schema", SCHEMA_VERSION)
        return resumed

    def refresh_prior(self) -> int:
        """:meth:`FrontierStore.refresh_prior`: 0, a crawl of many buckets takes no prior
        (config.py refuses ``IPR_PRIOR_CRAWL`` with ``IPR_CLUSTER_BUCKETS``)."""
        return 0

    def wait_for_replicas(self, replicas: int, timeout_ms: int, on_short: Callable[[], Any] | None = None) -> None:
        """:meth:`FrontierStore.wait_for_replicas` for every bucket's record calls, and
        the same ``WAIT`` after each relay call (on a cluster there is one by default:
        1 replica, 100 ms), before the relayed entries are trimmed from their source:
        else a failover of the target that lost the relay call would lose them."""
        self._wait = (int(replicas), int(timeout_ms)) if replicas > 0 else self._wait
        for store in self.stores:
            store.wait_for_replicas(replicas, timeout_ms, on_short)

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def drop(self, keep: tuple[str, ...] = ()) -> int:
        """Delete every key of the crawl: each bucket's and the crawl-wide ones but the
        full key names in ``keep``."""
        n = sum(store.drop() for store in self.stores)
        spare = {*keep, *(k.encode() for k in keep)}
        keys = [k for k in self.client.scan_iter(match=f"ipr:{{{self.crawl_id}}}:*", count=1000) if k not in spare]
        if keys:
            self.client.delete(*keys)
        return n + len(keys)

    def _pipelined(self, build: Callable[[Any], Any]) -> list[Any]:
        """Run the commands ``build(pipe)`` queues in one pipeline (not a transaction:
        on a cluster it is split by node), retried under the client's RedisRetry as every
        pipeline of the crawl's client is (a cluster's: IprClusterPipeline). Every
        caller's commands are reads or idempotent, so running them again is safe."""
        pipe = self.client.pipeline(transaction=False)
        build(pipe)
        return pipe.execute()

    # -- routing -----------------------------------------------------------------
    def _bucket_of_lease(self, lease: bytes, bucket: int | None) -> int:
        # kept until the record call succeeded: a failed one's lease is handed back there (ack)
        b = self._lease_bucket.get(lease) if lease else None
        if b is not None:
            return b
        if bucket is None:
            raise ValueError("bucket mode: a page or request needs the bucket of its URL")
        return bucket

    def record_page(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b"", bucket: int | None = None,
    ) -> RecordResult:
        """:meth:`FrontierStore.record_page` on the page's bucket (the bucket its lease
        came from, else ``bucket``); links of other buckets go to its outbox."""
        self.settle_record()
        b = self._bucket_of_lease(lease, bucket)
        result = self.stores[b].record_page(page_id, page_tie, links, lease, bucket=b)
        self._lease_bucket.pop(lease, None)
        return result

    def send_record_page(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b"",
        then: Callable[[RecordResult], None] | None = None, bucket: int | None = None,
    ) -> None:
        """:meth:`FrontierStore.send_record_page` on the page's bucket (at most one call
        outstanding over all buckets)."""
        self.settle_record()
        b = self._bucket_of_lease(lease, bucket)

        def recorded(result: RecordResult) -> None:
            self._lease_bucket.pop(lease, None)
            if then is not None:
                then(result)

        self.stores[b].send_record_page(page_id, page_tie, links, lease, then=recorded, bucket=b)

    def settle_record(self) -> None:
        for store in self.stores:
            store.settle_record()

    def enqueue(
        self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes = b"", bucket: int | None = None,
        **how: Any,
    ) -> int:
        """:meth:`FrontierStore.enqueue` on the bucket of the request's URL; a lease it
        settles (a retry) is settled where it was taken."""
        if bucket is None:
            raise ValueError("bucket mode: enqueue needs the bucket of the request's URL")
        held = self._lease_bucket.pop(lease, None) if lease else None
        if held is not None and held != bucket:
            self.stores[held].ack("release", [(lease, b"")])
            lease = b""
        return self.stores[bucket].enqueue(id_, tie, payload, dont_filter, lease, **how)

    def mark_unfiltered(self, id_: bytes, bucket: int = 0) -> None:
        """:meth:`FrontierStore.mark_unfiltered` in ``bucket``."""
        self.stores[bucket].mark_unfiltered(id_)

    def ack(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> int:
        """:meth:`FrontierStore.ack`, each lease in the bucket it was taken from (a lease
        this process does not know: in the bucket that knows its node)."""
        groups: dict[int, list[tuple[bytes, bytes]]] = {}
        for member, id_ in leases:
            b = self._lease_bucket.pop(member, None)
            if b is None:
                b = self._bucket_knowing(id_ or member[-8:])
            groups.setdefault(b, []).append((member, id_))
        return sum(self.stores[b].ack(mode, group) for b, group in groups.items())

    def _bucket_knowing(self, id_: bytes) -> int:
        res = self._pipelined(lambda pipe: [pipe.hexists(store.keys["node"], id_) for store in self.stores])
        found = [b for b, yes in enumerate(res) if yes]
        return found[0] if found else 0

    def known(self, id_: bytes) -> bool:
        """Whether any bucket knows node ``id_``."""
        return any(self._pipelined(lambda pipe: [pipe.hexists(store.keys["node"], id_) for store in self.stores]))

    # -- the relay -----------------------------------------------------------------
    @property
    def last_overdue(self) -> int:  # leases of live holders the last pops moved back, past the max age
        return sum(store.last_overdue for store in self.stores)

    # -- pops ------------------------------------------------------------------------
    def _heads(self) -> list[tuple[int, float]]:
        """Per bucket: (forced requests, best frontier zscore or +inf); one pipelined
        round trip."""
        def build(pipe: Any) -> None:
            for store in self.stores:
                pipe.zcard(store.keys["forced"])
                pipe.zrange(store.keys["frontier"], 0, 0, withscores=True)

        res = self._pipelined(build)
        out = []
        for b in range(self.buckets):
            forced, head = res[2 * b : 2 * b + 2]
            out.append((int(forced), float(head[0][1]) if head else float("inf")))
        return out

    def pop(
        self, count: int, lease_secs: float, requeue_cap: int = 100, scan: int = 0, busy: Sequence[str] = (),
        offset: int = 0, min_ratio: float = 0.0, holder: str = "",
    ) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        """:meth:`FrontierStore.pop` over the buckets: the forced queues first, then the
        bucket whose best entry has the highest priority (equal heads in turn), then
        the next ones until ``count`` requests are leased. The buckets' heads are read
        (one pipelined round trip) and the outboxes relayed every ``relay_secs`` (0:
        before every pop, the exact order) and whenever no bucket seems to have
        anything; in between, each pop's reply updates its bucket's head. Every bucket
        is popped (its lost holders' and expired leases handed back) when nothing was
        found in the others."""
        if time.monotonic() - self._last_relay >= self.relay_secs or self._cached is None:
            if time.monotonic() - self._last_relay >= self.relay_secs:
                self.relay()
            self._cached = self._heads()
        heads = self._cached
        if not any(forced or head != float("inf") for forced, head in heads):
            if self.outbox_size():
                self.relay()
            heads = self._cached = self._heads()
        self._rotate = (self._rotate + 1) % self.buckets
        order = sorted(
            range(self.buckets),
            key=lambda b: (0 if heads[b][0] else 1, heads[b][1], (b - self._rotate) % self.buckets),
        )
        items: list[tuple[bytes, bytes | None]] = []
        moved, lost_n, lost = 0, 0, []
        for b in order:
            if len(items) >= count:
                break
            n, got = self.stores[b].pop(count - len(items), lease_secs, requeue_cap, scan, busy, offset,
                                        min_ratio, holder)
            moved += n
            lost_n += self.stores[b].last_lost[0]
            lost += [h for h in self.stores[b].last_lost[1] if h not in lost and h not in self._lost_seen]
            for member, payload in got:
                self._lease_bucket[member] = b
                items.append((member, payload))
            head, forced = self.stores[b].last_head
            heads[b] = (forced, head)
        # each bucket hands back its own leases of a lost holder: say so once per holder
        self._lost_seen.update(lost)
        self.last_lost = (lost_n, lost)
        return moved, items

    # -- holders ------------------------------------------------------------------
    def beat(self, holder: str, ttl_secs: float, info: dict[str, Any] | None = None, renew_only: bool = False) -> bool:
        """Renew ``holder``'s heartbeat in every bucket (each bucket's pop hands back the
        leases of its own lost holders), each bucket on a thread of its own
        (:class:`~ipr_crawl.store.bucket_calls.BucketBeats`). False when bucket 0 did not
        know it. ``renew_only``: as :meth:`FrontierStore.beat`."""
        return self._beats.beat(holder, ttl_secs, info, renew_only)

    def holder_counts(self) -> tuple[int, int]:
        return self.stores[0].holder_counts()

    def release(self, mode: str, holder: str = "") -> tuple[int, list[str]]:
        moved, forgotten = 0, []
        for store in self.stores:
            n, f = store.release(mode, holder)
            moved += n
            forgotten += [h for h in f if h not in forgotten]
        if mode == "holder":
            self._lease_bucket.clear()
        return moved, forgotten

    def release_stale(self, holder: str, keep: set[bytes], before: float) -> int:
        """:meth:`FrontierStore.release_stale` in every bucket."""
        return sum(store.release_stale(holder, keep, before) for store in self.stores)

    def holders(self) -> list[dict[str, Any]]:
        """:meth:`FrontierStore.holders` of bucket 0, leases in flight summed over buckets."""
        merged: dict[str, dict[str, Any]] = {}
        for store in self.stores:
            for h in store.holders():
                if h["holder"] in merged:
                    merged[h["holder"]]["in_flight"] += h["in_flight"]
                else:
                    merged[h["holder"]] = h
        return list(merged.values())

    def take_dead_lettered(self) -> int:
        """:meth:`FrontierStore.take_dead_lettered` summed over the buckets."""
        return sum(store.take_dead_lettered() for store in self.stores)

    def dead_return(self) -> int:
        """:meth:`FrontierStore.dead_return` in every bucket."""
        return sum(store.dead_return() for store in self.stores)

    def dead_letters(self, n: int = 20) -> list[tuple[bytes, bytes]]:
        """:meth:`FrontierStore.dead_letters` of the buckets, up to ``n`` in all."""
        return [x for store in self.stores for x in store.dead_letters(n)][:n]

    def take_lapsed(self) -> bool:
        """:meth:`FrontierStore.take_lapsed` of any bucket (each is read and cleared)."""
        return any([store.take_lapsed() for store in self.stores])

    def redis_time(self) -> float:
        """:meth:`FrontierStore.redis_time` of bucket 0's server."""
        return self.stores[0].redis_time()

    def oldest_lease(self) -> float | None:
        times = [t for t in (store.oldest_lease() for store in self.stores) if t is not None]
        return min(times) if times else None

    def sample(self, interval_secs: float, maxlen: int = 20000) -> bool:
        """The timeline sample of bucket 0 (the timeline shows that bucket's counts)."""
        return self.stores[0].sample(interval_secs, maxlen)

    def timeline(self, last: int = 0) -> list[dict[str, float]]:
        return self.stores[0].timeline(last)

    # -- counts and inspection ------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """:meth:`FrontierStore.counts` summed over the buckets, plus ``outbox``."""
        total: dict[str, int] = {}
        for store in self.stores:
            for k, v in store.counts().items():
                total[k] = total.get(k, 0) + v
        total["outbox"] = self.outbox_size()
        return total

    def pending(self) -> int:
        """Requests not yet settled in any bucket, plus outbox entries not yet applied
        (they may hold new URLs)."""
        return sum(store.pending() for store in self.stores) + self.outbox_size()

    def fetch_order(self) -> list[bytes]:
        """Fetched page ids, bucket by bucket (each bucket's in its own order)."""
        return [id_ for store in self.stores for id_ in store.fetch_order()]

    def records(self) -> dict[bytes, NodeRecord]:
        return {k: v for store in self.stores for k, v in store.records().items()}

    def out_links(self) -> dict[bytes, list[bytes]]:
        return {k: v for store in self.stores for k, v in store.out_links().items()}

    def scores(self) -> dict[bytes, tuple[int, float, int]]:
        return {k: v for store in self.stores for k, v in store.scores().items()}

    def _first_known(self, method: str, id_: bytes) -> Any:
        """``method(id_)`` of the first bucket whose answer is not None (the node's own)."""
        for store in self.stores:
            value = getattr(store, method)(id_)
            if value is not None:
                return value
        return None

    def node_state(self, id_: bytes) -> int | None:
        return self._first_known("node_state", id_)

    def node_score(self, id_: bytes) -> float | None:
        return self._first_known("node_score", id_)

    def mean_score(self, sample: int = 1000) -> float:
        return sum(store.mean_score(sample) for store in self.stores) / self.buckets
