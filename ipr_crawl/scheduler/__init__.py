"""Scrapy adapters of the frontier: the scheduler and what it owns.

- :mod:`~ipr_crawl.scheduler.core`: :class:`IprScheduler` (Scrapy's scheduler interface).
- :mod:`~ipr_crawl.scheduler.codec`: requests to and from msgpack payloads (never pickle).
- :mod:`~ipr_crawl.scheduler.polite`: politeness-aware choice among leased requests.
- :mod:`~ipr_crawl.scheduler.refresher`: due revisits into the frontier.
- :mod:`~ipr_crawl.scheduler.linkcache`: canonical URLs and ids this process has seen.
"""

from ipr_crawl.meta import LEASE_META, lease_of
from ipr_crawl.scheduler.core import IprScheduler, frontier_of, scheduler_of

__all__ = ["LEASE_META", "IprScheduler", "frontier_of", "lease_of", "scheduler_of"]
