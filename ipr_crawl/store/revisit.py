"""Redis access for revisits: per-URL state, due times, change events.

Keys (all under the crawl's hash tag, listed in :mod:`ipr_crawl.store.frontier`):
``revisit`` (hash: node id -> msgpack ``[url, *RevisitState.to_list()]``),
``due`` (zset: node id -> next visit, s since the epoch: Tamura & Kitsuregawa 2008's long-term queue),
``revisit_out`` (zset: revisits in flight -> when they are due again if lost),
``revisit_req`` (hash: node id -> request payload of its revisits) and
``changes`` (stream, capped with ``XADD MAXLEN ~``: one event per access).
The virtual clock of a simulated crawl is the ``revisit_clock`` field of ``meta``.

Scripts: ``lua/revisit_record.lua`` (one per response) and
``lua/revisit_refresh.lua`` (the refresher), built by :mod:`ipr_crawl.store.lua_loader`. :func:`format_history` is what ``ipr-crawl history URL``
prints.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import redis

from ipr_crawl.ordering.urls import canonical_url
from ipr_crawl.revisit.policy import DAY, RevisitState, estimated_rate
from ipr_crawl.store.keys import DERIVED_KEYS, crawl_keys
from ipr_crawl.store.lua_loader import script_source
from ipr_crawl.store.settling import settle_arg

logger = logging.getLogger(__name__)
#: unreadable revisit states logged one by one, per process; the rest are only counted
UNREADABLE_LOGGED = 10

__all__ = ["DISTRUST_MIN", "ChangeEvent", "LastmodResult", "RevisitStore", "format_history", "lastmod_verdict"]


#: A sitemap found wrong (:func:`lastmod_verdict`) at least this many times, and
#: more often than right, in one read is not followed (:meth:`RevisitStore.apply_lastmods`).
DISTRUST_MIN = 3


@dataclass(frozen=True)
class LastmodResult:
    """:meth:`RevisitStore.apply_lastmods`' answer: URLs made due now, URLs held, the
    sitemap's ``<lastmod>`` values the crawl's fetches confirmed and refuted, and
    whether it was therefore not followed."""

    moved: int
    held: int
    confirmed: int
    refuted: int
    distrusted: bool


def lastmod_verdict(state: RevisitState, lastmod: float, span: float = 0.0) -> int:
    """What the crawl's own fetches say of a sitemap's ``<lastmod>`` (s) for a URL
    fetched twice or more (``state``; 0 for one fetch). The date claims the latest
    change in ``[lastmod, lastmod + span]`` (``span`` 86,400 for a date without a time:
    the change is somewhere in that day). Returns 1 if the claim meets the latest
    access interval ``(last − last_interval, last]`` and that access found a change;
    −1 if the claim lies inside it and the access found none (a date that moves without
    the page: a build time), or if it lies before it while the access found a change (a
    date that does not move with the page); 0 otherwise (a change after the last fetch,
    or nothing to check).

    >>> s = RevisitState(first=0.0, last=20.0, last_interval=10.0, accesses=3)
    >>> lastmod_verdict(s, 15.0), lastmod_verdict(s, 5.0), lastmod_verdict(s, 25.0), lastmod_verdict(s, 5.0, 8.0)
    (1, -1, 0, 1)
    >>> s.unchanged_run = 1
    >>> lastmod_verdict(s, 15.0), lastmod_verdict(s, 5.0), lastmod_verdict(s, 15.0, 8.0)
    (-1, 0, 0)
    """
    if state.accesses < 2 or lastmod > state.last:
        return 0
    found_change = state.unchanged_run == 0
    prev = state.last - state.last_interval
    end = lastmod + max(span, 0.0)
    if end <= prev:
        return -1 if found_change else 0
    if found_change:
        return 1
    return -1 if lastmod > prev and end <= state.last else 0


@dataclass(frozen=True)
class ChangeEvent:
    """One entry of the change stream: stream id, URL and the event's fields."""

    stream_id: str
    url: str
    fields: dict[str, str]


class RevisitStore:
    """The revisit keys of one crawl (see the module doc); one round trip per method."""

    def __init__(self, client: redis.Redis, crawl_id: str, events_maxlen: int = 100_000) -> None:
        self.client = client
        self.keys = crawl_keys(crawl_id)
        self.events_maxlen = int(events_maxlen)
        #: this process's lease holder id, named when a record settles a lease
        self.holder = ""
        #: stored states :meth:`load` could not read (the crawl's stat ``ipr/revisit/unreadable_states``)
        self.unreadable = 0
        self._record = client.register_script(script_source("revisit_record"))
        self._refresh = client.register_script(script_source("revisit_refresh"))

    # -- state -----------------------------------------------------------------------
    @staticmethod
    def pack(url: str, state: RevisitState) -> bytes:
        return msgpack.packb([url, *state.to_list()], use_bin_type=True)

    @staticmethod
    def unpack(raw: bytes) -> tuple[str, RevisitState]:
        """``(url, state)`` of a stored value; :class:`ValueError` if malformed."""
        try:
            data = msgpack.unpackb(raw, raw=False)
        except Exception as exc:  # msgpack raises several kinds
            raise ValueError(f"undecodable revisit state: {exc!r}") from exc
        if not isinstance(data, list) or not data:
            raise ValueError("revisit state is not a list")
        return str(data[0]), RevisitState.from_list(data[1:])

    def load(self, id_: bytes) -> RevisitState | None:
        """The stored state of a node, or None (never fetched, or unreadable). An
        unreadable state (malformed, or written by a later ipr-crawl with fields this one
        does not know) is counted in :attr:`unreadable` and logged as a warning (the first
        :data:`UNREADABLE_LOGGED` per process): the URL is then treated as fetched for the
        first time, and its change history starts again."""
        raw: Any = self.client.hget(self.keys["revisit"], id_)
        if raw is None:
            return None
        try:
            return self.unpack(raw)[1]
        except ValueError as exc:
            self.unreadable += 1
            if self.unreadable <= UNREADABLE_LOGGED:
                logger.warning(
                    "ipr-crawl: the revisit state of node %s cannot be read (%s): the URL is treated as "
                    "fetched for the first time. Was the crawl written by a later ipr-crawl?%s",
                    id_.hex(), exc, " Further ones are only counted (ipr/revisit/unreadable_states)."
                    if self.unreadable == UNREADABLE_LOGGED else "")
            return None

    def record(
        self,
        id_: bytes,
        url: str,
        state: RevisitState,
        due: float | None,
        payload: bytes = b"",
        lease: bytes = b"",
        event: dict[str, Any] | None = None,
        rate_bins: tuple[str, str] = ("", ""),
        pool: tuple[str, bool, float] | None = None,
        moments: tuple[float, ...] | None = None,
        first: tuple[bool, float] | None = None,
        spend: bool = True,
    ) -> bool:
        """Store ``state``, schedule the next visit at ``due`` (s; None: never again),
        keep ``payload`` for revisits, settle ``lease``, move the URL in the rate
        histogram from bin ``rate_bins[0]`` to ``rate_bins[1]`` ("" none), add the
        access interval ``pool = (group, changed, length s)`` to the crawl's
        :meth:`rate_pool`, add ``moments`` (what the access adds to the five sums of
        :class:`~ipr_crawl.revisit.budget.RateMoments`) to :meth:`rate_moments`, add an
        explored first revisit ``first = (changed, interval s)`` (``harmonic:…:new=learn``)
        to :meth:`new_url_counts` and append ``event`` (revisit_record.lua). ``spend``
        False: the access is not counted in the budget's spend (:meth:`budget_accesses`;
        a copy Scrapy's HTTP cache served). Returns whether a lease was settled."""
        group, changed, length = pool if pool is not None and pool[2] > 0 else ("", False, 0.0)
        argv: list[Any] = [
            id_, self.pack(url, state), "" if due is None else repr(float(due)),
            payload, settle_arg(lease, self.holder), self.events_maxlen, rate_bins[0],
            rate_bins[1] if spend or not rate_bins[1] else "!" + rate_bins[1], group, int(changed), repr(float(length)),
            ",".join(repr(float(x)) for x in moments) if moments and any(moments) else "",
            f"{int(first[0])},{float(first[1])!r}" if first is not None and first[1] > 0 else "",
        ]
        for key, value in (event or {}).items():
            argv += [key, _field(value)]
        keys = [self.keys[k] for k in
                ("revisit", "due", "revisit_req", "changes", "lease", "req", "revisit_out", "rates", "rate_pool",
                 *DERIVED_KEYS, "meta")]
        return bool(self._record(keys=keys, args=argv))

    # -- the refresher ------------------------------------------------------------------
    def refresh(self, cutoff: float, cap: int, retry_at: float, now: float | None = None) -> tuple[int, float | None]:
        """Move up to ``cap`` URLs due at or before ``cutoff`` (s) into the forced
        queue; they are due again at ``retry_at`` unless their response comes
        first (revisit_refresh.lua). Revisits lost before ``now`` (default
        ``cutoff``) are due again at once. Returns ``(moved, earliest due instant or None)``."""
        keys = [self.keys[k] for k in ("meta", "req", "forced", "due", "revisit_req", "revisit_out")]
        args: list[Any] = [repr(float(cutoff)), int(cap), repr(float(retry_at)), repr(float(cutoff if now is None else now))]
        moved, first = self._refresh(keys=keys, args=args)
        return int(moved), (float(first) if first else None)

    def rate_histogram(self) -> dict[tuple[int, int], int]:
        """The crawl's histogram of estimated change rates: ``(rate bin, weight bin) -> URLs``
        (summed over hosts when it is kept per host)."""
        out: dict[tuple[int, int], int] = {}
        for bins in self.rate_histogram_by_host().values():
            for key, count in bins.items():
                out[key] = out.get(key, 0) + count
        return out

    def rate_histogram_by_host(self) -> dict[str, dict[tuple[int, int], int]]:
        """The histogram per host label (``""``: bins kept without a host, ``a:b``):
        ``label -> {(rate bin, weight bin): URLs}``."""
        c: Any = self.client
        out: dict[str, dict[tuple[int, int], int]] = {}
        for key, count in c.hgetall(self.keys["rates"]).items():
            parts = key.decode().split(":")
            if len(parts) in (2, 3) and int(count) > 0:
                try:
                    a, b = int(parts[0]), int(parts[1])
                except ValueError:
                    continue
                out.setdefault(parts[2] if len(parts) == 3 else "", {})[(a, b)] = int(count)
        return out

    def rate_pool(self) -> dict[str, tuple[float, float]]:
        """The crawl's changes and exposure (s) per group of URLs (a directory,
        :class:`~ipr_crawl.revisit.budget.RatePool`): ``group -> (changes, exposure)``,
        summed over every process's accesses. Read with HSCAN (two fields per directory),
        so that a crawl of many directories does not hold Redis up."""
        c: Any = self.client
        out: dict[str, list[float]] = {}
        for key, value in c.hscan_iter(self.keys["rate_pool"], count=2000):
            kind, _, group = key.decode("utf-8", "replace").partition(":")
            if kind in ("x", "e") and group:
                try:
                    v = float(value)
                except ValueError:
                    continue
                out.setdefault(group, [0.0, 0.0])[0 if kind == "x" else 1] = v
        return {g: (x, e) for g, (x, e) in out.items()}

    def rate_moments(self) -> list[float]:
        """The crawl's five :class:`~ipr_crawl.revisit.budget.RateMoments` sums (``harmonic:…:prior=gamma``;
        fields ``mom:<name>`` of ``rate_pool``), summed over every process's accesses; zeros
        before any."""
        from ipr_crawl.revisit.budget import RateMoments

        names = [f"mom:{n}" for n in RateMoments.FIELDS]
        values = self.client.hmget(self.keys["rate_pool"], names)
        return [float(v) if v is not None else 0.0 for v in values]

    def new_url_counts(self) -> tuple[float, float, float]:
        """The explored first revisits of the crawl (``harmonic:…:new=learn``; fields
        ``new:n``, ``new:x``, ``new:e`` of ``rate_pool``): how many, how many saw a change,
        and their length in all (s); zeros before any
        (:func:`~ipr_crawl.revisit.budget.new_url_rate`)."""
        values = self.client.hmget(self.keys["rate_pool"], ["new:n", "new:x", "new:e"])
        n, x, e = (float(v) if v is not None else 0.0 for v in values)
        return n, x, e

    def budget_accesses(self) -> int:
        """Accesses of URLs in the rate histogram so far (the budget's spend)."""
        c: Any = self.client
        return int(c.hget(self.keys["rates"], "accesses") or 0)

    def budget_state(self) -> dict[str, float]:
        """The budget solver's shared state in ``meta`` (``budget_*`` fields)."""
        c: Any = self.client
        raw = c.hgetall(self.keys["meta"])
        return {k.decode()[7:]: float(v) for k, v in raw.items()
                if k.startswith(b"budget_") and k != b"budget_host_nu"}

    def set_budget_start(self, t: float) -> None:
        """Keep ``t`` (s) as the start of the budget's account (``budget_t0`` of ``meta``)
        unless the crawl already has one (HSETNX: the first process to open it)."""
        self.client.hsetnx(self.keys["meta"], "budget_t0", repr(float(t)))

    def set_budget_state(self, **fields: float) -> None:
        """Write the budget solver's state (``budget_<name>`` fields of ``meta``)."""
        self.client.hset(self.keys["meta"], mapping={f"budget_{k}": repr(float(v)) for k, v in fields.items()})

    def host_multipliers(self) -> dict[str, float]:
        """The hosts held at their cap by the last budget solve: label -> nu."""
        c: Any = self.client
        raw = c.hget(self.keys["meta"], "budget_host_nu")
        return {k: float(v) for k, v in json.loads(raw).items()} if raw else {}

    def set_host_multipliers(self, host_nu: dict[str, float]) -> None:
        self.client.hset(self.keys["meta"], "budget_host_nu", json.dumps(host_nu))

    def claim_budget_solve(self, period_ms: int) -> bool:
        """Whether this process solves the budget this period (one per crawl: SET NX PX)."""
        return bool(self.client.set(self.keys["meta"] + "_budget_lock", "1", nx=True, px=max(1, period_ms)))

    def clamp_due(self, latest: float) -> int:
        """Move every visit scheduled after ``latest`` (s) to ``latest``; returns how
        many moved (a bound lowered since they were scheduled)."""
        c: Any = self.client
        late = c.zrangebyscore(self.keys["due"], f"({latest!r}", "+inf")
        if late:
            c.zadd(self.keys["due"], dict.fromkeys(late, latest))
        return len(late)

    def apply_lastmods(self, lastmods: Sequence[tuple[bytes, float] | tuple[bytes, float, float]], now: float,
                       hold: float,
                       limit: float | None = None, stale_after: float = 0.0, chunk: int = 1000) -> LastmodResult:
        """What a sitemap says, applied to the due set: of the URLs of ``lastmods`` (node
        id, modification instant in s: a sitemap's ``<lastmod>``, optionally its span
        in s as :func:`lastmod_verdict` takes it) that are scheduled,
        those modified after their stored last access are made due at ``now`` (s) if due
        later, at most ``limit`` of them (None: all), the lowest estimated change rates
        first (the versions a revisit policy is least likely to catch on its own); the
        others are held to ``now + hold`` at the earliest (the next read of the
        sitemap will tell), unless fetched ``stale_after`` s or more ago (> 0: a sitemap
        whose ``<lastmod>`` never moves does not stop revisits for good). URLs not yet
        fetched, not scheduled, or in flight are left alone.

        First the sitemap is checked against the crawl's own fetches
        (:func:`lastmod_verdict` per URL fetched twice or more): when it was wrong
        (``refuted``) at least :data:`DISTRUST_MIN` times and more often than right
        (``confirmed``), nothing is applied and the result says ``distrusted``. URLs are
        held only once it was right at least once: held URLs are not fetched, so a
        sitemap not yet checked must not stop the fetches that would check it. A URL
        whose own ``<lastmod>`` is refuted is neither moved nor held (a sitemap
        partly wrong is followed where it is right)."""
        key, due_key = self.keys["revisit"], self.keys["due"]
        known: list[tuple[bytes, RevisitState, bool]] = []
        confirmed = refuted = 0
        for i in range(0, len(lastmods), chunk):
            part = lastmods[i:i + chunk]
            raws: Any = self.client.hmget(key, [item[0] for item in part])
            for item, raw in zip(part, raws):
                id_, when = item[0], item[1]
                if raw is None:
                    continue
                try:
                    state = self.unpack(raw)[1]
                except ValueError:
                    continue
                verdict = lastmod_verdict(state, when, item[2] if len(item) > 2 else 0.0)
                confirmed += verdict == 1
                refuted += verdict == -1
                if verdict != -1:  # a URL whose own lastmod was refuted keeps the policy's schedule
                    known.append((id_, state, when > state.last))
        if refuted >= DISTRUST_MIN and refuted > confirmed:
            return LastmodResult(0, 0, confirmed, refuted, True)
        changed: list[tuple[float, bytes]] = []
        held: list[bytes] = []
        for i in range(0, len(known), chunk):
            part2 = known[i:i + chunk]
            pipe = self.client.pipeline(transaction=False)
            for id_, _, _ in part2:
                pipe.zscore(due_key, id_)
            for (id_, state, modified), due in zip(part2, pipe.execute()):
                if due is None:
                    continue
                if modified and due > now:
                    changed.append((estimated_rate(state), id_))
                elif (not modified and confirmed > 0 and due < now + hold
                      and not (stale_after > 0 and now - state.last >= stale_after)):
                    held.append(id_)
        changed.sort()
        if limit is not None:
            changed = changed[:max(0, int(limit))]
        moved = 0
        for ids, at in (([id_ for _, id_ in changed], now), (held, now + hold)):
            for i in range(0, len(ids), chunk):  # XX: a URL taken out meanwhile (in flight, stopped) stays out
                added: Any = self.client.zadd(due_key, {id_: at for id_ in ids[i:i + chunk]}, xx=True, ch=True)
                if at == now:
                    moved += int(added)
        return LastmodResult(moved, len(held), confirmed, refuted, False)

    def unschedule(self, ids: list[bytes]) -> int:
        """Stop revisiting these nodes (e.g. URLs that redirect); returns how many were scheduled."""
        if not ids:
            return 0
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.keys["due"], *ids)
        pipe.zrem(self.keys["revisit_out"], *ids)
        return sum(int(n) for n in pipe.execute())

    def earliest_due(self) -> float | None:
        """The earliest scheduled visit (s; a revisit in flight counts at its
        retry instant), or None when nothing is scheduled."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(self.keys["due"], 0, 0, withscores=True)
        pipe.zrange(self.keys["revisit_out"], 0, 0, withscores=True)
        firsts = [float(f[0][1]) for f in pipe.execute() if f]
        return min(firsts) if firsts else None

    def scheduled(self) -> int:
        """How many URLs have a next visit scheduled (in flight included)."""
        return int(self.client.zcard(self.keys["due"])) + int(self.client.zcard(self.keys["revisit_out"]))

    def due_at(self, id_: bytes) -> float | None:
        """A node's scheduled visit (s; its retry instant while in flight), or None."""
        score: Any = self.client.zscore(self.keys["due"], id_)
        if score is None:
            score = self.client.zscore(self.keys["revisit_out"], id_)
        return None if score is None else float(score)

    def clock(self) -> float | None:
        """The stored virtual clock (s), or None."""
        value: Any = self.client.hget(self.keys["meta"], "revisit_clock")
        return None if value is None else float(value)

    def set_clock(self, now: float) -> None:
        self.client.hset(self.keys["meta"], "revisit_clock", repr(float(now)))

    # -- history ------------------------------------------------------------------------------
    def events(self, url: str | None = None, count: int = 1000) -> Iterator[ChangeEvent]:
        """Change events, oldest first; only ``url``'s (canonical form) when given.
        Scans the stream in pages of ``count``: O(stream length)."""
        want = canonical_url(url) if url else None
        start = "-"
        while True:
            batch: Any = self.client.xrange(self.keys["changes"], min=start, max="+", count=count)
            for sid, raw in batch:
                fields = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
                if want is None or fields.get("url") == want:
                    yield ChangeEvent(sid.decode(), fields.get("url", ""), fields)
            if len(batch) < count:
                return
            start = "(" + batch[-1][0].decode()


def _field(value: Any) -> str:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


# -- ipr-crawl history URL ---------------------------------------------------------------------
def _iso(t: float | None) -> str:
    if t is None or not math.isfinite(t):
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _days(seconds: float) -> str:
    return "-" if not math.isfinite(seconds) else f"{seconds / DAY:.2f} d"


def format_history(url: str, state: RevisitState | None, due: float | None, events: list[ChangeEvent]) -> str:
    """The text ``ipr-crawl history`` prints."""
    lines = [f"URL {canonical_url(url)}"]
    if state is None:
        lines.append("  no revisit state (never fetched with IPR_REVISIT_ENABLED, or another crawl id)")
    else:
        lines += [
            f"  first access {_iso(state.first)}   last access {_iso(state.last)}   accesses {state.accesses}",
            (
                f"  T {_days(state.T)}   U {_days(state.U)}   m {state.m}   t_c,min {_days(state.tc_min)}"
                f"   t_c,avg {_days(state.tc_avg)}   last interval {_days(state.last_interval)}"
            ),
            f"  chosen interval {_days(state.interval)}   next visit {_iso(due)}"
            + (f"   prior x{state.prior_scale:.3g} (its directory)" if state.prior_scale != 1.0 else ""),
            f"  ETag {state.etag or '-'}   Last-Modified {state.last_modified or '-'}   hash {state.digest or '-'}",
        ]
    lines.append(f"  {len(events)} events in the change stream:")
    for e in events:
        f = e.fields
        t = float(f["t"]) if f.get("t") else None
        due_e = float(f["due"]) if f.get("due") else None
        tau = float(f["tau"]) if f.get("tau") else math.nan
        lines.append(
            f"  {_iso(t)}  {f.get('kind', '?'):<12} HTTP {f.get('status', '?'):<3}  "
            f"next in {_days(tau):>10}  due {_iso(due_e)}"
        )
    return "\n".join(lines)
