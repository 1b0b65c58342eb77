"""The node record: one ``node`` hash value per known URL, defined here once.

A record is a fixed head of :data:`RECORD_FIELDS` (big-endian, 37 bytes), then,
for a fetched page, its out-links as 8-byte node ids in numbering order (about
8 B per edge). Python (``struct``, numpy) and Lua (``struct.pack``, whose format
the store prepends to every script as ``REC`` / ``REC_SIZE``) all derive their
formats from :data:`RECORD_FIELDS`.

Fields: ``state`` (0 discovered, 2 fetched, 3 failed for good), ``seq``
(discovery number; ties of equal priority go to the lower), ``s`` (the score:
approximate PageRank for ipr, in-degree for blc/ifs, cash for opic, importance X,
PageRank for pr), ``a`` (received, not yet propagated score of the AR cut-off;
OPIC's history), ``tie`` (blc: ``min('/' count, 1023) * 2**14 + min(URL length,
16383)``; importance and larger-sites-first: a 52-bit hash of the host:port),
``od`` (out-degree recorded at fetch).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "RECORD_FIELDS", "RECORD_FORMAT", "RECORD_SIZE", "LUA_RECORD_FORMAT", "Link", "NodeRecord",
    "RecordResult", "lua_definitions", "record_result", "numpy_dtype", "parse_record",
]

#: (name, struct code, numpy code, Lua struct code) of each field of a record's head.
RECORD_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("state", "B", "u1", "B"),
    ("seq", "d", ">f8", "d"),
    ("s", "d", ">f8", "d"),
    ("a", "d", ">f8", "d"),
    ("tie", "d", ">f8", "d"),
    ("od", "I", ">u4", "I4"),
)
RECORD_FORMAT = ">" + "".join(f[1] for f in RECORD_FIELDS)
RECORD_SIZE = struct.calcsize(RECORD_FORMAT)  # 37 bytes, then the out-links
LUA_RECORD_FORMAT = ">" + "".join(f[3] for f in RECORD_FIELDS)
#: Size of a node id and of one out-link in a record.
ID_SIZE = 8


def lua_definitions() -> str:
    """The Lua lines that define ``REC`` and ``REC_SIZE`` for the scripts."""
    return f"local REC = '{LUA_RECORD_FORMAT}'\nlocal REC_SIZE = {RECORD_SIZE}\n"


def numpy_dtype() -> Any:
    """The numpy structured dtype of a record head (field names as :data:`RECORD_FIELDS`)."""
    import numpy as np

    return np.dtype([(name, code) for name, _, code, _ in RECORD_FIELDS])


class RecordResult(NamedTuple):
    """What one record_page call did."""

    added: int  # new URLs registered
    first: bool  # the page's first fetch (False: re-recorded, no score update)
    rescored: int  # frontier entries whose priority changed
    propagated: int  # score updates beyond the direct targets (ipr pl/vr/ar)
    dropped: int  # propagation entries dropped by IPR_PROPAGATION_CAP
    refetched: int = 0  # known links queued again: only dont_filter requests had brought them (enqueue.lua)
    queued: tuple[int, ...] | None = None  # indexes of the links queued (None: not told); the others were duplicates


def record_result(reply: Sequence[Any]) -> RecordResult:
    """record_page.lua's reply ``{added, first, rescored, propagated, dropped, refetched, queued}``."""
    refetched = int(reply[5]) if len(reply) > 5 else 0
    queued = tuple(int(k) for k in reply[6]) if len(reply) > 6 else None
    return RecordResult(int(reply[0]), bool(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]), refetched, queued)


class NodeRecord(NamedTuple):
    """A node's record head as :data:`RECORD_FIELDS` lays it out."""

    state: int  # 0 queued, 2 fetched, 3 failed
    seq: float  # discovery number
    s: float  # score
    a: float  # accumulated (ar) / history (opic)
    tie: float  # tie key or site hash
    outdeg: int


#: Scrapy priorities are clamped to +-this: the forced queue's key (_forced.lua) and the
#: frontier's levels (_frontier.lua zscore)
MAX_PRIORITY = 2047
#: a link's Scrapy priority in record_page.lua's ARGV
PRIORITY_FORMAT = ">i"


@dataclass(frozen=True)
class Link:
    """One out-link as the store sees it: node id, BLC tie key, request payload and,
    in bucket mode (``IPR_CLUSTER_BUCKETS``), the bucket of its host
    (:func:`ipr_crawl.ordering.urls.bucket_of`)."""

    id: bytes
    tie: int
    payload: bytes
    bucket: int = 0
    #: scrapy-redis's fingerprint of the link request (40 hex digits) in a crawl carried over
    #: from scrapy-redis (:mod:`ipr_crawl.scheduler.migrate`), else empty
    seen_fp: str = ""
    #: Scrapy's ``Request.priority`` of the link request: a new URL's first frontier key
    #: (0: the ordering alone orders it)
    priority: int = 0


def parse_record(raw: bytes) -> tuple[NodeRecord, list[bytes]]:
    """A ``node`` hash value as ``(head, out-link ids)``.

    >>> head, links = parse_record(struct.pack(RECORD_FORMAT, 2, 1, 0.5, 0, 0, 1) + b"12345678")
    >>> head.state, head.s, links
    (2, 0.5, [b'12345678'])
    """
    head = NodeRecord(*struct.unpack_from(RECORD_FORMAT, raw))
    end = min(len(raw), RECORD_SIZE + ID_SIZE * head.outdeg)  # bucket mode: one byte per link follows
    return head, [raw[i : i + ID_SIZE] for i in range(RECORD_SIZE, end, ID_SIZE)]
