"""``ipr-crawl report``: a crawl's curves over time, drawn from what the crawl keeps.

- the timeline (:meth:`~ipr_crawl.store.FrontierStore.sample`, one sample per
  ``IPR_TIMELINE_SECS``, the last 20,000): frontier size, requests in flight,
  pages recorded per minute;
- the fetch order (8 bytes per fetched page) and the collected graph: the share of
  the collected graph's PageRank (networkx, damping 0.85; Page, Brin, Motwani &
  Winograd 1999) held by the pages fetched by each sample's time — the ordering's
  criterion B of Cho, Garcia-Molina & Page (1998) measured on the crawl itself
  (against the graph it collected, not the whole web); with a prior
  (``IPR_PRIOR_CRAWL``), the share of the prior's mass fetched as well;
- for a revisit crawl, the change stream: changes found and accesses per day
  (the crawl's clock, so a virtual clock gives simulated days).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ipr_crawl.store import FrontierStore
from ipr_crawl.store.revisit import RevisitStore

__all__ = ["crawl_curves", "crawl_report"]


def _pagerank_share(store: FrontierStore, order: list[bytes], fetched_counts: list[float]) -> tuple[list[float], int, int]:
    """For each count k: the PageRank mass of the first k fetched pages (``order``, the
    fetch order), PageRank over every node of the collected graph. Returns (shares,
    nodes, edges)."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(store.client.hkeys(store.keys["node"]))
    edges = 0
    for src, targets in store.out_links().items():
        graph.add_edges_from((src, t) for t in targets)
        edges += len(targets)
    if graph.number_of_nodes() == 0:
        return [0.0 for _ in fetched_counts], 0, 0
    rank = nx.pagerank(graph, alpha=0.85)
    prefix = [0.0]
    for id_ in order:
        prefix.append(prefix[-1] + rank.get(id_, 0.0))
    return [prefix[min(int(k), len(order))] for k in fetched_counts], graph.number_of_nodes(), edges


def _prior_share(store: FrontierStore, order: list[bytes], fetched_counts: list[float]) -> list[float] | None:
    """With a prior (``IPR_PRIOR_CRAWL``, :mod:`ipr_crawl.store.prior`): for each count k,
    the share of the prior's mass (the earlier crawl's PageRank over its own graph) held
    by the first k fetched pages: how closely the crawl follows the order the prior
    gives. None without a prior."""
    from ipr_crawl.store.prior import read_scores

    buckets = store.refresh_prior()
    if not buckets:
        return None
    values = read_scores(store.client, store.keys["meta"][: -len("meta")] + "prior:", buckets)
    total = sum(values.values())
    if total <= 0:
        return None
    prefix = [0.0]
    for id_ in order:
        prefix.append(prefix[-1] + values.get(id_, 0.0) / total)
    return [prefix[min(int(k), len(order))] for k in fetched_counts]


def pages_per_minute(t: list[float], fetched: list[float]) -> list[float | None]:
    """Fetch rate (pages/min) at each sample of times ``t`` (s) and counts ``fetched``,
    taken over at least one sampling interval (the median step) back: a sample written
    moments after the one before it (the close's) would otherwise make a spike of a few
    pages over a fraction of a second (1,500/min for the last sample below). None at
    the first sample.

    >>> pages_per_minute([0, 10, 20, 20.2], [0, 100, 200, 205])
    [None, 600.0, 600.0, 617.6]
    """
    steps = sorted(b - a for a, b in zip(t, t[1:]))
    window = steps[len(steps) // 2] if steps else 0.0
    rates: list[float | None] = []
    j = 0
    for i in range(len(t)):
        while j + 1 < i and t[i] - t[j + 1] >= window:
            j += 1
        dt = t[i] - t[j]
        rates.append(round((fetched[i] - fetched[j]) * 60 / dt, 1) if i and dt > 0 else None)
    return rates


def crawl_curves(store: FrontierStore) -> dict[str, Any]:
    """The report's data: ``timeline`` rows (``t`` s since the crawl's first sample,
    ``frontier``, ``in_flight``, ``fetched``, ``pages_per_min``, ``pagerank_share``;
    with a prior also ``prior_share``, :func:`_prior_share`),
    ``graph`` (nodes, edges, fetched) and ``revisits`` (per day: ``changed``,
    ``accesses``; empty without revisits)."""
    samples = store.timeline()
    order = store.fetch_order()
    counts = [s["fetched"] for s in samples]
    shares, nodes, edges = _pagerank_share(store, order, counts)
    prior = _prior_share(store, order, counts)
    rows = []
    rates = pages_per_minute([s["t"] for s in samples], [s["fetched"] for s in samples])
    for i, (s, rate) in enumerate(zip(samples, rates)):
        rows.append({
            "t": s["t"] - samples[0]["t"], "frontier": s["frontier"] + s["forced"], "in_flight": s["in_flight"],
            "fetched": s["fetched"], "pages_per_min": rate, "pagerank_share": shares[i],
            **({} if prior is None else {"prior_share": prior[i]}),
        })
    days: dict[int, Counter[str]] = {}
    for event in RevisitStore(store.client, store.crawl_id).events():
        try:
            day = int(float(event.fields.get("t", "")) // 86400)
        except ValueError:
            continue
        days.setdefault(day, Counter())[event.fields.get("kind", "")] += 1
    revisits = [
        {"day": d, "changed": c["changed"], "accesses": sum(v for k, v in c.items() if k != "new")}
        for d, c in sorted(days.items())
    ]
    fetched = len(order)
    return {
        "crawl_id": store.crawl_id, "ordering": store.params.label, "timeline": rows,
        "graph": {"nodes": nodes, "edges": edges, "fetched": fetched}, "revisits": revisits,
        "start": samples[0]["t"] if samples else None,
    }


#: fewer timeline samples than this make no picture (:func:`crawl_report`)
MIN_SAMPLES = 4


def crawl_report(store: FrontierStore, plot: str, json_path: str | None = None) -> str:
    """Draw :func:`crawl_curves` into the PNG ``plot`` (and write them to ``json_path``);
    returns a one-paragraph summary. Raises :class:`ValueError` when the crawl has fewer
    than :data:`MIN_SAMPLES` timeline samples (``IPR_TIMELINE_SECS=0``, or a crawl of a
    few seconds). Pages per minute are taken over at least one sampling interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = crawl_curves(store)
    rows = curves["timeline"]
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(curves, fh, indent=1)
    if len(rows) < MIN_SAMPLES:
        raise ValueError(
            f"crawl {store.crawl_id!r} is too short to draw: {len(rows)} timeline samples (at least "
            f"{MIN_SAMPLES}; IPR_TIMELINE_SECS=0 writes none, and a crawl samples every second at first)"
        )
    revisits = curves["revisits"]
    panels = 3 + (1 if revisits else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(8, 2.6 * panels), constrained_layout=True)
    unit, per = ("seconds", 1.0) if rows[-1]["t"] < 120 else ("minutes", 60.0)  # a short crawl in seconds
    minutes = [r["t"] / per for r in rows]
    for ax in axes[:3]:  # one time axis for the three timeline panels, from 0 to the last sample
        ax.set_xlim(0, minutes[-1])
    ax = axes[0]
    ax.plot(minutes, [r["frontier"] for r in rows], label="frontier (incl. forced)")
    ax.plot(minutes, [r["in_flight"] for r in rows], label="in flight")
    ax.set_ylabel("requests")
    ax.legend(loc="best")
    ax.set_title(f"crawl {curves['crawl_id']!r} ({curves['ordering']}): {curves['graph']['fetched']:,} pages "
                 f"fetched, {curves['graph']['nodes']:,} URLs known")
    ax = axes[1]
    ax.plot(minutes[1:], [r["pages_per_min"] or 0 for r in rows[1:]], marker=".")
    ax.set_ylabel("pages / min")
    ax.set_ylim(bottom=0)
    ax = axes[2]
    ax.plot(minutes, [r["pagerank_share"] for r in rows], label="the collected graph's PageRank")
    if "prior_share" in rows[-1]:
        ax.plot(minutes, [r.get("prior_share", 0.0) for r in rows], label="the prior's mass")
        ax.legend(loc="best")
    ax.set_ylim(0, 1)
    ax.set_ylabel("PageRank fetched")
    ax.set_xlabel(f"{unit} since the first sample")
    if revisits:
        ax = axes[3]
        day0 = revisits[0]["day"]
        ax.bar([r["day"] - day0 for r in revisits], [r["accesses"] for r in revisits], label="accesses", color="0.8")
        ax.bar([r["day"] - day0 for r in revisits], [r["changed"] for r in revisits], label="changes found")
        ax.set_xlabel("day of the crawl's clock")
        ax.set_ylabel("per day")
        ax.legend(loc="best")
    fig.savefig(plot, dpi=110)
    plt.close(fig)
    last = rows[-1]
    return (
        f"crawl {curves['crawl_id']!r}: {len(rows)} samples over {last['t'] / 60:.1f} min, "
        f"{curves['graph']['fetched']:,} pages fetched of {curves['graph']['nodes']:,} known; the fetched "
        f"pages hold {last['pagerank_share']:.3f} of the collected graph's PageRank; plot: {plot}"
    )
