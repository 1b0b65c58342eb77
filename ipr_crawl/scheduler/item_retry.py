"""At-least-once items through item pipelines that fail for a while: :class:`ItemRetry`.

Scrapy logs an item whose pipeline raised (``item_error``) and drops it. A pipeline
that writes to a database or to Redis fails that way while its server restarts: the
page was fetched and is recorded as done, and its item is gone. With the add-on, an
error of one of ``IPR_ITEM_RETRY_ERRORS`` (default: connection errors and timeouts,
Python's and redis-py's) sends the page's request again (``dont_filter``, the forced
queue): the page is fetched again, whole (no conditional headers), and its callback
yields its items again, up to ``IPR_MAX_RELEASES`` times per request
(``meta["ipr_item_retries"]``). Each retry is
counted in ``ipr/items/retried``; a request that still fails then is logged as an
ERROR and counted in ``ipr/items/lost``. Items the pipelines took before the error are
processed again with the retry: at least once, not exactly once (docs/dropin.md).
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy import Request

from ipr_crawl.config import SettingError
from ipr_crawl.meta import ITEM_RETRIES_META as RETRIES_META

__all__ = ["ItemRetry", "exception_classes"]

logger = logging.getLogger("ipr_crawl.scheduler.core")

def exception_classes(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    """The exception classes of ``IPR_ITEM_RETRY_ERRORS``' dotted paths."""
    from scrapy.utils.misc import load_object

    found = []
    for path in (p.strip() for p in paths):
        if not path:  # `-s IPR_ITEM_RETRY_ERRORS=`: off
            continue
        try:
            cls = load_object(path)
        except (ImportError, ValueError, NameError, AttributeError) as exc:
            raise SettingError(f"IPR_ITEM_RETRY_ERRORS: {path!r} does not import ({exc})") from None
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise SettingError(f"IPR_ITEM_RETRY_ERRORS: {path!r} is not an exception class")
        found.append(cls)
    return tuple(found)


class ItemRetry:
    """Sends a page's request again when an item of it failed with a retryable error.

    ``errors``: the dotted paths of the exception classes to retry
    (``IPR_ITEM_RETRY_ERRORS``; empty: off); ``limit``: retries per request
    (``IPR_MAX_RELEASES``; 0: no limit). Raises :class:`~ipr_crawl.config.SettingError`
    for a path that does not import or is no exception class."""

    def __init__(self, crawler: Any, errors: tuple[str, ...], limit: int) -> None:
        self.crawler = crawler
        self.errors = exception_classes(errors)
        self.limit = limit
        #: id(response) of the responses sent again (one retry per response)
        self._sent: dict[int, Any] = {}

    def item_error(self, response: Any, failure: Any) -> None:
        """Scrapy's ``item_error``: the item of ``response`` failed with ``failure``."""
        exc = getattr(failure, "value", failure)
        request = getattr(response, "request", None)
        if not self.errors or not isinstance(exc, self.errors) or request is None:
            return
        if self._sent.get(id(response)) is response:  # another item of the same page: one retry
            return
        self._sent[id(response)] = response
        if len(self._sent) > 10_000:  # ids of responses gone long ago
            self._sent.clear()
            self._sent[id(response)] = response
        tries = int(request.meta.get(RETRIES_META, 0))
        stats = self.crawler.stats
        if self.limit and tries >= self.limit:
            stats.inc_value("ipr/items/lost")
            logger.error("ipr-crawl: an item of %s failed in the item pipelines (%r) after %d fetches of its page "
                         "(IPR_MAX_RELEASES=%d): lost", response.url, exc, tries + 1, self.limit)
            return
        again: Request = request.replace(dont_filter=True, meta={**request.meta, RETRIES_META: tries + 1})
        stats.inc_value("ipr/items/retried")
        logger.warning("ipr-crawl: an item of %s failed in the item pipelines (%r); its page is fetched again "
                       "(retry %d, IPR_ITEM_RETRY_ERRORS)", response.url, exc, tries + 1)
        self.crawler.engine.crawl(again)
