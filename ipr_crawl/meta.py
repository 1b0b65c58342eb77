"""The ``Request.meta`` keys ipr-crawl reads or writes, public and in one place.

- :data:`LEASE_META` (``"ipr_lease"``): hex lease member of a request leased from
  the frontier; set by the scheduler, never stored with the request.
- :data:`RECORDED_META` (``"_ipr_recorded"``): the page of this request is already
  accounted for (recorded, or settled by the revisit middleware).
- :data:`REVISIT_META` (``"ipr_revisit"``): the class of a response under revisits
  (``new``, ``changed``, ``unchanged``, ``not_modified``, ``gone``).
- :data:`DONT_REVISIT_META` (``"ipr_dont_revisit"``): set by a spider, keeps a request
  out of conditional GETs and revisits (:func:`dont_revisit`; the former key
  ``"dont_revisit"`` is still read, with a deprecation warning once).
- :data:`NETWORK_STATUS_META` (``"_ipr_network_status"``): with Scrapy's HTTP cache and
  revisits, the status the server answered a request with (set nearest the
  downloader): a response flagged ``cached`` without it never reached the server.
- :data:`ITEM_RETRIES_META` (``"ipr_item_retries"``): how often the request was sent
  again because an item of its page failed in the pipelines (scheduler/item_retry.py);
  such a request is fetched whole, without conditional headers.
- :data:`WRAPPED_ERRBACK_ATTR`: attribute of the errback wrapper holding the
  request's own errback (the codec stores that one).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = [
    "DONT_REVISIT_META", "ITEM_RETRIES_META", "LEASE_META", "NETWORK_STATUS_META", "OLD_DONT_REVISIT_META", "RECORDED_META", "REVISIT_META",
    "TRANSIENT_META", "WRAPPED_ERRBACK_ATTR", "dont_revisit", "lease_of",
]

LEASE_META = "ipr_lease"
RECORDED_META = "_ipr_recorded"
REVISIT_META = "ipr_revisit"
DONT_REVISIT_META = "ipr_dont_revisit"
#: The former name of :data:`DONT_REVISIT_META`, unprefixed (read, deprecated).
OLD_DONT_REVISIT_META = "dont_revisit"
NETWORK_STATUS_META = "_ipr_network_status"
ITEM_RETRIES_META = "ipr_item_retries"
WRAPPED_ERRBACK_ATTR = "ipr_wrapped_errback"
#: Meta keys that belong to one fetch of a request and are never stored with it.
TRANSIENT_META = (LEASE_META, NETWORK_STATUS_META)


def lease_of(request: Any) -> bytes:
    """The lease member a request carries in :data:`LEASE_META` (b'' if none or malformed)."""
    value = request.meta.get(LEASE_META)
    if not isinstance(value, str):
        return b""
    try:
        return bytes.fromhex(value)
    except ValueError:
        return b""


_warned_old_key = False


def dont_revisit(request: Any) -> bool:
    """Whether ``request`` opted out of revisits: :data:`DONT_REVISIT_META` true, or the
    former :data:`OLD_DONT_REVISIT_META` (a :class:`DeprecationWarning` once per process).

    >>> class R:
    ...     meta = {"ipr_dont_revisit": True}
    >>> dont_revisit(R())
    True
    """
    global _warned_old_key
    meta = request.meta
    if meta.get(DONT_REVISIT_META):
        return True
    if meta.get(OLD_DONT_REVISIT_META):
        if not _warned_old_key:
            _warned_old_key = True
            warnings.warn(f"Request.meta[{OLD_DONT_REVISIT_META!r}] is deprecated: use {DONT_REVISIT_META!r}",
                          DeprecationWarning, stacklevel=2)
        return True
    return False
