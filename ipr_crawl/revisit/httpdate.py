"""HTTP-date parsing (RFC 9110 §5.6.7): the instants of ``Last-Modified`` and
``Date`` headers as POSIX seconds."""

from __future__ import annotations

from email.utils import mktime_tz, parsedate_tz

__all__ = ["parse_http_date"]


def parse_http_date(value: str | bytes | None) -> float | None:
    """POSIX seconds of an HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, and the obsolete
    RFC 850 and asctime forms), or None when absent or unparsable.

    >>> parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT")
    (784111777.0, 784111777.0)
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    try:
        parts = parsedate_tz(value.strip())
        return float(mktime_tz(parts)) if parts else None
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
