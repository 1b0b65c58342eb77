"""The refresher: moves due revisits into the frontier and decides how long a
crawl with revisits stays open (Tamura & Kitsuregawa 2008, §3 (6)).

:class:`IprScheduler` owns one :class:`Refresher` when ``IPR_REVISIT_ENABLED``:
it calls :meth:`Refresher.refresh` before each lease batch (due URLs go to the
forced queue, served before the frontier) and :meth:`Refresher.keeps_open` when
the frontier is empty. The crawl's lifetime is ``IPR_REVISIT_MODE``:

- ``run-once``: the URLs due when the crawl starts (or within
  ``IPR_REVISIT_HORIZON_SECS`` after it: a daily cron job can take what falls due
  before its next run) are fetched, together with whatever is discovered; then
  the crawl closes (for cron and scrapyd schedules).
- ``continuous``: the crawl stays open while a revisit is scheduled (within
  ``IPR_REVISIT_HORIZON_SECS`` when set, and not after ``IPR_REVISIT_UNTIL``);
  the engine's 5-second heartbeat asks for requests, so a due URL goes out at
  most a few seconds late.

The clock is the system clock, or for simulations a *virtual* clock
(``IPR_REVISIT_CLOCK = "virtual:<start>"``): it stands still while requests are
pending and jumps to the next due time when the crawl is idle, so a simulated
year takes as long as its fetches. Requests then carry the virtual time in the
``Ipr-Sim-Time`` header (``ipr-crawl serve-changes`` answers as of that time).
One process per crawl with a virtual clock.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from ipr_crawl.config import RevisitConfig
from ipr_crawl.revisit.budget import (
    RateHistogram,
    RatePool,
    fit_gamma_prior,
    new_url_rate,
    next_gain,
    solve_nu,
    solve_nu_hosts,
)
from ipr_crawl.revisit.policy import FixedPolicy, HarmonicPolicy
from ipr_crawl.store.revisit import RevisitStore

__all__ = ["SIM_TIME_HEADER", "Clock", "Refresher", "SystemClock", "VirtualClock"]

logger = logging.getLogger(__name__)

#: Request header carrying the virtual time (s since the epoch) of a simulated crawl.
SIM_TIME_HEADER = "Ipr-Sim-Time"


class Clock(Protocol):
    """A clock of the refresher: ``now()`` in s since the epoch; ``virtual`` for simulations."""

    virtual: bool

    def now(self) -> float: ...


class SystemClock:
    """``time.time()``."""

    virtual = False

    def now(self) -> float:
        return time.time()


class VirtualClock:
    """A clock that only moves when told to (:meth:`advance_to`)."""

    virtual = True

    def __init__(self, start: float) -> None:
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        self.t = max(self.t, float(t))


class _Frontier(Protocol):
    def pending(self) -> int: ...

    def node_score(self, id_: bytes) -> float | None: ...

    def node_state(self, id_: bytes) -> int | None: ...

    def mean_score(self, sample: int = 1000) -> float: ...


def _shortest_interval(policy: object) -> float:
    """The shortest interval a policy spec names (tau_2, fixed interval, AIMD step)."""
    values = [getattr(policy, name) for name in ("tau2", "interval", "d") if hasattr(policy, name)]
    return min(values) if values else float("inf")


class Refresher:
    """Due revisits -> forced queue, and the crawl-lifetime rule (module doc)."""

    def __init__(self, store: RevisitStore, frontier: _Frontier, cfg: RevisitConfig) -> None:
        self.store = store
        self.frontier = frontier
        self.cfg = cfg
        self.clock: SystemClock | VirtualClock
        if cfg.virtual_start is not None:
            stored = store.clock()
            self.clock = VirtualClock(max(cfg.virtual_start, stored or cfg.virtual_start))
        else:
            self.clock = SystemClock()
        #: run-once: what was due when the crawl opened
        self.opened_at = self.clock.now()
        if isinstance(cfg.policy, HarmonicPolicy):  # the budget's account starts here (_budget_account)
            store.set_budget_start(self.opened_at)
        floor = cfg.min_interval
        if floor > 0 and _shortest_interval(cfg.policy) < floor:
            logger.warning(
                "ipr-crawl: IPR_REVISIT_POLICY=%s asks for intervals below IPR_REVISIT_MIN_SECS=%g; "
                "they are raised to %g s", cfg.policy.name, floor, floor,
            )
        if cfg.max_interval > 0:
            pulled = store.clamp_due(self.opened_at + cfg.max_interval)
            if pulled:
                logger.info(
                    "ipr-crawl: %d revisits were scheduled later than IPR_REVISIT_MAX_SECS=%g s from now "
                    "(by an earlier version or setting); moved to that bound", pulled, cfg.max_interval,
                )
        if cfg.max_interval > 0 and isinstance(cfg.policy, FixedPolicy) and cfg.policy.interval > cfg.max_interval:
            logger.warning(
                "ipr-crawl: IPR_REVISIT_POLICY=%s asks for intervals above IPR_REVISIT_MAX_SECS=%g; "
                "they are lowered to %g s (set IPR_REVISIT_MAX_SECS=0 for no bound)",
                cfg.policy.name, cfg.max_interval, cfg.max_interval,
            )
        self._last_refresh = -1e18
        self._last_solve = -1e18
        self._mean_score: float | None = None
        self._mean_at = -1e18
        self._pool: RatePool | None = None
        self._pool_at = -1e18
        self._swept = False
        self.moved = 0
        #: revisits per day the per-host caps left unplaced at the last solve
        self.unplaced_per_day = 0.0
        self._capped_logged = False

    def _cutoff(self, now: float) -> float:
        t = self.opened_at + self.cfg.horizon if self.cfg.mode == "run-once" else now
        return min(t, self.cfg.until) if self.cfg.until is not None else t

    def node_score(self, id_: bytes) -> float | None:
        """The ordering's score of node ``id_`` (:meth:`FrontierStore.node_score`)."""
        return self.frontier.node_score(id_)

    def mean_score(self) -> float:
        """The crawl's mean node score (:meth:`FrontierStore.mean_score`), sampled again
        at most once per ``IPR_REVISIT_BUDGET_REFRESH_SECS``; 0 if unknown."""
        now = self.clock.now()
        if self._mean_score is None or now - self._mean_at >= self.cfg.budget_refresh_secs:
            self._mean_score = self.frontier.mean_score()
            self._mean_at = now
        return self._mean_score

    def rate_pool(self) -> RatePool | None:
        """``harmonic`` with ``pool=directory``: the crawl's changes and exposure per
        directory (:meth:`RevisitStore.rate_pool`, all processes' accesses), read again at
        most once per ``IPR_REVISIT_BUDGET_REFRESH_SECS``; between reads this process adds
        its own accesses to it. None for another policy or ``pool=off``."""
        policy = self.cfg.policy
        if not isinstance(policy, HarmonicPolicy) or policy.pool != "directory":
            return None
        now = self.clock.now()
        if self._pool is None or now - self._pool_at >= self.cfg.budget_refresh_secs:
            self._pool = self._pool or RatePool()
            self._pool.load(self.store.rate_pool())
            self._pool_at = now
        return self._pool

    def budget_headroom(self) -> float | None:
        """``harmonic``: the accesses the budget has allowed so far (since the first
        solve, as the spend control counts them, up to now) less those made; None for
        another policy or before the first solve."""
        if not isinstance(self.cfg.policy, HarmonicPolicy):
            return None
        st = self.store.budget_state()
        if "t" not in st:
            return None
        allowed, spent = _budget_account(st, self.store.budget_accesses(), self.clock.now(), st.get("rate", 0.0))
        return allowed - spent

    def solve_budget(self, force: bool = False) -> float | None:
        """``harmonic`` policy: solve the budget's multiplier ``nu`` again from the
        crawl's rate histogram (at most every ``IPR_REVISIT_BUDGET_REFRESH_SECS`` of the
        crawl's clock, unless ``force``) and give it to the policy; returns ``nu``, or
        None (another policy, too soon, or no URL in the histogram yet)."""
        policy = self.cfg.policy
        if not isinstance(policy, HarmonicPolicy):
            return None
        now = self.clock.now()
        if not force and now - self._last_solve < self.cfg.budget_refresh_secs:
            return None
        self._last_solve = now
        store = self.store
        virtual = isinstance(self.clock, VirtualClock)  # one process per crawl
        if not virtual and not store.claim_budget_solve(int(self.cfg.budget_refresh_secs * 900)):
            st = store.budget_state()  # another process solved it this period
            shared = st.get("nu")
            if shared:
                policy.multiplier.nu = shared
                policy.multiplier.host_nu = store.host_multipliers()
            if st.get("prior_beta"):
                policy.multiplier.prior = (st["prior_alpha"], st["prior_beta"])
            if st.get("new_rate"):
                policy.multiplier.new_rate = st["new_rate"]
            return shared
        by_host = store.rate_histogram_by_host() if self.cfg.host_delay > 0 else {}
        hist = RateHistogram()
        hist.counts = store.rate_histogram() if not by_host else {}
        for bins in by_host.values():
            for key, count in bins.items():
                hist.counts[key] = hist.counts.get(key, 0) + count
        urls = len(hist)
        if not urls:
            return None
        # Spend control (revisit.budget.next_gain): the accesses the budget allowed
        # since the first solve against those made scale the next rate, so that URLs
        # that cannot spend their share do not leave the budget unspent.
        # revisit_sim.simulate_budget does the same.
        st = store.budget_state()
        accesses = store.budget_accesses()
        rate = policy.budget.total_rate(urls)
        allowed, spent = _budget_account(st, accesses, now, rate)
        gain = next_gain(allowed, spent)
        if by_host:
            nu = self._solve_hosts(by_host, rate, gain)
        else:
            nu = solve_nu(hist.groups(), rate * gain)
        fields = {"t": now, "rate": rate, "allowed": allowed, "nu": nu, "gain": gain}
        if policy.prior == "gamma":  # the rate prior fitted to what the crawl has seen
            prior = fit_gamma_prior(store.rate_moments())
            if prior is not None:
                logger.log(logging.INFO if policy.multiplier.prior is None else logging.DEBUG,
                           "ipr-crawl: revisit rate prior fitted to the crawl: alpha %.3g, beta %.1f d "
                           "(mean rate %.3g changes/day)", prior[0], prior[1] / 86400, prior[0] / prior[1] * 86400)
                policy.multiplier.prior = prior
                fields["prior_alpha"], fields["prior_beta"] = prior
        if policy.new == "learn":  # the rate of a URL fetched once, from the explored first revisits
            counts = store.new_url_counts()
            new_rate = new_url_rate(*counts)
            if new_rate is not None:
                logger.log(logging.INFO if policy.multiplier.new_rate is None else logging.DEBUG,
                           "ipr-crawl: a new URL's change rate learned from %d early first revisits (%d saw a "
                           "change): %.3g changes/day", counts[0], counts[1], new_rate * 86400)
                policy.multiplier.new_rate = new_rate
                fields["new_rate"] = new_rate
        if "accesses0" not in st:
            fields["accesses0"] = 0.0 if "t0" in st else accesses
        store.set_budget_state(**fields)
        first = policy.multiplier.nu is None
        policy.multiplier.nu = nu
        if first:
            logger.info(
                "ipr-crawl: revisit budget %s over %d URLs: %.1f revisits/day in all (nu = %.3g)",
                policy.budget, urls, policy.budget.total_rate(urls) * 86400, nu,
            )
        return nu

    def _solve_hosts(self, by_host: dict[str, dict[tuple[int, int], int]], total_rate: float, gain: float) -> float:
        """The budget split under per-host politeness (``DOWNLOAD_DELAY`` > 0): no host's
        URLs get more than one revisit per delay (:func:`~ipr_crawl.revisit.budget.solve_nu_hosts`);
        the hosts held at that cap get their own multiplier (kept in ``meta`` for the
        other processes). What no host can take is logged and counted
        (``ipr/revisit/unplaced_per_day``: of ``total_rate``, the budget itself; the
        solve is for ``total_rate × gain``, the spend control's). Returns the crawl's ``nu``."""
        policy = self.cfg.policy
        groups = {}
        for label, bins in by_host.items():
            h = RateHistogram()
            h.counts = dict(bins)
            groups[label] = h.groups()
        sol = solve_nu_hosts(groups, total_rate * gain, 1.0 / self.cfg.host_delay)
        policy.multiplier.host_nu = sol.host_nu
        self.store.set_host_multipliers(sol.host_nu)
        self.unplaced_per_day = max(0.0, total_rate - (total_rate * gain - sol.unplaced)) * 86400
        if sol.host_nu and (sol.unplaced > 0 or not self._capped_logged):
            self._capped_logged = True
            logger.log(
                logging.WARNING if sol.unplaced > 0 else logging.INFO,
                "ipr-crawl: revisit budget: %d of %d hosts held at one revisit per %g s "
                "(IPR_REVISIT_HOST_DELAY_SECS, default DOWNLOAD_DELAY); %.2f revisits/day of the budget "
                "cannot be placed", len(sol.host_nu), len(groups),
                self.cfg.host_delay, self.unplaced_per_day,
            )
        return sol.nu

    def refresh(self) -> int:
        """Move the URLs due now into the forced queue; with a virtual clock and
        nothing pending, first jump to the next due time. ``run-once`` sweeps
        once, at its first call, so a URL is revisited at most once per run.
        Returns URLs moved.

        The budget's multiplier is solved again here (:meth:`solve_budget`); with a
        virtual clock, only right after a jump: the clock moves only then, when nothing
        is in flight, so every access of the instant before has been recorded and the
        solve does not depend on the order in which responses arrived."""
        virtual = isinstance(self.clock, VirtualClock)
        if not virtual or self.cfg.mode == "run-once":
            self.solve_budget()
        if self.cfg.mode == "run-once":
            return self._sweep()
        now = self.clock.now()
        if not virtual and now - self._last_refresh < self.cfg.refresh_secs:
            return 0
        self._last_refresh = now
        cfg = self.cfg
        moved, earliest = self.store.refresh(self._cutoff(now), cfg.refresh_batch_size, now + cfg.retry_secs, now)
        if (
            virtual
            and not moved
            and cfg.mode == "continuous"
            and earliest is not None
            and earliest > now
            and (cfg.until is None or earliest <= cfg.until)
            and self.frontier.pending() == 0
        ):
            assert isinstance(self.clock, VirtualClock)
            self.clock.advance_to(earliest)
            self.store.set_clock(earliest)
            self.solve_budget()
            moved, _ = self.store.refresh(self._cutoff(earliest), cfg.refresh_batch_size, earliest + cfg.retry_secs, earliest)
        self.moved += moved
        return moved

    def _sweep(self) -> int:
        if self._swept:
            return 0
        self._swept = True
        cfg, total = self.cfg, 0
        cutoff, retry_at = self._cutoff(self.opened_at), self.opened_at + cfg.retry_secs
        while True:  # moved URLs leave the due set: each is taken once
            moved, _ = self.store.refresh(cutoff, cfg.refresh_batch_size, retry_at, self.opened_at)
            total += moved
            if moved < cfg.refresh_batch_size:
                break
        self.moved += total
        if total:
            logger.info("ipr-crawl: %d URLs due for a revisit went to the frontier", total)
        return total

    def keeps_open(self) -> bool:
        """Whether an otherwise idle crawl stays open for a scheduled revisit."""
        cfg = self.cfg
        if cfg.mode != "continuous":
            return False
        earliest = self.store.earliest_due()
        if earliest is None:
            return False
        if cfg.until is not None and earliest > cfg.until:
            return False
        return not (cfg.horizon > 0 and earliest - self.clock.now() > cfg.horizon)


def _budget_account(st: dict[str, float], accesses: float, now: float, rate: float) -> tuple[float, float]:
    """The spend control's account at ``now`` (s): (accesses the budget allowed, accesses
    made), from the stored solver state ``st``, the crawl's access count and the
    budget's rate now (per s; over the period since the last solve the mean of its two
    ends). As revisit-sim counts it (:func:`~ipr_crawl.evaluation.revisit_sim.simulate_budget`):
    from the crawl's start (``t0``, kept when the first process opened it), at today's
    rate until the first solve, and every access, first fetches included. The first
    fetches then offset the first interval, in which nothing is due yet; counted from
    the first solve instead, the budget allowed in that interval was spent on top of it
    later, at up to twice the rate. A crawl whose first solve was made by a version
    before ``t0`` keeps counting from that solve (``accesses0``)."""
    allowed = st.get("allowed", 0.0)
    if "t" in st:
        allowed += (st.get("rate", 0.0) + rate) / 2 * max(0.0, now - st["t"])
    elif "t0" in st:
        allowed = rate * max(0.0, now - st["t0"])
    return allowed, accesses - st.get("accesses0", 0.0 if "t0" in st else accesses)
