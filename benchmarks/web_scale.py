"""The frontier at ten million known URLs: Redis memory per queued and per fetched URL,
and the cost per page, at each checkpoint of a crawl of a generated web
(:mod:`webgen`); then scrapy-redis's memory for the same URLs (issue 51, item 1).
Run through ``benchmarks/frontier_scale.py --web 10000000``.

The crawl is the scheduler's Redis path without HTTP: the frontier's own scripts
(:func:`ipr_crawl.store.buckets.open_frontier`, ``IPR_ORDERING`` ``--web-ordering``),
batches of 8 leased, each page recorded with its out-links (``record_page``). A link
carries its request payload (the scheduler's codec of ``Request(url, callback=parse)``)
the first time the process meets it, as the scheduler's link cache does. It runs until
the crawl knows ``--web`` URLs.

At every checkpoint of known URLs (100 k, 300 k, 1 M, 3 M, 10 M):

- ``MEMORY USAGE ... SAMPLES 0`` (exact) of each of the crawl's keys;
- the node records' bytes per URL: the ``node`` hash less 8 B per recorded edge, over
  known URLs (a record holds its page's out-link ids, 8 B each);
- **per queued URL**: its request payload (``req``) and frontier entry (``frontier``,
  ``rprio``) over queued URLs, plus a node record;
- **per fetched URL**: a node record, plus 8 B per recorded edge;
- pages/s and Redis CPU per page (``INFO cpu``) since the previous checkpoint.

scrapy-redis, same URLs, same server, afterwards: every URL the crawl queued is a
request in its ``PriorityQueue`` (the bytes its ``push`` writes, sent in pipelines) and
every known URL a fingerprint in its ``RFPDupeFilter`` set.
"""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

from bucket_scale import graph_spider, redis_cpu
from webgen import GeneratedWeb

from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.urls import node_id
from ipr_crawl.store import Link
from ipr_crawl.store.buckets import open_frontier
from ipr_crawl.store.memory import key_usage

CHECKPOINTS = (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)


def command_usec(client: Any) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: command -> (calls, µs) so far; the commands a script runs
    are counted under their own names as well as under ``evalsha``."""
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in client.info("commandstats").items()}


def per_page(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], pages: int) -> dict[str, Any]:
    """Calls and µs per page of each command between two :func:`command_usec` readings,
    busiest first (commands of less than 0.5 µs per page left out)."""
    out = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if (usec - u0) / max(1, pages) >= 0.5:
            out[name] = {"calls_per_page": (calls - c0) / max(1, pages), "us_per_page": (usec - u0) / max(1, pages),
                         "us_per_call": (usec - u0) / max(1, calls - c0)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["us_per_page"]))


def checkpoint_row(client: Any, store: Any, edges: int, pages: int, window: tuple[float, float, int],
                   commands: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures of one checkpoint; ``window``: (wall s, Redis CPU s, pages) since the last;
    ``commands``: :func:`per_page` over the same window."""
    usage = key_usage(client, store.crawl_id)
    counts = store.counts()
    queued = counts["frontier"] + counts["forced"] + counts["in_flight"]
    wall, cpu, n = window
    return {
        **figures(usage, counts["known"], counts["fetched"], queued, edges), "pages": pages,
        "pages_per_sec": n / wall if wall else 0.0, "redis_cpu_us_per_page": 1e6 * cpu / max(1, n),
        "commands": commands or {},
    }


#: keys held per queued URL (its payload, frontier entry, Request.priority) and per
#: fetched URL (push's residual of a fetched page, ``resid``)
QUEUED_KEYS, FETCHED_KEYS = ("req", "frontier", "rprio"), ("resid",)


def figures(usage: dict[str, int], known: int, fetched: int, queued: int, edges: int) -> dict[str, Any]:
    """Bytes per queued and per fetched URL from the crawl's key sizes (``usage``): a node
    record each (the ``node`` hash less 8 B per recorded edge, over known URLs), plus the
    keys of :data:`QUEUED_KEYS` over queued URLs or of :data:`FETCHED_KEYS` over fetched
    ones; the other keys (``other_keys_bytes``) are the crawl's own, not per URL."""
    record = (usage.get("node", 0) - 8 * edges) / known
    per_queued = sum(usage.get(k, 0) for k in QUEUED_KEYS) / max(1, queued)
    per_fetched = sum(usage.get(k, 0) for k in FETCHED_KEYS) / max(1, fetched)
    return {
        "known": known, "fetched": fetched, "queued": queued, "edges": edges,
        "bytes_all_keys": sum(usage.values()), "bytes_per_known_url": sum(usage.values()) / known,
        "record_bytes_per_url": record, "bytes_per_queued_url": record + per_queued,
        "bytes_per_fetched_url": record + per_fetched, "bytes_per_edge": 8.0,
        "other_keys_bytes": sum(v for k, v in usage.items() if k not in ("node", *QUEUED_KEYS, *FETCHED_KEYS)),
        "usage": usage,
    }


def crawl(client: Any, target: int, ordering: str = "push", seed: int = 1,
          checkpoints: tuple[int, ...] = CHECKPOINTS) -> dict[str, Any]:
    """Crawl a :class:`GeneratedWeb` until ``target`` URLs are known; the rows at each
    checkpoint, and what the scrapy-redis comparison needs (``where``, ``fetched_ids``)."""
    from scrapy import Request

    from ipr_crawl.scheduler.codec import encode_request

    web, spider = GeneratedWeb(seed=seed), graph_spider()
    store = open_frontier(client, f"web-{uuid.uuid4().hex[:8]}", OrderingParams(ordering=ordering), 1)
    store.open()
    where: dict[bytes, int] = {}  # node id -> host << 32 | page: every URL this process has sent

    def payload(host: int, page: int) -> bytes:
        return encode_request(Request(web.url(host, page), callback=spider.parse), spider)[0]

    home = node_id(web.url(0, 0))
    where[home] = 0
    assert store.enqueue(home, 0, payload(0, 0), False)
    marks = [c for c in checkpoints if c < target] + [target]
    rows: list[dict[str, Any]] = []
    fetched_ids: set[bytes] = set()
    pages = edges = 0
    t_mark, cpu_mark, pages_mark = time.perf_counter(), redis_cpu([client])[0], 0
    cmd_mark = command_usec(client)
    while marks:
        _, items = store.pop(8, 600)
        if not items:
            break
        for member, _payload in items:
            page_id = member[8:]
            code = where[page_id]
            host, page = code >> 32, code & 0xFFFFFFFF
            links: list[Link] = []
            for t_host, t_page in dict.fromkeys(web.links(host, page)):
                tid = node_id(web.url(t_host, t_page))
                if tid in where:
                    links.append(Link(tid, 0, b""))
                else:
                    where[tid] = t_host << 32 | t_page
                    links.append(Link(tid, 0, payload(t_host, t_page)))
            links = list({link.id: link for link in links if link.id != page_id}.values())
            store.record_page(page_id, 0, links, lease=member)
            fetched_ids.add(page_id)
            pages += 1
            edges += len(links)
        if len(where) >= marks[0]:
            now, cpu = time.perf_counter(), redis_cpu([client])[0]
            commands = per_page(cmd_mark, command_usec(client), pages - pages_mark)
            row = checkpoint_row(client, store, edges, pages, (now - t_mark, cpu - cpu_mark, pages - pages_mark),
                                 commands)
            rows.append(row)
            print(f"  {row['known']:>10,} known  {row['fetched']:>9,} fetched  {row['pages_per_sec']:7.0f} pages/s  "
                  f"Redis {row['redis_cpu_us_per_page']:5.0f} µs/page  {row['bytes_per_queued_url']:6.1f} B/queued  "
                  f"{row['bytes_per_fetched_url']:6.1f} B/fetched (+8 B/edge)  {row['bytes_all_keys'] / 2**20:8.1f} MiB",
                  file=sys.stderr, flush=True)
            print("    µs/page: " + ", ".join(f"{k} {v['us_per_page']:.0f} ({v['calls_per_page']:.1f} × "
                                                f"{v['us_per_call']:.2f})" for k, v in list(commands.items())[:8]),
                  file=sys.stderr, flush=True)
            marks = [m for m in marks if m > len(where)]
            t_mark, cpu_mark, pages_mark = time.perf_counter(), redis_cpu([client])[0], pages
            cmd_mark = command_usec(client)
    out = {"ordering": ordering, "rows": rows, "crawl_id": store.crawl_id, "web": web, "where": where,
           "fetched_ids": fetched_ids, "spider": spider}
    return out


def scrapy_redis_same_urls(client: Any, run: dict[str, Any], chunk: int = 5000) -> dict[str, Any]:
    """scrapy-redis's bytes for the crawl's URLs: its queue holds the URLs the crawl
    still queues, its dupefilter every known URL."""
    from scrapy import Request
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.queue import PriorityQueue

    web, spider, where, fetched = run["web"], run["spider"], run["where"], run["fetched_ids"]
    key = f"sr-{uuid.uuid4().hex[:6]}"
    queue = PriorityQueue(client, spider, f"{key}:requests")
    dupefilter = RFPDupeFilter(client, f"{key}:dupefilter")
    pipe = client.pipeline(transaction=False)
    queued = 0
    for i, (nid, code) in enumerate(where.items()):
        request = Request(web.url(code >> 32, code & 0xFFFFFFFF), callback=spider.parse)
        pipe.sadd(dupefilter.key, dupefilter.request_fingerprint(request))
        if nid not in fetched:
            pipe.execute_command("ZADD", queue.key, -request.priority, queue._encode_request(request))
            queued += 1
        if i % chunk == chunk - 1:
            pipe.execute()
    pipe.execute()
    q_bytes = int(client.memory_usage(queue.key, samples=0) or 0)
    d_bytes = int(client.memory_usage(dupefilter.key, samples=0) or 0)
    known = len(where)
    client.delete(queue.key, dupefilter.key)
    return {"known": known, "queued": queued, "queue_bytes": q_bytes, "dupefilter_bytes": d_bytes,
            "bytes_per_queued_url": q_bytes / queued + d_bytes / known, "bytes_per_fetched_url": d_bytes / known}


def markdown(run: dict[str, Any], sr: dict[str, Any] | None) -> str:
    lines = ["| known URLs | fetched | queued | edges | pages/s (since the row before) | Redis CPU µs/page | "
             "B per queued URL | B per fetched URL (+ 8 B per edge) | B per known URL, all keys | Redis MiB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in run["rows"]:
        lines.append(f"| {r['known']:,} | {r['fetched']:,} | {r['queued']:,} | {r['edges']:,} | {r['pages_per_sec']:.0f} | "
                     f"{r['redis_cpu_us_per_page']:.0f} | {r['bytes_per_queued_url']:.1f} | {r['bytes_per_fetched_url']:.1f} | "
                     f"{r['bytes_per_known_url']:.1f} | {r['bytes_all_keys'] / 2**20:.0f} |")
    if sr:
        lines.append(f"\nscrapy-redis, the same {sr['known']:,} URLs ({sr['queued']:,} queued): "
                     f"{sr['bytes_per_queued_url']:.1f} B per queued URL (queue entry + dupefilter entry), "
                     f"{sr['bytes_per_fetched_url']:.1f} B per fetched URL (dupefilter entry).")
    return "\n".join(lines)
