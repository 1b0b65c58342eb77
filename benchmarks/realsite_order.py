"""PageRank fetched by real ``scrapy crawl`` runs on real sites, at a page budget (issue 13).

For each realweb site (``../shared/realweb``, nginx on loopback):

1. **The site's graph.** One ``scrapy crawl graph`` under Scrapy's own scheduler
   crawls the whole site and writes every parsed page's links
   (``crawl_rate.SlotPerPort`` with ``$CRAWL_LINKS_OUT``). Nodes: the URLs fetched
   with status 200 (redirect sources are aliases of their target), edges: links
   between them, duplicates once. Its exact PageRank: networkx, damping 0.85.
2. **Budgeted crawls.** Every configuration crawls the site with
   ``CLOSESPIDER_PAGECOUNT`` = ``--fraction`` (10 %) of the site's pages,
   ``CONCURRENT_REQUESTS=16``, the same spider and settings (the crawl runs
   a little past the budget, as ``CLOSESPIDER_PAGECOUNT`` counts error responses too); ``scrapy`` is Scrapy's
   default scheduler (no add-on), ``ipr:<ordering>`` the add-on with that
   ``IPR_ORDERING``. The first N pages fetched (N = the budget, response order) are
   scored: **B** = their PageRank mass (the site sums to 1), **A(10 %)** = share of
   the site's top 10 % by PageRank among them.
3. **Exact order.** For each ``ipr:`` configuration, the order a one-at-a-time crawl
   of the same site gets (the pure-Python statement of the rule, on the crawl's node
   ids, with every link the crawl sees: also those to URLs that did not answer 200,
   whose fetches do not count against the budget), scored the same way: what
   concurrency (``CONCURRENT_REQUESTS``, batched pops) costs or gains. A crawl with
   ``--concurrency 1`` gets it (2026-11-25: python, django, postgres, gio, glib and
   sqlalchemy, ``push`` and ``blc``, within 0.001).
4. **Recrawls with a prior** (``IPR_PRIOR_CRAWL``): a configuration with ``+prior``
   (e.g. ``ipr:push+prior``; ``+slowstart`` / ``+noslow`` set ``IPR_SLOW_START``, ``+parsewait``
   ``IPR_WAIT_FOR_PARSE``) crawls with the prior of an earlier crawl of the
   same site kept in one store: a ``push`` crawl of ``--prior-fraction`` of the site's
   pages (1: all of it) made once per site before the rounds. The site did not change
   between the two crawls, so this shows what the prior gives at best, and with a
   partial earlier crawl what a part of the graph gives.
5. Configurations run interleaved, ``--repeat`` rounds (a concurrent crawl's order
   varies from run to run); the table gives the median and the range.

    python benchmarks/realsite_order.py [--sites python,django,postgres,scipy] [--site NAME=URL ...]
        [--configs scrapy,ipr:bf,ipr:blc,ipr:opic,ipr:ipr:dl1,ipr:push] [--fraction 0.1]
        [--repeat 3] [--json out.json] [--markdown out.md] [--prior-fraction 1.0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawl_rate import (  # noqa: E402
    SITES,
    add_run_arguments,
    check_quiet,
    common_settings,
    run_arguments,
    run_one,
    settings_for,
)

from ipr_crawl.ordering.urls import canonical_url  # noqa: E402

REALWEB_SITES = {
    **SITES,
    "pandas": "http://127.0.0.1:8107/index.html",
    "linux": "http://127.0.0.1:8108/index.html",
    "boost": "http://127.0.0.1:8109/index.html",
    "libstdcxx": "http://127.0.0.1:8110/index.html",
    "qt5": "http://127.0.0.1:8111/qtcore/qtcore-index.html",
}
DEFAULT_CONFIGS = "scrapy,ipr:bf,ipr:blc,ipr:opic,ipr:ipr:dl1,ipr:push"


def site_graph(links_file: Path, fetched: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Exact PageRank of the crawled site and the alias map (redirect source -> target).

    ``links_file``: the JSON lines of ``$CRAWL_LINKS_OUT``; ``fetched``: URLs fetched
    with status 200. Returns ``(pagerank by canonical URL, alias -> canonical URL)``."""
    import networkx as nx

    alias: dict[str, str] = {}
    pages: dict[str, list[str]] = {}
    for line in links_file.read_text().splitlines():
        row = json.loads(line)
        url = canonical_url(row["url"])
        for src in row["from"]:
            alias[canonical_url(src)] = url
        pages[url] = [canonical_url(u) for u in row["links"]]
    nodes = {canonical_url(u) for u in fetched}
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for src, targets in pages.items():
        if src not in nodes:
            continue
        for t in targets:
            t = alias.get(t, t)
            if t in nodes:
                g.add_edge(src, t)
    return nx.pagerank(g, alpha=0.85, tol=1e-10, max_iter=1000), alias


def write_graph(pr: dict[str, float], links_file: Path, alias: dict[str, str], out: Path, name: str) -> None:
    """The crawled site as ``ipr-crawl simulate`` graph files: ``<name>.tsv.gz`` (edges,
    ids by first appearance in the full crawl) and ``<name>.urls.tsv.gz``."""
    import gzip

    ids: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    for line in links_file.read_text().splitlines():
        row = json.loads(line)
        src = canonical_url(row["url"])
        if src not in pr:
            continue
        s = ids.setdefault(src, len(ids))
        for u in row["links"]:
            t = canonical_url(u)
            t = alias.get(t, t)
            if t in pr:
                edges.append((s, ids.setdefault(t, len(ids))))
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / f"{name}.tsv.gz", "wt") as f:
        f.write(f"# {name}: realweb site crawled by scrapy crawl graph (benchmarks/realsite_order.py)\n")
        f.writelines(f"{a}\t{b}\n" for a, b in dict.fromkeys(edges))
    with gzip.open(out / f"{name}.urls.tsv.gz", "wt") as f:
        f.writelines(f"{i}\t{u}\n" for u, i in ids.items())


def site_links(links_file: Path, pr: dict[str, float], alias: dict[str, str]) -> dict[str, list[str]]:
    """Out-links of each crawled page, in the order the spider yielded them (canonical URLs,
    redirect sources as their targets), links to URLs that did not answer 200 included:
    a crawl records them too, and they take a share of the page's mass."""
    out: dict[str, list[str]] = {}
    for line in links_file.read_text().splitlines():
        row = json.loads(line)
        src = canonical_url(row["url"])
        targets = (alias.get(c, c) for c in map(canonical_url, row["links"]))
        out[src] = list(dict.fromkeys(targets))
    return out


def exact_order(out: dict[str, list[str]], start: str, ordering: str, budget: int) -> list[str]:
    """The order a one-at-a-time crawl gets (the pure-Python statement of the rule,
    :func:`ipr_crawl.ordering.reference.simulate_crawl`), on the crawl's node ids
    (:func:`~ipr_crawl.ordering.urls.node_id`): ``push`` pushes the larger id first among
    residuals of one level, as the store does. Until 2026-11-25 it ran on the URLs
    themselves, whose order differs, and ``push``'s exact figures moved by that."""
    from ipr_crawl.ordering.reference import simulate_crawl
    from ipr_crawl.ordering.urls import node_id, tie_key

    urls = set(out).union(*out.values(), [start])
    ids = {u: node_id(u) for u in urls}
    url_of = {i: u for u, i in ids.items()}
    tie = {ids[u]: tie_key(u) for u in urls} if ordering == "blc" else None
    by_id = {ids[u]: [ids[t] for t in targets] for u, targets in out.items()}
    return [url_of[i] for i in simulate_crawl(by_id, [ids[start]], ordering, tie=tie, limit=budget)]


def score(order: list[str], budget: int, pr: dict[str, float], alias: dict[str, str], top: set[str]) -> dict[str, float]:
    """B and A(10 %) of the first ``budget`` distinct pages of ``order``."""
    seen: dict[str, None] = {}
    for url in order:
        c = canonical_url(url)
        seen.setdefault(alias.get(c, c), None)
        if len(seen) >= budget:
            break
    got = list(seen)
    return {
        "pages": len(got),
        "B": sum(pr.get(u, 0.0) for u in got),
        "A10": len(top.intersection(got)) / len(top),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", default="python,django,postgres,scipy")
    ap.add_argument("--site", action="append", default=[], metavar="NAME=URL",
                    help="a site outside realweb: its name and start URL (repeatable; crawled after --sites)")
    ap.add_argument("--fraction", type=float, default=0.10, help="page budget as a share of the site's pages")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--graph-out", default="", help="also write each site's graph here (simulate's format)")
    ap.add_argument("--prior-fraction", type=float, default=1.0,
                    help="+prior configurations: the earlier crawl fetched this share of the site's pages")
    add_run_arguments(ap, DEFAULT_CONFIGS, 1800)
    args = ap.parse_args(argv)
    configs, extra = run_arguments(args)
    extra["CONCURRENT_REQUESTS"] = args.concurrency
    work = Path(tempfile.mkdtemp(prefix="ipr-realsite-"))
    result: dict[str, Any] = {"fraction": args.fraction, "concurrency": args.concurrency, "sites": {}}
    lines = [
        f"| site | pages | budget | {' | '.join(configs)} |",
        "|---|---:|---:|" + "---:|" * len(configs),
    ]
    starts = {s.strip(): REALWEB_SITES.get(s.strip(), "") for s in args.sites.split(",") if s.strip()}
    for spec in args.site:
        name, _, url = spec.partition("=")
        if not name or not url.startswith(("http://", "https://")):
            ap.error(f"--site {spec!r}: expected NAME=http://host:port/start.html")
        starts[name] = url
    unknown = [name for name, url in starts.items() if not url]
    if unknown:
        ap.error(f"unknown site(s) {', '.join(unknown)}: not in realweb ({', '.join(REALWEB_SITES)}); use --site NAME=URL")
    try:
        for site, url in starts.items():
            start = [url]
            folder = work / site / "full"
            links = folder / "links.jsonl"
            folder.mkdir(parents=True, exist_ok=True)
            check_quiet()
            full = run_one(start, settings_for("scrapy", folder, None, common_settings(0, extra)), folder,  # type: ignore[arg-type]
                           args.timeout, {"CRAWL_LINKS_OUT": str(links)})
            pr, alias = site_graph(links, full["fetched"])
            if args.graph_out:
                write_graph(pr, links, alias, Path(args.graph_out), site)
            n = len(pr)
            budget = max(1, round(args.fraction * n))
            ranked = sorted(pr, key=pr.__getitem__, reverse=True)
            top = set(ranked[: max(1, round(0.10 * n))])
            oracle = sum(pr[u] for u in ranked[:budget])
            print(f"{site}: {n} pages, budget {budget}, best possible B {oracle:.3f}", file=sys.stderr, flush=True)
            prior_store = work / site / "prior-store"
            if any("+prior" in c for c in configs):
                check_quiet()
                f = work / site / "prior-crawl"
                earlier = common_settings(round(args.prior_fraction * n) if args.prior_fraction < 1 else 0, extra)
                res = run_one(start, {**settings_for("ipr:push", f, None, earlier),  # type: ignore[arg-type]
                                      "IPR_DATA_DIR": str(prior_store), "IPR_CRAWL_ID": "earlier"}, f, args.timeout)
                if res["returncode"] != 0:
                    raise RuntimeError(f"{site}: the earlier crawl failed (rc {res['returncode']}), log in {f}")
                print(f"  earlier crawl (prior): {res['pages']} pages", file=sys.stderr, flush=True)
            rows: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
            for rnd in range(args.repeat):
                for config in configs:
                    check_quiet()
                    f = work / site / f"r{rnd}-{config.replace(':', '_')}"
                    # CLOSESPIDER_PAGECOUNT counts every response (404s too): stop later and
                    # score the first `budget` pages fetched with status 200
                    base, *flags = config.split("+")
                    local = [x for x in flags if x in ("prior", "slowstart", "noslow", "parsewait")]
                    base = "+".join([base, *(x for x in flags if x not in local)])
                    settings = settings_for(base, f, None, common_settings(budget * 3 // 2 + 32, extra))  # type: ignore[arg-type]
                    if "prior" in local:
                        settings.update(IPR_DATA_DIR=str(prior_store), IPR_PRIOR_CRAWL="earlier")
                    if "slowstart" in local or "noslow" in local:
                        settings["IPR_SLOW_START"] = "slowstart" in local
                    if "parsewait" in local:
                        settings["IPR_WAIT_FOR_PARSE"] = True
                    res = run_one(start, settings, f, args.timeout)
                    if res["returncode"] != 0:
                        raise RuntimeError(f"{site} {config} failed (rc {res['returncode']}), log in {f}")
                    s = score(res["fetched"], budget, pr, alias, top)
                    rows[config].append(s)
                    print(f"  round {rnd + 1} {config:14s} pages {s['pages']:5d} B {s['B']:.3f} A10 {s['A10']:.3f}",
                          file=sys.stderr, flush=True)
                    shutil.rmtree(f / "ipr-data", ignore_errors=True)
            out = site_links(links, pr, alias)
            # links to URLs that did not answer 200 take their share, as in a crawl; they
            # are skipped when the budget's pages are counted
            missing = len({t for targets in out.values() for t in targets if t not in pr})
            exact: dict[str, float] = {}
            for config in configs:
                if config.startswith("ipr:") and "@" not in config and "+" not in config:
                    seq = [u for u in exact_order(out, canonical_url(start[0]), config[4:], budget + missing) if u in pr]
                    exact[config] = score(seq, budget, pr, alias, top)["B"]
                    print(f"  exact order {config:14s} B {exact[config]:.3f}", file=sys.stderr, flush=True)
            result["sites"][site] = {"pages": n, "budget": budget, "best_B": oracle, "runs": rows, "exact_B": exact}
            cells = []
            for config in configs:
                bs = [r["B"] for r in rows[config]] or [float("nan")]
                ex = f"; exact {exact[config]:.3f}" if config in exact else ""
                cells.append(f"{statistics.median(bs):.3f} ({min(bs):.3f}–{max(bs):.3f}{ex})")
            lines.append(f"| {site} | {n} | {budget} | " + " | ".join(cells) + " |")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    table = "\n".join(lines)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
