"""An earlier crawl's PageRank as the prior of a new crawl (``IPR_PRIOR_CRAWL``).

A site crawled again (a new scrapyd job, a new crawl id) need not start blind:
Baeza-Yates, Castillo, Marin & Rodriguez (WWW 2005, §4, "historical" strategy)
order a crawl by the PageRank the previous crawl's graph gives, and find it among
the best when that history exists. Here:

1. :func:`compute_pagerank` (``ipr-crawl pagerank --crawl-id OLD``, or the new
   crawl's start) takes OLD's collected graph (every known URL; out-links of the
   fetched pages), computes its converged PageRank
   (:func:`ipr_crawl.ordering.pagerank.converged`, networkx's computation on scipy),
   and stores ``PageRank x node count`` (mean 1) as float32 under OLD's keys
   ``pagerank:<bucket>``: small hashes of about 64 entries, which Redis keeps in its
   compact encoding (listpack; ziplist before Redis 7) instead of a hash table.
2. :func:`install_prior` copies those buckets to the new crawl's ``prior:<bucket>``
   keys (DUMP/RESTORE: the two crawls are under different hash tags, so the record
   scripts of the new crawl cannot read OLD's keys on a Redis Cluster) and writes
   ``prior_weight`` / ``prior_buckets`` into its ``meta`` last.
3. The record and enqueue scripts give a new URL the prior knows ``a = weight x
   value``; an unfetched URL's priority is its ordering's score ``s + a``
   (``prior_conf`` in ``store/lua/_prior.lua``; twin: ``ReferenceFrontier(prior=)``).

A bucket is the id's last 4 bytes (big-endian uint32) modulo the bucket count, a
power of two.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ipr_crawl.store.keys import crawl_keys

__all__ = [
    "PriorError", "PriorSummary", "bucket_count", "bucket_of", "compute_pagerank", "install_prior",
    "read_scores", "set_prior", "write_scores",
]

logger = logging.getLogger(__name__)

#: Mean entries per bucket hash: below Redis' hash-max-listpack-entries (128).
BUCKET_ENTRIES = 64


class PriorError(RuntimeError):
    """A prior cannot be used: no such earlier crawl, the crawl itself, or another
    prior than the one a resumed crawl was started with."""


@dataclass(frozen=True)
class PriorSummary:
    """What :func:`compute_pagerank` stored: URLs (nodes), edges, fetched pages of the
    earlier crawl, buckets, seconds spent, and the top URLs' ids with their values
    (PageRank x node count)."""

    crawl_id: str
    urls: int
    edges: int
    fetched: int
    buckets: int
    seconds: float
    top: list[tuple[bytes, float]]


def bucket_count(entries: int) -> int:
    """Buckets for ``entries`` values: the smallest power of two giving at most
    :data:`BUCKET_ENTRIES` per bucket on average (at least 1).

    >>> bucket_count(0), bucket_count(64), bucket_count(65), bucket_count(1_000_000)
    (1, 1, 2, 16384)
    """
    b = 1
    while b * BUCKET_ENTRIES < entries:
        b *= 2
    return b


def bucket_of(id_: bytes, buckets: int) -> int:
    """The bucket of an 8-byte node id: its last 4 bytes (big-endian) mod ``buckets``."""
    return int.from_bytes(id_[4:8], "big") % buckets


def write_scores(client: Any, prefix: str, scores: Iterable[tuple[bytes, float]], buckets: int,
                 chunk: int = 5000) -> int:
    """Write ``(8-byte id, value)`` pairs as float32 into the hashes ``prefix<bucket>``
    (pipelined, ``chunk`` ids per round trip). Returns the number written."""
    pack = struct.Struct(">f").pack
    written = 0
    pending: dict[int, dict[bytes, bytes]] = {}
    queued = 0

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for b, mapping in pending.items():
            pipe.hset(f"{prefix}{b}", mapping=mapping)
        pipe.execute()
        pending.clear()

    for id_, value in scores:
        pending.setdefault(bucket_of(id_, buckets), {})[id_] = pack(value)
        written += 1
        queued += 1
        if queued >= chunk:
            flush()
            queued = 0
    if pending:
        flush()
    return written


def read_scores(client: Any, prefix: str, buckets: int) -> dict[bytes, float]:
    """Every ``id -> value`` of the hashes ``prefix0 .. prefix<buckets-1>``."""
    unpack = struct.Struct(">f").unpack
    out: dict[bytes, float] = {}
    for b in range(buckets):
        for id_, raw in client.hgetall(f"{prefix}{b}").items():
            out[id_] = unpack(raw)[0]
    return out


def _delete_buckets(client: Any, prefix: str, buckets: int) -> None:
    for start in range(0, buckets, 1000):
        names = [f"{prefix}{b}" for b in range(start, min(buckets, start + 1000))]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.delete(name)
        pipe.execute()


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def compute_pagerank(client: Any, crawl_id: str, damping: float = 0.85,
                     log: Callable[[str], None] | None = None) -> PriorSummary:
    """Compute and store the converged PageRank of crawl ``crawl_id``'s collected
    graph (see the module docstring). Replaces what an earlier call stored. Meta
    fields written: ``pagerank_buckets``, ``pagerank_urls``, ``pagerank_fetched`` (the
    crawl's fetched count then), ``pagerank_at``.

    Raises :class:`PriorError` when there is no such crawl.
    """
    from ipr_crawl.ordering.pagerank import converged
    from ipr_crawl.ordering.params import OrderingParams
    from ipr_crawl.store.frontier import FrontierStore

    keys = crawl_keys(crawl_id)
    if not client.exists(keys["meta"]):
        raise PriorError(f"no crawl {crawl_id!r} in this Redis")
    t0 = time.perf_counter()
    fetched = _int(client.hget(keys["meta"], "fetched")) or 0
    store = FrontierStore(client, crawl_id, OrderingParams())  # reads records only
    ids, _, src, dst = store.collected_graph()
    if log:
        log(f"crawl {crawl_id!r}: {len(ids):,} URLs, {len(src):,} links; computing PageRank")
    values = converged(len(ids), src, dst, damping) * len(ids)
    buckets = bucket_count(len(ids))
    prefix = f"ipr:{{{crawl_id}}}:pagerank:"
    old = _int(client.hget(keys["meta"], "pagerank_buckets"))
    client.hdel(keys["meta"], "pagerank_buckets")
    if old:
        _delete_buckets(client, prefix, old)
    write_scores(client, prefix, zip(ids, values.tolist()), buckets)
    client.hset(keys["meta"], mapping={
        "pagerank_buckets": buckets, "pagerank_urls": len(ids), "pagerank_fetched": fetched,
        "pagerank_at": time.time(),
    })
    top = sorted(range(len(ids)), key=lambda i: -values[i])[:10]
    return PriorSummary(crawl_id, len(ids), len(src), fetched, buckets, time.perf_counter() - t0,
                        [(ids[i], float(values[i])) for i in top])


def install_prior(client: Any, crawl_id: str, prior_crawl: str, weight: float, damping: float = 0.85,
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Make crawl ``prior_crawl``'s PageRank the prior of crawl ``crawl_id`` (whose
    ``meta`` exists: call after :meth:`FrontierStore.open`). Computes it first when
    ``prior_crawl`` has none stored or fetched pages since (:func:`compute_pagerank`).
    A resumed crawl keeps the prior it has; only its weight follows the setting.

    Returns ``{"prior_crawl", "urls", "buckets", "weight", "computed", "installed"}``.
    Raises :class:`PriorError` for the crawl itself, an unknown earlier crawl
    (listing the crawls there), or a crawl started with another prior.
    """
    from ipr_crawl.store.inspect import crawls

    if prior_crawl == crawl_id:
        raise PriorError(f"IPR_PRIOR_CRAWL={prior_crawl!r} is this crawl itself; name an earlier crawl")
    new, old = crawl_keys(crawl_id), crawl_keys(prior_crawl)
    have, have_buckets, have_urls = client.hmget(new["meta"], "prior_crawl", "prior_buckets", "prior_urls")
    if have is not None:
        have = have.decode() if isinstance(have, bytes) else have
        if have != prior_crawl:
            raise PriorError(
                f"crawl {crawl_id!r} was started with IPR_PRIOR_CRAWL={have!r}, not {prior_crawl!r}; "
                "its queued URLs carry that prior. Use another IPR_CRAWL_ID or the same IPR_PRIOR_CRAWL")
        if have_buckets is not None:
            client.hset(new["meta"], "prior_weight", repr(float(weight)))
            return {"prior_crawl": prior_crawl, "urls": _int(have_urls) or 0, "buckets": _int(have_buckets),
                    "weight": weight, "computed": False, "installed": False}
    if not client.exists(old["meta"]):
        found = [c for c in crawls(client) if c != crawl_id]
        raise PriorError(
            f"IPR_PRIOR_CRAWL={prior_crawl!r}: no such crawl in this Redis; crawls there: "
            + (", ".join(repr(c) for c in found) or "none"))
    fetched, buckets, done = client.hmget(old["meta"], "fetched", "pagerank_buckets", "pagerank_fetched")
    computed = buckets is None or _int(done) != (_int(fetched) or 0)
    if computed:
        summary = compute_pagerank(client, prior_crawl, damping, log)
        buckets_n, urls = summary.buckets, summary.urls
    else:
        buckets_n = int(buckets)
        urls = _int(client.hget(old["meta"], "pagerank_urls")) or 0
    src_prefix, dst_prefix = f"ipr:{{{prior_crawl}}}:pagerank:", f"ipr:{{{crawl_id}}}:prior:"
    client.hset(new["meta"], "prior_crawl", prior_crawl)
    for start in range(0, buckets_n, 500):
        part = range(start, min(buckets_n, start + 500))
        pipe = client.pipeline(transaction=False)
        for b in part:
            pipe.dump(f"{src_prefix}{b}")
        dumps = pipe.execute()
        pipe = client.pipeline(transaction=False)
        for b, data in zip(part, dumps):
            if data is not None:
                pipe.restore(f"{dst_prefix}{b}", 0, data, replace=True)
        pipe.execute()
    # last: the scripts see the prior only once it is complete
    client.hset(new["meta"], mapping={"prior_weight": repr(float(weight)), "prior_buckets": buckets_n,
                                      "prior_urls": urls})
    return {"prior_crawl": prior_crawl, "urls": urls, "buckets": buckets_n, "weight": weight,
            "computed": computed, "installed": True}


def set_prior(client: Any, crawl_id: str, scores: Iterable[tuple[bytes, float]], weight: float) -> int:
    """Give crawl ``crawl_id`` a prior straight from ``(8-byte id, value)`` pairs
    (value: PageRank x node count, as :func:`compute_pagerank` stores it) — for
    ``ipr-crawl simulate --prior-graph`` and tests. Returns the number of URLs."""
    items = list(scores)
    buckets = bucket_count(len(items))
    meta = crawl_keys(crawl_id)["meta"]
    write_scores(client, f"ipr:{{{crawl_id}}}:prior:", items, buckets)
    client.hset(meta, mapping={"prior_crawl": "", "prior_weight": repr(float(weight)), "prior_buckets": buckets,
                               "prior_urls": len(items)})
    return len(items)
