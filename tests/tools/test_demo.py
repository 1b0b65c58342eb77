"""``ipr-crawl demo`` interrupted with Ctrl-C leaves no process behind: its crawl
closes (and stops its embedded redis-server, a daemon outside the demo's process
group) instead of being killed, and the graph server stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from conftest import REPO, TEST_DATA
from procs import alive


def demo_processes(mark: str, out: Path) -> list[str]:
    """Live processes the demo started: those whose environment holds
    ``IPR_DEMO_TEST=<mark>`` (inherited by everything it starts), and those working
    in ``out``: a redis-server overwrites its environment with its process title, and
    the embedded one works in its data folder ``out/redis-<ordering>``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not alive(int(entry)):
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
            args = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"IPR_DEMO_TEST={mark}".encode() in environ or cwd.startswith(str(out) + os.sep):
            found.append(f"{entry}: {args.strip()} (cwd {cwd})")
    return found


def test_ctrl_c_during_a_crawl_leaves_no_process(tmp_path):
    out = tmp_path / "out"
    graph = TEST_DATA / "harvard500.tsv.gz"
    log = out / "crawl-push.log"
    mark = uuid.uuid4().hex
    # its own process group: the "terminal" whose Ctrl-C we send
    demo = subprocess.Popen(
        [sys.executable, "-m", "ipr_crawl.cli", "demo", "--graph", str(graph), "--out", str(out),
         "-s", "DOWNLOAD_DELAY=0.05"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "IPR_DEMO_TEST": mark},
        # a terminal's foreground job takes Ctrl-C; a test run started in the background
        # (`cmd &` in a script) ignores SIGINT, and its children would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text(errors="replace").count("Crawled (200)") >= 20):
            assert demo.poll() is None, demo.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the demo's crawl did not start"
            time.sleep(0.05)
        running = demo_processes(mark, out)
        assert any("redis-server" in p for p in running) and any("ipr_crawl.evaluation.serve" in p for p in running), running
        os.killpg(demo.pid, signal.SIGINT)
        text = demo.communicate(timeout=90)[0]
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
    assert demo.returncode != 0 and "KeyboardInterrupt" in text
    assert "Received SIGINT, shutting down gracefully" in log.read_text(errors="replace")
    deadline = time.monotonic() + 10
    while (left := demo_processes(mark, out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def test_the_pages_the_demo_points_to_exist():
    """Its last lines name a benchmark page and command: both are in the repository."""
    import re

    source = (REPO / "ipr_crawl" / "evaluation" / "demo.py").read_text()
    pages = re.findall(r"(docs/[\w/.-]+\.md)", source)
    scripts = re.findall(r"(benchmarks/[\w/.-]+\.py)", source)
    assert pages and scripts
    for path in pages + scripts:
        assert (REPO / path).is_file(), path
