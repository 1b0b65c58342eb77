"""A real recrawl: how much earlier a rerun of a finished crawl (its prior the finished
crawl's PageRank, issue 42) reaches the important pages than a crawl without a prior.

1. serve the EmacsWiki graph (shipped) on a free port and crawl it to the end
   (``scrapy crawl graph``, crawl id ``recrawl``, embedded Redis in ``OUT/redis``);
2. re-wire a share of its links (``ipr-crawl rewire-graph``) and serve the re-wired
   graph under the same URLs (same port, same seed page);
3. crawl it (a) as a rerun: the same crawl id and Redis, so the finished crawl is
   archived as ``recrawl~1`` and is the prior; (b) afresh without a prior (another
   crawl id, another Redis);
4. score both against the re-wired graph's PageRank as ``ipr-crawl demo`` does
   (:mod:`ipr_crawl.evaluation.metrics`): criterion A for the top 1 % of the
   reachable pages and criterion B, after 1 %, 5 % and 10 % of them.

Usage: ``python benchmarks/recrawl.py --out /tmp/recrawl [--share 0.2]``; prints
and writes ``OUT/recrawl.json``. One run of each crawl (default concurrency, at
LOG_LEVEL=DEBUG for the fetch order): not a speed measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from ipr_crawl.evaluation.demo import _stop_embedded_redis, fetch_order_from_log, nodes_of_urls
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

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "ipr_crawl" / "data"
FRACTIONS = (0.01, 0.05, 0.10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(graph: Path, urls: Path, port: int, seed: int) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "ipr_crawl.cli", "serve-graph", str(graph), "--urls", str(urls),
           "--port", str(port), "--seed", str(seed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " at http://" not in line:
        proc.kill()
        raise RuntimeError(f"{' '.join(cmd)}: {line!r}")
    return proc, line.rsplit(" at ", 1)[1].strip()


def crawl(name: str, url: str, out: Path, data_dir: Path, crawl_id: str) -> dict:
    log = out / f"{name}.log"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={url}",
           "-s", f"IPR_DATA_DIR={data_dir}", "-s", f"IPR_CRAWL_ID={crawl_id}", "-s", f"LOG_FILE={log}",
           "-s", "LOG_FILE_APPEND=False", "-s", "LOG_LEVEL=DEBUG"]
    print("[recrawl]", " ".join(cmd[1:]), flush=True)
    t0 = time.monotonic()
    try:
        code = subprocess.run(cmd, cwd=REPO).returncode
    finally:
        _stop_embedded_redis(str(data_dir))
    if code:
        raise RuntimeError(f"{name}: scrapy crawl exited with {code}; see {log}")
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = [x.split("INFO: ", 1)[-1] for x in text.splitlines() if "ipr-crawl: crawl" in x and "INFO" in x]
    return {"log": str(log), "wall_seconds": round(time.monotonic() - t0, 1), "urls": fetch_order_from_log(str(log)),
            "start_lines": [x for x in lines if "finished before" in x or "ordered by" in x]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the logs, the Redis data and recrawl.json")
    p.add_argument("--share", type=float, default=0.2, help="share of links re-wired (default %(default)s)")
    p.add_argument("--rewire-seed", type=int, default=1)
    args = p.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    graph_path, urls_path = DATA / "emacswiki.tsv.gz", DATA / "emacswiki.urls.tsv.gz"
    rewired_path = out / "emacswiki-rewired.tsv.gz"
    subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "rewire-graph", "--graph", str(graph_path),
                    "--share", str(args.share), "--seed", str(args.rewire_seed), "--out", str(rewired_path)],
                   check=True, cwd=REPO)
    graph, urls = read_graph(graph_path), read_urls(urls_path)
    seed = default_seed(graph)
    port = free_port()
    runs = {}
    server, url = serve(graph_path, urls_path, port, seed)
    try:
        runs["first"] = crawl("first", url, out, out / "redis", "recrawl")
    finally:
        server.terminate()
        server.wait(10)
    server, url2 = serve(rewired_path, urls_path, port, seed)
    assert url2 == url, (url, url2)
    try:
        runs["rerun"] = crawl("rerun", url, out, out / "redis", "recrawl")
        runs["fresh"] = crawl("fresh", url, out, out / "redis-fresh", "recrawl-fresh")
    finally:
        server.terminate()
        server.wait(10)
    rewired = read_graph(rewired_path)
    by_path = path_to_node(page_paths(rewired, urls))
    reach = reachable(rewired, seed)
    pr = pagerank(rewired, damping=0.85)
    top = top_set(pr, reach, 0.01)
    total = len(reach)
    result: dict = {"graph": "emacswiki", "share_rewired": args.share, "rewire_seed": args.rewire_seed, "seed": seed,
                    "reachable_after": total, "top_1pct": len(top), "runs": {}}
    orders = {}
    for name, run in runs.items():
        order, _ = nodes_of_urls(run["urls"], by_path)
        orders[name] = order
        row = {"pages_fetched": len(order), "wall_seconds": run["wall_seconds"], "start_lines": run["start_lines"]}
        if name != "first":  # scored against the re-wired graph
            a, b = criterion_a_curve(order, top), criterion_b_curve(order, pr)
            for f in FRACTIONS:
                row[f"A_top1pct_at_{round(f * 100)}pct"] = round(share_at(a, f, total), 4)
                row[f"B_at_{round(f * 100)}pct"] = round(share_at(b, f, total), 4)
        result["runs"][name] = row
    limit = sorted(reach, key=lambda n: (-pr[n], n))
    a, b = criterion_a_curve(limit, top), criterion_b_curve(limit, pr)
    result["limit"] = {f"A_top1pct_at_{round(f * 100)}pct": round(share_at(a, f, total), 4) for f in FRACTIONS}
    result["limit"].update({f"B_at_{round(f * 100)}pct": round(share_at(b, f, total), 4) for f in FRACTIONS})
    # the pages the rerun reaches first: how many of the top 1 % among its first 1 % of fetches
    k = max(1, total // 100)
    for name in ("rerun", "fresh"):
        result["runs"][name]["top1pct_in_first_1pct"] = len(set(orders[name][:k]) & top)
    (out / "recrawl.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.pop("SCRAPY_SETTINGS_MODULE", None)
    sys.exit(main())
