"""Upgrades of a crawl's keyspace written by an earlier schema
(:data:`ipr_crawl.store.keys.SCHEMA_VERSION`), in place, as :meth:`FrontierStore.open`
finds it. Each step is one function ``from_<n>(store)`` that rewrites what changed and
sets the schema to ``n + 1``; a step that fails halfway can run again (each reads
what is left of the old layout)."""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

from ipr_crawl.ordering.reference import resid_level
from ipr_crawl.store.record import parse_record

#: a :class:`~ipr_crawl.store.FrontierStore` (not imported: it imports this module)
FrontierStore = Any

__all__ = ["upgrade"]

logger = logging.getLogger(__name__)


def upgrade(store: FrontierStore, version: int | None) -> int | None:
    """Upgrade ``store``'s crawl from schema ``version`` step by step; returns the
    version it reached (unchanged when no step applies: the caller refuses it)."""
    steps = {3: from_3, 4: from_4, 5: from_5, 6: from_6}
    while version in steps:
        steps[version](store)
        version += 1
    return version


def from_3(store: FrontierStore) -> None:
    """Schema 3 -> 4: a lease's score was its deadline, now it is when it was taken.
    Leases in flight are counted as taken now (they have no holder: the lease time
    bounds them)."""
    c: Any = store.client
    now = int(time.time() * 1000)
    members = c.zrange(store.keys["lease"], 0, -1)
    pipe = c.pipeline(transaction=True)
    if members:
        pipe.zadd(store.keys["lease"], dict.fromkeys(members, now))
    pipe.hset(store.keys["meta"], "schema", 4)
    pipe.execute()
    logger.info("ipr-crawl: crawl %r upgraded from schema 3 to 4", store.crawl_id)


def from_4(store: FrontierStore) -> None:
    """Schema 4 -> 5: push's residual index ``resid`` was scored by ``a / outdeg``;
    it is now scored by that value's level
    (:func:`ipr_crawl.ordering.reference.resid_level`). Every entry is re-scored from
    its node record (entries no longer indexed are removed); other orderings have no
    entries. Cost: one pass over ``resid``, in chunks of 1,000."""
    c: Any = store.client
    resid, eps = store.keys["resid"], float(store.params.push_epsilon)
    members = [m for m, _ in c.zscan_iter(resid, count=1000)]
    for i in range(0, len(members), 1000):
        chunk = members[i : i + 1000]
        raws = c.hmget(store.keys["node"], chunk)
        levels: dict[bytes, int] = {}
        gone: list[bytes] = []
        for m, raw in zip(chunk, raws):
            head = parse_record(raw)[0] if raw else None
            if head and head.state == 2 and head.outdeg > 0 and head.a > 0 and head.a >= eps:
                levels[m] = resid_level(head.a / head.outdeg)
            else:
                gone.append(m)
        pipe = c.pipeline(transaction=False)
        if levels:
            pipe.zadd(resid, levels)
        if gone:
            pipe.zrem(resid, *gone)
        pipe.execute()
    c.hset(store.keys["meta"], "schema", 5)
    logger.info("ipr-crawl: crawl %r upgraded from schema 4 to 5 (%d push residuals re-indexed)",
                store.crawl_id, len(members))


def from_5(store: FrontierStore) -> None:
    """Schema 5 -> 6: larger-sites-first kept one queue per site, keys ``site:<hash>``
    (members scored by seq), which a script had to name itself; they are now one
    sorted set ``siteq`` of ``8-byte site hash .. member`` (all scores 0, so ordered by
    site, then seq). Every site in ``sites`` has its queue moved, 1,000 members per
    call; other orderings have none. The ``sites`` counts do not change."""
    c: Any = store.client
    base = store.keys["meta"][: -len("meta")]
    moved = 0
    for site, _ in c.zscan_iter(store.keys["sites"], count=1000):
        name = site.decode() if isinstance(site, bytes) else site
        key, prefix = f"{base}site:{name}", struct.pack(">Q", int(name))
        while True:
            members = c.zrange(key, 0, 999)
            if not members:
                break
            pipe = c.pipeline(transaction=True)
            pipe.zadd(store.keys["siteq"], {prefix + m: 0 for m in members})
            pipe.zrem(key, *members)
            pipe.execute()
            moved += len(members)
    c.hset(store.keys["meta"], "schema", 6)
    logger.info("ipr-crawl: crawl %r upgraded from schema 5 to 6 (%d queued URLs of larger-sites-first moved)",
                store.crawl_id, moved)


def from_6(store: FrontierStore) -> None:
    """Schema 6 -> 7: nothing stored changes. A lease written by schema 7 names its take
    (``<holder>#<take>``) and a payload may be framed as a plain request (format 3,
    :mod:`ipr_crawl.store.payload`); this release reads both forms, an earlier one does
    not: the new number makes an earlier release refuse the crawl with a clear error
    instead of dropping its requests as undecodable."""
    store.client.hset(store.keys["meta"], "schema", 7)
    logger.info("ipr-crawl: crawl %r upgraded from schema 6 to 7", store.crawl_id)
