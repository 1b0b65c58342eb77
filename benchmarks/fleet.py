"""A fleet of crawler processes on one crawl: pages/s and Redis CPU per page as the
number of processes N grows, against one redis-server and against a Redis Cluster
of three masters with buckets (issue 51, item 2).

Each of the N processes is a *replay client*: the crawl's per-page Redis path without
HTTP or parsing, so that a few processes load the server as many real crawlers would.
It leases a batch of 8 (``IPR_POP_BATCH_SIZE``) under its own holder id and heartbeat,
as the scheduler does, and records each leased page with the page's real out-links
(``record_page``). A link's request payload (the scheduler's codec of a GET of its URL)
is sent the first time the process sees the link, then left out, as the scheduler's
link cache does. The crawl starts from the graph's default seed
(:func:`ipr_crawl.evaluation.graphio.default_seed`) and ends when no URL is queued or
leased: every page reachable from the seed is fetched once.

Measured per run, between the processes' start signal and the last one's end:
pages/s of the fleet; Redis CPU per page (``used_cpu_user + used_cpu_sys`` of
``INFO cpu``, summed over the masters); each master's busy share of one core (its CPU
seconds over wall seconds: 1.0 is a server that is the limit); the CPU per page of the
clients. On a machine with C cores, N clients and the masters share them: when the
clients' CPU fills the machine before a master's core is full, the server is not yet
the limit, and the projection is one core / Redis CPU per page (printed).

    python benchmarks/fleet.py [--graph ukwa-1996-hosts] [--clients 1,2,4]
        [--orderings push,ipr:dl1] [--targets server,cluster] [--buckets 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bucket_scale import GRAPHS, host_url, nid, payloads, redis_cpu  # noqa: E402
from procs import LocalCluster, RedisServer  # noqa: E402

from ipr_crawl.evaluation.graphio import default_seed, read_graph, read_urls  # noqa: E402
from ipr_crawl.ordering.params import OrderingParams  # noqa: E402
from ipr_crawl.ordering.urls import bucket_of  # noqa: E402
from ipr_crawl.store import Link, connect  # noqa: E402
from ipr_crawl.store.buckets import open_frontier  # noqa: E402
from ipr_crawl.store.retry import RedisRetry  # noqa: E402

#: set in the parent before the fork, read by the children (copy on write)
SHARED: dict[str, Any] = {}


def _client_main(url: str, crawl_id: str, ordering: str, buckets: int, start: Any, out: Any) -> None:
    graph, payload, bucket = SHARED["graph"], SHARED["payload"], SHARED["bucket"]
    client = connect(url, "", retry=RedisRetry(30))
    store = open_frontier(client, crawl_id, OrderingParams(ordering=ordering), buckets)
    store.open()
    holder = f"fleet-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    store.holder = holder
    store.holder_ttl_secs = 60.0
    store.beat(holder, 60.0)
    kw = (lambda n: {"bucket": bucket[n]}) if buckets > 1 else (lambda n: {})
    seen: set[int] = set()
    pages = 0
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    last_beat = t0
    idle = 0
    while True:
        _, items = store.pop(8, 600, holder=holder)
        if not items:
            if store.pending() == 0:
                break
            idle += 1
            time.sleep(0.002)
            continue
        for member, _payload in items:
            n = int.from_bytes(member[8:], "big")
            targets = list(dict.fromkeys(graph.out.get(n, ())))
            links = [Link(nid(t), 0, b"" if t in seen else payload[t], bucket[t]) for t in targets]
            seen.update(targets)
            store.record_page(nid(n), 0, links, lease=member, **kw(n))
            pages += 1
        if time.perf_counter() - last_beat > 5:
            store.beat(holder, 60.0)
            last_beat = time.perf_counter()
    out.put({"pages": pages, "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "idle": idle})
    store.close()
    client.close()


def one_run(url: str, nodes: list[Any], n_clients: int, ordering: str, buckets: int) -> dict[str, Any]:
    """One crawl of SHARED's graph by ``n_clients`` processes; the figures of the run."""
    seed, bucket, payload = SHARED["seed"], SHARED["bucket"], SHARED["payload"]
    crawl_id = f"fleet-{uuid.uuid4().hex[:8]}"
    client = connect(url, "", retry=RedisRetry(30))
    store = open_frontier(client, crawl_id, OrderingParams(ordering=ordering), buckets)
    store.open()
    assert store.enqueue(nid(seed), 0, payload[seed], False, **({"bucket": bucket[seed]} if buckets > 1 else {}))
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client_main, args=(url, crawl_id, ordering, buckets, start, out))
             for _ in range(n_clients)]
    for p in procs:
        p.start()
    time.sleep(1.0 + 0.2 * n_clients)  # every client connected and waiting
    before = redis_cpu(nodes)
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=1800) for _ in procs]
    wall = time.perf_counter() - t0
    spent = [a - b for a, b in zip(redis_cpu(nodes), before)]
    for p in procs:
        p.join(timeout=60)
    counts = store.counts()
    store.close()
    for key in client.scan_iter(match=f"*{crawl_id}*", count=1000):
        client.delete(key)
    client.close()
    pages = sum(r["pages"] for r in results)
    return {
        "clients": n_clients, "ordering": ordering, "buckets": buckets, "pages": pages,
        "fetched": counts.get("fetched"), "wall_secs": wall, "pages_per_sec": pages / wall,
        "redis_cpu_us_per_page": 1e6 * sum(spent) / pages,
        "master_busy": [s / wall for s in spent],
        "client_cpu_us_per_page": 1e6 * sum(r["cpu"] for r in results) / pages,
        "idle_pops": sum(r["idle"] for r in results),
    }


def run_target(target: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    import redis

    with tempfile.TemporaryDirectory() as tmp:
        if target == "server":
            ctx: Any = RedisServer(Path(tmp), appendfsync="everysec").start()
            url, nodes, buckets = ctx.url, [ctx.client()], 1
        else:
            ctx = LocalCluster(Path(tmp), masters=3, replicas=0, appendfsync="everysec").start()
            url, buckets = ctx.url, args.buckets
            nodes = [redis.Redis(port=p) for p in ctx.ports[:3]]
        SHARED["bucket"] = {n: bucket_of(host_url(SHARED["urls"].get(n, "")), buckets) for n in SHARED["graph"].nodes}
        try:
            for ordering in args.orderings:
                for n in args.clients:
                    row = {"target": target, **one_run(url, nodes, n, ordering, buckets)}
                    rows.append(row)
                    busy = " ".join(f"{b:.2f}" for b in row["master_busy"])
                    print(f"{target:7s} {ordering:8s} N={n:2d} B={buckets}: {row['pages']} pages "
                          f"(fetched {row['fetched']}), {row['pages_per_sec']:7.0f} pages/s, Redis CPU "
                          f"{row['redis_cpu_us_per_page']:5.0f} µs/page, master busy {busy}, client CPU "
                          f"{row['client_cpu_us_per_page']:5.0f} µs/page", flush=True)
        finally:
            for node in nodes:
                node.close()
            ctx.__exit__(None, None, None)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | ordering | N | pages | pages/s | Redis CPU µs/page | busiest master's core | "
             "client CPU µs/page | pages/s when the busiest master fills its core |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        per_core = 1e6 / (r["redis_cpu_us_per_page"] * max(r["master_busy"]) / sum(r["master_busy"]))
        lines.append(f"| {r['target']} (B={r['buckets']}) | {r['ordering']} | {r['clients']} | {r['pages']} | "
                     f"{r['pages_per_sec']:.0f} | {r['redis_cpu_us_per_page']:.0f} | {max(r['master_busy']):.2f} | "
                     f"{r['client_cpu_us_per_page']:.0f} | {per_core:.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default="ukwa-1996-hosts", choices=sorted(GRAPHS))
    ap.add_argument("--clients", default="1,2,4", help="comma-separated fleet sizes N")
    ap.add_argument("--orderings", default="push,ipr:dl1")
    ap.add_argument("--targets", default="server,cluster", help="server, cluster (three masters, no replicas)")
    ap.add_argument("--buckets", type=int, default=6, help="IPR_CLUSTER_BUCKETS on the Cluster")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.clients = [int(x) for x in args.clients.split(",")]
    args.orderings = args.orderings.split(",")
    path, urls_path = GRAPHS[args.graph]
    if not path.exists():
        print(f"{path} is missing (the graphs of ../shared/data); try --graph polblogs", file=sys.stderr)
        return 2
    graph, urls = read_graph(path), read_urls(urls_path)
    SHARED.update(graph=graph, urls=urls, payload=payloads(graph, urls), seed=default_seed(graph))
    print(f"{args.graph}: {len(graph.nodes)} pages; {os.cpu_count()} cores; seed {SHARED['seed']}", flush=True)
    rows: list[dict[str, Any]] = []
    for target in args.targets.split(","):
        run_target(target, args, rows)
    print(markdown(rows))
    for ordering in args.orderings:
        one = [r["redis_cpu_us_per_page"] for r in rows if r["ordering"] == ordering and r["target"] == "server"]
        if one:
            print(f"{ordering}: one server, median {statistics.median(one):.0f} µs of Redis CPU per page")
    if args.json:
        Path(args.json).write_text(json.dumps({"graph": args.graph, "cores": os.cpu_count(), "rows": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
