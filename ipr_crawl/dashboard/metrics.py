"""Prometheus metrics of the crawls a dashboard shows (``/metrics``), with
``prometheus_client``: a custom collector (prometheus_client docs, "Custom Collectors")
that reads each crawl's snapshot (:meth:`~ipr_crawl.dashboard.views.CrawlView.snapshot`,
without the curves) at every scrape. Names and units follow Prometheus's naming
practice (prometheus.io, "Metric and label naming"): ``_total`` counters, base units
(seconds, bytes). Every series is labelled ``crawl``; a process's series also
``holder``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CrawlCollector"]

#: (name, type, help, the snapshot's field) of the per-crawl series
SERIES = (
    ("ipr_pages_fetched", "counter", "Pages fetched and recorded by the crawl", "fetched"),
    ("ipr_pages_failed", "counter", "Requests settled as failed", "failed"),
    ("ipr_urls_known", "gauge", "URLs the crawl knows (fetched, queued or in flight)", "known"),
    ("ipr_frontier_urls", "gauge", "URLs queued in the frontier (ordered by score)", "frontier"),
    ("ipr_forced_requests", "gauge", "Requests queued ahead of the frontier (retries, dont_filter, revisits)", "forced"),
    ("ipr_leases_in_flight", "gauge", "Requests leased to crawler processes and not settled yet", "in_flight"),
    ("ipr_dead_lettered_requests", "gauge", "Requests set aside after IPR_MAX_RELEASES hand-backs", "dead_lettered"),
    ("ipr_pages_per_second", "gauge", "Pages recorded per second over the last minute", "pages_per_sec"),
    ("ipr_crawl_finished", "gauge", "1 when the crawl closed as finished", "finished"),
)


class CrawlCollector(Collector):
    """Collects the series of every crawl ``snapshots()`` returns: ``{crawl id:
    snapshot}``, or ``{crawl id: {"error": text}}`` for one that cannot be read
    (``ipr_crawl_up`` 0)."""

    def __init__(self, snapshots: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.snapshots = snapshots

    def collect(self) -> Iterable[Metric]:
        shots = self.snapshots()
        up = GaugeMetricFamily("ipr_crawl_up", "1 when the crawl's store could be read at this scrape", labels=["crawl"])
        families: dict[str, Any] = {}
        for name, kind, text, _ in SERIES:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families[name] = cls(name, text, labels=["crawl"])
        process = {
            "alive": GaugeMetricFamily("ipr_process_alive", "1 while the process's heartbeat is live",
                                       labels=["crawl", "holder"]),
            "leases": GaugeMetricFamily("ipr_process_leases", "Requests the process holds",
                                        labels=["crawl", "holder"]),
            "age": GaugeMetricFamily("ipr_process_heartbeat_age_seconds", "Seconds since the process's last "
                                     "heartbeat (Redis's clock)", labels=["crawl", "holder"]),
        }
        revisits_due = GaugeMetricFamily("ipr_revisits_due", "Revisits due now", labels=["crawl"])
        revisits_scheduled = GaugeMetricFamily("ipr_revisits_scheduled", "Revisits scheduled", labels=["crawl"])
        mem_used = GaugeMetricFamily("ipr_redis_memory_used_bytes", "Redis's used memory", labels=["crawl"])
        mem_max = GaugeMetricFamily("ipr_redis_memory_max_bytes", "Redis's maxmemory (0: no limit)", labels=["crawl"])
        mem_crawl = GaugeMetricFamily("ipr_crawl_memory_bytes", "Bytes of the crawl's keys", labels=["crawl"])
        rtt = GaugeMetricFamily("ipr_redis_rtt_seconds", "Round trip of a PING to the crawl's Redis", labels=["crawl"])
        for crawl, shot in sorted(shots.items()):
            up.add_metric([crawl], 0.0 if "error" in shot else 1.0)
            if "error" in shot:
                continue
            for name, _, _, field in SERIES:
                value = shot.get(field)
                if field == "finished":
                    value = 1.0 if value else 0.0
                if value is not None:
                    families[name].add_metric([crawl], float(value))
            for h in shot.get("holders", []):
                if h.get("gone") == "closed":  # it released itself: nothing to alert on
                    continue
                name = h["holder"] or "(no holder)"
                process["alive"].add_metric([crawl, name], 1.0 if h["alive"] else 0.0)
                process["leases"].add_metric([crawl, name], float(h["in_flight"]))
                if h.get("beat_age_secs") is not None:
                    process["age"].add_metric([crawl, name], float(h["beat_age_secs"]))
            revisits_due.add_metric([crawl], float(shot["revisits"]["due"]))
            revisits_scheduled.add_metric([crawl], float(shot["revisits"]["scheduled"]))
            memory = shot["redis"].get("memory") or {}
            for family, key in ((mem_used, "used"), (mem_max, "max"), (mem_crawl, "crawl")):
                if memory.get(key) is not None:
                    family.add_metric([crawl], float(memory[key]))
            if shot["redis"]["rtt_ms"] is not None:
                rtt.add_metric([crawl], shot["redis"]["rtt_ms"] / 1000)
        yield up
        yield from families.values()
        yield from process.values()
        yield from (revisits_due, revisits_scheduled, mem_used, mem_max, mem_crawl, rtt)
