"""The crawler process's heartbeat: its leases stay its own while it beats.

Every ``IPR_HEARTBEAT_SECS`` a daemon thread renews this process's entry in the
crawl's ``holders`` set with a deadline 2 × that ahead
(:meth:`~ipr_crawl.store.FrontierStore.beat`). The frontier's pop script hands the
leases of a holder whose deadline has passed back to the frontier, so the requests of
a process killed with SIGKILL are fetched again within about 2 × ``IPR_HEARTBEAT_SECS``
plus one pop, instead of after ``IPR_LEASE_SECS``.

A thread, not the reactor, beats: a spider callback that blocks the reactor for
longer than the heartbeat (a slow parse, a synchronous call) does not make a living
process look dead, while a process that is gone stops beating at once. Pooled
Redis connections are shared with the reactor thread (redis-py's client is
thread-safe). The same thread writes the crawl's timeline samples
(:meth:`~ipr_crawl.store.FrontierStore.sample`) and, when it sees another holder's
heartbeat gone, wakes the engine so that a pop hands that holder's leases back now
(the engine of an idle crawl would otherwise ask only every 5 s).

URLFrontier (crawler-commons, 2020) gives a lease a fixed 30 s; Frontera and
scrapy-redis have no leases (a request popped by a process that dies is lost).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from ipr_crawl.store import FrontierStore
from ipr_crawl.store.embedded import pid_alive

__all__ = ["Heartbeat", "holder_info", "new_holder_id"]

logger = logging.getLogger(__name__)


def new_holder_id() -> str:
    """``host:pid:random``: unique per process start (a restarted process is a new holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_info(holder: str, spider: str) -> dict[str, Any]:
    """What a holder's heartbeat publishes (``holders_info``): host, pid, spider, started."""
    return {"host": holder.rsplit(":", 2)[0], "pid": os.getpid(), "spider": spider, "started": time.time()}


def gone_here(info: dict[str, Any], holder: str) -> bool:
    """Whether holder ``info`` (:meth:`FrontierStore.holders`' entry) names a process of
    this machine (the host of this process's own ``holder`` id) that no longer runs: a
    process killed less than a heartbeat's time to live ago still looks alive in Redis."""
    pid = info.get("pid")
    return isinstance(pid, int) and info.get("host") == holder.rsplit(":", 2)[0] and not pid_alive(pid)


class Heartbeat:
    """Beats for ``holder`` every ``interval`` s on a daemon thread until :meth:`stop`.

    ``on_lost_holder()`` is called (from the thread) when another holder's heartbeat is
    found gone, ``on_lapse()`` when this holder was found gone (its leases handed back by
    another process); ``timeline_secs`` > 0 also writes a timeline sample that often.
    ``slots()``, called from the thread at each beat, gives the downloader's slots
    (:func:`ipr_crawl.scheduler.internals.slot_view`), published in the holder's info
    under ``slots`` for ``ipr-crawl dashboard``.
    """

    def __init__(
        self,
        store: FrontierStore,
        holder: str,
        interval: float,
        info: dict[str, Any],
        on_lost_holder: Callable[[], None] | None = None,
        timeline_secs: float = 0.0,
        on_lapse: Callable[[], None] | None = None,
        slots: Callable[[], list[dict[str, Any]] | None] | None = None,
    ) -> None:
        self.store = store
        self.holder = holder
        self.interval = interval
        self.info = {**info, "heartbeat_secs": interval}
        self.on_lost_holder = on_lost_holder
        self.on_lapse = on_lapse
        self.timeline_secs = timeline_secs
        self.slots = slots
        self.beats = 0
        self._started = time.monotonic()  # reset at start(): the timeline's first minutes
        #: times this process found itself declared lost (its leases went to others)
        self.lapses = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        """Register the holder (one beat, in the caller's thread: Redis errors raise)
        and start the thread."""
        self.store.beat(self.holder, 2 * self.interval, self.info)
        self.beats = 1
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"ipr-heartbeat-{self.holder}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 0.2) -> None:
        """Stop beating (the holder's entry stays until :meth:`FrontierStore.release`),
        waiting up to ``timeout`` s for a beat in progress: one that lands after the
        release would register the holder again. Short while Redis is away: a beat retried
        then must not hold the close (a daemon thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def sample_secs(self) -> float:
        """The timeline's interval now: ``timeline_secs``, shorter in a crawl's first minutes
        (a twentieth of the time since this process started, at least 1 s), so that a short
        crawl has samples enough to draw (``ipr-crawl report --plot``)."""
        age = time.monotonic() - self._started
        return min(self.timeline_secs, max(1.0, age / 20))

    def _run(self) -> None:
        # A timeline interval shorter than the heartbeat's is honoured: the thread wakes
        # that often and samples, and beats once per heartbeat interval.
        next_beat = time.monotonic() + self.interval
        while True:
            tick = min(self.interval, self.sample_secs()) if self.timeline_secs > 0 else self.interval
            if self._stop.wait(max(0.0, min(tick, next_beat - time.monotonic()))):
                break
            try:
                if time.monotonic() < next_beat:
                    self.store.sample(self.sample_secs())
                    continue
                next_beat = time.monotonic() + self.interval
                self.beat_once()
                if self._failing:
                    logger.info("ipr-crawl: heartbeat to Redis restored")
                self._failing = False
            except redis.RedisError as exc:
                if not self._failing:
                    logger.warning(
                        "ipr-crawl: heartbeat to Redis failed (%s); if it stays silent for %.0f s, other "
                        "processes hand this one's leased requests back", exc, 2 * self.interval,
                    )
                self._failing = True
            except Exception:  # noqa: BLE001 - a thread that dies stops beating for good
                # Any other error (an OSError from a sleep, a callback's bug) is logged and
                # the thread beats on: a dead heartbeat hands this live process's leases to
                # the others every 2 × IPR_HEARTBEAT_SECS, each fetched twice.
                if not self._failing:
                    logger.exception("ipr-crawl: heartbeat failed; it beats on")
                self._failing = True

    def beat_once(self) -> None:
        """One beat: renew, note a lapse, write a timeline sample when due, and look for
        holders whose heartbeat is gone."""
        # Renewed only while registered: the close releases the holder after stopping this
        # thread, and a beat in progress then must not register it again.
        if self.slots is not None:
            self.info["slots"] = self.slots() or []
        was_alive = self.store.beat(self.holder, 2 * self.interval, self.info, renew_only=True)
        if not was_alive:
            if self._stop.is_set():  # closing: released, or about to be
                return
            self.store.beat(self.holder, 2 * self.interval, self.info)
        self.beats += 1
        if not was_alive:
            self.lapses += 1
            logger.warning(
                "ipr-crawl: this process's heartbeat was silent for more than %.0f s (2 × IPR_HEARTBEAT_SECS) "
                "and another process handed its leased requests back: pages it fetches now may be fetched "
                "twice. A reactor blocked that long, or an overloaded machine? Raise IPR_HEARTBEAT_SECS",
                2 * self.interval,
            )
            if self.on_lapse is not None:  # the leases this process took may be others' now
                self.on_lapse()
        if self.timeline_secs > 0:
            self.store.sample(self.sample_secs())
        if self.on_lost_holder is not None and self.store.holder_counts()[1]:
            self.on_lost_holder()
