"""Why periodic ``pr`` beats ``push`` on web-NotreDame: variants of both rules, fast.

A heap-based re-statement of the two rules (not the store's Lua; it breaks ties a
little differently: plain ``push`` is within 0.002 of the Lua rule's A(1 %) on
web-NotreDame and uk-2007-05@100000, 0.009 above it on cnr-2000), to try variants on
the large graphs in minutes. Prints B (PageRank mass fetched) and A(1 %) (share of
the top 1 % fetched) at each checkpoint, one line per variant:

- ``push``: the rule (``IPR_PUSH_BUDGET`` 10, damping 0.85, residual index by levels);
- ``pr``: one power iteration over the collected graph every 1 % of the reachable
  pages (Yamada et al. 2004, §4.2, as ``ipr-crawl simulate`` runs it; a URL found in
  between waits at priority 0 until the next step): gives the results tables' ``pr``;
- ``pr-converged``: the same schedule and wait, the collected graph's converged PageRank;
- ``push+wait=F``: ``push`` whose new URLs wait at priority 0 until the next multiple of
  F x the reachable pages (every other score live);
- ``push+lag=R``: a URL found when k pages are fetched waits until k (1 + R);
- ``push+startmass=M``: the start URL begins with mass M (each fetched page adds 1);
- ``push+mix=R``: every R-th page is the queued URL found first (breadth-first);
- ``push+inpow=K``: a queued URL's priority x c^K, c = fetched pages linking to it.
- ``push+addc=K``: a queued URL's priority + K x c x (known URLs - fetched) / out-links
  recorded (site_rules.py's ``addc``), computed when its priority last changed;
- ``push+addcap1=K``: the same, that term at most the priority itself (site_rules.py's
  ``addc=K,addcap=1``).
- ``push+band=R``: priorities within a factor 1 + R of each other are equal (the
  priority's logarithm to base 1 + R, rounded down; site_rules.py's ``band``), then
  discovery order.

    python benchmarks/new_url_wait.py --graph ../shared/data/graphs/web-NotreDame.tsv.gz \\
        push pr pr-converged push+wait=0.01 push+lag=0.05 [--checkpoints 0.05,0.1,0.2]

Measured 2026-11-24: docs/research/orderings.md, the `push` section.
"""

from __future__ import annotations

import argparse
import heapq
import math
from collections.abc import Sequence

import numpy as np

from ipr_crawl.evaluation.graphio import default_seed, pagerank, reachable, read_graph
from ipr_crawl.evaluation.metrics import top_set
from ipr_crawl.ordering.pagerank import power_step
from ipr_crawl.ordering.reference import resid_level


def push_order(out: dict[int, list[int]], seed: int, limit: int, budget: int = 10, damping: float = 0.85,
               start_mass: float = 1.0, wait: int | None = None, lag: float | None = None,
               mix: int = 0, inpow: float = 0.0, addc: float = 0.0, addcap: float = float("inf"),
               band: float = 0.0) -> list[int]:
    """Fetch order of ``push`` from ``seed``, at most ``limit`` pages. ``wait``: new URLs
    wait until the fetched count reaches the next multiple of ``wait``; ``lag``: a URL
    found at k fetched pages waits until k (1 + lag); ``mix`` R: every R-th page is the
    queued URL found first (breadth-first), the others by priority; ``inpow`` K: a queued
    URL's priority x c^K, c = fetched pages linking to it; ``addc`` K: plus K x c x (known
    URLs - fetched) / out-links recorded, when the priority last changed, at most ``addcap``
    x the priority; ``band`` R: priorities compared as floor(log_(1+R) priority)."""
    s: dict[int, float] = {}
    a: dict[int, float] = {}
    state: dict[int, int] = {}  # 0 queued, 2 fetched
    seq: dict[int, int] = {}
    ver: dict[int, int] = {}
    heap: list[tuple[float, int, int, int]] = []  # (-priority, seq, node, version)
    fifo: list[tuple[int, int]] = []  # mix: (seq, node)
    held: set[int] = set()  # new URLs waiting at priority 0
    release: list[tuple[float, int]] = []  # lag: (fetched count, node)
    rver: dict[int, int] = {}
    rheap: list[tuple[int, int, int, int]] = []  # (-level, -node, node, version)
    links = out  # read_graph keeps each link once
    inl: dict[int, int] = {}

    tot = [0, 0]  # fetched, out-links recorded

    def queue(v: int, priority: float) -> None:
        ver[v] = ver.get(v, 0) + 1
        if addc and tot[0] and tot[1]:
            priority += min(addc * (len(state) - tot[0]) / tot[1] * inl.get(v, 0), addcap * priority)
        if inpow:
            priority *= inl.get(v, 0) ** inpow
        if band:
            priority = float(math.floor(math.log(priority) / math.log1p(band))) if priority > 0 else -math.inf
        heapq.heappush(heap, (-priority, seq[v], v, ver[v]))

    def index(v: int) -> None:
        rver[v] = rver.get(v, 0) + 1
        od = len(links.get(v, ()))
        if od and a[v] > 0:
            heapq.heappush(rheap, (-resid_level(a[v] / od), -v, v, rver[v]))

    def gain(v: int, x: float) -> None:
        if state[v] == 2:
            a[v] += x
            index(v)
        else:
            s[v] += x
            if v not in held:
                queue(v, s[v])

    seq[seed], state[seed], s[seed], a[seed] = 0, 0, 0.0, 0.0
    queue(seed, 0.0)
    order: list[int] = []
    pushing: tuple[int, float, int] | None = None
    if mix:
        fifo.append((0, seed))
    while heap and len(order) < limit:
        if mix and len(order) % mix == mix - 1:
            while fifo and state[fifo[0][1]] != 0:
                heapq.heappop(fifo)
            if not fifo:
                break
            v = heapq.heappop(fifo)[1]
        else:
            _, _, v, version = heapq.heappop(heap)
            if version != ver[v] or state[v] != 0:
                continue
        order.append(v)
        state[v] = 2
        k = len(order)
        ready: list[int] = []
        if lag is not None:
            while release and release[0][0] <= k:
                ready.append(heapq.heappop(release)[1])
        elif wait and k % wait == 0:
            ready = list(held)
        for u in ready:
            held.discard(u)
            if state[u] == 0:
                queue(u, s[u])
        m = s[v] + (start_mass if k == 1 else 1.0)
        s[v] = (1 - damping) * m
        targets = links.get(v, [])
        tot[0] += 1
        tot[1] += len(targets)
        share = damping * m / len(targets) if targets else 0.0
        for t in targets:
            inl[t] = inl.get(t, 0) + 1
            if t not in state:
                seq[t], state[t], s[t], a[t] = len(seq), 0, share, 0.0
                if mix:
                    heapq.heappush(fifo, (seq[t], t))
                if wait or lag is not None:
                    held.add(t)
                    queue(t, 0.0)
                    if lag is not None:
                        heapq.heappush(release, (k * (1 + lag) + 1, t))
                else:
                    queue(t, share)
            else:
                gain(t, share)
        index(v)
        left = budget
        while left > 0:
            if pushing is None:
                while rheap and rheap[0][3] != rver[rheap[0][2]]:
                    heapq.heappop(rheap)
                if not rheap:
                    break
                q = heapq.heappop(rheap)[2]
                r, a[q] = a[q], 0.0
                rver[q] += 1
                s[q] += (1 - damping) * r
                pushing = (q, damping * r / len(links[q]), 0)
            q, part, start = pushing
            end = min(len(links[q]), start + left)
            for t in links[q][start:end]:
                gain(t, part)
            left -= end - start
            pushing = (q, part, end) if end < len(links[q]) else None
    return order


def pr_order(out: dict[int, list[int]], seed: int, limit: int, interval: int, converged: bool,
             damping: float = 0.85) -> list[int]:
    """Fetch order of periodic PageRank: every ``interval`` pages one power iteration
    (or iterations to convergence) over the collected graph, starting from the last
    values; a URL found in between has priority 0 until then (ties: discovery order)."""
    idx = {seed: 0}
    nodes = [seed]
    score = {seed: 0.0}
    fetched: set[int] = set()
    src: list[int] = []
    dst: list[int] = []
    x = np.zeros(1)
    heap = [(0.0, 0, seed)]
    order: list[int] = []
    while heap and len(order) < limit:
        neg, _, v = heapq.heappop(heap)
        if v in fetched or -neg != score[v]:
            continue
        fetched.add(v)
        order.append(v)
        for t in out.get(v, ()):
            if t not in idx:
                idx[t] = len(nodes)
                nodes.append(t)
                score[t] = 0.0
                heapq.heappush(heap, (0.0, idx[t], t))
            src.append(idx[v])
            dst.append(idx[t])
        if len(order) % interval == 0:
            n = len(nodes)
            prev = np.zeros(n)
            prev[: len(x)] = x
            sa, da = np.array(src), np.array(dst)
            x = power_step(n, sa, da, prev, damping)
            for _ in range(99 if converged else 0):
                y = power_step(n, sa, da, x, damping)
                done = np.abs(y - x).sum() < n * 1e-9
                x = y
                if done:
                    break
            for i, u in enumerate(nodes):
                if u not in fetched and score[u] != x[i]:
                    score[u] = float(x[i])
                    heapq.heappush(heap, (-score[u], i, u))
    return order


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", required=True, help="edge list (.tsv.gz), as ipr-crawl simulate reads")
    ap.add_argument("--checkpoints", default="0.01,0.05,0.1,0.2,0.5", help="shares of the reachable pages")
    ap.add_argument("variants", nargs="+", help="push, pr, pr-converged, push+wait=F, push+lag=R, push+startmass=M, push+mix=R, push+inpow=K, push+addc=K, push+addcap1=K, push+band=R")
    args = ap.parse_args(argv)
    g = read_graph(args.graph)
    seed = default_seed(g)
    reach = reachable(g, seed)
    n = len(reach)
    pr = pagerank(g)
    top = top_set(pr, reach, 0.01)
    cps = [float(c) for c in args.checkpoints.split(",")]
    limit = int(max(cps) * n)
    interval = max(1, n // 100)
    for variant in args.variants:
        name, _, value = variant.partition("=")
        if name == "push":
            order = push_order(g.out, seed, limit)
        elif name == "pr" or name == "pr-converged":
            order = pr_order(g.out, seed, limit, interval, converged=name == "pr-converged")
        elif name == "push+wait":
            order = push_order(g.out, seed, limit, wait=max(1, int(float(value) * n)))
        elif name == "push+lag":
            order = push_order(g.out, seed, limit, lag=float(value))
        elif name == "push+mix":
            order = push_order(g.out, seed, limit, mix=int(value))
        elif name == "push+startmass":
            order = push_order(g.out, seed, limit, start_mass=float(value))
        elif name == "push+addc":
            order = push_order(g.out, seed, limit, addc=float(value))
        elif name == "push+addcap1":
            order = push_order(g.out, seed, limit, addc=float(value), addcap=1.0)
        elif name == "push+band":
            order = push_order(g.out, seed, limit, band=float(value))
        elif name == "push+inpow":
            order = push_order(g.out, seed, limit, inpow=float(value))
        else:
            ap.error(f"unknown variant {variant!r}")
        cells = []
        for c in cps:
            got = order[: int(c * n)]
            cells.append(f"{c:.0%} B {sum(pr[v] for v in got):.3f} A {len(top.intersection(got)) / len(top):.3f}")
        print(f"{g.name} {variant:20s} " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
