"""A stored request's payload: its framing, defined once for the scheduler's codec
(:mod:`ipr_crawl.scheduler.codec`, which builds and rebuilds requests), the operator's
commands (:mod:`ipr_crawl.store.inspect`) and ``pop.lua`` (which reads the download slot
at its head and nothing else).

Every payload starts with a format byte, the length n of the request's download slot and
n bytes of slot (Scrapy's ``Downloader.get_slot_key``: ``meta["download_slot"]``, else the
URL's host name), so that a polite pop reads the slot without parsing the request:

- :data:`FORMAT_DICT` (2): then the request's ``to_dict()`` as msgpack, defaults left out;
- :data:`FORMAT_PLAIN` (3): a plain request, the most common in a crawl (a link followed
  with ``response.follow(url, callback=...)``: GET, no headers, body, cookies or flags,
  priority 0, ``meta`` holding at most Scrapy's ``depth``). Then one byte of flags, the
  depth (unsigned LEB128) if any, the callback's name (one byte of length, then the
  name) if any, and the URL, or only what follows ``<scheme>://<slot>`` when the URL
  starts so (its host is the slot's bytes, the scheme http or https).

A plain request takes 43-48 % fewer bytes than as a dict: 62-63 B against 109-122 B for
``Request(url, callback=spider.parse)``, without and with a depth, over 20,000 URLs of the
generated web of ``benchmarks/webgen.py`` (URLs of 61 B on average).
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = [
    "FORMAT_DICT", "FORMAT_PLAIN", "FORMATS", "frame_dict", "frame_plain", "payload_fields", "payload_slot",
    "plain_request",
]

FORMAT_DICT = 2
FORMAT_PLAIN = 3
FORMATS = (FORMAT_DICT, FORMAT_PLAIN)
_HTTPS, _SAME_HOST, _DEPTH, _CALLBACK = 1, 2, 4, 8
_SCHEMES = {b"http://": 0, b"https://": _HTTPS}


def _head(fmt: int, slot: str) -> bytes:
    raw = slot.encode("utf-8")[:255]
    return bytes([fmt, len(raw)]) + raw


def frame_dict(slot: str, packed: bytes) -> bytes:
    """A :data:`FORMAT_DICT` payload: ``packed`` (the request dict as msgpack) under ``slot``."""
    return _head(FORMAT_DICT, slot) + packed


def frame_plain(slot: str, url: str, depth: int | None = None, callback: str | None = None) -> bytes:
    """A :data:`FORMAT_PLAIN` payload of a GET of ``url`` under ``slot``, with Scrapy's
    ``meta["depth"]`` (an int >= 0, or None: no meta) and the spider method ``callback``
    (a name of at most 255 bytes, or None: the spider's ``parse``). Raises
    :class:`ValueError` for a negative depth or a longer name."""
    head = _head(FORMAT_PLAIN, slot)
    flags, body = 0, bytearray()
    if depth is not None:
        if depth < 0:
            raise ValueError(f"depth {depth} < 0")
        flags |= _DEPTH
        while True:
            byte, depth = depth & 0x7F, depth >> 7
            body.append(byte | (0x80 if depth else 0))
            if not depth:
                break
    if callback is not None:
        name = callback.encode("utf-8")
        if len(name) > 255:
            raise ValueError(f"callback name of {len(name)} bytes > 255")
        flags |= _CALLBACK
        body += bytes([len(name)]) + name
    raw = url.encode("utf-8")
    for scheme, bit in _SCHEMES.items():
        prefix = scheme + head[2:]
        if raw.startswith(prefix) and head[2:]:
            flags |= _SAME_HOST | bit
            raw = raw[len(prefix):]
            break
    return head + bytes([flags]) + bytes(body) + raw


def payload_slot(payload: bytes) -> str:
    """The download slot at the head of a payload (``""`` if none or not a payload)."""
    if len(payload) < 2 or payload[0] not in FORMATS:
        return ""
    return payload[2 : 2 + payload[1]].decode("utf-8", "replace")


def plain_request(payload: bytes) -> dict[str, Any]:
    """The request dict (``url``, and ``callback`` and ``meta`` when stored) of a
    :data:`FORMAT_PLAIN` payload. Raises :class:`ValueError` for anything else."""
    if len(payload) < 3 or payload[0] != FORMAT_PLAIN or len(payload) < 3 + payload[1]:
        raise ValueError("not a plain request payload")
    n = payload[1]
    slot, flags, i = payload[2 : 2 + n], payload[2 + n], 3 + n
    data: dict[str, Any] = {}
    if flags & _DEPTH:
        depth, shift = 0, 0
        while True:
            if i >= len(payload) or shift > 63:
                raise ValueError("truncated depth")
            byte = payload[i]
            depth |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                break
        data["meta"] = {"depth": depth}
    if flags & _CALLBACK:
        if i >= len(payload) or i + 1 + payload[i] > len(payload):
            raise ValueError("truncated callback name")
        data["callback"] = payload[i + 1 : i + 1 + payload[i]].decode("utf-8")
        i += 1 + payload[i]
    rest = payload[i:]
    if flags & _SAME_HOST:
        rest = (b"https://" if flags & _HTTPS else b"http://") + slot + rest
    data["url"] = rest.decode("utf-8")
    return data


def payload_fields(payload: bytes) -> dict[str, Any]:
    """``url`` (without its ``#fragment``: the frontier entry's URL, which stands for
    every fragment of it), ``depth`` (Scrapy's ``meta["depth"]``, None if absent) and
    ``slot`` of a stored request payload of either format, without Scrapy; empty for a
    payload that is missing or of no known format."""
    if not payload or payload[0] not in FORMATS or len(payload) < 2:
        return {}
    try:
        if payload[0] == FORMAT_PLAIN:
            data = plain_request(payload)
        else:
            data = msgpack.unpackb(payload[2 + payload[1] :], raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        return {}
    if not isinstance(data, dict):
        return {}
    meta = data.get("meta") or {}
    return {
        "url": str(data.get("url") or "").partition("#")[0], "slot": payload_slot(payload),
        "depth": meta.get("depth") if isinstance(meta, dict) else None,
    }
