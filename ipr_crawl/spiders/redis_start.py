"""Start URLs read from Redis, the way scrapy-redis's ``RedisSpider`` reads them.

With ``IPR_START_URLS_KEY`` set, a spider using :class:`RedisStartUrlsMixin`
(the bundled ``graph`` spider does) takes its start URLs from that Redis key,
on the crawl's own Redis (the shared server of ``IPR_REDIS_URL``, or the
embedded one): a batch of ``IPR_START_URLS_BATCH_SIZE`` entries when the crawl
starts, and another whenever the crawl is idle (scrapy-redis's
``spider_idle`` scheme). Like scrapy-redis:

- the key is a list (entries taken from the left: ``RPUSH`` to add), a set
  (``SADD``; any order) or a sorted set (``ZADD``; highest score first); each
  entry is taken by one atomic pop (``LPOP``/``SPOP``/``ZPOPMAX`` with a count),
  so of many processes of a crawl exactly one reads it;
- an entry is a URL, or a JSON object ``{"url": ..., "meta": {...},
  "method": "POST", other keys = form data}``;
- ``%(name)s`` in the key is the spider's name (``%(crawl_id)s`` the crawl id);
- ``IPR_START_URLS_IDLE_SECS`` keeps an idle crawl open that long waiting for
  new entries (scrapy-redis's ``MAX_IDLE_TIME_BEFORE_CLOSE``); ``-1`` forever.

Unlike scrapy-redis, a start URL is not ``dont_filter``: the crawl's graph
knows every URL, so a URL pushed twice (or already found by the crawl) is
fetched once; ``"dont_filter": true`` in a JSON entry fetches it again. An
entry that is not a URL or such an object is dropped with a log line and
``ipr/start_urls/invalid``; entries read are counted in ``ipr/start_urls/read``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider
from scrapy.http import FormRequest

__all__ = ["RedisStartUrlsMixin", "start_urls_key"]


def start_urls_key(settings: Any, spider_name: str, crawl_id: str) -> str:
    """The Redis key of ``IPR_START_URLS_KEY`` with ``%(name)s``/``%(crawl_id)s``
    filled in, or ``""`` when reading start URLs from Redis is off.

    >>> start_urls_key({"IPR_START_URLS_KEY": "ipr:{%(crawl_id)s}:start_urls"}, "graph", "c1")
    'ipr:{c1}:start_urls'
    """
    raw = str(settings.get("IPR_START_URLS_KEY") or "").strip()
    if not raw:
        return ""
    try:
        return raw % {"name": spider_name, "crawl_id": crawl_id}
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"IPR_START_URLS_KEY={raw!r}: only %(name)s and %(crawl_id)s may be filled in") from exc


class RedisStartUrlsMixin:
    """Spider mixin: start URLs from a Redis key (see the module docstring).

    Put it before :class:`scrapy.Spider` in the bases. The spider's own
    ``start()`` requests come first; requests made from Redis entries get the
    callback :meth:`start_url_callback` (``self.parse``). Hook
    :meth:`on_start_url` sees every URL read, before its request is made.
    """

    _start_key: str = ""
    _start_client: Any = None
    _idle_started: float | None = None
    _last_idle: float = 0.0

    # -- hooks -------------------------------------------------------------------------
    def start_url_callback(self) -> Any:
        return self.parse  # type: ignore[attr-defined]

    def on_start_url(self, url: str) -> None:
        """Called with every start URL read from Redis (the graph spider widens its hosts)."""

    # -- Scrapy --------------------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        async for item in super().start():  # type: ignore[misc]
            yield item
        if self._open_start_urls():
            for request in self.read_start_requests():
                yield request

    def _open_start_urls(self) -> bool:
        if self._start_client is not None:
            return True
        from ipr_crawl.scheduler import scheduler_of

        crawler = self.crawler  # type: ignore[attr-defined]
        frontier = scheduler_of(crawler)
        if frontier is None:
            return False
        key = start_urls_key(crawler.settings, self.name, frontier.config.crawl_id)  # type: ignore[attr-defined]
        if not key:
            return False
        self._start_key = key
        self._start_client = frontier.redis
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)
        self.logger.info(  # type: ignore[attr-defined]
            "ipr-crawl: reading start URLs from Redis key %r (batches of %d)", key, self._batch_size()
        )
        return True

    def _batch_size(self) -> int:
        settings = self.crawler.settings  # type: ignore[attr-defined]
        return settings.getint("IPR_START_URLS_BATCH_SIZE") or settings.getint("CONCURRENT_REQUESTS", 16)

    def _pop(self, count: int) -> list[bytes]:
        client, key = self._start_client, self._start_key
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "list":
            return client.lpop(key, count) or []
        if kind == "set":
            return client.spop(key, count) or []
        if kind == "zset":
            return [member for member, _score in client.zpopmax(key, count)]
        if kind != "none":
            self.logger.error("ipr-crawl: start URL key %r is a %s, not a list, set or zset", key, kind)  # type: ignore[attr-defined]
        return []

    def read_start_requests(self) -> Iterator[Request]:
        """Requests for one batch of entries of the key (each entry read once)."""
        stats = self.crawler.stats  # type: ignore[attr-defined]
        for raw in self._pop(self._batch_size()):
            stats.inc_value("ipr/start_urls/read")
            try:
                request = self.request_from_entry(raw)
            except (ValueError, TypeError, UnicodeDecodeError) as exc:
                stats.inc_value("ipr/start_urls/invalid")
                self.logger.warning("ipr-crawl: dropping start URL entry %r: %s", raw[:200], exc)  # type: ignore[attr-defined]
                continue
            yield request

    def request_from_entry(self, raw: bytes) -> Request:
        """A request for one entry: a URL, or a JSON object as scrapy-redis takes it."""
        text = raw.decode("utf-8").strip()
        params: dict[str, Any] = {}
        if text.startswith("{"):
            params = json.loads(text)
            if not isinstance(params, dict) or not isinstance(params.get("url"), str):
                raise ValueError("JSON entry without a \"url\" string")
            text = params.pop("url").strip()
        if not text.lower().startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {text[:200]!r}")
        method = str(params.pop("method", "GET")).upper()
        meta = params.pop("meta", {}) or {}
        if not isinstance(meta, dict):
            raise ValueError("\"meta\" is not an object")
        dont_filter = bool(params.pop("dont_filter", False))
        self.on_start_url(text)
        callback = self.start_url_callback()
        if params:  # the rest is form data, as in scrapy-redis
            return FormRequest(text, method=method, formdata={str(k): str(v) for k, v in params.items()},
                               meta=meta, dont_filter=dont_filter, callback=callback)
        return Request(text, method=method, meta=meta, dont_filter=dont_filter, callback=callback)

    def _spider_idle(self) -> None:
        engine = self.crawler.engine  # type: ignore[attr-defined]
        found = 0
        for request in self.read_start_requests():
            engine.crawl(request)
            found += 1
        now = time.monotonic()
        if found:
            self._idle_started = None
            raise DontCloseSpider
        # Scrapy calls spider_idle every few seconds while the crawl is idle: a
        # longer gap means it was busy in between, and a new idle period starts.
        if self._idle_started is None or now - self._last_idle > 15:
            self._idle_started = now
        self._last_idle = now
        wait = self.crawler.settings.getfloat("IPR_START_URLS_IDLE_SECS")  # type: ignore[attr-defined]
        if wait < 0 or now - self._idle_started < wait:
            raise DontCloseSpider
