"""The frontier of one crawl in Redis: enqueue, lease, record, settle.

Methods map one-to-one to the scripts in ``lua/`` (built by
:mod:`ipr_crawl.store.lua_loader`, registered once, EVALSHA, reloaded on NOSCRIPT) and cost one round trip each. Key names are in
:mod:`ipr_crawl.store.keys`, the node record in :mod:`ipr_crawl.store.record`, the
ordering's parameters in :class:`ipr_crawl.ordering.OrderingParams`. The record
call's pipelining is in :mod:`ipr_crawl.store.pipelined`, the read side (sizes,
records, the collected graph) in :mod:`ipr_crawl.store.reads`; both are parts of
:class:`FrontierStore`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import redis

from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.rules import rule_of
from ipr_crawl.store.keys import DERIVED_KEYS, RECORD_KEYS, SCHEMA_VERSION, crawl_keys
from ipr_crawl.store.lua_loader import script_source
from ipr_crawl.store.pipe import Call, evalsha
from ipr_crawl.store.pipelined import PipelinedRecord
from ipr_crawl.store.reads import FrontierReads
from ipr_crawl.store.record import ID_SIZE, MAX_PRIORITY, Link, RecordResult, parse_record, record_result
from ipr_crawl.store.settling import lease_holder, note_takes, settle_arg
from ipr_crawl.store.upgrade import upgrade

__all__ = ["FrontierStore", "IncompatibleCrawl", "script_source"]

logger = logging.getLogger(__name__)


class IncompatibleCrawl(RuntimeError):
    """The crawl's keyspace was written by an incompatible version or ordering."""


_CREATE_META = """
if redis.call('HSETNX', KEYS[1], 'schema', ARGV[1]) == 0 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


def create_meta(client: redis.Redis, key: str, fields: dict[str, Any]) -> bool:
    """Write a new crawl's ``meta`` hash ``key``: the schema version and ``fields``, in one
    step (processes that open a crawl together never see the schema without its ordering
    or bucket count); False, writing nothing, when the crawl exists."""
    args: list[Any] = [SCHEMA_VERSION]
    for name, value in fields.items():
        args += [name, value]
    return bool(client.eval(_CREATE_META, 1, key, *args))


#: how long a forced enqueue's id is kept against a second application (ms): a call sent
#: again after its reply was lost comes within seconds
OP_TTL_MS = 600_000


class FrontierStore(PipelinedRecord, FrontierReads):
    """The frontier and collected graph of one crawl in Redis.

    ``params``: the ordering (an :class:`~ipr_crawl.ordering.OrderingParams`, or an
    ordering name with its parameters as keywords, e.g. ``FrontierStore(client,
    "c", "ipr", cutoff="pl")``; ``ipr`` defaults to the DL1 cut-off, other
    orderings to none). Methods map one-to-one to the scripts in ``lua/`` and cost
    one round trip each. The record calls are :class:`PipelinedRecord`'s
    (:mod:`ipr_crawl.store.pipelined`), the reads of sizes, records and the collected
    graph :class:`FrontierReads`' (:mod:`ipr_crawl.store.reads`).
    """

    def __init__(
        self, client: redis.Redis, crawl_id: str, params: OrderingParams | str = "ipr", **kwargs: Any
    ) -> None:
        if isinstance(params, str):
            kwargs.setdefault("cutoff", "dl1" if params == "ipr" else "")
            params = OrderingParams(ordering=params, **kwargs)
        elif kwargs:
            raise TypeError("FrontierStore: give an OrderingParams or keywords, not both")
        self.client = client
        self.crawl_id = crawl_id
        self.keys = crawl_keys(crawl_id)
        self.params = params
        self.ordering = params.ordering
        self.cutoff = params.cutoff
        self._lua_ordering = params.lua_name
        start = getattr(rule_of(params.lua_name), "start_score", None)
        #: enqueue.lua's ARGV[7]: the score of a URL from outside a page (opic: its cash)
        self._start_score = repr(float(start(params))) if start is not None else "0"
        # The constant head of the record scripts' ARGV (LUA_ARGS).
        self._record_head: list[Any] = params.lua_args()
        self._scripts = {
            name: client.register_script(script_source(name, ordering=self._lua_ordering))
            for name in (
                "record_page", "enqueue", "pop", "ack", "set_scores", "replay", "replay_record",
                "release_holder", "sample", "relay", "beat", "dead_return", "mark_unfiltered",
            )
        }
        #: what the last :meth:`pop` handed back from holders whose heartbeat was gone:
        #: (leases, [holder ids])
        self.last_lost: tuple[int, list[str]] = (0, [])
        self.last_lapsed = False
        self.last_dead_lettered = 0
        self.last_head: tuple[float, int] = (float("inf"), 0)
        self._record_keys = self._k(*RECORD_KEYS, *DERIVED_KEYS)  # pop, ack, release_holder: the first 6
        self._settle_keys = self._k(*RECORD_KEYS[:6], *DERIVED_KEYS)
        self._enqueue_keys = self._k(*RECORD_KEYS[:8], *DERIVED_KEYS)
        self._open_record_pipeline()

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> bool:
        """Write or check the crawl's schema version and ordering.

        Returns True when the crawl already existed (a resume). Raises
        :class:`IncompatibleCrawl` if it was written by another schema version or
        with another ordering (its scores would mean something else).
        """
        k = self.keys["meta"]
        ordering = self.params.label
        if create_meta(self.client, k, {"ordering": ordering, "created": time.time()}):
            return False
        schema, stored = self.client.hmget(k, "schema", "ordering")
        try:
            version = int(schema) if schema is not None else None
        except ValueError:
            version = None
        version = upgrade(self, version)
        self.refresh_prior()
        if version != SCHEMA_VERSION:
            raise IncompatibleCrawl(
                f"crawl {self.crawl_id!r} was written with schema {schema!r}; this is "
                f"ipr-crawl schema {SCHEMA_VERSION}. Use another IPR_CRAWL_ID or delete "
                f"the keys ipr:{{{self.crawl_id}}}:*"
            )
        stored_label = stored.decode() if isinstance(stored, bytes) else stored
        buckets = self.client.hget(k, "buckets")
        if buckets is not None and int(buckets) != getattr(self, "buckets", 1):
            raise IncompatibleCrawl(
                f"crawl {self.crawl_id!r} is split into {int(buckets)} buckets (IPR_CLUSTER_BUCKETS); "
                f"this run has {getattr(self, 'buckets', 1)}. Use the same IPR_CLUSTER_BUCKETS or another IPR_CRAWL_ID"
            )
        if stored_label is not None and stored_label != ordering:
            raise IncompatibleCrawl(
                f"crawl {self.crawl_id!r} is ordered by {stored_label!r}, not {ordering!r}; "
                "its scores mean something else. To crawl it afresh: -s IPR_RESET=True (or "
                f"`ipr-crawl reset --crawl-id {self.crawl_id}`); else use the same IPR_ORDERING or another IPR_CRAWL_ID"
            )
        return True

    def refresh_prior(self) -> int:
        """Read the crawl's prior bucket count (``prior_buckets`` in ``meta``, written
        last when a prior is installed, store/prior.py) into :attr:`prior_buckets`."""
        raw = self.client.hget(self.keys["meta"], "prior_buckets")
        self.prior_buckets = int(raw) if raw else 0
        return self.prior_buckets

    def _k(self, *names: str) -> list[str]:
        return [self.keys[n] for n in names]


    def set_scores(self, scores: Sequence[tuple[bytes, float]], chunk: int = 2000) -> int:
        """Overwrite node scores and re-score their frontier entries (set_scores.lua).

        Used by the ``pr`` ordering's periodic PageRank step. Returns the number
        of frontier entries whose score changed.
        """
        changed = 0
        for start in range(0, len(scores), chunk):
            argv: list[Any] = [self._lua_ordering]
            for id_, score in scores[start : start + chunk]:
                argv += [id_, f"{score:.17g}"]
            changed += int(
                self._scripts["set_scores"](keys=self._k("meta", "node", "frontier", *DERIVED_KEYS), args=argv)
            )
        return changed

    def enqueue(self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes = b"", **how: Any) -> int:
        """Add one request (enqueue.lua): 1 new, 2 forced, 0 duplicate.

        Scrapy's duplicate rule: a ``dont_filter`` request is forced; a filtered one is a
        duplicate if the URL is known, unless only ``dont_filter`` requests brought it (then
        it is forced, once). ``how``: ``shared_start=True``, a start request of a crawl
        other processes share, ``dont_filter`` for a new URL but a duplicate for a known
        one; ``seen_fp``, scrapy-redis's fingerprint of a filtered request in a crawl
        carried over from it (:attr:`Link.seen_fp`); ``op``, an id of this call unique in
        the crawl (a holder id and a sequence number): the same forced request sent again
        (a reply lost with its connection) is queued once (its key ``enq:<op>`` lives
        :data:`OP_TTL_MS`); ``priority``: a forced request's Scrapy priority (_forced.lua)."""
        keys, args = self._enqueue_argv(id_, tie, payload, dont_filter, lease, **how)
        return int(self._scripts["enqueue"](keys=keys, args=args))

    def mark_unfiltered(self, id_: bytes) -> None:
        """Node ``id_`` was brought by a ``dont_filter`` redirect: see :meth:`enqueue`
        (mark_unfiltered.lua; raises ``IPR_STORE_LOST`` as it does)."""
        self._scripts["mark_unfiltered"](keys=self._k("meta", "unfiltered"), args=[id_])

    def _enqueue_argv(
        self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes, shared_start: bool = False,
        seen_fp: str = "", op: str = "", priority: int = 0,
    ) -> tuple[list[str], list[Any]]:
        mode = "s" if shared_start else "1" if dont_filter else "0"
        once = bool(op) and mode == "1"  # enq:<op>, the last key: a call sent again queues nothing more
        keys = [*self._enqueue_keys, *self.prior_keys([id_])]
        if once:
            keys.append(self.keys["meta"][: -len("meta")] + "enq:" + op)
        return (keys, [self._lua_ordering, id_, tie, payload, mode, settle_arg(lease, self.holder), self._start_score,
                       seen_fp, OP_TTL_MS if once else 0, max(-MAX_PRIORITY, min(MAX_PRIORITY, int(priority)))])

    # -- the hot calls as commands, for the pipelined connection (store/pipe.py) ----------
    def pipe_scripts(self) -> list[Any]:
        """The scripts the pipelined calls use (loaded at the head of its connection)."""
        return [self._scripts[n] for n in ("record_page", "enqueue", "pop", "ack")]

    def route_keys(self) -> list[str]:
        """A key of the crawl's key space: its Cluster slot's (store/router.py)."""
        return [self.keys["meta"]]

    def enqueue_call(self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes = b"", **how: Any) -> Call:
        """:meth:`enqueue` as a :class:`~ipr_crawl.store.pipe.Call` (same value)."""
        keys, args = self._enqueue_argv(id_, tie, payload, dont_filter, lease, **how)
        return Call([evalsha(self._scripts["enqueue"], keys, args)], lambda r: int(r[0]))

    def pop_call(
        self, count: int, lease_secs: float, requeue_cap: int = 100, scan: int = 0, busy: Sequence[str] = (),
        offset: int = 0, min_ratio: float = 0.0, holder: str = "",
    ) -> Call:
        """:meth:`pop` as a :class:`~ipr_crawl.store.pipe.Call` (same value; sets
        :attr:`last_lost` and :attr:`last_head` when its reply is parsed)."""
        keys, args = self._pop_argv(count, lease_secs, requeue_cap, scan, busy, offset, min_ratio, holder)
        return Call([evalsha(self._scripts["pop"], keys, args)], lambda r: self._popped(r[0], holder))

    def ack_call(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> Call:
        """:meth:`ack` as a :class:`~ipr_crawl.store.pipe.Call` (same value)."""
        if not leases:
            return Call([], lambda r: 0)
        keys, args = self._ack_argv(mode, leases)
        return Call([evalsha(self._scripts["ack"], keys, args)], lambda r: int(r[0]))

    def pending_call(self) -> Call:
        """:meth:`pending` as a :class:`~ipr_crawl.store.pipe.Call` (same value)."""
        commands = [("ZCARD", self.keys[n]) for n in ("frontier", "forced", "lease")]
        return Call([*commands, ("HEXISTS", self.keys["meta"], "ordering")], self.pending_of)

    def record_call(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b"", bucket: int | None = None,
    ) -> Call:
        """:meth:`record_page` as a :class:`~ipr_crawl.store.pipe.Call` (same value), with
        the ``WAIT`` of :meth:`wait_for_replicas` after it when one is asked."""
        argv = self._record_argv(page_id, page_tie, links, lease, bucket)
        commands = [evalsha(self._scripts["record_page"], self._record_keys_of(argv), argv)]
        if self._waiting():
            assert self._wait is not None
            commands.append(("WAIT", self._wait[0], self._wait[1]))

            def parse(r: list[Any]) -> RecordResult:
                self._waited(r[1])
                return record_result(r[0])

            return Call(commands, parse)
        return Call(commands, lambda r: record_result(r[0]))

    def pop(
        self, count: int, lease_secs: float, requeue_cap: int = 100, scan: int = 0, busy: Sequence[str] = (),
        offset: int = 0, min_ratio: float = 0.0, holder: str = "",
    ) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        """Lease up to ``count`` requests (pop.lua) for ``holder`` (a process that
        beats, :meth:`beat`; ``""``: leases bounded by ``lease_secs`` only).

        First, in the same atomic call, the leases of holders whose heartbeat
        deadline has passed go back (recorded in :attr:`last_lost`), then leases
        taken more than ``lease_secs`` ago, whoever holds them (at most
        ``requeue_cap`` of each).

        ``scan > 0`` (polite pop, :mod:`ipr_crawl.scheduler.polite`): at most one frontier request
        per download slot, among the first ``scan`` entries and the ``scan`` from rank
        ``offset`` (modulo the frontier's size), none for the slots in ``busy``;
        with ``min_ratio`` r > 0 only among the entries whose priority is at least r x
        the best entry's (when that is positive; ``IPR_POLITE_MIN_RATIO``).
        Returns ``(leases moved back, expired or lost, [(lease member, payload or None)])``.
        """
        keys, args = self._pop_argv(count, lease_secs, requeue_cap, scan, busy, offset, min_ratio, holder)
        return self._popped(self._scripts["pop"](keys=keys, args=args), holder)

    def _pop_argv(
        self, count: int, lease_secs: float, requeue_cap: int, scan: int, busy: Sequence[str],
        offset: int, min_ratio: float, holder: str,
    ) -> tuple[list[str], list[Any]]:
        lease_ms = int(lease_secs * 1000)
        max_ms = int(self.lease_max_secs * 1000) if self.lease_max_secs > lease_secs else lease_ms
        ttl = int(self.holder_ttl_secs * 1000) if self.holder_ttl_secs > 0 else ""
        lease_arg = f"{lease_ms}:{max_ms}:{ttl}:{self.max_releases or ''}"
        args: list[Any] = [self._lua_ordering, 0, lease_arg, count, requeue_cap, holder]
        if scan > 0:
            args += [scan, offset, repr(float(min_ratio)), *busy]
        return self._settle_keys, args

    def _popped(self, res: Any, holder: str) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        reclaimed = int(res[1])
        self.last_lost = (reclaimed, [h.decode() for h in res[2]])
        head, forced, overdue, lapsed, dead, take = res[3]
        #: requests pops settled as failed (handed out again past IPR_MAX_RELEASES) since
        #: the last :meth:`take_dead_lettered`
        self.last_dead_lettered += int(dead)
        #: the last pop registered this holder again: its heartbeat had lapsed and its
        #: leases went to others (read once with :meth:`take_lapsed`)
        self.last_lapsed = self.last_lapsed or bool(int(lapsed))
        #: after the last pop: (best frontier ZSET score or +inf when empty, forced requests left)
        self.last_head = (float(head) if head else float("inf"), int(forced))
        #: leases of live holders the last pop moved back, past IPR_LEASE_MAX_SECS
        self.last_overdue = int(overdue)
        items = [(res[i], res[i + 1] or None) for i in range(4, len(res), 2)]
        note_takes(holder, [m for m, _ in items], int(take))  # each settle names its take
        return int(res[0]) + reclaimed, items

    def take_dead_lettered(self) -> int:
        """Requests dead-lettered by the pops since the last call (reading clears it)."""
        dead, self.last_dead_lettered = self.last_dead_lettered, 0
        return dead

    def take_lapsed(self) -> bool:
        """Whether a pop since the last call found this holder lapsed (registered again):
        the leases it held before went back (:meth:`pop`). Reading clears it."""
        lapsed, self.last_lapsed = self.last_lapsed, False
        return lapsed

    # -- holders: processes that lease, and their heartbeats -----------------------
    def beat(self, holder: str, ttl_secs: float, info: dict[str, Any] | None = None, renew_only: bool = False) -> bool:
        """Renew ``holder``'s heartbeat: it counts as alive for ``ttl_secs`` more
        (``info``, JSON-able, is stored beside it). Returns False when the holder was
        not registered, i.e. on its first beat or after it was declared lost (its
        leases then went to others) or released. ``renew_only``: a holder that is not
        registered stays so (its info is not written either): a beat that lands after
        the holder's release at close does not bring it back."""
        keys = [self.keys["meta"], self.keys["holders"], self.keys["holders_info"]]
        args = [holder, int(ttl_secs * 1000), "1" if renew_only else "0", "" if info is None else json.dumps(info)]
        return bool(self._scripts["beat"](keys=keys, args=args))

    def redis_time(self) -> float:
        """Redis's clock (s since the epoch; ``TIME``), the one every lease time and
        heartbeat deadline is measured on (_clock.lua): crawlers' clocks may disagree."""
        seconds, micros = self.client.time()
        return seconds + micros / 1e6

    def node_state(self, id_: bytes) -> int | None:
        """Node ``id_``'s state (0 queued or leased, 2 fetched, 3 failed), or None when unknown."""
        raw: Any = self.client.hget(self.keys["node"], id_)
        return parse_record(raw)[0].state if raw else None

    def node_score(self, id_: bytes) -> float | None:
        """The ordering's score in node ``id_``'s record, or None when unknown."""
        raw: Any = self.client.hget(self.keys["node"], id_)
        return parse_record(raw)[0].s if raw else None

    def mean_score(self, sample: int = 1000) -> float:
        """The mean node score over up to ``sample`` random nodes (HRANDFIELD); 0 for
        an empty crawl."""
        c: Any = self.client
        values = c.hrandfield(self.keys["node"], sample, withvalues=True) or []
        scores = [parse_record(values[i + 1])[0].s for i in range(0, len(values), 2)]
        return sum(scores) / len(scores) if scores else 0.0

    def holder_counts(self) -> tuple[int, int]:
        """``(alive, lost)``: registered holders whose heartbeat deadline is ahead, and
        those whose deadline has passed (not yet handed back by a pop). One round trip."""
        now = f"{int(self.redis_time() * 1000)}"
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(self.keys["holders"], f"({now}", "+inf")
        pipe.zcount(self.keys["holders"], "-inf", f"({now}")
        alive, lost = pipe.execute()
        return int(alive), int(lost)

    def release(self, mode: str, holder: str = "") -> tuple[int, list[str]]:
        """Hand leases back (release_holder.lua): ``mode`` ``"holder"`` (those of
        ``holder``, which is forgotten: a crawler closing), ``"dead"`` (of holders whose
        heartbeat is gone, and leases without a live holder) or ``"all"`` (every
        lease: only when no crawler of the crawl runs). Returns ``(leases moved back,
        holders forgotten)``."""
        if mode not in ("holder", "dead", "all") or (mode == "holder") != bool(holder):
            raise ValueError(f"release: mode {mode!r} with holder {holder!r}")
        ttl = int(self.holder_ttl_secs * 1000) if self.holder_ttl_secs > 0 else ""
        args = [self._lua_ordering, ttl, mode, holder, self.max_releases or ""]
        n, forgotten = self._scripts["release_holder"](keys=self._settle_keys, args=args)
        return int(n), [h.decode() for h in forgotten]

    def dead_return(self) -> int:
        """Put the dead-lettered requests back (dead_return.lua): handed out more than
        ``IPR_MAX_RELEASES`` times, each time lost with its process, they were settled as
        failed; a URL is queued again, a forced request goes back to the forced queue.
        Returns how many. O(D log F)."""
        return int(self._scripts["dead_return"](keys=self._settle_keys, args=[self._lua_ordering]))

    def dead_letters(self, n: int = 20) -> list[tuple[bytes, bytes]]:
        """Up to ``n`` dead-lettered requests: ``(lease member, request payload)``."""
        c: Any = self.client
        return list(c.hscan(self.keys["dead_letter"], count=max(n, 10))[1].items())[:n]

    def release_stale(self, holder: str, keep: set[bytes], before: float) -> int:
        """Hand back the leases ``holder`` took before ``before`` (s since the epoch on
        Redis's clock, :meth:`redis_time`) that are not in ``keep`` (the lease members the process still holds): after a server
        restarted from its append-only file, leases whose settling was lost with the last
        second of writes (their pages are fetched again). Returns how many went back.
        O(leases in flight)."""
        c: Any = self.client
        members = c.zrangebyscore(self.keys["lease"], "-inf", f"({int(before * 1000)}")
        if not members:
            return 0
        owners = c.hmget(self.keys["lease_by"], members)
        stale = [m for m, h in zip(members, owners) if h is not None and lease_holder(h) == holder and m not in keep]
        return self.ack("release", [(m, m[8:] if len(m) == 16 else b"") for m in stale])

    def holders(self) -> list[dict[str, Any]]:
        """Every registered holder: ``holder``, ``alive``, ``last_beat`` (s since the
        epoch), ``in_flight`` (its leases) and what it stored (host, pid, spider,
        started, heartbeat_secs). Leases without a registered holder are under
        holder ``""``. O(leases in flight)."""
        c: Any = self.client
        now = self.redis_time()
        entries = c.zrange(self.keys["holders"], 0, -1, withscores=True)
        infos = c.hgetall(self.keys["holders_info"])
        held: dict[str, int] = {}
        for value in c.hvals(self.keys["lease_by"]):
            held[lease_holder(value)] = held.get(lease_holder(value), 0) + 1
        out = []
        for raw, deadline in entries:
            name = raw.decode()
            info = json.loads(infos.get(raw, b"{}") or b"{}")
            ttl = 2 * float(info.get("heartbeat_secs", 0) or 0)
            out.append({
                "holder": name, **info, "alive": deadline / 1000 > now,
                "last_beat": deadline / 1000 - ttl if ttl else None,
                "in_flight": held.pop(name, 0),
            })
        in_flight = c.zcard(self.keys["lease"])
        unowned = in_flight - sum(h["in_flight"] for h in out)
        if unowned > 0:
            out.append({"holder": "", "alive": False, "last_beat": None, "in_flight": unowned})
        return out

    def sample(self, interval_secs: float, maxlen: int = 20000) -> bool:
        """Append one sample of the crawl's counts to the ``timeline`` stream, unless
        a process of the crawl did so less than ``interval_secs`` ago (sample.lua).
        Returns whether it wrote one."""
        keys = self._k("meta", "node", "frontier", "lease", "forced", "due", "timeline", *DERIVED_KEYS)
        return bool(self._scripts["sample"](
            keys=keys, args=[0, int(interval_secs * 1000), maxlen],
        ))

    def timeline(self, last: int = 0) -> list[dict[str, float]]:
        """The samples of :meth:`sample` (only the ``last`` ones when > 0), oldest
        first: ``t`` (s since the epoch), ``fetched``, ``failed``, ``known``,
        ``frontier``, ``forced``, ``in_flight``, ``holders`` (alive), ``due``
        (revisits scheduled)."""
        c: Any = self.client
        entries = (
            list(reversed(c.xrevrange(self.keys["timeline"], count=last))) if last > 0
            else c.xrange(self.keys["timeline"])
        )
        out = []
        for _, fields in entries:
            row = {k.decode(): float(v) for k, v in fields.items()}
            row["t"] = row["t"] / 1000.0
            out.append(row)
        return out

    def fetch_order(self) -> list[bytes]:
        """Ids of the fetched pages in the order they were first recorded."""
        c: Any = self.client
        raw = c.get(self.keys["order"]) or b""
        return [raw[i : i + ID_SIZE] for i in range(0, len(raw) - ID_SIZE + 1, ID_SIZE)]

    def ack(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> int:
        """Settle leases without a page (ack.lua): ``mode`` is ``"fail"`` or ``"release"``.

        ``leases`` holds ``(lease member, node id)`` pairs. Returns how many were settled.
        """
        if not leases:
            return 0
        keys, argv = self._ack_argv(mode, leases)
        return int(self._scripts["ack"](keys=keys, args=argv))

    def _ack_argv(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> tuple[list[str], list[Any]]:
        argv: list[Any] = [self._lua_ordering, mode]
        for member, id_ in leases:
            argv += [settle_arg(member, self.holder), id_]
        return self._settle_keys, argv

    def drop(self, keep: tuple[str, ...] = ()) -> int:
        """Delete every key of this crawl (``ipr:{<crawl id>}:*``, SCAN + DEL in
        batches of 500) but the full key names in ``keep``; returns how many keys went.
        For resets, replays and benchmarks: the crawl is gone for good."""
        spare = {*keep, *(k.encode() for k in keep)}
        keys = [k for k in self.client.scan_iter(match=f"ipr:{{{self.crawl_id}}}:*", count=1000) if k not in spare]
        for i in range(0, len(keys), 500):
            self.client.delete(*keys[i : i + 500])  # one slot: one DEL on a cluster too
        return len(keys)
