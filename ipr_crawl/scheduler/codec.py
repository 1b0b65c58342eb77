"""Request payloads without pickle: ``Request.to_dict()`` as msgpack.

The store may be shared between processes and machines, and unpickling is code
execution, so requests are kept as msgpack of :meth:`scrapy.Request.to_dict`
(callbacks by name) with defaults left out. Meta values msgpack cannot hold are
dropped from the stored copy (counted by the caller); keys of ours that only
make sense in flight (``ipr_lease``) are never stored.
"""

from __future__ import annotations

import sys
from typing import Any

import msgpack
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.request import request_from_dict

from ipr_crawl.meta import TRANSIENT_META, WRAPPED_ERRBACK_ATTR

__all__ = ["encode_request", "decode_request", "payload_slot", "slot_of", "PayloadError", "TRANSIENT_META"]

#: First byte of a payload: 2 = [2, n, n bytes of the download slot, msgpack].
FORMAT = 2
_DEFAULTS: dict[str, Any] = {
    "method": "GET",
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
    "callback": None,
    "errback": None,
}


_NO_WRAPPER = object()


class PayloadError(ValueError):
    """A stored request payload could not be decoded (it is dropped, never executed)."""


def _packable(value: Any) -> bool:
    try:
        msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def encode_request(request: Request, spider: Spider | None) -> tuple[bytes, list[str]]:
    """Serialize ``request``; returns ``(payload, meta keys dropped)``.

    Raises :class:`ValueError` when the callback is not a method of the spider
    (Scrapy's own rule for serializable requests).
    """
    own = getattr(request.errback, WRAPPED_ERRBACK_ATTR, _NO_WRAPPER)
    if own is not _NO_WRAPPER:  # the in-flight errback of the frontier middleware
        request = request.replace(errback=own)
    data = request.to_dict(spider=spider)
    meta = {k: v for k, v in data.get("meta", {}).items() if k not in TRANSIENT_META}
    dropped = [k for k, v in meta.items() if not _packable(v)]
    for k in dropped:
        del meta[k]
    data["meta"] = meta
    if "headers" in data:
        data["headers"] = {bytes(k): list(v) for k, v in data["headers"].items()}
    compact = {k: v for k, v in data.items() if k not in _DEFAULTS or v != _DEFAULTS[k]}
    if "_class" in compact and compact["_class"] == "scrapy.http.request.Request":
        del compact["_class"]
    slot = slot_of(request).encode("utf-8")[:255]
    return bytes([FORMAT, len(slot)]) + slot + msgpack.packb(compact, use_bin_type=True), dropped


def slot_of(request: Request) -> str:
    """The download slot Scrapy's downloader gives ``request`` (``Downloader.get_slot_key``
    without DNS resolution): ``meta["download_slot"]``, else the URL's host name.
    Stored at the head of the payload, so that the polite pop (``pop.lua``) reads it
    without parsing the payload."""
    slot = request.meta.get("download_slot")
    if slot is not None:
        return str(slot)
    return urlparse_cached(request).hostname or ""


def payload_slot(payload: bytes) -> str:
    """The download slot stored at the head of a payload (``""`` if none)."""
    if len(payload) < 2 or payload[0] != FORMAT:
        return ""
    return payload[2 : 2 + payload[1]].decode("utf-8", "replace")


def decode_request(payload: bytes, spider: Spider | None) -> Request:
    """Rebuild a request from :func:`encode_request` output.

    Raises :class:`PayloadError` on anything that is not such a payload.
    """
    if len(payload) < 2 or payload[0] != FORMAT or len(payload) < 2 + payload[1]:
        raise PayloadError(f"unknown payload format byte {payload[:1]!r}")
    try:
        data = msgpack.unpackb(payload[2 + payload[1] :], raw=False, strict_map_key=False)
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise PayloadError("payload is not a request dict")
        if "_class" in data:
            _request_class(data["_class"])
        for name in ("callback", "errback"):
            _spider_method(spider, data.get(name))
        full = dict(_DEFAULTS)
        full.update(data)
        return request_from_dict(full, spider=spider)
    except PayloadError:
        raise
    except Exception as exc:  # msgpack, scrapy and user classes raise many kinds
        raise PayloadError(f"cannot rebuild request: {exc!r}") from exc


def _request_class(path: Any) -> type:
    """The Request subclass named by a payload's ``_class``.

    Only a class of a module this process has already imported, and only a
    subclass of :class:`scrapy.Request`: a payload from a shared store never
    makes this process import a module or build any other object (Scrapy's
    ``request_from_dict`` alone would load and call whatever ``_class`` names).
    """
    if not isinstance(path, str) or "." not in path:
        raise PayloadError(f"bad request class {path!r}")
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    cls = getattr(module, name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise PayloadError(f"{path!r} is not a Request class of an imported module")
    return cls


def _spider_method(spider: Spider | None, name: Any) -> None:
    """Check a payload's callback or errback name: a public method of the spider."""
    if name is None:
        return
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        raise PayloadError(f"bad callback name {name!r}")
    if spider is not None and not callable(getattr(spider, name, None)):
        raise PayloadError(f"{name!r} is not a method of spider {spider.name!r}")
