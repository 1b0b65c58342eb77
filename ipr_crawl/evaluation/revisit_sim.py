"""``ipr-crawl revisit-sim``: replay real change logs through the revisit estimators.

Drives the SAME functions the downloader middleware uses
(:func:`ipr_crawl.revisit.access` and :func:`~ipr_crawl.revisit.next_due`)
over a change log in the format of ``tests/data/emacswiki_*.csv.gz`` (``page_url,
change_time_utc_iso8601`` and ``page_url,first_seen,last_seen``), as Tamura & Kitsuregawa 2008, §5.1
did with its feed logs:

- time runs in buckets of ``--resolution`` (1 day): changes of one bucket are one
  version, and a visit in bucket ``d`` sees every change of buckets ``<= d``;
- each page is observed from its ``first_seen`` (or ``--start``) to its
  ``last_seen`` (or ``--end``); the first visit is in the first bucket and
  fetches the first version (changes in that bucket belong to it);
- a later visit sees a change when the page changed since the previous visit,
  and then fetches the latest version; visits go on while they fall inside the
  window;
- per page: version coverage = versions fetched / true versions, access
  efficiency = versions fetched / accesses (first access included) (Tamura & Kitsuregawa 2008, §5.1).

Reported per policy: coverage and efficiency averaged over the pages with at
least one change in their window, over the pages with at least two (Tamura & Kitsuregawa 2008's
population: URLs updated several times) and over all pages, total accesses, versions fetched, versions missed;
per mean-change-interval bucket (Tamura & Kitsuregawa 2008, Fig. 6-8: 1-day buckets below 30 days,
10-day buckets to 100 days, 30-day buckets beyond; interval = window days /
change buckets) and per month (Fig. 9: versions that appeared in the month and
how many were fetched, accesses in the month).
"""

# This module is the command (its docstring is the command's --help) and the import
# path of revisit-sim's names; the work is in changelog.py (log I/O), revisit_replay.py
# (the replay), revisit_report.py (the figures, tables and plot) and revisit_budget.py
# (--budgets).

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ipr_crawl.evaluation.changelog import Page, load_log, observed_windows, parse_time, write_log
from ipr_crawl.evaluation.revisit_budget import (
    equal_budget,
    format_budgets,
    format_by_age,
    pagerank_weights,
    plot_budgets,
    split_spec,
)
from ipr_crawl.evaluation.revisit_replay import PageResult, page_phase, simulate_budget, simulate_page
from ipr_crawl.evaluation.revisit_report import (
    TABLE_BINS,
    format_table,
    interval_bucket,
    markdown,
    plot,
    simulate,
)
from ipr_crawl.revisit.budget import parse_budget
from ipr_crawl.revisit.policy import parse_duration, parse_policy

__all__ = [
    "DEFAULT_POLICIES",
    "TABLE_BINS",
    "Page",
    "PageResult",
    "add_revisit_sim_parser",
    "interval_bucket",
    "load_log",
    "observed_windows",
    "page_phase",
    "parse_time",
    "simulate",
    "simulate_budget",
    "simulate_page",
    "write_log",
]

#: The former private name of :func:`~ipr_crawl.evaluation.changelog.observed_windows`.
_windows = observed_windows

DEFAULT_POLICIES = (
    "mle-mix:0.1-10:15d,mle-min:0.1-10:15d,mle-avg:0.1-10:15d,mle-mix:0.5-2:15d,"
    "aimd:1d:0.5,nutch-adaptive,fixed:7d"
)


# -- CLI -----------------------------------------------------------------------------------------
def add_revisit_sim_parser(sub: Any) -> None:
    """Register ``ipr-crawl revisit-sim`` on an argparse sub-parser set."""
    p = sub.add_parser(
        "revisit-sim",
        help="replay a real change log through the revisit policies (Tamura & Kitsuregawa 2008, §5.1)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--changes", required=True, action="append",
                   help="page_url,change_time_utc_iso8601 (.csv or .csv.gz); repeat to replay several "
                   "files' changes together")
    p.add_argument("--pages", required=True, help="page_url,first_seen,last_seen (.csv or .csv.gz)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated policy specs (default: %(default)s)")
    p.add_argument("--resolution", default="1d", help="time bucket (default 1d)")
    p.add_argument("--start", help="observe from this date/instant (UTC)")
    p.add_argument("--end", help="observe until this date/instant (UTC)")
    p.add_argument("--last-modified", action="store_true", help="feed the latest change as Last-Modified (Tamura & Kitsuregawa 2008, §4.1.3)")
    p.add_argument("--min-interval", default="0", help="lower bound on every interval (default: one bucket)")
    p.add_argument("--max-interval", default="0", help="upper bound on every interval (default: none)")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--plot", help="write Fig. 5-9 here (PNG)")
    p.add_argument("--title", default="", help="plot title")
    p.add_argument("--markdown", help="write the tables here (Markdown)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--budgets", help="compare at equal budgets instead: accesses per page per year, e.g. "
                   "0.5/y,1/y,2/y,4/y,8/y (each policy's time scale swept to spend each; harmonic runs at "
                   "each budget; plus the true-rate and change-time bounds)")
    p.add_argument("--phase-seed", type=int, help="with --budgets: start each page's schedule at a random "
                   "phase (the first revisit after a share of the first interval, uniform, fixed by this seed "
                   "and the URL), so that cohorts of pages changed together do not decide the figures by "
                   "where their visits happen to fall (default: every schedule starts at the first access)")
    p.add_argument("--by-age", action="store_true", help="with --budgets: also print, per policy and budget, "
                   "the share of versions caught and the revisits made by the page's age (0-30 d, 30-90 d, "
                   "90-365 d, 1-5 y, >= 5 y since its first access; always in the JSON as by_age)")
    p.add_argument("--sample", type=int, default=0, help="only N pages of the log, a seeded random sample "
                   "(random.Random(0)); 0: all")
    p.add_argument("--host-delay", default="0", help="per-host politeness for harmonic: at most one access "
                   "per this duration per host (its download delay, e.g. 60s); what cannot be placed is "
                   "reported (default 0: no cap)")
    p.add_argument("--weights", help="page weights for PageRank-weighted coverage (and harmonic's w): "
                   "the log's link graph, src_url<TAB>dst_url (.tsv or .tsv.gz)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    specs = [s.strip() for s in args.policies.split(",") if s.strip()]
    for spec in specs:
        try:
            base, weighted, sitemap = split_spec(spec)
        except ValueError as e:
            raise SystemExit(f"ipr-crawl revisit-sim: {e}") from None
        if (weighted or sitemap[0] > 0) and not args.budgets:
            raise SystemExit(f"ipr-crawl revisit-sim: {spec}: +pagerank and +sitemap are for --budgets runs")
        parse_policy(base)  # fail before loading anything
    resolution = parse_duration(args.resolution)
    start = parse_time(args.start) if args.start else None
    end = parse_time(args.end) if args.end else None
    t0 = time.monotonic()
    pages = load_log(args.changes, args.pages)
    if not args.quiet:
        print(f"loaded {len(pages)} pages, {sum(len(p.changes) for p in pages)} changes in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    if 0 < args.sample < len(pages):
        import random

        pages = random.Random(0).sample(pages, args.sample)
        if not args.quiet:
            print(f"sampled {len(pages)} pages (seed 0)", file=sys.stderr)
    if args.budgets:
        return _run_budgets(args, specs, pages, resolution, start, end)
    if args.phase_seed is not None:
        raise SystemExit("ipr-crawl revisit-sim: --phase-seed goes with --budgets")
    if args.by_age:
        raise SystemExit("ipr-crawl revisit-sim: --by-age goes with --budgets")
    result = simulate(
        pages, specs, resolution, start, end, args.last_modified,
        parse_duration(args.min_interval), parse_duration(args.max_interval),
        progress=None if args.quiet else sys.stderr, host_delay=parse_duration(args.host_delay),
    )
    result["changes"] = args.changes[0] if len(args.changes) == 1 else args.changes
    result["pages_file"] = args.pages
    print(format_table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, separators=(",", ":"))
    if args.plot:
        plot(result, args.plot, args.title)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown(result) + "\n")
    return 0


def _run_budgets(
    args: argparse.Namespace, specs: list[str], pages: list[Page], resolution: float,
    start: float | None, end: float | None,
) -> int:
    budgets = [parse_budget(b) for b in args.budgets.split(",") if b.strip()]
    weights = pagerank_weights(pages, args.weights) if args.weights else None
    result = equal_budget(
        pages, specs, budgets, resolution, args.last_modified, weights, start, end,
        progress=None if args.quiet else sys.stderr, phase_seed=args.phase_seed,
    )
    result["changes"] = args.changes[0] if len(args.changes) == 1 else args.changes
    result["pages_file"] = args.pages
    result["weights"] = args.weights
    result["sample"] = args.sample
    print(format_budgets(result))
    if args.by_age:
        print(format_by_age(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot_budgets(result, args.plot, args.title)
    return 0
