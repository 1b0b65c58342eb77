"""Carrying a scrapy-redis crawl over: its queue and its duplicate filter.

A crawl that opens on a server holding scrapy-redis's keys of the same spider
(``SCHEDULER_QUEUE_KEY``, default ``<spider>:requests``; ``SCHEDULER_DUPEFILTER_KEY``,
default ``<spider>:dupefilter``; the ``REDIS_START_URLS_KEY`` list) says so in one
WARNING with the setting that imports them. With ``IPR_IMPORT_SCRAPY_REDIS=pickle``
the first process to open the crawl imports, once:

- the queue's requests (scrapy-redis's ``PriorityQueue`` sorted set or its
  ``FifoQueue``/``LifoQueue`` list), read with scrapy-redis's serializer
  (``SCHEDULER_SERIALIZER``, pickle by default: only on this explicit request) and
  Scrapy's ``request_from_dict``, into the frontier as new requests;
- the duplicate filter's fingerprints into the crawl's ``imported_seen`` set: from then
  on a new URL whose scrapy-redis fingerprint
  (:meth:`scrapy_redis.dupefilter.RFPDupeFilter.request_fingerprint`) is there is
  known as fetched, not queued (store/lua/_dupes.lua ``imported_hit``).

scrapy-redis's keys stay as they were unless ``IPR_IMPORT_SCRAPY_REDIS_DELETE``; a
request that cannot be read or stored is left in its key (which is then not deleted)
and counted in a WARNING. The start-URL list is read by scrapy-redis's own
``RedisSpider`` as before. The key ``ipr-crawl:imported:<queue key>`` keeps what was
imported, into which crawl (JSON): a later run, or a rerun of the finished crawl,
does not import it again.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import time
from typing import Any

from scrapy import Request
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict
from scrapy_redis import defaults as sr_defaults
from scrapy_redis.dupefilter import RFPDupeFilter

from ipr_crawl.config import read
from ipr_crawl.ordering.urls import bucket_of, tie_for
from ipr_crawl.scheduler.codec import encode_request

__all__ = ["ScrapyRedisKeys", "SeenFingerprints", "carry_over"]

logger = logging.getLogger("ipr_crawl.scheduler.core")

#: requests and fingerprints read per Redis round trip
BATCH = 1000


class ScrapyRedisKeys:
    """scrapy-redis's key names for ``spider`` under ``settings`` (its defaults module
    when a setting is unset)."""

    def __init__(self, settings: Any, spider: Any) -> None:
        fill = {"spider": spider.name, "name": spider.name}
        self.queue = str(settings.get("SCHEDULER_QUEUE_KEY") or sr_defaults.SCHEDULER_QUEUE_KEY) % fill
        self.dupefilter = str(settings.get("SCHEDULER_DUPEFILTER_KEY") or sr_defaults.SCHEDULER_DUPEFILTER_KEY) % fill
        start = getattr(spider, "redis_key", None) or settings.get("REDIS_START_URLS_KEY") or sr_defaults.START_URLS_KEY
        self.start_urls = str(start) % fill
        #: what was carried over, and into which crawl (JSON; outside every crawl's keys, so
        #: that a rerun, which starts the crawl afresh, does not import it again)
        self.marker = f"ipr-crawl:imported:{self.queue}"

    def found(self, client: Any) -> dict[str, int]:
        """Entries in each key that exists (``queue``, ``dupefilter``, ``start_urls``)."""
        sizes = {"zset": client.zcard, "list": client.llen, "set": client.scard}
        found = {}
        for name in ("queue", "dupefilter", "start_urls"):
            key = getattr(self, name)
            kind = client.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            if kind in sizes:
                found[name] = int(sizes[kind](key))
        return found


class SeenFingerprints:
    """scrapy-redis's fingerprint of a request (40 hex digits), computed by the
    project's ``DUPEFILTER_CLASS`` when it is scrapy-redis's ``RFPDupeFilter`` or a
    subclass, else by scrapy-redis's own (Scrapy's fingerprint is not the one its
    duplicate filter stored)."""

    def __init__(self, settings: Any) -> None:
        cls = RFPDupeFilter
        name = settings.get("DUPEFILTER_CLASS")
        if name:
            try:
                loaded = load_object(name)
            except (ImportError, NameError, ValueError):
                loaded = None
            if isinstance(loaded, type) and issubclass(loaded, RFPDupeFilter):
                cls = loaded
        self._filter = cls(server=None, key="")

    def of(self, request: Request) -> str:
        fp = self._filter.request_fingerprint(request)
        return fp if isinstance(fp, str) and len(fp) == 40 else hashlib.sha1(str(fp).encode()).hexdigest()


def _serializer(settings: Any) -> Any:
    """scrapy-redis's serializer module (``SCHEDULER_SERIALIZER``, by default its
    ``picklecompat``), read only under ``IPR_IMPORT_SCRAPY_REDIS=pickle``."""
    name = settings.get("SCHEDULER_SERIALIZER") or "scrapy_redis.picklecompat"
    return importlib.import_module(name) if isinstance(name, str) else name


def carry_over(sched: Any, spider: Any, client: Any, store: Any) -> None:
    """At open: look for scrapy-redis's keys of ``spider`` on ``client`` and import them
    or say how (see the module doc). Sets ``seen_fingerprints`` (a
    :class:`SeenFingerprints`, or None) for a crawl that holds imported fingerprints
    on ``sched.identity`` (the enqueue and record calls send them)."""
    settings = sched.crawler.settings
    keys = ScrapyRedisKeys(settings, spider)
    found = keys.found(client)
    mode = read(settings, "IPR_IMPORT_SCRAPY_REDIS")
    if found.get("queue") or found.get("dupefilter"):
        done = client.get(keys.marker)
        if not mode and done is None:
            logger.warning(
                "ipr-crawl: scrapy-redis's crawl of spider %r is on this server (%s) and is not read: "
                "this crawl starts without it. To carry it over, run once with -s IPR_IMPORT_SCRAPY_REDIS=pickle "
                "(scrapy-redis stores requests with pickle: only for a queue you trust); its keys stay unless "
                "-s IPR_IMPORT_SCRAPY_REDIS_DELETE=True (docs/dropin.md#coming-from-scrapy-redis)",
                spider.name, _described(keys, found))
        elif mode:
            _import_once(sched, spider, client, store, keys, found)
    imported = any(client.exists(s.keys["imported_seen"]) for s in getattr(store, "stores", [store]))
    sched.identity.seen_fingerprints = SeenFingerprints(settings) if imported else None


def _import_once(sched: Any, spider: Any, client: Any, store: Any, keys: ScrapyRedisKeys, found: dict[str, int]) -> None:
    """Import unless it was done (or is being done: wait for it); of processes started
    together, the one whose claim lands first imports and the others wait for it."""
    while True:
        if _wait_for_import(client, keys, spider):
            logger.info("ipr-crawl: scrapy-redis's crawl of spider %r was carried over before (%s: %s); "
                        "IPR_IMPORT_SCRAPY_REDIS does nothing more (delete that key to import again)",
                        spider.name, keys.marker, _text(client.get(keys.marker)))
            return
        if _claim(client, keys, sched):
            _import(sched, spider, client, store, keys, found)
            return


#: An import whose process has not finished it after this long is taken over (s).
IMPORT_STALE_SECS = 600.0


def _claim(client: Any, keys: ScrapyRedisKeys, sched: Any) -> bool:
    """Mark the import as this process's (``SET NX``, or over a stale claim): whether it
    is; another process that started at the same moment may have claimed it first."""
    claim = json.dumps({"crawl_id": sched.config.crawl_id, "by": sched.holder, "started": time.time()})
    if client.set(keys.marker, claim, nx=True):
        return True
    return bool(_stale(client.get(keys.marker)) and client.set(keys.marker, claim))


def _stale(raw: Any) -> bool:
    """Whether marker ``raw`` is an import in progress started over :data:`IMPORT_STALE_SECS` ago."""
    try:
        info = json.loads(_text(raw)) if raw is not None else {}
    except ValueError:
        return False
    return "at" not in info and time.time() - float(info.get("started") or 0) > IMPORT_STALE_SECS


def _wait_for_import(client: Any, keys: ScrapyRedisKeys, spider: Any) -> bool:
    """While another process of the crawl carries scrapy-redis's crawl over (its marker
    says when it started and has no ``at`` yet), wait for it, polling every 0.5 s: this
    process would otherwise crawl before the imported fingerprints are there and fetch
    pages scrapy-redis had fetched. True once it is done; False when there is nothing
    to wait for, or the import is stale (its process died: this one takes it over)."""
    said = False
    while True:
        raw = client.get(keys.marker)
        if raw is None or _stale(raw):
            return False
        try:
            info = json.loads(_text(raw))
        except ValueError:
            return True  # not ours to read: a marker of another kind counts as done
        if "at" in info:
            return True
        if not said:
            logger.info("ipr-crawl: another process (%s) is carrying scrapy-redis's crawl of spider %r over; this "
                        "one waits for it before crawling", info.get("by"), spider.name)
            said = True
        time.sleep(0.5)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _described(keys: ScrapyRedisKeys, found: dict[str, int]) -> str:
    parts = []
    for name, what in (("queue", "requests"), ("dupefilter", "fingerprints"), ("start_urls", "start URLs")):
        if name in found:
            parts.append(f"{getattr(keys, name)}: {found[name]:,} {what}")
    return "; ".join(parts)


def _import(sched: Any, spider: Any, client: Any, store: Any, keys: ScrapyRedisKeys, found: dict[str, int]) -> None:
    settings = sched.crawler.settings
    t0 = time.monotonic()
    logger.info("ipr-crawl: carrying scrapy-redis's crawl of spider %r over (%s)", spider.name, _described(keys, found))
    queued, left = (_import_queue(sched, spider, client, store, keys.queue, _serializer(settings))
                    if found.get("queue") else (0, 0))
    seen = _import_dupefilter(client, store, keys.dupefilter) if found.get("dupefilter") else 0
    report = {"requests": queued, "left": left, "fingerprints": seen, "at": time.time(),
              "queue_key": keys.queue, "dupefilter_key": keys.dupefilter}
    deleted = []
    if read(settings, "IPR_IMPORT_SCRAPY_REDIS_DELETE"):
        deleted = [k for k in ((keys.queue,) if not left else ()) + (keys.dupefilter,) if client.delete(k)]
    report["deleted"] = deleted
    report["crawl_id"] = sched.config.crawl_id
    client.set(keys.marker, json.dumps(report))
    sched._stats_set("ipr/scrapy_redis/imported_requests", queued)
    sched._stats_set("ipr/scrapy_redis/imported_fingerprints", seen)
    logger.info("ipr-crawl: carried over from scrapy-redis in %.1f s: %d requests into the frontier, %d "
                "fingerprints of URLs it had seen; its keys %s", time.monotonic() - t0, queued, seen,
                f"{', '.join(deleted)} deleted" if deleted else "left as they were")
    if left:
        logger.warning("ipr-crawl: %d requests of %s could not be read or stored (see the lines above) and stay "
                       "there%s", left, keys.queue, "; it was not deleted" if deleted or
                       read(settings, "IPR_IMPORT_SCRAPY_REDIS_DELETE") else "")


def _queue_entries(client: Any, key: str) -> Any:
    kind = _text(client.type(key))
    n = client.zcard(key) if kind == "zset" else client.llen(key)
    for start in range(0, n, BATCH):
        if kind == "zset":
            yield from client.zrange(key, start, start + BATCH - 1)
        else:
            yield from client.lrange(key, start, start + BATCH - 1)


def _import_queue(sched: Any, spider: Any, client: Any, store: Any, key: str, serializer: Any) -> tuple[int, int]:
    """(requests stored, requests left in ``key``)."""
    cfg = sched.config
    queued = left = 0
    warned: set[str] = set()
    for raw in _queue_entries(client, key):
        try:
            request = request_from_dict(serializer.loads(raw), spider=spider)
            payload, _ = encode_request(request, spider)
        except Exception as exc:  # noqa: BLE001 - whatever unpickling or Scrapy raises: the request stays in its key
            left += 1
            kind = type(exc).__name__
            if kind not in warned:
                warned.add(kind)
                logger.warning("ipr-crawl: a request of %s is not carried over: %s: %s", key, kind, exc)
            continue
        where = {"bucket": bucket_of(request.url, cfg.cluster_buckets)} if cfg.cluster_buckets > 1 else {}
        result = store.enqueue(sched.identity.of(request), tie_for(cfg.ordering, request.url), payload,
                               request.dont_filter, b"", **where)
        queued += int(result != 0)
        if queued and queued % 10000 == 0:
            logger.info("ipr-crawl: carrying scrapy-redis's queue over: %d requests so far", queued)
    return queued, left


def _import_dupefilter(client: Any, store: Any, key: str) -> int:
    """Copy the fingerprints of ``key`` into each keyspace's ``imported_seen``; returns how many."""
    targets = [s.keys["imported_seen"] for s in getattr(store, "stores", [store])]
    n = 0
    batch: list[Any] = []
    for fp in client.sscan_iter(key, count=BATCH):
        batch.append(fp)
        if len(batch) >= BATCH:
            n += _add(client, targets, batch)
            batch = []
    if batch:
        n += _add(client, targets, batch)
    return n


def _add(client: Any, targets: list[str], batch: list[Any]) -> int:
    for target in targets:
        client.sadd(target, *batch)
    return len(batch)
