"""URL identity: canonical form, 8-byte node ids, BLC tie keys, sites.

A node of the collected graph is identified by a 64-bit BLAKE2b hash of its
canonical URL (w3lib's :func:`~w3lib.url.canonicalize_url`, fragment dropped),
8 bytes instead of Scrapy's 40-character hex fingerprints.
"""

from __future__ import annotations

import functools
import hashlib
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

from ipr_crawl.ordering.rules import TIE_BY

__all__ = ["canonical_url", "canonical_id", "node_id", "tie_key", "site_of", "site_hash", "tie_for", "tie_by", "TIE_BY", "bucket_of"]


def canonical_url(url: str) -> str:
    """Canonical form used for identity (query sorted, fragment dropped).

    >>> canonical_url("http://a.example/p?b=2&a=1#top")
    'http://a.example/p?a=1&b=2'
    """
    return canonicalize_url(url, keep_fragments=False)


def canonical_id(canon: str) -> bytes:
    """8-byte node id of a URL already in canonical form (BLAKE2b-64)."""
    return hashlib.blake2b(canon.encode("utf-8"), digest_size=8).digest()


def node_id(url: str) -> bytes:
    """8-byte id of the node for ``url`` (BLAKE2b-64 of the canonical URL).

    >>> len(node_id("http://a.example/"))
    8
    """
    return canonical_id(canonical_url(url))


def tie_key(url: str) -> int:
    """BLC tie key of Yamada et al. 2004 §4.2: fewer '/' first, then shorter URL.

    ``min('/' count, 1023) * 2**14 + min(len(url), 16383)``: smaller is preferred.

    >>> tie_key("http://a/b") < tie_key("http://a/b/c")
    True
    """
    return min(url.count("/"), 1023) * 16384 + min(len(url), 16383)


@functools.lru_cache(maxsize=1 << 16)
def site_of(url: str) -> str:
    """The site of a URL: ``host:port`` (default port filled in), lower case
    (cached: a crawl asks again for every link to a page it has seen).

    >>> site_of("HTTP://Example.org/x")
    'example.org:80'
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme.lower(), 0)
    return f"{(parts.hostname or '').lower()}:{port}"


def site_hash(site: str) -> int:
    """52-bit hash of a site name (exact in a double, as Lua numbers are).

    >>> 0 <= site_hash("example.org:80") < 2**52
    True
    """
    digest = hashlib.blake2b(site.encode("utf-8"), digest_size=7).digest()
    return int.from_bytes(digest, "big") >> 4


def bucket_of(url: str, buckets: int) -> int:
    """The bucket of a URL's host among ``buckets`` (``IPR_CLUSTER_BUCKETS``): its
    lower-case host name's :func:`site_hash` modulo ``buckets``, so that a host's URLs
    (and Scrapy's download slot of it) live in one bucket whatever the port or scheme.

    >>> bucket_of("http://Example.org/a", 4) == bucket_of("https://example.org:8443/b", 4)
    True
    """
    if buckets <= 1:
        return 0
    return site_hash((urlsplit(url).hostname or "").lower()) % buckets


# TIE_BY, the tie rule: what the record's ``tie`` field holds under each ordering that
# has one (its rule's TIE, registry ipr_crawl.ordering.rules): ``url``, the BLC tie key
# of the URL (:func:`tie_key`); ``site``, the hash of its site (:func:`site_hash`).
# Other orderings: 0.


def tie_by(ordering: str) -> str:
    """What the record's ``tie`` field holds under ``ordering`` (:data:`TIE_BY`):
    ``"url"``, ``"site"``, or ``""`` (the field is 0). The crawl (:func:`tie_for`) and
    the graph replay (:class:`ipr_crawl.evaluation.graph_replay.Replay`) both ask here.

    >>> tie_by("blc"), tie_by("larger-sites-first"), tie_by("ipr")
    ('url', 'site', '')
    """
    return TIE_BY.get(ordering, "")


def tie_for(ordering: str, url: str) -> int:
    """The record's ``tie`` field for ``url`` under ``ordering`` (the ordering's rule, ``ordering/rules/``;
    :func:`tie_by`): the BLC tie key of the canonical URL for ``blc``, the site hash for
    ``importance`` and ``larger-sites-first``, 0 otherwise."""
    by = TIE_BY.get(ordering)
    if by == "url":
        return tie_key(canonical_url(url))
    if by == "site":
        return site_hash(site_of(url))
    return 0
