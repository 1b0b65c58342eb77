"""End-to-end test of ipr_crawl.evaluation.serve: a real ``python -m ipr_crawl.evaluation.serve``
subprocess serving the shipped EmacsWiki sample, fetched with urllib."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ipr_crawl.evaluation import graphio

DATA = Path(graphio.__file__).resolve().parents[1] / "data"
GRAPH = DATA / "emacswiki.tsv.gz"
URLS = DATA / "emacswiki.urls.tsv.gz"
READY = re.compile(
    r"^serving emacswiki: 7619 nodes, 39367 edges, seed (\d+) at (http://127\.0\.0\.1:(\d+))(/\S*)$"
)


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.append(dict(attrs)["href"] or "")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def _fetch(
    url: str, headers: dict[str, str] | None = None, opener: urllib.request.OpenerDirector | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET; error statuses are returned, not raised,
    and every response is closed."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        resp = (opener or urllib.request.build_opener()).open(req, timeout=10)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers.items()), err.read()
    with resp:
        return resp.status, dict(resp.headers.items()), resp.read()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int, str]]:
    env = dict(os.environ)
    root = str(Path(graphio.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ipr_crawl.evaluation.serve", str(GRAPH), "--urls", str(URLS), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline().rstrip("\n")  # type: ignore[union-attr]
        m = READY.match(line)
        if not m:
            proc.kill()
            raise AssertionError(f"bad ready line {line!r}; stderr: {proc.stderr.read()}")  # type: ignore[union-attr]
        yield m.group(2), int(m.group(1)), m.group(4)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)  # also closes the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_page_links_and_conditional_get(server: tuple[str, int, str]) -> None:
    base, seed, seed_path = server
    g = graphio.read_graph(GRAPH)
    urls = graphio.read_urls(URLS)
    paths = graphio.page_paths(g, urls)
    assert seed == graphio.default_seed(g) and seed_path == paths[seed]

    for node in (seed, 0, 1234):
        status, headers, raw = _fetch(base + paths[node])
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        etag = headers.get("ETag", "")
        last_mod = headers.get("Last-Modified", "")
        body = raw.decode("utf-8")
        assert re.fullmatch(r'"[^"]+"', etag), etag
        assert last_mod.endswith("GMT")
        assert body.startswith(f"<!DOCTYPE html><html><head><title>node {node}</title>")
        parser = _Hrefs()
        parser.feed(body)
        assert parser.hrefs == [paths[v] for v in g.out_links(node)]
        assert len(parser.hrefs) == g.out_degree(node)

        status, headers, raw = _fetch(base + paths[node], {"If-None-Match": etag})
        assert status == 304 and raw == b"" and headers.get("ETag") == etag

        # a non-matching ETag gets the full page, even with a fresh If-Modified-Since
        status, _, raw = _fetch(base + paths[node], {"If-None-Match": '"nope"', "If-Modified-Since": last_mod})
        assert status == 200 and raw.decode("utf-8") == body

        status, _, _ = _fetch(base + paths[node], {"If-Modified-Since": last_mod})
        assert status == 304


def test_seed_redirect_nodes_list_and_404(server: tuple[str, int, str]) -> None:
    base, seed, seed_path = server
    status, headers, _ = _fetch(base + "/_ipr/seed", opener=urllib.request.build_opener(_NoRedirect))
    assert status == 302 and headers["Location"] == seed_path

    status, _, raw = _fetch(base + "/_ipr/nodes.tsv")
    rows = [line.split("\t") for line in raw.decode("utf-8").splitlines()]
    assert status == 200 and len(rows) == 7619 and rows[seed] == [str(seed), seed_path]

    for missing in ("/robots.txt", "/", "/emacs/NoSuchPageXYZ"):
        assert _fetch(base + missing)[0] == 404


def test_fail_first_answers_a_share_of_pages_503_once_then_the_page(graph_server) -> None:
    """``--fail-first 0.3``: the same pages (by node id) answer their first request with
    503 and ``Retry-After: 0`` in every run, then the page; the others never fail."""
    from conftest import TEST_DATA

    failed_in = []
    for _ in range(2):
        served = graph_server(TEST_DATA / "harvard500.tsv.gz", fail_first=0.3)
        rows = _fetch(served.base + "/_ipr/nodes.tsv")[2].decode().splitlines()
        paths = [row.split("\t")[1] for row in rows[:100]]
        first = [_fetch(served.base + p) for p in paths]
        assert all(s in (200, 503) for s, _, _ in first)
        assert all(h.get("Retry-After") == "0" for s, h, _ in first if s == 503)
        assert all(_fetch(served.base + p)[0] == 200 for p in paths)
        failed_in.append([p for p, (s, _, _) in zip(paths, first) if s == 503])
    assert failed_in[0] == failed_in[1] and 15 <= len(failed_in[0]) <= 45
