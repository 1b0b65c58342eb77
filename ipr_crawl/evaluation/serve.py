"""Serve a real web graph over HTTP so a crawler can crawl it locally.

Each node is one HTML page at its path from :func:`ipr_crawl.evaluation.graphio.page_paths`,
holding exactly its out-links (root-relative ``href``s) in file order::

    <!DOCTYPE html><html><head><title>node N</title></head><body><h1>URL or path</h1>
    <ul><li><a href="PATH">node M</a></li>...</ul></body></html>

Pages are generated on request from the adjacency lists (nothing is cached), so
cnr-2000 (325k nodes, 3.2M arcs) fits in about 400 MB.  Responses carry
``Content-Type: text/html; charset=utf-8``, a fixed ``Last-Modified`` (the graph
file's mtime) and a strong ``ETag`` (SHA-1 of the body); ``If-None-Match`` and,
when no ``If-None-Match`` is sent, ``If-Modified-Since`` are answered with 304
(RFC 9110 §13.2.2 precedence).

With ``--fail-first F`` a share F of the pages (chosen by node id, the same in every
run) answer their first request with ``503 Service Unavailable`` and ``Retry-After:
0``, and every later one with the page: a site that fails and recovers, for a
crawler's retries (Scrapy's RetryMiddleware, RFC 9110 §15.6.4).

Other resources: ``/_ipr/seed`` 302-redirects to the seed page;
``/_ipr/nodes.tsv`` lists ``id<TAB>path`` for every node; anything else
(including ``/robots.txt``) is 404.

CLI: ``ipr-crawl serve-graph GRAPH.tsv.gz [--urls URLS.tsv.gz] --port N
[--host H] [--seed NODE]`` or ``python -m ipr_crawl.evaluation.serve GRAPH ...``.  Once
listening it prints one line
``serving <name>: <nodes> nodes, <edges> edges, seed <id> at http://host:port<path>``
to stdout (flushed), then runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from twisted.web import http, resource, server

from ipr_crawl.evaluation.graphio import (
    Graph,
    default_seed,
    page_paths,
    path_to_node,
    read_graph,
    read_urls,
)
from ipr_crawl.ordering.urls import site_hash

__all__ = ["GraphResource", "make_site", "serve_graph", "spawn", "add_serve_graph_parser", "main"]

#: Last-Modified used when the caller gives none: 2000-01-01T00:00:00Z.
DEFAULT_LAST_MODIFIED = 946684800

SEED_PATH = "/_ipr/seed"
NODES_PATH = "/_ipr/nodes.tsv"


class GraphResource(resource.Resource):
    """A leaf resource answering every path of the site from the graph.

    Args:
        graph: the graph to serve.
        paths: node id -> path (from :func:`page_paths`); must be unique.
        seed: node that ``/_ipr/seed`` redirects to.
        last_modified: POSIX seconds sent as ``Last-Modified`` on every page.
        urls: optional node id -> original URL, shown in each page's ``<h1>``.
        fail_first: share of the pages (0 to 1, by node id) that answer their first
            request with 503 (see the module docstring).
    """

    isLeaf = True

    def __init__(
        self,
        graph: Graph,
        paths: dict[int, str],
        seed: int,
        last_modified: float = DEFAULT_LAST_MODIFIED,
        urls: dict[int, str] | None = None,
        fail_first: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= fail_first <= 1.0:
            raise ValueError(f"fail_first={fail_first}: a share, 0 to 1")
        self.fail_first = fail_first
        #: the pages that answered 503 once (fail_first)
        self.failed: set[int] = set()
        self.graph = graph
        self.paths = paths
        self.by_path = path_to_node(paths)
        # Fallback for clients that re-encode paths (e.g. %7E vs ~, spaces -> %20).
        self.by_decoded: dict[str, int] = {}
        for node, p in paths.items():
            d = unquote(p)
            if d != p:
                self.by_decoded.setdefault(d, node)
        self.seed = seed
        self.last_modified = int(last_modified)
        self.urls = urls
        #: node -> "http://address:port" when pages are served on several loopback
        #: addresses (:func:`host_addresses`); links are then absolute URLs
        self.origin: dict[int, str] = {}

    def lookup(self, raw_path: str) -> int | None:
        """Node served at ``raw_path`` (path + ``?query`` as sent), or None."""
        node = self.by_path.get(raw_path)
        if node is None:
            d = unquote(raw_path)
            node = self.by_decoded.get(d)
            if node is None:
                node = self.by_path.get(d)
        return node

    def page_body(self, node: int) -> bytes:
        """The HTML page of ``node`` (UTF-8)."""
        paths = self.paths
        esc = html.escape
        title = self.urls.get(node) if self.urls else None
        parts = [
            f"<!DOCTYPE html><html><head><title>node {node}</title></head><body>"
            f"<h1>{esc(title or paths[node], quote=False)}</h1><ul>"
        ]
        origin = self.origin
        for v in self.graph.out.get(node, ()):
            parts.append(f'<li><a href="{esc(origin.get(v, "") + paths[v])}">node {v}</a></li>')
        parts.append("</ul></body></html>\n")
        return "".join(parts).encode("utf-8")

    def render_GET(self, request: server.Request) -> bytes:
        raw = request.uri.decode("latin-1").split("#", 1)[0]
        if "://" in raw.split("?", 1)[0]:  # absolute-form request target
            rest = raw.split("://", 1)[1]
            raw = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        if raw == SEED_PATH:
            target = self.paths[self.seed].encode("latin-1", "replace")
            request.setResponseCode(http.FOUND)
            request.setHeader(b"location", target)
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            return b'<!DOCTYPE html><html><body><a href="%s">seed</a></body></html>\n' % (
                html.escape(self.paths[self.seed]).encode("utf-8"),
            )
        if raw == NODES_PATH:
            request.setHeader(b"content-type", b"text/tab-separated-values; charset=utf-8")
            lines = [f"{n}\t{p}\n" for n, p in sorted(self.paths.items())]
            return "".join(lines).encode("utf-8")
        node = self.lookup(raw)
        if node is None:
            request.setResponseCode(http.NOT_FOUND)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"404 not found\n"
        if self.fail_first and node not in self.failed and (node * 2654435761 % 2**32) / 2**32 < self.fail_first:
            self.failed.add(node)  # Knuth's multiplicative hash: a share spread over the ids
            request.setResponseCode(http.SERVICE_UNAVAILABLE)
            request.setHeader(b"retry-after", b"0")
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"503 service unavailable: try again\n"
        body = self.page_body(node)
        etag = b'"' + hashlib.sha1(body).hexdigest()[:20].encode("ascii") + b'"'
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if request.setETag(etag) == http.CACHED:
            request.setHeader(b"last-modified", http.datetimeToString(self.last_modified))
            return b""
        if request.getHeader(b"if-none-match") is None:
            if request.setLastModified(self.last_modified) == http.CACHED:
                return b""
        else:
            request.setHeader(b"last-modified", http.datetimeToString(self.last_modified))
        return body


class _QuietSite(server.Site):
    """A Site that writes no access log (logging would dominate CPU time)."""

    def log(self, request: Any) -> None:  # noqa: D401 - twisted API
        return None


def host_addresses(urls: dict[int, str], count: int) -> dict[int, str]:
    """Node -> a loopback address standing for its original URL's host:
    ``127.0.1.(1 + site_hash(host) mod count)``, so that a multi-host graph is served
    on ``count`` host names (a node's host groups with others, never splits). Linux
    answers on all of 127/8 without configuration."""
    if not 1 <= count <= 254:
        raise ValueError(f"hosts={count}: 1 to 254")
    out = {}
    for node, url in urls.items():
        rest = url.split("://", 1)[-1]
        host = rest.split("/", 1)[0].split("?", 1)[0].lower()
        out[node] = f"127.0.1.{1 + site_hash(host) % count}"
    return out


def make_site(
    graph: Graph,
    urls: dict[int, str] | None = None,
    seed: int | None = None,
    last_modified: float | None = None,
    fail_first: float = 0.0,
) -> server.Site:
    """Build the twisted ``Site`` serving ``graph`` (seed defaults to
    :func:`default_seed`).

    Raises:
        KeyError: ``seed`` is not a node of the graph.
    """
    paths = page_paths(graph, urls)
    if seed is None:
        seed = default_seed(graph)
    if seed not in paths:
        raise KeyError(f"seed {seed} is not a node of {graph.name}")
    res = GraphResource(
        graph,
        paths,
        seed,
        DEFAULT_LAST_MODIFIED if last_modified is None else last_modified,
        urls,
        fail_first,
    )
    return _QuietSite(res)


def serve_graph(
    graph: Graph,
    urls: dict[int, str] | None,
    port: int,
    host: str = "127.0.0.1",
    seed: int | None = None,
    *,
    last_modified: float | None = None,
    run: bool = True,
    hosts: int = 0,
    fail_first: float = 0.0,
) -> Any:
    """Listen on ``host:port`` (0 = any free port) and serve ``graph``.

    ``hosts`` > 0 (needs ``urls``): serve each page on the loopback address of its
    original host (:func:`host_addresses`, ``host`` is then ignored), all on one port,
    with absolute links; a crawl then sees up to ``hosts`` sites. ``fail_first``: the
    share of pages whose first request gets a 503 (module docstring).

    With ``run=True`` (default) prints the ready line (see module docstring),
    then runs the reactor until it stops; returns None.  With ``run=False``
    returns the twisted ``IListeningPort`` without printing or running the
    reactor (for embedding in a reactor that is already running).

    Raises:
        twisted.internet.error.CannotListenError: the port is in use.
    """
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor
    site = make_site(graph, urls, seed, last_modified, fail_first)
    res: GraphResource = site.resource
    if hosts:
        if not urls:
            raise ValueError("serving on several hosts needs the graph's URLs (--urls)")
        addresses = host_addresses(urls, hosts)
        used = sorted(set(addresses.values()), key=lambda a: int(a.rsplit(".", 1)[1]))
        listening = reactor.listenTCP(port, site, interface=used[0])
        port = listening.getHost().port
        for address in used[1:]:
            reactor.listenTCP(port, site, interface=address)
        res.origin = {node: f"http://{a}:{port}" for node, a in addresses.items()}
        host = addresses.get(res.seed, used[0])
    else:
        listening = reactor.listenTCP(port, site, interface=host)
    if not run:
        return listening
    actual = listening.getHost().port
    shown = f"[{host}]" if ":" in host else host
    print(
        f"serving {graph.name}: {len(graph.nodes)} nodes, {graph.edges} edges, "
        f"seed {res.seed} at http://{shown}:{actual}{res.paths[res.seed]}",
        flush=True,
    )
    reactor.run()
    return None


def spawn(
    graph: str | os.PathLike[str], urls: str | os.PathLike[str] | None = None, seed: int | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Serve ``graph`` in a child process (``python -m ipr_crawl.evaluation.serve``, a free
    port on 127.0.0.1) and return ``(process, seed URL)`` once it listens.

    The caller stops the process. Raises RuntimeError if the server exits
    before it prints its address (a bad graph file, say).
    """
    cmd = [sys.executable, "-m", "ipr_crawl.evaluation.serve", os.fspath(graph), "--port", "0"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if urls:
        cmd += ["--urls", os.fspath(urls)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"at (http://\S+)", line)
    if not m:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"serve-graph did not start: {' '.join(cmd)}: {line!r}")
    return proc, m.group(1)


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("graph", help="edge list NAME.tsv[.gz] (src<TAB>dst, '#' headers)")
    p.add_argument("--urls", help="id<TAB>url file; pages are then served under the URLs' paths")
    p.add_argument("--port", type=int, required=True, help="TCP port (0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--seed", type=int, default=None, help="seed node (default: max out-degree node of the largest SCC)")
    p.add_argument("--hosts", type=int, default=0, help="serve each page on one of this many loopback addresses "
                   "127.0.1.k, by its original URL's host (needs --urls; 0: all on --host)")
    p.add_argument("--fail-first", type=float, default=0.0, metavar="SHARE",
                   help="this share of the pages (0 to 1, by node id) answer their first request with 503, "
                   "then the page (default 0)")
    p.set_defaults(func=_run)
    return p


def add_serve_graph_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve-graph`` subcommand on an ``add_subparsers()``
    object; the parsed namespace's ``func(args) -> int`` runs it."""
    p = subparsers.add_parser(
        "serve-graph",
        help="serve a real web graph as HTML pages over HTTP",
        description="Serve a web graph (one HTML page per node) for local crawling.",
    )
    return _configure(p)


def _run(args: argparse.Namespace) -> int:
    graph = read_graph(args.graph)
    urls = read_urls(args.urls) if args.urls else None
    serve_graph(
        graph,
        urls,
        args.port,
        args.host,
        args.seed,
        last_modified=os.stat(args.graph).st_mtime,
        hosts=args.hosts,
        fail_first=args.fail_first,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ipr_crawl.evaluation.serve GRAPH [--urls U] --port N [--host H] [--seed S]``."""
    parser = _configure(argparse.ArgumentParser(prog="ipr-crawl serve-graph", description=__doc__.split("\n\n")[0]))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
