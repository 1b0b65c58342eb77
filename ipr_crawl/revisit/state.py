"""What is kept per URL between accesses, and its update at each access.

Source: Tamura & Kitsuregawa 2008, §4.1.1: per URL only a few numbers
(:class:`RevisitState`): ``T`` (time since the first access), ``U`` (sum of access
intervals in which no change was detected), ``m`` (intervals with a change),
``t_c,min``, ``t_c,avg = (T - U)/m``, the last interval, validators and the content
hash. Pure logic; every time is in seconds (POSIX seconds for instants).
The policies that read the state are in :mod:`ipr_crawl.revisit.policy`.

>>> s = observe(first_access(0.0), 86400.0, changed=True)
>>> s.T, s.m, s.U
(86400.0, 1, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["CHANGE_CLASSES", "RevisitState", "first_access", "observe", "update"]

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
