"""How long the crawl's event loop stalls while its Redis is frozen (issue 58).

A whole ``scrapy crawl graph`` of the shipped EmacsWiki graph on loopback, its Redis a
separate redis-server (``IPR_REDIS_URL``). ``--freeze-at`` seconds after the spider
opened, the server is stopped with SIGSTOP for ``--freeze-secs`` seconds, then
continued (SIGCONT). In the crawl process :class:`StallProbe` runs a timer every
``TICK_SECS`` on the event loop and records how late each tick came; the report gives
the longest delay and the ticks that fired while Redis was frozen. A crawl whose event
loop waits on Redis (a call made in place) stops ticking for the whole freeze.

Rows: each reactor (``asyncio``: Scrapy's default ``AsyncioSelectorReactor``;
``epoll``: ``twisted.internet.epollreactor.EPollReactor``; ``none``: Scrapy's
reactor-less mode, ``TWISTED_REACTOR_ENABLED=False``, Scrapy 2.15+), with the add-on and,
for reference, Scrapy alone (its Redis frozen all the same: it does not use it).

    python benchmarks/reactor_stall.py [--reactors asyncio,epoll,none] [--freeze-at 3] [--freeze-secs 8]
        [--repeat 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
#: the probe's timer period (s)
TICK_SECS = 0.01
REACTORS = {
    "asyncio": {"TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor"},
    "epoll": {"TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor"},
    "none": {"TWISTED_REACTOR_ENABLED": False},
}


class StallProbe:
    """Extension: a timer every :data:`TICK_SECS` on the event loop (Scrapy's looping
    call: asyncio's loop or the reactor); writes to ``$STALL_OUT`` (JSON) each tick's
    time (s after ``spider_opened``) and lateness (s), the pages and the crawl's stats."""

    def __init__(self, crawler: Any) -> None:
        from scrapy import signals

        self.crawler = crawler
        self.ticks: list[tuple[float, float]] = []
        self.t0 = self.last = self.opened_wall = 0.0
        self.pages = 0
        self.loop: Any = None
        crawler.signals.connect(self.opened, signals.spider_opened)
        crawler.signals.connect(self.response, signals.response_received)
        crawler.signals.connect(self.closed, signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> StallProbe:
        return cls(crawler)

    def opened(self, spider: Any) -> None:
        from ipr_crawl.scheduler.compat import looping_call

        self.t0 = self.last = time.monotonic()
        self.opened_wall = time.time()
        out = os.environ.get("STALL_OUT", "")
        if out:  # the harness freezes Redis counting from here (a busy machine starts a crawl slowly)
            Path(out + ".opened").write_text(str(self.opened_wall))
        self.loop = looping_call(self.tick)
        self.loop.start(TICK_SECS, now=False)

    def tick(self) -> None:
        now = time.monotonic()
        self.ticks.append((round(now - self.t0, 4), round(now - self.last - TICK_SECS, 4)))
        self.last = now

    def response(self, response: Any, request: Any, spider: Any) -> None:
        self.pages += 1

    def closed(self, spider: Any, reason: str) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        out = os.environ.get("STALL_OUT", "")
        if out:
            stats = self.crawler.stats.get_stats()
            Path(out).write_text(json.dumps({
                "pages": self.pages, "reason": reason, "ticks": self.ticks, "opened_wall": self.opened_wall,
                "stats": {k: v for k, v in stats.items() if k.startswith(("ipr/redis", "finish_reason"))},
            }))


def _server(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    sys.path.insert(0, str(REPO / "tests" / "helpers"))
    from procs import RedisServer

    server = RedisServer(folder, appendfsync="everysec").start()
    assert server.proc is not None
    return server.proc, server.port


def run(reactor: str, addon: bool, freeze_at: float, freeze_secs: float, work: Path, timeout: float) -> dict[str, Any]:
    """One crawl with its Redis frozen; the probe's result plus ``freeze`` (start, end in
    seconds after ``spider_opened``, the probe's clock) and ``returncode``."""
    from importlib import resources

    work.mkdir(parents=True, exist_ok=True)
    proc, port = _server(work / "redis")
    data = resources.files("ipr_crawl.data")
    sys.path.insert(0, str(REPO))
    from ipr_crawl.evaluation.serve import spawn

    graph_server, seed = spawn(str(data / "emacswiki.tsv.gz"), str(data / "emacswiki.urls.tsv.gz"))
    out = work / "probe.json"
    settings: dict[str, Any] = {"LOG_LEVEL": "INFO", "LOG_FILE": str(work / "crawl.log"), "CONCURRENT_REQUESTS": 16,
                                "EXTENSIONS": json.dumps({"reactor_stall.StallProbe": 0}),
                                "TELNETCONSOLE_ENABLED": False, "IPR_ENABLED": addon,
                                "IPR_REDIS_URL": f"redis://127.0.0.1:{port}/0", **REACTORS[reactor]}
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={seed}"]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ, STALL_OUT=str(out), PYTHONPATH=os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]))
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    crawl = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not Path(str(out) + ".opened").exists():  # the spider opened: count from there
            if crawl.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{reactor} crawl did not open (rc {crawl.returncode})")
            time.sleep(0.02)
        time.sleep(freeze_at)
        proc.send_signal(signal.SIGSTOP)
        frozen = time.time()
        time.sleep(freeze_secs)
        proc.send_signal(signal.SIGCONT)
        thawed = time.time()
        _, err = crawl.communicate(timeout=timeout)
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=20)
        graph_server.kill()
        graph_server.wait()
        for stream in (graph_server.stdout, graph_server.stderr, crawl.stderr):
            if stream is not None:
                stream.close()
    if not out.exists():
        raise RuntimeError(f"{reactor} crawl wrote no probe (rc {crawl.returncode}): {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["returncode"] = crawl.returncode
    result["freeze"] = (frozen - result["opened_wall"], thawed - result["opened_wall"])
    return result


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The longest delay of a tick (ms), and the ticks that fired while Redis was frozen."""
    ticks = result["ticks"]
    start, end = result["freeze"]
    return {"pages": result["pages"], "reason": result["reason"], "returncode": result["returncode"],
            "max_late_ms": round(1000 * max((d for _, d in ticks), default=0.0), 1),
            "ticks_while_frozen": sum(1 for t, _ in ticks if start <= t <= end),
            "freeze_secs": round(end - start, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reactors", default="asyncio,epoll,none")
    ap.add_argument("--freeze-at", type=float, default=3.0, help="seconds after the spider opened")
    ap.add_argument("--freeze-secs", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ipr-stall-") as tmp:
        for rnd in range(args.repeat):
            for reactor in [r.strip() for r in args.reactors.split(",") if r.strip()]:
                for addon in (False, True):
                    name = f"{'ipr' if addon else 'scrapy'}@{reactor}"
                    res = run(reactor, addon, args.freeze_at, args.freeze_secs, Path(tmp) / f"r{rnd}-{name}",
                              args.timeout)
                    row = {"configuration": name, **summary(res)}
                    rows.append(row)
                    print(f"round {rnd + 1} {name:14s} {row['pages']} pages, {row['reason']}, longest tick delay "
                          f"{row['max_late_ms']} ms, {row['ticks_while_frozen']} ticks in {row['freeze_secs']} s frozen",
                          file=sys.stderr, flush=True)
    print("| configuration | pages | finish reason | longest delay of a 10 ms timer (ms) | its ticks while Redis "
          "was frozen |")
    print("|---|---:|---|---:|---:|")
    for row in rows:
        print(f"| {row['configuration']} | {row['pages']} | {row['reason']} | {row['max_late_ms']} | "
              f"{row['ticks_while_frozen']} in {row['freeze_secs']} s |")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
