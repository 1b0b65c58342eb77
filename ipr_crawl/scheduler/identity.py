"""Which frontier entry a request is: Scrapy's request fingerprint decides.

Scrapy judges two requests the same when their fingerprints are equal
(``REQUEST_FINGERPRINTER_CLASS``; by default method, canonical URL and body,
:func:`scrapy.utils.request.fingerprint`). The frontier keeps that identity:

- a **link** (a plain GET whose fingerprint is the one a GET of its URL has) is the
  URL's node of the link graph, id :func:`ipr_crawl.ordering.urls.node_id`, scored
  by the ordering;
- any other request (POST/PUT, a body, ``verbatim_url``, or a request a custom
  fingerprinter tells apart from a GET of its URL) is an entry of its own, id = the
  first 8 bytes of its fingerprint: queued, leased and recorded like a URL
  nobody links to, never merged with another request.

With Scrapy's default fingerprinter the test needs no hashing: a GET without a
body and without ``verbatim_url`` is a link. A custom fingerprinter may give links of
different URLs one fingerprint (one that leaves a tracking parameter out, say): Scrapy
then fetches only the first; here they are merged into the node of the first URL this
process saw with that fingerprint (:meth:`RequestIdentity.link`), so that a page's link
to either is an edge to that node, fetched once.
"""

from __future__ import annotations

import weakref
from typing import Any

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter

from ipr_crawl.ordering.urls import canonical_id, canonical_url, node_id

__all__ = ["RequestIdentity"]


class RequestIdentity:
    """The frontier id of requests of one crawler (see the module docstring).

    ``fingerprinter``: the crawler's ``request_fingerprinter``.
    """

    #: a crawl carried over from scrapy-redis: scrapy-redis's fingerprints of requests
    #: (:class:`ipr_crawl.scheduler.migrate.SeenFingerprints`), sent with filtered requests
    seen_fingerprints: Any = None

    def __init__(self, fingerprinter: Any) -> None:
        self.fingerprinter = fingerprinter
        # Scrapy's own class with its defaults: a link is a body-less GET.
        self.default = type(fingerprinter) is RequestFingerprinter
        self._url_fp: dict[str, bytes] = {}
        #: custom fingerprinter: fingerprint -> (canonical URL, node id) of the first link with it
        self._merged: dict[bytes, tuple[str, bytes]] = {}
        #: links merged into another URL's node (``ipr/links/merged``)
        self.merged = 0
        #: each request's fingerprint, asked once (:meth:`fingerprint`)
        self._fps: weakref.WeakKeyDictionary[Request, bytes] = weakref.WeakKeyDictionary()

    def is_link(self, request: Request) -> bool:
        """True for a request that is the plain GET of its URL (a link-graph node)."""
        if request.method != "GET" or request.body or request.meta.get("verbatim_url"):
            return False
        if self.default:
            return True
        url_fp = self._url_fp.get(request.url)
        if url_fp is None:
            if len(self._url_fp) > 100_000:
                self._url_fp.clear()
            url_fp = self._url_fp[request.url] = self.fingerprinter.fingerprint(Request(request.url))
        return bool(self.fingerprint(request) == url_fp)

    def fingerprint(self, request: Request) -> bytes:
        """The fingerprinter's fingerprint of ``request``, asked once per request object
        (a project's fingerprinter may cache nothing; Scrapy's duplicate filter asks once)."""
        fp = self._fps.get(request)
        if fp is None:
            fp = self._fps[request] = bytes(self.fingerprinter.fingerprint(request))
        return fp

    def link(self, request: Request, canon: str, rid: bytes) -> tuple[str, bytes]:
        """The ``(canonical URL, node id)`` a link request stands for: its own (``canon``,
        ``rid``), or, with a custom fingerprinter, those of the first link this process
        saw with the same fingerprint. Bounded: after 2^20 distinct fingerprints the
        memory starts again (a URL merged before may then get a node of its own)."""
        if self.default:
            return canon, rid
        fp = self.fingerprint(request)
        first = self._merged.get(fp)
        if first is None:
            if len(self._merged) >= 1 << 20:
                self._merged.clear()
            first = self._merged[fp] = (canon, rid)
        elif first[1] != rid:
            self.merged += 1
        return first

    def of(self, request: Request) -> bytes:
        """The 8-byte frontier id of ``request``."""
        if self.is_link(request):
            if self.default:
                return node_id(request.url)
            canon = canonical_url(request.url)
            return self.link(request, canon, canonical_id(canon))[1]
        return self.fingerprint(request)[:8]
