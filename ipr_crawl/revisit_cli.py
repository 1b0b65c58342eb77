"""Sub-commands of ``ipr-crawl`` about revisits, registered by :mod:`ipr_crawl.cli`:

- ``revisit-sim``: replay a real change log through the revisit policies
  (:mod:`ipr_crawl.revisit_sim`);
- ``serve-changes``: serve a change log over HTTP at a simulated clock
  (:mod:`ipr_crawl.serve_changes`);
- ``history``: print one URL's revisit state and change events from a crawl's
  Redis (:mod:`ipr_crawl.revisit_store`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_revisit_parsers"]


def add_revisit_parsers(sub: Any) -> None:
    """Register every revisit sub-command on an argparse sub-parser set."""
    from ipr_crawl.revisit_sim import add_revisit_sim_parser

    add_revisit_sim_parser(sub)
    for module, name in (
        ("ipr_crawl.serve_changes", "add_serve_changes_parser"),
        ("ipr_crawl.revisit_store", "add_history_parser"),
    ):
        try:
            mod = __import__(module, fromlist=[name])
        except ImportError:  # not written yet in this checkout
            continue
        getattr(mod, name)(sub)
