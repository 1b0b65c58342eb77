"""``scrapy ipr status|top|release-leases|dashboard [SPIDER]`` (``scrapy frontier``, its
former name, is an alias): the ``ipr-crawl`` operator commands inside a Scrapy project,
which find the crawl the way ``scrapy crawl`` does (``dashboard``: every crawl of the
store unless a spider or ``--crawl-id`` names one; :mod:`ipr_crawl.dashboard.server`).

The store, found as the scheduler finds it (:func:`ipr_crawl.redis_location.locate`):
``IPR_REDIS_URL`` with its ``IPR_REDIS_SSL_*`` files; else scrapy-redis's ``REDIS_URL``
(or ``REDIS_HOST`` and ``REDIS_PORT``); else the project's embedded store
(``IPR_DATA_DIR``, default ``.scrapy/ipr`` of the project). The crawl: ``--crawl-id``, else ``IPR_CRAWL_ID``, else
``BOT_NAME.SPIDER`` when a spider is named, else the only crawl in the store. A store
or crawl that does not exist is an error naming the folder and the crawl id; nothing is
created. Registered through the ``scrapy.commands`` entry point (pyproject.toml).
"""

from __future__ import annotations

import argparse
from typing import Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from ipr_crawl.config import default_crawl_id
from ipr_crawl.redis_location import locate
from ipr_crawl.store.inspect import (
    FrontierUnavailable,
    NoSuchCrawl,
    open_crawl,
    operate,
)

__all__ = ["FrontierCommand", "store_location"]

ACTIONS = ("status", "top", "release-leases", "dashboard")


def store_location(settings: Any) -> tuple[str, str]:
    """``(redis URL or "", embedded data folder)`` of a project's crawls (see module doc);
    the URL carries the TLS files in its query (redis-py reads them). Raises
    :class:`ValueError` for a TLS setting that cannot be used."""
    where = locate(settings, createdir=False)
    return where.url_with_tls(), where.data_dir


class FrontierCommand(ScrapyCommand):
    """``scrapy ipr`` (alias ``scrapy frontier``): see the module doc."""

    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "status|top|release-leases|dashboard [SPIDER] [options]"

    def short_desc(self) -> str:
        return "Show or operate the ipr-crawl frontier of a spider's crawl"

    def long_desc(self) -> str:
        return (
            "status: counts, processes and heartbeats, pages/s; top: the best frontier URLs; "
            "release-leases: hand back requests leased by stopped crawlers; dashboard: a live web page of the "
            "store's crawls and their Prometheus metrics (/metrics). The crawl and its "
            "store are found as `scrapy crawl SPIDER` finds them."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--crawl-id", default="", help="the crawl (default: IPR_CRAWL_ID, else BOT_NAME.SPIDER)")
        parser.add_argument("-n", type=int, default=20, help="top: how many URLs (default 20)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--all", action="store_true", help="release-leases: every lease, also of live processes")
        parser.add_argument("--dead", action="store_true", help="release-leases: put back the dead-lettered requests")
        parser.add_argument("--bind", default="127.0.0.1", help="dashboard: address (default 127.0.0.1; another "
                            "needs --token)")
        parser.add_argument("--port", type=int, default=8450, help="dashboard: port (default 8450)")
        parser.add_argument("--token", default="", help="dashboard: asked of every request (default: "
                            "IPR_DASHBOARD_TOKEN)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if not args or args[0] not in ACTIONS or len(args) > 2:
            raise UsageError(f"give one of {', '.join(ACTIONS)}, then optionally a spider name")
        action = args[0]
        crawl_id = opts.crawl_id or str(self.settings.get("IPR_CRAWL_ID") or "")
        if not crawl_id and len(args) == 2:
            crawl_id = default_crawl_id(self.settings, args[1])
        if action == "dashboard":
            from ipr_crawl.dashboard.server import run

            url, data_dir = store_location(self.settings)
            self.exitcode = run(crawl_id, url, data_dir, bind=opts.bind, port=opts.port, token=opts.token,
                                command="scrapy frontier dashboard")
            return
        try:
            url, data_dir = store_location(self.settings)
            store = open_crawl(crawl_id, url, data_dir)
        except (NoSuchCrawl, FrontierUnavailable, ValueError) as exc:
            print(f"scrapy frontier {action}: {exc}")
            self.exitcode = 1
            return
        try:
            print(operate(store, action, opts.n, opts.json, opts.all, getattr(opts, "dead", False)))
        finally:
            store.client.close()
