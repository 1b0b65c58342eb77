"""The relay of bucket mode (:mod:`ipr_crawl.store.buckets`): outbox entries applied on
their target bucket, each at most once.

A page's record writes its links to other buckets as one outbox entry per bucket
reached (``_outbox.lua``: stream ``outbox:<target>`` of the source bucket). A relay
reads them, applies them on their target (relay.lua, which keeps per source the
highest entry id applied in the target's ``hwm`` hash, so entries read twice are
skipped) and then trims them from the source. This is the message passing between
the parts of a partitioned crawler (Heydon & Najork 1999, "Mercator", section 3.5;
Boldi et al. 2004, "UbiCrawler").
"""

from __future__ import annotations

import time
from typing import Any

import redis

from ipr_crawl.store.connection import is_cluster

__all__ = ["RELAY_BYTES", "RELAY_HOLD_SECS", "OutboxRelay", "replicated"]

#: After a relay whose target's replicas did not confirm it, that target takes no relay for this long (s).
RELAY_HOLD_SECS = 1.0
#: What one relay call applies on a target bucket, at most, beyond each source's first entry (bytes; ~15,000 links).
RELAY_BYTES = 1 << 18


class OutboxRelay:
    """The relay half of :class:`~ipr_crawl.store.buckets.BucketedFrontier` (its
    ``stores``, ``buckets``, ``relay_batch``, ``client``, ``_wait``, ``_relay_paused``
    and ``_pipelined``; counters ``relayed``, ``relay_skipped``, ``relayed_bytes``, ``relay_held``)."""

    stores: list[Any]
    buckets: int
    relay_batch: int
    client: Any
    relayed: int
    relay_skipped: int
    relayed_bytes: int
    relay_held: int
    _wait: tuple[int, int] | None
    _relay_paused: list[float]
    _last_relay: float

    def _pipelined(self, build: Any) -> list[Any]:
        raise NotImplementedError  # BucketedFrontier's

    def relay_keys(self, target: int) -> list[str]:
        """The KEYS of a relay call on bucket ``target`` (relay.lua): its record keys, then its ``hwm``."""
        store = self.stores[target]
        return [*store._record_keys, store.keys["meta"][: -len("meta")] + "hwm"]

    def _outbox(self, source: int, target: int) -> str:
        return self.stores[source].keys["meta"][: -len("meta")] + f"outbox:{target}"

    def relay(self) -> int:
        """Apply up to ``relay_batch`` outbox entries per pair of buckets on their target
        bucket (relay.lua; idempotent), at most :data:`RELAY_BYTES` of them per target
        (one script call's work stays bounded), then trim what was applied from the sources.
        Three pipelined round trips, and on a server with replicas (a cluster, or
        ``IPR_REDIS_WAIT_REPLICAS``) a ``WAIT`` per target: entries are trimmed only once
        their target's replicas have them, else a failover of the target would lose them
        with no copy left; a target whose replicas lag takes no relay for
        :data:`RELAY_HOLD_SECS` (its entries wait in their outboxes). Returns the entries
        applied."""
        pairs = [(s, t) for s in range(self.buckets) for t in range(self.buckets) if s != t]
        read = self._pipelined(lambda pipe: [pipe.xrange(self._outbox(s, t), count=self.relay_batch) for s, t in pairs])
        by_target: dict[int, list[Any]] = {}
        budget: dict[int, int] = {}
        pending_trims: list[tuple[int, str, bytes]] = []
        trims: list[tuple[int, str, bytes]] = []
        for (s, t), entries in zip(pairs, read):
            # one relay call's work is bounded: entries past RELAY_BYTES per target wait
            # for the next relay (at least one entry per source goes, however large)
            taken: list[Any] = []
            for entry in entries:
                size = len(entry[1][b"e"])
                if taken and budget.get(t, 0) + size > RELAY_BYTES:
                    break
                budget[t] = budget.get(t, 0) + size
                taken.append(entry)
            if not taken:
                continue
            args = by_target.setdefault(t, [])
            args += [s, len(taken)]
            for entry_id, fields in taken:
                args += [entry_id, fields[b"e"]]
                self.relayed_bytes += len(fields[b"e"])
            pending_trims.append((t, self._outbox(s, t), taken[-1][0]))
        applied = 0
        for t, args in by_target.items():
            if self._wait is not None and time.monotonic() < self._relay_paused[t]:
                continue  # its last relay is not on a replica yet: its entries wait in their outboxes
            store = self.stores[t]
            res = store._scripts["relay"](keys=self.relay_keys(t),
                                          args=[*store._record_head, *args])
            applied += int(res[0])
            self.relayed += int(res[0])
            self.relay_skipped += int(res[1])
            if self._wait is not None and not self._replicated(t):
                # a failover of the target now would lose what it applied: the entries stay
                # in their sources, read again (and skipped while applied) at the next relay
                self._relay_paused[t] = time.monotonic() + RELAY_HOLD_SECS
                self.relay_held += 1
                continue
            trims += [trim for trim in pending_trims if trim[0] == t]
        if trims:
            def trim(pipe: Any) -> None:
                for _, key, last in trims:
                    ms, seq = last.decode().split("-")
                    pipe.xtrim(key, minid=f"{ms}-{int(seq) + 1}", approximate=False)  # exact: what is read next is new

            self._pipelined(trim)
        self._last_relay = time.monotonic()
        return applied

    def _replicated(self, target: int) -> bool:
        """Whether what the relay applied on bucket ``target`` is on the replicas a
        failover would promote (:func:`replicated`)."""
        assert self._wait is not None
        return replicated(self.client, self.relay_keys(target)[-1], *self._wait)

    def outbox_size(self) -> int:
        """Outbox entries not yet applied and trimmed, over all pairs of buckets."""
        pairs = [(s, t) for s in range(self.buckets) for t in range(self.buckets) if s != t]
        return sum(self._pipelined(lambda pipe: [pipe.xlen(self._outbox(s, t)) for s, t in pairs]))


def replicated(client: Any, key: str, replicas: int, timeout_ms: int) -> bool:
    """Whether every write so far on the server that holds ``key`` (a hash of the crawl)
    is on ``replicas`` of its replicas (on each replica it has, when fewer), waiting up
    to ``timeout_ms`` (Redis ``WAIT``).

    The replicas it has: those attached (``ROLE``) and, on a cluster, those the cluster
    still names its replicas, not failed (``CLUSTER NODES``): one whose link is down
    may be promoted later without the writes (Redis Cluster specification, "Replica
    election and promotion": a replica is eligible while its data is not older than
    ``cluster-node-timeout`` times ``cluster-replica-validity-factor``), so False until it
    is back in step or failed. True at once when it has none: nothing a failover could
    promote, and a ``WAIT`` would last its whole timeout.

    ``WAIT`` counts the replicas that have the writes of its own connection, so one
    field of ``key`` is incremented first on that connection (``HINCRBY key waits 1``,
    one pipeline): its offset is then the server's, which covers the writes of every
    other connection before it (Redis documentation, ``WAIT``). On a cluster the
    commands go to the master of ``key``'s slot as the client's slot table names it; a
    node down, no longer the master (``MOVED``, ``ASK``) or a replica answers False."""
    try:
        node = client.get_redis_connection(client.get_node_from_key(key)) if is_cluster(client) else client
        role = node.execute_command("ROLE")
        if role[0] not in (b"master", "master"):
            return False
        attached = len(role[2])
        # the cluster's own list only when fewer are attached than asked (a relay runs every 0.2 s)
        has = max(attached, _cluster_replicas(node)) if attached < replicas and is_cluster(client) else attached
        need = min(replicas, has)
        if need == 0:
            return True
        if attached < need:
            return False
        with node.pipeline(transaction=False) as pipe:
            pipe.hincrby(key, "waits", 1)
            pipe.execute_command("WAIT", need, timeout_ms)
            _, acked = pipe.execute()
    except redis.RedisError:
        return False
    return int(acked) >= need


def _cluster_replicas(node: Any) -> int:
    """The replicas the cluster names for ``node`` (a master's client), not failed."""
    raw = node.execute_command("CLUSTER", "NODES")  # two words: the raw text, not redis-py's parsed dict
    lines = [line.split() for line in (raw.decode() if isinstance(raw, bytes) else raw).splitlines() if line]
    me = next((f[0] for f in lines if "myself" in f[2].split(",")), None)
    return sum(1 for f in lines if len(f) > 3 and f[3] == me and "fail" not in f[2].split(","))
