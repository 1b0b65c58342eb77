"""The report of revisit-sim: every policy replayed over a change log and its
figures aggregated (:func:`simulate`, the JSON of the command), and the same shown as a
text table, Markdown tables and Tamura & Kitsuregawa 2008's Fig. 5-9.

Per policy: coverage and efficiency averaged over the pages with at least one change
in their window, over the pages with at least two and over all pages, total
accesses, versions fetched, versions missed; per mean-change-interval bucket
(:func:`interval_bucket`) and per month (versions that appeared in the month and how
many were fetched, accesses in the month).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import IO, Any
from urllib.parse import urlsplit

from ipr_crawl.evaluation import import_eval
from ipr_crawl.evaluation.changelog import Page, observed_windows
from ipr_crawl.evaluation.revisit_replay import PageResult, simulate_budget, simulate_page
from ipr_crawl.revisit.budget import YEAR
from ipr_crawl.revisit.policy import DAY, HarmonicPolicy, Policy, parse_policy

__all__ = ["TABLE_BINS", "format_table", "interval_bucket", "markdown", "plot", "simulate"]


def interval_bucket(days: float) -> tuple[float, float]:
    """Tamura & Kitsuregawa 2008, Fig. 6-8 buckets of a mean change interval (days): 1-day buckets below
    30, 10-day buckets in [30, 100), 30-day buckets from 100.

    >>> interval_bucket(7.5), interval_bucket(42), interval_bucket(250)
    ((7, 8), (40, 50), (250, 280))
    """
    if days < 30:
        lo = math.floor(days)
        return (lo, lo + 1)
    if days < 100:
        lo = math.floor(days / 10) * 10
        return (lo, lo + 10)
    lo = 100 + math.floor((days - 100) / 30) * 30
    return (lo, lo + 30)


class _Progress:
    """A progress line on stderr: redrawn in place on a terminal, every 10 % otherwise."""

    def __init__(self, label: str, total: int, stream: IO[str] | None = None) -> None:
        self.label, self.total = label, max(total, 1)
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = self.last = time.monotonic()
        self.next_pct = 10

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        pct = 100 * done // self.total
        if self.tty and (force or now - self.last > 0.2):
            self.last = now
            self.stream.write(f"\r{self.label}: {done}/{self.total} pages ({pct}%) {now - self.t0:.1f}s")
            self.stream.flush()
        elif not self.tty and (pct >= self.next_pct or force):
            while self.next_pct <= pct:
                self.next_pct += 10
            self.stream.write(f"{self.label}: {done}/{self.total} pages ({pct}%) {now - self.t0:.1f}s\n")
            self.stream.flush()

    def finish(self, done: int) -> None:
        self.update(done, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _month(t: float, cache: dict[float, str]) -> str:
    m = cache.get(t)
    if m is None:
        m = cache[t] = time.strftime("%Y-%m", time.gmtime(t))
    return m



def simulate(
    pages: Sequence[Page],
    policies: Sequence[str | Policy],
    resolution: float = DAY,
    start: float | None = None,
    end: float | None = None,
    use_last_modified: bool = False,
    min_interval: float = 0.0,
    max_interval: float = 0.0,
    progress: IO[str] | None = None,
    host_delay: float = 0.0,
) -> dict[str, Any]:
    """Run every policy spec over ``pages`` and aggregate (the JSON of the command).
    ``host_delay`` (s): per-host politeness for ``harmonic`` (:func:`simulate_budget`);
    every policy's busiest host-day is reported (``max_host_day``)."""
    windows = list(observed_windows(pages, start, end))
    out: dict[str, Any] = {
        "resolution_s": resolution,
        "start": start,
        "end": end,
        "last_modified": use_last_modified,
        "pages": len(windows),
        "policies": {},
    }
    months: dict[float, str] = {}
    page_years = sum(w1 - w0 for _, w0, w1 in windows) / YEAR
    for spec in policies:
        policy = parse_policy(spec) if isinstance(spec, str) else spec
        spec = policy.name if not isinstance(spec, str) else spec
        bar = _Progress(spec, len(windows), progress) if progress is not None else None
        report: dict[str, Any] = {}
        results = _replay(policy, windows, resolution, use_last_modified, min_interval, max_interval, host_delay,
                          report)
        tally = _Tally(months)
        for i, r in enumerate(results):
            tally.add(r, urlsplit(windows[i][0].url).hostname or "")
            if bar is not None and i % 256 == 0:
                bar.update(i)
        if bar is not None:
            bar.finish(len(windows))
        out["policies"][spec] = tally.figures(len(windows), page_years, host_delay, report)
    return out


def _replay(
    policy: Policy, windows: Sequence[tuple[Page, float, float]], resolution: float, use_last_modified: bool,
    min_interval: float, max_interval: float, host_delay: float, report: dict[str, Any],
) -> Iterable[PageResult]:
    """The page results of one policy: every page at once under a budget
    (:func:`~ipr_crawl.evaluation.revisit_replay.simulate_budget`, which fills
    ``report``), else page by page as they are consumed."""
    if isinstance(policy, HarmonicPolicy):
        return simulate_budget(
            windows, policy, resolution, use_last_modified, min_interval, max_interval,
            host_delay=host_delay, report=report,
        )
    return (
        simulate_page(policy, w0, w1, page.changes, resolution, use_last_modified, min_interval, max_interval)
        for page, w0, w1 in windows
    )


class _Tally:
    """The sums over one policy's page results that :func:`simulate` reports."""

    def __init__(self, months: dict[float, str]) -> None:
        self.months = months
        self.cov_all = self.eff_all = self.cov_ch = self.eff_ch = self.cov_multi = self.eff_multi = 0.0
        self.n_changed = self.n_multi = self.accesses = self.fetched = self.true_versions = 0
        self.by_interval: dict[tuple[float, float], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0, 0])
        self.by_month: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.host_days: dict[tuple[str, float], int] = defaultdict(int)

    def add(self, r: PageResult, host: str) -> None:
        """Count one page's result (its page on ``host``)."""
        cov, eff = r.coverage, r.efficiency
        self.cov_all += cov
        self.eff_all += eff
        self.accesses += r.accesses
        self.fetched += r.fetched
        self.true_versions += r.versions
        if r.change_buckets:
            self.n_changed += 1
            self.cov_ch += cov
            self.eff_ch += eff
            if r.change_buckets >= 2:
                self.n_multi += 1
                self.cov_multi += cov
                self.eff_multi += eff
            days = r.window / DAY / r.change_buckets
            agg = self.by_interval[interval_bucket(days)]
            agg[0] += 1
            agg[1] += cov
            agg[2] += eff
            agg[3] += r.versions - r.fetched
            agg[4] += r.versions
            agg[5] += r.accesses
        for s, g in zip(r.version_starts, r.version_fetched):
            mm = self.by_month[_month(s, self.months)]
            mm[0] += 1
            mm[1] += g
        for k, v in enumerate(r.visits):
            self.by_month[_month(v, self.months)][2] += 1
            if k:  # revisits only: first visits are discovery, not the budget's
                self.host_days[host, v // DAY] += 1

    def figures(self, n: int, page_years: float, host_delay: float, report: dict[str, Any]) -> dict[str, Any]:
        """The policy's entry in :func:`simulate`'s result, over ``n`` pages and
        ``page_years`` observed; ``report``: what the budget replay reported."""
        n_changed, n_multi = self.n_changed, self.n_multi
        return {
            "coverage": self.cov_ch / n_changed if n_changed else None,
            "efficiency": self.eff_ch / n_changed if n_changed else None,
            "coverage_all": self.cov_all / n if n else None,
            "efficiency_all": self.eff_all / n if n else None,
            "coverage_multi": self.cov_multi / n_multi if n_multi else None,
            "efficiency_multi": self.eff_multi / n_multi if n_multi else None,
            "pages": n,
            "accesses_per_page_year": self.accesses / page_years if page_years else None,
            "pages_changed": n_changed,
            "pages_multi": n_multi,
            "accesses": self.accesses,
            "versions": self.fetched,
            "true_versions": self.true_versions,
            "missed": self.true_versions - self.fetched,
            # politeness: the most revisits one host got in one day, and what the per-host
            # cap (host_delay) left unplaced (harmonic only)
            "max_host_day": max(self.host_days.values()) if self.host_days else 0,
            **({"host_delay": host_delay, **report} if host_delay > 0 else {}),
            "by_interval": [
                {
                    "lo_days": lo,
                    "hi_days": hi,
                    "pages": a[0],
                    "coverage": a[1] / a[0],
                    "efficiency": a[2] / a[0],
                    "missed": a[3],
                    "true_versions": a[4],
                    "accesses": a[5],
                }
                for (lo, hi), a in sorted(self.by_interval.items())
            ],
            "by_month": [
                {
                    "month": m,
                    "true_versions": v[0],
                    "versions": v[1],
                    "coverage": v[1] / v[0] if v[0] else None,
                    "accesses": v[2],
                }
                for m, v in sorted(self.by_month.items())
            ],
        }



# -- output ----------------------------------------------------------------------------------
def format_table(result: dict[str, Any]) -> str:
    """The per-policy summary as a fixed-width text table."""
    head = (
        f"{'policy':<24} {'cov(chg)':>8} {'eff(chg)':>8} {'cov(all)':>8} {'eff(all)':>8} "
        f"{'accesses':>10} {'versions':>9} {'missed':>8} {'host-day':>8}"
    )
    lines = [head]
    for name, p in result["policies"].items():
        lines.append(
            f"{name:<24} {p['coverage'] or 0:8.3f} {p['efficiency'] or 0:8.3f} "
            f"{p['coverage_all'] or 0:8.3f} {p['efficiency_all'] or 0:8.3f} "
            f"{p['accesses']:10d} {p['versions']:9d} {p['missed']:8d} {p.get('max_host_day', 0):8d}"
            + (f"  unplaced {p['unplaced_per_day']:.1f}/day, {p['hosts_capped']} hosts at their cap"
               if "unplaced_per_day" in p else "")
        )
    return "\n".join(lines)


def _coarse(rows: list[dict[str, Any]], edges: Sequence[float]) -> list[tuple[float, float, int, float, float, int, int]]:
    """Pool by_interval rows into wider bins [edges[i], edges[i+1]) (page-weighted means)."""
    out = []
    for lo, hi in itertools.pairwise(edges):
        sel = [r for r in rows if lo <= r["lo_days"] < hi]
        n = sum(r["pages"] for r in sel)
        if n:
            out.append((
                lo, hi, n,
                sum(r["coverage"] * r["pages"] for r in sel) / n,
                sum(r["efficiency"] * r["pages"] for r in sel) / n,
                sum(r["missed"] for r in sel),
                sum(r["true_versions"] for r in sel),
            ))
    return out


#: Pooled bins (days) of the Markdown per-interval table.
TABLE_BINS = (1, 7, 30, 100, 365, 1000, 3000, 100000)


def markdown(result: dict[str, Any]) -> str:
    """The summary and a per-interval table (pooled :data:`TABLE_BINS`) in Markdown."""
    pols = result["policies"]
    out = [
        (
            "| policy | coverage (≥1 change) | efficiency (≥1 change) | coverage (≥2) | efficiency (≥2) "
            "| coverage (all) | efficiency (all) | accesses | versions fetched | missed |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    for name, p in pols.items():
        out.append(
            f"| `{name}` | {f(p['coverage'])} | {f(p['efficiency'])} | {f(p.get('coverage_multi'))} "
            f"| {f(p.get('efficiency_multi'))} | {f(p['coverage_all'])} | {f(p['efficiency_all'])} "
            f"| {p['accesses']:,} | {p['versions']:,} | {p['missed']:,} |"
        )
    first = next(iter(pols.values()), None)
    if first is None:
        return "\n".join(out)
    bins = _coarse(first["by_interval"], TABLE_BINS)
    labels = [f"{lo}–{hi if hi < 100000 else '∞'} d ({n})" for lo, hi, n, *_ in bins]
    out += ["", "Coverage / efficiency / missed versions per mean change interval (days; pages in brackets):", ""]
    out.append("| policy | " + " | ".join(labels) + " |")
    out.append("|---|" + "---:|" * len(labels))
    for name, p in pols.items():
        cells = [f"{c:.2f} / {e:.2f} / {m:,}" for _, _, _, c, e, m, _ in _coarse(p["by_interval"], TABLE_BINS)]
        out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    out.append("| total versions | " + " | ".join(f"{tv:,}" for *_, tv in bins) + " |")
    return "\n".join(out)


def plot(result: dict[str, Any], path: str, title: str = "") -> None:
    """Tamura & Kitsuregawa 2008, Fig. 5-9 for every policy in one PNG."""
    matplotlib = import_eval("matplotlib")

    matplotlib.use("Agg")
    plt = import_eval("matplotlib.pyplot")

    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    (a5, a6, a7), (a8, a9, a10) = axes
    pols = result["policies"]
    edges = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000, 7000, 10000, 20000]
    n_months = max((len(p["by_month"]) for p in pols.values()), default=0)
    roll = 1 if n_months <= 24 else 12
    for name, p in pols.items():
        a5.scatter([p["coverage"]], [p["efficiency"]], label=name, s=40)
        a5.annotate(name, (p["coverage"], p["efficiency"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        rows = _coarse(p["by_interval"], edges)
        mid = [math.sqrt(lo * hi) for lo, hi, *_ in rows]
        a6.plot(mid, [r[3] for r in rows], marker=".", label=name, lw=1)
        a7.plot(mid, [r[4] for r in rows], marker=".", label=name, lw=1)
        a8.plot(mid, [r[5] for r in rows], marker=".", label=name, lw=1)
        months = p["by_month"]
        xs, ys = [], []
        for i in range(len(months)):
            win = months[max(0, i - roll + 1) : i + 1]
            tv = sum(m["true_versions"] for m in win)
            if tv:
                xs.append(datetime.strptime(months[i]["month"], "%Y-%m"))
                ys.append(sum(m["versions"] for m in win) / tv)
        a9.plot(xs, ys, label=name, lw=0.9)
        a10.bar(name, p["accesses"])
    if pols:
        rows = _coarse(next(iter(pols.values()))["by_interval"], edges)
        a8.plot([math.sqrt(lo * hi) for lo, hi, *_ in rows], [r[6] for r in rows], "k--", lw=1, label="total versions")
        a8.legend(fontsize=7)
    a5.set(xlabel="version coverage (pages with >= 1 change)", ylabel="access efficiency", title="Fig. 5: coverage vs efficiency")
    a5.set_xlim(0, 1.02)
    a5.set_ylim(0, 1.02)
    for ax, what, fig_no in ((a6, "version coverage", 6), (a7, "access efficiency", 7), (a8, "missed versions", 8)):
        ax.set(xscale="log", xlabel="mean change interval of the page (days, pooled bins)", ylabel=what, title=f"Fig. {fig_no}: {what} per change interval")
    a8.set_yscale("log")
    a9.set(
        ylabel="versions fetched / versions appeared",
        title="Fig. 9: version coverage per month" + (f" ({roll}-month window)" if roll > 1 else ""),
    )
    a10.set(ylabel="accesses", title="total accesses")
    a10.tick_params(axis="x", labelrotation=60, labelsize=7)
    a6.legend(fontsize=7)
    fig.suptitle(title or f"revisit-sim: {result['pages']} pages")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
