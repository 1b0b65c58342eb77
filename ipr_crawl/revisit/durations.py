"""Durations as written in settings and policy specs (``15d``, ``12h``, ``90m``, ``30s``,
``2w``, ``1y``), in seconds.

>>> parse_duration("2w") / DAY, format_duration(YEAR)
(14.0, '365d')
"""

from __future__ import annotations

import math
import re

__all__ = ["DAY", "YEAR", "format_duration", "is_duration", "parse_duration"]

DAY = 86400.0
YEAR = 365 * DAY

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY, "y": YEAR}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?\s*([smhdwy]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``15d``, ``12h``, ``90m``, ``30s``, ``2w``, ``1y``
    (365 d); a bare number is seconds.

    >>> parse_duration("15d"), parse_duration("1.5h"), parse_duration("60")
    (1296000.0, 5400.0, 60.0)

    Raises :class:`ValueError` on anything else or a negative/non-finite value.
    """
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 15d, 12h, 30m, 45s, 2w)")
    number = float(str(text).strip().rstrip("smhdwySMHDWY").strip())
    value = number * _UNITS[m.group(2).lower() or "s"]
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite duration")
    return value


def format_duration(seconds: float) -> str:
    """Shortest exact form among d, h, m, s (``1296000`` -> ``15d``).

    >>> format_duration(1296000.0), format_duration(5400.0)
    ('15d', '90m')
    """
    for unit in ("d", "h", "m"):
        q = seconds / _UNITS[unit]
        if q == int(q) and q != 0:
            return f"{int(q)}{unit}"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds!r}s"



def is_duration(text: str) -> bool:
    """Whether ``text`` has the form :func:`parse_duration` reads (a number and an
    optional unit).

    >>> is_duration("1d"), is_duration("0.5"), is_duration("pair")
    (True, True, False)
    """
    return _DURATION.match(text) is not None
