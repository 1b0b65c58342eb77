"""The ``ipr-crawl`` command: ``serve-graph``, ``demo``, ``simulate``, the revisit
commands (``revisit-sim``, ``serve-changes``, ``history``) and ``reset``."""

from __future__ import annotations

import argparse
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
    add_reset_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


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


def _add_crawl_arguments(p: argparse.ArgumentParser) -> None:
    """``--crawl-id``, ``--redis-url``, ``--data-dir``: where a crawl is."""
    p.add_argument("--crawl-id", required=True, help="the crawl's IPR_CRAWL_ID (default of a crawl: BOT_NAME.spider)")
    p.add_argument("--redis-url", default="", help="IPR_REDIS_URL of the crawl; empty: the embedded server")
    p.add_argument("--data-dir", default=".scrapy/ipr", help="IPR_DATA_DIR of the embedded server (default %(default)s)")


def _run_history(args: argparse.Namespace) -> int:
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.store import connect
    from ipr_crawl.store.revisit import RevisitStore, format_history

    client = connect(args.redis_url, args.data_dir)
    store = RevisitStore(client, args.crawl_id)
    id_ = node_id(args.url)
    print(format_history(args.url, store.load(id_), store.due_at(id_), list(store.events(args.url))))
    return 0



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
    import os
    import sys

    from ipr_crawl.store import FrontierStore, FrontierUnavailable, connect, crawl_keys

    try:
        crawl_keys(args.crawl_id)
    except ValueError as exc:
        print(f"ipr-crawl reset: {exc}", file=sys.stderr)
        return 2
    if not args.redis_url and not os.path.exists(os.path.join(args.data_dir, "ipr.rdb.settings")) and not any(
        os.path.exists(os.path.join(args.data_dir, name)) for name in ("ipr.rdb", "appendonlydir", "appendonly.aof")
    ):
        print(f"ipr-crawl reset: no embedded Redis data in {os.path.abspath(args.data_dir)} "
              "(run it in the project folder, or give --data-dir or --redis-url)", file=sys.stderr)
        return 1
    try:
        client = connect(args.redis_url, args.data_dir)
    except FrontierUnavailable as exc:
        print(f"ipr-crawl reset: {exc}", file=sys.stderr)
        return 1
    try:
        dropped = FrontierStore(client, args.crawl_id).drop()
    finally:
        client.close()
    if not dropped:
        print(f"ipr-crawl reset: no crawl {args.crawl_id!r} there (nothing deleted)", file=sys.stderr)
        return 1
    print(f"crawl {args.crawl_id!r}: {dropped} keys deleted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
