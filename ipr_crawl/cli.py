"""The ``ipr-crawl`` command: ``serve-graph``, ``demo``, ``simulate``, the revisit
commands (``revisit-sim``, ``serve-changes``, ``history``) and an operator's commands
on a crawl: ``status``, ``top``, ``release-leases``, ``report``, ``reset``, ``dashboard``; priors for
recrawls: ``pagerank``, ``rewire-graph``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from ipr_crawl.evaluation.demo import add_demo_parser
from ipr_crawl.evaluation.revisit_cli import add_revisit_parsers
from ipr_crawl.evaluation.serve import add_serve_graph_parser
from ipr_crawl.evaluation.simulate import add_simulate_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ipr-crawl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_graph_parser(sub)
    add_demo_parser(sub)
    add_simulate_parser(sub)
    add_revisit_parsers(sub)
    add_history_parser(sub)
    add_operator_parsers(sub)
    add_dashboard_parser(sub)
    add_reset_parser(sub)
    add_prior_parsers(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away (`ipr-crawl status | head`): end quietly, as `cat` does;
        # Python would print a traceback flushing stdout at exit (docs.python.org, signal, "Note on SIGPIPE")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except (ValueError, FileNotFoundError) as exc:
        # bad input (a malformed policy, budget or ordering, a missing file): one line, as
        # argparse reports a bad option, not a traceback
        parser.exit(2, f"ipr-crawl {args.command}: error: {exc}\n")


def add_history_parser(sub: Any) -> None:
    """Register ``ipr-crawl history URL``."""
    p = sub.add_parser(
        "history",
        help="print one URL's revisit state and change events",
        description="Print one URL's revisit state (Tamura & Kitsuregawa 2008, §4.1: T, U, m, t_c) and its events "
        "from a crawl's change stream.",
    )
    p.add_argument("url")
    _add_crawl_arguments(p)
    p.set_defaults(func=_run_history)


def _add_crawl_arguments(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``--crawl-id``, ``--redis-url``, ``--data-dir``: where a crawl is."""
    p.add_argument(
        "--crawl-id", required=required, default="",
        help="the crawl's IPR_CRAWL_ID (a crawl's default: BOT_NAME.spider)"
        + ("" if required else "; default: the only crawl there"),
    )
    p.add_argument("--redis-url", default="", help="IPR_REDIS_URL of the crawl; default: inside a Scrapy project, "
                   "the Redis its crawls use (IPR_REDIS_URL, scrapy-redis's REDIS_URL, else the embedded server)")
    p.add_argument("--data-dir", default="", help="IPR_DATA_DIR of the embedded server; default: the project's "
                   "IPR_DATA_DIR, else .scrapy/ipr")


def _where(args: argparse.Namespace) -> tuple[str, str]:
    """``(redis URL, embedded data folder)`` of the crawl: the options when given; else,
    inside a Scrapy project (a ``scrapy.cfg`` here or above), where ``scrapy crawl`` keeps
    it (:func:`ipr_crawl.redis_location.locate` of the project's settings); else the
    embedded server in ``.scrapy/ipr``."""
    if args.redis_url or args.data_dir:
        return args.redis_url, args.data_dir or ".scrapy/ipr"
    from ipr_crawl.redis_location import project_location

    where = project_location()
    return (where.url_with_tls(), where.data_dir) if where is not None else ("", ".scrapy/ipr")


def _open(args: argparse.Namespace, command: str) -> Any:
    """The crawl's store, or None after printing why there is none (never creates one)."""
    import sys

    from ipr_crawl.store.inspect import FrontierUnavailable, NoSuchCrawl, open_crawl

    try:
        return open_crawl(args.crawl_id, *_where(args))
    except (NoSuchCrawl, FrontierUnavailable, ValueError) as exc:
        print(f"ipr-crawl {command}: {exc}", file=sys.stderr)
        return None


def _run_history(args: argparse.Namespace) -> int:
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.store.revisit import RevisitStore, format_history

    frontier = _open(args, "history")
    if frontier is None:
        return 1
    try:
        store = RevisitStore(frontier.client, frontier.crawl_id)
        id_ = node_id(args.url)
        print(format_history(args.url, store.load(id_), store.due_at(id_), list(store.events(args.url))))
    finally:
        frontier.client.close()
    return 0


def add_operator_parsers(sub: Any) -> None:
    """Register ``status``, ``top``, ``release-leases`` and ``report``."""
    p = sub.add_parser(
        "status", help="counts of a crawl, its processes and their heartbeats",
        description="Known, fetched, failed, frontier, forced and in-flight counts of a crawl; each crawler "
        "process with its last heartbeat and its requests in flight; revisits due; pages/s over the last minute.",
    )
    _add_crawl_arguments(p, required=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_operation)
    p = sub.add_parser(
        "top", help="the best URLs of a crawl's frontier",
        description="The N best frontier URLs, best first, with score, host, discovery depth and in-links "
        "among the fetched pages (an O(links) scan of the collected graph).",
    )
    p.add_argument("n", nargs="?", type=int, default=20, help="how many (default %(default)s)")
    _add_crawl_arguments(p, required=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_operation)
    p = sub.add_parser(
        "release-leases", aliases=["release"], help="hand requests leased by stopped crawlers back to the frontier",
        description="Hand back to the frontier the requests leased by crawler processes whose heartbeat "
        "stopped and those without a live holder (a running crawl does this itself at its next pop); "
        "with --all, every request in flight (only when no crawler of the crawl runs).",
    )
    _add_crawl_arguments(p, required=False)
    p.add_argument("--all", action="store_true", help="every lease, also of live processes")
    p.add_argument("--dead", action="store_true", help="put back the dead-lettered requests (handed out more "
                   "than IPR_MAX_RELEASES times, each time lost with its process) instead")
    p.set_defaults(func=_run_operation, command="release-leases")  # `release` too
    p = sub.add_parser(
        "report", help="a crawl's curves over time (PNG)",
        description="Draw from what a crawl keeps: frontier size, pages per minute and the share of the "
        "collected graph's PageRank fetched over time; for a revisit crawl, changes found and accesses per day.",
    )
    _add_crawl_arguments(p, required=False)
    p.add_argument("--plot", required=True, help="PNG to write")
    p.add_argument("--json", help="also write the curves as JSON here")
    p.set_defaults(func=_run_report)


def _run_operation(args: argparse.Namespace) -> int:
    """``status``, ``top`` and ``release-leases`` (:func:`ipr_crawl.store.inspect.operate`)."""
    from ipr_crawl.store.inspect import operate

    store = _open(args, args.command)
    if store is None:
        return 1
    try:
        print(operate(store, args.command, getattr(args, "n", 20), getattr(args, "json", False),
                      getattr(args, "all", False), getattr(args, "dead", False)))
    finally:
        store.client.close()
    return 0


def _run_report(args: argparse.Namespace) -> int:
    import sys

    from ipr_crawl.evaluation import import_eval

    import_eval("matplotlib")
    from ipr_crawl.evaluation.report import crawl_report

    store = _open(args, "report")
    if store is None:
        return 1
    try:
        print(crawl_report(store, args.plot, args.json))
    except ValueError as exc:
        print(f"ipr-crawl report: {exc}", file=sys.stderr)
        return 1
    finally:
        store.client.close()
    return 0


def add_dashboard_parser(sub: Any) -> None:
    """Register ``ipr-crawl dashboard``."""
    p = sub.add_parser(
        "dashboard", help="a live web page of a store's crawls, and their Prometheus metrics",
        description="Serve a read-only page of the crawls of a store (counts, processes and heartbeats, the "
        "PageRank share fetched, the frontier's top and hosts, revisits, Redis), updated every few seconds, "
        "and their Prometheus metrics at /metrics. Bound to 127.0.0.1 unless --bind; any other address "
        "needs a token.",
    )
    _add_crawl_arguments(p, required=False)
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=8450, help="port (default %(default)s; 0: any free one)")
    p.add_argument("--token", default="", help="asked of every request (?token= or Authorization: Bearer); "
                   "required to bind to another address than loopback (default: IPR_DASHBOARD_TOKEN)")
    p.add_argument("--refresh", type=float, default=3.0, help="seconds between the page's updates")
    p.set_defaults(func=_run_dashboard)


def _run_dashboard(args: argparse.Namespace) -> int:
    from ipr_crawl.dashboard.server import run

    return run(args.crawl_id, *_where(args), bind=args.bind, port=args.port, token=args.token,
               refresh_secs=args.refresh)


def add_reset_parser(sub: Any) -> None:
    """Register ``ipr-crawl reset --crawl-id ID``."""
    p = sub.add_parser(
        "reset",
        help="delete one crawl's keys, so that its next run starts afresh",
        description="Delete every key of one crawl (ipr:{ID}:*): its frontier, link graph, leases and "
        "revisit history. The next `scrapy crawl` of it starts afresh (as with -s IPR_RESET=True).",
    )
    _add_crawl_arguments(p)
    p.set_defaults(func=_run_reset)


def _run_reset(args: argparse.Namespace) -> int:
    store = _open(args, "reset")
    if store is None:
        return 1
    try:
        dropped = store.drop()
    finally:
        store.client.close()
    print(f"crawl {store.crawl_id!r}: {dropped} keys deleted")
    return 0


def add_prior_parsers(sub: Any) -> None:
    """Register ``ipr-crawl pagerank`` and ``ipr-crawl rewire-graph``."""
    p = sub.add_parser(
        "pagerank", help="store a crawl's converged PageRank, the prior of its recrawls (IPR_PRIOR_CRAWL)",
        description="Compute the converged PageRank of a crawl's collected graph (every known URL, the "
        "out-links of the fetched pages) and store it compactly beside the crawl, so that a later crawl "
        "started with -s IPR_PRIOR_CRAWL=<this id> fetches the URLs it knows in that order first "
        "(Baeza-Yates et al. 2005, the historical strategy). A recrawl does this itself when needed.",
    )
    _add_crawl_arguments(p)
    p.add_argument("--damping", type=float, default=0.85, help="damping factor (default %(default)s)")
    p.set_defaults(func=_run_pagerank)
    p = sub.add_parser(
        "rewire-graph", help="a perturbed copy of a graph (for simulate --prior-graph)",
        description="Write a copy of an edge-list graph with a share of its arcs rewired: each removed arc "
        "is replaced by one from the same source to a node drawn in proportion to its in-degree (or uniformly).",
    )
    p.add_argument("--graph", required=True, help="edge list: '#' header lines, src<TAB>dst")
    p.add_argument("--share", type=float, required=True, help="share of arcs rewired, in [0, 1]")
    p.add_argument("--seed", type=int, default=1, help="random seed (default %(default)s)")
    p.add_argument("--to", choices=("indegree", "uniform"), default="indegree",
                   help="a rewired arc's new target: drawn by in-degree (default) or uniformly")
    p.add_argument("--out", required=True, help="edge list to write (gzip)")
    p.set_defaults(func=_run_rewire)


def _run_pagerank(args: argparse.Namespace) -> int:
    import sys

    from ipr_crawl.store.inspect import payload_summary
    from ipr_crawl.store.prior import compute_pagerank

    store = _open(args, "pagerank")
    if store is None:
        return 1
    try:
        summary = compute_pagerank(store.client, store.crawl_id, args.damping,
                                   log=lambda msg: print(f"[pagerank] {msg}", file=sys.stderr, flush=True))
        print(f"crawl {summary.crawl_id!r}: PageRank of {summary.urls:,} URLs ({summary.fetched:,} fetched, "
              f"{summary.edges:,} links) stored in {summary.buckets} buckets in {summary.seconds:.1f} s")
        print("top URLs (PageRank x URL count; the URL when the crawl still holds its request):")
        for id_, value in summary.top:
            url = payload_summary(store.client.hget(store.keys["req"], id_)).get("url") or id_.hex()
            print(f"  {value:10.2f}  {url}")
    finally:
        store.client.close()
    return 0


def _run_rewire(args: argparse.Namespace) -> int:
    from ipr_crawl.evaluation.graphio import read_graph, rewired, write_graph

    if not 0.0 <= args.share <= 1.0:
        raise SystemExit(f"ipr-crawl rewire-graph: --share {args.share}: must be within [0, 1]")
    g = rewired(read_graph(args.graph), args.share, args.seed, args.to)
    write_graph(g, args.out)
    print(f"{args.out}: {len(g.nodes)} nodes, {g.edges} edges ({args.share:.0%} of the arcs rewired, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
