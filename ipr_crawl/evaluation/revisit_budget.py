"""Revisit policies compared at equal budgets (``ipr-crawl revisit-sim --budgets``).

A policy's figures mean little alone: a policy that fetches more often catches more
changes. Here every policy is brought to the same number of accesses per page per
year (its *budget*) and compared there:

- ``harmonic:B/y`` is run at each budget B as it is (the budget is its parameter;
  :func:`~ipr_crawl.evaluation.revisit_replay.simulate_budget`); ``harmonic+pagerank``
  with each page's weight ``w`` its PageRank (``IPR_REVISIT_WEIGHT=pagerank``);
- every other policy is run at time scales (:func:`scaled`: every duration of the
  policy, and MLE's multiplier, times ``s``) 1, 4, 1/4, ... until their spends
  bracket the budgets, then once more at the scale interpolated (log-log) for each
  budget; its row reports what that run spent;
- two bounds: the harmonic rule fed each page's true mean change rate over its
  window (the rate estimate is then perfect; Kolobov et al. 2019's setting; a page
  without a change in its window gets :data:`NO_CHANGE_RATE`: no revisit to speak
  of), and an
  oracle that knows the change times: it spends the budget on the changes that
  raise the mean coverage most (each access right after a change catches it; a
  page's share of coverage per caught version is ``1/versions``, so the oracle
  catches the versions of the pages with the fewest versions first).

``phase_seed``: every page's first revisit comes after a random share of its first
interval (:func:`~ipr_crawl.evaluation.revisit_replay.page_phase`, the same draw for
every policy), so that cohorts of pages changed together by one commit do not decide
the figures by the phase of their synchronised visits.

``peak_revisits_per_page_year``: the revisits (accesses after a page's first) of the
busiest calendar year (UTC) over the page-years observed in it, among the years with
at least a tenth of the busiest year's page-years: the crawl capacity a policy needs
at its peak. A policy whose intervals start short and grow (AIMD, Nutch's) spends
several times its mean in the first years of a log; ``harmonic`` spends its budget
evenly.

``by_age``: where in a page's life each policy catches versions. For each band of
the page's age (time since its first access: :data:`AGE_BANDS`), the versions that
appeared in it (over pages with at least one change; the first version excluded),
the share of them fetched, and the revisits made in it. A page's first weeks are
where adaptive schedules (Nutch's) and the budget rule differ most on a log whose
pages are created while it runs (docs/research/revisits.md, "Where Nutch's lead comes from").

Coverage and efficiency are the simulator's (over pages with at least one change;
Tamura & Kitsuregawa 2008, §5.1); ``coverage_weighted`` weighs each page by its
PageRank in the log's link graph (``--weights``), the importance a crawl's ordering
gives it.
"""

from __future__ import annotations

import bisect
import calendar
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from ipr_crawl.evaluation import import_eval
from ipr_crawl.evaluation.changelog import Page, observed_windows, open_text
from ipr_crawl.evaluation.revisit_replay import PageResult, page_phase, simulate_budget, simulate_page
from ipr_crawl.revisit.budget import YEAR, Budget
from ipr_crawl.revisit.policy import (
    DAY,
    AimdPolicy,
    FixedPolicy,
    HarmonicPolicy,
    MlePolicy,
    NutchAdaptivePolicy,
    Policy,
    bucket,
    parse_duration,
    parse_policy,
)

__all__ = ["AGE_BANDS", "by_age", "equal_budget", "oracle", "pagerank_weights", "peak_revisits", "plot_budgets", "scaled", "split_spec"]



#: The true-rates bound's rate (changes per window) of a page that has none: about
#: 0, so that the bound spends nothing on it (0.5 would spend a share of the budget on
#: pages that never change).
NO_CHANGE_RATE = 1e-6


def scaled(policy: Policy, s: float) -> Policy:
    """``policy`` with every duration times ``s`` (MLE: ``tau2`` and the multiplier
    ``alpha``; AIMD: ``d`` and ``tau2``; Nutch: min, max and ``tau2``; fixed: the
    interval). The spec name gets ``@s``."""
    name = f"{policy.name}@{s:.4g}"
    if isinstance(policy, FixedPolicy):
        return replace(policy, interval=policy.interval * s, name=name)
    if isinstance(policy, AimdPolicy):
        return replace(policy, d=policy.d * s, tau2=policy.tau2 * s, name=name)
    if isinstance(policy, NutchAdaptivePolicy):
        return replace(policy, min_interval=policy.min_interval * s, max_interval=policy.max_interval * s,
                       tau2=policy.tau2 * s, name=name)
    if isinstance(policy, MlePolicy):
        return replace(policy, tau2=policy.tau2 * s, alpha=policy.alpha * s, name=name)
    raise TypeError(f"cannot scale {policy!r}")


#: Bands of a page's age (days since its first access) for ``by_age`` (module doc).
AGE_BANDS = ((0, 30), (30, 90), (90, 365), (365, 1825), (1825, math.inf))


def by_age(results: Sequence[PageResult]) -> list[dict[str, float | None]]:
    """Per band of :data:`AGE_BANDS`: ``versions`` (appeared in it, pages with a change,
    first version excluded), ``caught`` (the share of them fetched, None without any)
    and ``revisits`` (accesses after the first made in it), over ``results``."""
    starts = [lo for lo, _ in AGE_BANDS]
    versions, caught, revisits = [0] * len(starts), [0] * len(starts), [0] * len(starts)
    for r in results:
        t0 = r.version_starts[0]
        if r.change_buckets:
            for start, got in zip(r.version_starts[1:], r.version_fetched[1:]):
                k = bisect.bisect_right(starts, (start - t0) / DAY) - 1
                versions[k] += 1
                caught[k] += got
        for v in r.visits[1:]:
            revisits[bisect.bisect_right(starts, (v - t0) / DAY) - 1] += 1
    return [{"from_days": lo, "to_days": hi if math.isfinite(hi) else None, "versions": versions[k],
             "caught": caught[k] / versions[k] if versions[k] else None, "revisits": revisits[k]}
            for k, (lo, hi) in enumerate(AGE_BANDS)]


def _summary(results: Sequence[PageResult], windows: Sequence[tuple[Page, float, float]],
             weights: Sequence[float], sitemap_reads: float | None = None) -> dict[str, Any]:
    """The figures of one run; ``sitemap_reads`` (accesses spent reading a sitemap)
    count in the spend and are also given on their own."""
    years = sum(w1 - w0 for _, w0, w1 in windows) / YEAR
    changed = [(r, w) for r, w in zip(results, weights) if r.change_buckets]
    total_w = sum(w for _, w in changed)
    extra = {} if sitemap_reads is None else {"sitemap_reads_per_page_year": sitemap_reads / years}
    return {
        "accesses_per_page_year": (sum(r.accesses for r in results) + (sitemap_reads or 0.0)) / years,
        "peak_revisits_per_page_year": peak_revisits(results, windows),
        "coverage": sum(r.coverage for r, _ in changed) / len(changed),
        "efficiency": sum(r.efficiency for r, _ in changed) / len(changed),
        "coverage_weighted": sum(r.coverage * w for r, w in changed) / total_w,
        "by_age": by_age(results),
        **extra,
    }


def peak_revisits(results: Sequence[PageResult], windows: Sequence[tuple[Page, float, float]]) -> float:
    """Revisits per page-year in the busiest calendar year (UTC; module doc), among the
    years with at least a tenth of the most page-years observed; 0.0 without any."""
    exposure: dict[int, float] = {}
    revisits: dict[int, int] = {}
    for (_, w0, w1), r in zip(windows, results):
        t = w0
        while t < w1:
            y = time.gmtime(t).tm_year
            y_end = calendar.timegm((y + 1, 1, 1, 0, 0, 0))
            exposure[y] = exposure.get(y, 0.0) + (min(w1, y_end) - t) / YEAR
            t = y_end
        for v in r.visits[1:]:
            y = time.gmtime(v).tm_year
            revisits[y] = revisits.get(y, 0) + 1
    if not exposure:
        return 0.0
    most = max(exposure.values())
    return max((revisits.get(y, 0) / e for y, e in exposure.items() if e >= most / 10 and e > 0), default=0.0)


def oracle(windows: Sequence[tuple[Page, float, float]], budget: float, weights: Sequence[float],
           resolution: float = DAY) -> dict[str, float]:
    """The bound of a crawler that knows the change times (module doc), at ``budget``
    accesses per page per year (first accesses included)."""
    years = sum(w1 - w0 for _, w0, w1 in windows) / YEAR
    versions = []
    for page, w0, w1 in windows:
        t = bucket(w0, resolution)
        cd = {bucket(c, resolution) for c in page.changes if w0 < c <= w1}
        versions.append(1 + len([c for c in cd if c > t]))
    spare = budget * years - len(windows)  # every page's first access is given
    caught = [1] * len(windows)
    for i in sorted(range(len(windows)), key=lambda i: versions[i]):
        if spare <= 0:
            break
        take = min(versions[i] - 1, int(spare))
        caught[i] += take
        spare -= take
    changed = [i for i in range(len(windows)) if versions[i] > 1]
    total_w = sum(weights[i] for i in changed)
    spent = len(windows) + sum(c - 1 for c in caught)
    return {
        "accesses_per_page_year": spent / years,
        "coverage": sum(caught[i] / versions[i] for i in changed) / len(changed),
        "efficiency": 1.0,
        "coverage_weighted": sum(weights[i] * caught[i] / versions[i] for i in changed) / total_w,
    }


def pagerank_weights(pages: Sequence[Page], links_path: str) -> list[float]:
    """Each page's PageRank (networkx, damping 0.85) in the link graph of
    ``links_path`` (``src_url<TAB>dst_url``, optional header), scaled to mean 1 over
    ``pages``; a page outside the graph gets the smallest weight found."""
    import networkx as nx

    graph = nx.DiGraph()
    with open_text(links_path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) < 2 or (lineno == 1 and "://" not in parts[0]):
                continue
            graph.add_edge(parts[0].strip(), parts[1].strip())
    rank = nx.pagerank(graph, alpha=0.85) if graph.number_of_nodes() else {}
    floor = min(rank.values()) if rank else 1.0
    raw = [rank.get(p.url, floor) for p in pages]
    mean = sum(raw) / len(raw) if raw else 1.0
    return [r / mean for r in raw]


def equal_budget(
    pages: Sequence[Page],
    policies: Sequence[str],
    budgets: Sequence[Budget],
    resolution: float = DAY,
    use_last_modified: bool = False,
    weights: Sequence[float] | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: IO[str] | None = None,
    phase_seed: int | None = None,
) -> dict[str, Any]:
    """Every policy at every budget (per page per year), and the two bounds (module
    doc); ``phase_seed``: random phases (module doc). Returns
    ``{"budgets": [...], "policies": {spec: {budget: figures}}}``;
    figures: ``accesses_per_page_year``, ``coverage``, ``efficiency``,
    ``coverage_weighted``, ``peak_revisits_per_page_year`` (and ``scale`` for scaled
    policies; ``new_url_rate_per_year``, ``new_explored`` and ``new_explored_changed`` for
    ``new=learn``)."""
    windows = list(observed_windows(pages, start, end))
    phases = [page_phase(p.url, phase_seed) for p, _, _ in windows] if phase_seed is not None else None
    by_page = {id(p): k for k, p in enumerate(pages)}
    w = [weights[by_page[id(p)]] for p, _, _ in windows] if weights is not None else [1.0] * len(windows)
    for b in budgets:
        if b.per != "y":
            raise ValueError(f"--budgets: give budgets per URL per year (N/y), not {b}")
    out: dict[str, Any] = {"budgets": [b.amount for b in budgets], "policies": {}, "pages": len(windows),
                           "last_modified": use_last_modified, "phase_seed": phase_seed}
    runs = _Runs(windows, w, resolution, use_last_modified, phases)
    for spec in policies:
        out["policies"][spec] = _policy_rows(spec, runs, budgets, weights is not None, progress)
    rates = _true_rates(windows)
    bound: dict[str, Any] = {}
    for b in budgets:
        bound[f"{b.amount:g}"] = runs.run(HarmonicPolicy(b, name=f"harmonic:{b}"), true_rates=rates)
    out["policies"]["bound: true rates"] = bound
    out["policies"]["bound: change times"] = {f"{b.amount:g}": oracle(windows, b.amount, w, resolution) for b in budgets}
    return out


@dataclass
class _Runs:
    """The pages of :func:`equal_budget` (their windows, weights and phases) and how
    they are replayed; :meth:`run` gives one policy's figures."""

    windows: list[tuple[Page, float, float]]
    weights: list[float]
    resolution: float
    use_last_modified: bool
    phases: list[float] | None

    def run(self, policy: Policy, true_rates: Sequence[float] | None = None, weighted: bool = False,
            sitemap: tuple[float, float] = (0.0, 1.0)) -> dict[str, Any]:
        """The figures of ``policy`` over the pages (:func:`_summary`); ``true_rates``:
        the bound's; ``weighted``: the pages' weights in the budget; ``sitemap``:
        (period s, share listed), :func:`split_spec`'s."""
        windows, phases = self.windows, self.phases
        report: dict[str, Any] = {}
        if isinstance(policy, HarmonicPolicy):
            results = simulate_budget(windows, policy, self.resolution, self.use_last_modified,
                                      true_rates=true_rates, weights=self.weights if weighted else None,
                                      report=report, sitemap=sitemap[0], sitemap_share=sitemap[1], phases=phases)
        else:
            results = [simulate_page(policy, w0, w1, page.changes, self.resolution, self.use_last_modified,
                                     phase=phases[k] if phases is not None else 1.0)
                       for k, (page, w0, w1) in enumerate(windows)]
        figures = _summary(results, windows, self.weights, report.get("sitemap_reads"))
        if "new_explored" in report:  # new=learn: what it learned (per year; None: too few explored)
            rate = report["new_url_rate"]
            figures["new_url_rate_per_year"] = rate * YEAR if rate is not None else None
            figures["new_explored"], figures["new_explored_changed"] = report["new_explored"]
        return figures


def _policy_rows(spec: str, runs: _Runs, budgets: Sequence[Budget], have_weights: bool,
                 progress: IO[str] | None) -> dict[str, Any]:
    """One policy spec's figures at each budget (:func:`equal_budget`): ``harmonic`` run
    at each budget, any other policy at the time scale interpolated for it (None outside
    the grid's spends). Raises :class:`ValueError` for a ``+pagerank`` without weights
    or a ``+sitemap`` on another policy than ``harmonic``."""
    base, weighted, sitemap = split_spec(spec)
    if weighted and not have_weights:
        raise ValueError(f"{spec}: give --weights (the log's link graph)")
    policy = parse_policy(base)
    if sitemap[0] > 0 and not isinstance(policy, HarmonicPolicy):
        raise ValueError(f"{spec}: +sitemap goes with harmonic only")
    rows: dict[str, Any] = {}
    if isinstance(policy, HarmonicPolicy):
        for b in budgets:
            rows[f"{b.amount:g}"] = runs.run(replace(policy, budget=b, name=f"harmonic:{b}"), weighted=weighted,
                                             sitemap=sitemap)
            _say(progress, f"{spec} at {b}: {rows[f'{b.amount:g}']}")
        return rows
    grid = _grid(lambda s, p=policy: runs.run(scaled(p, s)), min(b.amount for b in budgets), max(b.amount for b in budgets))
    _say(progress, f"{spec}: grid " + ", ".join(f"x{s:g}: {r['accesses_per_page_year']:.2f}/y" for s, r in grid))
    for b in budgets:
        s = _interpolate_scale(grid, b.amount)
        if s is None:
            rows[f"{b.amount:g}"] = None
            continue
        figures = runs.run(scaled(policy, s))
        rows[f"{b.amount:g}"] = {**figures, "scale": s}
        _say(progress, f"{spec} at {b} (x{s:.3g}): {figures}")
    return rows


def _true_rates(windows: Sequence[tuple[Page, float, float]]) -> list[float]:
    """Each page's mean change rate over its window (per s; the true-rates bound's),
    :data:`NO_CHANGE_RATE` changes for a page without any, over at least a day."""
    rates = []
    for page, w0, w1 in windows:
        n = len([c for c in page.changes if w0 < c <= w1])
        rates.append(max(n, NO_CHANGE_RATE) / max(w1 - w0, DAY))
    return rates


def _say(progress: IO[str] | None, text: str) -> None:
    if progress is not None:
        print(text, file=progress, flush=True)


def split_spec(spec: str) -> tuple[str, bool, tuple[float, float]]:
    """``POLICY[+pagerank][+sitemap[:PERIOD[:SHARE]]]`` -> (policy spec, PageRank-weighted,
    (sitemap period in s, 0 = none; share of pages listed)). ``+sitemap`` alone reads
    the sitemap daily and lists every page. Raises ValueError for another suffix or a
    share outside (0, 1].

    >>> split_spec("harmonic+pagerank+sitemap:7d:0.5")
    ('harmonic', True, (604800.0, 0.5))
    """
    base, *extras = spec.split("+")
    weighted, period, share = False, 0.0, 1.0
    for extra in extras:
        head, _, rest = extra.partition(":")
        if head == "pagerank" and not rest:
            weighted = True
        elif head == "sitemap":
            when, _, frac = rest.partition(":")
            period = parse_duration(when) if when else DAY
            share = float(frac) if frac else 1.0
            if not 0 < share <= 1 or not period > 0:
                raise ValueError(f"{spec}: +sitemap:PERIOD:SHARE wants a period > 0 and a share in (0, 1]")
        else:
            raise ValueError(f"{spec}: unknown suffix +{extra} (+pagerank, +sitemap[:PERIOD[:SHARE]])")
    return base, weighted, (period, share)


def _grid(run: Any, low: float, high: float, step: float = 4.0, limit: int = 8) -> list[tuple[float, dict[str, float]]]:
    """Spend at time scales 1, then ``step``x apart in each direction until the
    spends bracket ``[low, high]`` accesses per page-year (at most ``limit`` runs)."""
    grid = [(1.0, run(1.0))]
    while len(grid) < limit and max(r["accesses_per_page_year"] for _, r in grid) < high:
        s = min(s for s, _ in grid) / step  # shorter intervals: more accesses
        grid.append((s, run(s)))
    while len(grid) < limit and min(r["accesses_per_page_year"] for _, r in grid) > low:
        s = max(s for s, _ in grid) * step
        grid.append((s, run(s)))
    return grid


def _interpolate_scale(grid: list[tuple[float, dict[str, float]]], target: float) -> float | None:
    """The scale at which the spend would be ``target`` (log-log interpolation over the
    grid, spend falling as the scale grows); None outside the grid's range."""
    pts = sorted((r["accesses_per_page_year"], s) for s, r in grid)
    for (a0, s0), (a1, s1) in zip(pts, pts[1:]):
        if a0 <= target <= a1 and a1 > a0:
            f = (math.log(target) - math.log(a0)) / (math.log(a1) - math.log(a0))
            return math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))
    return None


def format_budgets(result: dict[str, Any]) -> str:
    """A table: one row per policy, coverage (weighted), spend and peak-year revisits
    (per page-year) at each budget; then, for each ``new=learn`` policy, the new-URL rate
    it learned at the largest budget."""
    budgets = [f"{b:g}" for b in result["budgets"]]
    head = "policy".ljust(28) + "".join(f"{b + '/y':>28}" for b in budgets)
    lines = [head, " " * 28 + "".join(f"{'cov (wcov) spend peak':>28}" for _ in budgets)]
    for spec, rows in result["policies"].items():
        cells = []
        for b in budgets:
            r = rows.get(b)
            peak = r.get("peak_revisits_per_page_year") if r is not None else None
            cells.append(f"{'—':>28}" if r is None else
                         (f"{r['coverage']:.3f} ({r['coverage_weighted']:.3f}) {r['accesses_per_page_year']:5.2f} "
                          + ("    " if peak is None else f"{peak:5.2f}")).rjust(28))
        lines.append(spec[:28].ljust(28) + "".join(cells))
    if result.get("phase_seed") is not None:
        lines.append(f"(random phases, seed {result['phase_seed']})")
    for spec, rows in result["policies"].items():  # what new=learn learned, at the largest budget
        r = rows.get(budgets[-1]) if budgets else None
        if r is not None and "new_explored" in r:
            rate = r["new_url_rate_per_year"]
            learned = f"{rate:.3g} changes/year" if rate is not None else "nothing yet (too few explored)"
            lines.append(f"{spec} at {budgets[-1]}/y: a new URL's change rate learned from "
                         f"{r['new_explored']:.0f} explored first revisits ({r['new_explored_changed']:.0f} "
                         f"saw a change): {learned}")
    return "\n".join(lines)


def format_by_age(result: dict[str, Any]) -> str:
    """A table of ``by_age`` (module doc): per policy and budget, the share of the
    versions caught in each band of page age, and the revisits made in it."""
    bands = [f"{lo:g}-{hi:g} d" if math.isfinite(hi) else f">= {lo:g} d" for lo, hi in AGE_BANDS]
    lines = ["versions caught (revisits made) by the page's age at the version",
             "policy".ljust(28) + "budget".rjust(7) + "".join(f"{b:>17}" for b in bands)]
    for spec, rows in result["policies"].items():
        for b, r in rows.items():
            if r is None or "by_age" not in r:
                continue
            cells = "".join(("—" if a["caught"] is None else f"{a['caught']:.3f}").rjust(8)
                            + f"({a['revisits']:>7})" for a in r["by_age"])
            lines.append(spec[:28].ljust(28) + f"{b + '/y':>7}" + cells)
    versions = next((r["by_age"] for rows in result["policies"].values() for r in rows.values()
                     if r is not None and "by_age" in r), None)
    if versions is not None:
        lines.append("versions".ljust(35) + "".join(f"{a['versions']:>17}" for a in versions))
    return "\n".join(lines)


def plot_budgets(result: dict[str, Any], path: str, title: str = "") -> None:
    """Coverage and efficiency against accesses per page per year (log x), every
    policy and both bounds, in one PNG; and coverage against the peak year's revisits
    per page-year (the capacity a policy needs at its busiest)."""
    matplotlib = import_eval("matplotlib")
    matplotlib.use("Agg")
    plt = import_eval("matplotlib.pyplot")
    import_eval("matplotlib.ticker")
    panels = [("coverage", "coverage (pages with a change)")]
    if result.get("weights"):  # without page weights the weighted coverage is the coverage
        panels.append(("coverage_weighted", "PageRank-weighted coverage"))
    panels.append(("efficiency", "efficiency"))
    peak = "peak_revisits_per_page_year"
    with_peak = any(r is not None and peak in r for rows in result["policies"].values() for r in rows.values())
    n = len(panels) + with_peak
    fig, axes = plt.subplots(1, n, figsize=(5.7 * n, 5.2), constrained_layout=True)
    for spec, rows in result["policies"].items():
        pts = [r for r in rows.values() if r is not None]
        # more series than colours in the cycle: bounds dashed, sitemap runs dotted
        style = "--" if spec.startswith("bound") else ":" if "+sitemap" in spec else "-"
        for ax, (key, _) in zip(axes, panels):
            ax.plot([r["accesses_per_page_year"] for r in pts], [r[key] for r in pts], style, marker="o", ms=3,
                    label=spec)
        if with_peak:
            at_peak = [r for r in pts if r.get(peak)]
            axes[-1].plot([r[peak] for r in at_peak], [r["coverage"] for r in at_peak], style, marker="o", ms=3)
    xlabels = ["accesses per page per year"] * len(panels)
    ylabels = [label for _, label in panels]
    if with_peak:
        xlabels.append("revisits per page-year in the busiest year")
        ylabels.append("coverage (pages with a change)")
    for ax, xlabel, ylabel in zip(axes, xlabels, ylabels):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[len(panels) - 1].set_ylim(0, 1)
    axes[0].legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
