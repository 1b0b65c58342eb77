"""The revisit policies' parameters: one frozen record per kind (MLE, AIMD, Nutch
adaptive, fixed, harmonic) and the budget's shared multiplier.

Pure data; times in seconds. A spec string becomes one of these through
:func:`ipr_crawl.revisit.spec.parse_policy`; the intervals they give are chosen by
:func:`ipr_crawl.revisit.policy.next_interval` and :func:`~ipr_crawl.revisit.policy.access`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ipr_crawl.revisit.budget import PRIOR_CHANGES, PRIOR_TIME, YEAR, Budget
from ipr_crawl.revisit.durations import DAY

__all__ = ["AimdPolicy", "FixedPolicy", "HarmonicPolicy", "MlePolicy", "Multiplier", "NutchAdaptivePolicy", "Policy"]


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
