"""The frontier downloader middleware: settles leases of requests that failed for good.

Placed outermost (order 1), its ``process_exception`` sees a download exception
only after every other middleware, RetryMiddleware included, declined to turn it
into a response or a new request, so the failure is final: the URL is marked
failed (``ack.lua``, mode ``fail``) and not fetched again in this crawl.

An exception raised in another middleware's ``process_response`` (the 21st
redirect, an undecodable gzip body, a meta refresh to a ``javascript:`` URL)
reaches no ``process_exception``: Scrapy hands it straight to the request's
errback. So ``process_request`` wraps the errback of every leased request in
:class:`SettleLeaseOnFailure`, which settles the lease the same way and then
calls the request's own errback, if it has one. Without it such a request
would stay leased, come back when its lease expires, fail again, and keep the
crawl from ending. The wrapper is never stored: :mod:`ipr_crawl.scheduler.codec` stores
the request's own errback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import NotConfigured

from ipr_crawl.meta import lease_of
from ipr_crawl.scheduler import scheduler_of
from ipr_crawl.scheduler.compat import SpiderArg

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["FrontierDownloaderMiddleware", "SettleLeaseOnFailure"]


class SettleLeaseOnFailure:
    """Errback of a leased request: settle the lease, then the request's own errback.

    ``ipr_wrapped_errback`` is the request's own errback (None: the failure is
    passed on and Scrapy logs it as usual).
    """

    def __init__(self, middleware: FrontierDownloaderMiddleware, errback: Any) -> None:
        self.middleware = middleware
        self.ipr_wrapped_errback = errback  # the name is meta.WRAPPED_ERRBACK_ATTR
        self.__name__ = getattr(errback, "__name__", "settle_lease_on_failure")

    def __call__(self, failure: Any) -> Any:
        request = getattr(failure, "request", None)
        # An HttpError carries a response: the link-graph middleware records that page.
        if request is not None and getattr(failure.value, "response", None) is None:
            self.middleware.settle(request, failure.value)
        if self.ipr_wrapped_errback is not None:
            return self.ipr_wrapped_errback(failure)
        return failure


class FrontierDownloaderMiddleware:
    """Downloader middleware settling the lease of a finally failed request."""

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("IPR_ENABLED", True):
            raise NotConfigured("IPR_ENABLED is off")
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request, spider: SpiderArg = None) -> None:
        if lease_of(request) and not isinstance(request.errback, SettleLeaseOnFailure):
            request.errback = SettleLeaseOnFailure(self, request.errback)

    def process_exception(self, request: Request, exception: Exception, spider: SpiderArg = None) -> None:
        self.settle(request, exception)

    def settle(self, request: Request, exception: BaseException) -> None:
        """Settle the lease of a request that failed for good
        (:meth:`ipr_crawl.scheduler.IprScheduler.settle_failure`)."""
        frontier = scheduler_of(self.crawler)
        if frontier is not None:
            frontier.settle_failure(request, exception)
