"""``ipr-crawl dashboard`` against the real thing: two ``scrapy crawl`` processes of the
shipped harvard500 graph on a real redis-server while the dashboard (a real process,
Twisted's web server) is asked over HTTP; its numbers against ``ipr-crawl status
--json``; ``/metrics`` parsed by prometheus_client's own parser; Redis killed under it;
the token refused and accepted; nothing but GET and HEAD."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import TEST_DATA
from procs import read_log, start_crawl, wait_all

HARVARD = TEST_DATA / "harvard500.tsv.gz"
CRAWL = "dash"


def start_dashboard(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``ipr-crawl dashboard ARGS --port 0``: the process and its URL (from its first line)."""
    proc = subprocess.Popen([sys.executable, "-m", "ipr_crawl.cli", "dashboard", "--port", "0", "--refresh", "1",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert " at http://" in line, line + proc.stderr.read() if proc.poll() is not None else line
    return proc, line.split(" at ", 1)[1].split()[0].split("?")[0]


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.communicate(timeout=10)


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def status_json(redis_url: str, starting: bool = False) -> dict:
    """``ipr-crawl status --json``; with ``starting``, a crawl whose processes have not yet
    opened it (Scrapy takes seconds to start on a loaded machine) reads as nothing fetched."""
    out = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "status", "--crawl-id", CRAWL, "--redis-url",
                          redis_url, "--json"], capture_output=True, text=True, timeout=60)
    if starting and out.returncode == 1 and f"no crawl '{CRAWL}'" in out.stderr:
        return {"fetched": 0}
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def bucket_statuses(redis_url: str, crawl: str, buckets: int) -> dict[str, dict]:
    """``ipr-crawl status --json`` of each bucket of ``crawl`` (``<crawl>:<b>``), by bucket id."""
    parts = {}
    for b in range(buckets):
        out = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "status", "--crawl-id", f"{crawl}:{b}",
                              "--redis-url", redis_url, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        parts[f"{crawl}:{b}"] = json.loads(out.stdout)
    return parts


def metric(text: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


#: the live crawl's IPR_HEARTBEAT_SECS (s)
BEAT = 2


def mark_a_paused_process(url: str, proc: subprocess.Popen) -> dict[str, float]:
    """SIGSTOP ``proc`` until the page shows it lost, then SIGCONT: the seconds after the
    stop at which the page first showed it ``late`` and ``lost`` (not alive; once another
    process handed its leases back, shown as gone ``lost``), the page asked every 0.2 s."""
    marks: dict[str, float] = {}
    os.kill(proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while "lost" not in marks:
            rows = [h for h in json.loads(get(url + f"api/crawl/{CRAWL}")[1])["holders"] if h.get("pid") == proc.pid]
            if rows:
                state = ("late" if rows[0]["late"] else "alive") if rows[0]["alive"] else "lost"
                marks.setdefault(state, round(time.monotonic() - stopped, 2))
                assert rows[0]["gone"] in (None, "lost"), rows[0]  # handed back, never "closed"
            assert time.monotonic() - stopped < 30, marks
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    return marks


def test_a_process_no_longer_registered_stays_on_the_page_as_closed_or_lost(redis_server):
    """A process that released itself (its close) is shown ``closed``; one whose heartbeat
    was lost and whose leases another process handed back (its next pop), ``lost`` and
    ``ipr_process_alive`` 0 for /metrics; both not alive, nothing in flight."""
    from ipr_crawl.dashboard.views import open_view
    from ipr_crawl.store import FrontierStore

    client = redis_server.client()
    store = FrontierStore(client, CRAWL, "bf")
    store.open()
    for n in range(4):
        store.enqueue(n.to_bytes(8, "big"), 0, b"p%d" % n, False)
    store.beat("closing", 0.6, {"pid": 1, "heartbeat_secs": 0.3})
    store.beat("silent", 0.6, {"pid": 2, "heartbeat_secs": 0.3})
    store.pop(1, 60, holder="silent")
    view = open_view(client, CRAWL)
    assert {h["holder"]: h["alive"] for h in view.snapshot(detail=False)["holders"]} == {"closing": True, "silent": True}
    store.release("holder", "closing")  # its close
    time.sleep(1.0)  # "silent" misses two beats
    late = {h["holder"]: h for h in view.snapshot(detail=False)["holders"]}
    assert late["closing"]["gone"] == "closed" and not late["silent"]["alive"]
    store.beat("other", 60, {"pid": 3, "heartbeat_secs": 30})
    store.pop(1, 60, holder="other")  # hands the silent holder's lease back
    rows = {h["holder"]: h for h in view.snapshot(detail=False)["holders"]}
    assert rows["silent"]["gone"] == "lost" and rows["silent"]["in_flight"] == 0 and not rows["silent"]["alive"]
    assert rows["closing"]["gone"] == "closed" and rows["other"]["gone"] is None and rows["other"]["alive"]
    from ipr_crawl.dashboard.metrics import CrawlCollector

    shot = view.snapshot(detail=False)  # /metrics: the lost process not alive, the closed one not at all
    alive = {s.labels["holder"]: s.value for family in CrawlCollector(lambda: {CRAWL: shot}).collect()
             for s in family.samples if s.name == "ipr_process_alive"}
    assert alive == {"silent": 0.0, "other": 1.0}
    store.drop()
    client.close()


@pytest.mark.slow  # two whole crawls' time: CI's slow stage; make test serves a stopped crawl (test_operations.py)
def test_the_dashboard_shows_a_live_shared_crawl_and_its_metrics(graph_server, redis_server, tmp_path):
    served = graph_server(HARVARD)
    # 0.1 s between fetches: the crawl (about 25 s) outlasts a dashboard slow to start on a loaded machine
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": CRAWL, "DOWNLOAD_DELAY": 0.1,
                "IPR_TIMELINE_SECS": 1, "IPR_HEARTBEAT_SECS": BEAT}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]
    dash, url = start_dashboard("--redis-url", redis_server.url)
    try:
        deadline = time.monotonic() + 60
        while True:  # both processes crawling: two live holders on the page
            code, body = get(url + f"api/crawl/{CRAWL}")
            snap = json.loads(body) if code == 200 else {}
            if len([h for h in snap.get("holders", []) if h["alive"]]) == 2 and snap["fetched"] > 20:
                break
            assert time.monotonic() < deadline, (code, body[:500])
            time.sleep(0.5)
        # the page's numbers against `ipr-crawl status --json`, within one refresh
        before = json.loads(get(url + f"api/crawl/{CRAWL}")[1])
        status = status_json(redis_server.url)
        after = json.loads(get(url + f"api/crawl/{CRAWL}")[1])
        for key in ("fetched", "known"):
            assert before[key] <= status[key] <= after[key], (key, before[key], status[key], after[key])
        assert before["ordering"] == status["ordering"]
        assert {h["holder"] for h in after["holders"]} >= {h["holder"] for h in status["holders"] if h["alive"]}
        assert after["top"] and after["top"][0]["url"].startswith(served.base)
        assert after["curves"]["timeline"], "no timeline samples"
        # the hosts: the served host's politeness delay and last fetch, from the processes' heartbeats
        deadline = time.monotonic() + 30
        while True:
            host = {h["host"]: h for h in json.loads(get(url + f"api/crawl/{CRAWL}")[1])["hosts"]}.get("127.0.0.1")
            if host and host["processes"] == 2:
                break
            assert time.monotonic() < deadline, host
            time.sleep(0.5)
        assert host["delay"] == 0.1 and host["last_fetch_age"] is not None and 0 <= host["last_fetch_age"] < 30
        # /metrics: Prometheus's text format, the same counts
        code, body = get(url + "metrics")
        assert code == 200
        text = body.decode()
        fetched = metric(text, "ipr_pages_fetched_total", crawl=CRAWL)
        assert fetched is not None and after["fetched"] <= fetched <= status_json(redis_server.url)["fetched"]
        assert metric(text, "ipr_crawl_up", crawl=CRAWL) == 1.0
        assert sum(metric(text, "ipr_process_alive", crawl=CRAWL, holder=h["holder"]) or 0
                   for h in after["holders"]) >= 1
        for name in ("ipr_urls_known", "ipr_frontier_urls", "ipr_leases_in_flight", "ipr_revisits_due",
                     "ipr_redis_memory_used_bytes", "ipr_redis_rtt_seconds", "ipr_process_heartbeat_age_seconds"):
            assert name in text, name
        # the page itself, its chart library shipped (no CDN), read-only
        code, page = get(url)
        assert code == 200 and b"static/uPlot.iife.min.js" in page and b"http" not in page.split(b"<body>")[1]
        assert get(url + "static/uPlot.iife.min.js")[0] == 200
        assert get(url + f"api/crawl/{CRAWL}", method="POST")[0] == 405
        assert get(url + "api/crawl/no-such-crawl")[0] == 404
        # a process that stops beating (SIGSTOP) is marked late within one heartbeat of the
        # beat it missed, then lost (its leases handed back); it goes on when continued
        marks = mark_a_paused_process(url, procs[1])
        print(f"paused process on the page (s after SIGSTOP, heartbeat {BEAT} s): {marks}")
        assert marks.get("late", marks["lost"]) <= 1.5 * BEAT + 2 and marks["lost"] <= 2 * BEAT + 2, marks
        codes = wait_all(procs, timeout=300)
        assert codes == [0, 0], [read_log(log)[-2000:] for log in logs]
        done = json.loads(get(url + f"api/crawl/{CRAWL}")[1])
        assert done["fetched"] == status_json(redis_server.url)["fetched"] and done["finished"]
        # Redis killed under it: a clear message, not a stack trace; the page still served
        redis_server.kill()
        code, body = get(url + f"api/crawl/{CRAWL}")
        assert code == 503 and "cannot read" in json.loads(body)["error"] and b"Traceback" not in body
        assert get(url)[0] == 200
        code, body = get(url + "metrics")
        assert code == 200 and metric(body.decode(), "ipr_crawl_up", crawl=CRAWL) == 0.0
    finally:
        stop(dash)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_a_dashboard_bound_beyond_loopback_needs_its_token(redis_server, tmp_path):
    refused = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "dashboard", "--port", "0", "--bind", "0.0.0.0",
                              "--redis-url", redis_server.url], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if k != "IPR_DASHBOARD_TOKEN"})
    assert refused.returncode == 1 and "refusing to serve on 0.0.0.0 without a token" in refused.stderr
    dash, url = start_dashboard("--bind", "0.0.0.0", "--redis-url", redis_server.url,
                                env={"IPR_DASHBOARD_TOKEN": "s3cret"})
    try:
        port = url.rsplit(":", 1)[1].rstrip("/")
        base = f"http://127.0.0.1:{port}/"
        assert get(base + "api/crawls")[0] == 401
        assert get(base + "metrics")[0] == 401
        assert get(base + "metrics", {"Authorization": "Bearer wrong"})[0] == 401
        assert get(base + "metrics", {"Authorization": "Bearer s3cret"})[0] == 200
        code, _ = get(base + "?token=s3cret")
        assert code == 200
        code, body = get(base + "api/crawls?token=s3cret")
        assert code == 200 and json.loads(body)["crawls"] == []
    finally:
        stop(dash)


def test_a_dashboard_without_a_store_says_so(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "dashboard", "--data-dir", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "no embedded store" in out.stderr and "Traceback" not in out.stderr
    assert not Path(tmp_path / "none").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
#: where the screenshot of a run is copied when IPR_DASHBOARD_SHOT is set (shown in docs/operations.md)
SHOT = Path(__file__).resolve().parents[2] / "docs" / "data" / "dashboard.png"


def browse(url: str, tmp_path: Path, shot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (headless Chromium, ``--dump-dom``; with
    ``shot``, a screenshot too)."""
    base = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,2200", "--virtual-time-budget=6000",
            "--hide-scrollbars"]
    if shot is not None:
        out = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
        assert shot.exists(), out.stderr[-2000:]
    out = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def shown(dom: str, key: str) -> int:
    match = re.search(rf'<dd data-key="{key}">([0-9,]+)</dd>', dom)
    assert match, dom[:3000]
    return int(match.group(1).replace(",", ""))


@pytest.mark.slow  # about a minute: CI's slow stage, where .ci/run has installed chromium and prometheus
def test_a_real_browser_and_a_real_prometheus_read_the_dashboard_of_a_live_crawl(graph_server, redis_server,
                                                                                  tmp_path):
    """Headless Chromium loads the page while two processes crawl: its numbers within
    one refresh of ``ipr-crawl status --json``, the charts drawn (uPlot's canvases), a
    screenshot; a real Prometheus scrapes /metrics and a PromQL query returns the crawl's
    fetched count; ``promtool check metrics`` passes; Redis killed: the page says so."""
    if not CHROMIUM or not PROMETHEUS or not PROMTOOL:
        pytest.skip("needs Debian's chromium and prometheus packages (.ci/run installs them)")
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": CRAWL, "DOWNLOAD_DELAY": 0.1,
                "IPR_TIMELINE_SECS": 1}
    procs = [start_crawl(served.seed_url, tmp_path / f"{n}.log", settings) for n in "ab"]
    dash, url = start_dashboard("--redis-url", redis_server.url)
    prom = None
    try:
        port = url.rsplit(":", 1)[1].rstrip("/")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: ipr\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            prom_port = s.getsockname()[1]
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while status_json(redis_server.url, starting=True)["fetched"] < 30:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        shot = tmp_path / "dashboard.png"
        before = status_json(redis_server.url)
        dom = browse(url, tmp_path, shot)
        after = status_json(redis_server.url)
        assert shot.stat().st_size > 20_000
        if os.environ.get("IPR_DASHBOARD_SHOT"):
            SHOT.write_bytes(shot.read_bytes())
        assert before["fetched"] <= shown(dom, "fetched") <= after["fetched"], (before["fetched"], after["fetched"])
        assert before["known"] <= shown(dom, "known") <= after["known"]
        assert dom.count("<canvas") >= 3, "the charts were not drawn"
        assert 'role="alert" hidden' in dom or '<div id="error" role="alert" hidden=""' in dom
        # promtool on what /metrics serves
        body = get(url + "metrics")[1]
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        # the alerts docs/operations.md gives are a valid rule file
        ops = (SHOT.parents[1] / "operations.md").read_text()
        rules = ops.split("And the alerts (Prometheus rule file):", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
        (tmp_path / "rules.yml").write_text(rules)
        checked = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True,
                                 text=True, timeout=60)
        assert checked.returncode == 0 and "SUCCESS: 2 rules found" in checked.stdout, checked.stdout + checked.stderr
        assert wait_all(procs, timeout=300) == [0, 0]
        final = status_json(redis_server.url)["fetched"]
        # a PromQL query over Prometheus's API returns the crawl's fetched count
        query = urllib.parse.quote(f'ipr_pages_fetched_total{{crawl="{CRAWL}"}}')
        deadline = time.monotonic() + 60
        while True:
            code, body = get(f"http://127.0.0.1:{prom_port}/api/v1/query?query={query}")
            result = json.loads(body)["data"]["result"] if code == 200 else []
            if result and float(result[0]["value"][1]) == final:
                break
            assert time.monotonic() < deadline, (code, body[:500], final)
            time.sleep(1)
        assert shown(browse(url, tmp_path), "fetched") == final
        redis_server.kill()
        dom = browse(url, tmp_path)
        error = re.search(r'<div id="error" role="alert">([^<]*)</div>', dom)
        assert error and "cannot read" in error.group(1) and "Traceback" not in dom, dom[:1500]
    finally:
        stop(dash)
        if prom is not None:
            prom.kill()
            prom.wait(10)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.mark.slow  # a second whole crawl: CI's slow stage (make test stays within its time)
def test_a_crawl_in_bucket_mode_is_shown_once_with_its_buckets_summed(graph_server, redis_server, tmp_path):
    """Bucket mode (IPR_CLUSTER_BUCKETS=3, on one server; polblogs served on 16 hosts):
    the page lists the crawl, not its buckets, and its counts are the sums of each
    bucket's ``ipr-crawl status``."""
    served = graph_server(TEST_DATA / "polblogs.tsv.gz", TEST_DATA / "polblogs.urls.tsv.gz", hosts=16)
    settings = {"IPR_REDIS_URL": redis_server.url, "IPR_CRAWL_ID": "fleet", "IPR_CLUSTER_BUCKETS": 3,
                "IPR_GRAPH_STAY_ON_HOSTS": False}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    assert wait_all([start_crawl(served.seed_url, log, settings) for log in logs], timeout=300) == [0, 0], \
        [read_log(log)[-2000:] for log in logs]
    dash, url = start_dashboard("--redis-url", redis_server.url)
    try:
        listed = json.loads(get(url + "api/crawls")[1])["crawls"]
        assert listed == ["fleet"]
        shot = json.loads(get(url + "api/crawl/fleet")[1])
        assert shot["buckets"] == 3 and shot["buckets_missing"] == []
        parts = list(bucket_statuses(redis_server.url, "fleet", 3).values())
        for key in ("known", "fetched", "failed", "frontier", "in_flight"):
            assert shot[key] == sum(p[key] for p in parts), key
        assert shot["fetched"] > 500 and sum(1 for p in parts if p["fetched"]) == 3  # every bucket crawled
        text = get(url + "metrics")[1].decode()
        assert metric(text, "ipr_pages_fetched_total", crawl="fleet") == shot["fetched"]
    finally:
        stop(dash)


@pytest.mark.slow  # a real Cluster and a whole bucketed crawl: CI's slow stage
def test_a_fleet_on_a_redis_cluster_is_summed_over_its_buckets_and_a_master_away_is_named(graph_server, tmp_path):
    """Two processes crawl polblogs (16 hosts) on a real 3-master Redis Cluster with
    IPR_CLUSTER_BUCKETS=6; the dashboard, given one node's URL, lists the crawl once with
    the sums of its buckets' ``ipr-crawl status``. One master killed (no replica, the
    cluster told to serve the slots it still covers; the node the dashboard was given
    when it holds buckets): the buckets it held are named on the page, the others still
    summed."""
    from procs import LocalCluster

    try:
        cluster = LocalCluster(tmp_path / "cluster", masters=3, replicas=0).start()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot start a local Redis Cluster here: {exc}")
    dash = None
    try:
        served = graph_server(TEST_DATA / "polblogs.tsv.gz", TEST_DATA / "polblogs.urls.tsv.gz", hosts=16)
        settings = {"IPR_REDIS_URL": cluster.url, "IPR_CRAWL_ID": "fleet", "IPR_CLUSTER_BUCKETS": 6,
                    "IPR_GRAPH_STAY_ON_HOSTS": False}
        logs = [tmp_path / "a.log", tmp_path / "b.log"]
        assert wait_all([start_crawl(served.seed_url, log, settings) for log in logs], timeout=300) == [0, 0], \
            [read_log(log)[-2000:] for log in logs]
        dash, url = start_dashboard("--redis-url", cluster.url)
        assert json.loads(get(url + "api/crawls")[1])["crawls"] == ["fleet"]
        whole = json.loads(get(url + "api/crawl/fleet")[1])
        parts = bucket_statuses(cluster.url, "fleet", 6)
        assert whole["buckets"] == 6 and whole["buckets_missing"] == []
        for key in ("known", "fetched", "frontier", "in_flight"):
            assert whole[key] == sum(p[key] for p in parts.values()), key
        # a master away: the buckets whose keys it held are named, the rest summed
        from ipr_crawl.store import crawl_keys

        for port in cluster.ports:
            with cluster.node(port) as node:
                node.config_set("cluster-require-full-coverage", "no")
        # the victim holds buckets but not the crawl's own meta (its bucket count: a crawl
        # whose meta is away cannot be read at all, and the page says so)
        home = cluster.master_of(crawl_keys("fleet")["meta"])
        victim = min({cluster.master_of(crawl_keys(b)["meta"]) for b in parts} - {home})
        gone = sorted(b for b in parts if cluster.master_of(crawl_keys(b)["meta"]) == victim)
        cluster.kill(victim)
        deadline = time.monotonic() + 60
        while True:
            code, body = get(url + "api/crawl/fleet")
            shot = json.loads(body)
            if code == 200 and shot["buckets_missing"] == gone:
                break
            assert time.monotonic() < deadline, (code, body[:500], gone)
            time.sleep(1)
        assert shot["fetched"] == sum(p["fetched"] for b, p in parts.items() if b not in gone)
        assert 0 < shot["fetched"] < whole["fetched"]
    finally:
        if dash is not None:
            stop(dash)
        cluster.stop()
