"""The link-graph spider middleware: hands each parsed page to the scheduler.

The add-on puts it at the engine's end of the spider middleware chain (order
-1000, or below the lowest the project lists), so every other spider middleware
sees a callback's requests as it would without the add-on; a middleware still
nearer the engine gets a WARNING at start. While a callback runs, the Requests it
yields are held back (items pass on at once). When it is done, the page and its held requests go to
:meth:`ipr_crawl.scheduler.IprScheduler.record_page`, which records them in ONE
atomic script call (:mod:`ipr_crawl.scheduler.recording`) once every item the
callback yielded has left the item pipelines (at-least-once); the scheduler then
leases them in priority order, so they are not passed on. Requests with
``dont_filter=True`` and non-HTTP(S) requests pass on to the scheduler untouched,
and so does everything when another scheduler runs the crawl. A request that carries
the lease of the page it came from (``ipr_lease``, copied with ``response.meta``) loses
it here: a lease is its own request's, never a new request's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from itemadapter import is_item
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import Response

from ipr_crawl.meta import LEASE_META
from ipr_crawl.scheduler import scheduler_of
from ipr_crawl.scheduler.compat import SpiderArg
from ipr_crawl.scheduler.recording import order_links

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["LinkGraphMiddleware", "nearer_the_engine", "order_links"]

logger = logging.getLogger(__name__)


class LinkGraphMiddleware:
    """Spider middleware recording the link graph (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        if not crawler.settings.getbool("IPR_ENABLED", True):
            raise NotConfigured("IPR_ENABLED is off")
        self.crawler = crawler
        #: responses whose callback output is being read (ids)
        self._open: set[int] = set()
        nearer = nearer_the_engine(crawler.settings)
        if nearer:
            logger.warning(
                "ipr-crawl: the spider middlewares %s are nearer the engine than %s (a lower order): they will "
                "not see the requests a callback yields, which this one records in the crawl's frontier. "
                "Give them a higher order, or give this one a lower one in SPIDER_MIDDLEWARES",
                ", ".join(nearer), type(self).__name__)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LinkGraphMiddleware:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any], spider: SpiderArg = None
    ) -> AsyncIterator[Any]:
        frontier = scheduler_of(self.crawler)
        if frontier is None:
            async for item in result:
                yield item
            return
        held: list[Request] = []
        self._open.add(id(response))
        failed = False
        receivers: Any = None
        lease = response.meta.get(LEASE_META) if response.request is not None else None
        try:
            async for item in result:
                if lease is not None and isinstance(item, Request) and item.meta.get(LEASE_META) == lease:
                    item = _without_lease(item, response)
                if (
                    isinstance(item, Request)
                    and not item.dont_filter
                    and item.url.startswith(("http://", "https://"))
                ):
                    # Scrapy's request_scheduled, as the engine sends it when a request is
                    # yielded (a receiver's IgnoreRequest drops it); once per request
                    if receivers is None:
                        receivers = frontier.recorder.link_receivers()
                    if frontier.recorder.scheduled(item, receivers):
                        held.append(item)
                else:
                    if is_item(item):  # recorded once it has left the pipelines
                        frontier.item_yielded(response)
                    yield item
        except BaseException:
            failed = True
            raise
        finally:
            self._open.discard(id(response))
            # The page with the requests its callback yielded, even when it then
            # raised (Scrapy schedules those too).
            leftover = frontier.record_page(response, held)
            if failed:  # nothing more can be yielded here: to the engine directly
                for request in leftover:
                    self.crawler.engine.crawl(request)
        for request in leftover:
            yield request

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: SpiderArg = None
    ) -> None:
        frontier = scheduler_of(self.crawler)
        # A callback that raised: its page is recorded here, unless its output is
        # still being read (process_spider_output records it with what it yielded).
        if frontier is not None and id(response) not in self._open:
            frontier.record_page(response, [])
        return None


def nearer_the_engine(settings: Any) -> list[str]:
    """The spider middlewares enabled with a lower order than :class:`LinkGraphMiddleware`
    (Scrapy's ``build_component_list``: the lower the order, the nearer the engine), by
    name; they would see the items a callback yields but not its requests."""
    from scrapy.utils.conf import build_component_list
    from scrapy.utils.misc import load_object

    def name(component: Any) -> str:
        return component if isinstance(component, str) else f"{component.__module__}.{component.__qualname__}"

    nearer: list[str] = []
    for component in build_component_list(settings.getwithbase("SPIDER_MIDDLEWARES")):
        try:
            cls = load_object(component) if isinstance(component, str) else component
        except (ImportError, NameError, ValueError, AttributeError):
            cls = None
        if cls is LinkGraphMiddleware:
            return nearer
        nearer.append(name(component))
    return []


def _without_lease(request: Request, response: Response) -> Request:
    """``request`` without the lease it copied from ``response.meta``; a copy when it shares
    the response's meta (the callback yielded ``response.request`` again), whose lease
    the page's record still needs."""
    if request.meta is response.meta:
        return request.replace(meta={k: v for k, v in request.meta.items() if k != LEASE_META})
    del request.meta[LEASE_META]
    return request
