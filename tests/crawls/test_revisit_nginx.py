"""ConditionalGetMiddleware against a real nginx serving static pages that are
changed between two ``scrapy crawl`` runs (run-once, the system clock)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from ipr_crawl.ordering.urls import node_id
from ipr_crawl.store.revisit import RevisitStore

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx not installed")
_STAT = re.compile(r"'ipr/(revisit|pages)/(\w+)': (\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nginx(tmp_path):
    root, logs = tmp_path / "www", tmp_path / "logs"
    root.mkdir()
    logs.mkdir()
    port = free_port()
    conf = tmp_path / "nginx.conf"
    temp = "\n".join(f"  {k}_temp_path {tmp_path / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf.write_text(
        f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {tmp_path / 'nginx.pid'};\n"
        f"error_log {logs / 'error.log'};\nevents {{ worker_connections 64; }}\nhttp {{\n"
        f"  log_format revisit '$status $request_uri inm=$http_if_none_match ims=$http_if_modified_since';\n"
        f"  access_log {logs / 'access.log'} revisit;\n{temp}\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; }}\n}}\n"
    )
    proc = subprocess.Popen([NGINX, "-e", str(logs / "error.log"), "-p", str(tmp_path), "-c", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.skip(f"nginx did not start: {proc.communicate(timeout=5)}")
    yield root, f"http://127.0.0.1:{port}", logs / "access.log"
    proc.terminate()
    proc.communicate(timeout=10)


def write_page(root: Path, name: str, text: str, mtime: float) -> None:
    links = "".join(f'<a href="/p{i}.html">page {i}</a> ' for i in range(5))
    path = root / name
    path.write_text(f"<!DOCTYPE html><html><body><p>{text}</p>{links}</body></html>\n")
    os.utime(path, (mtime, mtime))


def crawl(url: str, redis_client, crawl_id: str, log: Path) -> dict[str, int]:
    settings = {
        "IPR_REDIS_URL": "unix://" + redis_client.socket_file,
        "IPR_CRAWL_ID": crawl_id,
        "IPR_REVISIT_ENABLED": True,
        "IPR_REVISIT_POLICY": "fixed:1s",
        "IPR_REVISIT_MIN_SECS": 0,
        "LOG_LEVEL": "DEBUG",
        "LOG_FILE": str(log),
    }
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={url}"]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    text = log.read_text(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in text, text[-4000:]
    return {f"{a}/{b}": int(n) for a, b, n in _STAT.findall(text)}


def test_pages_changed_between_runs(nginx, redis_client, crawl_id, tmp_path):
    root, base, access_log = nginx
    old = time.time() - 86400
    for i in range(5):
        write_page(root, f"p{i}.html", f"page {i}, first version", old)
    first = crawl(base + "/p0.html", redis_client, crawl_id, tmp_path / "a.log")
    assert first["revisit/new"] == 5 and first["pages/recorded"] == 5
    # change two pages (one keeps its size), leave three alone
    write_page(root, "p1.html", "page 1, second version", old + 3600)
    write_page(root, "p3.html", "page 3, first versioN", old + 7200)
    time.sleep(1.1)  # fixed:1s: everything is due
    second = crawl(base + "/p0.html", redis_client, crawl_id, tmp_path / "b.log")
    assert second.get("revisit/changed") == 2 and second.get("revisit/not_modified") == 3
    assert second["pages/recorded"] == 2  # only changed pages reached the spider
    lines = access_log.read_text().splitlines()[5:]
    assert len(lines) == 5
    for line in lines:
        status, uri, inm, ims = line.split(" ", 3)
        assert inm != "inm=-" and ims != "ims=-"  # both validators sent
        assert status == ("200" if uri in ("/p1.html", "/p3.html") else "304")
    store = RevisitStore(redis_client, crawl_id)
    state = store.load(node_id(base + "/p1.html"))
    assert (state.accesses, state.m) == (2, 1)
    assert [e.fields["kind"] for e in store.events(base + "/p2.html")] == ["new", "not_modified"]


def test_continuous_system_clock_sees_a_change_while_running(nginx, redis_client, crawl_id, tmp_path):
    """continuous mode, real time: revisits go out on Scrapy's heartbeat until
    IPR_REVISIT_UNTIL; a page changed mid-crawl is seen as changed, then the crawl closes."""
    root, base, access_log = nginx
    old = time.time() - 86400
    for i in range(5):
        write_page(root, f"p{i}.html", f"page {i}, first version", old)
    launched = time.time()
    log = tmp_path / "c.log"
    cmd = [sys.executable, "-m", "scrapy", "crawl", "graph", "-a", f"start_urls={base}/p0.html"]
    for k, v in {
        "IPR_REDIS_URL": "unix://" + redis_client.socket_file, "IPR_CRAWL_ID": crawl_id,
        "IPR_REVISIT_ENABLED": True, "IPR_REVISIT_MODE": "continuous", "IPR_REVISIT_POLICY": "fixed:2s",
        "IPR_REVISIT_MIN_SECS": 0, "IPR_REVISIT_UNTIL": repr(launched + 30), "LOG_LEVEL": "DEBUG", "LOG_FILE": str(log),
    }.items():
        cmd += ["-s", f"{k}={v}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the change comes after nginx has served p1's first version (however long Scrapy
    # takes to start on a loaded machine) and one revisit interval later
    while (not access_log.exists() or "200 /p1.html " not in access_log.read_text(errors="replace")) \
            and time.time() < launched + 20 and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(2.5)
    write_page(root, "p1.html", "page 1, second version", old + 3600)
    proc.communicate(timeout=90)
    elapsed = time.time() - launched
    text = log.read_text(errors="replace")
    assert proc.returncode == 0 and "Traceback" not in text, text[-4000:]
    kinds = [e.fields["kind"] for e in RevisitStore(redis_client, crawl_id).events(base + "/p1.html")]
    assert kinds[0] == "new" and kinds.count("changed") == 1 and len(kinds) >= 3
    # Stayed open until no revisit could fall before IPR_REVISIT_UNTIL (the last
    # one is due within one 2 s interval of it), then closed.
    assert 30 - 2.5 <= elapsed < 60
