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
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


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
