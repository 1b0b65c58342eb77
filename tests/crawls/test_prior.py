"""Priors for recrawls (IPR_PRIOR_CRAWL): an earlier crawl's converged PageRank,
stored compactly beside it, raises the priority of the URLs it knows in a new crawl.
Real Redis, real `scrapy crawl` runs on the served EmacsWiki graph (shipped)."""

from __future__ import annotations

import re
import uuid

import networkx as nx
import pytest
from conftest import DATA, kill_embedded_redis

from ipr_crawl.evaluation.graphio import page_paths, read_graph, read_urls, rewired
from ipr_crawl.ordering.reference import simulate_crawl
from ipr_crawl.ordering.urls import canonical_url, node_id
from ipr_crawl.store import FrontierStore, Link
from ipr_crawl.store.inspect import open_crawl
from ipr_crawl.store.prior import PriorError, bucket_of, compute_pagerank, install_prior, read_scores

EMACS = DATA / "emacswiki.tsv.gz"
EMACS_URLS = DATA / "emacswiki.urls.tsv.gz"
SEQUENTIAL = {"CONCURRENT_REQUESTS": 1, "IPR_POP_BATCH_SIZE": 1, "SCRAPER_SLOT_MAX_ACTIVE_SIZE": 0}


def nid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def small_crawl(client, crawl_id: str, out: dict[int, list[int]], fetch: list[int]) -> FrontierStore:
    store = FrontierStore(client, crawl_id, "push")
    store.open()
    store.enqueue(nid(fetch[0]), 0, b"", False)
    for n in fetch:
        store.record_page(nid(n), 0, [Link(nid(t), 0, b"") for t in out.get(n, [])])
    return store


def test_stored_pagerank_is_networkx_pagerank_of_the_collected_graph(redis_client):
    """Every known URL (fetched or not) gets networkx's PageRank of the collected graph
    x the URL count, float32, in small listpack-encoded buckets."""
    out = {n: [(n * 7 + k) % 300 for k in (1, 2, 5, 11)] for n in range(300)}
    cid = f"prior-{uuid.uuid4().hex[:8]}"
    store = small_crawl(redis_client, cid, out, list(range(0, 300, 2)))  # half of the pages fetched
    try:
        summary = compute_pagerank(redis_client, cid)
        assert summary.urls == 300 and summary.fetched == 150 and summary.buckets == 8
        g = nx.DiGraph()
        g.add_nodes_from(range(300))
        g.add_edges_from((n, t) for n in range(0, 300, 2) for t in out[n])
        want = nx.pagerank(g, alpha=0.85)
        got = read_scores(redis_client, f"ipr:{{{cid}}}:pagerank:", summary.buckets)
        assert len(got) == 300
        for n, v in want.items():
            assert got[nid(n)] == pytest.approx(v * 300, rel=1e-5)
            assert bucket_of(nid(n), 8) == n % 8
        for b in range(summary.buckets):
            assert redis_client.object("encoding", f"ipr:{{{cid}}}:pagerank:{b}") in (b"listpack", b"ziplist")  # the compact encoding (ziplist before Redis 7)
        # recomputed after more fetches: the buckets are replaced, none left over
        store.record_page(nid(1), 0, [Link(nid(0), 0, b"")])
        again = compute_pagerank(redis_client, cid)
        assert again.fetched == 151
        assert read_scores(redis_client, f"ipr:{{{cid}}}:pagerank:", again.buckets)[nid(0)] > got[nid(0)]
    finally:
        store.drop()


#: the earlier crawl of the prior tests: 3 is the most linked-to of its sinks
OLD_GRAPH = {0: [1, 2], 1: [2], 2: [0, 3]}


def old_and_new(redis_client) -> tuple[str, str, FrontierStore, FrontierStore]:
    """An earlier crawl of :data:`OLD_GRAPH` (every page fetched but 3) and a new, empty
    one: their ids and stores."""
    old, new = f"old-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    a = small_crawl(redis_client, old, OLD_GRAPH, [0, 1, 2])
    b = FrontierStore(redis_client, new, "push")
    b.open()
    return old, new, a, b


def test_install_prior_errors_and_resume(redis_client):
    old, new, a, b = old_and_new(redis_client)
    try:
        with pytest.raises(PriorError, match=r"no such crawl.*crawls there: .*" + re.escape(repr(old))):
            install_prior(redis_client, new, "nope", 1.0)
        with pytest.raises(PriorError, match="this crawl itself"):
            install_prior(redis_client, new, new, 1.0)
        info = install_prior(redis_client, new, old, 2.0)
        assert info["installed"] and info["computed"] and info["urls"] == 4
        # a resumed crawl keeps its prior; only the weight follows the setting
        info = install_prior(redis_client, new, old, 3.0)
        assert not info["installed"] and redis_client.hget(b.keys["meta"], "prior_weight") == b"3.0"
        with pytest.raises(PriorError, match="was started with IPR_PRIOR_CRAWL"):
            install_prior(redis_client, new, "other", 1.0)
        # the new crawl's new URLs carry the prior: 3 is the most linked-to of the old graph's sinks
        assert b.refresh_prior() == info["buckets"]  # as the scheduler does after installing it
        b.enqueue(nid(3), 0, b"", False)
        b.enqueue(nid(9), 0, b"", False)  # unknown to the prior
        rec = b.records()
        assert rec[nid(3)].a == pytest.approx(3.0 * read_scores(redis_client, f"ipr:{{{old}}}:pagerank:", 1)[nid(3)])
        assert rec[nid(9)].a == 0
        _, items = b.pop(1, 60)
        assert items[0][0][8:] == nid(3)
    finally:
        a.drop()
        b.drop()


def test_the_report_draws_the_share_of_the_priors_mass_fetched(redis_client):
    """``crawl_curves`` (``ipr-crawl report``, the dashboard) gives, with a prior, the
    share of the prior's mass held by the pages fetched by each sample; none without."""
    from ipr_crawl.evaluation.report import crawl_curves

    old, new, a, b = old_and_new(redis_client)
    try:
        info = install_prior(redis_client, new, old, 1.0)
        b.refresh_prior()
        prior = read_scores(redis_client, f"ipr:{{{old}}}:pagerank:", info["buckets"])
        b.enqueue(nid(3), 0, b"", False)
        b.sample(0)
        for n in (3, 2):
            b.record_page(nid(n), 0, [Link(nid(t), 0, b"") for t in OLD_GRAPH.get(n, [])])
            b.sample(0)
        rows = crawl_curves(b)["timeline"]
        total = sum(prior.values())
        assert [r["prior_share"] for r in rows] == pytest.approx(
            [0.0, prior[nid(3)] / total, (prior[nid(3)] + prior[nid(2)]) / total])
        a.sample(0)  # the earlier crawl itself has no prior
        assert "prior_share" not in crawl_curves(a)["timeline"][-1]
    finally:
        a.drop()
        b.drop()


def test_rewired_graph_keeps_out_degrees_and_changes_the_share_asked():
    g = read_graph(EMACS)
    r = rewired(g, 0.2, seed=3)
    assert r.edges == g.edges
    assert {n: len(v) for n, v in r.out.items()} == {n: len(v) for n, v in g.out.items() if v}
    before = {(u, v) for u, lst in g.out.items() for v in lst}
    after = {(u, v) for u, lst in r.out.items() for v in lst}
    assert len(before - after) == round(0.2 * g.edges)
    assert rewired(g, 0.2, seed=3).out == r.out and rewired(g, 0.0).out == {u: v for u, v in g.out.items() if v}


@pytest.mark.slow  # a long real-crawl test: CI runs it (make test ARGS="-m 'slow or data'")
def test_a_recrawl_with_a_prior(graph_server, crawl, tmp_path):
    """Week 1 crawls 600 pages of the site; week 2 (a new crawl id, same Redis) starts with
    week 1's PageRank as its prior: its log and stats say so, its fetch order is the
    reference rule's with that prior, and it fetches more PageRank in its first pages
    than the same crawl without the prior. A rerun of week 2 keeps its prior."""
    graph, urls = read_graph(EMACS), read_urls(EMACS_URLS)
    served = graph_server(EMACS, EMACS_URLS)
    data = tmp_path / "data"
    canon = {n: canonical_url(served.base + p) for n, p in page_paths(graph, urls).items()}
    back = {c: n for n, c in canon.items()}
    week1 = crawl(served.seed_url, tmp_path / "w1.log",
                  {"IPR_DATA_DIR": data, "IPR_CRAWL_ID": "week1", "CLOSESPIDER_PAGECOUNT": 600})
    assert week1.returncode == 0, week1.stderr[-3000:]
    pages = 200
    runs = {}
    for name, extra in (("week2", {"IPR_PRIOR_CRAWL": "week1"}), ("week2-noprior", {})):
        runs[name] = crawl(served.seed_url, tmp_path / f"{name}.log",
                           {**SEQUENTIAL, "IPR_DATA_DIR": data, "IPR_CRAWL_ID": name,
                            "INTERRUPT_AFTER_PAGES": pages, **extra})  # interrupted: resumed below
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    store = open_crawl("week1", "", str(data))
    try:
        known = store.counts()["known"]
        buckets = int(store.client.hget(store.keys["meta"], "pagerank_buckets"))
        values = read_scores(store.client, "ipr:{week1}:pagerank:", buckets)
    finally:
        store.client.close()
        kill_embedded_redis(data)  # the server open_crawl started for this read
    log = runs["week2"].log
    assert f"prior from crawl 'week1': {known} URLs, weight 1 (PageRank computed and installed" in log
    assert f"'ipr/prior/urls': {known}" in log
    by_id = {node_id(c): n for c, n in back.items()}
    prior = {by_id[i]: v for i, v in values.items() if i in by_id}
    assert len(prior) == known
    got = [back[canonical_url(u)] for u in runs["week2"].fetched]
    assert len(got) >= pages - 5
    # The reference keyed by the crawl's node ids: push picks among equal residuals per
    # out-link by node id, as the Lua's ZSET does; keyed by graph numbers it broke such
    # ties differently, and a crawl whose prior made one departed (fetch 191, then 119
    # of 200, in two CI runs; 2026-11-23 and -24).
    nid = {n: node_id(c) for n, c in canon.items()}
    out_ids = {nid[n]: [nid[t] for t in targets] for n, targets in graph.out.items()}
    expected = simulate_crawl(out_ids, [nid[served.seed]], "push", limit=len(got),
                              prior={nid[n]: v for n, v in prior.items()})
    mismatch = next((i for i in range(len(got)) if nid[got[i]] != expected[i]), None)
    assert mismatch is None, f"fetch #{mismatch}: node {got[mismatch]}, reference with the prior {by_id[expected[mismatch]]}"
    pr = nx.pagerank(nx.DiGraph([(u, v) for u, lst in graph.out.items() for v in lst]), alpha=0.85)
    without = [back[canonical_url(u)] for u in runs["week2-noprior"].fetched]
    k = min(len(got), len(without))
    assert sum(pr.get(n, 0) for n in got[:k]) > sum(pr.get(n, 0) for n in without[:k])
    again = crawl(served.seed_url, tmp_path / "again.log",
                  {**SEQUENTIAL, "IPR_DATA_DIR": data, "IPR_CRAWL_ID": "week2", "IPR_PRIOR_CRAWL": "week1",
                   "CLOSESPIDER_PAGECOUNT": 20})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "kept from this crawl's start" in again.log


@pytest.mark.parametrize("settings,message", [
    ({"IPR_PRIOR_CRAWL": "nope"}, "IPR_PRIOR_CRAWL='nope': no such crawl in this Redis"),
    ({"IPR_PRIOR_CRAWL": "x", "IPR_ORDERING": "bf"}, "IPR_PRIOR_CRAWL='x' needs an ordering with scores"),
])
def test_a_bad_prior_fails_the_crawl_with_one_clear_line(graph_server, crawl, tmp_path, settings, message):
    served = graph_server(EMACS, EMACS_URLS)
    run = crawl(served.seed_url, tmp_path / "crawl.log", {"IPR_DATA_DIR": tmp_path / "data", **settings},
                timeout=120)
    assert message in run.log + run.stderr
    assert not run.fetched
