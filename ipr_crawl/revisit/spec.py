"""The policy spec mini-language of ``IPR_REVISIT_POLICY`` and revisit-sim's
``--policies``: ``NAME[:FIELD]...`` with positional or ``key=value`` fields, parsed into
the records of :mod:`ipr_crawl.revisit.policies` (:func:`parse_policy` gives the grammar).
One builder per policy kind checks its own fields and bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ipr_crawl.revisit.budget import parse_budget
from ipr_crawl.revisit.durations import DAY, is_duration, parse_duration
from ipr_crawl.revisit.policies import (
    AimdPolicy,
    FixedPolicy,
    HarmonicPolicy,
    MlePolicy,
    NutchAdaptivePolicy,
    Policy,
)

__all__ = ["parse_policy"]


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


def _allow(kv: dict[str, str], allowed: set[str]) -> None:
    """Refuse the ``key=value`` fields outside ``allowed``."""
    extra = set(kv) - allowed
    if extra:
        raise ValueError(f"unknown key(s) {sorted(extra)}; allowed {sorted(allowed)}")


def _mle(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """``mle-min|mle-avg|mle-mix[:MU_LOW-MU_HIGH][:TAU2][:xALPHA]``."""
    _allow(kv, {"mu", "tau2", "alpha"})
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


def _aimd(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """``aimd[:D][:R][:TAU2][:pair]``: durations in order D, TAU2; a bare number is R."""
    _allow(kv, {"d", "r", "tau2"})
    pair = False
    durations: list[str] = []
    r = kv.get("r")
    for f in pos:
        if f.lower() == "pair":
            pair = True
        elif is_duration(f) and f[-1:].isalpha():
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


def _nutch(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """``nutch-adaptive[:INC][:DEC][:MIN][:MAX][:TAU2]``: numbers INC, DEC, then durations."""
    _allow(kv, {"inc", "dec", "min", "max", "tau2"})
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


def _harmonic(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """``harmonic[:BUDGET][:pool=off|directory][:prior=fixed|gamma][:new=prior|learn][:young=K]``."""
    _allow(kv, {"tau2", "pool", "prior", "new", "young"})
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


def _fixed(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """``fixed:INTERVAL``."""
    _allow(kv, {"tau2"})
    if len(pos) != 1:
        raise ValueError("fixed takes exactly one interval, e.g. fixed:7d")
    value = parse_duration(pos[0])
    if value <= 0:
        raise ValueError("the interval must be > 0")
    return FixedPolicy(value, name=raw)


#: The builder of each policy name.
_BUILDERS: dict[str, Callable[[str, list[str], dict[str, str], str], Policy]] = {
    "mle-min": _mle, "mle-avg": _mle, "mle-mix": _mle, "aimd": _aimd, "nutch-adaptive": _nutch,
    "harmonic": _harmonic, "fixed": _fixed,
}


def _build(head: str, pos: list[str], kv: dict[str, str], raw: str) -> Policy:
    """The policy of name ``head`` from its positional fields ``pos`` and ``kv``."""
    builder = _BUILDERS.get(head)
    if builder is None:
        raise ValueError(
            f"policy {raw!r}: unknown estimator {head!r}; allowed mle-min, mle-avg, mle-mix, "
            "aimd, nutch-adaptive, fixed, harmonic"
        )
    return builder(head, pos, kv, raw)
