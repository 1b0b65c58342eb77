"""Reruns as Scrapy users expect (issue 42): a crawl that finished, run again, starts
afresh with the finished crawl as its prior (kept as ``<id>~<n>``); an interrupted
one resumes; ``SCHEDULER_PERSIST=True`` keeps a finished crawl; ``IPR_KEEP_CRAWLS``
bounds the archives. Real ``scrapy crawl`` runs on a served graph, and the archive
functions on the session's Redis."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import networkx as nx
import pytest
from conftest import REPO, TEST_DATA

from ipr_crawl.evaluation.graphio import page_paths, reachable, read_graph
from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.reference import simulate_crawl
from ipr_crawl.ordering.urls import canonical_url, node_id
from ipr_crawl.store import FrontierStore, Link
from ipr_crawl.store.archive import (
    ArchiveBusy,
    archive,
    archives,
    claim,
    finished_info,
    mark_finished,
    prune,
    release,
    rerun_holder,
    wait_for_rerun,
)
from ipr_crawl.store.buckets import BucketedFrontier

HARVARD = TEST_DATA / "harvard500.tsv.gz"
SEQUENTIAL = {"CONCURRENT_REQUESTS": 1, "IPR_POP_BATCH_SIZE": 1, "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 0}
CRAWL = "ipr_crawl.graph"  # the default crawl id of the repository's graph spider


def status(data) -> dict:
    proc = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "status", "--data-dir", str(data), "--json",
                           "--crawl-id", CRAWL], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_a_finished_crawl_run_again_starts_afresh_from_its_prior(graph_server, crawl, tmp_path):
    """Run to the end, run again: the second run fetches every page again, in the
    order the reference rule gives with the first crawl's PageRank as the prior (its
    first fetches are the prior's top pages); the first crawl is kept as ``~1``. A
    third run keeps only the newest finished crawl (IPR_KEEP_CRAWLS=1), a fourth with
    IPR_KEEP_CRAWLS=2 two; IPR_KEEP_CRAWLS=0 keeps none and starts without a prior."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    canon = {n: canonical_url(served.base + p) for n, p in page_paths(graph).items()}
    back = {c: n for n, c in canon.items()}
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data})
    assert first.returncode == 0, first.stderr[-3000:]
    assert "(new)" in first.log and f"crawl {CRAWL!r} finished: run again" in first.log
    assert "'ipr/finished': 1" in first.log
    fetched1 = [back[canonical_url(u)] for u in first.fetched]
    assert set(fetched1) == set(reachable(graph, served.seed))

    second = crawl(served.seed_url, tmp_path / "run2.log", {**SEQUENTIAL, "IPR_DATA_DIR": data})
    assert second.returncode == 0, second.stderr[-3000:]
    line = next(x for x in second.log.splitlines() if "finished before" in x)
    assert (f"crawl {CRAWL!r} finished before (" in line and f"{len(fetched1)} pages fetched): started afresh, "
            f"its graph ({len(fetched1)} URLs) is the prior" in line and f"kept as '{CRAWL}~1'" in line), line
    assert "(new): 0 known URLs" in second.log and "'ipr/rerun': 'afresh'" in second.log
    fetched2 = [back[canonical_url(u)] for u in second.fetched]
    assert len(fetched2) == len(set(fetched2)) and set(fetched2) == set(fetched1)
    # the order is the reference rule's with the first crawl's converged PageRank as the prior
    g = nx.DiGraph()
    g.add_nodes_from(fetched1)
    g.add_edges_from((u, v) for u in fetched1 for v in graph.out.get(u, []))
    pr = nx.pagerank(g, alpha=0.85)
    nid = {n: node_id(c) for n, c in canon.items()}
    prior = {nid[n]: v * len(pr) for n, v in pr.items()}
    out_ids = {nid[n]: [nid[t] for t in targets] for n, targets in graph.out.items()}
    expected = simulate_crawl(out_ids, [nid[served.seed]], "push", limit=len(fetched2), prior=prior)
    got = [nid[n] for n in fetched2]
    k = 100  # float32 priors: later near-ties may break the other way
    assert got[:k] == expected[:k]
    # and it fetches more PageRank early than the first run did
    assert sum(pr[n] for n in fetched2[:50]) > sum(pr[n] for n in fetched1[:50])
    st = status(data)
    assert st["rerun_of"] == f"{CRAWL}~1" and st["finished"]
    assert [a["crawl_id"] for a in st["archives"]] == [f"{CRAWL}~1"] and st["archives"][0]["fetched"] == len(fetched1)

    third = crawl(served.seed_url, tmp_path / "run3.log", {"IPR_DATA_DIR": data, "INTERRUPT_AFTER_PAGES": 5})
    assert f"kept as '{CRAWL}~2'; older crawls deleted (IPR_KEEP_CRAWLS=1): {CRAWL}~1" in third.log
    assert [a["crawl_id"] for a in status(data)["archives"]] == [f"{CRAWL}~2"]
    # interrupted (as by Ctrl-C): not finished, so the next run resumes it (and finishes it)
    fourth = crawl(served.seed_url, tmp_path / "run4.log", {"IPR_DATA_DIR": data, "IPR_KEEP_CRAWLS": 2})
    assert "finished before" not in fourth.log and "(resumed)" in fourth.log
    both = [back[canonical_url(u)] for u in third.fetched + fourth.fetched]
    assert not [n for n, c in collections.Counter(both).items() if c > 1]
    assert set(both) == set(fetched1)
    fifth = crawl(served.seed_url, tmp_path / "run5.log", {"IPR_DATA_DIR": data, "IPR_KEEP_CRAWLS": 2})
    assert f"kept as '{CRAWL}~3'" in fifth.log and "older crawls deleted" not in fifth.log
    assert [a["crawl_id"] for a in status(data)["archives"]] == [f"{CRAWL}~2", f"{CRAWL}~3"]
    sixth = crawl(served.seed_url, tmp_path / "run6.log", {"IPR_DATA_DIR": data, "IPR_KEEP_CRAWLS": 0})
    assert "started afresh, no prior; the finished crawl is deleted (IPR_KEEP_CRAWLS=0)" in sixth.log
    assert f"older crawls deleted (IPR_KEEP_CRAWLS=0): {CRAWL}~2, {CRAWL}~3" in sixth.log
    assert status(data)["archives"] == [] and "'ipr/prior/urls'" not in sixth.log


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_scheduler_persist_keeps_a_finished_crawl_and_reset_wipes(graph_server, crawl, tmp_path):
    """SCHEDULER_PERSIST=True: a finished crawl stays closed (the old behaviour: only
    the start request is fetched again) and is no longer marked finished; IPR_RESET
    starts afresh without a prior and keeps no archive."""
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data})
    assert first.returncode == 0 and len(first.fetched) > 100, first.stderr[-3000:]
    kept = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data, "SCHEDULER_PERSIST": True})
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "kept finished (SCHEDULER_PERSIST)" in kept.log and "(resumed)" in kept.log
    assert len(kept.fetched) <= 1  # the start request (dont_filter) only
    assert status(data)["archives"] == []
    reset = crawl(served.seed_url, tmp_path / "run3.log", {"IPR_DATA_DIR": data, "IPR_RESET": True})
    assert "reset (IPR_RESET)" in reset.log and "finished before" not in reset.log
    assert len(reset.fetched) == len(first.fetched) and "'ipr/prior/urls'" not in reset.log
    assert status(data)["archives"] == []


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_revisits_on_keep_a_finished_crawl(graph_server, crawl, tmp_path):
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data})
    assert first.returncode == 0, first.stderr[-3000:]
    again = crawl(served.seed_url, tmp_path / "run2.log",
                  {"IPR_DATA_DIR": data, "IPR_REVISIT_ENABLED": True, "CLOSESPIDER_TIMEOUT": 3})
    assert "kept, revisits on (IPR_REVISIT_ENABLED): this run revisits what is due" in again.log, again.log[-3000:]
    assert "(resumed)" in again.log and status(data)["archives"] == []


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_a_bucketed_crawl_run_again_starts_afresh_without_a_prior(graph_server, crawl, tmp_path):
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    runs = [crawl(served.seed_url, tmp_path / f"run{i}.log", {"IPR_DATA_DIR": data, "IPR_CLUSTER_BUCKETS": 2})
            for i in (1, 2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    n = len(runs[0].fetched)
    assert n > 100 and sorted(runs[1].fetched) == sorted(runs[0].fetched)
    assert (f", {n} pages fetched): started afresh, no prior (IPR_CLUSTER_BUCKETS > 1 takes none); the finished "
            f"crawl is kept as '{CRAWL}~1'") in runs[1].log
    st = status(data)
    assert [(a["crawl_id"], a["fetched"]) for a in st["archives"]] == [(f"{CRAWL}~1", n)]


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_a_rerun_that_fails_to_start_lets_the_next_start_go_at_once(graph_server, crawl, tmp_path):
    """A finished crawl run again with a bad IPR_PRIOR_CRAWL fails in one line; the
    run after it does not wait for the failed run's claim to expire."""
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data})
    assert first.returncode == 0, first.stderr[-3000:]
    bad = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data, "IPR_PRIOR_CRAWL": "nope"}, timeout=120)
    assert bad.returncode != 0 and "IPR_PRIOR_CRAWL='nope': no such crawl" in bad.log + bad.stderr
    again = crawl(served.seed_url, tmp_path / "run3.log", {"IPR_DATA_DIR": data}, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "waiting for it" not in again.log and "(resumed)" in again.log
    assert sorted(again.fetched) == sorted(first.fetched)


# -- the archive functions, on the session's Redis ---------------------------------------------
def _small(client, cid: str) -> FrontierStore:
    store = FrontierStore(client, cid, "push")
    store.open()
    store.enqueue(b"\0" * 7 + b"\1", 0, b"", False)
    store.record_page(b"\0" * 7 + b"\1", 0, [Link(b"\0" * 7 + b"\2", 0, b"")])
    return store


def test_archive_moves_every_key_and_prune_keeps_the_newest(redis_client, crawl_id):
    store = _small(redis_client, crawl_id)
    names = sorted(k.decode()[len(f"ipr:{{{crawl_id}}}:"):] for k in redis_client.scan_iter(f"ipr:{{{crawl_id}}}:*"))
    assert finished_info(redis_client, crawl_id) is None
    mark_finished(redis_client, crawl_id, "finished", 1, 0)
    assert finished_info(redis_client, crawl_id)["fetched"] == 1
    assert archive(redis_client, crawl_id) == f"{crawl_id}~1"
    assert not list(redis_client.scan_iter(f"ipr:{{{crawl_id}}}:*"))
    moved = sorted(k.decode()[len(f"ipr:{{{crawl_id}~1}}:"):] for k in redis_client.scan_iter(f"ipr:{{{crawl_id}~1}}:*"))
    assert moved == names
    assert redis_client.hget(f"ipr:{{{crawl_id}~1}}:meta", "archived_from") == crawl_id.encode()
    assert redis_client.hget(f"ipr:{{{crawl_id}~1}}:meta", "archiving") is None
    for n in (2, 3):
        _small(redis_client, crawl_id)
        assert archive(redis_client, crawl_id, cluster=n == 3) == f"{crawl_id}~{n}"  # DUMP/RESTORE too
    assert [a["crawl_id"] for a in archives(redis_client, crawl_id)] == [f"{crawl_id}~{n}" for n in (1, 2, 3)]
    assert FrontierStore(redis_client, f"{crawl_id}~3", "push").counts() == FrontierStore(redis_client, f"{crawl_id}~1", "push").counts()
    assert store.counts()["known"] == 0
    assert [c for c, _ in prune(redis_client, crawl_id, 2, spare="")] == [f"{crawl_id}~1"]
    assert [c for c, _ in prune(redis_client, crawl_id, 0, spare=f"{crawl_id}~2")] == [f"{crawl_id}~3"]
    assert [a["crawl_id"] for a in archives(redis_client, crawl_id)] == [f"{crawl_id}~2"]


def test_archive_of_a_bucketed_crawl_keeps_one_hash_tag_per_bucket(redis_client, crawl_id):
    store = BucketedFrontier(redis_client, crawl_id, OrderingParams(ordering="push"), 2)
    store.open()
    archive(redis_client, crawl_id)
    keys = {k.decode() for k in redis_client.scan_iter(f"ipr:{{{crawl_id}*")}
    assert keys == {f"ipr:{{{crawl_id}~1}}:meta", f"ipr:{{{crawl_id}~1:0}}:meta", f"ipr:{{{crawl_id}~1:1}}:meta"}
    assert [a["crawl_id"] for a in archives(redis_client, crawl_id)] == [f"{crawl_id}~1"]
    prune(redis_client, crawl_id, 0)
    assert not list(redis_client.scan_iter(f"ipr:{{{crawl_id}*"))


def test_one_process_starts_a_finished_crawl_afresh_the_others_wait(redis_client, crawl_id):
    _small(redis_client, crawl_id)
    mark_finished(redis_client, crawl_id, "finished")
    assert rerun_holder(redis_client, crawl_id) is None
    assert claim(redis_client, crawl_id, "first")
    assert not claim(redis_client, crawl_id, "second")  # the others wait
    assert rerun_holder(redis_client, crawl_id) == "first"
    assert 0 < redis_client.pttl(f"ipr:{{{crawl_id}}}:rerun") <= 120_000  # a dead holder's claim expires
    with pytest.raises(ArchiveBusy, match="another process \\(first\\) is starting it afresh"):
        wait_for_rerun(redis_client, crawl_id, timeout=0.0)
    assert archive(redis_client, crawl_id) == f"{crawl_id}~1"
    assert rerun_holder(redis_client, crawl_id) == "first"  # the claim is not archived with the crawl
    assert not redis_client.exists(f"ipr:{{{crawl_id}~1}}:rerun")
    release(redis_client, crawl_id, "second")  # not its claim
    assert rerun_holder(redis_client, crawl_id) == "first"
    release(redis_client, crawl_id, "first")
    wait_for_rerun(redis_client, crawl_id, timeout=0.0)


def test_archive_prior_and_prune_on_a_redis_cluster(cluster):
    """On a Redis Cluster the crawl and its archive lie in different slots: the keys are
    moved by DUMP/RESTORE, the archive is the new crawl's prior, and pruning deletes it."""
    from ipr_crawl.store import connect
    from ipr_crawl.store.connection import is_cluster
    from ipr_crawl.store.prior import install_prior
    from ipr_crawl.store.retry import RedisRetry

    client = connect(f"redis://127.0.0.1:{cluster.ports[0]}/0", "", retry=RedisRetry(30))
    try:
        assert is_cluster(client)
        old = _small(client, "cr")
        known = old.counts()["known"]
        mark_finished(client, "cr", "finished")
        assert archive(client, "cr", cluster=True) == "cr~1"
        assert not list(client.scan_iter(match="ipr:{cr}:*"))
        assert FrontierStore(client, "cr~1", "push").counts()["known"] == known
        new = FrontierStore(client, "cr", "push")
        assert new.open() is False
        info = install_prior(client, "cr", "cr~1", 1.0)
        assert info["installed"] and info["urls"] == known
        assert [c for c, n in prune(client, "cr", 0)] == ["cr~1"]
        assert archives(client, "cr") == [] and not list(client.scan_iter(match="ipr:{cr~1}:*"))
        assert client.hget(new.keys["meta"], "prior_buckets") is not None  # the prior was copied: it stays
        new.drop()
    finally:
        client.close()


@pytest.mark.slow  # a long real-crawl test: CI runs it (make suite ARGS="-m 'slow or data'")
def test_processes_started_together_on_a_finished_crawl_start_it_afresh_once(graph_server, tmp_path):
    """Three processes of a finished crawl start at once (a shared crawl's next day):
    one archives it and starts it afresh, the others join that new crawl; together
    they fetch every page once more, and one archive is kept."""
    from procs import RedisServer, fetched, read_log, start_crawl, wait_all

    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph).items()}
    with RedisServer(tmp_path / "redis") as server:
        settings = {"IPR_REDIS_URL": server.url, "IPR_CRAWL_ID": "daily"}
        first = tmp_path / "first.log"
        assert wait_all([start_crawl(served.seed_url, first, settings)], timeout=120) == [0], read_log(first)[-3000:]
        logs = [tmp_path / f"p{i}.log" for i in range(3)]
        procs = [start_crawl(served.seed_url, log, {**settings, "DOWNLOAD_DELAY": 0.02}) for log in logs]
        codes = wait_all(procs, timeout=300)
        texts = [read_log(log) for log in logs]
        for code, text in zip(codes, texts):
            assert code == 0 and "Traceback" not in text, text[-3000:]
        assert sum("started afresh" in t for t in texts) == 1, [t.count("finished before") for t in texts]
        assert [a["crawl_id"] for a in archives(server.client(), "daily")] == ["daily~1"]
    pages = [back[canonical_url(u)] for log in logs for u in fetched(log)]
    twice = [n for n, c in collections.Counter(pages).items() if c > 1 and n != served.seed]
    assert not twice  # (each process fetches the start URL, dont_filter)
    assert set(pages) == set(reachable(graph, served.seed))


@pytest.mark.parametrize("limit", [{"CLOSESPIDER_PAGECOUNT": 40}, {"CLOSESPIDER_TIMEOUT": 1, "DOWNLOAD_DELAY": 0.05}])
def test_a_closespider_close_is_an_end(graph_server, crawl, tmp_path, limit):
    """A deliberate close (``CLOSESPIDER_*``: a daily cron job's ``CLOSESPIDER_TIMEOUT``) ends
    the crawl as ``finished`` does: the next run starts afresh with it as its prior and
    fetches the whole site again; the close reason stays Scrapy's. Only an interruption
    resumes (issue 50, item 5: before, the second run fetched only the pages left)."""
    graph = read_graph(HARVARD)
    served = graph_server(HARVARD)
    data = tmp_path / "data"
    reason = next(iter(limit)).lower()
    first = crawl(served.seed_url, tmp_path / "run1.log", {"IPR_DATA_DIR": data, **limit})
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"Spider closed ({reason})" in first.log and "'ipr/finished': 1" in first.log, first.log[-3000:]
    assert f"ended by {reason} with " in first.log
    # the crawl's sizes at close under their own names, beside this process's counters
    assert "'ipr/crawl/frontier': " in first.log and "'ipr/frontier/new': " in first.log
    assert 0 < len(first.fetched) < len(graph.nodes) // 2
    second = crawl(served.seed_url, tmp_path / "run2.log", {"IPR_DATA_DIR": data})
    assert second.returncode == 0, second.stderr[-3000:]
    assert "started afresh" in second.log and "(resumed)" not in second.log, second.log[-3000:]
    back = {canonical_url(served.base + p): n for n, p in page_paths(graph).items()}
    assert {back[canonical_url(u)] for u in second.fetched} == set(reachable(graph, served.seed))
    assert status(data)["archives"][0]["crawl_id"] == f"{CRAWL}~1"


def test_an_open_that_fails_after_taking_the_rerun_key_lets_it_go(redis_client, crawl_id):
    """A finished crawl started afresh: this process takes the ``rerun`` key and archives
    the crawl, and then its open fails (here the store's open raises what a pipe closed
    under it raises). The key is released at once: the next start does not wait for it
    to expire (``STALE_CLAIM_SECS``). Scrapy's own test_crawl.py caught this: one test's
    crawl failed mid-open and the next test waited past its 60 s timeout."""
    from types import SimpleNamespace

    from scrapy.settings import Settings

    from ipr_crawl.config import FrontierConfig
    from ipr_crawl.scheduler.bootstrap import Bootstrap

    _small(redis_client, crawl_id)
    mark_finished(redis_client, crawl_id, "finished", 1, 0)
    settings = Settings({"IPR_CRAWL_ID": crawl_id, "IPR_KEEP_CRAWLS": 0})
    crawler = SimpleNamespace(settings=settings, spider=None)  # what Bootstrap reads of its crawler
    boot = Bootstrap(crawler, FrontierConfig.from_settings(settings, "s"),
                     False, "holder-a", lambda key, value: None)
    store = FrontierStore(redis_client, crawl_id, "push")

    def broken_open() -> bool:
        assert rerun_holder(redis_client, crawl_id) == "holder-a"  # taken, the crawl archived
        raise RuntimeError("the Redis pipe is broken or closed")

    store.open = broken_open
    with pytest.raises(RuntimeError, match="pipe is broken"):
        boot.open_crawl(redis_client, store, "test")
    assert rerun_holder(redis_client, crawl_id) is None
