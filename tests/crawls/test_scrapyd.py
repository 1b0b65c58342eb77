"""scrapyd: deploy this repository to a real scrapyd on loopback with
``scrapyd-deploy`` and schedule two jobs of the ``graph`` spider that share
and finish one crawl through one real redis-server (README, "scrapyd")."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, TEST_DATA
from procs import RedisServer, fetched, free_port

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph
from ipr_crawl.ordering.urls import canonical_url

pytest.importorskip("scrapyd", reason="pip install 'ipr-crawl[deploy]'")
pytest.importorskip("scrapyd_client", reason="pip install 'ipr-crawl[deploy]'")

HARVARD = TEST_DATA / "harvard500.tsv.gz"
BIN = Path(sys.executable).parent


def api(base: str, path: str, data: list[tuple[str, str]] | None = None) -> dict:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with urllib.request.urlopen(base + path, data=body, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def scrapyd(tmp_path):
    """A real scrapyd on 127.0.0.1:<free port>, its folders in tmp_path."""
    port = free_port()
    work = tmp_path / "scrapyd"
    work.mkdir()
    (work / "scrapyd.conf").write_text(
        "[scrapyd]\nbind_address = 127.0.0.1\n"
        f"http_port = {port}\neggs_dir = eggs\nlogs_dir = logs\nitems_dir =\ndbs_dir = dbs\n"
        "max_proc = 4\npoll_interval = 0.5\n"
    )
    out = open(work / "scrapyd.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(BIN / "scrapyd")], cwd=work, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            if api(base, "daemonstatus.json")["status"] == "ok":
                break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (work / "scrapyd.out").read_text()
        time.sleep(0.2)
    yield base, work
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    out.close()


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_two_scrapyd_jobs_share_and_finish_one_crawl(scrapyd, graph_server, tmp_path):
    base, work = scrapyd
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    # Deploy: the project's egg (settings + entry point) with scrapyd-deploy,
    # to a target of a scrapy.cfg like the repository's own [deploy] section.
    egg = tmp_path / "ipr_crawl_project.egg"
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_scrapyd_egg.py"), str(egg)], check=True)
    deploy_dir = tmp_path / "deploy"
    deploy_dir.mkdir()
    (deploy_dir / "scrapy.cfg").write_text(f"[deploy:local]\nurl = {base}\nproject = ipr_crawl\n")
    deployed = subprocess.run([str(BIN / "scrapyd-deploy"), "local", "-p", "ipr_crawl", "--egg", str(egg)],
                              cwd=deploy_dir, capture_output=True, text=True, timeout=60, check=False)
    assert deployed.returncode == 0 and '"status": "ok"' in deployed.stdout, deployed.stdout + deployed.stderr
    assert api(base, "listspiders.json?project=ipr_crawl")["spiders"] == ["graph"]

    with RedisServer(tmp_path / "redis") as redis_server:
        jobs = []
        for _ in range(2):
            answer = api(base, "schedule.json", [
                ("project", "ipr_crawl"), ("spider", "graph"), ("start_urls", served.seed_url),
                ("setting", f"IPR_REDIS_URL={redis_server.url}"), ("setting", "IPR_CRAWL_ID=scrapyd-test"),
                ("setting", "DOWNLOAD_DELAY=0.02"),
            ])
            assert answer["status"] == "ok", answer
            jobs.append(answer["jobid"])
        deadline = time.monotonic() + 120
        while True:
            listed = api(base, "listjobs.json?project=ipr_crawl")
            done = {j["id"] for j in listed["finished"]}
            if set(jobs) <= done:
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.5)
        counts = redis_server.client().hgetall("ipr:{scrapyd-test}:meta")

    logs = [work / "logs" / "ipr_crawl" / "graph" / f"{job}.log" for job in jobs]
    texts = [log.read_text() for log in logs]
    for text in texts:
        assert "crawl 'scrapyd-test' ordered by" in text and "on Redis at redis://" in text
        assert "closed (finished)" in text, text[-3000:]
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph, None).items()}
    per_job = [[back[canonical_url(u)] for u in fetched(log)] for log in logs]
    union = [n for pages in per_job for n in pages]
    twice = [n for n, c in collections.Counter(union).items() if c > 1]
    assert not twice
    assert set(union) == set(reachable(graph, served.seed))
    assert all(per_job), [len(p) for p in per_job]
    assert int(counts[b"fetched"]) == len(set(union))
    print(f"\nscrapyd: 2 jobs, pages per job {[len(p) for p in per_job]}, {len(union)} pages")
