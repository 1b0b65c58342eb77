"""An operator's view of a real crawl: the periodic log line, ``ipr-crawl status``,
``top``, ``release-leases``, ``report`` and ``scrapy frontier``, compared with what
Redis holds; commands refuse a store or crawl that does not exist (and create none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import _READY, REPO, TEST_DATA, kill_embedded_redis, run_crawl
from procs import start_server

from ipr_crawl.store.inspect import open_crawl

HARVARD = TEST_DATA / "harvard500.tsv.gz"


def ipr(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ipr_crawl.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def stopped_crawl(tmp_path_factory):
    """A real crawl of harvard500 stopped after 120 pages (frontier left), embedded
    store; one for the module (the tests only read it, or put back what they change)."""
    tmp_path = tmp_path_factory.mktemp("ops")
    proc, m = start_server(
        [sys.executable, "-m", "ipr_crawl.evaluation.serve", str(HARVARD), "--port", "0"], _READY,
    )
    url = m["url"]
    served = SimpleNamespace(seed_url=url, base=url[: url.index("/", len("http://"))])
    data = tmp_path / "data"
    try:
        run = run_crawl(served.seed_url, tmp_path / "crawl.log", {
            "IPR_DATA_DIR": data, "IPR_CRAWL_ID": "ops", "INTERRUPT_AFTER_PAGES": 120, "DOWNLOAD_DELAY": 0.01,
            "IPR_TIMELINE_SECS": 0.2, "IPR_LOGSTATS_INTERVAL": 0.5, "IPR_HEARTBEAT_SECS": 0.5,
        })
        kill_embedded_redis(data)
        assert run.returncode == 0, run.stderr[-3000:]
        yield run, data, served
    finally:
        kill_embedded_redis(data)
        proc.kill()
        proc.communicate(timeout=10)


def test_status_top_and_report_of_a_real_crawl(stopped_crawl, tmp_path):
    run, data, served = stopped_crawl
    assert "ipr-crawl: " in run.log and " in frontier (+" in run.log and "best " in run.log  # periodic line
    st = ipr("status", "--data-dir", str(data), "--json")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    store = open_crawl("ops", "", str(data))
    try:
        counts = store.counts()
        assert {k: status[k] for k in counts} == counts
        assert counts["fetched"] >= 120 and counts["frontier"] > 0
        assert status["holders"] == []  # the crawler closed and forgot itself
        # the server's memory and the crawl's share (issue 51, item 3)
        mem = status["memory"]
        assert mem["max"] == 0 and mem["policy"] == "noeviction" and 0 < mem["crawl"] < mem["used"], mem
        text = ipr("status", "--data-dir", str(data))
        assert "Redis memory: used " in text.stdout and "policy noeviction; this crawl's keys" in text.stdout
        timeline = store.timeline()
        assert len(timeline) >= 2 and timeline[-1]["fetched"] >= timeline[0]["fetched"]
        order = store.fetch_order()
        assert len(order) == counts["fetched"] == len(set(order))
        top = ipr("top", "5", "--data-dir", str(data), "--json")
        assert top.returncode == 0, top.stderr
        rows = json.loads(top.stdout)
        best = [m[8:].hex() for m in store.client.zrange(store.keys["frontier"], 0, 4)]
        assert [r["id"] for r in rows] == best
        assert all(r["url"].startswith(served.base) and r["host"] == "127.0.0.1" for r in rows)
        assert all(r["in_links"] >= 1 and r["depth"] >= 1 for r in rows)
        assert rows == sorted(rows, key=lambda r: -r["priority"])
        text = ipr("top", "3", "--data-dir", str(data))
        assert text.returncode == 0 and rows[0]["url"] in text.stdout
    finally:
        store.client.close()
    png, curves = tmp_path / "crawl.png", tmp_path / "crawl.json"
    rep = ipr("report", "--data-dir", str(data), "--plot", str(png), "--json", str(curves))
    assert rep.returncode == 0, rep.stderr
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    shares = [r["pagerank_share"] for r in json.loads(curves.read_text())["timeline"]]
    assert shares == sorted(shares) and 0 < shares[-1] < 1
    assert "PageRank" in rep.stdout


def test_scrapy_frontier_command_finds_the_crawl_like_scrapy_crawl(stopped_crawl):
    _, data, _ = stopped_crawl
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "status", "graph", "-s", f"IPR_DATA_DIR={data}",
         "-s", "IPR_CRAWL_ID=ops"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "crawl 'ops' ordered by push" in out.stdout and "fetched" in out.stdout
    # `scrapy ipr` is the command's name; `scrapy frontier` its former one, an alias
    ipr_cmd = subprocess.run(
        [sys.executable, "-m", "scrapy", "ipr", "status", "graph", "-s", f"IPR_DATA_DIR={data}",
         "-s", "IPR_CRAWL_ID=ops"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
    )
    assert ipr_cmd.returncode == 0 and "crawl 'ops' ordered by push" in ipr_cmd.stdout, ipr_cmd.stderr
    # BOT_NAME.spider is the default crawl id: there is none such here
    out = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "top", "graph", "-s", f"IPR_DATA_DIR={data}"],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
    )
    assert out.returncode == 1 and "no crawl 'ipr_crawl.graph'" in out.stdout and "ops" in out.stdout
    kill_embedded_redis(data)


def test_scrapy_frontier_dashboard_serves_the_projects_embedded_store(stopped_crawl):
    """``scrapy frontier dashboard`` finds the store as ``scrapy crawl`` does (here the
    project's embedded one) and serves its crawl; the numbers are ``status``'s."""
    import urllib.request

    _, data, _ = stopped_crawl
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "frontier", "dashboard", "graph", "-s", f"IPR_DATA_DIR={data}",
         "-s", "IPR_CRAWL_ID=ops", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "scrapy frontier dashboard: the crawls of the embedded store" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "api/crawl/ops", timeout=30) as reply:
            shown = json.loads(reply.read())
        status = json.loads(ipr("status", "--data-dir", str(data), "--json").stdout)
        assert shown["fetched"] == status["fetched"] and shown["known"] == status["known"]
        with urllib.request.urlopen(url + "api/crawls", timeout=30) as reply:
            assert json.loads(reply.read())["crawls"] == ["ops"]
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    kill_embedded_redis(data)


def test_commands_refuse_a_missing_store_or_crawl(stopped_crawl, tmp_path):
    _, data, _ = stopped_crawl
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    for command in ("status", "top", "history", "reset", "release-leases"):
        args = [command, *(["http://x.test/"] if command == "history" else [])]
        out = ipr(*args, "--crawl-id", "ops", cwd=empty)
        assert out.returncode == 1, (command, out.stdout, out.stderr)
        assert f"no embedded store in {empty}" in out.stderr, out.stderr
    assert list(empty.iterdir()) == []  # nothing created
    out = ipr("status", "--data-dir", str(data), "--crawl-id", "other")
    assert out.returncode == 1 and "no crawl 'other'" in out.stderr and "crawls there: ops" in out.stderr
    kill_embedded_redis(data)


def test_release_leases_of_a_stopped_crawler(stopped_crawl):
    _, data, _ = stopped_crawl
    store = open_crawl("ops", "", str(data))
    try:
        store.beat("gone-host:1:abc", 0.001)
        _, items = store.pop(3, 600, holder="gone-host:1:abc")
        assert store.counts()["in_flight"] == 3
    finally:
        store.client.close()
    out = ipr("release-leases", "--data-dir", str(data))
    assert out.returncode == 0, out.stderr
    assert "3 leased requests went back" in out.stdout and "gone-host:1:abc" in out.stdout
    store = open_crawl("ops", "", str(data))
    try:
        assert store.counts()["in_flight"] == 0
    finally:
        store.client.close()
    # `ipr-crawl release` is the same command (the dead letters put back: none here)
    short, full = (ipr(name, "--dead", "--data-dir", str(data)) for name in ("release", "release-leases"))
    assert short.returncode == full.returncode == 0 and short.stdout == full.stdout != "", short.stderr
    kill_embedded_redis(data)


def test_report_draws_a_crawl_of_seconds_with_the_default_timeline(graph_server, tmp_path):
    """A whole crawl of a few seconds with IPR_TIMELINE_SECS at its default (10 s) has
    samples enough to draw: the timeline samples every second at first. Before, such a
    crawl had two or three samples and a pages/min spike at its close."""
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    try:
        run = run_crawl(served.seed_url, tmp_path / "crawl.log", {
            "IPR_DATA_DIR": data, "IPR_CRAWL_ID": "short", "DOWNLOAD_DELAY": 0.01, "IPR_HEARTBEAT_SECS": 1,
        })
        assert run.returncode == 0, run.stderr[-3000:]
        png, curves = tmp_path / "short.png", tmp_path / "short.json"
        rep = ipr("report", "--data-dir", str(data), "--plot", str(png), "--json", str(curves))
        assert rep.returncode == 0, rep.stderr + rep.stdout
        rows = json.loads(curves.read_text())["timeline"]
        assert len(rows) >= 4 and rows[-1]["t"] < 60, [r["t"] for r in rows]
        rates = [r["pages_per_min"] for r in rows[1:]]
        average = rows[-1]["fetched"] * 60 / rows[-1]["t"]
        assert max(rates) < 4 * average, (rates, average)
    finally:
        kill_embedded_redis(data)
