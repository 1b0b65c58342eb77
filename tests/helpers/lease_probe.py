"""A scheduler for tests that logs what each lease asks for beside what the engine has
in progress (``SCHEDULER=tests.helpers.lease_probe.LeaseProbeScheduler``, run from the
repository): the pacing of :class:`ipr_crawl.scheduler.IprScheduler` checked in a real
``scrapy crawl``. Log line: ``lease-probe: count=N in_progress=N concurrency=N
buffer=N polite=0|1 ahead=N room=N`` (``ahead``: what the pipelined pops lease ahead of need
now; ``room``: :meth:`Pacing.lease_room`, the scheduler's own count of what the engine has
room for, read at the same moment as ``in_progress``)."""

from __future__ import annotations

import logging
import re
from typing import Any

from ipr_crawl.scheduler import IprScheduler

logger = logging.getLogger(__name__)

LINE = re.compile(
    r"lease-probe: count=(\d+) in_progress=(\d+) concurrency=(\d+) buffer=(\d+) polite=([01]) ahead=(\d+) room=(\d+)"
)


class LeaseProbeScheduler(IprScheduler):
    def _refill(self, count: int = 0, scan: int = 0, *args: Any, **kwargs: Any) -> int:
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        logger.info(
            "lease-probe: count=%d in_progress=%d concurrency=%d buffer=%d polite=%d ahead=%d room=%d",
            count, len(getattr(slot, "inprogress", ()) or ()), self._concurrency, len(self.leases.buffer), int(scan > 0),
            self.pacing.ahead(self.calls.pipe_rtt_secs),
            self.pacing.lease_room() if self.pacing.active else self.pacing.pop_batch(),
        )
        return super()._refill(count, scan, *args, **kwargs)
