"""Pacing: how many requests the scheduler leases now, and waking the engine.

``IPR_SLOW_START`` and ``IPR_WAIT_FOR_PARSE`` hold pops to the engine's requests in
progress; ``IPR_POP_BATCH_SIZE`` caps a pop at half of ``CONCURRENT_REQUESTS``. What
it reads of Scrapy's engine that is not public API (its requests in progress, waking
it) goes through :mod:`ipr_crawl.scheduler.internals`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ipr_crawl.config import FrontierConfig
from ipr_crawl.scheduler.internals import engine_holds_nothing, requests_in_progress, wake_engine

__all__ = ["Pacing"]


class Pacing:
    """The pacing of one scheduler: ``config`` its settings, ``concurrency``
    ``CONCURRENT_REQUESTS`` (at least 1), ``sent()`` the pages this process has sent to be
    recorded, ``stats_inc(key)`` the waits' counter, ``handed_out()`` the requests handed
    to the engine and not settled."""

    def __init__(
        self, crawler: Any, config: FrontierConfig, concurrency: int, sent: Callable[[], int],
        stats_inc: Callable[[str], None], handed_out: Callable[[], int] = lambda: 0,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.concurrency = concurrency
        self.sent = sent
        self.stats_inc = stats_inc
        #: the requests this process handed to the engine and has not settled (where
        #: Scrapy does not say how many it holds)
        self.handed_out = handed_out
        #: wake() from another thread goes through deliver (on_loop)
        self.loop_thread = 0
        self.deliver: Callable[..., Any] | None = None
        #: requests the engine took per second over the last whole second (ahead)
        self.rate = 0.0
        self._window = 0.0
        self._taken = 0

    def engine_idle(self) -> bool:
        """Whether Scrapy's engine holds no request: none in progress, none in the
        downloader, none being scraped (:func:`~ipr_crawl.scheduler.internals.engine_holds_nothing`)."""
        return engine_holds_nothing(self.crawler)

    def held_back(self) -> bool:
        """``IPR_SLOW_START``: True while the engine already has as many requests in
        progress as this process has sent pages to be recorded (at least 1). The allowance grows by
        one per recorded page (it doubles each round trip, as TCP's slow start) until it
        reaches ``CONCURRENT_REQUESTS``; the engine asks again after each response.
        ``IPR_WAIT_FOR_PARSE``: also True while ``CONCURRENT_REQUESTS`` requests are
        downloading or being parsed; the engine asks again when a page's parse ends.
        Counted as ``ipr/frontier/slow_start_waits`` while the allowance grows, else
        ``ipr/frontier/parse_waits``."""
        if self.lease_room() > 0:
            return False
        self.stats_inc("ipr/frontier/slow_start_waits" if self.ramping else "ipr/frontier/parse_waits")
        return True

    @property
    def ramping(self) -> bool:
        """``IPR_SLOW_START`` and this process has sent fewer pages to be recorded
        than ``CONCURRENT_REQUESTS``: the allowance is still growing."""
        return self.config.slow_start and self.sent() < self.concurrency

    @property
    def active(self) -> bool:
        """Whether pops are held to :meth:`lease_room` (``IPR_SLOW_START`` or
        ``IPR_WAIT_FOR_PARSE``)."""
        return self.config.slow_start or self.config.wait_for_parse

    def lease_room(self) -> int:
        """How many requests to lease now, at most :meth:`pop_batch`: the allowance less
        the engine's requests in progress (downloading or being parsed: Scrapy's engine
        counts a request until its response is scraped). The allowance is
        ``CONCURRENT_REQUESTS``, and under ``IPR_SLOW_START`` the pages this process sent
        to be recorded (at least 1) until those reach it. Once they have, without
        ``IPR_WAIT_FOR_PARSE``, the batch size whatever is in progress."""
        ramping = self.ramping
        if not ramping and not self.config.wait_for_parse:
            return self.pop_batch()
        allowance = max(1, self.sent()) if ramping else self.concurrency
        in_progress = requests_in_progress(self.crawler)
        if in_progress is None:  # a Scrapy that does not say: the requests handed out, not settled
            in_progress = self.handed_out()
        return min(self.pop_batch(), max(0, allowance - in_progress))

    def ahead(self, rtt_secs: float) -> int:
        """How many requests to lease ahead of need with pipelined pops: those the engine
        takes during one pop's round trip (``rtt_secs``, from a call's write to its reply
        handled) at the rate it has been taking them (requests per second, over the last
        second), with half again for the variance, rounded; at most :meth:`pop_batch`, so
        that the order stays the ordering's (0 on loopback at a few hundred pages/s)."""
        return min(self.pop_batch(), int(self.rate * rtt_secs * 1.5 + 0.5))

    def took(self) -> None:
        """The engine took a request (:attr:`rate`)."""
        now = time.monotonic()
        self._taken += 1
        if now - self._window >= 1.0:
            self.rate = self._taken / (now - self._window) if self._window else 0.0
            self._window, self._taken = now, 0

    def pop_batch(self) -> int:
        """Requests leased per pop: ``IPR_POP_BATCH_SIZE``, at most half of
        ``CONCURRENT_REQUESTS`` (at least 1). A request leased ahead is chosen before the
        pages in progress are recorded; leasing more at once than the engine runs at once
        would make the order staler than the concurrency itself does."""
        return min(self.config.pop_batch_size, max(1, self.concurrency // 2))

    def wake(self) -> None:
        """Ask the engine for requests now. The link-graph middleware stores a page's
        new requests in Redis instead of passing them to the engine, whose ``crawl()``
        would do this; without it an engine that found the frontier empty while pages
        were being parsed waits for the next download or its 5 s heartbeat."""
        if self.deliver is not None and threading.get_ident() != self.loop_thread:
            # a callback off the event loop (a reply handled on the Redis thread at close):
            # the engine's timers belong to the loop's thread
            self.deliver(self.wake)
            return
        wake_engine(self.crawler)

    def later(self, fn: Callable[[], Any]) -> Callable[[], None]:
        """``fn`` as a callable for another thread: it runs ``fn()`` on the event loop
        (at once where no loop runs: a scheduler driven by hand)."""
        def on_loop() -> None:
            if self.deliver is not None and threading.get_ident() != self.loop_thread:
                self.deliver(fn)
            else:
                fn()

        return on_loop

    def on_loop(self, deliver: Callable[..., Any] | None) -> None:
        """Called on the event loop's thread at open: :meth:`wake` from another thread
        goes through ``deliver(fn)`` (:func:`~ipr_crawl.scheduler.compat.loop_deliverer`;
        None: a scheduler driven by hand, woken where it is called)."""
        self.loop_thread = threading.get_ident()
        self.deliver = deliver
