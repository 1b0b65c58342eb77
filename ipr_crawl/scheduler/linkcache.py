"""Per-process caches of the link-graph middleware's hot path (found by profiling a crawl).

A documentation site links the same sidebar URLs from every page: most links of a
page are to URLs the crawl already knows. :class:`LinkIds` keeps, per crawling
process,

- the canonical URL and node id of each raw URL seen recently, so that
  ``canonicalize_url`` (the costliest step per link) runs once per distinct URL
  string rather than once per link;
- the node ids this process has already recorded in Redis (every id of a
  successful ``record_page`` call is in the crawl's ``node`` hash from then on),
  so that links to them are sent without a request payload: the script registers
  a payload only for a new node, so encoding one for a known URL is wasted work.

Both are bounded (cleared when full). :meth:`LinkIds.forget` clears the known ids
after a Redis error (a restarted server may have lost its last writes).
"""

from __future__ import annotations

from ipr_crawl.ordering.urls import canonical_id, canonical_url

__all__ = ["LinkIds"]


class LinkIds:
    """Raw URL -> (canonical URL, node id) cache and the set of known node ids.

    ``size`` bounds each of the two (entries; about 150 bytes per URL entry and
    70 bytes per known id).

    >>> ids = LinkIds()
    >>> canon, nid = ids.lookup("http://a.example/p?b=2&a=1#top")
    >>> canon, len(nid), ids.is_known(nid)
    ('http://a.example/p?a=1&b=2', 8, False)
    >>> ids.remember([nid]); ids.is_known(nid)
    True
    """

    def __init__(self, size: int = 1 << 18) -> None:
        self.size = size
        self._ids: dict[str, tuple[str, bytes]] = {}
        self._known: set[bytes] = set()

    def lookup(self, url: str) -> tuple[str, bytes]:
        """``(canonical_url(url), node_id(url))`` (:mod:`ipr_crawl.ordering.urls`)."""
        hit = self._ids.get(url)
        if hit is None:
            canon = canonical_url(url)
            hit = (canon, canonical_id(canon))
            if len(self._ids) >= self.size:
                self._ids.clear()
            self._ids[url] = hit
        return hit

    def is_known(self, node: bytes) -> bool:
        """True if this process recorded ``node`` in Redis (so it needs no payload)."""
        return node in self._known

    def remember(self, nodes: list[bytes]) -> None:
        """Node ids now in Redis (after a successful record call)."""
        if len(self._known) + len(nodes) > self.size:
            self._known.clear()
        self._known.update(nodes)

    def forget(self) -> None:
        """Drop the known ids (after a Redis error)."""
        self._known.clear()
