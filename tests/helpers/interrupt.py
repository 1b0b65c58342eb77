"""A test crawl interrupted as Ctrl-C interrupts it, after a number of responses.

``CLOSESPIDER_PAGECOUNT`` is a deliberate close, an end of the crawl (issue 50, item 5);
the tests of resuming need an interruption instead. ``INTERRUPT_AFTER_PAGES=N`` (set
through :func:`procs.worker_store`, which also puts this folder on the crawl's
``PYTHONPATH`` and enables the extension) stops the crawler after its N-th response
through ``Crawler.stop()`` (``stop_async()`` where it exists), what Scrapy's SIGINT
handler calls: the spider closes with reason ``shutdown``.
"""

from __future__ import annotations

from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured


class InterruptAfter:
    """Stop the crawler, as a signal does, after ``INTERRUPT_AFTER_PAGES`` responses."""

    def __init__(self, crawler: Any, pages: int) -> None:
        self.crawler = crawler
        self.pages = pages
        self.seen = 0

    @classmethod
    def from_crawler(cls, crawler: Any) -> InterruptAfter:
        pages = crawler.settings.getint("INTERRUPT_AFTER_PAGES")
        if pages <= 0:
            raise NotConfigured
        ext = cls(crawler, pages)
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        return ext

    def response_received(self, **_: Any) -> None:
        self.seen += 1
        if self.seen != self.pages:
            return
        stop = getattr(self.crawler, "stop_async", None)
        if stop is None:  # Scrapy 2.13
            self.crawler.stop()
            return
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(stop())
