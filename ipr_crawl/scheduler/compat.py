"""The differences between the Scrapy versions ipr-crawl supports, 2.13 to 2.19, in one place.

Every Scrapy of the async ``start()`` era (2.13+) runs the add-on; what differs:

- **The ``spider`` argument of middleware methods.** Scrapy 2.13 passes
  ``spider=`` to every ``process_request``, ``process_response``,
  ``process_exception``, ``process_spider_output`` and ``process_spider_exception``;
  2.14+ passes it only to a method that requires it (and warns that this is
  deprecated). The middlewares declare it optional (:data:`SpiderArg`, default
  None) and never read it: 2.13 is served, 2.14+ neither passes it nor warns.
- **Closing the spider from the scheduler.** 2.14 added
  ``ExecutionEngine.close_spider_async(reason=)`` and deprecated
  ``close_spider(spider, reason)``, the only form 2.13 has: :func:`close_spider`.
- **A crawl that fails to start.** Scrapy 2.13 leaves the failed ``Crawler.crawl()``
  Deferred unhandled: Twisted prints its traceback to stderr (past Python logging,
  so past the add-on's one-line filter) when it is collected, and ``scrapy crawl``
  exits 0 when the crawl failed in the scheduler's ``open`` (Redis unreachable, a
  crawl of another ordering). 2.14+ handles that failure. On 2.13 the add-on adds an
  errback to that Deferred (:func:`on_crawl_failure`) that settles its own refusals:
  one ``ERROR`` line, exit status 1, as on 2.14+.
- **Timers and wake-ups from other threads.** 2.14 added
  ``scrapy.utils.asyncio.create_looping_call`` (asyncio's loop when available, else
  Twisted's ``LoopingCall``): :func:`looping_call` uses it, and Twisted's
  ``LoopingCall`` on 2.13. A wake-up from the heartbeat thread or the embedded server's
  restart goes through :func:`loop_deliverer` (the running asyncio loop's
  ``call_soon_threadsafe``, or the reactor's ``callFromThread`` under another reactor).
  The add-on never imports ``twisted.internet.reactor`` where none is installed (that
  import installs one).
- **Scrapy's reactor-less mode** (``TWISTED_REACTOR_ENABLED=False``, 2.15+) runs the
  add-on on asyncio alone (:func:`reactorless_refusal` refuses nothing any more; its
  name is kept). On 2.13 and 2.14 the setting does not exist and Scrapy ignores it;
  so does the add-on.

Nothing else the add-on uses changed between them (checked against each release's
source): the scheduler interface (``open(spider)``, ``close(reason)``,
``enqueue_request``, ``next_request``, ``has_pending_requests``), the engine's
``crawl(request)``, ``_slot.inprogress`` and ``_slot.nextcall``, the downloader's
``get_slot_key``, ``Request.to_dict``, ``request_from_dict`` and ``_find_method``,
the request fingerprinter, the add-on API and the signals; the asyncio reactor is
the default of all of them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import scrapy

if TYPE_CHECKING:
    from types import FrameType

    from scrapy.crawler import Crawler

__all__ = [
    "SCRAPY_VERSION", "SpiderArg", "close_spider", "loop_deliverer", "looping_call", "off_loop", "on_crawl_failure",
    "when_reactor_runs",
    "reactorless_refusal",
]

#: Scrapy's (major, minor) version, e.g. ``(2, 13)``.
SCRAPY_VERSION: tuple[int, int] = tuple(int(part) for part in scrapy.__version__.split(".")[:2])  # type: ignore[assignment]

#: The type of the optional ``spider`` argument of the middlewares' methods
#: (``spider: SpiderArg = None``): passed by Scrapy 2.13 only, never read.
SpiderArg = Any


def close_spider(crawler: Crawler, reason: str) -> None:
    """Ask the engine to close the crawl with ``reason`` (a finish reason such as
    ``"ipr_redis_unavailable"``); returns at once, the close goes on on the event loop.
    ``close_spider_async(reason=)`` on Scrapy 2.14+, ``close_spider(spider, reason)``
    on 2.13. Does nothing when the crawler has no engine."""
    engine = getattr(crawler, "engine", None)
    if engine is None:
        return
    close_async = getattr(engine, "close_spider_async", None)
    if close_async is not None:
        from scrapy.utils.defer import deferred_from_coro

        deferred_from_coro(close_async(reason=reason))
    else:  # Scrapy 2.13
        engine.close_spider(crawler.spider, reason)


def reactorless_refusal(settings: Any) -> str | None:
    """Why the add-on cannot run with these settings' Twisted choice, or None when it can:
    always None now. Scrapy 2.15+'s reactor-less mode (``TWISTED_REACTOR_ENABLED=False``)
    runs the scheduler on asyncio alone (:func:`looping_call`, :func:`loop_deliverer`,
    the pipelined Redis connection)."""
    return None


def looping_call(fn: Callable[..., Any], *args: Any) -> Any:
    """A looping call of ``fn(*args)`` with ``start(interval, now=)``, ``stop()`` and
    ``running``: Scrapy 2.14+'s ``create_looping_call`` (on asyncio's loop when one is
    available, which the reactor-less mode needs), Twisted's ``LoopingCall`` on 2.13."""
    from twisted.internet.task import LoopingCall

    try:
        from scrapy.utils.asyncio import create_looping_call
    except ImportError:  # Scrapy 2.13
        return LoopingCall(fn, *args)
    try:
        return create_looping_call(fn, *args)
    except RuntimeError:  # neither a reactor nor a loop yet (a scheduler driven by hand)
        return LoopingCall(fn, *args)


def off_loop(fn: Callable[[], Any], then: Callable[[Any], Any]) -> Any:
    """``then(fn())`` with ``fn`` run on a worker thread, so that the event loop goes on:
    a Deferred of ``then``'s result (the running asyncio loop's default executor, or the
    Twisted reactor's thread pool under another reactor), or, when no event loop runs (a
    scheduler driven by hand), ``fn`` and ``then`` run in place and None is returned
    (their exceptions raised)."""
    import asyncio

    from twisted.internet import defer

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        d: Any = defer.Deferred.fromFuture(asyncio.ensure_future(loop.run_in_executor(None, fn)))
    elif "twisted.internet.reactor" in sys.modules and getattr(sys.modules["twisted.internet.reactor"], "running", False):
        from twisted.internet import threads

        d = threads.deferToThread(fn)
    else:
        then(fn())
        return None
    d.addCallback(then)
    return d


def loop_deliverer() -> Callable[..., Any]:
    """``f(callable, *args)`` that runs ``callable(*args)`` on the event loop from any
    thread: the running Twisted reactor's ``callFromThread`` (any reactor), else the
    running asyncio loop's ``call_soon_threadsafe`` (Scrapy's reactor-less mode). Call it
    on the event loop's thread. Raises :class:`RuntimeError` when neither runs."""
    if "twisted.internet.reactor" in sys.modules:  # never imported here: that installs one
        from twisted.internet import reactor

        if reactor.running:
            return reactor.callFromThread
    import asyncio

    return asyncio.get_running_loop().call_soon_threadsafe


def when_reactor_runs(fn: Callable[[], Any]) -> None:
    """``fn()`` once an installed Twisted reactor that does not run yet starts running
    (``reactor.callWhenRunning``); nothing when none is installed or it runs already."""
    if "twisted.internet.reactor" in sys.modules:  # never imported here: that installs one
        from twisted.internet import reactor

        if not reactor.running:
            reactor.callWhenRunning(fn)


def on_crawl_failure(errback: Callable[[Any, Crawler], Any]) -> bool:
    """Scrapy 2.13 only: add ``errback(failure, crawler)`` to the Deferred of the
    ``Crawler.crawl()`` that runs the caller (an add-on's ``update_settings``), found on
    the call stack. The errback returns the failure to pass it on, or None when it
    settled it (then it must set ``crawler.spider = None``: Scrapy's ``CrawlerProcess``
    reads that as a crawl that failed to start, and ``scrapy crawl`` exits with status 1).
    True when it was added; False on Scrapy 2.14+ (which handles that failure itself),
    or when no ``Crawler.crawl()`` runs the caller (settings updated by hand)."""
    if SCRAPY_VERSION >= (2, 14):
        return False
    from scrapy.crawler import Crawler

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        # twisted.internet.defer._inlineCallbacks(result, gen, status, context) driving
        # the generator of the @inlineCallbacks Crawler.crawl
        if frame.f_code.co_name == "_inlineCallbacks" and frame.f_globals.get("__name__") == "twisted.internet.defer":
            gen, status = frame.f_locals.get("gen"), frame.f_locals.get("status")
            crawler = getattr(getattr(gen, "gi_frame", None), "f_locals", {}).get("self")
            deferred = getattr(status, "deferred", None)
            if getattr(gen, "__name__", "") == "crawl" and isinstance(crawler, Crawler) and deferred is not None:
                deferred.addErrback(errback, crawler)
                return True
        frame = frame.f_back
    return False
