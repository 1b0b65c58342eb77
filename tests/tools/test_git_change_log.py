"""benchmarks/git_change_log.py: a change log for revisit-sim from a real git history
(renames keep the page, bulk commits are kept apart, a page deleted and added again)."""

from __future__ import annotations

import csv
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "git_change_log.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo: Path, *args: str, when: int = 0) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    if when:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = f"{when} +0000"
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def _commit(repo: Path, when: int, files: dict[str, str | None], message: str = "c") -> None:
    for name, text in files.items():
        path = repo / name
        if text is None:
            _git(repo, "rm", "-q", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", message, when=when)


def _read(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", newline="") as f:
        return list(csv.reader(f))[1:]


def test_a_history_becomes_pages_and_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    day = 86400
    t0 = 1_000_000_000
    body = "".join(f"line {i}\n" for i in range(40))
    _commit(repo, t0, {"pep-0001.txt": body, "pep-0002.txt": body + "b\n", "README": "x"})
    _commit(repo, t0 + day, {"pep-0001.txt": body + "edit\n"})           # a change of 1
    _commit(repo, t0 + 2 * day, {"README": "y"})                          # not a page
    (repo / "peps").mkdir()
    _git(repo, "mv", "pep-0001.txt", "peps/pep-0001.rst")                 # a pure rename
    _commit(repo, t0 + 3 * day, {})
    _commit(repo, t0 + 4 * day, {"pep-0002.txt": None})                   # 2 deleted
    _commit(repo, t0 + 5 * day, {"pep-0002.txt": "back\n"})               # 2 added again
    _commit(repo, t0 + 6 * day, {"peps/pep-0001.rst": body + "e2\n", "pep-0002.txt": "b2\n",
                                 "pep-0003.txt": "new\n"})                # 3 pages: a bulk commit at --bulk 2
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(repo), "--branch", "main",
         "--pattern", r"pep-(\d{4})\.(?:txt|rst)$", "--url", "https://peps.example/pep-{}/", "--bulk", "2",
         "--changes", str(out / "c.csv.gz"), "--pages", str(out / "p.csv.gz"), "--bulk-out", str(out / "b.csv.gz")],
        capture_output=True, text=True, check=True)
    assert "7 commits, 3 pages" in run.stderr
    pages = {row[0]: (row[1], row[2]) for row in _read(out / "p.csv.gz")}
    assert pages == {
        "https://peps.example/pep-0001/": ("2001-09-09T01:46:40Z", "2001-09-15T01:46:40Z"),
        "https://peps.example/pep-0002/": ("2001-09-09T01:46:40Z", "2001-09-15T01:46:40Z"),
        "https://peps.example/pep-0003/": ("2001-09-15T01:46:40Z", "2001-09-15T01:46:40Z"),
    }
    # the edit of 1, and 2 added again after its deletion; the rename is no change
    assert _read(out / "c.csv.gz") == [
        ["https://peps.example/pep-0001/", "2001-09-10T01:46:40Z"],
        ["https://peps.example/pep-0002/", "2001-09-14T01:46:40Z"],
    ]
    # the commit that touched three pages: its two modifications kept apart (3 is new)
    assert _read(out / "b.csv.gz") == [
        ["https://peps.example/pep-0001/", "2001-09-15T01:46:40Z"],
        ["https://peps.example/pep-0002/", "2001-09-15T01:46:40Z"],
    ]


def test_a_pattern_without_a_group_is_refused(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--repo", str(tmp_path), "--pattern", r"pep-\d+", "--url", "u/{}",
         "--changes", str(tmp_path / "c.csv.gz"), "--pages", str(tmp_path / "p.csv.gz")],
        capture_output=True, text=True)
    assert run.returncode == 2
    assert "needs a group" in run.stderr


def test_exact_renames_and_a_clear_error_when_git_fails(tmp_path: Path) -> None:
    """--renames exact (git -M100%) keeps a page through a pure rename from the object
    ids alone; a repository git cannot read gives git's message and exit 2, no traceback."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    t0, day = 1_000_000_000, 86400
    _commit(repo, t0, {"eip-1.md": "a\n" * 30})
    _git(repo, "mv", "eip-1.md", "eip-0001.md")                              # a pure rename
    _commit(repo, t0 + day, {})
    _commit(repo, t0 + 2 * day, {"eip-0001.md": "a\n" * 30 + "b\n"})        # a change
    args = ["--branch", "main", "--pattern", r"eip-0*(\d+)\.md$", "--url", "https://eips.example/{}",
            "--changes", str(tmp_path / "c.csv.gz"), "--pages", str(tmp_path / "p.csv.gz")]
    run = subprocess.run([sys.executable, str(SCRIPT), "--repo", str(repo), *args, "--renames", "exact"],
                         capture_output=True, text=True, check=True)
    assert "3 commits, 1 pages" in run.stderr, run.stderr
    assert _read(tmp_path / "c.csv.gz") == [["https://eips.example/1", "2001-09-11T01:46:40Z"]]
    bad = subprocess.run([sys.executable, str(SCRIPT), "--repo", str(tmp_path / "none"), *args],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "git log failed" in bad.stderr and "Traceback" not in bad.stderr
