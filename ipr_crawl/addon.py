"""The add-on: one setting turns ipr-crawl on.

``ADDONS = {"ipr_crawl.Addon": 0}`` (or the class itself) installs the defaults
of :data:`ipr_crawl.config.DEFAULTS` at ``addon`` priority (anything the user
sets wins), wires :class:`~ipr_crawl.scheduler.IprScheduler`, the link-graph
spider middleware and the frontier downloader middleware (and, with
``IPR_REVISIT_ENABLED``, the conditional-GET middleware), and checks every
``IPR_*`` value before the crawl starts (:class:`~ipr_crawl.config.SettingError`
naming a bad one).

It steps aside, and says so, for Scrapy's one-off commands (``shell``, ``fetch``,
``view``, ``parse``, ``check``, ``bench``): they run on Scrapy's own in-memory
scheduler and leave the crawl's frontier untouched. It refuses a ``SCHEDULER``
setting that would silently replace its scheduler, and warns about settings the
frontier gives another meaning (``JOBDIR``, ``DUPEFILTER_CLASS``; ``DEPTH_PRIORITY`` with larger-sites-first).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ipr_crawl.config import DEFAULTS, SettingError, check_settings, read
from ipr_crawl.scheduler.compat import on_crawl_failure, reactorless_refusal
from ipr_crawl.scheduler.internals import running_command

__all__ = ["Addon", "ONE_OFF_COMMANDS", "crawl_opened"]

logger = logging.getLogger(__name__)

SCHEDULER = "ipr_crawl.scheduler.IprScheduler"
SPIDER_MIDDLEWARE = "ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware"
#: The link-graph middleware's order: at the engine's end of the spider middleware
#: chain, below Scrapy's own (25 and up) and lower still when the project has one below,
#: so that every other spider middleware sees the requests a callback yields.
SPIDER_MIDDLEWARE_ORDER = -1000
DOWNLOADER_MIDDLEWARE = "ipr_crawl.middlewares.frontier.FrontierDownloaderMiddleware"
#: Revisits (IPR_REVISIT_ENABLED): inside HttpCompression (590) and Redirect (600),
#: outside HttpCache (900); see middlewares/conditional.py.
CONDITIONAL_MIDDLEWARE = "ipr_crawl.middlewares.conditional.ConditionalGetMiddleware"
CONDITIONAL_ORDER = 580
#: Revisits beside Scrapy's HTTP cache: the validators, set right after the cache (its order + 1).
CACHE_VALIDATORS_MIDDLEWARE = "ipr_crawl.middlewares.conditional.CacheValidatorsMiddleware"
#: Scrapy commands that fetch a few pages for a person to look at: the add-on steps aside.
ONE_OFF_COMMANDS = ("shell", "fetch", "view", "parse", "check", "bench")
_FRONTIER_QUEUES = "ipr-crawl's scheduler keeps every request in the crawl's frontier in Redis, ordered by IPR_ORDERING"
#: Scheduler settings of Scrapy's and scrapy-redis's that the add-on's scheduler does not read: why.
_UNUSED_SCHEDULER_SETTINGS = {
    "SCHEDULER_PRIORITY_QUEUE": _FRONTIER_QUEUES,
    "SCHEDULER_DISK_QUEUE": _FRONTIER_QUEUES,
    "SCHEDULER_MEMORY_QUEUE": _FRONTIER_QUEUES,
    "SCHEDULER_START_DISK_QUEUE": _FRONTIER_QUEUES + " (start requests included)",
    "SCHEDULER_START_MEMORY_QUEUE": _FRONTIER_QUEUES + " (start requests included)",
    "SCHEDULER_QUEUE_CLASS": _FRONTIER_QUEUES + " (scrapy-redis's queue is read once, with IPR_IMPORT_SCRAPY_REDIS)",
    "SCHEDULER_DUPEFILTER_CLASS": "the frontier drops a request whose fingerprint (REQUEST_FINGERPRINTER_CLASS) "
                                  "it has seen, unless dont_filter",
    "SCHEDULER_IDLE_BEFORE_CLOSE": "a crawl closes when none of its processes has requests left or in flight",
}
_DEFAULT_DUPEFILTERS = ("scrapy.dupefilters.RFPDupeFilter", "scrapy_redis.dupefilter.RFPDupeFilter")


class OneLineErrors(logging.Filter):
    """Replaces the log record of a crawl that ipr-crawl refused to start (a bad
    setting, Redis unreachable, a crawl written by an incompatible version), which
    asyncio, Twisted or Scrapy would print with a traceback, by ONE line of the add-on's
    logger, ``[ipr_crawl.addon] ERROR: ipr-crawl: <what and how to fix it>``. With
    ``LOG_LEVEL`` DEBUG (Scrapy's default) a refusal other than a bad setting is followed
    by its traceback at DEBUG. Only two kinds of records are held back: those that carry
    the refusal itself, and the ERRORs Scrapy logs afterwards for the refused crawl's
    spider (:data:`~ipr_crawl.scheduler.bootstrap.REFUSED_SPIDERS`: its CoreStats closing
    a spider that never opened, its scraper's close); every other record, another
    crawler's included, passes. The exit status stays non-zero (Scrapy's own handling of a
    failed crawl)."""

    def __init__(self) -> None:
        super().__init__()
        self.keep_traceback = False
        self.refused: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        from ipr_crawl.scheduler.bootstrap import REFUSED_SPIDERS, refusal_of

        exc = refusal_of(record.exc_info[1] if record.exc_info else None)
        if exc is None:
            failure = getattr(record, "failure", None)
            exc = refusal_of(getattr(failure, "value", None))
        if exc is None:
            spider = getattr(record, "spider", None)
            refused_spider = spider is not None and spider in REFUSED_SPIDERS
            return not (refused_spider and record.levelno >= logging.ERROR)
        if exc is self.refused:
            return False  # said once already
        self.refused = exc
        logger.error("ipr-crawl: %s", exc)
        if self.keep_traceback and not isinstance(exc, SettingError):
            logger.debug("ipr-crawl: where it was raised", exc_info=(type(exc), exc, exc.__traceback__))
        return False


ONE_LINE_ERRORS = OneLineErrors()
#: Loggers through which Scrapy, asyncio and Twisted report a crawl that failed to start.
_REPORTING_LOGGERS = (
    "asyncio", "scrapy.crawler", "scrapy.core.engine", "scrapy.utils.defer", "scrapy.utils.signal", "twisted",
)


def _settle_refusal(failure: Any, crawler: Any) -> Any:
    """Errback of a crawl's start on Scrapy 2.13 (:func:`~ipr_crawl.scheduler.compat.on_crawl_failure`):
    a refusal of ipr-crawl's is said in its one line, if nothing said it yet, and
    settled as a crawl that failed to start (exit status 1); any other failure is
    passed on."""
    from ipr_crawl.scheduler.bootstrap import refusal_of

    exc = refusal_of(failure.value)
    if exc is None:
        return failure
    if ONE_LINE_ERRORS.refused is not exc:
        logging.getLogger("scrapy.crawler").error(
            "%s", exc, exc_info=(type(failure.value), failure.value, failure.getTracebackObject())
        )
    crawler.spider = None  # Scrapy's CrawlerProcess: the crawl failed to start
    return None


#: crawlers of this process whose start may still be refused (installed, not yet opened)
_STARTING = [0]


def install_one_line_errors(settings: Any) -> None:
    """Attach :data:`ONE_LINE_ERRORS` to the loggers that report a failed start, for one
    more crawler whose start may be refused (:func:`crawl_opened` detaches it)."""
    ONE_LINE_ERRORS.keep_traceback = str(settings.get("LOG_LEVEL", "DEBUG")).upper() == "DEBUG"
    _STARTING[0] += 1
    for name in _REPORTING_LOGGERS:
        log = logging.getLogger(name)
        if ONE_LINE_ERRORS not in log.filters:
            log.addFilter(ONE_LINE_ERRORS)


def _opened(spider: Any = None) -> None:
    crawl_opened()


def crawl_opened() -> None:
    """A crawler's start can no longer be refused (its frontier opened): once no crawler
    of this process is still starting, :data:`ONE_LINE_ERRORS` leaves the loggers of
    asyncio, Twisted and Scrapy, which then log as they would without the add-on. A
    refused crawler keeps it: its refusal and Scrapy's follow-on records come later."""
    _STARTING[0] = max(0, _STARTING[0] - 1)
    if _STARTING[0]:
        return
    for name in _REPORTING_LOGGERS:
        logging.getLogger(name).removeFilter(ONE_LINE_ERRORS)


def _component(settings: Any, name: str, path: str, order: int) -> None:
    """Put the class at ``path`` into the component dict ``name`` at ``order``, unless the
    project lists it already, by class or by import path (Scrapy's
    ``setdefault_in_component_priority_dict``)."""
    from scrapy.utils.misc import load_object

    settings.setdefault_in_component_priority_dict(name, load_object(path), order)


def _engine_end(settings: Any) -> int:
    """:data:`SPIDER_MIDDLEWARE_ORDER`, or one below the lowest order of the spider
    middlewares listed (with ``SPIDER_MIDDLEWARES_BASE``) when that is lower."""
    orders = [v for v in settings.getwithbase("SPIDER_MIDDLEWARES").values()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return min([SPIDER_MIDDLEWARE_ORDER, *(math.floor(v) - 1 for v in orders)])


def _order_of(settings: Any, name: str, path: str) -> Any:
    """The order of the component at ``path`` in ``name`` with its ``_BASE`` (None:
    disabled or absent), whether listed by class or by import path."""
    from scrapy.utils.misc import load_object

    cls = load_object(path)
    found: Any = None
    for key, value in settings.getwithbase(name).items():
        try:
            if key == path or (load_object(key) if isinstance(key, str) else key) is cls:
                found = value
        except (ImportError, NameError, ValueError, AttributeError):
            continue
    return found


def _warn(message: str, *args: Any) -> None:
    logger.warning("ipr-crawl: " + message, *args)


class Addon:
    """Scrapy add-on enabling ipr-crawl (see the module docstring)."""

    def __init__(self, crawler: Any = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Any) -> Addon:
        return cls(crawler)

    def update_settings(self, settings: Any) -> None:
        on_crawl_failure(_settle_refusal)  # Scrapy 2.13: its failed start, said in one line too
        for name, value in DEFAULTS.items():
            settings.set(name, value, priority="addon")
        try:
            enabled = read(settings, "IPR_ENABLED")
        except SettingError:
            install_one_line_errors(settings)
            raise
        if not enabled:
            return
        command = running_command()
        if command in ONE_OFF_COMMANDS:
            settings.set("IPR_ENABLED", False, priority="cmdline")
            logger.info(
                "ipr-crawl: off for `scrapy %s`: its requests go through Scrapy's own "
                "scheduler and the crawl's frontier is not touched", command,
            )
            return
        install_one_line_errors(settings)
        if self.crawler is not None:  # opened: its start can no longer be refused
            from scrapy import signals

            self.crawler.signals.connect(_opened, signal=signals.spider_opened, weak=False)
        # Checks every value now (revisit settings with revisits off too), so that a
        # typo fails the crawl before it starts, in one line naming the setting.
        check_settings(settings, spider_name="(spider)")
        self._check_scheduler(settings)
        refusal = reactorless_refusal(settings)
        if refusal is not None:
            raise SettingError(refusal)
        settings.set("SCHEDULER", SCHEDULER, priority="addon")
        # The middlewares as classes, each at its order unless the project gives it one (its
        # own order, or None to disable it), as Scrapy's add-on docs show.
        # At the engine's end of the chain: sees the callback's output as the engine would.
        _component(settings, "SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARE, _engine_end(settings))
        # Outermost downloader middleware: sees only final download failures.
        _component(settings, "DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARE, 1)
        if read(settings, "IPR_REVISIT_ENABLED"):
            _component(settings, "DOWNLOADER_MIDDLEWARES", CONDITIONAL_MIDDLEWARE, CONDITIONAL_ORDER)
            cache = _order_of(settings, "DOWNLOADER_MIDDLEWARES", "scrapy.downloadermiddlewares.httpcache.HttpCacheMiddleware")
            if cache is not None:  # NotConfigured unless HTTPCACHE_ENABLED
                _component(settings, "DOWNLOADER_MIDDLEWARES", CACHE_VALIDATORS_MIDDLEWARE, int(cache) + 1)
        self._warn_changed_meanings(settings)

    @staticmethod
    def _check_scheduler(settings: Any) -> None:
        """A ``SCHEDULER`` set by the user (a scrapy-redis project's, say) would win over
        the add-on's and leave it half on: refuse it, unless it is a subclass of ours."""
        from scrapy.settings import SETTINGS_PRIORITIES
        from scrapy.utils.misc import load_object

        if settings.getpriority("SCHEDULER") <= SETTINGS_PRIORITIES["addon"]:
            return
        value = settings.get("SCHEDULER")
        try:
            cls = load_object(value) if isinstance(value, str) else value
        except (ImportError, ValueError, NameError):
            cls = None
        from ipr_crawl.scheduler import IprScheduler

        # (not issubclass: Scrapy's BaseScheduler metaclass answers True for any class
        # with a scheduler's methods)
        if isinstance(cls, type) and IprScheduler in cls.__mro__:
            return
        raise SettingError(
            f"SCHEDULER={value!r} replaces ipr-crawl's scheduler, so the add-on would do nothing: "
            "remove the SCHEDULER setting (ipr-crawl reads scrapy-redis's REDIS_URL), or turn the "
            "add-on off with IPR_ENABLED=False"
        )

    @staticmethod
    def _warn_unused_scheduler_settings(settings: Any) -> None:
        """One WARNING for each scheduler setting of Scrapy's or scrapy-redis's the project
        sets (above the add-ons' priority) that ipr-crawl's scheduler does not read."""
        from scrapy.settings import SETTINGS_PRIORITIES

        for name, why in _UNUSED_SCHEDULER_SETTINGS.items():
            if (settings.getpriority(name) or 0) > SETTINGS_PRIORITIES["addon"]:
                _warn("%s=%r is not used: %s", name, settings.get(name), why)

    @staticmethod
    def _warn_changed_meanings(settings: Any) -> None:
        if settings.get("JOBDIR"):
            _warn(
                "JOBDIR=%r is not where this crawl's requests are kept: the frontier lives in Redis "
                "(IPR_REDIS_URL, or the embedded server in IPR_DATA_DIR) and a second run resumes the crawl "
                "%s; JOBDIR keeps only the spider's state", settings.get("JOBDIR"),
                "IPR_CRAWL_ID" if settings.get("IPR_CRAWL_ID") else "of the same project and spider",
            )
        dupefilter = settings.get("DUPEFILTER_CLASS")
        if dupefilter is not None and not isinstance(dupefilter, str):  # a class: by its import path
            dupefilter = f"{getattr(dupefilter, '__module__', '')}.{getattr(dupefilter, '__qualname__', dupefilter)}"
        if dupefilter and dupefilter not in _DEFAULT_DUPEFILTERS:
            _warn(
                "DUPEFILTER_CLASS=%r is not used: the frontier drops a request whose fingerprint "
                "(REQUEST_FINGERPRINTER_CLASS) it has seen, unless dont_filter", dupefilter,
            )
        Addon._warn_unused_scheduler_settings(settings)
        if settings.getint("DEPTH_PRIORITY") and settings.get("IPR_ORDERING") == "larger-sites-first":
            _warn(
                "DEPTH_PRIORITY=%s has no effect with IPR_ORDERING='larger-sites-first', which takes the "
                "site with most queued URLs first whatever a request's priority; any other ordering "
                "orders by Request.priority first", settings.getint("DEPTH_PRIORITY"),
            )
