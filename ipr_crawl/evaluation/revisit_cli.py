"""Sub-commands of ``ipr-crawl`` about revisits, registered by :mod:`ipr_crawl.cli`:

- ``revisit-sim``: replay a real change log through the revisit policies
  (:mod:`ipr_crawl.evaluation.revisit_sim`);
- ``serve-changes``: serve a change log over HTTP at a simulated clock
  (:mod:`ipr_crawl.evaluation.serve_changes`);
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_revisit_parsers"]


def add_revisit_parsers(sub: Any) -> None:
    """Register every revisit sub-command on an argparse sub-parser set."""
    from ipr_crawl.evaluation.revisit_sim import add_revisit_sim_parser
    from ipr_crawl.evaluation.serve_changes import add_serve_changes_parser

    add_revisit_sim_parser(sub)
    add_serve_changes_parser(sub)
