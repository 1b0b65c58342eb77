"""Politeness-aware pops against Scrapy's DownloaderAwarePriorityQueue (issue 6).

``scrapy crawl graph`` of the six realweb hosts (``../shared/realweb``) with
``DOWNLOAD_DELAY > 0`` (not randomized), a page budget, and the same spider and
settings, interleaved in ONE run, ``--repeat`` rounds:

- ``scrapy-dapq``: Scrapy's scheduler with ``DownloaderAwarePriorityQueue``;
- ``ipr:dl1 global``: ipr-crawl, ``IPR_POLITE_POP=False`` (plain global order);
- ``ipr:dl1 polite``: ipr-crawl, ``IPR_POLITE_POP=True`` (ipr_crawl/polite.py);
- ``ipr:dl1 polite:R``: the same with ``IPR_POLITE_MIN_RATIO=R`` (a free host's best
  URL only if its priority is at least R x the frontier's best);
- (``--configs`` can add ``scrapy``, ``ipr:bf polite``, ``push polite`` (the default
  ordering), ``push polite noparsewait`` (``IPR_WAIT_FOR_PARSE=False``), ... ).

Pages/s is measured as in ``crawl_rate.py`` (responses up to the last one). Criterion
B (Yamada et al. 2004 §4.3): the sum of PageRank over the first N pages fetched,
N = the smallest page count of all runs, with the exact PageRank (networkx,
damping 0.85) of the link graph the crawls discovered: the union over every run of
each parsed page's out-links (redirects folded into their targets). Also given: B at
N/4 and N/2, B at equal time (of the pages each crawl had fetched when the shortest
run ended, seconds after ``spider_opened``), and the pages per host in each crawl.

    python benchmarks/polite_pop.py [--delay 0.1] [--pages 600] [--repeat 2]

``--served harvard500,polblogs,...`` crawls real graphs of ``../shared/data/graphs``
served by ``ipr-crawl serve-graph`` instead, one per port: pages that hold only their
out-links, small and alike, so that the page mix does not decide the pages/s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_rate import SITES, common_settings, run_folder, run_rounds

from ipr_crawl.ordering.urls import canonical_url

CONFIGS = {
    "scrapy": {"IPR_ENABLED": False},
    "scrapy-dapq": {"IPR_ENABLED": False, "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue"},
    "ipr:dl1 global": {"IPR_ORDERING": "ipr:dl1", "IPR_POLITE_POP": False},
    "ipr:dl1 polite": {"IPR_ORDERING": "ipr:dl1", "IPR_POLITE_POP": True},
    "ipr:bf global": {"IPR_ORDERING": "bf", "IPR_POLITE_POP": False},
    "ipr:bf polite": {"IPR_ORDERING": "bf", "IPR_POLITE_POP": True},
    "push global": {"IPR_ORDERING": "push", "IPR_POLITE_POP": False},
    "push polite": {"IPR_ORDERING": "push", "IPR_POLITE_POP": True},
    # the pops not held to the engine's room once the slow start is over
    "push polite noparsewait": {"IPR_ORDERING": "push", "IPR_POLITE_POP": True, "IPR_WAIT_FOR_PARSE": False},
}


def config_settings(name: str) -> dict[str, Any]:
    """Settings of a configuration name (``CONFIGS``, or ``<ordering> polite:R``)."""
    if name in CONFIGS:
        return CONFIGS[name]
    head, _, ratio = name.rpartition(" polite:")
    if head and f"{head} polite" in CONFIGS:
        return {**CONFIGS[f"{head} polite"], "IPR_POLITE_MIN_RATIO": float(ratio)}
    raise SystemExit(f"unknown configuration {name!r}: use one of {sorted(CONFIGS)} or '<ordering> polite:R'")


def canon(url: str) -> str:
    return canonical_url(url)


def discovered_graph(link_files: list[Path]) -> tuple[Any, dict[str, str]]:
    """The union link graph of the runs (networkx DiGraph over canonical URLs) and the
    redirect aliases (redirecting URL -> final URL)."""
    import networkx as nx

    alias: dict[str, str] = {}
    pages: dict[str, list[str]] = {}
    for path in link_files:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            url = canon(row["url"])
            for src in row["from"]:
                alias[canon(src)] = url
            pages.setdefault(url, [canon(u) for u in row["links"]])
    g = nx.DiGraph()
    for url, links in pages.items():
        g.add_node(url)
        for target in links:
            target = alias.get(target, target)
            if target != url:
                g.add_edge(url, target)
    return g, alias


def serve_graphs(names: list[str]) -> tuple[list[Any], list[str]]:
    """Serve each graph of ``GRAPHS`` (``ipr_crawl.evaluation.serve.spawn``, free ports); (processes, seed URLs)."""
    from ipr_crawl.evaluation.serve import spawn

    procs, urls = [], []
    try:
        for name in names:
            path = GRAPHS / f"{name}.tsv.gz"
            url_list = GRAPHS / f"{name}.urls.tsv.gz"
            proc, url = spawn(path, url_list if url_list.exists() else None)
            procs.append(proc)
            urls.append(url)
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    return procs, urls


GRAPHS = Path(__file__).resolve().parents[2] / "shared" / "data" / "graphs"


def main(argv: list[str] | None = None) -> int:
    import networkx as nx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", default="rust,openjdk,scipy,python,django,postgres")
    ap.add_argument("--served", default="", help="graphs to serve and crawl instead of realweb")
    ap.add_argument("--delay", type=float, default=0.1)
    ap.add_argument("--pages", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--configs", default="scrapy-dapq,ipr:dl1 global,ipr:dl1 polite")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    args = ap.parse_args(argv)
    servers: list[Any] = []
    if args.served:
        servers, start_urls = serve_graphs([g.strip() for g in args.served.split(",") if g.strip()])
    else:
        start_urls = [SITES[s.strip()] for s in args.sites.split(",") if s.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for config in configs:
        config_settings(config)
    common = common_settings(args.pages, {
        "DOWNLOAD_DELAY": args.delay, "RANDOMIZE_DOWNLOAD_DELAY": False,
        **dict(kv.split("=", 1) for kv in args.set),
    })
    work = Path(tempfile.mkdtemp(prefix="ipr-polite-"))
    print(f"{len(start_urls)} hosts, DOWNLOAD_DELAY {args.delay}, budget {args.pages}, "
          f"{args.repeat} rounds of {configs}; work folder {work}", file=sys.stderr, flush=True)

    def settings_of(config: str, folder: Path) -> dict[str, Any]:
        settings = {**common, **config_settings(config)}
        if not config.startswith("scrapy"):
            settings["IPR_DATA_DIR"] = str(folder / "ipr-data")
        return settings

    try:
        rows = run_rounds(configs, args.repeat, work, start_urls, args.timeout, settings_of,
                          env_of=lambda folder: {"CRAWL_LINKS_OUT": str(folder / "links.jsonl")})
        # every run's parsed pages and links, in the order they ran
        link_files = [run_folder(work, rnd, c) / "links.jsonl" for rnd in range(args.repeat) for c in configs]
        graph, _alias = discovered_graph(link_files)
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
    pr = nx.pagerank(graph, alpha=0.85)
    n = min(len(r["fetched"]) for rs in rows.values() for r in rs)
    marks = [max(1, n // 4), max(1, n // 2), n]

    # Equal time: every run is still crawling at the shortest run's last response.
    t_eq = min(r["fetched_at"][-1] for rs in rows.values() for r in rs if r.get("fetched_at"))

    def crit_b(fetched: list[str], k: int, at: list[float] | None = None) -> float:
        """B of the first ``k`` distinct pages fetched (with ``at``: fetched by ``t_eq`` s)."""
        seen: set[str] = set()
        total = 0.0
        for i, url in enumerate(fetched):
            if len(seen) >= k or (at is not None and at[i] > t_eq):
                break
            c = canon(url)
            if c not in seen:
                seen.add(c)
                total += pr.get(c, 0.0)
        return total

    summary: dict[str, dict[str, Any]] = {}
    for config, runs in rows.items():
        hosts: Counter[str] = Counter()
        for r in runs:
            hosts.update(f"{urlsplit(u).port}" for u in r["fetched"][:n])
        summary[config] = {
            "pages_per_s": statistics.median(r["pages"] / r["wall"] for r in runs),
            "each": [r["pages"] / r["wall"] for r in runs],
            "cpu_ms_per_page": statistics.median(1000 * r["cpu"] / r["pages"] for r in runs),
            "cpu_share": statistics.median(r["cpu"] / r["wall"] for r in runs),
            "mb": statistics.median(r["bytes"] / 1e6 for r in runs),
            "B": {k: statistics.median(crit_b(r["fetched"], k) for r in runs) for k in marks},
            "B_at_time": statistics.median(crit_b(r["fetched"], len(r["fetched"]), r["fetched_at"]) for r in runs),
            "hosts": {p: c / len(runs) for p, c in sorted(hosts.items())},
        }
    dapq = summary.get("scrapy-dapq", {}).get("pages_per_s")
    glob = summary.get("ipr:dl1 global", {}).get("B", {})
    lines = [
        (f"graph discovered by all runs: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges; "
         f"B at N = {', '.join(map(str, marks))} pages, and at equal time t = {t_eq:.1f} s (the shortest run)"),
        "",
        ("| configuration | pages/s (median) | × DAPQ | pages/s of each run | "
         + " | ".join(f"B@{k}" for k in marks) + f" | B@{n} ÷ global | B@{t_eq:.1f}s | B@{t_eq:.1f}s ÷ global"
         + f" | crawler CPU ms/page | CPU / wall | MB fetched | pages per port in the first {n} |"),
        "|---|---:|---:|---|" + "---:|" * len(marks) + "---:|---:|---:|---:|---:|---:|---|",
    ]
    glob_t = summary.get("ipr:dl1 global", {}).get("B_at_time")
    for config, x in summary.items():
        ratio = f"{x['pages_per_s'] / dapq:.3f}" if dapq else ""
        bratio = f"{x['B'][n] / glob[n]:.3f}" if glob else ""
        tratio = f"{x['B_at_time'] / glob_t:.3f}" if glob_t else ""
        lines.append(
            f"| {config} | {x['pages_per_s']:.1f} | {ratio} | {', '.join(f'{v:.1f}' for v in x['each'])} | "
            + " | ".join(f"{x['B'][k]:.4f}" for k in marks)
            + f" | {bratio} | {x['B_at_time']:.4f} | {tratio}"
            + f" | {x['cpu_ms_per_page']:.1f} | {x['cpu_share']:.2f} | {x['mb']:.1f}"
            + f" | {', '.join(f'{p}: {c:.0f}' for p, c in x['hosts'].items())} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "graph": {"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()},
            "summary": summary,
            "runs": {c: [{k: v for k, v in r.items() if k != "fetched"} for r in rs] for c, rs in rows.items()},
        }, indent=1, default=str))
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
