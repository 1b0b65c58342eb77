"""Politeness-aware pops: the best request whose download slot can take it now.

Scrapy's downloader keeps one slot per host (``download_slot`` meta, else the host
name) and sends at most one request per ``DOWNLOAD_DELAY`` through it. A frontier
that hands out only the globally best URLs may hand out a run of URLs of one host;
they wait in that host's slot queue while the other hosts idle, and the crawl runs
at one host's pace.

:class:`PolitePop` (``IPR_POLITE_POP``) hands out the first leased request, in lease
order, whose slot is *free*: fewer than ``SLOT_DEPTH`` (2) requests waiting in the slot's queue
for its delay or handed out for it and not yet in the downloader, fewer active
requests than the slot's concurrency. When no leased request has a free slot, it asks the frontier for
more with the busy slots listed: ``pop.lua``'s polite scan leases, among the first
``IPR_POLITE_SCAN`` frontier entries (best first) and ``IPR_POLITE_SCAN`` more from a
rank that moves on with every such pop (so that a host whose URLs all rank low is
found too), the best entry of each slot that is not busy, at most one per slot. So the global order holds as far as politeness allows:
the best URL goes first whenever its host can take it, and otherwise the best URL of a
host that can. When the scan finds nothing (every host in reach is busy), or
``IPR_POLITE_BUFFER_SIZE`` requests are held, it returns None and Scrapy asks again
when a download finishes.

Leases are unchanged: every held request is leased in Redis; one held longer than
half ``IPR_LEASE_SECS`` is handed back to the frontier (``ack`` release) before its
lease could expire; the scheduler releases what is left at close; so nothing is
fetched twice or lost, and a resumed crawl continues. With one host every pop is the
plain one (the best entry), so the order is the plain order.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.utils.httpobj import urlparse_cached

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["PolitePop"]

#: A request handed out counts against its slot until it reaches the downloader,
#: or for at most this long (a downloader middleware may drop it on the way).
TRANSIT_SECS = 5.0
#: Requests a slot may hold waiting for their delay (its queue plus those on their
#: way to it): 2 keeps a host busy while the engine does not ask for requests
#: (the scraper is backed out on a large page), with one URL of look-ahead per host.
SLOT_DEPTH = 2


class PolitePop:
    """Chooses which buffered request the scheduler hands out (module docstring).

    ``limit``: requests held at most (``IPR_POLITE_BUFFER_SIZE``); ``hold_secs``:
    a request buffered longer goes back to the frontier.
    """

    def __init__(self, crawler: Crawler, limit: int, hold_secs: float) -> None:
        self.crawler = crawler
        self.limit = limit
        self.hold_secs = hold_secs
        self._since: dict[bytes, float] = {}  # lease member -> when buffered
        self._transit: dict[int, tuple[str, float]] = {}  # id(request) -> (slot, handed at)
        #: rank where pop.lua's second scan window starts; moved on by each polite pop
        self.cursor = 0
        crawler.signals.connect(self._reached, signals.request_reached_downloader)

    def _reached(self, request: Request, spider: Any = None) -> None:
        self._transit.pop(id(request), None)

    def _downloader(self) -> Any:
        """Scrapy's downloader, or None where it has no ``slots`` dict (internals.py's
        :func:`~ipr_crawl.scheduler.internals.missing` says so at open): slots are then
        judged by the requests this scheduler handed out alone."""
        engine = getattr(self.crawler, "engine", None)
        downloader = getattr(engine, "downloader", None)
        return downloader if isinstance(getattr(downloader, "slots", None), dict) else None

    def _free(self, key: str, downloader: Any, now: float) -> bool:
        """True if slot ``key`` can take a request now (fewer than ``SLOT_DEPTH`` waiting)."""
        waiting = sum(1 for slot, at in self._transit.values() if slot == key and now - at < TRANSIT_SECS)
        slot = downloader.slots.get(key) if downloader is not None else None
        if slot is None:
            return waiting < SLOT_DEPTH
        return waiting + len(slot.queue) < SLOT_DEPTH and len(slot.active) < slot.concurrency

    def take(
        self,
        buffer: deque[tuple[bytes, Request]],
        lease_more: Callable[[list[str]], int],
        release: Callable[[list[tuple[bytes, Request]]], None],
    ) -> tuple[bytes, Request] | None:
        """Remove and return the first buffered ``(lease member, request)`` whose slot
        is free. When none is, ``lease_more(busy slots)`` leases the best request of
        each other slot (pop.lua's polite scan) into ``buffer`` and returns how many it
        leased, unless ``limit`` requests are held; None: wait. ``release(items)``
        hands stale entries back to the frontier."""
        now = time.monotonic()
        self._expire(buffer, release, now)
        downloader = self._downloader()
        self._transit = {k: v for k, v in self._transit.items() if now - v[1] < TRANSIT_SECS}
        checked: dict[str, bool] = {}

        def free(key: str) -> bool:  # each slot judged once per call
            if key not in checked:
                checked[key] = self._free(key, downloader, now)
            return checked[key]

        picked = self._first_free(buffer, 0, downloader, free, now)
        if picked is not None or len(buffer) >= self.limit:
            return picked
        known = [slot for slot, _ in self._transit.values()]
        if downloader is not None:
            known.extend(downloader.slots)
        busy = sorted({key for key in [*checked, *known] if not free(key)})
        start = len(buffer)
        if lease_more(busy) == 0:
            return None
        return self._first_free(buffer, start, downloader, free, now)

    def _first_free(
        self, buffer: deque[tuple[bytes, Request]], start: int, downloader: Any, free: Callable[[str], bool],
        now: float,
    ) -> tuple[bytes, Request] | None:
        for i in range(start, len(buffer)):
            member, request = buffer[i]
            self._since.setdefault(member, now)
            key = self._slot_key(request, downloader)
            if free(key):
                del buffer[i]
                self._since.pop(member, None)
                self._transit[id(request)] = (key, now)
                return member, request
        return None

    @staticmethod
    def _slot_key(request: Request, downloader: Any) -> str:
        if downloader is not None:
            return str(downloader.get_slot_key(request))
        return str(request.meta.get("download_slot") or urlparse_cached(request).hostname or "")

    def _expire(
        self, buffer: deque[tuple[bytes, Request]], release: Callable[[list[tuple[bytes, Request]]], None], now: float
    ) -> None:
        stale = [item for item in buffer if now - self._since.get(item[0], now) > self.hold_secs]
        if not stale:
            return
        gone = {m for m, _ in stale}
        kept = [item for item in buffer if item[0] not in gone]
        buffer.clear()
        buffer.extend(kept)
        for member in gone:
            self._since.pop(member, None)
        release(stale)
