"""A page's record call, pipelined: :class:`PipelinedRecord`, a part of
:class:`ipr_crawl.store.FrontierStore`.

:meth:`~PipelinedRecord.send_record_page` writes the record script's call
(record_page.lua) on a connection of its own and reads its reply at the next call
or at :meth:`~PipelinedRecord.settle_record`, so the crawler parses the next page
while Redis runs the script; a lost reply or a NOSCRIPT is answered by running the
call again through the client. After each call, an optional ``WAIT`` for replicas
(:meth:`~PipelinedRecord.wait_for_replicas`). Import it from
:mod:`ipr_crawl.store.frontier` or :mod:`ipr_crawl.store` as ``FrontierStore``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ipr_crawl.store.connection import is_cluster, wait_replicas
from ipr_crawl.store.record import MAX_PRIORITY, PRIORITY_FORMAT, Link, RecordResult, record_result
from ipr_crawl.store.settling import settle_arg

__all__ = ["PipelinedRecord"]


#: Replies of a Redis Cluster node that mean "not here, not now": the script did not run.
_REDIRECTS = (
    redis.exceptions.MovedError, redis.exceptions.AskError, redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)


class PipelinedRecord:
    """The record calls of :class:`~ipr_crawl.store.FrontierStore`: one round trip
    (:meth:`record_page`) or pipelined (:meth:`send_record_page`). Uses the store's
    ``client``, ``keys``, scripts and the constant head of the record scripts' ARGV."""

    client: redis.Redis
    keys: dict[str, str]
    _scripts: dict[str, Any]
    _record_keys: list[str]
    _record_head: list[Any]
    #: this process's lease holder id, named in every settle ("": whoever holds it)
    holder: str = ""
    #: a live holder's lease is extended past the pop's lease time up to this age (s;
    #: IPR_LEASE_MAX_SECS; 0: never extended)
    lease_max_secs: float = 0.0
    #: leases of live holders the last pop moved back, past lease_max_secs
    last_overdue: int = 0
    #: a holder's heartbeat deadline (2 x IPR_HEARTBEAT_SECS): a pop by a holder found
    #: lost registers it again with it (0: never)
    holder_ttl_secs: float = 0.0
    #: IPR_MAX_RELEASES: a lease going back more often for a lost holder or its age is
    #: dead-lettered (_reclaim.lua; 0: no limit)
    max_releases: int = 0
    #: the crawl's prior (IPR_PRIOR_CRAWL, store/prior.py): its number of hash buckets
    #: ``prior:<n>``, 0 without one; a call that may create nodes names the buckets of
    #: its ids in KEYS (:meth:`prior_keys`)
    prior_buckets: int = 0

    def prior_keys(self, ids: Sequence[bytes]) -> list[str]:
        """The prior's hash buckets ``prior:<n>`` where ids ``ids`` would be (the
        bucket of an id: its last 4 bytes, big-endian, mod :attr:`prior_buckets`, as
        _prior.lua looks it up), once each, sorted; [] without a prior."""
        n = self.prior_buckets
        if not n:
            return []
        base = self.keys["meta"][: -len("meta")] + "prior:"
        return [f"{base}{b}" for b in sorted({int.from_bytes(i[4:8], "big") % n for i in ids})]

    def _record_keys_of(self, argv: Sequence[Any]) -> list[str]:
        """The KEYS of a record call of argument list ``argv`` (:meth:`_record_argv`):
        the record keys, then the prior's buckets of its links."""
        if not self.prior_buckets:
            return self._record_keys
        at = len(self._record_head) + 3  # the link count, then (id, tie, payload) per link
        return [*self._record_keys, *self.prior_keys(argv[at + 1 : at + 1 + 3 * int(argv[at]) : 3])]

    def _open_record_pipeline(self) -> None:
        """No call outstanding, no connection yet, no WAIT."""
        # send_record_page's connection and its call whose reply is not read yet
        self._record_conn: redis.connection.AbstractConnection | None = None
        self._record_pool: Any = None
        # wait_for_replicas: (replicas, timeout ms, on_short) or None
        self._wait: tuple[int, int, Callable[[], Any] | None] | None = None
        # after a short WAIT, none is sent until then (time.monotonic(); see _waited)
        self._wait_paused_until = 0.0
        self._outstanding_wait = False
        self._outstanding: tuple[list[Any], Callable[[RecordResult], None] | None] | None = None

    def _record_argv(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes, bucket: int | None = None
    ) -> list[Any]:
        argv: list[Any] = [*self._record_head, settle_arg(lease, self.holder), page_id, page_tie, len(links)]
        for link in links:
            argv += [link.id, link.tie, link.payload]
        if bucket is not None:
            argv += [bucket, bytes(link.bucket for link in links)]
        fps = any(link.seen_fp for link in links)
        rps = any(link.priority for link in links)
        if fps or rps:
            if bucket is None:
                argv += ["", ""]
            argv.append("".join(link.seen_fp or " " * 40 for link in links) if fps else "")
        if rps:  # 4 bytes each, big-endian signed (record_page.lua)
            argv.append(b"".join(struct.pack(PRIORITY_FORMAT, max(-MAX_PRIORITY, min(MAX_PRIORITY, link.priority)))
                                 for link in links))
        return argv

    def record_page(
        self, page_id: bytes, page_tie: int, links: Sequence[Link], lease: bytes = b"", bucket: int | None = None,
    ) -> RecordResult:
        """Record a fetched page with its distinct out-links (record_page.lua).

        ``links`` in the order new URLs are numbered; ``tie`` fields as
        :func:`ipr_crawl.ordering.urls.tie_for` gives them. ``bucket`` (bucket mode,
        :mod:`ipr_crawl.store.buckets`): this store's bucket number; links whose
        ``bucket`` differs go to the outbox. One round trip.
        """
        return self._record_now(self._record_argv(page_id, page_tie, links, lease, bucket))

    def _record_now(self, argv: list[Any]) -> RecordResult:
        result = record_result(self._scripts["record_page"](keys=self._record_keys_of(argv), args=argv))
        if self._waiting():
            assert self._wait is not None
            n, ms, _ = self._wait
            # WAIT has no key: on a cluster it goes to the node of the crawl's slot
            self._waited(wait_replicas(self.client, self.keys["meta"], n, ms))
        return result

    def wait_for_replicas(self, replicas: int, timeout_ms: int, on_short: Callable[[], Any] | None = None) -> None:
        """After every record call, ``WAIT replicas timeout_ms`` on the same connection
        (Redis ``WAIT``: block until that many replicas acknowledged the writes so far),
        so that a failover does not lose a recorded page. A reply with fewer replicas
        calls ``on_short()`` (a stat) and the crawl goes on."""
        self._wait = (int(replicas), int(timeout_ms), on_short)

    def _waiting(self) -> bool:
        return self._wait is not None and time.monotonic() >= self._wait_paused_until

    def _waited(self, acked: Any) -> None:
        """A WAIT's reply: fewer replicas than asked calls ``on_short`` and sends no WAIT
        for the next 5 s (a master without replicas, after a failover, would make each
        one last its whole timeout, which Redis checks only 10 times a second)."""
        if self._wait is not None and int(acked) < self._wait[0]:
            self._wait_paused_until = time.monotonic() + 5.0
            if self._wait[2] is not None:
                self._wait[2]()

    def send_record_page(
        self,
        page_id: bytes,
        page_tie: int,
        links: Sequence[Link],
        lease: bytes = b"",
        then: Callable[[RecordResult], None] | None = None,
        bucket: int | None = None,
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
        self._outstanding_wait = False
        argv = self._record_argv(page_id, page_tie, links, lease, bucket)
        keys = self._record_keys_of(argv)
        self._outstanding = (argv, then)
        try:
            self._record_conn = self._record_conn or self._new_record_conn()
            self._record_conn.send_command("EVALSHA", self._scripts["record_page"].sha, len(keys), *keys, *argv)
            self._outstanding_wait = self._waiting()
            if self._outstanding_wait:
                assert self._wait is not None
                self._record_conn.send_command("WAIT", self._wait[0], self._wait[1])
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
            try:
                result = record_result(self._record_conn.read_response())
            finally:
                if self._outstanding_wait:  # the WAIT's reply, whatever the script's was
                    self._waited(self._record_conn.read_response())
        except redis.exceptions.NoScriptError:
            result = self._record_again(argv, then)
        except (redis.ConnectionError, redis.TimeoutError, *_REDIRECTS):
            # a lost connection, or on a Redis Cluster the slot moved (MOVED, ASK), is
            # migrating or the cluster is failing over (TRYAGAIN, CLUSTERDOWN): the
            # script did not run, or ran and is idempotent; the client finds the node
            self._drop_record_conn()
            result = self._record_again(argv, then)
        if then is not None:
            then(result)

    def _record_again(self, argv: list[Any], then: Callable[[RecordResult], None] | None) -> RecordResult:
        """Run an outstanding record call again through the client; if that fails too,
        the call stays outstanding (:meth:`take_outstanding`) and the error is raised."""
        try:
            return self._record_now(argv)
        except BaseException:
            self._outstanding = (argv, then)
            raise

    def take_outstanding(self) -> tuple[list[Any], Callable[[RecordResult], None] | None] | None:
        """The record call sent (or to be sent again) whose reply was not handled, removed:
        its argument list and ``then``, for :meth:`record_argv` on another thread (None if none)."""
        taken, self._outstanding = self._outstanding, None
        self._outstanding_wait = False
        if taken is not None:
            self._drop_record_conn()
        return taken

    def record_argv(self, argv: list[Any]) -> RecordResult:
        """:meth:`record_page` of an argument list :meth:`take_outstanding` gave."""
        return self._record_now(argv)

    def _new_record_conn(self) -> redis.connection.AbstractConnection:
        # On a Redis Cluster: a connection to the master that owns the crawl's slot
        # now (looked up again after every error, see settle_record).
        client: Any = self.client
        pool = client.record_pool(self.keys["meta"]) if is_cluster(client) else client.connection_pool
        self._record_pool = pool
        try:
            return pool.get_connection()
        except TypeError:  # redis-py < 6 wants a command name
            return pool.get_connection("EVALSHA")

    def _drop_record_conn(self) -> None:
        conn, self._record_conn = self._record_conn, None
        if conn is not None:
            conn.disconnect()
            self._record_pool.release(conn)

    def close(self) -> None:
        """Settle an outstanding record call and give its connection back."""
        try:
            self.settle_record()
        finally:
            if self._record_conn is not None:
                self._record_pool.release(self._record_conn)
                self._record_conn = None
