"""The parts of Scrapy (and of PyDispatcher, under Scrapy's signals) that are not public
API and that the add-on still reaches: one adapter per need, in this module only.

Each adapter says what it reads, why no public API serves, the upstream request that
would replace it, and what the add-on does on a Scrapy where the part is gone (a
fallback through public API, slower or coarser). :func:`missing` lists the parts this
Scrapy lacks; the scheduler logs them in one WARNING at open, so a new Scrapy that
moves one degrades the crawl visibly instead of breaking it
(``tests/crawls/test_scrapy_versions.py`` checks on every supported Scrapy that none
is missing, and CI runs it on the oldest and the newest).

=========================== ====================================== ==============================
need                        internal                               fallback when gone
=========================== ====================================== ==============================
wake the engine             ``engine._slot.nextcall.schedule()``   the engine's 5 s heartbeat
requests in progress        ``engine._slot.inprogress``            the scheduler's own count of
                                                                   requests handed out, unsettled
the engine holds nothing    ``engine._slot.inprogress``,           never idle: escaped leases
                            ``engine.downloader.active``,          wait ``IPR_LEASE_SECS``
                            ``engine.scraper.slot.is_idle()``
exit status 1 of a failed   ``crawler.spider = None`` at           exit status 0, with the
crawl (Redis away or full)  ``engine_stopped`` (Scrapy's           crawl's own finish reason
                            ``CrawlerProcess`` reads it as         and ERROR line
                            "failed to start")
``request_scheduled`` for   PyDispatcher's ``getAllReceivers``,    Scrapy's public
a page's link requests      ``liveReceivers``, ``robustApply``     ``send_catch_log`` per link
a callback's name           ``scrapy.http.request._find_method``   ``Request.to_dict(spider=)``
the running ``scrapy``      the ``ScrapyCommand`` on the call      none known: treated as a
command (refusals of        stack (:func:`running_command`)        script
``shell``, ``fetch``, ...)
a response the HTTP cache   its own meta key ``_dont_cache``       ``dont_cache`` only
will not store              (:func:`cache_skips`)
the HTTP cache's stale copy its meta key ``cached_response``       the crawl's own revisit
being revalidated           (:func:`cached_copy`)                  history's validators
each host's politeness      ``engine.downloader.slots`` (Scrapy's  the polite lease judges a
and fetches in flight       ``Slot``: ``active``, ``queue``,       host by its own requests in
(the polite lease, the      ``delay``, ``concurrency``,            transit; the dashboard shows
dashboard)                  ``lastseen``; :func:`slot_view`)       the frontier's hosts only
=========================== ====================================== ==============================

Two more are version-specific and live in :mod:`ipr_crawl.scheduler.compat`: on Scrapy
2.13 only, the failed ``Crawler.crawl()`` Deferred found in Twisted's
``_inlineCallbacks`` frame (2.14+ handles that failure itself); and the copy of
``Request.to_dict`` in :mod:`ipr_crawl.scheduler.codec` (the same fields, with callback
names cached) is kept for speed, a subclass that overrides ``to_dict`` keeps its own.

Upstream: a scheduler that stores requests elsewhere needs a public "wake" (Scrapy
PR 1618 added the 5 s heartbeat for Frontera's case instead); an exit status from a
finish reason is Scrapy PR 8082 (``closespider_errorcount``, merged after 2.19) and
PR 8204 (a spider-set exit code, open); ``send_catch_log`` looks its receivers up per
call, which is why link requests go through PyDispatcher directly (measured with
farm-bench, 8 pairs of 1,500-page crawls of EmacsWiki, about 5 links a page: through
``send_catch_log`` the crawler spent ×1.059 the CPU, about 90 µs a link).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from scrapy import Request, signals

__all__ = [
    "cache_skips", "cached_copy", "callback_name", "engine_holds_nothing", "mark_crawl_failed", "missing", "request_scheduled_receivers",
    "requests_in_progress", "running_command", "send_to_receiver", "slot_view", "wake_engine", "warn_missing",
]

logger = logging.getLogger(__name__)


def _engine(crawler: Any) -> Any:
    """Scrapy's engine, or None before the crawl starts (Scrapy 2.19's ``Crawler.engine``
    raises RuntimeError then)."""
    try:
        return getattr(crawler, "engine", None)
    except RuntimeError:
        return None


def _slot(crawler: Any) -> Any:
    return getattr(_engine(crawler), "_slot", None)


# -- the engine's slot ------------------------------------------------------------------
def wake_engine(crawler: Any) -> bool:
    """Ask Scrapy's engine to call ``next_request`` now (``engine._slot.nextcall``, what
    the engine's own ``crawl(request)`` does after queuing a request). False when there
    is no slot to wake (before open, after close, or a Scrapy without it)."""
    nextcall = getattr(_slot(crawler), "nextcall", None)
    if nextcall is None:
        return False
    nextcall.schedule()
    return True


def requests_in_progress(crawler: Any) -> int | None:
    """How many requests Scrapy's engine holds (taken from the scheduler, until their
    response is scraped: ``engine._slot.inprogress``); None when this Scrapy does not
    say (the caller counts its own)."""
    inprogress = getattr(_slot(crawler), "inprogress", None)
    return None if inprogress is None else len(inprogress)


def engine_holds_nothing(crawler: Any) -> bool:
    """Whether Scrapy's engine holds no request: none in progress, none in the
    downloader, none being scraped (what its ``spider_is_idle`` checks besides the
    scheduler, which is the caller). False before the engine runs, or when this
    Scrapy does not say."""
    engine, slot = _engine(crawler), _slot(crawler)
    if engine is None or slot is None:
        return False
    scraper_slot = getattr(getattr(engine, "scraper", None), "slot", None)
    return (not getattr(slot, "inprogress", True) and not getattr(getattr(engine, "downloader", None), "active", True)
            and scraper_slot is not None and scraper_slot.is_idle())


# -- the exit status ------------------------------------------------------------------------
def mark_crawl_failed(crawler: Any, reason: str = "") -> None:
    """Make ``scrapy crawl`` exit with status 1 for this crawl: called at
    ``engine_stopped``; Scrapy's ``CrawlerProcess`` counts a crawler without a spider at
    its end as failed (``bootstrap_failed``), the only path to a non-zero status a
    crawl that ran has in Scrapy 2.13-2.19. With ``reason``, a ``finish_reason`` stat of
    ``finished`` (CoreStats's, written at ``spider_closed``, before) becomes it: a crawl
    that Redis stopped while Scrapy was closing it as finished has one reason, in its
    stats and in the add-on's lines (public stats API)."""
    stats = getattr(crawler, "stats", None)
    if reason and stats is not None and stats.get_value("finish_reason") == "finished":
        stats.set_value("finish_reason", reason)
    crawler.spider = None


# -- request_scheduled, sent per link ---------------------------------------------------------
def request_scheduled_receivers(crawler: Any) -> list[Any] | None:
    """The live receivers of ``request_scheduled`` on ``crawler``'s signals, through
    PyDispatcher (which Scrapy's ``SignalManager`` uses); None when this is not known
    (the caller sends the signal with ``crawler.signals.send_catch_log``)."""
    dispatcher = _pydispatch()
    if dispatcher is None:
        return None
    get_all, live, _ = dispatcher
    return list(live(get_all(crawler.signals.sender, signals.request_scheduled)))


def send_to_receiver(receiver: Any, crawler: Any, **kwargs: Any) -> Any:
    """Call one ``request_scheduled`` receiver as Scrapy's ``send_catch_log`` would
    (PyDispatcher's ``robustApply``: only the arguments it takes). Raises what it raises."""
    dispatcher = _pydispatch()
    assert dispatcher is not None, "request_scheduled_receivers() returned None: use send_catch_log"
    return dispatcher[2](receiver, signal=signals.request_scheduled, sender=crawler.signals.sender, **kwargs)


@functools.cache
def _pydispatch() -> tuple[Any, Any, Any] | None:
    try:
        from pydispatch.dispatcher import getAllReceivers, liveReceivers
        from pydispatch.robustapply import robustApply
        signal_module = importlib.import_module("scrapy.utils.signal")
    except ImportError:
        return None
    if getattr(signal_module, "liveReceivers", None) is not liveReceivers:  # Scrapy's signals left PyDispatcher
        return None
    return getAllReceivers, liveReceivers, robustApply


# -- a callback's name --------------------------------------------------------------------------
def callback_name(spider: Any, func: Any) -> Any:
    """The name :meth:`scrapy.Request.to_dict` stores for callback ``func`` of
    ``spider`` (Scrapy's ``_find_method``; through ``to_dict`` itself where it is gone).
    Raises ValueError, as Scrapy does, for a function that is not a method of the spider."""
    find = _find_method()
    if find is not None:
        return find(spider, func)
    return Request("data:,", callback=func).to_dict(spider=spider)["callback"]


@functools.cache
def _find_method() -> Callable[[Any, Any], Any] | None:
    try:
        from scrapy.http.request import _find_method as find
    except ImportError:
        return None
    return find


# -- the running command, HTTP cache's meta --------------------------------------------------------
def running_command() -> str:
    """The name of the ``scrapy`` command running this crawler (``"crawl"``,
    ``"shell"``, ...), read from the call stack (no public API says which command
    runs a crawler); ``""`` when none is (a script using ``CrawlerProcess``, scrapyd's
    ``crawl``), and so on a Scrapy whose commands are no longer ``ScrapyCommand``
    objects on the stack: the add-on then treats it as a script."""
    from scrapy.commands import ScrapyCommand

    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, ScrapyCommand):
                module = type(owner).__module__
                if module.startswith("scrapy.commands."):
                    return module.rsplit(".", 1)[-1]
                return type(owner).__name__.lower()
            frame = frame.f_back
    finally:
        del frame
    return ""


def cached_copy(request: Any) -> Any:
    """The copy Scrapy's HTTP cache holds of ``request``'s page while it validates it: the
    ``cached_response`` meta key its middleware sets (Scrapy's httpcache.py, for a stale
    copy its policy revalidates); None otherwise, or on a Scrapy that no longer sets it
    (then the validators come from the crawl's own revisit history)."""
    return request.meta.get("cached_response")


def cache_skips(request: Any) -> bool:
    """Whether Scrapy's HTTP cache middleware will not store the response to ``request``:
    the public ``dont_cache`` meta key, or ``_dont_cache``, the one the middleware sets
    itself (Scrapy's httpcache.py) for a request whose cached copy it is validating."""
    return bool(request.meta.get("dont_cache")) or "_dont_cache" in request.meta


# -- the downloader's slots -------------------------------------------------------------
#: slots a process publishes with its heartbeat (the busiest, then the latest fetched)
SLOT_VIEW = 30


def slot_view(crawler: Any, limit: int = SLOT_VIEW) -> list[dict[str, Any]] | None:
    """The downloader's slots (one per host unless a request's ``download_slot`` meta
    says otherwise; Scrapy's ``engine.downloader.slots``), busiest first, at most
    ``limit``: ``slot``, ``in_flight`` (being downloaded), ``queued`` (waiting in the
    slot for its delay), ``delay`` (s between two fetches: ``DOWNLOAD_DELAY`` or
    AutoThrottle's, per slot), ``concurrency``, ``last_fetch_age`` (s since its last
    download started, on this process's clocks; None before any). Safe from another
    thread (the dict is copied in one step under the GIL). None when this Scrapy has no
    such slots or the engine is not running."""
    slots = getattr(getattr(_engine(crawler), "downloader", None), "slots", None)
    if not isinstance(slots, dict):
        return None
    # Slot.lastseen is on time.monotonic() in recent Scrapys, time.time() in older ones:
    # the age is the one clock's reading it is not ahead of (the other gives a negative
    # age or decades)
    now = (time.monotonic(), time.time())
    rows: list[dict[str, Any]] = []
    for key, slot in dict(slots).items():
        try:
            seen = float(getattr(slot, "lastseen", 0) or 0)
            rows.append({
                "slot": str(key), "in_flight": len(slot.active), "queued": len(slot.queue),
                "delay": round(float(slot.delay), 3), "concurrency": int(slot.concurrency),
                "last_fetch_age": round(min(t - seen for t in now if t >= seen), 1) if 0 < seen <= now[1] else None,
            })
        except (AttributeError, TypeError, ValueError):
            return None
    rows.sort(key=lambda r: (-(r["in_flight"] + r["queued"]), r["last_fetch_age"] is None, r["last_fetch_age"] or 0))
    return rows[:limit]


# -- what this Scrapy lacks -----------------------------------------------------------------------
def missing(crawler: Any) -> list[str]:
    """The internals above that this Scrapy lacks, each as ``"<internal> (<what the add-on
    does instead>)"``; [] on every supported Scrapy. The engine's are checked only once it
    runs (the scheduler calls this at open)."""
    gone: list[str] = []
    engine = _engine(crawler)
    if engine is not None:
        slot = getattr(engine, "_slot", None)
        if getattr(slot, "nextcall", None) is None:
            gone.append("engine._slot.nextcall (the engine wakes only on its 5 s heartbeat)")
        if getattr(slot, "inprogress", None) is None:
            gone.append("engine._slot.inprogress (IPR_SLOW_START and IPR_WAIT_FOR_PARSE count the scheduler's own "
                        "requests; escaped leases wait IPR_LEASE_SECS)")
        if not hasattr(getattr(engine, "downloader", None), "active") or not hasattr(
                getattr(engine, "scraper", None), "slot"):
            gone.append("engine.downloader.active / engine.scraper.slot (escaped leases wait IPR_LEASE_SECS)")
        if not isinstance(getattr(getattr(engine, "downloader", None), "slots", None), dict):
            gone.append("engine.downloader.slots (the polite lease judges a host by the requests it handed "
                        "out alone; the dashboard shows no host's delay or fetches in flight)")
    if _pydispatch() is None:
        gone.append("PyDispatcher under Scrapy's signals (request_scheduled sent with send_catch_log: slower)")
    if _find_method() is None:
        gone.append("scrapy.http.request._find_method (callback names through Request.to_dict: slower)")
    return gone


def warn_missing(crawler: Any) -> list[str]:
    """:func:`missing`, said in one WARNING when any is (once per crawl, at open)."""
    gone = missing(crawler)
    if gone:
        logger.warning("ipr-crawl: this Scrapy (%s) lacks internals the add-on uses; it goes on without them: %s",
                       importlib.import_module("scrapy").__version__, "; ".join(gone))
    return gone
