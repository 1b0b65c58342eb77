"""What a crawl holds, for an operator: ``status``, ``top``, and opening a crawl that
must exist.

Read-only except :func:`open_crawl`'s connection (and it never creates a crawl: a
missing one raises :class:`NoSuchCrawl` naming where it looked). Used by the
``ipr-crawl status|top|release-leases|report|history|reset`` commands, ``scrapy
frontier``, and the scheduler's periodic log line.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit

import redis

from ipr_crawl.ordering.params import OrderingParams, parse_ordering
from ipr_crawl.store.archive import archives, finished_info, is_archive_id
from ipr_crawl.store.connection import FrontierUnavailable, connect, redact
from ipr_crawl.store.frontier import FrontierStore
from ipr_crawl.store.keys import crawl_keys
from ipr_crawl.store.payload import payload_fields
from ipr_crawl.store.record import RECORD_SIZE, parse_record

__all__ = ["NoSuchCrawl", "crawls", "open_crawl", "operate", "payload_summary", "status", "top"]


class NoSuchCrawl(LookupError):
    """The crawl (or the embedded store) does not exist where the caller looked."""


def embedded_store_exists(data_dir: str) -> bool:
    """Whether ``data_dir`` holds an embedded server's data (``ipr.rdb`` or its AOF)."""
    return any(
        os.path.exists(os.path.join(data_dir, name))
        for name in ("ipr.rdb", "ipr.rdb.settings", "appendonlydir", "appendonly.aof")
    )


def crawls(client: Any) -> list[str]:
    """The crawl ids of a Redis (keys ``ipr:{<id>}:meta``), sorted."""
    found = set()
    for key in client.scan_iter(match="ipr:{*}:meta", count=1000):
        text = key.decode("utf-8", "replace")
        found.add(text[len("ipr:{") : text.rindex("}:meta")])
    return sorted(found)


def open_crawl(crawl_id: str, redis_url: str = "", data_dir: str = ".scrapy/ipr") -> FrontierStore:
    """The :class:`FrontierStore` of an existing crawl, with the ordering it was written
    with. ``crawl_id`` ``""``: the only crawl there (archives of finished crawls,
    ``<id>~<n>``, not counted).

    Raises :class:`NoSuchCrawl` (naming the folder or URL and the crawls found) when
    there is no embedded store in ``data_dir`` (none is created), no such crawl, or
    several and no id; :class:`~ipr_crawl.store.FrontierUnavailable` when Redis
    cannot be reached; :class:`ValueError` for a malformed id.
    """
    if crawl_id:
        crawl_keys(crawl_id)  # ValueError for a malformed id
    where = redact(redis_url) if redis_url else f"the embedded store in {os.path.abspath(data_dir)}"
    if not redis_url and not embedded_store_exists(data_dir):
        raise NoSuchCrawl(
            f"no embedded store in {os.path.abspath(data_dir)} (no ipr.rdb): run this in the Scrapy "
            "project's folder (its .scrapy/ipr), or give --data-dir (IPR_DATA_DIR) or --redis-url (IPR_REDIS_URL)"
        )
    client = connect(redis_url, data_dir)
    try:
        present = crawls(client)
        if not crawl_id:
            live = [c for c in present if not is_archive_id(c)]
            if len(live) != 1:
                kept = [c for c in present if is_archive_id(c)]
                raise NoSuchCrawl(
                    f"{len(live)} crawls in {where}" + (f" ({', '.join(live)})" if live else "")
                    + (f", and {len(kept)} kept finished ({', '.join(kept)})" if kept else "") + ": give --crawl-id"
                )
            crawl_id = live[0]
        if crawl_id not in present:
            raise NoSuchCrawl(
                f"no crawl {crawl_id!r} in {where}; crawls there: {', '.join(present) or 'none'}"
            )
        return crawl_store(client, crawl_id)
    except BaseException:
        client.close()
        raise


def crawl_store(client: Any, crawl_id: str) -> FrontierStore:
    """The :class:`FrontierStore` of crawl ``crawl_id`` on ``client``, with the ordering
    its ``meta`` names (``ipr`` when it names none)."""
    label: Any = client.hget(crawl_keys(crawl_id)["meta"], "ordering")
    ordering, cutoff = parse_ordering(label.decode() if label else "ipr")
    return FrontierStore(client, crawl_id, OrderingParams(ordering=ordering, cutoff=cutoff))


def payload_summary(payload: bytes | None) -> dict[str, Any]:
    """``url``, ``depth`` and ``slot`` of a stored request payload
    (:func:`ipr_crawl.store.payload.payload_fields`; empty for a payload missing or of no
    known format). ``url`` is the frontier entry's URL: the request's without its
    ``#fragment``. The stored request is the first one found for the entry, whose URL
    keeps the fragment of the link it came from (``page#part``); the entry stands for
    every fragment of the URL (its node id and Scrapy's fingerprint ignore them), and the
    download sends none."""
    return payload_fields(payload or b"")


def _in_links(node_keys: list[str], client: Any, ids: list[bytes]) -> dict[bytes, int]:
    """Links to each of ``ids`` among the fetched pages' out-links (HSCAN of the ``node`` hashes)."""
    wanted = dict.fromkeys(ids, 0)
    for key in node_keys:
        for _, raw in client.hscan_iter(key, count=2000):
            if len(raw) > RECORD_SIZE:
                for target in parse_record(raw)[1]:
                    if target in wanted:
                        wanted[target] += 1
    return wanted


def top(store: FrontierStore, n: int, in_links: bool = True) -> list[dict[str, Any]]:
    """The ``n`` best frontier entries, best first: ``url``, ``host``, ``score`` (the
    ordering's score of the node record), ``priority`` (the frontier's order key),
    ``seq`` (discovery number), ``depth`` and ``in_links`` (links to it among the
    fetched pages; with ``in_links`` False: None, and no O(edges) scan). A bucketed
    crawl (:class:`~ipr_crawl.store.buckets.BucketedFrontier`): the best of every bucket's."""
    buckets = getattr(store, "stores", None)
    if buckets is not None:
        rows = sorted((r for b in buckets for r in top(b, n, in_links=False)), key=lambda r: -r["priority"])[:n]
        if in_links and rows:
            wanted = _in_links([b.keys["node"] for b in buckets], store.client, [bytes.fromhex(r["id"]) for r in rows])
            for r in rows:
                r["in_links"] = wanted[bytes.fromhex(r["id"])]
        return rows
    c: Any = store.client
    entries = c.zrange(store.keys["frontier"], 0, max(0, n - 1), withscores=True) if n > 0 else []
    ids = [m[8:] for m, _ in entries]
    if not ids:
        return []
    pipe = c.pipeline(transaction=False)
    pipe.hmget(store.keys["node"], ids)
    pipe.hmget(store.keys["req"], ids)
    raws, payloads = pipe.execute()
    counts = _in_links([store.keys["node"]], c, ids) if in_links else None
    out = []
    for (_member, zscore), id_, raw, payload in zip(entries, ids, raws, payloads):
        record = parse_record(raw)[0] if raw else None
        summary = payload_summary(payload)
        url = summary.get("url", "")
        out.append({
            "url": url, "host": urlsplit(url).hostname or "" if url else "",
            "score": record.s if record else None, "priority": -zscore,
            "seq": int(record.seq) if record else None, "depth": summary.get("depth"),
            "in_links": counts[id_] if counts is not None else None, "id": id_.hex(),
        })
    return out


def status(store: FrontierStore, revisits: bool = True) -> dict[str, Any]:
    """Counts of a crawl: ``known``, ``fetched``, ``failed``, ``frontier``, ``forced``,
    ``in_flight``; ``holders`` (:meth:`FrontierStore.holders`: each process, alive or
    not, its last heartbeat and its requests in flight); ``revisits_due`` (due now)
    and ``revisits_scheduled``; ``pages_per_sec`` over the last minute of the
    timeline (None without two samples in it), ``crawling_pages_per_sec`` over the
    minute before its last sample that saw a page fetched (the rate it crawled at, the
    idle tail of an ended crawl left out) and ``last_fetch_age`` (s since that sample;
    None without one); ``ordering``; ``time`` (s since the epoch);
    ``finished`` (when it closed as finished, else None); ``archives``: the finished
    crawls of this id kept by its reruns (:func:`ipr_crawl.store.archive.archives`),
    oldest first (None when a Cluster's master is away); ``rerun_of``: the one it was started afresh from ("" if none);
    ``memory``: the server's used and maximum memory, its eviction policy and this
    crawl's share (:func:`_memory`)."""
    now = store.redis_time()  # the clock of the timeline and the heartbeats (_clock.lua)
    out: dict[str, Any] = {"crawl_id": store.crawl_id, "ordering": store.params.label, "time": now}
    out.update(store.counts())
    done = finished_info(store.client, store.crawl_id)
    out["finished"] = done["at"] if done else None
    out["finished_next"] = done["next"] if done else None
    rerun_of = store.client.hget(store.keys["meta"], "rerun_of")
    out["rerun_of"] = rerun_of.decode() if isinstance(rerun_of, bytes) else rerun_of or ""
    try:
        out["archives"] = archives(store.client, store.crawl_id)
    except redis.RedisError:  # a SCAN of every master (a Cluster's): one away, the archives unknown
        out["archives"] = None
    out["memory"] = _memory(store)
    out["holders"] = store.holders()
    out["dead_letters"] = [payload_summary(p).get("url") or m.hex() for m, p in store.dead_letters(10)]
    if revisits:
        out["revisits_due"] = store.client.zcount(store.keys["due"], "-inf", time.time())  # the crawlers' clock
        out["revisits_scheduled"] = store.client.zcard(store.keys["due"])
    timeline = store.timeline(last=120)
    out["pages_per_sec"] = _rate([s for s in timeline if s["t"] >= now - 60 - 15])
    # the rate while it crawled: the last minute up to the last sample that saw a page
    # fetched, without the idle tail of a crawl that ended or waits
    grew = [i for i in range(1, len(timeline)) if timeline[i]["fetched"] > timeline[i - 1]["fetched"]]
    end = timeline[grew[-1]]["t"] if grew else None
    out["crawling_pages_per_sec"] = None if end is None else _rate(
        [s for s in timeline if end - 60 - 15 <= s["t"] <= end])
    out["last_fetch_age"] = None if end is None else max(0.0, now - end)
    return out


def _rate(samples: list[dict[str, Any]]) -> float | None:
    """Pages fetched per second from the first to the last of timeline ``samples``; None
    without two samples apart in time."""
    if len(samples) < 2 or samples[-1]["t"] <= samples[0]["t"]:
        return None
    return (samples[-1]["fetched"] - samples[0]["fetched"]) / (samples[-1]["t"] - samples[0]["t"])


def _memory(store: FrontierStore) -> dict[str, Any]:
    """The server's ``used`` and ``max`` memory (bytes; ``max`` 0: no limit), its
    ``policy`` (None: unknown) and the bytes of this crawl's keys (``crawl``; None when a
    Cluster's master is away); ``{}`` when the server's memory cannot be read."""
    from ipr_crawl.store.archive import crawl_key_names
    from ipr_crawl.store.memory import crawl_memory, eviction_policy, server_memory

    mem: dict[str, Any] = dict(server_memory(store.client))
    if not mem:
        return {}
    found = eviction_policy(store.client)
    mem["policy"] = found[0] if found else None
    try:
        mem["crawl"] = crawl_memory(store.client, crawl_key_names(store.client, store.crawl_id))
    except redis.RedisError:  # a Cluster's SCAN needs every master: one away, the crawl's bytes unknown
        mem["crawl"] = None
    return mem


def operate(
    store: FrontierStore, action: str, n: int = 20, as_json: bool = False, release_all: bool = False,
    dead: bool = False,
) -> str:
    """The text an operator's command prints: ``action`` ``"status"``, ``"top"`` (``n``
    URLs) or ``"release-leases"`` (of lost holders; ``release_all``: every lease;
    ``dead``: the dead-lettered requests put back, :meth:`FrontierStore.dead_return`), as
    JSON or as text. Shared by ``ipr-crawl`` and ``scrapy frontier``; raises
    :class:`ValueError` for another action."""
    import json

    if action == "status":
        st = status(store)
        return json.dumps(st, indent=1) if as_json else format_status(st)
    if action == "top":
        rows = top(store, n)
        return json.dumps(rows, indent=1) if as_json else format_top(rows)
    if action == "release-leases" and dead:
        return f"crawl {store.crawl_id!r}: {store.dead_return()} dead-lettered requests were put back"
    if action == "release-leases":
        moved, forgotten = store.release("all" if release_all else "dead")
        return f"crawl {store.crawl_id!r}: {moved} leased requests went back to the frontier" + (
            f"; processes forgotten: {', '.join(forgotten)}" if forgotten else ""
        )
    raise ValueError(f"unknown action {action!r}")


#: What a finished crawl's next run does (archive.mark_finished's next_run): status's line.
_NEXT = {
    "afresh": "its next run starts afresh with it as the prior (unless run with SCHEDULER_PERSIST=True)",
    "persist": "its last run had SCHEDULER_PERSIST=True: run so again, it goes on; without it, it starts afresh",
    "revisits": "its last run had revisits on: run so again, it revisits its pages; without, it starts afresh",
}


def format_status(st: dict[str, Any]) -> str:
    """``status`` as text lines."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st["time"]))
    rate = "no samples in the last minute" if st["pages_per_sec"] is None else f"{st['pages_per_sec']:.1f} pages/s"
    crawling, age = st.get("crawling_pages_per_sec"), st.get("last_fetch_age")
    if crawling is not None and age is not None and age > 15:  # idle since: the rate it crawled at
        rate += f" (while crawling: {crawling:.1f} pages/s, its last minute of fetching, {age:,.0f} s ago)"
    lines = [
        f"crawl {st['crawl_id']!r} ordered by {st['ordering']} at {when}",
        f"  known {st['known']:,}  fetched {st['fetched']:,}  failed {st['failed']:,}",
        f"  frontier {st['frontier']:,}  forced {st['forced']:,}  in flight {st['in_flight']:,}",
        f"  last minute: {rate}",
    ]
    mem = st.get("memory") or {}
    if mem:
        from ipr_crawl.store.memory import describe

        if mem.get("crawl") is None:
            keys = "this crawl's keys unknown (a master away)"
        else:
            share = f" ({mem['crawl'] / mem['used']:.0%})" if mem["used"] else ""
            keys = f"this crawl's keys {mem['crawl'] / 1e6:,.2f} MB{share}"
        lines.append(f"  Redis memory: {describe(mem)}, policy {mem['policy'] or 'unknown'}; {keys}")
    if "revisits_due" in st:
        lines.append(f"  revisits due now {st['revisits_due']:,} of {st['revisits_scheduled']:,} scheduled")
    if st.get("finished"):
        nxt = _NEXT.get(st.get("finished_next") or "afresh", _NEXT["afresh"])
        lines.append(f"  finished {_when(st['finished'])}: {nxt}")
    if st.get("rerun_of"):
        lines.append(f"  started afresh from the finished crawl {st['rerun_of']!r}")
    if st.get("archives"):
        lines.append(f"  finished crawls kept (IPR_KEEP_CRAWLS): {len(st['archives'])}")
        for a in st["archives"]:
            lines.append(f"    {a['crawl_id']}  finished {_when(a['finished'])}  fetched {a['fetched']:,}  "
                         f"failed {a['failed']:,}")
    if st.get("dead_lettered"):
        lines.append(f"  dead-lettered {st['dead_lettered']:,} (handed out more than IPR_MAX_RELEASES times, each "
                     "time lost with its process; `release-leases --dead` puts them back):")
        lines += [f"    {url}" for url in st.get("dead_letters", [])]
    alive = [h for h in st["holders"] if h["alive"]]
    lines.append(f"  processes alive: {len(alive)}")
    for h in st["holders"]:
        if not h["holder"]:
            lines.append(f"    (no live holder)  in flight {h['in_flight']}")
            continue
        beat = "never" if h["last_beat"] is None else f"{max(0.0, st['time'] - h['last_beat']):.1f} s ago"
        state = "alive" if h["alive"] else "LOST (heartbeat stopped; its leases go back at the next pop)"
        lines.append(f"    {h['holder']}  {state}  spider {h.get('spider', '?')}  last heartbeat {beat}  "
                     f"in flight {h['in_flight']}")
    return "\n".join(lines)


def _when(at: float | None) -> str:
    return "?" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def format_top(rows: list[dict[str, Any]]) -> str:
    """``top`` as a table, in the frontier's order: ``priority`` (the order key it is
    sorted by), then ``score`` (the ordering's score in the node record, which the
    priority is made from and may differ from: push adds the residual's level, ties
    break by discovery)."""
    lines = [f"{'#':>4} {'priority':>12} {'score':>12} {'depth':>5} {'in':>5}  {'host':<24} url"]
    for i, r in enumerate(rows, 1):
        score = "-" if r["score"] is None else f"{r['score']:.6g}"
        depth = "-" if r["depth"] is None else str(r["depth"])
        inl = "-" if r["in_links"] is None else str(r["in_links"])
        lines.append(f"{i:>4} {r['priority']:>12.6g} {score:>12} {depth:>5} {inl:>5}  {r['host'][:24]:<24} {r['url']}")
    return "\n".join(lines)


__all__ += ["FrontierUnavailable", "embedded_store_exists", "format_status", "format_top"]
