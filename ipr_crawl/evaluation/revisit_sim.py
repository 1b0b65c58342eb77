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

from __future__ import annotations

import argparse
import bisect
import csv
import gzip
import io
import itertools
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from ipr_crawl.evaluation import import_eval
from ipr_crawl.revisit.budget import (
    YEAR,
    RateHistogram,
    RateMoments,
    RatePool,
    access_rate,
    explores_new,
    fit_gamma_prior,
    in_share,
    new_url_rate,
    next_gain,
    pool_group,
    solve_nu,
    solve_nu_hosts,
    stable_hash64,
)
from ipr_crawl.revisit.policy import (
    DAY,
    HarmonicPolicy,
    Multiplier,
    Policy,
    access,
    bucket,
    budget_weight,
    estimated_rate,
    explored_first_revisit,
    next_due,
    parse_duration,
    parse_policy,
    rate_counts,
)

__all__ = [
    "DEFAULT_POLICIES",
    "Page",
    "PageResult",
    "add_revisit_sim_parser",
    "interval_bucket",
    "load_log",
    "page_phase",
    "parse_time",
    "simulate",
    "simulate_page",
    "write_log",
]

DEFAULT_POLICIES = (
    "mle-mix:0.1-10:15d,mle-min:0.1-10:15d,mle-avg:0.1-10:15d,mle-mix:0.5-2:15d,"
    "aimd:1d:0.5,nutch-adaptive,fixed:7d"
)


def parse_time(text: str) -> float:
    """POSIX seconds of an ISO 8601 instant (``2013-05-02T14:10:40Z``, a space for
    the ``T`` and fractions allowed) or a date (``2013-05-02``, midnight UTC), or
    of a plain number of seconds; naive values are UTC.

    >>> parse_time("1970-01-02"), parse_time("1970-01-01 00:01:00.5"), parse_time("86400")
    (86400.0, 60.5, 86400.0)

    Raises :class:`ValueError` on anything else.
    """
    value = str(text).strip()
    try:
        return float(value)
    except ValueError:
        pass
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _open_text(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _rows(path: str, width: int) -> Iterator[tuple[int, list[str]]]:
    with _open_text(path) as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if len(row) < width or not row[0].strip():
                continue
            if lineno == 1 and "://" not in row[0]:
                continue  # the header
            yield lineno, [c.strip() for c in row]


@dataclass
class Page:
    """One page of the log: its URL, observation window (s) and change instants (s)."""

    url: str
    first_seen: float
    last_seen: float
    changes: list[float] = field(default_factory=list)


def load_log(changes_path: str | Sequence[str], pages_path: str) -> list[Page]:
    """Read a change log (``page_url,change_time``; several files: their changes
    together, e.g. a log whose bulk commits are kept apart) and its pages
    (``page_url,first_seen,last_seen``); changes of unknown pages are ignored.
    A first row whose first field is not a URL is a header; blank rows and extra
    columns are skipped. Pages come in file order, each page's changes sorted.
    Raises :class:`ValueError` naming the file and line of an unreadable time."""
    pages: dict[str, Page] = {}
    for lineno, row in _rows(pages_path, 3):
        try:
            first, last = parse_time(row[1]), parse_time(row[2])
        except ValueError:
            raise ValueError(f"{pages_path}:{lineno}: bad time in {row[:3]!r}") from None
        page = pages.get(row[0])
        if page is None:
            pages[row[0]] = Page(row[0], first, last)
        else:  # a page listed twice: one window covering both
            page.first_seen, page.last_seen = min(page.first_seen, first), max(page.last_seen, last)
    for path in [changes_path] if isinstance(changes_path, str) else changes_path:
        for lineno, row in _rows(path, 2):
            page = pages.get(row[0])
            if page is not None:
                try:
                    page.changes.append(parse_time(row[1]))
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: bad time in {row[:2]!r}") from None
    for page in pages.values():
        page.changes.sort()
    return list(pages.values())


def write_log(pages: Iterable[Page], changes_path: str | Path, pages_path: str | Path | None = None) -> None:
    """Write ``pages`` as the log :func:`load_log` reads: gzip-compressed CSV,
    ``page_url,change_time_utc_iso8601`` to ``changes_path`` and, unless None,
    ``page_url,first_seen,last_seen`` to ``pages_path``; times in UTC to the second
    (``YYYY-MM-DDTHH:MM:SSZ``), in the order given."""
    pages = list(pages)

    def iso(t: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

    if pages_path is not None:
        with gzip.open(pages_path, "wt", newline="") as f:
            w = csv.writer(f)
            w.writerow(["page_url", "first_seen", "last_seen"])
            w.writerows([p.url, iso(p.first_seen), iso(p.last_seen)] for p in pages)
    with gzip.open(changes_path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["page_url", "change_time_utc_iso8601"])
        w.writerows([p.url, iso(c)] for p in pages for c in p.changes)


@dataclass
class PageResult:
    """Outcome of one page under one policy (times are bucket starts, s)."""

    versions: int  # true versions in the window (first version included)
    fetched: int  # distinct versions fetched
    accesses: int
    change_buckets: int  # versions - 1
    window: float  # last bucket - first bucket (s)
    visits: list[float]  # instants of the accesses
    version_starts: list[float]  # bucket in which each version appeared
    version_fetched: list[bool]

    @property
    def coverage(self) -> float:
        return self.fetched / self.versions

    @property
    def efficiency(self) -> float:
        return self.fetched / self.accesses


def simulate_page(
    policy: Policy,
    first_seen: float,
    last_seen: float,
    changes: Sequence[float],
    resolution: float = DAY,
    use_last_modified: bool = False,
    min_interval: float = 0.0,
    max_interval: float = 0.0,
    phase: float = 1.0,
) -> PageResult:
    """Visit one page from ``first_seen`` to ``last_seen`` (s) under ``policy``
    (see the module doc for the rules). With ``use_last_modified`` each changed
    access passes the bucket of the latest change as the Last-Modified instant
    (Tamura & Kitsuregawa 2008, §4.1.3). ``phase`` in (0, 1]: the first revisit comes
    after that share of the policy's first interval (:func:`page_phase`)."""
    t = bucket(first_seen, resolution)
    end = last_seen
    cd = sorted({bucket(c, resolution) for c in changes if first_seen < c <= last_seen})
    cd = [c for c in cd if c > t]
    starts = [t] + cd
    got = [True] + [False] * len(cd)
    visits = [t]
    state, tau = access(policy, None, t, changed=False)
    tau *= phase
    seen = 0
    fetched = 1
    while True:
        t_next = next_due(t, tau, resolution, min_interval, max_interval)
        if t_next > end:
            break
        k = bisect.bisect_right(cd, t_next)
        changed = k > seen
        lm = cd[k - 1] if (changed and use_last_modified) else None
        state, tau = access(policy, state, t_next, changed, modified_at=lm)
        if changed:
            got[k] = True
            fetched += 1
            seen = k
        visits.append(t_next)
        t = t_next
    window = bucket(end, resolution) - starts[0]
    return PageResult(len(starts), fetched, len(visits), len(cd), window, visits, starts, got)


def simulate_budget(
    windows: Sequence[tuple[Page, float, float]],
    policy: HarmonicPolicy,
    resolution: float = DAY,
    use_last_modified: bool = False,
    min_interval: float = 0.0,
    max_interval: float = 0.0,
    refresh: float = DAY,
    true_rates: Sequence[float] | None = None,
    weights: Sequence[float] | None = None,
    host_delay: float = 0.0,
    report: dict[str, Any] | None = None,
    sitemap: float = 0.0,
    sitemap_share: float = 1.0,
    phases: Sequence[float] | None = None,
) -> list[PageResult]:
    """Every page under one budget policy at once (the budget couples them): accesses
    in time order; every ``refresh`` s of simulated time ``nu`` is solved again, as the
    crawl's refresher does, over the pages being observed then, from a
    :class:`~ipr_crawl.revisit.budget.RateHistogram` of their estimated rates (or, the
    bound, from ``true_rates``: each page's mean rate over its window, which then also
    replaces the estimate in its intervals). ``weights``: per window (default 1).
    ``host_delay`` > 0 (s): per-host politeness, no host (of the page URL) gets more than
    one access per ``host_delay``: the budget is split under that cap
    (:func:`~ipr_crawl.revisit.budget.solve_nu_hosts`) and a host's revisits are paced
    as a polite downloader serves them (each at least ``host_delay`` after the last);
    ``report`` then receives ``unplaced_per_day`` (the budget no host could take,
    averaged over the solves) and ``hosts_capped`` (the most held at their cap at once).
    ``sitemap`` > 0 (s): the site publishes a sitemap (sitemaps.org protocol 0.9,
    ``<lastmod>``) that the crawler reads every ``sitemap`` s, one access per 50,000
    URLs listed, counted in the spend. A listed page is visited only when a read shows
    its ``lastmod`` (its latest change bucket) newer than the version last fetched
    (each read postpones the policy's schedule, as the crawler does): at that read, as
    many of those pages as the budget has left (the accesses it allowed so far less
    those made), lowest estimated change rate first. ``sitemap_share``: the share of pages listed
    with a truthful ``lastmod`` (chosen by a hash of the URL); the others are not
    listed. ``report`` then receives ``sitemap_reads`` (accesses spent on the sitemap).
    ``policy.pool == "directory"``: each estimate's prior is scaled by the page's
    directory (:class:`~ipr_crawl.revisit.budget.RatePool`, fed every access interval
    as it is observed), as the crawl does. ``phases``: per window, the share of the
    first interval after which the first revisit comes (:func:`page_phase`; default 1).
    Under ``new=learn``, ``report`` receives ``new_url_rate`` (per s, the rate learned by
    the end; None below :data:`~ipr_crawl.revisit.budget.NEW_MIN_SAMPLES` explored
    intervals) and ``new_explored`` (explored first intervals, and those with a change).
    Returns one :class:`PageResult` per window, in order. The rules of a visit are
    :func:`simulate_page`'s."""
    import heapq

    mult = Multiplier()
    pol = replace(policy, multiplier=mult)
    n = len(windows)
    w = list(weights) if weights is not None else [1.0] * n
    lmv = "sim" if use_last_modified else ""
    hist = RateHistogram()
    pool = RatePool() if policy.pool == "directory" and true_rates is None else None
    moments = RateMoments() if policy.prior == "gamma" and true_rates is None else None
    # new=learn: a stable share of new URLs explores (revisit.budget.explores_new); their
    # first revisits (count, changed, length s) teach the rate of a URL fetched once
    learn = policy.new == "learn" and true_rates is None
    explore = [learn and explores_new(page.url) for page, _, _ in windows]
    first_counts = [0.0, 0.0, 0.0]
    groups = [pool_group(page.url) for page, _, _ in windows] if pool is not None else []
    hosts = [urlsplit(page.url).hostname or "" for page, _, _ in windows] if host_delay > 0 else [""] * n
    by_host: dict[str, RateHistogram] = defaultdict(RateHistogram)
    unplaced: list[float] = []
    most_capped = 0
    free_at: dict[str, float] = defaultdict(float)  # host -> when its next access may be
    keys: list[tuple[int, int] | None] = [None] * n
    cds: list[list[float]] = []
    starts: list[list[float]] = []
    got: list[list[bool]] = []
    visits: list[list[float]] = [[] for _ in range(n)]
    states: list[Any] = [None] * n
    seen = [0] * n
    fetched = [1] * n
    # (time, kind, page, generation): kind 0 = access, 1 = end of window, 2 = a sitemap
    # read that shows the page changed; an access is void once its page's generation moved on
    heap: list[tuple[float, int, int, int]] = []
    gen = [0] * n
    ended = [False] * n
    listed = 0
    on_sitemap = [False] * n
    for i, (page, w0, w1) in enumerate(windows):
        t = bucket(w0, resolution)
        cd = sorted({bucket(c, resolution) for c in page.changes if w0 < c <= w1})
        cd = [c for c in cd if c > t]
        cds.append(cd)
        starts.append([t] + cd)
        got.append([True] + [False] * len(cd))
        heap.append((t, 0, i, 0))
        if sitemap > 0 and in_share(page.url, sitemap_share):
            listed += 1
            on_sitemap[i] = True
            for c in cd:  # the first read at or after the change's bucket
                heap.append((math.ceil(c / sitemap) * sitemap, 2, i, 0))
    heapq.heapify(heap)
    active = 0
    next_solve = -math.inf

    def rate_of(i: int) -> float:
        return true_rates[i] if true_rates is not None else estimated_rate(states[i])

    def tau_of(i: int, tau: float) -> float:
        if true_rates is None:
            return tau
        rho = access_rate(true_rates[i], w[i], pol.nu_for(hosts[i]))
        return 1 / rho if rho > 0 else math.inf

    # Spend control (as the refresher does): the accesses the budget allowed so far
    # (its rate for the pages observed at each moment, integrated over time) over
    # those made, applied to the next solve, so that pages that cannot spend their
    # share (their window ends first, intervals rounded to buckets) do not leave the
    # budget unspent.
    allowed = spent = 0.0
    t_prev: float | None = None
    read_cost = math.ceil(listed / 50000)
    first_read = math.ceil(min(st[0] for st in starts) / sitemap) * sitemap if sitemap > 0 and n else 0.0
    reads_counted = 0
    while heap:
        t, kind, i, g = heapq.heappop(heap)
        if t_prev is not None:
            allowed += pol.budget.total_rate(active) * (t - t_prev)
        t_prev = t
        if sitemap > 0 and t >= first_read:  # the sitemap reads up to t, spent as they fall
            by_now = math.floor((t - first_read) / sitemap) + 1
            spent += (by_now - reads_counted) * read_cost
            reads_counted = by_now
        if kind != 2 and g != gen[i]:  # superseded: a sitemap read sent the page in earlier
            continue
        if kind == 1:  # the page is observed until its window ends, visited or not
            ended[i] = True
            key = keys[i]  # the bin its latest access put it in (a window ends after its first access)
            assert key is not None
            hist.discard(key)
            if host_delay > 0:
                by_host[hosts[i]].discard(key)
            active -= 1
            continue
        if kind == 2:  # a sitemap read: every page it shows changed, as many as the budget has left
            shown = [i]
            while heap and heap[0][0] == t and heap[0][1] == 2:
                shown.append(heapq.heappop(heap)[2])
            due_now = sorted((rate_of(j), j) for j in set(shown)
                             if states[j] is not None and not ended[j] and bisect.bisect_right(cds[j], t) > seen[j])
            room = max(0, int(allowed - spent))
            for _, j in due_now[:room]:
                gen[j] += 1
                heapq.heappush(heap, (t, 0, j, gen[j]))
            for _, j in due_now[room:]:  # the next read still shows them changed
                heapq.heappush(heap, (t + sitemap, 2, j, 0))
            continue
        if t >= next_solve and len(hist):
            gain = next_gain(allowed, spent)
            if host_delay > 0:
                nominal = pol.budget.total_rate(active)
                sol = solve_nu_hosts({h: g.groups() for h, g in by_host.items() if len(g)},
                                     nominal * gain, 1 / host_delay)
                mult.nu, mult.host_nu = sol.nu, sol.host_nu
                # unplaced: of the budget itself (the spend control's gain aside)
                unplaced.append(max(0.0, nominal - (nominal * gain - sol.unplaced)) * DAY)
                most_capped = max(most_capped, len(sol.host_nu))
            else:
                mult.nu = solve_nu(hist.groups(), pol.budget.total_rate(active) * gain)
            if moments is not None:
                mult.prior = fit_gamma_prior(moments.sums) or mult.prior
            if learn:
                mult.new_rate = new_url_rate(*first_counts) or mult.new_rate
            next_solve = t + refresh
        spent += 1
        scale = pool.scale(groups[i], at=t) if pool is not None else None
        if states[i] is None:
            states[i], tau = access(pol, None, t, False, weight=w[i], host=hosts[i], prior_scale=scale,
                                    last_modified=lmv, explore=explore[i])
            if phases is not None:
                tau *= phases[i]
            active += 1
        else:
            k = bisect.bisect_right(cds[i], t)
            changed = k > seen[i]
            lm = cds[i][k - 1] if (changed and use_last_modified) else None
            before = states[i].last
            old_xt = rate_counts(states[i]) if moments is not None else None
            if explored_first_revisit(states[i], explore[i], t - before):
                first_counts[0] += 1
                first_counts[1] += changed
                first_counts[2] += t - before
            states[i], tau = access(pol, states[i], t, changed, modified_at=lm, weight=w[i], host=hosts[i],
                                    prior_scale=scale, last_modified=lmv, explore=explore[i])
            if moments is not None and old_xt is not None:
                moments.add(moments.delta(old_xt, rate_counts(states[i])))
            if pool is not None and t > before:
                pool.observe(groups[i], changed, t - before, at=t)
            if changed:
                got[i][k] = True
                fetched[i] += 1
                seen[i] = k
        visits[i].append(t)
        old_key = keys[i]
        if old_key is not None:
            hist.discard(old_key)
            if host_delay > 0:
                by_host[hosts[i]].discard(old_key)
        wi = budget_weight(states[i], w[i])  # young=K: a young URL's weight, as in its interval
        keys[i] = hist.add(rate_of(i), wi)
        if host_delay > 0:
            by_host[hosts[i]].add(rate_of(i), wi)
        t_next = next_due(t, tau_of(i, tau), resolution, min_interval, max_interval)
        if host_delay > 0:  # a polite downloader: one access per host_delay per host, in turn
            t_next = max(t_next, free_at[hosts[i]])
            free_at[hosts[i]] = t_next + host_delay
        if on_sitemap[i]:  # each read says the page has not changed: no visit until one says it has
            t_next = math.inf
        gen[i] += 1
        if t_next > windows[i][2]:
            heapq.heappush(heap, (max(t, windows[i][2]), 1, i, gen[i]))
        else:
            heapq.heappush(heap, (t_next, 0, i, gen[i]))
    if active != 0:  # every window ends once; anything else is a bug of this function
        raise RuntimeError(f"simulate_budget: {active} windows left open at the end")
    if report is not None and host_delay > 0:
        report["unplaced_per_day"] = sum(unplaced) / len(unplaced) if unplaced else 0.0
        report["hosts_capped"] = most_capped
    if report is not None and sitemap > 0:
        report["sitemap_reads"] = reads_counted * read_cost
    if report is not None and learn:  # what new=learn learned by the end (None: too few explored)
        report["new_url_rate"] = mult.new_rate
        report["new_explored"] = (first_counts[0], first_counts[1])
    results = []
    for i, (_, _, w1) in enumerate(windows):
        window = bucket(w1, resolution) - starts[i][0]
        results.append(PageResult(len(starts[i]), fetched[i], len(visits[i]), len(cds[i]), window, visits[i],
                                  starts[i], got[i]))
    return results


def page_phase(url: str, seed: int) -> float:
    """A page's phase in (0, 1], uniform and fixed by ``seed`` and its URL (BLAKE2b), so
    that every policy meets the same draw. A change log's pages come in cohorts (pages
    made, changed and removed by one commit); a policy that starts every page's
    schedule at its first access keeps a cohort's visits in step, and whether those
    visits fall between a cohort's change and its end decides the coverage of
    hundreds of pages at once. Starting each page's first revisit after a random share
    of its first interval measures the policies at random phases instead.

    >>> 0 < page_phase("http://a/", 1) <= 1, page_phase("http://a/", 1) == page_phase("http://a/", 1)
    (True, True)
    """
    return (stable_hash64(f"{seed}\0{url}") + 1) / 2**64


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


def _windows(pages: Iterable[Page], start: float | None, end: float | None) -> Iterator[tuple[Page, float, float]]:
    for page in pages:
        w0 = page.first_seen if start is None else max(page.first_seen, start)
        w1 = page.last_seen if end is None else min(page.last_seen, end)
        if w1 >= w0:
            yield page, w0, w1


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
    windows = list(_windows(pages, start, end))
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
        cov_all = eff_all = cov_ch = eff_ch = cov_multi = eff_multi = 0.0
        n_changed = n_multi = accesses = fetched = true_versions = 0
        by_interval: dict[tuple[float, float], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0, 0])
        by_month: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        host_days: dict[tuple[str, float], int] = defaultdict(int)
        report: dict[str, Any] = {}
        if isinstance(policy, HarmonicPolicy):
            results: Iterable[PageResult] = simulate_budget(
                windows, policy, resolution, use_last_modified, min_interval, max_interval,
                host_delay=host_delay, report=report,
            )
        else:
            results = (
                simulate_page(policy, w0, w1, page.changes, resolution, use_last_modified, min_interval, max_interval)
                for page, w0, w1 in windows
            )
        for i, r in enumerate(results):
            cov, eff = r.coverage, r.efficiency
            cov_all += cov
            eff_all += eff
            accesses += r.accesses
            fetched += r.fetched
            true_versions += r.versions
            if r.change_buckets:
                n_changed += 1
                cov_ch += cov
                eff_ch += eff
                if r.change_buckets >= 2:
                    n_multi += 1
                    cov_multi += cov
                    eff_multi += eff
                days = r.window / DAY / r.change_buckets
                agg = by_interval[interval_bucket(days)]
                agg[0] += 1
                agg[1] += cov
                agg[2] += eff
                agg[3] += r.versions - r.fetched
                agg[4] += r.versions
                agg[5] += r.accesses
            for s, g in zip(r.version_starts, r.version_fetched):
                mm = by_month[_month(s, months)]
                mm[0] += 1
                mm[1] += g
            host = urlsplit(windows[i][0].url).hostname or ""
            for k, v in enumerate(r.visits):
                by_month[_month(v, months)][2] += 1
                if k:  # revisits only: first visits are discovery, not the budget's
                    host_days[host, v // DAY] += 1
            if bar is not None and i % 256 == 0:
                bar.update(i)
        if bar is not None:
            bar.finish(len(windows))
        n = len(windows)
        out["policies"][spec] = {
            "coverage": cov_ch / n_changed if n_changed else None,
            "efficiency": eff_ch / n_changed if n_changed else None,
            "coverage_all": cov_all / n if n else None,
            "efficiency_all": eff_all / n if n else None,
            "coverage_multi": cov_multi / n_multi if n_multi else None,
            "efficiency_multi": eff_multi / n_multi if n_multi else None,
            "pages": n,
            "accesses_per_page_year": accesses / page_years if page_years else None,
            "pages_changed": n_changed,
            "pages_multi": n_multi,
            "accesses": accesses,
            "versions": fetched,
            "true_versions": true_versions,
            "missed": true_versions - fetched,
            # politeness: the most revisits one host got in one day, and what the per-host
            # cap (host_delay) left unplaced (harmonic only)
            "max_host_day": max(host_days.values()) if host_days else 0,
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
                for (lo, hi), a in sorted(by_interval.items())
            ],
            "by_month": [
                {
                    "month": m,
                    "true_versions": v[0],
                    "versions": v[1],
                    "coverage": v[1] / v[0] if v[0] else None,
                    "accesses": v[2],
                }
                for m, v in sorted(by_month.items())
            ],
        }
    return out


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
    from ipr_crawl.evaluation.revisit_budget import split_spec

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
    from ipr_crawl.evaluation.revisit_budget import (
        equal_budget,
        format_budgets,
        format_by_age,
        pagerank_weights,
        plot_budgets,
    )
    from ipr_crawl.revisit.budget import parse_budget

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
