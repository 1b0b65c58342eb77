"""Finished crawls and their archives: what a rerun of a finished crawl starts from.

A crawl that closed with Scrapy's reason ``finished`` and nothing pending anywhere
(frontier, forced queue, in flight) is marked finished in its ``meta``
(:func:`mark_finished`). Run again with the same crawl id, it starts afresh, as
plain Scrapy and scrapy-redis (``SCHEDULER_PERSIST=False``) do, but remembers:
:func:`archive` moves its keys to the crawl id ``<id>~<n>`` (``n`` one more than the
newest archive's), and the scheduler makes that archive the new crawl's prior
(:mod:`ipr_crawl.store.prior`). :func:`prune` keeps the newest ``IPR_KEEP_CRAWLS``
archives and deletes older ones.

Keys: ``ipr:{<id>}:<name>`` goes to ``ipr:{<id>~<n>}:<name>``; bucket mode's
``ipr:{<id>:<b>}:<name>`` to ``ipr:{<id>~<n>:<b>}:<name>``, so each archive keeps one
hash tag (per bucket) as a crawl does. On one server a key is RENAMEd (O(1)); on a
Redis Cluster, where the two names lie in different slots, DUMP + RESTORE + DEL (as
:func:`~ipr_crawl.store.prior.install_prior` copies a prior).

Several processes of one crawl may start at once: the first to take the crawl's
``rerun`` key (``ipr:{<id>}:rerun``, SET NX with an expiry of :data:`STALE_CLAIM_SECS`)
archives it and opens the new crawl, prior included, then deletes the key
(:func:`release`); the others wait until the key is gone (:func:`wait_for_rerun`) and
join the new crawl. The ``meta`` moves last, so an archive interrupted midway (the
process killed) is finished by the next start, once the key expired.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from ipr_crawl.store.frontier import IncompatibleCrawl
from ipr_crawl.store.keys import crawl_keys

__all__ = [
    "ArchiveBusy", "archive", "archive_id", "archives", "claim", "clear_finished", "crawl_key_names", "drop_crawl",
    "finished_info", "is_archive_id", "mark_finished", "prune", "release", "rerun_holder", "wait_for_rerun",
]

#: The ``rerun`` key expires after this (s): a process that died while starting a
#: finished crawl afresh holds it no longer, and the next start takes over.
STALE_CLAIM_SECS = 120.0
#: The key a process holds while it starts a finished crawl afresh (under the crawl's tag).
RERUN_KEY = "rerun"

_ARCHIVE = re.compile(r"^(?P<base>.+)~(?P<n>[0-9]+)$")
_ARCHIVE_OR_BUCKET = re.compile(r"^.+~[0-9]+(:[0-9]+)?$")


class ArchiveBusy(IncompatibleCrawl):
    """Another process archives the finished crawl and did not finish in time (an
    :class:`IncompatibleCrawl`: the crawl refuses to start with one ERROR line)."""


def archive_id(crawl_id: str, n: int) -> str:
    """The id of a crawl's ``n``-th archive.

    >>> archive_id("books.catalog", 2)
    'books.catalog~2'
    """
    return f"{crawl_id}~{n}"


def is_archive_id(crawl_id: str) -> bool:
    """Whether ``crawl_id`` names an archive (``<id>~<n>``) or one of its buckets
    (``<id>~<n>:<b>``).

    >>> is_archive_id("books.catalog~2"), is_archive_id("books.catalog~2:0"), is_archive_id("books.catalog")
    (True, True, False)
    """
    return _ARCHIVE_OR_BUCKET.match(crawl_id) is not None


def _glob(text: str) -> str:
    """``text`` with the glob characters of SCAN's MATCH escaped."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _text(value: Any) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def finished_info(client: Any, crawl_id: str) -> dict[str, Any] | None:
    """``{"at", "reason", "fetched", "failed", "next"}`` of a crawl marked finished, else
    None (``next``: :func:`mark_finished`'s ``next_run``, "afresh" when not stored)."""
    at, reason, fetched, failed, nxt = client.hmget(
        crawl_keys(crawl_id)["meta"], "finished", "finished_reason", "finished_fetched", "finished_failed",
        "finished_next")
    if at is None:
        return None
    return {"at": _float(at), "reason": _text(reason), "fetched": int(fetched or 0), "failed": int(failed or 0),
            "next": _text(nxt) or "afresh"}


def mark_finished(client: Any, crawl_id: str, reason: str, fetched: int = 0, failed: int = 0,
                  next_run: str = "afresh") -> None:
    """Mark crawl ``crawl_id`` finished: its ``meta`` gets ``finished`` (when),
    ``finished_reason``, the crawl's ``fetched`` and ``failed`` counts then (a
    bucketed crawl keeps its counters per bucket) and ``finished_next``, what a next run
    with the closing run's settings does (``afresh``, ``persist``, ``revisits``)."""
    client.hset(crawl_keys(crawl_id)["meta"], mapping={
        "finished": repr(time.time()), "finished_reason": reason, "finished_fetched": fetched,
        "finished_failed": failed, "finished_next": next_run,
    })


def clear_finished(client: Any, crawl_id: str) -> None:
    """The crawl goes on (kept, or revisited): no longer marked finished; ``kept_at``
    (when) tells the processes that open it next to this one that it finished."""
    meta = crawl_keys(crawl_id)["meta"]
    client.hdel(meta, "finished", "finished_reason", "finished_fetched", "finished_failed", "finished_next")
    client.hset(meta, "kept_at", repr(time.time()))


def bucket_ids(client: Any, crawl_id: str) -> list[str]:
    """The ids of crawl ``crawl_id``'s buckets (``<id>:<b>``, from its ``meta``'s bucket
    count); ``[]`` for a crawl not in bucket mode."""
    buckets = client.hget(crawl_keys(crawl_id)["meta"], "buckets")
    return [f"{crawl_id}:{b}" for b in range(int(buckets or 0))]


def crawl_key_names(client: Any, crawl_id: str) -> list[str]:
    """Every key of crawl ``crawl_id``: ``ipr:{<id>}:*`` and, in bucket mode, each
    bucket's ``ipr:{<id>:<b>}:*`` (SCAN)."""
    keys: list[str] = []
    for cid in [crawl_id, *bucket_ids(client, crawl_id)]:
        keys += [_text(k) or "" for k in client.scan_iter(match=f"ipr:{{{_glob(cid)}}}:*", count=1000)]
    return keys


def drop_crawl(client: Any, crawl_id: str) -> int:
    """Delete every key of crawl ``crawl_id`` (SCAN + DEL in batches of 500, one hash
    tag per DEL); returns how many went."""
    n = 0
    for cid in [*bucket_ids(client, crawl_id), crawl_id]:  # the crawl-wide meta (bucket count) last
        keys = list(client.scan_iter(match=f"ipr:{{{_glob(cid)}}}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        n += len(keys)
    return n


def archives(client: Any, crawl_id: str) -> list[dict[str, Any]]:
    """The archives of crawl ``crawl_id``, oldest first: ``crawl_id`` (``<id>~<n>``),
    ``n``, ``fetched``, ``failed``, ``finished`` and ``archived`` (s since the epoch)."""
    found = []
    for key in client.scan_iter(match=f"ipr:{{{_glob(crawl_id)}~*}}:meta", count=1000):
        text = _text(key) or ""
        cid = text[len("ipr:{") : text.rindex("}:meta")]
        m = _ARCHIVE.match(cid)
        if m is None or m["base"] != crawl_id:  # a bucket's meta (<id>~<n>:<b>), or another crawl
            continue
        fetched, failed, finished, archived = client.hmget(
            key, "finished_fetched", "finished_failed", "finished", "archived")
        found.append({"crawl_id": cid, "n": int(m["n"]), "fetched": int(fetched or 0), "failed": int(failed or 0),
                      "finished": _float(finished), "archived": _float(archived)})
    return sorted(found, key=lambda a: a["n"])


def _move(client: Any, keys: list[tuple[str, str]], cluster: bool) -> None:
    if not cluster:
        for start in range(0, len(keys), 500):
            pipe = client.pipeline(transaction=False)
            for src, dst in keys[start : start + 500]:
                pipe.rename(src, dst)
            pipe.execute()
        return
    for src, dst in keys:  # one at a time: a key may be large (the link graph)
        data = client.dump(src)
        if data is None:
            continue
        ttl = client.pttl(src)
        client.restore(dst, max(0, int(ttl)), data, replace=True)
        client.delete(src)


def rerun_key(crawl_id: str) -> str:
    """The full name of crawl ``crawl_id``'s ``rerun`` key (its reset's claim too)."""
    return f"ipr:{{{crawl_id}}}:{RERUN_KEY}"


def claim(client: Any, crawl_id: str, holder: str) -> bool:
    """Take the ``rerun`` key of crawl ``crawl_id`` for ``holder`` (this process): True
    if it was free. Expires after :data:`STALE_CLAIM_SECS`."""
    value = json.dumps({"holder": holder, "at": time.time()})
    return bool(client.set(rerun_key(crawl_id), value, nx=True, px=int(STALE_CLAIM_SECS * 1000)))


def rerun_holder(client: Any, crawl_id: str) -> str | None:
    """The holder of crawl ``crawl_id``'s ``rerun`` key (a process starting it
    afresh), or None."""
    raw = client.get(rerun_key(crawl_id))
    if raw is None:
        return None
    try:
        return str(json.loads(raw).get("holder") or "?")
    except (ValueError, AttributeError):
        return "?"


def release(client: Any, crawl_id: str, holder: str) -> None:
    """Delete the ``rerun`` key if ``holder`` holds it (the new crawl is open)."""
    if rerun_holder(client, crawl_id) == holder:
        client.delete(rerun_key(crawl_id))


def archive(client: Any, crawl_id: str, cluster: bool = False) -> str:
    """Move the keys of finished crawl ``crawl_id`` to its next archive id (see the
    module docstring; call with the ``rerun`` key held, :func:`claim`); returns that
    id. The archive's ``meta`` gets ``archived`` (when) and ``archived_from``."""
    existing = archives(client, crawl_id)
    target = archive_id(crawl_id, (existing[-1]["n"] if existing else 0) + 1)
    buckets = bucket_ids(client, crawl_id)
    pairs: list[tuple[str, str]] = []
    for cid, new in [*((b, f"{target}:{b.rsplit(':', 1)[1]}") for b in buckets), (crawl_id, target)]:
        prefix = f"ipr:{{{cid}}}:"
        for key in client.scan_iter(match=f"{_glob(prefix)}*", count=1000):
            name = (_text(key) or "")[len(prefix):]
            if cid == crawl_id and name in ("meta", RERUN_KEY):
                continue
            pairs.append((prefix + name, f"ipr:{{{new}}}:{name}"))
    _move(client, pairs, cluster)
    meta = crawl_keys(crawl_id)["meta"]
    _move(client, [(meta, crawl_keys(target)["meta"])], cluster)  # last: the crawl is gone once its meta is
    client.hset(crawl_keys(target)["meta"], mapping={"archived": repr(time.time()), "archived_from": crawl_id})
    return target


def wait_for_rerun(client: Any, crawl_id: str, timeout: float, poll: float = 0.2,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Another process starts finished crawl ``crawl_id`` afresh: return once it has
    opened the new crawl (its ``rerun`` key is gone). Raises :class:`ArchiveBusy`
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        holder = rerun_holder(client, crawl_id)
        if holder is None:
            return
        if time.monotonic() >= deadline:
            raise ArchiveBusy(
                f"crawl {crawl_id!r} finished before and another process ({holder}) is starting it afresh; it "
                f"did not finish within {timeout:.0f} s. Start the crawl again (the claim expires "
                f"{STALE_CLAIM_SECS:.0f} s after it was taken)")
        sleep(poll)


def prune(client: Any, crawl_id: str, keep: int, spare: str = "") -> list[tuple[str, int]]:
    """Delete the archives of crawl ``crawl_id`` but the newest ``keep`` (and ``spare``,
    an archive a crawl is about to read as its prior); returns ``[(archive id, keys
    deleted)]``."""
    found = archives(client, crawl_id)
    old = found[: max(0, len(found) - max(0, keep))]
    return [(a["crawl_id"], drop_crawl(client, a["crawl_id"])) for a in old if a["crawl_id"] != spare]
