"""Change rates estimated from what the crawler saw, and the priors they start from:
the fixed weak prior, the prior pooled per directory, the Gamma prior fitted to the
crawl, and the rate of a URL fetched once learned from explored first revisits.

Pure logic (no Scrapy, no Redis). Times in seconds, rates per second. The budget
these rates are split under is :mod:`ipr_crawl.revisit.budget`.

- :func:`change_rate`: a URL's change rate from its :class:`~ipr_crawl.revisit.policy.RevisitState`.
  With a valid Last-Modified the changes seen over the change-free time observed,
  ``λ = (X + 0.5) / (U + 90 d)`` (the 0.5 and 90 d a weak prior); without,
  Cho & Garcia-Molina's improved estimator (ACM TOIT 3(3), 2003, §4.2)
  ``λ = −ln((n − X + 0.5) / (n + 0.5)) / I`` for ``n`` access intervals, ``X`` of them
  with a change, mean interval ``I``; never below the prior ``0.5 / (T + 90 d)``.
- :class:`RatePool`: that prior scaled by what the URL's directory has shown (an
  empirical-Bayes prior pooled over the URLs of one directory; Robbins 1956, here in
  the form of a scaled floor): the directory's rate ``(X_g + 0.5) / (E_g + 90 d)``
  (changes and exposure of its URLs' access intervals) over the crawl's, with the same
  prior, ``(ΣX + 0.5) / (ΣE + 90 d)``, within ``[1/100, 100]`` (a site of one directory
  gets the prior alone). A URL not seen changing yet in a directory whose pages
  change often is revisited sooner, and one in a directory that never changes later.
- :class:`RateMoments` and :func:`fit_gamma_prior` (``harmonic:…:prior=gamma``): the
  prior fitted to the crawl's own observations. The URLs' rates are taken as
  Gamma(α, β)-distributed and the changes a URL shows over its observed time as
  Poisson given its rate; α and β are fitted by the method of moments on the URLs'
  ``(x_i, T_i)`` (``x``: the changes behind the intervals with one, Cho &
  Garcia-Molina's correction; ``T``: observed time), and a URL's rate is the posterior
  mean ``(x + α) / (T + β)`` (``(X + α) / (U + β)`` with a Last-Modified): a
  Gamma-Poisson empirical-Bayes estimate (Robbins 1956; the moments as in Johnson,
  Kemp & Kotz, *Univariate Discrete Distributions*, 3rd ed. 2005, §5.8).
- :func:`explores_new` and :func:`new_url_rate` (``harmonic:…:new=learn``): the rate of
  a URL fetched once, learned by the crawl. A new page often changes soon after it
  appears (a draft; on the PEPs log 27 % of the versions come in a page's first 90
  days), which the fixed prior (half a change in 90 days) cannot know and the URL's
  own first interval is too long to see. So a stable eighth of new URLs
  (:data:`NEW_EXPLORE_SHARE`, by a hash of the URL) get their first revisit after
  :data:`NEW_EXPLORE_SECS` (3 days); over those first intervals, Cho &
  Garcia-Molina's estimator gives the rate of a new URL, which every URL fetched once
  then has (from :data:`NEW_MIN_SAMPLES` intervals on) in its interval and in the
  budget's histogram. On a site whose new pages do not change soon the learned rate
  is low and costs only the explored revisits. Measured in docs/research/revisits.md.
- :func:`young_factor` (``harmonic:…:new=learn:young=K``): a young URL (at most
  :data:`YOUNG_ACCESSES` accesses) gets its weight times ``(λ_new / λ_prior)^K``
  (at least 1), ``λ_new`` the learned rate of a URL fetched once and ``λ_prior`` the
  fixed prior's. Under the harmonic rule a URL's access rate tends to ``w / ν`` however
  fast it changes; where new pages change much faster than the prior says, the young
  ones get more of the budget while they are young. The factor enters the budget's
  histogram as well, so the spend stays the budget's. An empirical rule, not in
  Kolobov et al.: ``K = 0.5`` and the three accesses were chosen on the PEPs log,
  checked on EmacsWiki and tldr, and then run once on a log built afterwards, EIPs
  (docs/research/revisits.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from urllib.parse import urlsplit

from ipr_crawl.revisit.durations import DAY, YEAR

__all__ = [
    "PRIOR_CHANGES",
    "PRIOR_TIME",
    "YEAR",
    "RatePool",
    "RateMoments",
    "NEW_EXPLORE_SECS",
    "NEW_EXPLORE_SHARE",
    "NEW_MIN_SAMPLES",
    "YOUNG_ACCESSES",
    "censored_count",
    "change_rate",
    "explores_new",
    "fit_gamma_prior",
    "in_share",
    "new_url_rate",
    "pool_group",
    "prior_ratio",
    "stable_hash64",
    "young_factor",
]

#: The weak prior of the rate estimate: 0.5 changes in 90 days of observation.
PRIOR_CHANGES = 0.5
PRIOR_TIME = 90 * DAY
#: ``new=learn``: the share of new URLs whose first revisit explores (module doc)
NEW_EXPLORE_SHARE = 1 / 8
#: ``new=learn``: how soon (s) an exploring URL is revisited after its first fetch
NEW_EXPLORE_SECS = 3 * DAY
#: ``new=learn``: explored first intervals needed before the learned rate is used
NEW_MIN_SAMPLES = 20
#: ``young=K``: a URL is young while it has had at most this many accesses
YOUNG_ACCESSES = 3


def stable_hash64(key: str) -> int:
    """A stable 64-bit hash of ``key`` (BLAKE2b), the same in every process: the draws
    of :func:`in_share` and of revisit-sim's page phases."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")


def in_share(key: str, share: float) -> bool:
    """Whether ``key`` is among a ``share`` of keys chosen by :func:`stable_hash64` (so
    every process, every policy of revisit-sim and ``serve-changes`` pick the same ones)."""
    if share >= 1:
        return True
    return stable_hash64(key) / 2**64 < share


def explores_new(url: str) -> bool:
    """Whether ``url`` is among the :data:`NEW_EXPLORE_SHARE` of URLs whose first
    revisit explores (``harmonic:…:new=learn``): :func:`in_share` of ``new:`` and the URL."""
    return in_share("new:" + url, NEW_EXPLORE_SHARE)


def new_url_rate(intervals: float, changed: float, exposure: float) -> float | None:
    """The change rate (per s) of a URL fetched once, from the explored first intervals
    (``intervals`` of them, ``changed`` with a change, ``exposure`` s in all): the changes
    behind them (:func:`censored_count`, Cho & Garcia-Molina's estimator) over the
    exposure; None below :data:`NEW_MIN_SAMPLES` intervals.

    >>> round(new_url_rate(98, 42, 98 * 3 * DAY) * YEAR, 1)   # PEPs: 42 of 98 changed within 3 days
    67.6
    >>> new_url_rate(5, 1, 15 * DAY) is None
    True
    """
    if intervals < NEW_MIN_SAMPLES or exposure <= 0:
        return None
    return censored_count(intervals, min(max(changed, 0.0), intervals)) / exposure


def prior_ratio(new_rate: float) -> float:
    """A learned new-URL rate (per s) over the fixed prior's, ``PRIOR_CHANGES /
    PRIOR_TIME``: the scale ``new=learn`` puts on a new URL's prior, and the base of
    :func:`young_factor`.

    >>> round(prior_ratio(67.6 / YEAR), 1)   # PEPs
    33.3
    """
    return new_rate / (PRIOR_CHANGES / PRIOR_TIME)


def young_factor(new_rate: float | None, exponent: float) -> float:
    """The factor on a young URL's weight (``harmonic:…:new=learn:young=K``, module doc):
    ``max(1, new_rate / prior rate) ** exponent``, the prior rate ``PRIOR_CHANGES /
    PRIOR_TIME``; 1 while nothing is learned (``new_rate`` None) or ``exponent`` is 0.

    >>> round(young_factor(67.6 / YEAR, 0.5), 2)   # PEPs' learned rate: 67.6 changes a year
    5.77
    >>> young_factor(1.2 / YEAR, 0.5), young_factor(None, 0.5)   # below the prior (tldr): none
    (1.0, 1.0)
    """
    if new_rate is None or exponent <= 0:
        return 1.0
    return max(1.0, prior_ratio(new_rate)) ** exponent


def change_rate(
    accesses: int, changed: int, observed: float, unchanged_time: float, last_modified: bool,
    prior_scale: float = 1.0, prior_time: float = 0.0,
) -> float:
    """A URL's change rate (per s) from ``accesses`` (first included), ``changed``
    intervals with a change, ``observed`` time (s, first to latest access) and
    ``unchanged_time`` (s; U of Tamura & Kitsuregawa 2008, §4.1.1); see the module doc.
    ``prior_scale`` multiplies the prior's changes (:meth:`RatePool.scale`). With
    ``prior_time`` > 0 (s; :func:`fit_gamma_prior`'s β), the Gamma posterior mean
    ``(x + α) / (T + β)`` with ``α = prior_scale × 0.5`` and ``x`` the changes behind
    the ``X`` intervals with one (:func:`censored_count`); with a Last-Modified
    ``(X + α) / (U + β)``.

    >>> round(change_rate(11, 5, 100 * DAY, 50 * DAY, False) * DAY, 4)  # n=10, X=5, I=10 d
    0.0647
    >>> round(change_rate(11, 5, 100 * DAY, 50 * DAY, True) * DAY, 4)   # 5.5 / 140 d
    0.0393
    >>> round(change_rate(11, 5, 100 * DAY, 50 * DAY, False, 2.0, 300 * DAY) * DAY, 4)  # (6.47 + 1) / 400 d
    0.0187
    """
    if prior_time > 0:
        if last_modified:
            return (changed + prior_scale * PRIOR_CHANGES) / (max(unchanged_time, 0.0) + prior_time)
        return (censored_count(accesses - 1, changed) + prior_scale * PRIOR_CHANGES) / (max(observed, 0.0) + prior_time)
    prior = prior_scale * PRIOR_CHANGES / (max(observed, 0.0) + PRIOR_TIME)
    n = accesses - 1
    if last_modified:
        return (changed + prior_scale * PRIOR_CHANGES) / (max(unchanged_time, 0.0) + PRIOR_TIME)
    if n <= 0 or observed <= 0:
        return prior
    mean = observed / n
    estimate = -math.log((n - changed + 0.5) / (n + 0.5)) / mean
    return max(estimate, prior)


def pool_group(url: str) -> str:
    """The group of ``url`` in a :class:`RatePool`: its directory, the URL without query
    and fragment up to the last ``/`` of its path.

    >>> pool_group("https://tldr.sh/pages/linux/ls.md?x=1")
    'https://tldr.sh/pages/linux/'
    >>> pool_group("https://example.org")
    'https://example.org/'
    """
    parts = urlsplit(url)
    path = parts.path or "/"
    return f"{parts.scheme}://{parts.netloc}{path[:path.rfind('/') + 1]}"


class RatePool:
    """Change counts and exposure per group of URLs (:func:`pool_group`: a directory),
    for the prior of :func:`change_rate` (module doc). Each access interval of a URL
    adds to its group: 1 change or 0, and the interval's length (s). Bounded state: two
    numbers per directory. The crawl keeps the same sums in Redis
    (:meth:`ipr_crawl.store.revisit.RevisitStore.rate_pool`).

    >>> pool = RatePool()
    >>> for _ in range(10):
    ...     pool.observe("a/", True, 10 * DAY)   # a page of a/ changed in each of 10 intervals
    ...     pool.observe("b/", False, 10 * DAY)  # b/ never changed
    >>> round(pool.scale("a/"), 2), round(pool.scale("b/"), 3), pool.scale("new/")
    (1.53, 0.073, 1.0)

    Accesses at one instant ``at`` (s; the clock's bucket) do not see each other: what
    is observed at ``at`` counts from the first call with a later instant, so the
    scales do not depend on the order in which one instant's responses are handled.

    >>> pool = RatePool()
    >>> pool.observe("a/", True, 10 * DAY, at=100.0)
    >>> pool.observe("b/", False, 10 * DAY, at=100.0)
    >>> pool.scale("a/", at=100.0), round(pool.scale("a/", at=200.0), 3)
    (1.0, 1.1)
    """

    #: the scale is kept within [1 / CLIP, CLIP]
    CLIP = 100.0

    def __init__(self) -> None:
        #: group -> [intervals with a change, exposure (s)]
        self.sums: dict[str, list[float]] = {}
        self.changes = 0.0
        self.exposure = 0.0
        #: observations of the instant ``_held_at``, not counted yet
        self._held: list[tuple[str, bool, float]] = []
        self._held_at: float | None = None

    def observe(self, group: str, changed: bool, interval: float, at: float | None = None) -> None:
        """Count one access interval (s) of a URL of ``group``, from the next instant
        after ``at`` on (at once without ``at``)."""
        if interval <= 0:
            return
        if at is None:
            self._add(group, changed, interval)
            return
        self._settle(at)
        self._held_at = at
        self._held.append((group, changed, interval))

    def _add(self, group: str, changed: bool, interval: float) -> None:
        g = self.sums.setdefault(group, [0.0, 0.0])
        x = 1.0 if changed else 0.0
        g[0] += x
        g[1] += interval
        self.changes += x
        self.exposure += interval

    def _settle(self, at: float | None) -> None:
        """Count the held observations if ``at`` is a later instant than theirs."""
        if self._held and (at is None or self._held_at is None or at > self._held_at):
            for obs in self._held:
                self._add(*obs)
            self._held = []

    def scale(self, group: str, at: float | None = None) -> float:
        """The factor on the prior of a URL of ``group`` accessed at ``at`` (s; None:
        everything observed so far counts): the group's rate
        ``(X_g + 0.5) / (E_g + 90 d)`` over the crawl's ``(ΣX + 0.5) / (ΣE + 90 d)``,
        within ``[1/CLIP, CLIP]``; 1 for a group not seen or while no change was seen
        at all (and for the only group of a crawl)."""
        self._settle(at)
        g = self.sums.get(group)
        if g is None or self.changes <= 0 or self.exposure <= 0:
            return 1.0
        ratio = ((g[0] + PRIOR_CHANGES) / (g[1] + PRIOR_TIME)) / ((self.changes + PRIOR_CHANGES) / (self.exposure + PRIOR_TIME))
        return min(self.CLIP, max(1.0 / self.CLIP, ratio))

    def load(self, sums: dict[str, tuple[float, float]]) -> None:
        """Replace the sums with ``sums`` (group -> (changes, exposure s)), e.g. read from
        Redis (which has the held observations too: they are dropped)."""
        self._held = []
        self.sums = {g: [float(x), float(e)] for g, (x, e) in sums.items()}
        self.changes = sum(v[0] for v in self.sums.values())
        self.exposure = sum(v[1] for v in self.sums.values())


def censored_count(n: float, changed: float) -> float:
    """The changes behind ``changed`` of ``n`` access intervals that showed one (a
    crawler sees at most one per interval): Cho & Garcia-Molina's improved estimator
    times the time observed (ACM TOIT 3(3), 2003, §4.2), ``−n ln((n − X + 0.5) / (n + 0.5))``;
    0 for ``n`` <= 0.

    >>> round(censored_count(10, 5), 2), round(censored_count(1, 1), 2)
    (6.47, 1.1)
    """
    if n <= 0:
        return 0.0
    return -n * math.log((n - changed + 0.5) / (n + 0.5))


class RateMoments:
    """The sums over a crawl's URLs of ``x``, ``T``, ``x²``, ``x·T`` and ``T²`` (``x``
    the changes behind a URL's intervals with one, :func:`censored_count`; ``T`` its
    observed time in s), kept up to date as each access moves one URL from its old
    ``(x, T)`` to its new one (:meth:`delta`; :func:`~ipr_crawl.revisit.policy.rate_counts`):
    bounded state for :func:`fit_gamma_prior`. The crawl keeps the same five sums in
    Redis (:meth:`ipr_crawl.store.revisit.RevisitStore.rate_moments`).

    >>> mom = RateMoments()
    >>> mom.add(mom.delta((0.0, 0.0), (1.0, 10 * DAY)))
    >>> mom.add(mom.delta((1.0, 10 * DAY), (1.0, 30 * DAY)))
    >>> [round(x / DAY ** k, 1) for x, k in zip(mom.sums, (0, 1, 0, 1, 2))]
    [1.0, 30.0, 1.0, 30.0, 900.0]
    """

    FIELDS = ("x", "T", "xx", "xT", "TT")

    def __init__(self, sums: Iterable[float] = (0.0,) * 5) -> None:
        self.sums = [float(v) for v in sums]
        if len(self.sums) != 5:
            raise ValueError("RateMoments: five sums (x, T, x², x·T, T²)")

    @staticmethod
    def delta(old: tuple[float, float], new: tuple[float, float]) -> tuple[float, float, float, float, float]:
        """What one URL's move from ``old = (x, T)`` to ``new`` adds to the five sums."""
        (x0, t0), (x1, t1) = old, new
        return (x1 - x0, t1 - t0, x1 * x1 - x0 * x0, x1 * t1 - x0 * t0, t1 * t1 - t0 * t0)

    def add(self, d: Iterable[float]) -> None:
        for k, v in enumerate(d):
            self.sums[k] += v


#: α of the fitted prior is kept within [ALPHA_MIN, ALPHA_MAX] (ALPHA_MAX: rates no
#: more spread than a Poisson count shows, i.e. alike)
ALPHA_MIN, ALPHA_MAX = 0.01, 1000.0
#: changes seen (Σx) before the prior is first fitted: two parameters are not fitted to
#: a handful of changes (a 40-page year of EmacsWiki and one page that never changes,
#: 8/y: first fits from 1, 10 and 30 changes gave coverage .686, .678 and .678, from
#: 100 .752; the fixed prior .756)
MIN_CHANGES = 100.0


def fit_gamma_prior(sums: Iterable[float]) -> tuple[float, float] | None:
    """The Gamma prior ``(α, β s)`` of the URLs' change rates, by the method of moments
    on :class:`RateMoments`' five sums: ``μ = Σx / ΣT``,
    ``1/α = Σ[(x_i − μT_i)² − μT_i] / Σ(μT_i)²`` (the spread of the counts beyond the
    Poisson's), ``β = α / μ``; α within [ALPHA_MIN, ALPHA_MAX]. None while fewer than
    MIN_CHANGES changes have been seen (the fixed prior, 0.5 changes in 90 d, then holds).

    >>> a, b = fit_gamma_prior([100, 10000 * DAY, 100, 10000 * DAY, 10**6 * DAY ** 2])  # 100 URLs, 1 change in 100 d each
    >>> a, round(b / DAY)   # counts alike: no more spread than Poisson
    (1000.0, 100000)
    >>> a, b = fit_gamma_prior([100, 10000 * DAY, 10000, 10000 * DAY, 10**6 * DAY ** 2])  # 1 URL with all 100 changes
    >>> round(a, 3), round(b / DAY, 1)   # as spread as can be: alpha at its floor
    (0.01, 1.0)
    >>> fit_gamma_prior([10, 1000 * DAY, 10, 1000 * DAY, 10**5 * DAY ** 2]) is None   # fewer than MIN_CHANGES
    True
    """
    s_x, s_t, s_xx, s_xt, s_tt = (float(v) for v in sums)
    if not (s_x >= MIN_CHANGES and s_t > 0 and s_tt > 0):
        return None
    mu = s_x / s_t
    spread = s_xx - 2 * mu * s_xt + mu * mu * s_tt - mu * s_t
    alpha = (mu * mu * s_tt) / spread if spread > 0 else ALPHA_MAX
    alpha = min(ALPHA_MAX, max(ALPHA_MIN, alpha))
    return alpha, alpha / mu
