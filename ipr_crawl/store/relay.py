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

__all__ = ["RELAY_BYTES", "OutboxRelay"]

#: What one relay call applies on a target bucket, at most, beyond each source's first entry (bytes; ~15,000 links).
RELAY_BYTES = 1 << 18


class OutboxRelay:
    """The relay half of :class:`~ipr_crawl.store.buckets.BucketedFrontier` (its
    ``stores``, ``buckets``, ``relay_batch``, ``client``, ``_wait``, ``_relay_paused``
    and ``_pipelined``; counters ``relayed``, ``relay_skipped``, ``relayed_bytes``)."""

    stores: list[Any]
    buckets: int
    relay_batch: int
    client: Any
    relayed: int
    relay_skipped: int
    relayed_bytes: int
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
        Three pipelined round trips. Returns the entries applied."""
        pairs = [(s, t) for s in range(self.buckets) for t in range(self.buckets) if s != t]
        read = self._pipelined(lambda pipe: [pipe.xrange(self._outbox(s, t), count=self.relay_batch) for s, t in pairs])
        by_target: dict[int, list[Any]] = {}
        budget: dict[int, int] = {}
        trims: list[tuple[str, bytes]] = []
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
            trims.append((self._outbox(s, t), taken[-1][0]))
        applied = 0
        for t, args in by_target.items():
            store = self.stores[t]
            res = store._scripts["relay"](keys=self.relay_keys(t),
                                          args=[*store._record_head, *args])
            if self._wait is not None and time.monotonic() >= self._relay_paused[t]:
                if int(self._wait_on(store.keys["meta"])) < self._wait[0]:
                    self._relay_paused[t] = time.monotonic() + 5.0
            applied += int(res[0])
            self.relayed += int(res[0])
            self.relay_skipped += int(res[1])
        if trims:
            def trim(pipe: Any) -> None:
                for key, last in trims:
                    ms, seq = last.decode().split("-")
                    pipe.xtrim(key, minid=f"{ms}-{int(seq) + 1}", approximate=False)  # exact: what is read next is new

            self._pipelined(trim)
        self._last_relay = time.monotonic()
        return applied

    def _wait_on(self, key: str) -> Any:
        """``WAIT`` on the server (the cluster node) that holds ``key``."""
        from ipr_crawl.store.connection import wait_replicas

        assert self._wait is not None
        return wait_replicas(self.client, key, *self._wait)

    def outbox_size(self) -> int:
        """Outbox entries not yet applied and trimmed, over all pairs of buckets."""
        pairs = [(s, t) for s in range(self.buckets) for t in range(self.buckets) if s != t]
        return sum(self._pipelined(lambda pipe: [pipe.xlen(self._outbox(s, t)) for s, t in pairs]))
