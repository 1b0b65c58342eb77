"""Tests of ipr_crawl.evaluation.graphio on the real graphs shipped in tests/data (copies of
../shared/data/graphs; figures from its SOURCES.md) and on the shipped EmacsWiki sample."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import TEST_DATA, shared_file

from ipr_crawl.evaluation import graphio
from ipr_crawl.evaluation.graphio import GraphFormatError

PKG_DATA = Path(graphio.__file__).resolve().parents[1] / "data"


def test_harvard500_counts() -> None:
    g = graphio.read_graph(TEST_DATA / "harvard500.tsv.gz")
    assert g.name == "harvard500"
    assert len(g.nodes) == 500 and g.nodes == list(range(500))
    assert g.edges == 2636 == sum(len(v) for v in g.out.values())
    assert g.duplicates == 0
    assert (g.declared_nodes, g.declared_edges) == (500, 2636)


def test_epa_counts_urls_and_paths() -> None:
    g = graphio.read_graph(TEST_DATA / "epa.tsv.gz")
    urls = graphio.read_urls(TEST_DATA / "epa.urls.tsv.gz")
    assert len(g.nodes) == 4772 and g.edges == 8965
    assert len(urls) == 4772 and set(urls) == set(g.nodes)
    # 501 nodes have no edge (SOURCES.md) but are still nodes via the header.
    touched = set(g.out) | {v for vs in g.out.values() for v in vs}
    assert len(set(g.nodes) - touched) == 501
    paths = graphio.page_paths(g, urls)
    assert len(paths) == 4772
    assert len(set(paths.values())) == 4772  # unique
    inv = graphio.path_to_node(paths)
    assert all(inv[p] == n for n, p in paths.items())
    # many hosts -> the host is the first path segment
    assert paths[0] == "/earthvision.svsu.edu/"
    assert len({p.split("/")[1] for p in paths.values()}) > 1000
    assert all(p.startswith("/") and " " not in p for p in paths.values())


def test_page_paths_rules(tmp_path: Path) -> None:
    f = tmp_path / "g.tsv"
    f.write_text("# Nodes: 4 Edges: 2\n0\t1\n1\t2\n")
    g = graphio.read_graph(f)
    assert graphio.page_paths(g, None)[3] == "/n/3.html"
    one_host = {0: "http://a.org", 1: "http://a.org/x%20y?q=1#frag", 2: "http://a.org/", 3: "http://a.org/p q"}
    p = graphio.page_paths(g, one_host)
    assert p == {0: "/", 1: "/x%20y?q=1", 2: "/~2", 3: "/p%20q"}
    multi = {0: "http://a.org/x", 1: "http://B.org/x", 2: "c.org", 3: "http://a.org/x"}
    p = graphio.page_paths(g, multi)
    assert p == {0: "/a.org/x", 1: "/b.org/x", 2: "/c.org/", 3: "/a.org/x~3"}


def test_read_graph_plain_headerless_and_duplicates(tmp_path: Path) -> None:
    f = tmp_path / "plain.txt"
    f.write_text("5\t3\n5 7\n5\t3\n3\t5\n\n7\t7\n")
    g = graphio.read_graph(f)
    assert g.nodes == [3, 5, 7]
    assert g.out[5] == [3, 7] and g.out[3] == [5] and g.out[7] == [7]
    assert g.edges == 4 and g.duplicates == 1
    assert graphio.reachable(g, 3) == [3, 5, 7]


def test_one_based_header(tmp_path: Path) -> None:
    f = tmp_path / "one.tsv"
    f.write_text("# Nodes: 3 Edges: 1\n1\t3\n")
    assert graphio.read_graph(f).nodes == [1, 2, 3]


@pytest.mark.parametrize(
    "bad, lineno",
    [("0\t1\n1\tx\n", 4), ("0\t1\n1\t2\t3\n", 4), ("0\t1\n-1\t2\n", 4), ("0\t1\n12\n", 4)],
)
def test_malformed_line_raises(tmp_path: Path, bad: str, lineno: int) -> None:
    f = tmp_path / "bad.tsv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("# header\n# Nodes: 3 Edges: 2\n" + bad)
    with pytest.raises(GraphFormatError, match=rf"bad\.tsv\.gz:{lineno}:"):
        graphio.read_graph(f)
    assert issubclass(GraphFormatError, ValueError)


def test_malformed_url_line_raises(tmp_path: Path) -> None:
    f = tmp_path / "u.tsv"
    f.write_text("# x\n0\thttp://a/\n1 http://b/\n")
    with pytest.raises(GraphFormatError, match=r"u\.tsv:3:"):
        graphio.read_urls(f)


def test_default_seed_in_largest_scc(tmp_path: Path) -> None:
    # SCC {0,1,2} (largest) and {3,4}; node 1 has the highest out-degree in it.
    f = tmp_path / "s.tsv"
    f.write_text("0\t1\n1\t2\n2\t0\n1\t3\n1\t4\n3\t4\n4\t3\n4\t5\n4\t6\n4\t7\n")
    g = graphio.read_graph(f)
    assert graphio.strongly_connected_components(g)[0] == [0, 1, 2]
    assert graphio.default_seed(g) == 1
    assert graphio.reachable(g, 1) == [1, 2, 3, 4, 0, 5, 6, 7]


def test_pagerank_matches_networkx() -> None:
    import networkx as nx

    g = graphio.read_graph(TEST_DATA / "harvard500.tsv.gz")
    dg = nx.DiGraph()
    dg.add_nodes_from(g.nodes)
    dg.add_edges_from((s, d) for s, vs in g.out.items() for d in vs)
    ref = nx.pagerank(dg, alpha=0.85)
    pr = graphio.pagerank(g)
    assert set(pr) == set(ref)
    assert sum(pr.values()) == pytest.approx(1.0)
    assert max(abs(pr[n] - ref[n]) for n in ref) < 1e-12


def test_shipped_emacswiki_sample() -> None:
    g = graphio.read_graph(PKG_DATA / "emacswiki.tsv.gz")
    urls = graphio.read_urls(PKG_DATA / "emacswiki.urls.tsv.gz")
    assert len(g.nodes) == 7619 and g.edges == 39367 and g.duplicates == 0
    assert (g.declared_nodes, g.declared_edges) == (7619, 39367)
    assert set(urls) == set(g.nodes) == set(range(7619))
    assert all(u.startswith("https://www.emacswiki.org/emacs/") for u in urls.values())
    paths = graphio.page_paths(g, urls)
    assert len(set(paths.values())) == 7619 and paths[0] == "/emacs/%C3%81reaElisp"
    seed = graphio.default_seed(g)
    assert urls[seed].endswith("/CategoryHomepage")
    assert (PKG_DATA / "SOURCES.md").read_text().count("b950e03808c40a18c4be84a40e7ce67b1795d542") >= 1


@pytest.mark.data
def test_convert_reproduces_shipped_sample(tmp_path: Path) -> None:
    # the whole shared link list (39,367 pairs): the shipped graph is converted from all of it
    src = shared_file("changes/emacswiki_links_2026-08-20.tsv.gz")
    g0 = graphio.read_graph(PKG_DATA / "emacswiki.tsv.gz")
    desc = [c for c in g0.comments[:2]]
    n, m = graphio.convert_url_pairs(src, tmp_path / "e", desc)
    assert (n, m) == (7619, 39367)
    for suffix in (".tsv.gz", ".urls.tsv.gz"):
        assert (tmp_path / ("e" + suffix)).read_bytes() == (PKG_DATA / ("emacswiki" + suffix)).read_bytes()
    # ids by first appearance: the first data line is 0 -> 1
    with gzip.open(src, "rt") as fh:
        fh.readline()
        s_url, d_url = fh.readline().rstrip("\n").split("\t")
    urls = graphio.read_urls(tmp_path / "e.urls.tsv.gz")
    assert (urls[0], urls[1]) == (s_url, d_url)
