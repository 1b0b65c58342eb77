"""The evaluation harness: replays, servers of real data, criteria and plots.

It drives the same store (real Redis, real scripts) as a crawl, and imports the
store and the pure rules, never the Scrapy adapters. Plots and progress bars
need the ``eval`` extra (``pip install 'ipr-crawl[eval]'``).

- :mod:`~ipr_crawl.evaluation.simulate`: ``ipr-crawl simulate``, orderings replayed over a graph
  (:mod:`~ipr_crawl.evaluation.graph_replay`).
- :mod:`~ipr_crawl.evaluation.revisit_sim`: ``ipr-crawl revisit-sim``, revisit policies over a change log
  (:mod:`~ipr_crawl.evaluation.changelog`, :mod:`~ipr_crawl.evaluation.revisit_replay`,
  :mod:`~ipr_crawl.evaluation.revisit_report`, :mod:`~ipr_crawl.evaluation.revisit_budget`).
- :mod:`~ipr_crawl.evaluation.serve`, :mod:`~ipr_crawl.evaluation.serve_changes`: a graph or a
  change log served over HTTP on loopback.
- :mod:`~ipr_crawl.evaluation.demo`: ``make demo``.
- :mod:`~ipr_crawl.evaluation.metrics`: the papers' criteria; :mod:`~ipr_crawl.evaluation.graphio`:
  graph files (:mod:`~ipr_crawl.evaluation.graphfiles`) and exact PageRank.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EvalExtraMissing", "import_eval"]


class EvalExtraMissing(SystemExit):
    """An evaluation command was run without the ``eval`` extra (exit status 2)."""


def import_eval(name: str) -> ModuleType:
    """Import a module of the ``eval`` extra (``matplotlib``, ``matplotlib.pyplot``,
    ``tqdm``), or stop with :class:`EvalExtraMissing` saying which extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EvalExtraMissing(
            f"ipr-crawl: this command needs {name.split('.')[0]}, from the eval extra: "
            f"pip install 'ipr-crawl[eval]' (from a clone: pip install '.[eval]') ({exc})"
        ) from None
