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
