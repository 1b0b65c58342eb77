"""Revisit policy: per-URL change state and the next-access estimators.

Pure logic, no Scrapy or Redis imports: the downloader middleware
(:mod:`ipr_crawl.middlewares.conditional`) and the change-log simulator
(:mod:`ipr_crawl.evaluation.revisit_sim`) drive the SAME functions below. Every time is in
seconds (POSIX seconds for instants); intervals are seconds.

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
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ipr_crawl.revisit.budget import (
    NEW_EXPLORE_SECS,
    PRIOR_CHANGES,
    PRIOR_TIME,
    YEAR,
    YOUNG_ACCESSES,
    Budget,
    access_rate,
    censored_count,
    change_rate,
    parse_budget,
    prior_ratio,
    young_factor,
)

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

DAY = 86400.0

#: An access at least this share of the previous chosen interval after the previous
#: access counts as on time (:func:`earned_growth`).
ON_TIME_SHARE = 0.5

#: Classification of one access (Tamura & Kitsuregawa 2008, §3 (3)); ``new`` is the first access.
CHANGE_CLASSES = ("new", "changed", "unchanged", "not_modified")


@dataclass
class RevisitState:
    """What is kept per URL (Tamura & Kitsuregawa 2008, §4.1.1): a few numbers, not the history.

    ``first`` and ``last`` are the instants of the first and the latest access
    (s); ``T = last - first``. ``U`` (s) sums the intervals without a detected
    change (plus, by the Last-Modified rule, the part of a changed interval after
    the Last-Modified time). ``m`` counts intervals with a change, ``tc_min`` (s)
    is the shortest of them (``inf`` while ``m == 0``). ``last_interval`` (s) is
    the latest observed access interval, ``interval`` (s) the latest interval
    the policy chose (``tau_{i-1}``), ``accesses`` counts accesses (first
    included), ``unchanged_run`` the unchanged accesses in a row. ``etag`` and
    ``last_modified`` are the validators as received (RFC 9110 §8.8), ``digest``
    the content hash of the latest version. ``prior_scale`` is the factor on the rate
    estimate's prior at the latest access (the URL's directory,
    :class:`~ipr_crawl.revisit.budget.RatePool`; 1 without pooling); with
    ``prior=gamma`` (``prior_time`` > 0, s) the fitted Gamma prior (α = ``prior_scale``
    × 0.5, β = ``prior_time``; :func:`~ipr_crawl.revisit.budget.fit_gamma_prior`) at the
    latest access. ``young`` is the factor on the URL's weight in the budget at the
    latest access (``harmonic:…:young=K``, :func:`budget_weight`; 1 otherwise). The rate
    and the weight the URL was binned at can be computed again from the state alone.
    """

    first: float
    last: float
    U: float = 0.0
    m: int = 0
    tc_min: float = math.inf
    last_interval: float = 0.0
    interval: float = 0.0
    accesses: int = 1
    unchanged_run: int = 0
    etag: str = ""
    last_modified: str = ""
    digest: str = ""
    prior_scale: float = 1.0
    prior_time: float = 0.0
    young: float = 1.0

    @property
    def T(self) -> float:
        """Time since the first access (s)."""
        return self.last - self.first

    @property
    def tc_avg(self) -> float:
        """Mean interval with a change, ``(T - U) / m`` (s); ``inf`` while ``m == 0``."""
        return (self.T - self.U) / self.m if self.m else math.inf

    def to_list(self) -> list[object]:
        """Compact list form (for msgpack); inverse of :meth:`from_list`. The trailing
        ``prior_scale``, ``prior_time`` and ``young`` are written only up to the last one
        that is not its default (1, 0, 1), so that a state without them stays readable
        by versions before them (a rolling upgrade)."""
        out: list[object] = [
            self.first, self.last, self.U, self.m,
            None if math.isinf(self.tc_min) else self.tc_min,
            self.last_interval, self.interval, self.accesses, self.unchanged_run,
            self.etag, self.last_modified, self.digest,
        ]
        tail, defaults = [self.prior_scale, self.prior_time, self.young], (1.0, 0.0, 1.0)
        while tail and tail[-1] == defaults[len(tail) - 1]:
            tail.pop()
        return out + tail

    @classmethod
    def from_list(cls, data: list[Any]) -> RevisitState:
        """Rebuild from :meth:`to_list` (12 fields, as written before ``prior_scale``, 13,
        14 with ``prior_time`` or 15 with ``young``); raises :class:`ValueError` on a
        malformed list."""
        if not isinstance(data, (list, tuple)) or len(data) not in (12, 13, 14, 15):
            raise ValueError("revisit state: expected a list of 12 to 15 fields")
        (first, last, u, m, tc_min, last_interval, interval, accesses, run, etag, lm, digest) = data[:12]
        try:
            scale = float(data[12]) if len(data) >= 13 else 1.0
        except (TypeError, ValueError):
            scale = math.nan
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"revisit state: prior scale {data[12]!r} is not a positive number")
        try:
            prior_time = float(data[13]) if len(data) >= 14 else 0.0
        except (TypeError, ValueError):
            prior_time = math.nan
        if not math.isfinite(prior_time) or prior_time < 0:
            raise ValueError(f"revisit state: prior time {data[13]!r} is not a number >= 0")
        try:
            young = float(data[14]) if len(data) == 15 else 1.0
        except (TypeError, ValueError):
            young = math.nan
        if not math.isfinite(young) or young < 1:
            raise ValueError(f"revisit state: young factor {data[14]!r} is not a number >= 1")
        return cls(
            first=float(first), last=float(last), U=float(u), m=int(m),
            tc_min=math.inf if tc_min is None else float(tc_min),
            last_interval=float(last_interval), interval=float(interval),
            accesses=int(accesses), unchanged_run=int(run),
            etag=str(etag), last_modified=str(lm), digest=str(digest), prior_scale=scale,
            prior_time=prior_time, young=young,
        )


# -- policies ------------------------------------------------------------------------
@dataclass(frozen=True)
class MlePolicy:
    """MLE.min / MLE.avg / MLE.mix of Tamura & Kitsuregawa 2008, §4.1 (eq. 5). Times in seconds."""

    estimator: str = "mix"  # "min" | "avg" | "mix"
    mu_low: float = 0.1
    mu_high: float = 10.0
    tau2: float = 15 * DAY
    alpha: float = 1.0
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class AimdPolicy:
    """AIMD of Tamura & Kitsuregawa 2008, §4.2 (eq. 6): ``+d`` unchanged, ``*r`` changed; ``pair``: ``+d``
    only after two unchanged accesses in a row. ``tau2`` is the first interval."""

    d: float = DAY
    r: float = 0.5
    tau2: float = 15 * DAY
    pair: bool = False
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class NutchAdaptivePolicy:
    """Apache Nutch ``AdaptiveFetchSchedule``: ``*(1+inc)`` unchanged, ``*(1-dec)``
    changed, clamped to ``[min_interval, max_interval]``; ``tau2`` is Nutch's
    ``db.fetch.interval.default`` (30 days)."""

    inc: float = 0.4
    dec: float = 0.2
    min_interval: float = 60.0
    max_interval: float = 365 * DAY
    tau2: float = 30 * DAY
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class FixedPolicy:
    """The same interval every time (``tau2`` equals it)."""

    interval: float = 7 * DAY
    name: str = field(default="", compare=False)

    @property
    def tau2(self) -> float:
        return self.interval


class Multiplier:
    """The budget's Lagrange multiplier ``nu``, shared by every URL of a crawl and set
    by whoever solves it (the refresher, the simulator); None until first solved."""

    def __init__(self, nu: float | None = None) -> None:
        self.nu = nu
        #: hosts held at their politeness cap: their own multiplier (>= nu), by host
        #: label (:func:`ipr_crawl.revisit.budget.solve_nu_hosts`)
        self.host_nu: dict[str, float] = {}
        #: ``prior=gamma``: the fitted prior (α, β s), None until first fitted
        #: (:func:`ipr_crawl.revisit.budget.fit_gamma_prior`)
        self.prior: tuple[float, float] | None = None
        #: ``new=learn``: the change rate (per s) of a URL fetched once, learned from the
        #: explored first revisits (:func:`ipr_crawl.revisit.budget.new_url_rate`); None
        #: until learned
        self.new_rate: float | None = None


@dataclass(frozen=True)
class HarmonicPolicy:
    """Revisits under a budget (:mod:`ipr_crawl.revisit.budget`; Kolobov, Peres, Lu &
    Horvitz 2019): the next interval is ``1 / rho`` for the URL's estimated change
    rate and weight and the crawl's multiplier ``multiplier.nu``. Until ``nu`` is
    first solved, every URL is taken at the prior rate and the budget split evenly
    (``N/y``: one visit every year/N; ``N/d``: ``tau2``). ``pool``: ``off`` (the
    default), or ``directory``: the rate estimate's prior is scaled by what the URL's
    directory has shown (:class:`~ipr_crawl.revisit.budget.RatePool`). ``prior``:
    ``fixed`` (the default: 0.5 changes in 90 d, Cho & Garcia-Molina's estimator), or
    ``gamma``: the prior fitted to the crawl's own observations and the Gamma
    posterior mean (:func:`~ipr_crawl.revisit.budget.fit_gamma_prior`; ``multiplier.prior``).
    ``new``: ``prior`` (the default: a URL fetched once has the prior rate), or ``learn``:
    the rate of a URL fetched once is learned from the first revisits of a stable share
    of new URLs, which come after 3 days (:func:`~ipr_crawl.revisit.budget.explores_new`,
    :func:`~ipr_crawl.revisit.budget.new_url_rate`; ``multiplier.new_rate``). ``young``
    (with ``new=learn``): the exponent ``K`` of :func:`~ipr_crawl.revisit.budget.young_factor`,
    the factor on the weight of a URL with at most
    :data:`~ipr_crawl.revisit.budget.YOUNG_ACCESSES` accesses (:func:`budget_weight`); 0: none."""

    budget: Budget
    tau2: float = 15 * DAY
    pool: str = "off"
    prior: str = "fixed"
    new: str = "prior"
    young: float = 0.0
    multiplier: Multiplier = field(default_factory=Multiplier, compare=False)
    name: str = field(default="", compare=False)

    def initial_nu(self) -> float:
        """``nu`` at which a URL of the prior rate and weight 1 gets the even share."""
        lam = PRIOR_CHANGES / PRIOR_TIME
        rho = self.budget.amount / YEAR if self.budget.per == "y" else 1 / self.tau2
        return lam / (rho * (rho + lam))

    @property
    def nu(self) -> float:
        return self.multiplier.nu if self.multiplier.nu is not None else self.initial_nu()

    def nu_for(self, host: str = "") -> float:
        """``nu`` of a URL of ``host``: its host's own when the host is held at its
        politeness cap, else the crawl's."""
        return self.multiplier.host_nu.get(host, self.nu) if host else self.nu


Policy = MlePolicy | AimdPolicy | NutchAdaptivePolicy | FixedPolicy | HarmonicPolicy

# -- durations and specs ---------------------------------------------------------------
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, "y": 365 * DAY}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?\s*([smhdwy]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``15d``, ``12h``, ``90m``, ``30s``, ``2w``, ``1y``
    (365 d); a bare number is seconds.

    >>> parse_duration("15d"), parse_duration("1.5h"), parse_duration("60")
    (1296000.0, 5400.0, 60.0)

    Raises :class:`ValueError` on anything else or a negative/non-finite value.
    """
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 15d, 12h, 30m, 45s, 2w)")
    number = float(str(text).strip().rstrip("smhdwySMHDWY").strip())
    value = number * _UNITS[m.group(2).lower() or "s"]
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite duration")
    return value


def format_duration(seconds: float) -> str:
    """Shortest exact form among d, h, m, s (``1296000`` -> ``15d``).

    >>> format_duration(1296000.0), format_duration(5400.0)
    ('15d', '90m')
    """
    for unit in ("d", "h", "m"):
        q = seconds / _UNITS[unit]
        if q == int(q) and q != 0:
            return f"{int(q)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds!r}s"


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{what}: {text!r} is not finite")
    return value


def parse_policy(spec: str) -> Policy:
    """Parse a policy spec (the grammar of ``IPR_REVISIT_POLICY`` and ``--policies``).

    - ``mle-min|mle-avg|mle-mix[:MU_LOW-MU_HIGH][:TAU2][:xALPHA]``; defaults
      ``0.1-10``, ``15d``, ``x1`` (the setting Tamura & Kitsuregawa 2008 deployed).
    - ``aimd[:D][:R][:TAU2][:pair]``; defaults ``1d``, ``0.5``, ``15d``.
    - ``nutch-adaptive[:INC][:DEC][:MIN][:MAX][:TAU2]``; defaults ``0.4``,
      ``0.2``, ``60s``, ``365d``, ``30d`` (Nutch's).
    - ``fixed:INTERVAL``.
    - ``harmonic[:BUDGET][:pool=off|directory][:prior=fixed|gamma][:new=prior|learn][:young=K]``:
      revisits under a budget, ``N/y`` (per URL per year) or ``N/d`` (per day for the
      whole crawl); default ``4/y``; with ``pool=directory`` the rate prior pooled per
      directory, with ``prior=gamma`` fitted to the crawl's observations (not both);
      with ``new=learn`` the rate of a URL fetched once learned from early first
      revisits (not with ``prior=gamma``), and with ``young=K`` (``K >= 0``, needs
      ``new=learn``) a young URL's weight raised by that learned rate
      (:class:`HarmonicPolicy`).

    Optional fields may also be given as ``key=value`` (``mu``, ``tau2``,
    ``alpha``, ``d``, ``r``, ``inc``, ``dec``, ``min``, ``max``).
    Bounds: ``0 < mu_low < mu_high``, ``0 < alpha <= 1``, ``d > 0``,
    ``0 < r < 1``, ``inc > 0``, ``0 < dec < 1``, ``0 < min <= max``, intervals > 0.

    >>> parse_policy("mle-mix:0.1-10:15d")
    MlePolicy(estimator='mix', mu_low=0.1, mu_high=10.0, tau2=1296000.0, alpha=1.0, name='mle-mix:0.1-10:15d')
    >>> parse_policy("aimd:1d:0.5:pair").pair
    True

    Raises :class:`ValueError` saying what is wrong.
    """
    raw = str(spec).strip()
    head, *fields = [f.strip() for f in raw.split(":")]
    head = head.lower()
    kv: dict[str, str] = {}
    pos: list[str] = []
    for f in fields:
        if not f:
            raise ValueError(f"policy {raw!r}: empty field")
        if "=" in f:
            k, _, v = f.partition("=")
            kv[k.strip().lower()] = v.strip()
        else:
            pos.append(f)
    try:
        policy = _build(head, pos, kv, raw)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith("policy ") else f"policy {raw!r}: {msg}") from None
    return policy


def _build(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    def take_kv(allowed: set[str]) -> None:
        extra = set(kv) - allowed
        if extra:
            raise ValueError(f"unknown key(s) {sorted(extra)}; allowed {sorted(allowed)}")

    if head in ("mle-min", "mle-avg", "mle-mix"):
        take_kv({"mu", "tau2", "alpha"})
        mu, tau2, alpha = kv.get("mu"), kv.get("tau2"), kv.get("alpha")
        for f in pos:
            if f.lower().startswith("x"):
                alpha = f[1:]
            elif "-" in f:
                mu = f
            else:
                tau2 = f
        mu_low, mu_high = 0.1, 10.0
        if mu is not None:
            lo, sep, hi = mu.partition("-")
            if not sep:
                raise ValueError(f"mu range {mu!r}: use MU_LOW-MU_HIGH, e.g. 0.1-10")
            mu_low, mu_high = _number(lo, "mu_low"), _number(hi, "mu_high")
        if not 0 < mu_low < mu_high:
            raise ValueError(f"need 0 < mu_low < mu_high, got {mu_low}-{mu_high}")
        a = 1.0 if alpha is None else _number(alpha, "alpha")
        if not 0 < a <= 1:
            raise ValueError(f"need 0 < alpha <= 1, got {a}")
        t2 = 15 * DAY if tau2 is None else parse_duration(tau2)
        if t2 <= 0:
            raise ValueError("tau2 must be > 0")
        return MlePolicy(head[4:], mu_low, mu_high, t2, a, name=raw)
    if head == "aimd":
        take_kv({"d", "r", "tau2"})
        pair = False
        durations: list[str] = []
        r = kv.get("r")
        for f in pos:
            if f.lower() == "pair":
                pair = True
            elif _DURATION.match(f) and f[-1:].isalpha():
                durations.append(f)
            elif r is None:
                r = f
            else:
                raise ValueError(f"unexpected field {f!r}")
        d = parse_duration(kv.get("d") or (durations[0] if durations else "1d"))
        t2 = parse_duration(kv.get("tau2") or (durations[1] if len(durations) > 1 else "15d"))
        rv = 0.5 if r is None else _number(r, "r")
        if d <= 0 or t2 <= 0:
            raise ValueError("d and tau2 must be > 0")
        if not 0 < rv < 1:
            raise ValueError(f"need 0 < r < 1, got {rv}")
        return AimdPolicy(d, rv, t2, pair, name=raw)
    if head == "nutch-adaptive":
        take_kv({"inc", "dec", "min", "max", "tau2"})
        nums = [f for f in pos if not f[-1:].isalpha()]
        durs = [f for f in pos if f[-1:].isalpha()]
        inc = _number(kv.get("inc") or (nums[0] if nums else "0.4"), "inc")
        dec = _number(kv.get("dec") or (nums[1] if len(nums) > 1 else "0.2"), "dec")
        if len(nums) > 2:
            raise ValueError("nutch-adaptive takes INC, DEC, then durations MIN, MAX, TAU2")
        shortest = parse_duration(kv.get("min") or (durs[0] if durs else "60s"))
        longest = parse_duration(kv.get("max") or (durs[1] if len(durs) > 1 else "365d"))
        t2 = parse_duration(kv.get("tau2") or (durs[2] if len(durs) > 2 else "30d"))
        if not inc > 0:
            raise ValueError(f"need inc > 0, got {inc}")
        if not 0 < dec < 1:
            raise ValueError(f"need 0 < dec < 1, got {dec}")
        if not 0 < shortest <= longest or t2 <= 0:
            raise ValueError("need 0 < min <= max and tau2 > 0")
        return NutchAdaptivePolicy(inc, dec, shortest, longest, t2, name=raw)
    if head == "harmonic":
        take_kv({"tau2", "pool", "prior", "new", "young"})
        if len(pos) > 1:
            raise ValueError("harmonic takes one budget, N/d or N/y (e.g. harmonic:8/y)")
        budget = parse_budget(pos[0] if pos else "4/y")
        t2 = parse_duration(kv.get("tau2", "15d"))
        if t2 <= 0:
            raise ValueError("tau2 must be > 0")
        pool = kv.get("pool", "off").lower()
        if pool not in ("directory", "off"):
            raise ValueError(f"pool={pool!r}: allowed directory, off")
        prior = kv.get("prior", "fixed").lower()
        if prior not in ("fixed", "gamma"):
            raise ValueError(f"prior={prior!r}: allowed fixed, gamma")
        if prior == "gamma" and pool != "off":
            raise ValueError("harmonic: pool=directory and prior=gamma are two priors; give one")
        new = kv.get("new", "prior").lower()
        if new not in ("prior", "learn"):
            raise ValueError(f"new={new!r}: allowed prior, learn")
        if new == "learn" and prior == "gamma":
            raise ValueError("harmonic: new=learn and prior=gamma both set a new URL's rate; give one")
        young = _number(kv.get("young", "0"), "young")
        if not 0 <= young <= 4:
            raise ValueError(f"young={young:g}: need 0 <= young <= 4 (the exponent on the learned rate's ratio)")
        if young > 0 and new != "learn":
            raise ValueError("harmonic: young=K weighs young URLs by the learned new-URL rate; it needs new=learn")
        return HarmonicPolicy(budget, t2, pool, prior, new, young, name=raw)
    if head == "fixed":
        take_kv({"tau2"})
        if len(pos) != 1:
            raise ValueError("fixed takes exactly one interval, e.g. fixed:7d")
        value = parse_duration(pos[0])
        if value <= 0:
            raise ValueError("the interval must be > 0")
        return FixedPolicy(value, name=raw)
    raise ValueError(
        f"policy {raw!r}: unknown estimator {head!r}; allowed mle-min, mle-avg, mle-mix, "
        "aimd, nutch-adaptive, fixed, harmonic"
    )


# -- state updates -----------------------------------------------------------------------
def first_access(now: float, etag: str = "", last_modified: str = "", digest: str = "") -> RevisitState:
    """The state after the first access at ``now`` (s)."""
    return RevisitState(first=now, last=now, etag=etag, last_modified=last_modified, digest=digest)


def observe(
    state: RevisitState,
    now: float,
    changed: bool,
    modified_at: float | None = None,
    interval: float | None = None,
    **validators: str,
) -> RevisitState:
    """The state after an access at ``now`` (s) that did (not) detect a change.

    ``modified_at`` is the Last-Modified instant (s) when the response had one
    (Tamura & Kitsuregawa 2008, §4.1.3): if it lies inside ``(previous access, now]`` the changed
    interval is ``modified_at - previous`` and ``now - modified_at`` counts into
    ``U``; otherwise the whole interval is the changed interval.
    ``interval`` (s) is the interval the policy chose before this access
    (``tau_{i-1}``); ``validators`` may set ``etag``, ``last_modified``, ``digest``.
    An access at or before the previous one only updates the validators.
    ``state`` is not modified (see :func:`update` for the in-place form).
    """
    return update(replace(state), now, changed, modified_at, interval, **validators)


def update(
    state: RevisitState,
    now: float,
    changed: bool,
    modified_at: float | None = None,
    interval: float | None = None,
    **validators: str,
) -> RevisitState:
    """:func:`observe` in place (the simulator's inner loop); returns ``state``."""
    for key, value in validators.items():
        setattr(state, key, value)
    prev = state.last
    dt = now - prev
    if dt <= 0:
        return state
    state.last = now
    state.last_interval = dt
    state.accesses += 1
    if interval is not None:
        state.interval = interval
    if changed:
        tc = dt
        if modified_at is not None and prev < modified_at <= now:
            tc = modified_at - prev
            state.U += now - modified_at
        state.m += 1
        state.tc_min = min(state.tc_min, tc)
        state.unchanged_run = 0
    else:
        state.U += dt
        state.unchanged_run += 1
    return state


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


def parse_http_date(value: str | bytes | None) -> float | None:
    """POSIX seconds of an HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete
    RFC 850 and asctime forms), or None when absent or unparsable.

    >>> parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT")
    (784111777.0, 784111777.0)
    """
    from email.utils import mktime_tz, parsedate_tz

    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    try:
        parts = parsedate_tz(value.strip())
        return float(mktime_tz(parts)) if parts else None
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


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
