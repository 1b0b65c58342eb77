"""Replays: the frontier's own scripts driven over a graph held in Redis, no HTTP.

``ipr-crawl simulate`` and the benchmarks load a real graph into the crawl's
``graph`` hash and let ``replay.lua`` pop and record pages exactly as a crawl
would (the same ``record`` rule as ``record_page.lua``), many pages per round trip.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from ipr_crawl.store.frontier import FrontierStore
from ipr_crawl.store.keys import DERIVED_KEYS

__all__ = ["ReplayStore"]


class ReplayStore(FrontierStore):
    """A :class:`FrontierStore` that can also replay a stored graph (same arguments)."""

    def load_graph(self, rows: Iterable[tuple[bytes, int, Sequence[tuple[bytes, int]]]], chunk: int = 2000) -> None:
        """Store a graph for :meth:`replay`: ``(page id, own tie, [(link id, link tie), ...])``
        per page, links in numbering order, in the ``graph`` hash of this crawl."""
        pipe = self.client.pipeline(transaction=False)
        pending = 0
        for pid, tie, links in rows:
            value = struct.pack(">d", tie) + b"".join(lid + struct.pack(">d", lt) for lid, lt in links)
            pipe.hset(self.keys["graph"], pid, value)
            pending += 1
            if pending >= chunk:
                pipe.execute()
                pending = 0
        pipe.execute()

    def _replay_keys(self) -> list[str]:
        """The KEYS of replay.lua and replay_record.lua: the crawl's keys, then every
        bucket of its prior (a replay creates nodes from the graph it reads in Redis,
        so which buckets it looks up is not known before the call)."""
        buckets = self.refresh_prior()
        base = self.keys["meta"][: -len("meta")] + "prior:"
        return [*self._k("meta", "node", "frontier", "lease", "req", "graph", "forced", "unfiltered", "imported_seen",
                         "order", *DERIVED_KEYS), *(f"{base}{b}" for b in range(buckets))]

    def replay(self, count: int) -> tuple[list[bytes], int, int, int]:
        """Pop-and-record up to ``count`` pages from the stored graph (replay.lua).

        Returns ``(page ids in fetch order, first fetches, propagation updates,
        propagation drops)``.
        """
        res = self._scripts["replay"](keys=self._replay_keys(),
            args=[*self._record_head, count],
        )
        return list(res[3:]), int(res[0]), int(res[1]), int(res[2])

    def replay_record(self, page_ids: Sequence[bytes]) -> int:
        """Record the given pages in order from the stored graph (replay_record.lua)."""
        return int(
            self._scripts["replay_record"](
                keys=self._replay_keys(),
                args=[*self._record_head, *page_ids],
            )
        )

    def memory_usage(self, exclude: Sequence[str] = ("graph",)) -> int:
        """Bytes Redis uses for this crawl's keys (``MEMORY USAGE … SAMPLES 0``, exact),
        site queues included, the replay graph excluded."""
        total = 0
        for key in self.client.scan_iter(match=f"ipr:{{{self.crawl_id}}}:*", count=1000):
            name = key.decode().rsplit(":", 1)[-1]
            if name in exclude:
                continue
            total += int(self.client.memory_usage(key, samples=0) or 0)
        return total
