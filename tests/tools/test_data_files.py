"""The data shipped in tests/data is what its SOURCES.md says: every file credited
there, the graph files byte-identical to ../shared/data/graphs, and the EmacsWiki
change-log sample exactly the cut that SOURCES.md describes (``data`` tests: they
read ../shared/data and skip, naming the file, where it is missing)."""

from __future__ import annotations

import gzip
import hashlib
import re

import pytest
from conftest import TEST_DATA, shared_file

SOURCES = TEST_DATA / "SOURCES.md"
GRAPH_COPIES = ["harvard500.tsv.gz", "epa.tsv.gz", "epa.urls.tsv.gz", "polblogs.tsv.gz", "polblogs.urls.tsv.gz"]
SAMPLE_PAGES = 1100


def test_every_shipped_file_is_credited_with_its_size() -> None:
    text = SOURCES.read_text(encoding="utf-8")
    files = sorted(p.name for p in TEST_DATA.iterdir() if p.name != "SOURCES.md")
    assert files, "tests/data is empty"
    for name in files:
        row = re.search(rf"^\| {re.escape(name)} \| ([\d,]+) \|", text, re.M)
        assert row, f"{name} has no row in tests/data/SOURCES.md"
        assert int(row[1].replace(",", "")) == (TEST_DATA / name).stat().st_size, name
        assert (TEST_DATA / name).stat().st_size < 100_000, f"{name}: keep shipped test data small"
    for name in GRAPH_COPIES:  # the shared SOURCES.md section of each copy is there
        stem = name.split(".")[0]
        assert re.search(rf"^## .*\b{re.escape(stem)}\.tsv\.gz", text, re.M), f"no source section for {name}"


@pytest.mark.data
@pytest.mark.parametrize("name", GRAPH_COPIES)
def test_graph_copy_is_identical_to_the_shared_file(name: str) -> None:
    assert (TEST_DATA / name).read_bytes() == shared_file(f"graphs/{name}").read_bytes()


def _lines(path) -> list[bytes]:
    with gzip.open(path, "rb") as fh:
        return fh.read().splitlines(keepends=True)


@pytest.mark.data
def test_change_log_sample_is_the_documented_cut() -> None:
    """Header + first 1,100 page lines; header + every change line of those pages,
    in the source's order, byte-identical; and the SHA-256 SOURCES.md quotes."""
    pages = _lines(shared_file("changes/emacswiki_pages.csv.gz"))
    changes = _lines(shared_file("changes/emacswiki_changes.csv.gz"))
    want_pages = pages[: 1 + SAMPLE_PAGES]
    keep = {line.split(b",", 1)[0] for line in want_pages[1:]}
    want_changes = changes[:1] + [line for line in changes[1:] if line.split(b",", 1)[0] in keep]
    got_pages = _lines(TEST_DATA / "emacswiki_pages.first1100.csv.gz")
    got_changes = _lines(TEST_DATA / "emacswiki_changes.first1100.csv.gz")
    assert got_pages == want_pages
    assert got_changes == want_changes
    text = SOURCES.read_text(encoding="utf-8")
    assert f"**first {SAMPLE_PAGES:,} data lines**" in text and f"{len(want_changes) - 1:,} events" in text
    for lines in (got_pages, got_changes):
        assert hashlib.sha256(b"".join(lines)).hexdigest() in text
