"""The add-on: one setting turns ipr-crawl on.

``ADDONS = {"ipr_crawl.Addon": 0}`` (or the class itself) installs the defaults
of :data:`ipr_crawl.config.DEFAULTS` at ``addon`` priority (anything the user
sets wins), wires :class:`~ipr_crawl.scheduler.IprScheduler`, the link-graph
spider middleware and the frontier downloader middleware (and, with
``IPR_REVISIT_ENABLED``, the conditional-GET middleware), and checks every
``IPR_*`` value, raising :class:`ValueError` naming a bad one before the crawl
starts.
"""

from __future__ import annotations

from typing import Any

from ipr_crawl.config import DEFAULTS, FrontierConfig

__all__ = ["Addon"]

SCHEDULER = "ipr_crawl.scheduler.IprScheduler"
SPIDER_MIDDLEWARE = "ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware"
DOWNLOADER_MIDDLEWARE = "ipr_crawl.middlewares.frontier.FrontierDownloaderMiddleware"
#: Revisits (IPR_REVISIT_ENABLED): inside HttpCompression (590) and Redirect (600),
#: outside HttpCache (900); see middlewares/conditional.py.
CONDITIONAL_MIDDLEWARE = "ipr_crawl.middlewares.conditional.ConditionalGetMiddleware"
CONDITIONAL_ORDER = 580


class Addon:
    """Scrapy add-on enabling ipr-crawl (see the module docstring)."""

    def update_settings(self, settings: Any) -> None:
        for name, value in DEFAULTS.items():
            settings.set(name, value, priority="addon")
        if not settings.getbool("IPR_ENABLED"):
            return
        # Checks every value now, so that a typo fails the crawl before it starts.
        FrontierConfig.from_settings(settings, spider_name="(spider)")
        settings.set("SCHEDULER", SCHEDULER, priority="addon")
        # Outermost spider middleware: sees the final output of the callback.
        settings.set_in_component_priority_dict("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARE, 10)
        # Outermost downloader middleware: sees only final download failures.
        settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARE, 1)
        if settings.getbool("IPR_REVISIT_ENABLED"):
            from ipr_crawl.config import RevisitConfig

            RevisitConfig.from_settings(settings)
            settings.set_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", CONDITIONAL_MIDDLEWARE, CONDITIONAL_ORDER
            )
