"""Revisit policy: the next-access interval of each policy, and the due times.

Pure logic, no Scrapy or Redis imports: the downloader middleware
(:mod:`ipr_crawl.middlewares.conditional`) and the change-log simulator
(:mod:`ipr_crawl.evaluation.revisit_sim`) drive the SAME functions below. Every time is in
seconds (POSIX seconds for instants); intervals are seconds.

This module is the revisit rules' import path: it also gives the names of the modules
it builds on, each of which owns one job: :mod:`~ipr_crawl.revisit.state` (what is kept
per URL and its update), :mod:`~ipr_crawl.revisit.policies` (the policies' parameters),
:mod:`~ipr_crawl.revisit.spec` (the spec mini-language, :func:`parse_policy`),
:mod:`~ipr_crawl.revisit.durations` (``15d``) and :mod:`~ipr_crawl.revisit.httpdate`
(RFC 9110 HTTP dates).

Source: Tamura & Kitsuregawa 2008, §4.
Per URL only a few numbers are kept (:class:`RevisitState`): ``T`` (time since
the first access), ``U`` (sum of access intervals in which no change was
detected), ``m`` (intervals with a change), ``t_c,min``, ``t_c,avg = (T - U)/m``,
the last interval, validators and the content hash.

Estimators (:func:`parse_policy` specs):

- ``mle-min``, ``mle-avg``, ``mle-mix`` (Tamura & Kitsuregawa 2008, §4.1, eq. 4 and 5): mean change
  interval ``t_c / log(T/U)`` with ``t_c`` = ``t_c,min``, ``t_c,avg`` or
  ``sqrt(t_c,min * t_c,avg)``; multiplier clamped to ``[mu_low, mu_high]``, times
  ``alpha``; ``mu_high * tau_prev`` while no change was ever seen; ``tau_2`` fixed.
- ``aimd`` (Tamura & Kitsuregawa 2008, §4.2, eq. 6): unchanged ``tau += d``, changed ``tau *= r``; the
  ``pair`` variant adds ``d`` only after two unchanged accesses in a row.
- ``nutch-adaptive`` (Apache Nutch ``AdaptiveFetchSchedule``): unchanged
  ``tau *= 1 + inc``, changed ``tau *= 1 - dec``, clamped to ``[min, max]``.
- ``fixed``: always the same interval.

Growth is earned by observed time, not by accesses (:func:`earned_growth`, applied
by :func:`access`): each rule above takes one step per access and assumes the
previous interval was observed. An access that comes before half that interval
(a run-once crawl with a long horizon, repeated runs, a burst of 304s, accesses
sharing one time bucket) gets any increase only in proportion to the time
actually observed; decreases and on-time accesses are the rules' own. Without it
four 304s within 15 s took MLE's interval 15 -> 150 -> 1,500 -> 15,000 days.
The absolute bound is :func:`next_due`'s ``max_interval`` (``IPR_REVISIT_MAX_SECS``).

>>> p = parse_policy("mle-mix:0.1-10:15d")
>>> s = first_access(0.0)
>>> next_interval(p, s) / DAY
15.0
>>> s = observe(s, 15 * DAY, changed=True)
>>> next_interval(p, s) / DAY   # every access changed: U/T = 0 -> alpha*mu_low*t_c
1.5
"""

from __future__ import annotations

import math

from ipr_crawl.revisit.budget import (
    NEW_EXPLORE_SECS,
    PRIOR_CHANGES,
    PRIOR_TIME,
    YOUNG_ACCESSES,
    access_rate,
    censored_count,
    change_rate,
    prior_ratio,
    young_factor,
)
from ipr_crawl.revisit.durations import DAY, format_duration, parse_duration
from ipr_crawl.revisit.httpdate import parse_http_date
from ipr_crawl.revisit.policies import (
    AimdPolicy,
    FixedPolicy,
    HarmonicPolicy,
    MlePolicy,
    Multiplier,
    NutchAdaptivePolicy,
    Policy,
)
from ipr_crawl.revisit.spec import parse_policy
from ipr_crawl.revisit.state import CHANGE_CLASSES, RevisitState, first_access, observe, update

__all__ = [
    "CHANGE_CLASSES",
    "DAY",
    "AimdPolicy",
    "FixedPolicy",
    "HarmonicPolicy",
    "Multiplier",
    "budget_weight",
    "MlePolicy",
    "NutchAdaptivePolicy",
    "Policy",
    "RevisitState",
    "access",
    "bucket",
    "earned_growth",
    "estimated_rate",
    "explored_first_revisit",
    "harmonic_interval",
    "rate_counts",
    "first_access",
    "format_duration",
    "next_due",
    "next_interval",
    "observe",
    "parse_duration",
    "parse_http_date",
    "parse_policy",
    "update",
]

#: An access at least this share of the previous chosen interval after the previous
#: access counts as on time (:func:`earned_growth`).
ON_TIME_SHARE = 0.5


def harmonic_interval(policy: HarmonicPolicy, state: RevisitState, weight: float = 1.0, host: str = "") -> float:
    """``1 / rho`` (s) for the URL's estimated change rate (:func:`estimated_rate`),
    its weight in the budget (:func:`budget_weight` of ``weight``) and the policy's
    ``nu`` (of its ``host``, :meth:`HarmonicPolicy.nu_for`)."""
    rho = access_rate(estimated_rate(state), budget_weight(state, weight), policy.nu_for(host))
    return 1 / rho if rho > 0 else math.inf


def budget_weight(state: RevisitState | None, weight: float = 1.0) -> float:
    """A URL's weight ``w`` in the budget, in its interval and in the budget's histogram
    alike: ``weight`` (``IPR_REVISIT_WEIGHT``'s) times ``state.young``, the factor
    :func:`access` set at the URL's latest access (``harmonic:…:young=K``: while the
    URL has had at most :data:`~ipr_crawl.revisit.budget.YOUNG_ACCESSES` accesses,
    :func:`~ipr_crawl.revisit.budget.young_factor` of the learned new-URL rate then;
    else 1). ``state``: None before the first access."""
    return weight if state is None else weight * state.young


def estimated_rate(state: RevisitState) -> float:
    """The URL's change rate (per s; :func:`ipr_crawl.revisit.budget.change_rate`),
    with the Last-Modified estimator when the URL sends a Last-Modified, and its prior
    times ``state.prior_scale``."""
    return change_rate(state.accesses, state.m, state.T, state.U, bool(state.last_modified), state.prior_scale,
                       state.prior_time)


def explored_first_revisit(state: RevisitState | None, explore: bool, interval: float) -> bool:
    """Whether an access ``interval`` s after the latest one (``state`` before the access)
    is the first revisit of an exploring URL (``explore``, :func:`~ipr_crawl.revisit.budget.explores_new`):
    one of the samples ``harmonic:…:new=learn`` learns a new URL's rate from
    (:func:`~ipr_crawl.revisit.budget.new_url_rate`). The crawl and revisit-sim both ask here.

    >>> explored_first_revisit(RevisitState(first=0.0, last=0.0), True, 3 * 86400.0)
    True
    >>> explored_first_revisit(None, True, 0.0), explored_first_revisit(RevisitState(0.0, 0.0, accesses=2), True, 86400.0)
    (False, False)
    """
    return explore and state is not None and state.accesses == 1 and interval > 0


def rate_counts(state: RevisitState | None) -> tuple[float, float]:
    """A URL's point in :class:`~ipr_crawl.revisit.budget.RateMoments`: ``(changes,
    observed time T s)``; ``(0, 0)`` before its first access. A crawler sees at most
    one change per access interval, so ``changes`` is the count behind the ``m``
    intervals with one (:func:`~ipr_crawl.revisit.budget.censored_count`)."""
    if state is None:
        return 0.0, 0.0
    return censored_count(state.accesses - 1, state.m), state.T


def next_interval(
    policy: Policy, state: RevisitState, changed: bool | None = None, weight: float = 1.0, host: str = ""
) -> float:
    """The interval (s) from the latest access to the next one.

    After the first access it is the policy's ``tau2``. Otherwise MLE uses Tamura & Kitsuregawa 2008's rule
    eq. 5 on ``(T, U, m, t_c,min)``; AIMD and nutch-adaptive adjust the previous
    chosen interval ``state.interval`` (or ``tau2`` if none) by whether the latest
    access saw a change (``changed``; default: inferred from ``unchanged_run``).
    """
    if isinstance(policy, HarmonicPolicy):
        return harmonic_interval(policy, state, weight, host)
    if state.accesses <= 1:
        return policy.tau2
    prev = _previous_interval(policy, state)
    if changed is None:
        changed = state.unchanged_run == 0
    if isinstance(policy, MlePolicy):
        return _mle_interval(policy, state, prev)
    if isinstance(policy, AimdPolicy):
        if changed:
            return prev * policy.r
        if policy.pair and state.unchanged_run % 2 == 1:
            return prev
        return prev + policy.d
    if isinstance(policy, NutchAdaptivePolicy):
        tau = prev * (1 - policy.dec) if changed else prev * (1 + policy.inc)
        return min(max(tau, policy.min_interval), policy.max_interval)
    if isinstance(policy, FixedPolicy):
        return policy.interval
    raise TypeError(f"not a policy: {policy!r}")


def _previous_interval(policy: Policy, state: RevisitState) -> float:
    """``tau_{i-1}``: the interval chosen at the previous access, else the latest
    observed one, else ``tau2``."""
    return state.interval if state.interval > 0 else (state.last_interval or policy.tau2)


def earned_growth(tau: float, previous: float, elapsed: float) -> float:
    """The interval (s) to use when the policy asks for ``tau`` after an access
    ``elapsed`` s after the previous one, whose chosen interval was ``previous``.

    Rule: a decrease, or any access at least ``ON_TIME_SHARE * previous`` (half the
    interval) after the previous one, keeps ``tau``; an earlier access gets only the
    share ``elapsed / (ON_TIME_SHARE * previous)`` of the increase::

        previous + (tau - previous) * elapsed / (0.5 * previous)

    Why: every policy's step (MLE's ``mu_high * tau_prev`` while no change was seen,
    AIMD's ``+d``, Nutch's ``*(1 + inc)``) is a conclusion from having watched the
    page for about ``tau_prev``; taken per access, a burst of 304s within seconds
    multiplied the interval by 10 per 304. Scaled by observed time, the interval can
    grow only as fast as the page is actually watched (MLE defaults: at most
    ``2 * (mu_high - 1) = 18`` s of interval per second observed; a 15 s burst adds
    about 4.5 minutes to 15 days), and an access without elapsed time (the same
    time bucket) adds nothing. Half, not all, of the interval counts as on time
    because due times rounded to buckets (:func:`next_due`) may come up to half a
    bucket early (never before 2/3 of the interval), and a run-once crawl fetches
    up to its horizon early; those accesses keep the policy's step exactly, so the
    paper's estimators and the simulator's results are unchanged.

    >>> earned_growth(150 * DAY, 15 * DAY, 5.0) / DAY  # 5 s of 7.5 days observed
    15.001041666666667
    >>> earned_growth(150 * DAY, 15 * DAY, 15 * DAY) / DAY, earned_growth(7 * DAY, 15 * DAY, 0.0) / DAY
    (150.0, 7.0)
    """
    if tau <= previous or elapsed >= ON_TIME_SHARE * previous:
        return tau
    return previous + (tau - previous) * (max(elapsed, 0.0) / (ON_TIME_SHARE * previous))


def _mle_interval(p: MlePolicy, s: RevisitState, prev: float) -> float:
    T, U = s.T, s.U
    if s.m == 0 or U >= T:  # U/T = 1: never changed, t_c undefined
        return p.mu_high * prev
    if p.estimator == "min":
        tc = s.tc_min
    elif p.estimator == "avg":
        tc = s.tc_avg
    else:
        tc = math.sqrt(s.tc_min * s.tc_avg)
    ratio = U / T
    if ratio < math.exp(-1.0 / p.mu_low):  # includes U = 0
        mu = p.mu_low
    elif ratio <= math.exp(-1.0 / p.mu_high):
        mu = 1.0 / math.log(T / U)
    else:
        mu = p.mu_high
    return p.alpha * mu * tc


def access(
    policy: Policy,
    state: RevisitState | None,
    now: float,
    changed: bool,
    modified_at: float | None = None,
    *,
    weight: float = 1.0,
    host: str = "",
    prior_scale: float | None = None,
    etag: str | None = None,
    last_modified: str | None = None,
    digest: str | None = None,
    explore: bool = False,
) -> tuple[RevisitState, float]:
    """One access at ``now`` (s): the first one creates the state, a later one
    updates it (:func:`update`, in place); then the policy chooses the next
    interval ``tau`` (s), bounded by :func:`earned_growth` (an increase after an
    early access only in proportion to the time observed since the previous
    access), which is remembered as ``state.interval`` (the ``tau_{i-1}`` of the
    next access). ``prior_scale`` (the URL's :meth:`~ipr_crawl.revisit.budget.RatePool.scale`)
    is kept in the state before the interval is chosen; under ``harmonic:…:prior=gamma``
    the policy's fitted prior (``policy.multiplier.prior``, the fixed one until first
    fitted) is. Under ``harmonic:…:new=learn`` a URL fetched once has the learned rate
    ``policy.multiplier.new_rate`` (kept as its ``prior_scale`` until its first revisit,
    when the scale returns to ``prior_scale``'s or 1), and with ``explore`` (the URL is
    one of :func:`~ipr_crawl.revisit.budget.explores_new`'s) its first revisit comes
    after :data:`~ipr_crawl.revisit.budget.NEW_EXPLORE_SECS`. Returns ``(state, tau)``.

    The one entry point of both the middleware and the simulator.

    >>> s, tau = access(parse_policy("aimd:1d:0.5:2d"), None, 0.0, changed=False)
    >>> tau / DAY, access(parse_policy("aimd:1d:0.5:2d"), s, 2 * DAY, changed=False)[1] / DAY
    (2.0, 3.0)
    """
    validators = {k: v for k, v in (("etag", etag), ("last_modified", last_modified), ("digest", digest)) if v is not None}
    prior_time: float | None = None
    if isinstance(policy, HarmonicPolicy) and policy.prior == "gamma":
        alpha, beta = policy.multiplier.prior or (PRIOR_CHANGES, PRIOR_TIME)
        prior_scale, prior_time = alpha / PRIOR_CHANGES, beta
    learn = isinstance(policy, HarmonicPolicy) and policy.new == "learn"
    if state is None:
        state = first_access(now, **validators)
        if prior_scale is not None:
            state.prior_scale = prior_scale
        if prior_time is not None:
            state.prior_time = prior_time
        new_rate = policy.multiplier.new_rate if learn else None  # type: ignore[union-attr]
        if new_rate is not None and new_rate > 0:
            state.prior_scale *= prior_ratio(new_rate)
        _set_young(policy, state)
        tau = next_interval(policy, state, weight=weight, host=host)
        if learn and explore:
            tau = NEW_EXPLORE_SECS
    else:
        before = state.last
        first_revisit = state.accesses == 1
        update(state, now, changed, modified_at, None, **validators)
        if prior_scale is not None:
            state.prior_scale = prior_scale
        elif learn and first_revisit and state.accesses > 1:
            state.prior_scale = 1.0
        if prior_time is not None:
            state.prior_time = prior_time
        _set_young(policy, state)
        tau = next_interval(policy, state, changed if state.accesses > 1 else None, weight, host)
        tau = earned_growth(tau, _previous_interval(policy, state), now - before)
    state.interval = tau
    return state, tau


def _set_young(policy: Policy, state: RevisitState) -> None:
    """``state.young`` after an access (:func:`budget_weight`)."""
    young = isinstance(policy, HarmonicPolicy) and policy.young > 0 and state.accesses <= YOUNG_ACCESSES
    state.young = young_factor(policy.multiplier.new_rate, policy.young) if young else 1.0  # type: ignore[union-attr]

# -- time buckets ---------------------------------------------------------------------------
def bucket(t: float, resolution: float) -> float:
    """Start of the time bucket holding ``t`` (Tamura & Kitsuregawa 2008, §3 (5): the long-term queue's
    buckets); ``t`` itself when ``resolution <= 0``."""
    if resolution <= 0:
        return t
    return math.floor(t / resolution) * resolution


def next_due(now: float, tau: float, resolution: float = 0.0, min_interval: float = 0.0, max_interval: float = 0.0) -> float:
    """Instant (s) of the next access: ``now + tau`` with ``tau`` clamped to
    ``[min_interval, max_interval]`` (0: no bound) and, with a ``resolution``,
    rounded to whole buckets (at least one) counted from ``now``'s bucket.

    >>> next_due(10 * DAY + 3600, 1.4 * DAY, DAY) / DAY
    11.0
    """
    if min_interval > 0:
        tau = max(tau, min_interval)
    if max_interval > 0:
        tau = min(tau, max_interval)
    if resolution <= 0:
        return now + tau
    steps = max(1, math.floor(tau / resolution + 0.5))
    return bucket(now, resolution) + steps * resolution
