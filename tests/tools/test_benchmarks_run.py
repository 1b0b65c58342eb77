"""Every benchmark script starts: its imports resolve and ``--help`` answers.

A benchmark that moved helper (``tests/helpers/procs.py``) broke three scripts
unnoticed until they were next run; this keeps them runnable from a clean clone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the scripts (a module the others import, such as webgen.py, has no ``__main__``)
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if '__name__ == "__main__"' in p.read_text())


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_answers_help(script: Path) -> None:
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower(), proc.stdout[:500]


def test_fleet_crawls_every_reachable_page_once(tmp_path: Path) -> None:
    """benchmarks/fleet.py on the shipped polblogs graph: two replay processes share one
    crawl on a real redis-server, and between them fetch every page reachable from the
    seed exactly once (the figures it prints are per page of that crawl)."""
    import json

    from ipr_crawl.evaluation.graphio import default_seed, reachable, read_graph

    out = tmp_path / "fleet.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fleet.py"), "--graph", "polblogs",
                           "--clients", "2", "--orderings", "bf", "--targets", "server", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    graph = read_graph(ROOT / "tests" / "data" / "polblogs.tsv.gz")
    expected = len(reachable(graph, default_seed(graph)))
    (row,) = json.loads(out.read_text())["rows"]
    assert row["clients"] == 2
    assert row["pages"] == row["fetched"] == expected
    assert row["redis_cpu_us_per_page"] > 0


def test_generated_web_is_deterministic_and_its_urls_decode() -> None:
    """benchmarks/webgen.py: the same page has the same links and URL in two webs of the
    same seed, and every URL maps back to its ``(host, page)``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from webgen import GeneratedWeb

    a, b = GeneratedWeb(seed=3), GeneratedWeb(seed=3)
    pages = [(0, 0), *a.links(0, 0), *a.links(5, 17)]
    assert a.links(0, 0) == b.links(0, 0) and len(a.links(0, 0)) >= 1
    for host, page in pages:
        url = a.url(host, page)
        assert url == b.url(host, page) and url.startswith("https://")
        assert a.page_of(url) == (host, page)
    assert GeneratedWeb(seed=4).links(0, 0) != a.links(0, 0)


def test_frontier_scale_web_counts_every_key(tmp_path: Path) -> None:
    """``frontier_scale.py --web``: a crawl of the generated web to 3,000 known URLs on a
    real redis-server; the bytes per queued and fetched URL it reports add up to the
    crawl's keys, and scrapy-redis is measured on the same URLs."""
    import json

    out = tmp_path / "web.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "frontier_scale.py"), "--web", "3000",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["known"] >= 3000 and row["fetched"] >= 1
    assert row["known"] == row["queued"] + row["fetched"]
    usage = row["usage"]
    rebuilt = (row["record_bytes_per_url"] * row["known"] + 8 * row["edges"]
               + sum(usage.get(k, 0) for k in ("req", "frontier", "rprio", "resid")) + row["other_keys_bytes"])
    assert abs(rebuilt - row["bytes_all_keys"]) < 1
    assert result["scrapy_redis"]["known"] == row["known"]
    assert result["scrapy_redis"]["queued"] == row["queued"]
