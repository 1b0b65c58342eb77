"""The replay of revisit-sim: pages of a change log visited under a revisit policy.

Drives the SAME functions the downloader middleware uses
(:func:`ipr_crawl.revisit.access` and :func:`~ipr_crawl.revisit.next_due`); the rules
of a visit (time buckets, what a visit sees, the observation window) are in
:mod:`ipr_crawl.evaluation.revisit_sim`'s module doc. :func:`simulate_page` visits one
page under a per-page policy; :func:`simulate_budget` visits every page at once under a
budget policy (the budget couples them), as the crawl's refresher does.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from ipr_crawl.evaluation.changelog import Page
from ipr_crawl.revisit.budget import (
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
    rate_counts,
)

__all__ = ["PageResult", "page_phase", "simulate_budget", "simulate_page"]


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
    replay = _BudgetReplay(windows, policy, resolution, use_last_modified, min_interval, max_interval, refresh,
                           true_rates, weights, host_delay, sitemap, sitemap_share, phases)
    replay.run()
    if report is not None:
        replay.report_into(report)
    return replay.results()


class _BudgetReplay:
    """One run of :func:`simulate_budget`: every page's schedule, the budget's
    histograms and multiplier, the spend control and the sitemap, over one heap of
    events ``(time, kind, page, generation)``: kind 0 = access, 1 = end of window, 2 =
    a sitemap read that shows the page changed; an access is void once its page's
    generation moved on."""

    def __init__(
        self, windows: Sequence[tuple[Page, float, float]], policy: HarmonicPolicy, resolution: float,
        use_last_modified: bool, min_interval: float, max_interval: float, refresh: float,
        true_rates: Sequence[float] | None, weights: Sequence[float] | None, host_delay: float,
        sitemap: float, sitemap_share: float, phases: Sequence[float] | None,
    ) -> None:
        self.windows, self.resolution, self.use_last_modified = windows, resolution, use_last_modified
        self.min_interval, self.max_interval, self.refresh = min_interval, max_interval, refresh
        self.true_rates, self.host_delay, self.sitemap, self.phases = true_rates, host_delay, sitemap, phases
        self.mult = Multiplier()
        self.pol = replace(policy, multiplier=self.mult)
        n = len(windows)
        self.w = list(weights) if weights is not None else [1.0] * n
        self.lmv = "sim" if use_last_modified else ""
        self.hist = RateHistogram()
        self.pool = RatePool() if policy.pool == "directory" and true_rates is None else None
        self.moments = RateMoments() if policy.prior == "gamma" and true_rates is None else None
        # new=learn: a stable share of new URLs explores (revisit.budget.explores_new); their
        # first revisits (count, changed, length s) teach the rate of a URL fetched once
        self.learn = policy.new == "learn" and true_rates is None
        self.explore = [self.learn and explores_new(page.url) for page, _, _ in windows]
        self.first_counts = [0.0, 0.0, 0.0]
        self.groups = [pool_group(page.url) for page, _, _ in windows] if self.pool is not None else []
        self.hosts = [urlsplit(page.url).hostname or "" for page, _, _ in windows] if host_delay > 0 else [""] * n
        self.by_host: dict[str, RateHistogram] = defaultdict(RateHistogram)
        self.unplaced: list[float] = []
        self.most_capped = 0
        self.free_at: dict[str, float] = defaultdict(float)  # host -> when its next access may be
        self.keys: list[tuple[int, int] | None] = [None] * n
        self.cds: list[list[float]] = []
        self.starts: list[list[float]] = []
        self.got: list[list[bool]] = []
        self.visits: list[list[float]] = [[] for _ in range(n)]
        self.states: list[Any] = [None] * n
        self.seen = [0] * n
        self.fetched = [1] * n
        self.heap: list[tuple[float, int, int, int]] = []
        self.gen = [0] * n
        self.ended = [False] * n
        self.on_sitemap = [False] * n
        listed = self._first_events(sitemap_share)
        self.active = 0
        self.next_solve = -math.inf
        # Spend control (as the refresher does): the accesses the budget allowed so far
        # (its rate for the pages observed at each moment, integrated over time) over
        # those made, applied to the next solve, so that pages that cannot spend their
        # share (their window ends first, intervals rounded to buckets) do not leave the
        # budget unspent.
        self.allowed = self.spent = 0.0
        self.t_prev: float | None = None
        self.read_cost = math.ceil(listed / 50000)
        self.first_read = math.ceil(min(st[0] for st in self.starts) / sitemap) * sitemap if sitemap > 0 and n else 0.0
        self.reads_counted = 0

    def _first_events(self, sitemap_share: float) -> int:
        """Each window's change buckets, its first access on the heap and, for a page
        on the sitemap, the first read at or after each change; returns the pages listed."""
        sitemap, listed = self.sitemap, 0
        for i, (page, w0, w1) in enumerate(self.windows):
            t = bucket(w0, self.resolution)
            cd = sorted({bucket(c, self.resolution) for c in page.changes if w0 < c <= w1})
            cd = [c for c in cd if c > t]
            self.cds.append(cd)
            self.starts.append([t] + cd)
            self.got.append([True] + [False] * len(cd))
            self.heap.append((t, 0, i, 0))
            if sitemap > 0 and in_share(page.url, sitemap_share):
                listed += 1
                self.on_sitemap[i] = True
                for c in cd:  # the first read at or after the change's bucket
                    self.heap.append((math.ceil(c / sitemap) * sitemap, 2, i, 0))
        heapq.heapify(self.heap)
        return listed

    def run(self) -> None:
        """Every event in time order. Raises :class:`RuntimeError` if a window is left
        open at the end (a bug of this class)."""
        heap, gen = self.heap, self.gen
        while heap:
            t, kind, i, g = heapq.heappop(heap)
            self._account(t)
            if kind != 2 and g != gen[i]:  # superseded: a sitemap read sent the page in earlier
                continue
            if kind == 1:
                self._end_window(i)
            elif kind == 2:
                self._sitemap_read(t, i)
            else:
                if t >= self.next_solve and len(self.hist):
                    self._solve(t)
                tau = self._access(t, i)
                self._rebin(i)
                self._schedule(t, i, tau)
        if self.active != 0:  # every window ends once; anything else is a bug of this class
            raise RuntimeError(f"simulate_budget: {self.active} windows left open at the end")

    def _account(self, t: float) -> None:
        """The accesses the budget allowed up to ``t``, and the sitemap reads up to
        ``t``, spent as they fall."""
        if self.t_prev is not None:
            self.allowed += self.pol.budget.total_rate(self.active) * (t - self.t_prev)
        self.t_prev = t
        if self.sitemap > 0 and t >= self.first_read:
            by_now = math.floor((t - self.first_read) / self.sitemap) + 1
            self.spent += (by_now - self.reads_counted) * self.read_cost
            self.reads_counted = by_now

    def _end_window(self, i: int) -> None:
        """Page ``i`` is observed until its window ends, visited or not."""
        self.ended[i] = True
        key = self.keys[i]  # the bin its latest access put it in (a window ends after its first access)
        assert key is not None
        self.hist.discard(key)
        if self.host_delay > 0:
            self.by_host[self.hosts[i]].discard(key)
        self.active -= 1

    def _sitemap_read(self, t: float, i: int) -> None:
        """A sitemap read at ``t``: every page it shows changed, as many as the budget
        has left, lowest estimated rate first; the others wait for the next read."""
        heap = self.heap
        shown = [i]
        while heap and heap[0][0] == t and heap[0][1] == 2:
            shown.append(heapq.heappop(heap)[2])
        due_now = sorted((self._rate_of(j), j) for j in set(shown)
                         if self.states[j] is not None and not self.ended[j]
                         and bisect.bisect_right(self.cds[j], t) > self.seen[j])
        room = max(0, int(self.allowed - self.spent))
        for _, j in due_now[:room]:
            self.gen[j] += 1
            heapq.heappush(heap, (t, 0, j, self.gen[j]))
        for _, j in due_now[room:]:  # the next read still shows them changed
            heapq.heappush(heap, (t + self.sitemap, 2, j, 0))

    def _solve(self, t: float) -> None:
        """``nu`` solved again (per host under a cap), with the spend control's gain;
        the fitted prior and the learned new-URL rate brought up to date."""
        mult, pol = self.mult, self.pol
        gain = next_gain(self.allowed, self.spent)
        if self.host_delay > 0:
            nominal = pol.budget.total_rate(self.active)
            sol = solve_nu_hosts({h: g.groups() for h, g in self.by_host.items() if len(g)},
                                 nominal * gain, 1 / self.host_delay)
            mult.nu, mult.host_nu = sol.nu, sol.host_nu
            # unplaced: of the budget itself (the spend control's gain aside)
            self.unplaced.append(max(0.0, nominal - (nominal * gain - sol.unplaced)) * DAY)
            self.most_capped = max(self.most_capped, len(sol.host_nu))
        else:
            mult.nu = solve_nu(self.hist.groups(), pol.budget.total_rate(self.active) * gain)
        if self.moments is not None:
            mult.prior = fit_gamma_prior(self.moments.sums) or mult.prior
        if self.learn:
            mult.new_rate = new_url_rate(*self.first_counts) or mult.new_rate
        self.next_solve = t + self.refresh

    def _access(self, t: float, i: int) -> float:
        """Page ``i`` visited at ``t``; returns the policy's next interval (s)."""
        self.spent += 1
        scale = self.pool.scale(self.groups[i], at=t) if self.pool is not None else None
        if self.states[i] is None:
            self.states[i], tau = access(self.pol, None, t, False, weight=self.w[i], host=self.hosts[i],
                                         prior_scale=scale, last_modified=self.lmv, explore=self.explore[i])
            if self.phases is not None:
                tau *= self.phases[i]
            self.active += 1
        else:
            tau = self._revisit(t, i, scale)
        self.visits[i].append(t)
        return tau

    def _revisit(self, t: float, i: int, scale: float | None) -> float:
        """A visit after the first: whether the page changed since the previous one, the
        state and the learned sums updated; returns the next interval (s)."""
        state, cd = self.states[i], self.cds[i]
        k = bisect.bisect_right(cd, t)
        changed = k > self.seen[i]
        lm = cd[k - 1] if (changed and self.use_last_modified) else None
        before = state.last
        old_xt = rate_counts(state) if self.moments is not None else None
        if explored_first_revisit(state, self.explore[i], t - before):
            self.first_counts[0] += 1
            self.first_counts[1] += changed
            self.first_counts[2] += t - before
        self.states[i], tau = access(self.pol, state, t, changed, modified_at=lm, weight=self.w[i],
                                     host=self.hosts[i], prior_scale=scale, last_modified=self.lmv,
                                     explore=self.explore[i])
        if self.moments is not None and old_xt is not None:
            self.moments.add(self.moments.delta(old_xt, rate_counts(self.states[i])))
        if self.pool is not None and t > before:
            self.pool.observe(self.groups[i], changed, t - before, at=t)
        if changed:
            self.got[i][k] = True
            self.fetched[i] += 1
            self.seen[i] = k
        return tau

    def _rebin(self, i: int) -> None:
        """Page ``i`` moved to the histogram bin of its rate and weight now."""
        old_key = self.keys[i]
        if old_key is not None:
            self.hist.discard(old_key)
            if self.host_delay > 0:
                self.by_host[self.hosts[i]].discard(old_key)
        wi = budget_weight(self.states[i], self.w[i])  # young=K: a young URL's weight, as in its interval
        rate = self._rate_of(i)
        self.keys[i] = self.hist.add(rate, wi)
        if self.host_delay > 0:
            self.by_host[self.hosts[i]].add(rate, wi)

    def _schedule(self, t: float, i: int, tau: float) -> None:
        """Page ``i``'s next event: its next access, or the end of its window."""
        t_next = next_due(t, self._tau_of(i, tau), self.resolution, self.min_interval, self.max_interval)
        if self.host_delay > 0:  # a polite downloader: one access per host_delay per host, in turn
            host = self.hosts[i]
            t_next = max(t_next, self.free_at[host])
            self.free_at[host] = t_next + self.host_delay
        if self.on_sitemap[i]:  # each read says the page has not changed: no visit until one says it has
            t_next = math.inf
        self.gen[i] += 1
        end = self.windows[i][2]
        if t_next > end:
            heapq.heappush(self.heap, (max(t, end), 1, i, self.gen[i]))
        else:
            heapq.heappush(self.heap, (t_next, 0, i, self.gen[i]))

    def _rate_of(self, i: int) -> float:
        return self.true_rates[i] if self.true_rates is not None else estimated_rate(self.states[i])

    def _tau_of(self, i: int, tau: float) -> float:
        if self.true_rates is None:
            return tau
        rho = access_rate(self.true_rates[i], self.w[i], self.pol.nu_for(self.hosts[i]))
        return 1 / rho if rho > 0 else math.inf

    def report_into(self, report: dict[str, Any]) -> None:
        """What :func:`simulate_budget` reports (its docstring)."""
        if self.host_delay > 0:
            report["unplaced_per_day"] = sum(self.unplaced) / len(self.unplaced) if self.unplaced else 0.0
            report["hosts_capped"] = self.most_capped
        if self.sitemap > 0:
            report["sitemap_reads"] = self.reads_counted * self.read_cost
        if self.learn:  # what new=learn learned by the end (None: too few explored)
            report["new_url_rate"] = self.mult.new_rate
            report["new_explored"] = (self.first_counts[0], self.first_counts[1])

    def results(self) -> list[PageResult]:
        """One :class:`PageResult` per window, in order."""
        results = []
        for i, (_, _, w1) in enumerate(self.windows):
            window = bucket(w1, self.resolution) - self.starts[i][0]
            results.append(PageResult(len(self.starts[i]), self.fetched[i], len(self.visits[i]), len(self.cds[i]),
                                      window, self.visits[i], self.starts[i], self.got[i]))
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
