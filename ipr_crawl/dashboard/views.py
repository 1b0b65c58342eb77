"""What ``ipr-crawl dashboard`` shows and ``/metrics`` exports, read from a crawl's store.

:class:`CrawlView` keeps one crawl's store open and answers :meth:`CrawlView.snapshot`:
the counts of ``ipr-crawl status`` (:func:`ipr_crawl.store.inspect.status`), each
process with its heartbeat and the leases it holds, the top of the frontier and the
hosts among its first URLs, the revisit schedule over the next days, Redis's memory and
round-trip time, and the crawl's curves (:func:`ipr_crawl.evaluation.report.crawl_curves`:
pages over time and the share of the collected graph's PageRank fetched so far, Cho,
Garcia-Molina & Page 1998, criterion B). The PageRank is recomputed at most every
``curves_secs`` (networkx over the whole collected graph: seconds on a large crawl).

A crawl in bucket mode (``IPR_CLUSTER_BUCKETS``) is read bucket by bucket (ids
``<id>:<b>``): the counts are sums, and a bucket that cannot be read (its master away)
is named in ``buckets_missing`` instead of being left out silently.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ipr_crawl.store import FrontierStore
from ipr_crawl.store.archive import bucket_ids, is_archive_id
from ipr_crawl.store.inspect import crawl_store, crawls, status, top

__all__ = ["COUNTS", "CrawlView", "crawl_ids", "open_view"]

#: the counts of ``ipr-crawl status`` the page and /metrics show, summed over buckets
COUNTS = ("known", "fetched", "failed", "frontier", "forced", "in_flight", "orphans", "dead_lettered")
#: frontier URLs read for the hosts table (the hosts of the best ones)
HOST_SAMPLE = 200
#: days of the revisit schedule shown
SCHEDULE_DAYS = 7


def crawl_ids(client: Any) -> list[str]:
    """The crawls of a Redis the dashboard lists: every crawl id but archives of finished
    crawls (``<id>~<n>``) and the buckets of a crawl in bucket mode (``<id>:<b>``, shown
    as their crawl). One SCAN of the server's keys."""
    live = [c for c in crawls(client) if not is_archive_id(c)]
    buckets = {b for c in live for b in bucket_ids(client, c)}
    return [c for c in live if c not in buckets]


def open_view(client: Any, crawl_id: str, curves_secs: float = 15.0) -> CrawlView:
    """A :class:`CrawlView` of crawl ``crawl_id``: its store, or its buckets' stores."""
    return CrawlView(crawl_id, [crawl_store(client, c) for c in bucket_ids(client, crawl_id) or [crawl_id]],
                     curves_secs)


class CrawlView:
    """One crawl's snapshots (see the module docstring). ``stores``: the crawl's store,
    or its buckets' stores (bucket mode), all on one client."""

    def __init__(self, crawl_id: str, stores: list[FrontierStore], curves_secs: float = 15.0) -> None:
        self.crawl_id = crawl_id
        self.stores = stores
        self.curves_secs = curves_secs
        self._curves: dict[str, Any] | None = None
        self._curves_at = float("-inf")

    def snapshot(self, detail: bool = True) -> dict[str, Any]:
        """The crawl now, as JSON-ready data: ``crawl_id``, ``ordering``, ``time`` (Redis's
        clock, s since the epoch), the :data:`COUNTS`, ``pages_per_sec``, ``finished``,
        ``holders`` (each process), ``revisits`` (``due``, ``scheduled``, ``by_day``),
        ``redis`` (``rtt_ms``, ``memory``), ``buckets``/``buckets_missing``; with ``detail``
        (the page; /metrics goes without) also ``top`` (20 best frontier URLs), ``hosts``
        and the ``curves`` of :func:`~ipr_crawl.evaluation.report.crawl_curves` (cached
        ``curves_secs``). Raises redis-py's errors when Redis cannot be reached at all."""
        started = time.perf_counter()
        self.stores[0].client.ping()
        rtt_ms = (time.perf_counter() - started) * 1000
        parts: list[dict[str, Any]] = []
        missing: list[str] = []
        for store in self.stores:
            try:
                parts.append(status(store))
            except Exception:  # noqa: BLE001 - a bucket away is named, the others shown
                if len(self.stores) == 1:
                    raise
                missing.append(store.crawl_id)
        if not parts:
            raise ConnectionError(f"no bucket of crawl {self.crawl_id!r} can be read: {', '.join(missing)}")
        first = parts[0]
        out: dict[str, Any] = {
            "crawl_id": self.crawl_id, "ordering": first["ordering"], "time": max(p["time"] for p in parts),
            "finished": first.get("finished"), "buckets": len(self.stores), "buckets_missing": missing,
        }
        for name in COUNTS:
            out[name] = sum(int(p.get(name) or 0) for p in parts)
        rates = [p["pages_per_sec"] for p in parts if p.get("pages_per_sec") is not None]
        out["pages_per_sec"] = round(sum(rates), 2) if rates else None
        out["holders"] = _merge_holders(parts, out["time"])
        out["revisits"] = self._revisits(parts)
        out["redis"] = {"rtt_ms": round(rtt_ms, 2), "memory": first.get("memory") or {}}
        if detail:
            readable = [s for s in self.stores if s.crawl_id not in missing]
            best = sorted((row for s in readable for row in top(s, HOST_SAMPLE, in_links=False)),
                          key=lambda r: r["priority"], reverse=True)
            out["top"] = [{"url": r["url"], "host": r["host"], "score": r["score"], "depth": r["depth"]}
                          for r in best[:20]]
            hosts = Counter(r["host"] for r in best[:HOST_SAMPLE])
            out["hosts"] = [{"host": h, "queued_in_top": n} for h, n in hosts.most_common(15)]
            out["curves"] = self.curves(readable)
        return out

    def _revisits(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Revisits due now and scheduled, and (one store) the schedule per day ahead."""
        due = sum(int(p.get("revisits_due") or 0) for p in parts)
        scheduled = sum(int(p.get("revisits_scheduled") or 0) for p in parts)
        by_day: list[int] = []
        if scheduled and len(self.stores) == 1:
            store = self.stores[0]
            now = time.time()  # the due times are on the crawlers' clock (inspect.status)
            by_day = [int(store.client.zcount(store.keys["due"], now + d * 86400, f"({now + (d + 1) * 86400}"))
                      for d in range(SCHEDULE_DAYS)]
        return {"due": due, "scheduled": scheduled, "by_day": by_day}

    def curves(self, stores: list[FrontierStore]) -> dict[str, Any]:
        """The crawl's curves (one store: :func:`crawl_curves`; bucket mode: each
        bucket's timeline, no PageRank: the graph is split), recomputed at most every
        ``curves_secs``."""
        if self._curves is not None and time.monotonic() - self._curves_at < self.curves_secs:
            return self._curves
        from ipr_crawl.evaluation.report import crawl_curves

        if len(stores) == 1:
            self._curves = crawl_curves(stores[0])
        else:
            self._curves = {"timeline": [], "revisits": [], "graph": {}, "buckets": {
                s.crawl_id: [{"t": r["t"], "fetched": r["fetched"]} for r in s.timeline(last=600)] for s in stores}}
        self._curves_at = time.monotonic()
        return self._curves


def _merge_holders(parts: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Each process once over the buckets: alive if alive in any, its leases summed, the
    age of its last heartbeat (s) on Redis's clock."""
    merged: dict[str, dict[str, Any]] = {}
    for part in parts:
        for h in part.get("holders", []):
            row = merged.setdefault(h["holder"], {
                "holder": h["holder"], "host": h.get("host") or "", "pid": h.get("pid"), "spider": h.get("spider"),
                "alive": False, "in_flight": 0, "last_beat": None, "heartbeat_secs": h.get("heartbeat_secs"),
            })
            row["alive"] = row["alive"] or bool(h.get("alive"))
            row["in_flight"] += int(h.get("in_flight") or 0)
            if h.get("last_beat") is not None:
                row["last_beat"] = max(row["last_beat"] or 0.0, h["last_beat"])
    for row in merged.values():
        row["beat_age_secs"] = round(now - row["last_beat"], 1) if row["last_beat"] is not None else None
        # late: more than 1.5 heartbeat intervals since its last beat (lost only after 2)
        interval = float(row.get("heartbeat_secs") or 0)
        row["late"] = bool(row["alive"] and interval and (row["beat_age_secs"] or 0) > 1.5 * interval)
    return sorted(merged.values(), key=lambda r: (not r["alive"], r["holder"]))

