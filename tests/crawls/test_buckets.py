"""Bucket mode (IPR_CLUSTER_BUCKETS): one crawl split by host into buckets, each under
its own hash tag, links between buckets through outboxes and a relay. On one real
redis-server (the buckets' keys side by side) and on a real 3-master Redis Cluster."""

from __future__ import annotations

import contextlib
import re
import uuid

import pytest
from conftest import TEST_DATA

from ipr_crawl.config import FrontierConfig, SettingError
from ipr_crawl.evaluation.graphio import default_seed, reachable, read_graph, read_urls
from ipr_crawl.evaluation.serve import host_addresses
from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.reference import resid_level
from ipr_crawl.ordering.urls import bucket_of
from ipr_crawl.store import SCHEMA_VERSION, FrontierStore, IncompatibleCrawl, Link
from ipr_crawl.store.buckets import BucketedFrontier
from ipr_crawl.store.record import parse_record

POLBLOGS = TEST_DATA / "polblogs.tsv.gz"
POLBLOGS_URLS = TEST_DATA / "polblogs.urls.tsv.gz"


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def polblogs_buckets(buckets: int, hosts: int = 16):
    """polblogs (1,490 blogs, each on its own host; 958 reachable from the default seed)
    with each blog's host a loopback address of ``hosts`` (as serve-graph --hosts serves
    it); node -> bucket."""
    graph = read_graph(POLBLOGS)
    address = host_addresses(read_urls(POLBLOGS_URLS), hosts)
    return graph, {n: bucket_of(f"http://{address[n]}/", buckets) for n in graph.nodes}


def drive(store, graph, bucket, seed: int, bucketed: bool) -> list[int]:
    """An exact-order crawl of ``graph`` through ``store``: pop one, record it with its
    out-links (each with its bucket), until nothing is pending. Returns the order."""
    kw = (lambda n: {"bucket": bucket[n]}) if bucketed else (lambda n: {})
    store.enqueue(nid(seed), 0, b"seed", False, **kw(seed))
    order = []
    while True:
        _, items = store.pop(1, 600)
        if not items:
            if store.pending() == 0:
                return order
            continue
        member = items[0][0]
        n = int.from_bytes(member[8:], "big")
        order.append(n)
        links = [Link(nid(t), 0, b"p", bucket[t]) for t in dict.fromkeys(graph.out.get(n, ()))]
        store.record_page(nid(n), 0, links, lease=member, **kw(n))


@pytest.mark.parametrize("ordering", [pytest.param("blc", marks=pytest.mark.slow), pytest.param("importance", marks=pytest.mark.slow), "push",
                                      pytest.param("ipr", marks=pytest.mark.slow)])
def test_bucketed_crawl_fetches_every_page_with_one_servers_scores(redis_client, ordering):
    """Every reachable page is fetched once, in nearly one server's order (the exact
    mode: relay before each pop); sum orderings (blc: in-degree, importance) end with
    one server's scores; the rest differ as the order differs (rank correlation
    printed); nothing is left in an outbox."""
    from scipy.stats import spearmanr

    graph, bucket = polblogs_buckets(4)
    seed = default_seed(graph)
    cid = f"t-{uuid.uuid4().hex[:10]}"
    params = OrderingParams(ordering=ordering, cutoff="dl1" if ordering == "ipr" else "")
    one = FrontierStore(redis_client, cid + "-one", params)
    many = BucketedFrontier(redis_client, cid, params, 4, relay_secs=0.0)  # the exact mode (pop batch 1)
    try:
        one.open()
        assert many.open() is False
        order_one = drive(one, graph, bucket, seed, bucketed=False)
        order_many = drive(many, graph, bucket, seed, bucketed=True)
        want = reachable(graph, seed)
        assert sorted(order_one) == sorted(want)
        assert sorted(order_many) == sorted(want)  # each once
        counts = many.counts()
        assert counts["outbox"] == 0 and counts["frontier"] == 0 and counts["in_flight"] == 0
        assert counts["fetched"] == len(want)
        s1 = {k: v[1] for k, v in one.scores().items()}
        s2 = {k: v[1] for k, v in many.scores().items()}
        assert s1.keys() == s2.keys()  # every URL known in exactly its own bucket
        assert sum(store.counts()["known"] for store in many.stores) == len(s1)
        for b, store in enumerate(many.stores):  # each node in its host's bucket
            assert all(bucket[int.from_bytes(k, "big")] == b for k in store.scores())
        # the exact mode fetches in nearly one server's order (ties of equal priority
        # are broken by each bucket's own discovery numbers)
        where = {n: i for i, n in enumerate(order_many)}
        rho_order = spearmanr(range(len(order_one)), [where[n] for n in order_one])[0]
        print(f"{ordering}: Spearman rank correlation of the fetch positions, 4 buckets (exact mode) vs one "
              f"server: {rho_order:.3f}")
        assert rho_order > 0.97
        if ordering in ("blc", "importance"):
            assert all(s2[k] == pytest.approx(s1[k], rel=1e-12) for k in s1)
        else:
            keys = sorted(s1)
            rho = spearmanr([s1[k] for k in keys], [s2[k] for k in keys])[0] if ordering != "bf" else 1.0
            print(f"{ordering}: Spearman rank correlation of final scores, 4 buckets vs one server: {rho:.3f}; "
                  f"relayed {many.relayed} outbox entries")
            assert rho > 0.5
    finally:
        one.drop()
        many.drop()


def test_relay_applies_each_outbox_entry_once(redis_client):
    """Entries read twice (two relays at once, or a relay that died before trimming)
    are applied once: the target keeps a high-water mark per source."""
    cid = f"t-{uuid.uuid4().hex[:10]}"
    params = OrderingParams(ordering="blc")
    many = BucketedFrontier(redis_client, cid, params, 2)
    try:
        many.open()
        many.enqueue(nid(1), 0, b"p1", False, bucket=0)
        _, items = many.pop(1, 600)
        many.record_page(nid(1), 0, [Link(nid(2), 0, b"p2", 1), Link(nid(3), 0, b"p3", 1)], lease=items[0][0],
                         bucket=0)
        box = many._outbox(0, 1)
        entries = redis_client.xrange(box)
        assert len(entries) == 1  # one entry per bucket reached
        target = many.stores[1]
        args = [0, 1, entries[0][0], entries[0][1][b"e"]]
        run = lambda: target._scripts["relay"](  # noqa: E731
            keys=many.relay_keys(1), args=[*target._record_head, *args])
        assert [int(x) for x in run()] == [1, 0, 2, 0]
        assert [int(x) for x in run()] == [0, 1, 0, 0]  # again: skipped
        assert many.relay() == 0  # the relay finds it applied, and trims it
        assert redis_client.xlen(box) == 0
        assert target.node_score(nid(2)) == 1 and target.node_score(nid(3)) == 1
        assert redis_client.hget(target.keys["req"], nid(2)) == b"p2"
        assert many.pending() == 2
    finally:
        many.drop()


@contextlib.contextmanager
def two_buckets(redis_client, ordering: str):
    """An open crawl of two buckets on ``redis_client``, dropped afterwards."""
    many = BucketedFrontier(redis_client, f"t-{uuid.uuid4().hex[:10]}", OrderingParams(ordering=ordering), 2)
    try:
        many.open()
        yield many
    finally:
        many.drop()


def test_a_link_to_another_bucket_keeps_its_scrapy_priority(redis_client):
    """A link's Request.priority travels with it through the outbox: in its own bucket
    it is the frontier's first key there too."""
    with two_buckets(redis_client, "blc") as many:
        many.enqueue(nid(1), 0, b"p1", False, bucket=0)
        _, items = many.pop(1, 600)
        links = [Link(nid(2), 0, b"p2", 1), Link(nid(3), 0, b"p3", 1, priority=4), Link(nid(4), 0, b"p4", 1)]
        many.record_page(nid(1), 0, links, lease=items[0][0], bucket=0)
        many.relay()
        target = many.stores[1]
        assert redis_client.hget(target.keys["rprio"], nid(3)) == b"4"
        _, items = target.pop(1, 600)
        assert items[0][0][8:] == nid(3)  # first, though 2 came first and all score 1


def test_bucketed_push_crawl_of_schema_4_is_upgraded(redis_client):
    """A bucketed push crawl written by schema 4 (its residual index scored by a /
    outdeg itself): opening it re-scores every bucket's index by level and records
    schema 5 crawl-wide and in every bucket."""
    graph, bucket = polblogs_buckets(3)
    cid = f"t-{uuid.uuid4().hex[:10]}"
    params = OrderingParams(ordering="push")
    many = BucketedFrontier(redis_client, cid, params, 3, relay_secs=0.0)
    try:
        many.open()
        drive(many, graph, bucket, default_seed(graph), bucketed=True)
        want = {}
        for store in many.stores:
            resid = store.keys["resid"]
            levels = dict(redis_client.zrange(resid, 0, -1, withscores=True))
            heads = {m: parse_record(redis_client.hget(store.keys["node"], m))[0] for m in levels}
            assert levels == {m: resid_level(h.a / h.outdeg) for m, h in heads.items()}
            want[resid] = levels
            if heads:
                redis_client.zadd(resid, {m: h.a / h.outdeg for m, h in heads.items()})
            redis_client.hset(store.keys["meta"], "schema", 4)
        assert sum(len(v) for v in want.values()) > 0  # residuals left in the buckets
        redis_client.hset(many.keys["meta"], "schema", 4)
        again = BucketedFrontier(redis_client, cid, params, 3, relay_secs=0.0)
        assert again.open() is True
        for store in many.stores:
            assert dict(redis_client.zrange(store.keys["resid"], 0, -1, withscores=True)) == want[store.keys["resid"]]
            assert int(redis_client.hget(store.keys["meta"], "schema")) == SCHEMA_VERSION
        assert int(redis_client.hget(many.keys["meta"], "schema")) == SCHEMA_VERSION
    finally:
        many.drop()


def test_bucket_settings_are_checked(redis_client):
    from scrapy.settings import Settings

    ok = FrontierConfig.from_settings(Settings({"IPR_CLUSTER_BUCKETS": 8, "IPR_ORDERING": "push"}), "s")
    assert ok.cluster_buckets == 8
    for extra, words in (({"IPR_ORDERING": "pr"}, "orders by the whole"),
                         ({"IPR_ORDERING": "ipr:pl"}, "beyond a page's direct targets"),
                         ({"IPR_PRIOR_CRAWL": "old"}, "prior"),
                         ({"IPR_REVISIT_ENABLED": True}, "revisits"),
                         ({"IPR_CLUSTER_BUCKETS": 0}, "IPR_CLUSTER_BUCKETS"),
                         ({"IPR_CLUSTER_BUCKETS": 300}, "IPR_CLUSTER_BUCKETS")):
        with pytest.raises(SettingError, match=words):
            FrontierConfig.from_settings(Settings({"IPR_CLUSTER_BUCKETS": 3, **extra}), "s")
    cid = f"t-{uuid.uuid4().hex[:10]}"
    params = OrderingParams(ordering="push")
    three = BucketedFrontier(redis_client, cid, params, 3)
    try:
        three.open()
        with pytest.raises(IncompatibleCrawl, match="split into 3 buckets"):
            BucketedFrontier(redis_client, cid, params, 4).open()
        with pytest.raises(IncompatibleCrawl, match="split into 3 buckets"):
            FrontierStore(redis_client, cid, params).open()
        plain = FrontierStore(redis_client, cid + "-plain", params)
        plain.open()
        with pytest.raises(IncompatibleCrawl, match="made with one bucket"):
            BucketedFrontier(redis_client, cid + "-plain", params, 3).open()
        plain.drop()
    finally:
        three.drop()


def _served_pages(graph, served, urls):
    """Canonical URL of each page as served on its loopback host -> node."""
    from ipr_crawl.evaluation.graphio import page_paths
    from ipr_crawl.ordering.urls import canonical_url

    port = served.base.rsplit(":", 1)[1]
    address = host_addresses(urls, 16)
    return {canonical_url(f"http://{address[n]}:{port}{p}"): n for n, p in page_paths(graph, urls).items()}


def in_degree_mismatches(scores, graph, back, want) -> tuple[list[int], int]:
    """The nodes whose blc score (``scores``: node id -> s) is not their in-degree from
    the fetched pages ``want`` (as one server counts it), and how many nodes there are."""
    from ipr_crawl.ordering.urls import node_id

    indegree: dict[int, int] = {}
    for p in want:
        for t in set(graph.out.get(p, ())):
            indegree[t] = indegree.get(t, 0) + 1
    page_url = {n: u for u, n in back.items()}
    nodes = set(want) | set(indegree)
    return [n for n in nodes if scores.get(node_id(page_url[n])) != indegree.get(n, 0)], len(nodes)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_bucketed_scrapy_crawl_on_a_cluster(graph_server, cluster, tmp_path):
    """Two `scrapy crawl` processes of polblogs served on 16 loopback hosts, pointed at
    one node of a 3-master cluster with IPR_CLUSTER_BUCKETS=8: the crawl's keys lie on
    every master, every reachable page is fetched once, and the back-link counts
    (blc: each URL's in-degree from the fetched pages) equal one server's."""
    from procs import fetched, read_log, start_crawl, wait_all

    from ipr_crawl.ordering.urls import canonical_url
    from ipr_crawl.store import connect
    from ipr_crawl.store.retry import RedisRetry

    graph, urls = read_graph(POLBLOGS), read_urls(POLBLOGS_URLS)
    served = graph_server(POLBLOGS, POLBLOGS_URLS, hosts=16)
    cid = "bk"
    settings = {"IPR_REDIS_URL": cluster.url, "IPR_CRAWL_ID": cid, "IPR_CLUSTER_BUCKETS": 8,
                "IPR_ORDERING": "blc", "IPR_GRAPH_STAY_ON_HOSTS": False, "CONCURRENT_REQUESTS": 8}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]
    codes = wait_all(procs, timeout=300)
    texts = [read_log(log) for log in logs]
    for code, text in zip(codes, texts):
        assert code == 0 and "closed (finished)" in text, text[-3000:]
        assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    assert "split into 8 buckets on 3 of the cluster's 3 masters" in texts[0]
    for text in texts:  # the steady state's calls went through the pipes of the masters (store/router.py)
        calls = re.search(r"'ipr/redis/pipelined_calls': (\d+)", text)
        assert calls and int(calls.group(1)) > 200, text[-3000:]
        assert "'ipr/redis/handovers'" not in text, text[-3000:]
    back = _served_pages(graph, served, urls)
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    want = reachable(graph, served.seed)
    assert sorted(pages) == sorted(want), "a page fetched twice or never"
    for port in cluster.ports[: cluster.masters]:  # keys on every master
        with cluster.node(port) as direct:
            assert any(True for _ in direct.scan_iter(match=f"ipr:{{{cid}:*", count=1000)), port
    client = connect(cluster.url, "", retry=RedisRetry(30))
    store = BucketedFrontier(client, cid, OrderingParams(ordering="blc"), 8)
    scores = {k: v[1] for k, v in store.scores().items()}
    wrong, nodes = in_degree_mismatches(scores, graph, back, want)
    assert len(scores) == nodes
    assert not wrong
    assert store.counts()["outbox"] == 0
    client.close()


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_bucketed_crawl_survives_a_crawler_and_a_master_killed(graph_server, cluster, tmp_path):
    """A bucketed crawl (8 buckets on 3 masters, IPR_REDIS_WAIT_REPLICAS=1) of two
    processes: kill -9 of one process at 150 pages, kill -9 of the master holding most
    buckets at 300: the other process takes the dead one's leases back, the replica is
    promoted, and the crawl ends with every page fetched, none more than twice, and the
    in-degrees of one server (nothing lost or counted twice)."""
    import collections
    import time

    from procs import fetched, read_log, start_crawl, wait_all

    from ipr_crawl.ordering.urls import canonical_url
    from ipr_crawl.store import connect, crawl_keys
    from ipr_crawl.store.retry import RedisRetry

    graph, urls = read_graph(POLBLOGS), read_urls(POLBLOGS_URLS)
    served = graph_server(POLBLOGS, POLBLOGS_URLS, hosts=16)
    cid = "bkf"
    settings = {"IPR_REDIS_URL": cluster.url, "IPR_CRAWL_ID": cid, "IPR_CLUSTER_BUCKETS": 8,
                "IPR_ORDERING": "blc", "IPR_GRAPH_STAY_ON_HOSTS": False, "CONCURRENT_REQUESTS": 8,
                "DOWNLOAD_DELAY": 0.02, "IPR_HEARTBEAT_SECS": 1, "IPR_REDIS_WAIT_REPLICAS": 1,
                # after the failover the promoted master has no replica: each WAIT there is short
                "IPR_REDIS_WAIT_MS": 10}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]

    def past(n: int) -> None:
        deadline = time.monotonic() + 120
        while sum(len(fetched(log)) for log in logs) < n:
            assert time.monotonic() < deadline and procs[0].poll() is None, read_log(logs[0])[-3000:]
            time.sleep(0.05)

    past(150)
    procs[1].kill()
    procs[1].wait(20)
    past(300)
    owners = collections.Counter(cluster.master_of(crawl_keys(f"{cid}:{b}")["meta"]) for b in range(8))
    victim = owners.most_common(1)[0][0]
    cluster.kill(victim)
    (code,) = wait_all(procs[:1], timeout=300)
    text = read_log(logs[0])
    assert code == 0 and "closed (finished)" in text, text[-3000:]
    assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    back = _served_pages(graph, served, urls)
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    want = reachable(graph, served.seed)
    assert set(pages) == set(want)
    twice = [n for n, c in collections.Counter(pages).items() if c > 1]
    assert len(twice) <= 3 * 8, twice
    client = connect(cluster.url, "", retry=RedisRetry(30))
    store = BucketedFrontier(client, cid, OrderingParams(ordering="blc"), 8)
    scores = {k: v[1] for k, v in store.scores().items()}
    wrong, _ = in_degree_mismatches(scores, graph, back, want)
    print(f"bucketed failover: master {victim} held {owners[victim]} of 8 buckets; {len(pages)} fetches, "
          f"{len(twice)} pages fetched twice; in-degrees differing from one server's: {len(wrong)}")
    assert not wrong
    client.close()


@pytest.mark.slow  # ~20 s; CI time (make test ARGS='-m slow' runs it)
def test_reshard_during_a_bucketed_crawl_changes_nothing(graph_server, cluster, tmp_path):
    """`redis-cli --cluster reshard` moves every slot of the master that holds most of
    the 8 buckets to another master while two processes crawl: every page is fetched
    once and the in-degrees are one server's."""
    import collections
    import time

    from procs import fetched, read_log, start_crawl, wait_all

    from ipr_crawl.ordering.urls import canonical_url
    from ipr_crawl.store import connect, crawl_keys
    from ipr_crawl.store.retry import RedisRetry

    graph, urls = read_graph(POLBLOGS), read_urls(POLBLOGS_URLS)
    served = graph_server(POLBLOGS, POLBLOGS_URLS, hosts=16)
    cid = "bkr"
    settings = {"IPR_REDIS_URL": cluster.url, "IPR_CRAWL_ID": cid, "IPR_CLUSTER_BUCKETS": 8,
                "IPR_ORDERING": "blc", "IPR_GRAPH_STAY_ON_HOSTS": False, "CONCURRENT_REQUESTS": 8,
                "DOWNLOAD_DELAY": 0.05}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]
    deadline = time.monotonic() + 120
    while sum(len(fetched(log)) for log in logs) < 100:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), read_log(logs[0])[-3000:]
        time.sleep(0.05)
    owners = collections.Counter(cluster.master_of(crawl_keys(f"{cid}:{b}")["meta"]) for b in range(8))
    owner = owners.most_common(1)[0][0]
    _, slots = cluster.move_all_slots(owner)
    codes = wait_all(procs, timeout=300)
    for code, log in zip(codes, logs):
        text = read_log(log)
        assert code == 0 and "closed (finished)" in text, text[-3000:]
        assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    back = _served_pages(graph, served, urls)
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    want = reachable(graph, served.seed)
    assert sorted(pages) == sorted(want)
    client = connect(cluster.url, "", retry=RedisRetry(30))
    scores = {k: v[1] for k, v in BucketedFrontier(client, cid, OrderingParams(ordering="blc"), 8).scores().items()}
    assert not in_degree_mismatches(scores, graph, back, want)[0]
    print(f"reshard of {slots} slots ({owners[owner]} of 8 buckets) during a bucketed crawl; {len(pages)} fetches")
    client.close()


def fetch_one_per_bucket(many) -> None:
    """Node 1 fetched in bucket 0, node 2 in bucket 1 (enqueued, popped, recorded)."""
    for n, b in ((1, 0), (2, 1)):
        many.enqueue(nid(n), 0, b"p", False, bucket=b)
        _, first = many.pop(1, 600)
        many.record_page(nid(n), 0, [], lease=first[0][0], bucket=b)


def test_forced_tokens_of_two_buckets_never_collide(redis_client):
    """dont_filter requests of hosts in two buckets are queued under forced-queue tokens;
    each bucket numbers its own, so a pop over both used to return two `F…01`, and the
    record of one settled the other's lease. Tokens are unique across buckets."""
    cid = f"t-{uuid.uuid4().hex[:10]}"
    many = BucketedFrontier(redis_client, cid, OrderingParams(ordering="bf"), 2)
    try:
        many.open()
        fetch_one_per_bucket(many)  # a dont_filter request of a known URL is a token
        many.enqueue(nid(1), 0, b"pa", True, bucket=0)
        many.enqueue(nid(2), 0, b"pb", True, bucket=1)
        _, items = many.pop(8, 600)
        tokens = [m for m, _ in items]
        assert sorted(p for _, p in items) == [b"pa", b"pb"]
        assert len(set(tokens)) == 2, tokens
        assert all(len(m) == 9 and m[:1] == b"F" for m in tokens)
        # the record of B (bucket 1) settles B's lease, not A's
        b_token = tokens[[p for _, p in items].index(b"pb")]
        many.record_page(nid(2), 0, [], lease=b_token, bucket=1)
        assert redis_client.zcard(many.stores[0].keys["lease"]) == 1
        assert redis_client.zcard(many.stores[1].keys["lease"]) == 0
        # opened again (a second process, a resume): the ranges stay where they are
        many.open()
        many.enqueue(nid(1), 0, b"pc", True, bucket=0)
        _, more = many.pop(8, 600)
        assert [p for _, p in more] == [b"pc"] and more[0][0] not in tokens
    finally:
        many.drop()


def test_one_relay_call_applies_a_bounded_amount_of_work(redis_client, monkeypatch):
    """A relay applies at most RELAY_BYTES of outbox entries per target in one script call
    (beyond the first of each source); the rest waits in the outbox for the next relay,
    and nothing is lost."""
    from ipr_crawl.store import relay as relay_mod

    cid = f"t-{uuid.uuid4().hex[:10]}"
    many = BucketedFrontier(redis_client, cid, OrderingParams(ordering="blc"), 2)
    try:
        many.open()
        for page in range(1, 5):  # four pages of bucket 0, each linking to two of bucket 1
            links = [Link(nid(100 + 2 * page), 0, b"x", 1), Link(nid(101 + 2 * page), 0, b"y", 1)]
            many.record_page(nid(page), 0, links, bucket=0)  # no pop between: no relay yet
        box = many._outbox(0, 1)
        assert redis_client.xlen(box) == 4
        entry = len(redis_client.xrange(box, count=1)[0][1][b"e"])
        monkeypatch.setattr(relay_mod, "RELAY_BYTES", 2 * entry)  # two entries per call
        assert many.relay() == 2 and redis_client.xlen(box) == 2  # the other two wait
        assert many.relay() == 2 and redis_client.xlen(box) == 0
        assert all(many.stores[1].node_score(nid(n)) == 1 for n in range(102, 110))
    finally:
        many.drop()


def test_a_failed_record_hands_its_lease_back_to_its_own_bucket(redis_client, monkeypatch):
    """A record call that fails (a script error; "TTL exhausted" during a slot migration)
    keeps the lease's bucket known, so the scheduler's hand-back (ack ``release``)
    settles the lease where it was taken. The bucket used to be forgotten before the
    call: a forced-queue token, whose node the release cannot name, was then released
    in bucket 0 and stayed in flight in its own until IPR_LEASE_SECS (a cluster fault
    schedule ended with "1 in flight" and never closed)."""
    import redis

    cid = f"t-{uuid.uuid4().hex[:10]}"
    many = BucketedFrontier(redis_client, cid, OrderingParams(ordering="bf"), 2)
    try:
        many.open()
        many.enqueue(nid(2), 0, b"p", False, bucket=1)
        _, first = many.pop(1, 600)
        many.record_page(nid(2), 0, [], lease=first[0][0], bucket=1)
        many.enqueue(nid(2), 0, b"again", True, bucket=1)  # a dont_filter request: a token
        _, items = many.pop(1, 600)
        token = items[0][0]
        assert token[:1] == b"F"

        def fails(*args, **kwargs):
            raise redis.ResponseError("a script error")

        monkeypatch.setattr(many.stores[1], "record_page", fails)
        with pytest.raises(redis.ResponseError):
            many.record_page(nid(2), 0, [], lease=token, bucket=1)
        monkeypatch.undo()
        assert many.ack("release", [(token, b"")]) == 1  # as Leases.record_failed hands it back
        assert redis_client.zcard(many.stores[1].keys["lease"]) == 0
        assert redis_client.zcard(many.stores[1].keys["forced"]) == 1
        _, again = many.pop(1, 600)
        assert [p for _, p in again] == [b"again"]
    finally:
        many.drop()


@pytest.fixture(params=["one server", pytest.param("cluster", marks=pytest.mark.slow)])
def store_client(request, redis_client, tmp_path):
    """A client of one real redis-server, or of a real 3-master Redis Cluster."""
    if request.param == "one server":
        yield redis_client
        return
    from ipr_crawl.store.connection import connect
    from ipr_crawl.store.retry import RedisRetry

    cluster = request.getfixturevalue("cluster")
    client = connect(cluster.url, "", retry=RedisRetry(30))
    yield client
    client.close()


def test_forced_tokens_with_priorities_stay_apart_and_ahead_of_the_frontier(store_client):
    """A forced token's key is (2048 - priority) * 2**40 + seq; each bucket's seq used to
    start at (b + 1) * 2**40, which landed in the priority bits: a retry at priority -1 in
    bucket 0 and a dont_filter request at priority 0 in bucket 1 got the same token, and
    every bucket-mode token sorted as "after the frontier" (priority < 0). Now the bucket
    is a field below the priority: tokens differ, and a priority-0 retry is taken before
    the rest of a non-empty frontier in every bucket."""
    cid = f"t-{uuid.uuid4().hex[:10]}"
    many = BucketedFrontier(store_client, cid, OrderingParams(ordering="bf"), 2)
    try:
        many.open()
        fetch_one_per_bucket(many)  # a dont_filter request of a known URL is a token
        for n in range(10, 20):  # a frontier in both buckets
            many.enqueue(nid(n), 0, b"frontier", False, bucket=n % 2)
        many.enqueue(nid(1), 0, b"retry-1", True, bucket=0, priority=-1)
        many.enqueue(nid(2), 0, b"again-0", True, bucket=1, priority=0)
        tokens = {}
        for b in (0, 1):
            store = many.stores[b]
            for token, key in store_client.zrange(store.keys["forced"], 0, -1, withscores=True):
                tokens[token] = (b, key)
        assert len(tokens) == 2, tokens
        prio0 = [key for b, key in tokens.values() if b == 1][0]
        assert prio0 < 2049 * 2**40  # served ahead of the frontier
        _, items = many.pop(4, 600)
        payloads = [p for _, p in items]
        assert b"again-0" in payloads and b"retry-1" not in payloads, payloads
    finally:
        many.drop()


def test_a_bucket_counter_of_the_layout_before_moves_below_the_priority_bits(redis_client):
    """A crawl opened before kept bucket b's forced_seq from (b + 1) * 2**40; opening it
    now moves the count into bits 32-39 (a token of that count was never issued in the
    new range, so none collides with one still queued)."""
    cid = f"t-{uuid.uuid4().hex[:10]}"
    many = BucketedFrontier(redis_client, cid, OrderingParams(ordering="bf"), 2)
    try:
        many.open()
        meta = many.stores[1].keys["meta"]
        redis_client.hset(meta, "forced_seq", (2 << 40) + 7)  # as the layout before left it
        many.open()
        assert int(redis_client.hget(meta, "forced_seq")) == (2 << 32) + 7
        many.open()  # a second opening leaves it
        assert int(redis_client.hget(meta, "forced_seq")) == (2 << 32) + 7
    finally:
        many.drop()


def test_relayed_links_leave_their_outbox_only_once_the_targets_replica_has_them(cluster, monkeypatch):
    """A relay applies a page's links on another bucket's master, then trims them from
    the source's outbox. The trim used to follow whatever the WAIT said: with the
    target's replica behind (here its link down) and the target's master then killed,
    the promoted replica had neither the links nor the entry's high-water mark, and the
    outbox had nothing left to send again: the links were gone (the Cluster fault
    checker's seed 20261804 lost 17 pages so, after two master kills). Now the entry
    stays until the target's replica confirms it, and is applied again after the
    failover."""
    import time

    from ipr_crawl.store import connect, crawl_keys
    from ipr_crawl.store import relay as relay_mod
    from ipr_crawl.store.retry import RedisRetry

    monkeypatch.setattr(relay_mod, "RELAY_HOLD_SECS", 0.0)
    cid = next(c for c in (f"rl{i}" for i in range(100))  # buckets 0 and 1 on two masters
               if cluster.master_of(crawl_keys(f"{c}:0")["meta"]) != cluster.master_of(crawl_keys(f"{c}:1")["meta"]))
    client = connect(cluster.url, "", retry=RedisRetry(40))
    many = BucketedFrontier(client, cid, OrderingParams(ordering="blc"), 2)
    many.open()
    hwm = many.relay_keys(1)[-1]
    master = cluster.master_of(hwm)
    with cluster.node(master) as c:
        replica = int(c.info("replication")["slave0"]["port"])
    assert relay_mod.replicated(client, hwm, 1, 10000)  # attached and in step
    with cluster.node(master) as c:  # a cluster just made: gossip names the replica in a moment
        deadline = time.monotonic() + 20
        while relay_mod._cluster_replicas(c) != 1:
            assert time.monotonic() < deadline, "the master's view never named its replica"
            time.sleep(0.05)
    many.enqueue(nid(1), 0, b"p1", False, bucket=0)
    _, items = many.pop(1, 600)
    many.record_page(nid(1), 0, [Link(nid(2), 0, b"p2", 1)], lease=items[0][0], bucket=0)
    box = many._outbox(0, 1)
    with cluster.node(replica) as c:  # the target's replica loses its link: it cannot log in again
        c.config_set("masterauth", "not-the-password")
        c.client_kill_filter(_type="master")
    with cluster.node(master) as c:
        deadline = time.monotonic() + 20
        while c.execute_command("ROLE")[2]:
            assert time.monotonic() < deadline, "the replica stayed attached"
            time.sleep(0.05)
    assert many.relay() == 1 and many.stores[1].node_score(nid(2)) == 1  # applied on the master
    assert many.relay_held == 1 and client.xlen(box) == 1  # not on the replica: kept
    cluster.kill(master)
    deadline = time.monotonic() + 60
    while cluster.master_of(hwm) != replica:
        assert time.monotonic() < deadline, "the replica was not promoted"
        time.sleep(0.2)
    assert many.stores[1].node_score(nid(2)) is None  # the promoted replica never had it
    assert many.relay() == 1  # sent again: the failover rolled the high-water mark back
    assert many.stores[1].node_score(nid(2)) == 1 and client.xlen(box) == 0
    assert many.pending() == 1
    client.close()
