"""The frontier downloader middleware: settles leases of requests that failed for good.

Placed outermost (order 1), its ``process_exception`` sees a download exception
only after every other middleware, RetryMiddleware included, declined to turn it
into a response or a new request, so the failure is final: the URL is marked
failed (``ack.lua``, mode ``fail``) and not fetched again in this crawl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured

from ipr_crawl.scheduler import frontier_of, lease_of
from ipr_crawl.urls import node_id

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["FrontierDownloaderMiddleware"]


class FrontierDownloaderMiddleware:
    """Downloader middleware settling the lease of a finally failed request."""

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("IPR_ENABLED", True):
            raise NotConfigured("IPR_ENABLED is off")
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        frontier = frontier_of(self.crawler)
        lease = lease_of(request)
        if frontier is None or frontier.store is None or not lease:
            return None
        frontier.guard(frontier.store.ack, "fail", [(lease, node_id(request.url))])
        kind = "ignored" if isinstance(exception, IgnoreRequest) else "failed"
        self.crawler.stats.inc_value(f"ipr/frontier/{kind}")
        return None
