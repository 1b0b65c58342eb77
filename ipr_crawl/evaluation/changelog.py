"""Change logs: reading and writing the logs revisit-sim replays, and the window in
which each page is observed.

Format (that of ``tests/data/emacswiki_*.csv.gz``): a change log ``page_url,
change_time_utc_iso8601`` and its pages ``page_url,first_seen,last_seen``, CSV, plain
or gzip-compressed; a first row whose first field is not a URL is a header. Times are
POSIX seconds once read (:func:`parse_time`).
"""

from __future__ import annotations

import csv
import gzip
import io
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

__all__ = ["Page", "load_log", "observed_windows", "open_text", "parse_time", "write_log"]


def parse_time(text: str) -> float:
    """POSIX seconds of an ISO 8601 instant (``2013-05-02T14:10:40Z``, a space for
    the ``T`` and fractions allowed) or a date (``2013-05-02``, midnight UTC), or
    of a plain number of seconds; naive values are UTC.

    >>> parse_time("1970-01-02"), parse_time("1970-01-01 00:01:00.5"), parse_time("86400")
    (86400.0, 60.5, 86400.0)

    Raises :class:`ValueError` on anything else.
    """
    value = str(text).strip()
    try:
        return float(value)
    except ValueError:
        pass
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def open_text(path: str) -> IO[str]:
    """``path`` opened as UTF-8 text for :mod:`csv` (no newline translation),
    gzip-decompressed when its name ends in ``.gz``. Raises :class:`OSError` as
    :func:`open` does."""
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _rows(path: str, width: int) -> Iterator[tuple[int, list[str]]]:
    with open_text(path) as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if len(row) < width or not row[0].strip():
                continue
            if lineno == 1 and "://" not in row[0]:
                continue  # the header
            yield lineno, [c.strip() for c in row]


@dataclass
class Page:
    """One page of the log: its URL, observation window (s) and change instants (s)."""

    url: str
    first_seen: float
    last_seen: float
    changes: list[float] = field(default_factory=list)


def load_log(changes_path: str | Sequence[str], pages_path: str) -> list[Page]:
    """Read a change log (``page_url,change_time``; several files: their changes
    together, e.g. a log whose bulk commits are kept apart) and its pages
    (``page_url,first_seen,last_seen``); changes of unknown pages are ignored.
    A first row whose first field is not a URL is a header; blank rows and extra
    columns are skipped. Pages come in file order, each page's changes sorted.
    Raises :class:`ValueError` naming the file and line of an unreadable time."""
    pages: dict[str, Page] = {}
    for lineno, row in _rows(pages_path, 3):
        try:
            first, last = parse_time(row[1]), parse_time(row[2])
        except ValueError:
            raise ValueError(f"{pages_path}:{lineno}: bad time in {row[:3]!r}") from None
        page = pages.get(row[0])
        if page is None:
            pages[row[0]] = Page(row[0], first, last)
        else:  # a page listed twice: one window covering both
            page.first_seen, page.last_seen = min(page.first_seen, first), max(page.last_seen, last)
    for path in [changes_path] if isinstance(changes_path, str) else changes_path:
        for lineno, row in _rows(path, 2):
            page = pages.get(row[0])
            if page is not None:
                try:
                    page.changes.append(parse_time(row[1]))
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: bad time in {row[:2]!r}") from None
    for page in pages.values():
        page.changes.sort()
    return list(pages.values())


def write_log(pages: Iterable[Page], changes_path: str | Path, pages_path: str | Path | None = None) -> None:
    """Write ``pages`` as the log :func:`load_log` reads: gzip-compressed CSV,
    ``page_url,change_time_utc_iso8601`` to ``changes_path`` and, unless None,
    ``page_url,first_seen,last_seen`` to ``pages_path``; times in UTC to the second
    (``YYYY-MM-DDTHH:MM:SSZ``), in the order given."""
    pages = list(pages)

    def iso(t: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

    if pages_path is not None:
        with gzip.open(pages_path, "wt", newline="") as f:
            w = csv.writer(f)
            w.writerow(["page_url", "first_seen", "last_seen"])
            w.writerows([p.url, iso(p.first_seen), iso(p.last_seen)] for p in pages)
    with gzip.open(changes_path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["page_url", "change_time_utc_iso8601"])
        w.writerows([p.url, iso(c)] for p in pages for c in p.changes)


def observed_windows(
    pages: Iterable[Page], start: float | None, end: float | None
) -> Iterator[tuple[Page, float, float]]:
    """Each page with the window (s) in which it is observed: its ``first_seen`` to
    ``last_seen``, within ``[start, end]`` where given; pages whose window is empty
    are left out."""
    for page in pages:
        w0 = page.first_seen if start is None else max(page.first_seen, start)
        w1 = page.last_seen if end is None else min(page.last_seen, end)
        if w1 >= w0:
            yield page, w0, w1
