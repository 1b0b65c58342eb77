"""The read side of one crawl's frontier: :class:`FrontierReads`, a part of
:class:`ipr_crawl.store.FrontierStore`.

Sizes (:meth:`~FrontierReads.counts`, :meth:`~FrontierReads.pending`), the node
records and out-links, the collected graph as arrays and the ``pr`` ordering's
PageRank step over it. Each method reads the crawl's keys (``node``, ``frontier``,
``lease``...; :mod:`ipr_crawl.store.keys`); the costs are in their docstrings.
Import it from :mod:`ipr_crawl.store.frontier` or :mod:`ipr_crawl.store` as
``FrontierStore``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from ipr_crawl.store.keys import STORE_LOST
from ipr_crawl.store.record import ID_SIZE, RECORD_SIZE, NodeRecord, numpy_dtype, parse_record

__all__ = ["FrontierReads"]


class FrontierReads:
    """What one crawl holds, read from Redis (uses the store's ``client`` and ``keys``;
    :meth:`pagerank_step` writes the scores back with the store's ``set_scores``)."""

    client: redis.Redis
    keys: dict[str, str]

    def set_scores(self, scores: Sequence[tuple[bytes, float]], chunk: int = 2000) -> int:
        raise NotImplementedError  # FrontierStore's (set_scores.lua)

    def counts(self) -> dict[str, int]:
        """Sizes: frontier, forced, in flight, known URLs, fetched and failed pages,
        ``orphans``: queued URLs whose request Redis lost, waiting for a link to them, and
        ``dead_lettered``: requests handed out more than ``IPR_MAX_RELEASES`` times."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys["frontier"])
        pipe.zcard(self.keys["forced"])
        pipe.zcard(self.keys["lease"])
        pipe.hlen(self.keys["node"])
        pipe.hmget(self.keys["meta"], "fetched", "failed")
        pipe.scard(self.keys["orphans"])
        pipe.hlen(self.keys["dead_letter"])
        frontier, forced, lease, nodes, (fetched, failed), orphans, dead = pipe.execute()
        return {
            "frontier": frontier,
            "forced": forced,
            "in_flight": lease,
            "known": nodes,
            "fetched": int(fetched or 0),
            "failed": int(failed or 0),
            "orphans": orphans,
            "dead_lettered": dead,
        }

    def known(self, id_: bytes) -> bool:
        """Whether the crawl knows the node ``id_`` (queued, fetched or failed)."""
        return bool(self.client.hexists(self.keys["node"], id_))

    def pending(self) -> int:
        """Requests not yet settled: frontier + forced + in flight (one round trip).
        Raises :class:`redis.ResponseError` (:data:`~ipr_crawl.store.keys.STORE_LOST`)
        when the crawl's ``meta`` is gone: nothing pending in an emptied Redis is not an end."""
        pipe = self.client.pipeline(transaction=False)
        for name in ("frontier", "forced", "lease"):
            pipe.zcard(self.keys[name])
        pipe.hexists(self.keys["meta"], "ordering")
        return self.pending_of(pipe.execute())

    def pending_of(self, replies: list[Any]) -> int:
        """:meth:`pending` from the replies of its three ZCARDs and its HEXISTS."""
        if not replies[3]:
            raise redis.ResponseError(f"{STORE_LOST} {self.keys['meta']} is gone: this Redis no longer holds the "
                                      "crawl (restarted empty, a replica promoted before it synced, or flushed)")
        return sum(int(x) for x in replies[:3])

    def collected_graph(self) -> tuple[list[bytes], Any, Any, Any]:
        """The collected graph: ``(ids, s, src, dst)`` — every known node's 8-byte id,
        its score ``s`` (float array, same order), and the out-links of fetched pages
        as index arrays into ``ids`` (numbering order, distinct per page). O(nodes +
        edges): HSCAN of ``node``, parsed with numpy."""
        import numpy as np

        ids: list[bytes] = []
        heads: list[bytes] = []
        srcs: list[bytes] = []
        lists: list[bytes] = []
        counts: list[int] = []
        for id_, raw in self.client.hscan_iter(self.keys["node"], count=5000):
            ids.append(id_)
            heads.append(raw[:RECORD_SIZE])
            if len(raw) > RECORD_SIZE:
                od = parse_record(raw[:RECORD_SIZE])[0].outdeg  # bucket mode: a byte per link follows
                srcs.append(id_)
                lists.append(raw[RECORD_SIZE : RECORD_SIZE + ID_SIZE * od])
                counts.append(od)
        empty = np.zeros(0, dtype=np.int64)
        if not ids:
            return ids, np.zeros(0), empty, empty
        s = np.frombuffer(b"".join(heads), dtype=numpy_dtype())["s"].astype(float)
        keys = np.frombuffer(b"".join(ids), dtype=">u8")
        order = np.argsort(keys)
        sorted_keys = keys[order]

        def index_of(values: np.ndarray) -> np.ndarray:
            pos = np.searchsorted(sorted_keys, values)
            pos[pos >= len(sorted_keys)] = 0
            found = sorted_keys[pos] == values
            return np.where(found, order[pos], -1)

        if not srcs:
            return ids, s, empty, empty
        src = np.repeat(index_of(np.frombuffer(b"".join(srcs), dtype=">u8")), counts)
        dst = index_of(np.frombuffer(b"".join(lists), dtype=">u8"))
        ok = (src >= 0) & (dst >= 0)
        return ids, s, src[ok], dst[ok]

    def pagerank_step(self, damping: float = 0.85) -> tuple[int, int]:
        """One PageRank power iteration over the collected graph, from the scores
        stored (``pr`` ordering; :func:`ipr_crawl.ordering.pagerank.power_step`).

        Reads every node and out-link list (:meth:`collected_graph`), writes the new
        scores back. Returns ``(nodes, frontier entries re-scored)``.
        """
        from ipr_crawl.ordering.pagerank import power_step  # numpy, scipy: pr only

        ids, previous, src, dst = self.collected_graph()
        if not ids:
            return 0, 0
        x = power_step(len(ids), src, dst, previous, damping)
        return len(ids), self.set_scores([(ids[i], float(x[i])) for i in range(len(ids))])

    def oldest_lease(self) -> float | None:
        """When the oldest lease in flight was taken (s since the epoch), or None."""
        first = self.client.zrange(self.keys["lease"], 0, 0, withscores=True)
        return float(first[0][1]) / 1000.0 if first else None

    def records(self) -> dict[bytes, NodeRecord]:
        """Every node's record (for tests and evaluation; O(N), HSCAN)."""
        return {
            id_: parse_record(raw)[0]
            for id_, raw in self.client.hscan_iter(self.keys["node"], count=2000)
        }

    def out_links(self) -> dict[bytes, list[bytes]]:
        """Out-links of every fetched page: id -> target ids in numbering order (O(N))."""
        return {
            id_: parse_record(raw)[1]
            for id_, raw in self.client.hscan_iter(self.keys["node"], count=2000)
            if len(raw) > RECORD_SIZE
        }

    def scores(self) -> dict[bytes, tuple[int, float, int]]:
        """Every node's ``(state, score, seq)`` (for tests and evaluation; O(N))."""
        out = {}
        for id_, raw in self.client.hscan_iter(self.keys["node"], count=1000):
            head = parse_record(raw[:RECORD_SIZE])[0]
            out[id_] = (head.state, head.s, int(head.seq))
        return out
