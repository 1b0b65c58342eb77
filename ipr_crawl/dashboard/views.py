"""What ``ipr-crawl dashboard`` shows and ``/metrics`` exports, read from a crawl's store.

:class:`CrawlView` keeps one crawl's store open and answers :meth:`CrawlView.snapshot`:
the counts of ``ipr-crawl status`` (:func:`ipr_crawl.store.inspect.status`), each
process with its heartbeat and the leases it holds, the top of the frontier and the
hosts (queued among its first URLs; in flight, delay and last fetch from the
processes' heartbeats), the revisit schedule over the next days, Redis's memory and
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

import redis

from ipr_crawl.store import FrontierStore
from ipr_crawl.store.archive import bucket_ids, is_archive_id
from ipr_crawl.store.inspect import crawl_store, crawls, status, top

__all__ = ["COUNTS", "CrawlView", "crawl_ids", "open_view"]

#: the counts of ``ipr-crawl status`` the page and /metrics show, summed over buckets
COUNTS = ("known", "fetched", "failed", "frontier", "forced", "in_flight", "orphans", "dead_lettered")
#: frontier URLs read for the hosts table (the hosts of the best ones)
HOST_SAMPLE = 200
#: how long a process no longer registered stays on the page (s)
GONE_SECS = 600
#: rows of the hosts table
HOSTS = 15
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
    """A :class:`CrawlView` of crawl ``crawl_id``: its store, or its buckets' (read from
    its ``meta``: raises redis-py's errors when that cannot be read)."""
    return CrawlView(crawl_id, client, bucket_ids(client, crawl_id) or [crawl_id], curves_secs)


class CrawlView:
    """One crawl's snapshots (see the module docstring). ``ids``: the crawl's id, or its
    buckets' (bucket mode), all on ``client``; each bucket's store is opened at the first
    snapshot that can read it."""

    def __init__(self, crawl_id: str, client: Any, ids: list[str], curves_secs: float = 15.0) -> None:
        self.crawl_id = crawl_id
        self.client = client
        self.ids = ids
        self._stores: dict[str, FrontierStore] = {}
        #: the processes of the last snapshot, and those no longer registered (each with
        #: when it went, Redis's clock), shown for GONE_SECS
        self._seen: dict[str, dict[str, Any]] = {}
        self._gone: dict[str, dict[str, Any]] = {}
        self.curves_secs = curves_secs
        self._curves: dict[str, Any] | None = None
        self._curves_at = float("-inf")

    def snapshot(self, detail: bool = True) -> dict[str, Any]:
        """The crawl now, as JSON-ready data: ``crawl_id``, ``ordering``, ``time`` (Redis's
        clock, s since the epoch), the :data:`COUNTS`, ``pages_per_sec``, ``finished``,
        ``holders`` (each process), ``revisits`` (``due``, ``scheduled``, ``by_day``),
        ``redis`` (``rtt_ms``: a PING's round trip, None when a Cluster's node did not
        answer it; ``memory``), ``buckets``/``buckets_missing``; with ``detail``
        (the page; /metrics goes without) also ``top`` (20 best frontier URLs), ``hosts``
        and the ``curves`` of :func:`~ipr_crawl.evaluation.report.crawl_curves` (cached
        ``curves_secs``). Raises redis-py's errors when Redis cannot be reached at all."""
        client = self.client
        rtt_ms: float | None = None
        started = time.perf_counter()
        try:
            client.ping()
            rtt_ms = round((time.perf_counter() - started) * 1000, 2)
        except redis.RedisError:
            if len(self.ids) == 1:
                raise
            # a Cluster whose node the PING went to is away: the buckets say what is
            # readable, and the next PING goes to another master (redis-py's RedisCluster)
            replace = getattr(client, "replace_default_node", None)
            if replace is not None:
                replace()
        parts: list[dict[str, Any]] = []
        missing: list[str] = []
        for id_ in self.ids:
            try:
                if id_ not in self._stores:
                    self._stores[id_] = crawl_store(client, id_)
                parts.append(status(self._stores[id_]))
            except Exception:  # noqa: BLE001 - a bucket away is named, the others shown
                if len(self.ids) == 1:
                    raise
                missing.append(id_)
        if not parts:
            raise ConnectionError(f"no bucket of crawl {self.crawl_id!r} can be read: {', '.join(missing)}")
        first = parts[0]
        out: dict[str, Any] = {
            "crawl_id": self.crawl_id, "ordering": first["ordering"], "time": max(p["time"] for p in parts),
            "finished": first.get("finished"), "buckets": len(self.ids), "buckets_missing": missing,
        }
        for name in COUNTS:
            out[name] = sum(int(p.get(name) or 0) for p in parts)
        rates = [p["pages_per_sec"] for p in parts if p.get("pages_per_sec") is not None]
        out["pages_per_sec"] = round(sum(rates), 2) if rates else None
        out["holders"] = self._with_gone(_merge_holders(parts, out["time"]), out["time"])
        out["revisits"] = self._revisits(parts)
        out["redis"] = {"rtt_ms": rtt_ms, "memory": first.get("memory") or {}}
        if detail:
            readable = [self._stores[i] for i in self.ids if i not in missing]
            best = sorted((row for s in readable for row in top(s, HOST_SAMPLE, in_links=False)),
                          key=lambda r: r["priority"], reverse=True)
            out["top"] = [{"url": r["url"], "host": r["host"], "score": r["score"], "depth": r["depth"]}
                          for r in best[:20]]
            out["hosts"] = _hosts(Counter(r["host"] for r in best[:HOST_SAMPLE]), parts, out["time"])
            out["curves"] = self.curves(readable)
        return out

    def _with_gone(self, rows: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """``rows`` (each ``gone``: None) and the processes seen in an earlier snapshot that
        are no longer registered, for :data:`GONE_SECS`: ``gone`` ``"lost"`` when the last
        snapshot saw its heartbeat late or lost (another process handed its leases back,
        ``_reclaim.lua``), else ``"closed"`` (it released itself at its close); not alive,
        nothing in flight, its heartbeat's age growing."""
        current = {r["holder"] for r in rows}
        for holder, row in self._seen.items():
            if holder and holder not in current and holder not in self._gone:
                lost = row["late"] or not row["alive"]
                self._gone[holder] = {**row, "alive": False, "late": False, "in_flight": 0,
                                      "gone": "lost" if lost else "closed", "gone_at": now}
        self._gone = {h: g for h, g in self._gone.items() if h not in current and now - g["gone_at"] < GONE_SECS}
        self._seen = {r["holder"]: r for r in rows}
        for row in rows:
            row["gone"] = None
        return rows + [{**g, "beat_age_secs": round(now - g["last_beat"], 1) if g.get("last_beat") else None}
                       for g in self._gone.values()]

    def _revisits(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Revisits due now and scheduled, and (one store) the schedule per day ahead."""
        due = sum(int(p.get("revisits_due") or 0) for p in parts)
        scheduled = sum(int(p.get("revisits_scheduled") or 0) for p in parts)
        by_day: list[int] = []
        if scheduled and len(self.ids) == 1:
            store = self._stores[self.ids[0]]
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

        if len(self.ids) == 1:
            self._curves = crawl_curves(stores[0])
        else:
            self._curves = {"timeline": [], "revisits": [], "graph": {}, "buckets": {
                s.crawl_id: [{"t": r["t"], "fetched": r["fetched"]} for r in s.timeline(last=600)] for s in stores}}
        self._curves_at = time.monotonic()
        return self._curves


def _hosts(queued: Counter[str], parts: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The hosts table, at most :data:`HOSTS` rows, busiest first: ``host``,
    ``queued_in_top`` (among the frontier's :data:`HOST_SAMPLE` best URLs) and, from the
    downloader slots each live process published with its last heartbeat
    (:func:`ipr_crawl.scheduler.internals.slot_view`; a slot is a host unless a request's
    ``download_slot`` says otherwise): ``in_flight`` and ``waiting`` (in the processes'
    downloaders), ``delay`` (s, the longest any process keeps: ``DOWNLOAD_DELAY`` or
    AutoThrottle's), ``processes``, ``last_fetch_age`` (s since the latest download
    started, on Redis's clock: the age published plus the time since that beat)."""
    rows: dict[str, dict[str, Any]] = {}

    def row(host: str) -> dict[str, Any]:
        return rows.setdefault(host, {"host": host, "queued_in_top": queued.get(host, 0), "in_flight": 0,
                                      "waiting": 0, "delay": None, "processes": 0, "last_fetch_age": None})

    for host in queued:
        row(host)
    seen: set[str] = set()
    for part in parts:  # a process is in every bucket's holders: read once
        for holder in part.get("holders", []):
            if not holder.get("alive") or holder["holder"] in seen:
                continue
            seen.add(holder["holder"])
            since_beat = max(0.0, now - holder["last_beat"]) if holder.get("last_beat") else 0.0
            for slot in holder.get("slots") or []:
                r = row(slot["slot"])
                r["in_flight"] += int(slot.get("in_flight") or 0)
                r["waiting"] += int(slot.get("queued") or 0)
                r["delay"] = max(r["delay"] or 0.0, float(slot.get("delay") or 0.0))
                r["processes"] += 1
                if slot.get("last_fetch_age") is not None:
                    age = round(float(slot["last_fetch_age"]) + since_beat, 1)
                    r["last_fetch_age"] = age if r["last_fetch_age"] is None else min(r["last_fetch_age"], age)
    busiest = sorted(rows.values(), key=lambda r: (-(r["in_flight"] + r["waiting"]), -r["queued_in_top"],
                                                   r["last_fetch_age"] is None, r["last_fetch_age"] or 0, r["host"]))
    return busiest[:HOSTS]


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

