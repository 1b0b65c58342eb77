"""Content fingerprints deciding "changed" or "unchanged" (Tamura & Kitsuregawa 2008, §3 (3)).

Pure functions, no Scrapy or Redis imports. Three modes (``IPR_REVISIT_HASH``):

- ``body``: SHA-1 of the body bytes: any byte changes the page.
- ``text``: SHA-1 of the visible text (tags, ``<script>``, ``<style>`` and
  comments removed, entities decoded, whitespace collapsed): markup-only
  changes do not count.
- ``simhash``: 64-bit simhash (Charikar, STOC 2002) of the visible text's word
  2-shingles (bigrams); two versions are the same when their fingerprints differ
  in at most ``IPR_REVISIT_SIMHASH_DISTANCE`` bits (default 4), so a changed
  counter or date on a page of a few hundred words is not a change (the
  near-duplicate detection Tamura & Kitsuregawa 2008, §3 names: simhash, w-shingling). On very short
  pages one changed word moves many bits: such pages behave as in ``text`` mode.

A digest is a string: ``"b:<hex>"``, ``"t:<hex>"`` or ``"s:<16 hex digits>"``, so
digests of different modes never compare equal.

>>> text = " ".join(f"line {i} of the manual page about buffers and windows" for i in range(40))
>>> a = digest(f"<p>Visitors: 1041.</p><p>{text}</p>".encode(), "simhash")
>>> b = digest(f"<p>Visitors: 1042.</p><p>{text}</p>".encode(), "simhash")
>>> c = digest(f"<p>Visitors: 1042.</p><p>{text.upper()[::-1]}</p>".encode(), "simhash")
>>> same_version(a, b, 4), same_version(a, c, 4)
(True, False)
"""

from __future__ import annotations

import hashlib
import html
import re

__all__ = ["HASH_MODES", "digest", "same_version", "simhash64", "visible_text"]

HASH_MODES = ("body", "text", "simhash")

_DROP = re.compile(r"<(script|style|noscript|template)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+", re.UNICODE)


def visible_text(body: bytes, encoding: str = "utf-8") -> str:
    """The text a reader sees: markup, scripts, styles and comments removed,
    entities decoded, whitespace collapsed to single spaces.

    >>> visible_text(b"<p>a <b>b</b><script>x()</script>&amp; c</p>")
    'a b & c'
    """
    text = body.decode(encoding or "utf-8", errors="replace")
    text = _DROP.sub(" ", text)
    text = _TAG.sub(" ", text)
    return _SPACE.sub(" ", html.unescape(text)).strip()


def simhash64(text: str, shingle: int = 2) -> int:
    """64-bit simhash of ``text``'s lower-cased word ``shingle``-grams (Charikar 2002),
    each feature weighted 1 and hashed with BLAKE2b-64. Empty text gives 0."""
    words = [w.lower() for w in _WORD.findall(text)]
    if not words:
        return 0
    n = min(shingle, len(words))
    counts = [0] * 64
    for i in range(len(words) - n + 1):
        h = int.from_bytes(
            hashlib.blake2b(" ".join(words[i : i + n]).encode("utf-8"), digest_size=8).digest(), "big"
        )
        for bit in range(64):
            counts[bit] += 1 if (h >> bit) & 1 else -1
    return sum(1 << bit for bit in range(64) if counts[bit] > 0)


def digest(body: bytes, mode: str = "body", encoding: str = "utf-8") -> str:
    """Fingerprint of one version of a page in ``mode`` (see the module doc).

    Raises :class:`ValueError` for an unknown mode.
    """
    if mode == "body":
        return "b:" + hashlib.sha1(body).hexdigest()
    if mode == "text":
        return "t:" + hashlib.sha1(visible_text(body, encoding).encode("utf-8")).hexdigest()
    if mode == "simhash":
        return f"s:{simhash64(visible_text(body, encoding)):016x}"
    raise ValueError(f"IPR_REVISIT_HASH={mode!r}: allowed " + ", ".join(HASH_MODES))


def same_version(old: str, new: str, max_distance: int = 4) -> bool:
    """Whether two digests denote the same version: equal, or both simhashes within
    ``max_distance`` differing bits. An empty ``old`` (nothing stored) is never the same."""
    if not old or not new:
        return False
    if old == new:
        return True
    if old.startswith("s:") and new.startswith("s:"):
        try:
            return (int(old[2:], 16) ^ int(new[2:], 16)).bit_count() <= max_distance  # noqa: FURB166
        except ValueError:
            return False
    return False
