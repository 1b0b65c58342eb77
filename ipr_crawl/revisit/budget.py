"""Revisits under a budget: change rates estimated from what the crawler saw, split
by the harmonic-staleness rule of Kolobov, Peres, Lu & Horvitz (NeurIPS 2019).

Pure logic (no Scrapy, no Redis). Times in seconds, rates per second.

- the change rates it splits (:func:`change_rate`, :class:`RatePool`,
  :func:`fit_gamma_prior`, :func:`new_url_rate`, :func:`young_factor`) are
  :mod:`ipr_crawl.revisit.rates`' (importable from here too);
- :func:`access_rate`: the optimal access rate of a page of weight ``w`` and change
  rate ``λ`` for the Lagrange multiplier ``ν`` of the budget,
  ``ρ = (−λ + √(λ² + 4wλ/ν)) / 2`` (Kolobov et al. 2019, §4: under Poisson accesses
  the harmonic cost of a page is ``w ln(1 + λ/ρ)`` per unit time; setting its
  derivative to ``ν`` gives this root). The next interval is ``1/ρ``.
- :func:`solve_nu`: the one ``ν`` for which the rates of all pages sum to the budget
  (bisection on ``log ν``; the sum falls as ``ν`` grows), from a
  :class:`RateHistogram` (log-binned rates and weights: bounded state for millions
  of URLs) or exact ``(λ, w, count)`` triples.
- :func:`solve_nu_hosts`: the same under per-host politeness: no host gets more
  accesses per second than ``cap`` (1 / its download delay); a host held at its cap
  gets its own multiplier, and what the caps leave unplaced is returned.
- :func:`parse_budget`: ``N/d`` (revisits per day for the whole crawl) or ``N/y``
  (per URL per year).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ipr_crawl.revisit.durations import DAY, YEAR
from ipr_crawl.revisit.rates import (
    ALPHA_MAX,
    ALPHA_MIN,
    MIN_CHANGES,
    NEW_EXPLORE_SECS,
    NEW_EXPLORE_SHARE,
    NEW_MIN_SAMPLES,
    PRIOR_CHANGES,
    PRIOR_TIME,
    YOUNG_ACCESSES,
    RateMoments,
    RatePool,
    censored_count,
    change_rate,
    explores_new,
    fit_gamma_prior,
    in_share,
    new_url_rate,
    pool_group,
    prior_ratio,
    stable_hash64,
    young_factor,
)

__all__ = [
    "PRIOR_CHANGES",
    "PRIOR_TIME",
    "YEAR",
    "Budget",
    "RateHistogram",
    "RatePool",
    "RateMoments",
    "NEW_EXPLORE_SECS",
    "NEW_EXPLORE_SHARE",
    "NEW_MIN_SAMPLES",
    "YOUNG_ACCESSES",
    "censored_count",
    "explores_new",
    "in_share",
    "stable_hash64",
    "fit_gamma_prior",
    "new_url_rate",
    "young_factor",
    "prior_ratio",
    "pool_group",
    "access_rate",
    "change_rate",
    "next_gain",
    "parse_budget",
    "solve_nu",
    "solve_nu_hosts",
    "HostSolution",
    "ALPHA_MIN",
    "ALPHA_MAX",
    "MIN_CHANGES",
]


@dataclass(frozen=True)
class Budget:
    """``amount`` accesses per ``per`` (``"d"``: per day for the whole crawl; ``"y"``:
    per URL per year)."""

    amount: float
    per: str

    def total_rate(self, urls: int) -> float:
        """The crawl's access rate (per s) for ``urls`` URLs being revisited."""
        if self.per == "d":
            return self.amount / DAY
        return self.amount * urls / YEAR

    def __str__(self) -> str:
        return f"{self.amount:g}/{self.per}"


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*([dy])\s*$", re.IGNORECASE)


def parse_budget(text: str) -> Budget:
    """``"8/y"`` -> ``Budget(8.0, "y")``; ``"5000/d"`` -> ``Budget(5000.0, "d")``.

    >>> parse_budget("8/y"), parse_budget(" 2.5 / D ")
    (Budget(amount=8.0, per='y'), Budget(amount=2.5, per='d'))

    Raises :class:`ValueError` for anything else or an amount that is not > 0.
    """
    m = _BUDGET.match(str(text))
    if not m:
        raise ValueError(
            f"revisit budget {text!r}: use N/d (revisits per day for the whole crawl) or N/y "
            "(revisits per URL per year), e.g. 5000/d or 8/y"
        )
    amount = float(m.group(1))
    if not amount > 0:
        raise ValueError(f"revisit budget {text!r}: must be > 0")
    return Budget(amount, m.group(2).lower())


def access_rate(rate: float, weight: float, nu: float) -> float:
    """``ρ = (−λ + √(λ² + 4wλ/ν)) / 2`` (per s), computed without cancellation.

    >>> round(access_rate(1.0, 1.0, 0.5), 6)   # (-1 + 3) / 2
    1.0
    """
    if rate <= 0 or weight <= 0:
        return 0.0
    disc = math.sqrt(rate * rate + 4 * weight * rate / nu)
    return 2 * weight * rate / nu / (rate + disc)  # = (disc - rate) / 2


def solve_nu(groups: Iterable[tuple[float, float, float]], total_rate: float, iterations: int = 100) -> float:
    """The ``ν`` with ``Σ count · access_rate(λ, w, ν) = total_rate`` over ``groups``
    of ``(λ, w, count)``; bisection on ``log ν`` to a relative error of 1e-9.

    >>> nu = solve_nu([(1 / DAY, 1.0, 100)], 100 / (7 * DAY))
    >>> round(1 / access_rate(1 / DAY, 1.0, nu) / DAY, 6)   # every page once a week
    7.0

    Raises :class:`ValueError` when ``total_rate`` is not > 0 or no group can be visited.
    """
    items = [(r, w, c) for r, w, c in groups if r > 0 and w > 0 and c > 0]
    if not total_rate > 0 or not items:
        raise ValueError("solve_nu: need a positive total rate and a group with rate, weight and count > 0")

    def spent(nu: float) -> float:
        return sum(c * access_rate(r, w, nu) for r, w, c in items)

    lo, hi = -200.0, 200.0  # log nu
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if spent(math.exp(mid)) > total_rate:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return math.exp((lo + hi) / 2)


@dataclass(frozen=True)
class HostSolution:
    """:func:`solve_nu_hosts`' answer: ``nu`` for the hosts below their cap, ``host_nu``
    for each host held at it (``>= nu``), ``unplaced``: the access rate (per s) of the
    budget that no host could take (0 unless every host is at its cap)."""

    nu: float
    host_nu: dict[str, float]
    unplaced: float


def solve_nu_hosts(
    hosts: dict[str, list[tuple[float, float, float]]], total_rate: float, cap: float,
) -> HostSolution:
    """The budget split of :func:`solve_nu` under per-host politeness: the rates of
    one host's URLs sum to at most ``cap`` (per s; 1 / the host's download delay).

    The constraints are those of a separable concave problem, so the optimum is the
    water-filling of the Karush-Kuhn-Tucker conditions (Boyd & Vandenberghe 2004,
    §5.5.3): solve the crawl's ``nu`` over the hosts not yet capped with the budget
    they leave; a host whose URLs would then exceed ``cap`` is held at it, with its own
    multiplier ``nu_h`` (its URLs' rates sum to ``cap``); repeat until no host exceeds.

    >>> day = 86400.0
    >>> hosts = {"a": [(1 / day, 1.0, 100)], "b": [(1 / day, 1.0, 1)]}
    >>> sol = solve_nu_hosts(hosts, 8 / day, 5 / day)   # a would take 7.9 a day, may take 5
    >>> sorted(sol.host_nu), round(sol.unplaced * day, 6), round(1 / access_rate(1 / day, 1.0, sol.nu) / day, 3)
    (['a'], 0.0, 0.333)
    >>> round(1 / access_rate(1 / day, 1.0, sol.host_nu["a"]) / day, 3)   # each of a's 100: every 20 d
    20.0
    >>> round(solve_nu_hosts(hosts, 20 / day, 5 / day).unplaced * day, 6)   # both full: 10 a day unplaced
    10.0

    Raises :class:`ValueError` as :func:`solve_nu` does, or for ``cap`` not > 0.
    """
    if not cap > 0:
        raise ValueError("solve_nu_hosts: the per-host cap must be > 0")
    groups = {h: [(r, w, c) for r, w, c in g if r > 0 and w > 0 and c > 0] for h, g in hosts.items()}
    groups = {h: g for h, g in groups.items() if g}
    if not total_rate > 0 or not groups:
        raise ValueError("solve_nu_hosts: need a positive total rate and a group with rate, weight and count > 0")
    capped: set[str] = set()
    nu = math.inf
    while True:
        free = [h for h in groups if h not in capped]
        remaining = total_rate - cap * len(capped)
        if not free or remaining <= 0:
            break
        nu = solve_nu([x for h in free for x in groups[h]], remaining)
        over = {h for h in free if sum(c * access_rate(r, w, nu) for r, w, c in groups[h]) > cap * (1 + 1e-9)}
        if not over:
            break
        capped |= over
    host_nu = {h: solve_nu(groups[h], cap) for h in capped}
    placed = cap * len(capped) + (max(0.0, total_rate - cap * len(capped)) if len(capped) < len(groups) else 0.0)
    if nu == math.inf:  # every host at its cap: the crawl-wide nu is the largest of theirs
        nu = max(host_nu.values())
    return HostSolution(nu, host_nu, max(0.0, total_rate - placed))


class RateHistogram:
    """Counts of URLs by (change rate, weight), both log-binned (``per_decade`` bins
    per factor of 10): bounded state however many URLs a crawl revisits. A bin's
    representative value is its geometric centre, so :func:`solve_nu` over
    :meth:`groups` errs by at most half a bin (a factor 10^(1/(2·per_decade)))."""

    def __init__(self, per_decade: int = 8) -> None:
        self.per_decade = per_decade
        self.counts: dict[tuple[int, int], int] = {}

    def key(self, rate: float, weight: float = 1.0) -> tuple[int, int]:
        """The bin of ``(rate, weight)``."""
        k = self.per_decade
        return (math.floor(math.log10(max(rate, 1e-300)) * k), math.floor(math.log10(max(weight, 1e-300)) * k))

    def add(self, rate: float, weight: float = 1.0, count: int = 1) -> tuple[int, int]:
        """Count a URL in (or, ``count=-1``, out of) its bin; returns the bin."""
        key = self.key(rate, weight)
        left = self.counts.get(key, 0) + count
        if left:
            self.counts[key] = left
        else:
            self.counts.pop(key, None)
        return key

    def discard(self, key: tuple[int, int]) -> None:
        """Take one URL out of bin ``key`` (as :meth:`add` returned it)."""
        left = self.counts.get(key, 0) - 1
        if left > 0:
            self.counts[key] = left
        else:
            self.counts.pop(key, None)

    def groups(self) -> list[tuple[float, float, float]]:
        """``(λ, w, count)`` per non-empty bin, at the bins' centres."""
        k = self.per_decade
        return [
            (10 ** ((a + 0.5) / k), 10 ** ((b + 0.5) / k), float(c))
            for (a, b), c in self.counts.items() if c > 0
        ]

    def __len__(self) -> int:
        return sum(c for c in self.counts.values() if c > 0)


def next_gain(allowed: float, spent: float, low: float = 0.5, high: float = 2.0) -> float:
    """Spend control: the factor on the budget's rate for the next solve, ``allowed /
    spent`` (the accesses the budget allowed so far over those made) within ``[low,
    high]``; 1 before anything was spent. The share of the budget that URLs cannot
    spend (a window or crawl that ends first, intervals rounded to buckets) is partly
    given to the others. An integral controller on the gain was tried: on the
    EmacsWiki log it did not spend more (7.71 vs 7.70 per page-year at 8/y) and lost
    coverage (0.726 vs 0.794 at 1/y), so the ratio stays.

    >>> next_gain(110.0, 100.0), next_gain(0.0, 0.0), next_gain(1.0, 100.0)
    (1.1, 1.0, 0.5)
    """
    if allowed <= 0 or spent <= 0:
        return 1.0
    return min(high, max(low, allowed / spent))
