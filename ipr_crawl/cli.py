"""The ``ipr-crawl`` command: ``serve-graph``, ``demo`` and the revisit commands
(``revisit-sim``, ``serve-changes``, ``history``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ipr_crawl.demo import add_demo_parser
from ipr_crawl.revisit_cli import add_revisit_parsers
from ipr_crawl.serve import add_serve_graph_parser
from ipr_crawl.simulate import add_simulate_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ipr-crawl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_graph_parser(sub)
    add_demo_parser(sub)
    add_simulate_parser(sub)
    add_revisit_parsers(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
