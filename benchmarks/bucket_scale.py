"""Bucket mode (IPR_CLUSTER_BUCKETS), measured: traffic between buckets, memory, and
Redis CPU per page on 1, 2 and 3 masters.

The crawl's per-page path without HTTP: pop a batch of 8 (as IPR_POP_BATCH_SIZE), record
each page with its out-links (``record_page``; one Python process), every page of the
graph enqueued as a start URL so that the whole graph is crawled. A page's bucket is
its real host's (:func:`ipr_crawl.ordering.urls.bucket_of` on the graph's URLs).

``traffic``: on one redis-server, B = 1, 2, 4, 8, 16 buckets; per fetched page: outbox
entries (messages: one per page and bucket its links reach, plus push's residuals
sent on), links that cross buckets, bytes of the entries; and the crawl's bytes per
known URL in Redis (MEMORY USAGE of every key after the crawl) against B = 1.

``cpu``: Redis Clusters of 1, 2, 3 masters (no replicas; appendonly everysec) with 1 and
8 buckets, and one plain server; per configuration pages/s of the one client and Redis
CPU per page (the masters' used_cpu_user + used_cpu_sys, INFO CPU, summed), with the
busiest master's share. On a machine with 2 cores the client and every server share
them, so the wall-clock figure is not a scaling figure: the projection in
docs/scaling.md is made from CPU per page.

    python benchmarks/bucket_scale.py traffic [--graph G --urls U ...] [--json out.json]
    python benchmarks/bucket_scale.py cpu [--graph G --urls U] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "helpers"))

from procs import LocalCluster, RedisServer  # noqa: E402

from ipr_crawl.evaluation.graphio import read_graph, read_urls  # noqa: E402
from ipr_crawl.ordering.params import OrderingParams  # noqa: E402
from ipr_crawl.ordering.urls import bucket_of  # noqa: E402
from ipr_crawl.store import Link, connect  # noqa: E402
from ipr_crawl.store.buckets import open_frontier  # noqa: E402
from ipr_crawl.store.retry import RedisRetry  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "graphs"
GRAPHS = {
    "epa": (REPO / "tests" / "data" / "epa.tsv.gz", REPO / "tests" / "data" / "epa.urls.tsv.gz"),
    "polblogs": (REPO / "tests" / "data" / "polblogs.tsv.gz", REPO / "tests" / "data" / "polblogs.urls.tsv.gz"),
    "ukwa-1996-hosts": (SHARED / "ukwa-1996-hosts.tsv.gz", SHARED / "ukwa-1996-hosts.urls.tsv.gz"),
}


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def host_url(url: str) -> str:
    return url if "://" in url else "http://" + url


def graph_spider() -> Any:
    """A spider whose ``parse`` is the callback of every benchmark request."""
    from scrapy import Spider

    class Bench(Spider):
        name = "bench"

        def parse(self, response: Any) -> None:
            return None

    return Bench()


def payloads(graph: Any, urls: dict[int, str]) -> dict[int, bytes]:
    """Each page's request as the scheduler stores it (scheduler/codec.py): a GET of
    its URL with the spider's ``parse`` callback, about 80 B."""
    from scrapy import Request

    from ipr_crawl.scheduler.codec import encode_request

    spider = graph_spider()
    return {n: encode_request(Request(host_url(urls.get(n, f"x{n}.example")), callback=spider.parse), spider)[0]
            for n in graph.nodes}


_PAYLOADS: dict[int, dict[int, bytes]] = {}


def crawl(client: Any, graph: Any, urls: dict[int, str], buckets: int, ordering: str = "push") -> dict[str, Any]:
    """Crawl every page of ``graph`` through a (bucketed) frontier; returns counts.
    Every link carries its request payload (a real crawl sends one with every link to
    another bucket, and with each URL new to the process)."""
    bucket = {n: bucket_of(host_url(urls.get(n, "")), buckets) for n in graph.nodes}
    if id(graph) not in _PAYLOADS:
        _PAYLOADS[id(graph)] = payloads(graph, urls)
    payload = _PAYLOADS[id(graph)]
    store = open_frontier(client, f"bench-{uuid.uuid4().hex[:8]}", OrderingParams(ordering=ordering), buckets)
    store.open()
    kw = (lambda n: {"bucket": bucket[n]}) if buckets > 1 else (lambda n: {})
    pipe = [store.enqueue(nid(n), 0, payload[n], False, **kw(n)) for n in graph.nodes]
    assert all(pipe)
    crossing = links = pages = 0
    t0 = time.perf_counter()
    while True:
        _, items = store.pop(8, 600)
        if not items:
            if store.pending() == 0:
                break
            continue
        for member, _payload in items:
            n = int.from_bytes(member[8:], "big")
            targets = list(dict.fromkeys(graph.out.get(n, ())))
            crossing += sum(bucket[t] != bucket[n] for t in targets)
            links += len(targets)
            store.record_page(nid(n), 0, [Link(nid(t), 0, payload[t], bucket[t]) for t in targets], lease=member, **kw(n))
            pages += 1
    seconds = time.perf_counter() - t0
    out = {"pages": pages, "links": links, "crossing_links": crossing, "seconds": seconds,
           "known": store.counts()["known"]}
    if buckets > 1:
        out.update(messages=store.relayed, message_bytes=store.relayed_bytes)
    else:
        out.update(messages=0, message_bytes=0)
    store.close()
    out["store"] = store
    return out


def traffic(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in args.graphs:
        path, urls_path = GRAPHS[name]
        if not path.exists():
            print(f"{name}: {path} missing, skipped")
            continue
        graph, urls = read_graph(path), read_urls(urls_path)
        rows = []
        for b in args.buckets:
            with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp), appendfsync="everysec") as server:
                client = connect(server.url, "", retry=RedisRetry(30))
                r = crawl(client, graph, urls, b)
                used = key_bytes(client)
                r.pop("store")
                client.close()
            r.update(buckets=b, used_memory=used, bytes_per_url=used / r["known"],
                     messages_per_page=r["messages"] / r["pages"], bytes_per_page=r["message_bytes"] / r["pages"],
                     crossing_per_page=r["crossing_links"] / r["pages"], pages_per_sec=r["pages"] / r["seconds"])
            rows.append(r)
            print(f"{name} B={b:2d}: {r['pages']} pages, {r['links']} links; per page {r['messages_per_page']:.2f} "
                  f"messages, {r['crossing_per_page']:.2f} crossing links, {r['bytes_per_page']:.0f} B; "
                  f"{r['bytes_per_url']:.0f} B of Redis memory per URL; {r['pages_per_sec']:.0f} pages/s", flush=True)
        results[name] = rows
    return results


def key_bytes(client: Any) -> int:
    """Bytes of every key of the server (MEMORY USAGE ... SAMPLES 0: exact), which holds
    one crawl: the data, without buffers that come and go (AOF, clients)."""
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter(count=1000))


def redis_cpu(nodes: list[Any]) -> list[float]:
    """Each node's ``used_cpu_user + used_cpu_sys`` (``INFO cpu``), seconds."""
    out = []
    for node in nodes:
        info = node.info("cpu")
        out.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
    return out


def cpu(args: argparse.Namespace) -> dict[str, Any]:
    import redis

    path, urls_path = GRAPHS[args.graphs[0]]
    graph, urls = read_graph(path), read_urls(urls_path)
    rows = []
    configs = [("server", 0, 1)] + [(f"cluster {m} master{'s' * (m > 1)}", m, b) for m in (1, 2, 3) for b in (1, 8)]
    for label, masters, b in configs:
        with tempfile.TemporaryDirectory() as tmp:
            if masters == 0:
                ctx: Any = RedisServer(Path(tmp), appendfsync="everysec")
                server = ctx.__enter__()
                url, ports = server.url, None
            else:
                ctx = LocalCluster(Path(tmp), masters=masters, replicas=0, appendfsync="everysec")
                ctx.start()
                url, ports = ctx.url, ctx.ports[:masters]
            try:
                client = connect(url, "", retry=RedisRetry(30))
                nodes = [client] if ports is None else [redis.Redis(port=p) for p in ports]
                before = redis_cpu(nodes)
                r = crawl(client, graph, urls, b)
                r.pop("store")
                spent = [a - c for a, c in zip(redis_cpu(nodes), before)]
                for node in nodes:
                    if node is not client:
                        node.close()
                client.close()
            finally:
                ctx.stop() if masters else ctx.__exit__(None, None, None)
        per_page = sum(spent) / r["pages"]
        row = {"config": label, "masters": masters or 1, "buckets": b, "pages": r["pages"],
               "pages_per_sec": r["pages"] / r["seconds"], "redis_cpu_us_per_page": 1e6 * per_page,
               "busiest_share": max(spent) / sum(spent) if sum(spent) else 1.0,
               "messages_per_page": r["messages"] / r["pages"]}
        rows.append(row)
        print(f"{label:18s} B={b}: {row['pages_per_sec']:.0f} pages/s, Redis CPU {row['redis_cpu_us_per_page']:.0f} "
              f"µs/page, busiest master {100 * row['busiest_share']:.0f} % of it", flush=True)
    return {"graph": args.graphs[0], "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("traffic", "cpu"))
    p.add_argument("--graphs", nargs="+", default=["epa", "polblogs", "ukwa-1996-hosts"], choices=sorted(GRAPHS))
    p.add_argument("--buckets", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    res = traffic(args) if args.what == "traffic" else cpu(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
