"""Key names and the schema version of one crawl's keyspace.

One crawl is one keyspace ``ipr:{<crawl id>}:*`` (one hash tag, so the multi-key
scripts stay atomic in one Redis Cluster slot). Keys:

================= ====== ==========================================================
``meta``          hash   schema version, ordering, counters (seq, fetched, failed); ``finished``
                         when it closed as finished, ``rerun_of`` the finished crawl it was
                         started afresh from (:mod:`ipr_crawl.store.archive`)
``node``          hash   8-byte node id -> packed record (:mod:`ipr_crawl.store.record`):
                         37 bytes, then a fetched page's out-links, 8 bytes per edge
                         (bucket mode: then 1 byte per edge, the link's bucket)
``frontier``      zset   seq.id member, score = -priority
``lease``         zset   members in flight, score = when leased (ms since the epoch)
``lease_by``      hash   lease member -> the holder id of the process that leased it
``lease_since``   hash   lease member -> when a lease extended past IPR_LEASE_SECS was first taken (ms)
``holders``       zset   holder id (host:pid:random) -> heartbeat deadline (ms since the epoch)
``holders_info``  hash   holder id -> JSON: host, pid, spider, started, heartbeat seconds
``releases``      hash   node id or forced token -> times its lease went back because its holder
                         was lost or the lease expired (cleared when the page is recorded)
``dead_letter``   hash   lease member -> request payload of a request handed out again more than
                         IPR_MAX_RELEASES times: settled as failed, put back by release-leases --dead
``order``         string the fetch order: fetched node ids, 8 bytes each, appended
``timeline``      stream one sample of the counts per interval (store.FrontierStore.sample), capped
``forced``        zset   dont_filter requests (retries, ...), FIFO
``unfiltered``    set    node ids only dont_filter requests brought (start URLs): the first filtered
                         request for one is fetched, as Scrapy's duplicate filter never saw it
``imported_seen`` set    a crawl carried over from scrapy-redis: its duplicate filter's fingerprints
                         (scheduler/migrate.py); a new URL found there is known as fetched
``req``           hash   node id or forced token -> request payload (scheduler/codec.py)
``sites``         zset   larger-sites-first: site hash -> -(its queued URLs)
``siteq``         zset   larger-sites-first: the site queues, members 8-byte site hash .. frontier
                         member, all scored 0 (ordered by site, then seq)
``rprio``         hash   queued node id -> Scrapy's Request.priority of its request, for those not 0:
                         the frontier's first key (lua/_frontier.lua zscore)
``orphans``       set    queued node ids whose request payload was lost (writes a failover or an AOF
                         loss took): out of the frontier until a link or a request brings it again
``resid``         zset   push: fetched node id, score = level of residual / out-degree (mass not yet pushed on; ordering.reference.resid_level)
``pushing``       string push: the hub being pushed in parts: id, share per link, next link index
``graph``         hash   replays only: a graph to replay (:mod:`ipr_crawl.store.replay`)
``revisit``       hash   node id -> revisit state of a fetched URL (store/revisit.py)
``due``           zset   node id, score = next visit (s since the epoch)
``revisit_req``   hash   node id -> request payload used for its revisits
``revisit_out``   zset   revisits in flight, score = when due again if the response never comes
``rates``         hash   revisits under a budget: rate bin ("a:b") -> URLs (revisit/budget.py)
``rate_pool``     hash   revisits under a budget: ``x:<directory>`` changes, ``e:<directory>``
                         exposure (s) of its URLs' access intervals (revisit/budget.py RatePool);
                         ``mom:<name>`` the five sums of RateMoments (``prior=gamma``)
``changes``       stream change events (new, changed, unchanged, not_modified, gone), capped
``outbox:<c>``    stream bucket mode: links and gains for bucket c, one entry per recorded page
``hwm``           hash   bucket mode: source bucket -> id of the last outbox entry applied here
``rerun``         string held (SET NX, expiring) by the process that starts a finished crawl afresh
``enq:<op>``      string a forced enqueue applied (op: holder id and sequence number), expiring after
                         10 minutes: the same call sent again queues nothing more
================= ====== ==========================================================

A finished crawl's rerun keeps it as the crawl ``<crawl id>~<n>`` (:mod:`ipr_crawl.store.archive`).

Bucket mode (``IPR_CLUSTER_BUCKETS`` = B > 1, :mod:`ipr_crawl.store.buckets`): bucket
b is the keyspace above under the hash tag ``{<crawl id>:<b>}``; the crawl-wide
``ipr:{<crawl id>}:meta`` holds the schema, the ordering and B.
"""

from __future__ import annotations

from ipr_crawl.crawl_id import check_crawl_id

__all__ = ["DERIVED_KEYS", "RECORD_KEYS", "SCHEMA_VERSION", "KEY_NAMES", "STORE_LOST", "crawl_keys", "is_store_lost"]

#: 7: a lease names its take (``lease_by``: ``<holder>#<take>``) and a plain request's payload
#: may be framed small (store/payload.py, format 3); 6: larger-sites-first's site queues are one ``siteq`` (not a ``site:<hash>`` key per site);
#: 5: the push index ``resid`` scores a residual's level, not the residual; 4: leases are scored by when they were taken (not by a deadline) and name
#: their holder; 3: payloads carry their download slot (codec format 2); 2: out-links kept in the
#: node record; 1: a separate `out` hash.
SCHEMA_VERSION = 7
KEY_NAMES = (
    "meta", "node", "frontier", "lease", "forced", "unfiltered", "imported_seen", "req", "sites", "siteq", "rprio", "orphans", "graph", "resid", "pushing",
    # leases, their holders, what the operator sees (status, report)
    "lease_by", "lease_since", "holders", "holders_info", "order", "timeline", "releases", "dead_letter",
    # revisits (store/revisit.py)
    "revisit", "due", "revisit_req", "changes", "revisit_out", "rates", "rate_pool",
)

#: The keys of a record call (record_page.lua, relay.lua), KEYS[1..9], in this order.
RECORD_KEYS = ("meta", "node", "frontier", "lease", "req", "forced", "unfiltered", "imported_seen", "order")
#: The error prefix of a script that found the crawl's ``meta`` without its ordering
#: (``lua/_store_lost.lua``): the Redis it runs on no longer holds the crawl it opened.
STORE_LOST = "IPR_STORE_LOST"


def is_store_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a script's (or :meth:`FrontierStore.pending`'s) :data:`STORE_LOST`
    error: Redis restarted empty, a replica promoted before it synced, a ``FLUSHDB``."""
    return STORE_LOST in str(exc)


#: The keys of the crawl the scripts use beside their own (_lease_keys.lua, _push.lua,
#: ordering/rules/lsf.lua, _records.lua's rprio, _frontier.lua's orphans): passed in KEYS,
#: in this order, after each script's own keys, and taken from there by name
#: (lua_loader.py's generated ``_derived_keys.lua``): every key a script touches is
#: declared (a Redis Cluster checks them before the script runs) and none is built in it.
DERIVED_KEYS = (
    "lease_by", "lease_since", "holders", "holders_info", "resid", "pushing", "sites", "siteq", "rprio", "orphans",
    "releases", "dead_letter",
)


def crawl_keys(crawl_id: str) -> dict[str, str]:
    """Key names of one crawl, all under the hash tag ``{crawl_id}``.

    Raises :class:`ValueError` for an id with ``{``, ``}`` or whitespace-only
    (:func:`ipr_crawl.crawl_id.check_crawl_id`).

    >>> crawl_keys("demo")["frontier"]
    'ipr:{demo}:frontier'
    """
    check_crawl_id(crawl_id)
    return {name: f"ipr:{{{crawl_id}}}:{name}" for name in KEY_NAMES}
