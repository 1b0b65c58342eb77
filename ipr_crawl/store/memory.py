"""A crawl's Redis when memory runs out: the server's eviction policy read at start, a
refused write (``OOM``) recognised, and the server's memory for ``ipr-crawl status``.

Redis with ``maxmemory`` set either refuses writes once it is full (``noeviction``) or
evicts keys to make room (``allkeys-*``: any key; ``volatile-*``: keys with an expiry),
Redis documentation, "Key eviction" (https://redis.io/docs/latest/develop/reference/eviction/).
An evicted frontier entry, node or lease is a page lost without a word, so a policy that
can evict the crawl's keys is refused at start unless ``IPR_REDIS_ALLOW_EVICTION``. The
crawl's keys that carry an expiry (and that a ``volatile-*`` policy may evict) are listed
in :data:`EXPIRING_KEYS` with what their eviction costs. A refused write stops the crawl
(``ipr_redis_full``) with its leases kept for the next run.
"""

from __future__ import annotations

from typing import Any

import redis

from ipr_crawl.store.connection import FrontierUnavailable, is_cluster

__all__ = [
    "EXPIRING_KEYS", "EvictingRedis", "RedisFull", "check_eviction", "crawl_memory", "key_usage", "describe", "eviction_policy", "is_full", "memory_line", "server_memory",
]

#: The crawl's keys with an expiry, which a ``volatile-*`` policy may evict: what it costs.
EXPIRING_KEYS = {
    "op:<holder>:<n>": "a forced enqueue's call id: a call sent again after a lost reply may queue its request twice",
    "rerun": "the claim of a finished crawl's rerun: two processes may start it afresh at once",
    "revisit meta _budget_lock": "the revisit budget's period lock: two processes may refresh one period's budget",
}


class EvictingRedis(FrontierUnavailable):
    """The crawl's Redis may evict the crawl's keys when full (its ``maxmemory-policy``)."""


class RedisFull(FrontierUnavailable):
    """The crawl's Redis is full: it refused the crawl's first writes at start (``OOM``)."""

    def __init__(self, where: str, client: Any) -> None:
        super().__init__(
            f"{where} is full ({memory_line(client) or 'its memory cannot be read'}) and refused the crawl's "
            "first write: nothing was fetched. Raise the server's maxmemory (CONFIG SET maxmemory ...) or free "
            "memory, then run again"
        )


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a write for lack of memory: ``OOM command not
    allowed when used memory > 'maxmemory'``, raised as redis-py's
    :class:`~redis.exceptions.OutOfMemoryError` for a command, or inside the
    :class:`~redis.exceptions.ResponseError` of a script that tried to write."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or (
        isinstance(exc, redis.ResponseError) and "OOM command not allowed" in str(exc)
    )


def _nodes(client: Any) -> list[Any]:
    """The clients of the servers that hold the crawl: each master of a Redis Cluster."""
    if is_cluster(client):
        return [node.redis_connection or client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def eviction_policy(client: Any) -> tuple[str, int] | None:
    """``(maxmemory-policy, maxmemory in bytes)`` of the crawl's server (the first master of a
    Cluster whose policy evicts, else the first), or None when the server refuses
    ``CONFIG GET`` (a managed Redis): then nothing is known."""
    found: tuple[str, int] | None = None
    for node in _nodes(client):
        try:
            conf = node.config_get("maxmemory*")
        except redis.ResponseError:
            return None
        conf = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in conf.items()}
        here = (str(conf.get("maxmemory-policy", "noeviction")), int(conf.get("maxmemory", 0) or 0))
        if found is None or (here[1] and here[0] != "noeviction"):
            found = here
    return found


def check_eviction(client: Any, where: str, allowed: bool) -> str:
    """At start: raises :class:`EvictingRedis` when the server has a ``maxmemory`` and an
    ``allkeys-*`` policy (or ``volatile-*``, which only the keys of :data:`EXPIRING_KEYS`
    risk: accepted), unless ``allowed`` (``IPR_REDIS_ALLOW_EVICTION``). Returns a line to
    log once per crawl ("" for nothing to say): the policy accepted and what it may cost,
    or that the policy cannot be read."""
    found = eviction_policy(client)
    if found is None:
        return (f"{where} does not allow CONFIG GET: its maxmemory-policy is unknown; a policy other than "
                "noeviction may evict the crawl's keys when the server is full, and lose pages without a word")
    policy, maxmemory = found
    if not maxmemory or policy == "noeviction":
        return ""
    if policy.startswith("volatile-"):
        costs = "; ".join(f"{key}: {cost}" for key, cost in EXPIRING_KEYS.items())
        return (f"{where} evicts keys with an expiry when full (maxmemory-policy {policy}); the crawl's keys "
                f"with one: {costs}")
    if allowed:
        return (f"{where} evicts any key when full (maxmemory-policy {policy}); allowed by "
                "IPR_REDIS_ALLOW_EVICTION: pages may be lost without a word once it is full")
    raise EvictingRedis(
        f"{where} evicts any key when it is full (maxmemory-policy {policy}, maxmemory {maxmemory} bytes): the "
        "crawl's frontier and leases would be lost without a word. Set the policy to noeviction "
        "(CONFIG SET maxmemory-policy noeviction, or maxmemory-policy in redis.conf), use another server, or "
        "accept the risk with -s IPR_REDIS_ALLOW_EVICTION=True"
    )


def server_memory(client: Any) -> dict[str, int]:
    """``{"used": bytes, "max": bytes (0: no limit)}`` summed over the crawl's servers
    (``INFO memory``); ``{}`` when it cannot be read."""
    used = maximum = 0
    try:
        for node in _nodes(client):
            info = node.info("memory")
            used += int(info.get("used_memory", 0))
            maximum += int(info.get("maxmemory", 0))
    except redis.RedisError:
        return {}
    return {"used": used, "max": maximum}


def crawl_memory(client: Any, keys: list[str]) -> int:
    """Bytes the crawl's ``keys`` take (``MEMORY USAGE``, Redis's estimate for large
    aggregates); keys gone meanwhile count 0."""
    total = 0
    for key in keys:
        try:
            total += int(client.memory_usage(key) or 0)
        except redis.ResponseError:  # MEMORY USAGE refused (a managed Redis): unknown
            return 0
    return total


def key_usage(client: Any, crawl_id: str) -> dict[str, int]:
    """Bytes of each key of crawl ``crawl_id`` (``ipr:{<id>}:*``, by its name after the hash
    tag), exact: ``MEMORY USAGE … SAMPLES 0`` (every element counted; slow on big keys, for
    benchmarks and audits). Keys gone meanwhile count 0."""
    usage: dict[str, int] = {}
    for key in client.scan_iter(match=f"ipr:{{{crawl_id}}}:*", count=1000):
        name = key.decode().split("}:", 1)[1]
        usage[name] = usage.get(name, 0) + int(client.memory_usage(key, samples=0) or 0)
    return usage


def describe(mem: dict[str, int]) -> str:
    """``used 1.1 MB of maxmemory 1.0 MB`` (or ``of no maxmemory``) of :func:`server_memory`'s dict."""
    limit = f"maxmemory {mem['max'] / 1e6:,.1f} MB" if mem["max"] else "no maxmemory"
    return f"used {mem['used'] / 1e6:,.1f} MB of {limit}"


def memory_line(client: Any) -> str:
    """:func:`describe` of the crawl's server, for a log line ("" when it cannot be read)."""
    mem = server_memory(client)
    return describe(mem) if mem else ""
