"""Request payloads without pickle: ``Request.to_dict()`` as msgpack.

The store may be shared between processes and machines, and unpickling is code
execution, so requests are kept as msgpack of :meth:`scrapy.Request.to_dict`
(callbacks by name) with defaults left out, with msgpack extension types for the
values Scrapy's own disk queues carry that msgpack has none for (items,
dataclasses, datetimes, ...). A request holding anything else is refused
(:class:`Unstorable`) and the scheduler keeps it in the process's memory; keys of
ours that only make sense in flight (``ipr_lease``) are never stored.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import msgpack
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.request import request_from_dict

from ipr_crawl.meta import TRANSIENT_META, WRAPPED_ERRBACK_ATTR
from ipr_crawl.scheduler.internals import callback_name
from ipr_crawl.store.payload import FORMAT_DICT, FORMAT_PLAIN, FORMATS, frame_dict, frame_plain, plain_request
from ipr_crawl.store.payload import payload_slot as payload_slot

__all__ = [
    "encode_request", "decode_request", "payload_slot", "slot_of", "PayloadError", "TRANSIENT_META", "Unstorable",
]

#: First byte of a payload as a dict: [2, n, n bytes of the download slot, msgpack]; a
#: plain request is framed smaller (:data:`~ipr_crawl.store.payload.FORMAT_PLAIN`)
FORMAT = FORMAT_DICT
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

# msgpack extension types: the values Scrapy's request_to_dict and disk queues carry
# that msgpack has no type for. Never pickle: a class is rebuilt only if it is an
# Item, dataclass, attrs class or Enum of an imported module (or of the project).
_EXT_DATETIME, _EXT_DATE, _EXT_TIME, _EXT_TIMEDELTA, _EXT_DECIMAL = 1, 2, 3, 4, 5
_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET, _EXT_UUID, _EXT_OBJECT, _EXT_ENUM = 6, 7, 8, 9, 10, 11


class PayloadError(ValueError):
    """A stored request payload could not be decoded (it is dropped, never executed)."""


class Unstorable(TypeError):
    """A value that cannot be stored without pickle; ``where`` names it
    (``meta['item']``, ``cb_kwargs['x']``), ``kind`` is its type's name."""

    def __init__(self, where: str, kind: str) -> None:
        super().__init__(f"{where} holds a {kind}, which cannot be stored without pickle")
        self.where = where
        self.kind = kind


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _object_state(value: Any) -> tuple[str, dict[str, Any]] | None:
    """``(class path, state)`` of an Item, dataclass or attrs instance, else None."""
    import dataclasses

    from scrapy import Item

    cls = type(value)
    if "<locals>" in cls.__qualname__:
        return None
    if isinstance(value, Item):
        return _class_path(cls), dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _class_path(cls), {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    fields = getattr(cls, "__attrs_attrs__", None)
    if fields is not None:
        return _class_path(cls), {f.name: getattr(value, f.name) for f in fields}
    return None


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, default=_default, strict_types=True)


def _default(value: Any) -> msgpack.ExtType:
    import datetime
    import decimal
    import enum
    import uuid

    if isinstance(value, enum.Enum):
        return msgpack.ExtType(_EXT_ENUM, _pack([_class_path(type(value)), value.value]))
    if isinstance(value, datetime.datetime):
        return msgpack.ExtType(_EXT_DATETIME, value.isoformat().encode())
    if isinstance(value, datetime.date):
        return msgpack.ExtType(_EXT_DATE, value.isoformat().encode())
    if isinstance(value, datetime.time):
        return msgpack.ExtType(_EXT_TIME, value.isoformat().encode())
    if isinstance(value, datetime.timedelta):
        return msgpack.ExtType(_EXT_TIMEDELTA, _pack([value.days, value.seconds, value.microseconds]))
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(value).encode())
    if isinstance(value, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    if isinstance(value, tuple) and type(value) is tuple:
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(value)))
    if isinstance(value, frozenset):
        return msgpack.ExtType(_EXT_FROZENSET, _pack(list(value)))
    if isinstance(value, set):
        return msgpack.ExtType(_EXT_SET, _pack(list(value)))
    state = _object_state(value)
    if state is not None:
        return msgpack.ExtType(_EXT_OBJECT, _pack([state[0], state[1]]))
    if isinstance(value, tuple):  # a namedtuple: its fields, as a tuple
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(value)))
    base: Any
    for base in (dict, list, str, bytes, int, float):  # OrderedDict, defaultdict, ...: as the base type
        if isinstance(value, base):
            return base(value)
    raise Unstorable("a value", type(value).__qualname__)


class _Decoder:
    """msgpack ``ext_hook`` rebuilding :func:`_default`'s types for one spider."""

    def __init__(self, spider: Spider | None) -> None:
        self.project = type(spider).__module__.split(".")[0] if spider is not None else ""

    def _class(self, path: Any, kinds: str) -> type:
        import dataclasses
        import enum
        import importlib

        from scrapy import Item

        if not isinstance(path, str) or "." not in path:
            raise PayloadError(f"bad class {path!r}")
        module_name, _, name = path.rpartition(".")
        module = sys.modules.get(module_name)
        if module is None and self.project and module_name.split(".")[0] == self.project:
            module = importlib.import_module(module_name)  # the spider's own project
        cls: Any = module
        for part in name.split("."):
            cls = getattr(cls, part, None)
        ok = isinstance(cls, type) and (
            issubclass(cls, enum.Enum) if kinds == "enum"
            else issubclass(cls, Item) or dataclasses.is_dataclass(cls) or hasattr(cls, "__attrs_attrs__")
        )
        if not ok:
            raise PayloadError(f"{path!r} is not an item, dataclass, attrs or enum class of an imported module")
        return cls

    def __call__(self, code: int, data: bytes) -> Any:
        import datetime
        import decimal
        import uuid

        from scrapy import Item

        if code == _EXT_DATETIME:
            return datetime.datetime.fromisoformat(data.decode())
        if code == _EXT_DATE:
            return datetime.date.fromisoformat(data.decode())
        if code == _EXT_TIME:
            return datetime.time.fromisoformat(data.decode())
        if code == _EXT_TIMEDELTA:
            days, seconds, micro = self._unpack(data)
            return datetime.timedelta(days, seconds, micro)
        if code == _EXT_DECIMAL:
            return decimal.Decimal(data.decode())
        if code == _EXT_UUID:
            return uuid.UUID(bytes=data)
        if code in (_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET):
            items = self._unpack(data)
            return {_EXT_TUPLE: tuple, _EXT_SET: set, _EXT_FROZENSET: frozenset}[code](items)
        if code == _EXT_ENUM:
            path, value = self._unpack(data)
            return self._class(path, "enum")(value)
        if code == _EXT_OBJECT:
            path, state = self._unpack(data)
            cls = self._class(path, "object")
            if issubclass(cls, Item):
                return cls(state)
            obj = cls.__new__(cls)
            for key, value in dict(state).items():
                object.__setattr__(obj, key, value)
            return obj
        raise PayloadError(f"unknown extension type {code}")

    def _unpack(self, data: bytes) -> Any:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=self, use_list=True)


def _check_packable(data: dict[str, Any]) -> None:
    """Raise :class:`Unstorable` naming the first meta or cb_kwargs value that cannot
    be packed."""
    for field in ("meta", "cb_kwargs"):
        for key, value in (data.get(field) or {}).items():
            try:
                _pack(value)
            except Unstorable as exc:
                raise Unstorable(f"{field}[{key!r}]", exc.kind) from None
            except (TypeError, ValueError, OverflowError) as exc:
                raise Unstorable(f"{field}[{key!r}]", type(value).__qualname__) from exc


#: (spider, function) -> the spider's method name of that function (Scrapy's
#: ``_find_method``, :func:`~ipr_crawl.scheduler.internals.callback_name`, lists every
#: member of the spider for each request: a fifth of the add-on's own time per link on
#: small pages). Weak on the spider.
_METHOD_NAMES: weakref.WeakKeyDictionary[Any, dict[Any, str]] = weakref.WeakKeyDictionary()


def _method_name(spider: Spider | None, func: Any) -> Any:
    """The name :meth:`scrapy.Request.to_dict` stores for a callback or errback:
    Scrapy's own (:func:`~ipr_crawl.scheduler.internals.callback_name`, raising
    ValueError as it does), cached per spider and function."""
    if not callable(func):
        return func
    inner = getattr(func, "__func__", None)
    if spider is None or inner is None:
        return callback_name(spider, func)
    try:
        names = _METHOD_NAMES.setdefault(spider, {})
    except TypeError:  # a spider that cannot be weakly referenced
        return callback_name(spider, func)
    name = names.get(inner)
    if name is None:
        name = names[inner] = callback_name(spider, func)
    return name


def _request_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """:meth:`scrapy.Request.to_dict` with the callback and errback names cached
    (:func:`_method_name`); a Request subclass that overrides ``to_dict`` keeps its own."""
    if type(request).to_dict is not Request.to_dict:
        return request.to_dict(spider=spider)
    d: dict[str, Any] = {
        "url": request.url,
        "callback": _method_name(spider, request.callback),
        "errback": _method_name(spider, request.errback),
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        d["_class"] = request.__module__ + "." + request.__class__.__name__
    return d


def encode_request(request: Request, spider: Spider | None) -> tuple[bytes, list[str]]:
    """Serialize ``request``; returns ``(payload, [])``.

    Values of ``meta`` and ``cb_kwargs`` may be anything msgpack holds, and also
    datetimes, dates, times, timedeltas, Decimals, UUIDs, tuples, sets, Enums and
    Scrapy ``Item``, dataclass and attrs instances (as their class path and fields).
    Raises :class:`ValueError` when the callback is not a method of the spider
    (Scrapy's own rule for serializable requests) and :class:`Unstorable` (a
    ``TypeError``) naming the value that none of these covers.
    """
    own = getattr(request.errback, WRAPPED_ERRBACK_ATTR, _NO_WRAPPER)
    if own is not _NO_WRAPPER:  # the in-flight errback of the frontier middleware
        request = request.replace(errback=own)
    data = _request_dict(request, spider)
    data["meta"] = {k: v for k, v in data.get("meta", {}).items() if k not in TRANSIENT_META}
    if "headers" in data:
        data["headers"] = {bytes(k): list(v) for k, v in data["headers"].items()}
    compact = {k: v for k, v in data.items() if k not in _DEFAULTS or v != _DEFAULTS[k]}
    if "_class" in compact and compact["_class"] == "scrapy.http.request.Request":
        del compact["_class"]
    plain = _plain(compact)
    if plain is not None:
        return frame_plain(slot_of(request), compact["url"], *plain), []
    try:
        packed = _pack(compact)
    except (TypeError, ValueError, OverflowError):
        _check_packable(compact)
        raise
    return frame_dict(slot_of(request), packed), []


def _plain(compact: dict[str, Any]) -> tuple[int | None, str | None] | None:
    """``(depth, callback)`` when the request (``compact``: its dict without defaults)
    is plain (:data:`~ipr_crawl.store.payload.FORMAT_PLAIN`): a URL, a callback name of
    at most 255 bytes, and a ``meta`` of at most an int ``depth``; else None."""
    if not compact.keys() <= {"url", "callback", "meta"} or not isinstance(compact.get("url"), str):
        return None
    meta, callback = compact.get("meta", {}), compact.get("callback")
    if not isinstance(meta, dict) or not meta.keys() <= {"depth"}:
        return None
    depth = meta.get("depth")
    if "depth" in meta and (type(depth) is not int or not 0 <= depth < 1 << 32):
        return None
    if callback is not None and (not isinstance(callback, str) or len(callback.encode("utf-8")) > 255):
        return None
    return depth, callback


def slot_of(request: Request) -> str:
    """The download slot Scrapy's downloader gives ``request`` (``Downloader.get_slot_key``
    without DNS resolution): ``meta["download_slot"]``, else the URL's host name.
    Stored at the head of the payload, so that the polite pop (``pop.lua``) reads it
    without parsing the payload."""
    slot = request.meta.get("download_slot")
    if slot is not None:
        return str(slot)
    return urlparse_cached(request).hostname or ""


def decode_request(payload: bytes, spider: Spider | None) -> Request:
    """Rebuild a request from :func:`encode_request` output.

    Raises :class:`PayloadError` on anything that is not such a payload.
    """
    if len(payload) < 2 or payload[0] not in FORMATS or len(payload) < 2 + payload[1]:
        raise PayloadError(f"unknown payload format byte {payload[:1]!r}")
    try:
        if payload[0] == FORMAT_PLAIN:
            data = plain_request(payload)
        else:
            data = msgpack.unpackb(
                payload[2 + payload[1] :], raw=False, strict_map_key=False, ext_hook=_Decoder(spider)
            )
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
