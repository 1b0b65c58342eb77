"""How a settling call names the lease it settles: :func:`settle_arg`, and the take of
each lease this process holds (:func:`note_takes`).

A lease in Redis is held as ``<holder id>#<take>`` (``lease_by``; the take counts the
pop calls that leased for a holder, pop.lua). A settle built for a lease this process
saw taken names that take, so a settle that reaches Redis again after the same holder
took the same member anew (redis-py's retry after a lost reply, a pipelined call sent
again after a reconnect) settles nothing: a fencing token per take (Kleppmann 2016,
"How to do distributed locking"; BullMQ's lock token per job fetch). A settle for a
member whose take is not known here (forgotten, or built twice) names the holder alone,
and settles whichever take of that holder's is in flight.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["TAKES_KEPT", "lease_holder", "note_takes", "settle_arg"]

#: takes remembered at most (the oldest forgotten first): leases held and not settled yet
TAKES_KEPT = 1 << 14

_takes: OrderedDict[bytes, tuple[str, int]] = OrderedDict()
_lock = threading.Lock()


def note_takes(holder: str, members: Iterable[bytes], take: int) -> None:
    """Remember that ``holder`` leased ``members`` (lease members) in pop call ``take``
    (pop.lua's reply; 0: not counted, nothing remembered)."""
    if not take or not holder:
        return
    with _lock:
        for member in members:
            _takes[member] = (holder, take)
            _takes.move_to_end(member)
        while len(_takes) > TAKES_KEPT:
            _takes.popitem(last=False)


def settle_arg(lease: bytes, holder: str = "") -> bytes:
    """How a settling script is told which lease to settle (``_leases.lua``'s
    ``lease_arg``): ``b""`` for none, else one byte (the member's length, 9 or 16), the
    member, then ``holder`` (this process's holder id: a lease another holder took since
    is left alone; ``""``: whoever holds it) and, when ``holder`` took it in a pop this
    process saw (:func:`note_takes`), ``#`` and that take, which is then forgotten."""
    if not lease:
        return b""
    arg = bytes([len(lease)]) + lease + holder.encode()
    if holder:
        with _lock:
            seen = _takes.pop(lease, None)
        if seen is not None and seen[0] == holder:
            arg += b"#%d" % seen[1]
    return arg


def lease_holder(value: bytes) -> str:
    """The holder id of a ``lease_by`` value (``<holder id>#<take>``, or a holder id
    alone: a lease taken by an earlier release)."""
    head, sep, take = value.decode().rpartition("#")
    return head if sep and take.isdigit() else value.decode()
