"""Reading real web graphs (edge lists, URL maps) and the derived facts the
crawl experiments need: reachable sets, a default seed, the HTTP path of each
page, and exact PageRank.

File formats (those of ``tests/data/*.tsv.gz``, see tests/data/SOURCES.md):

* edge list ``NAME.tsv.gz`` (gzip or plain text, UTF-8): optional ``#`` header
  lines, one of which may be ``# Nodes: N Edges: M``; then one
  ``src<TAB>dst`` line per directed link, both non-negative integer ids.
  Any run of blanks/tabs separates the two fields; blank lines are skipped.
* URL map ``NAME.urls.tsv.gz``: ``#`` lines, then ``id<TAB>url``.

Node ids are the file's own integers; they are never renumbered.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import quote, urlsplit

__all__ = [
    "Graph",
    "GraphFormatError",
    "read_graph",
    "read_urls",
    "reachable",
    "default_seed",
    "strongly_connected_components",
    "page_paths",
    "path_to_node",
    "pagerank",
    "convert_url_pairs",
    "rewired",
    "write_graph",
]

_NODES_RE = re.compile(r"^#\s*Nodes:\s*(\d+)(?:\s+Edges:\s*(\d+))?", re.IGNORECASE)


class GraphFormatError(ValueError):
    """A graph or URL file has a line that cannot be parsed.

    The message names the file and the 1-based line number.
    """


@dataclass
class Graph:
    """A directed graph read from an edge-list file.

    Attributes:
        nodes: every node id, ascending: the declared range from a
            ``# Nodes: N`` header (``0..N-1``; ``1..N`` when the file is
            evidently 1-based, i.e. it uses id N and never id 0) plus every id
            seen in an edge.
        out: out-links per source id, in file order, duplicates removed. Nodes
            without out-links may be absent; use ``graph.out.get(n, [])``.
        edges: number of distinct arcs kept (self-loops included).
        name: file name without ``.tsv``/``.gz``/``.txt`` suffixes.
        duplicates: number of repeated arcs that were dropped.
        declared_nodes / declared_edges: the header's figures, or None.
        comments: the ``#`` header lines, without the leading ``#``.
    """

    nodes: list[int]
    out: dict[int, list[int]]
    edges: int
    name: str
    duplicates: int = 0
    declared_nodes: int | None = None
    declared_edges: int | None = None
    comments: list[str] = field(default_factory=list)

    def out_links(self, node: int) -> list[int]:
        """Out-links of ``node`` in file order (empty list if none)."""
        return self.out.get(node, [])

    def out_degree(self, node: int) -> int:
        return len(self.out.get(node, ()))


def _open_text(path: str | os.PathLike[str]) -> IO[str]:
    """Open gzip (sniffed by magic bytes) or plain text as UTF-8 text."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def _graph_name(path: str | os.PathLike[str]) -> str:
    name = os.path.basename(os.fspath(path))
    for suffix in (".gz", ".tsv", ".txt"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def read_graph(path: str | os.PathLike[str]) -> Graph:
    """Read an edge-list file (format in the module docstring).

    Header lines are only recognised before the first data line; ``#`` lines
    later on are skipped as comments.  Duplicate arcs are dropped (first
    occurrence keeps its position) and counted in ``Graph.duplicates``.

    Cost: about 1 s per million edges; memory about 10 bytes per edge plus one
    int object per distinct id (ids are shared, not re-created per edge).

    Raises:
        GraphFormatError: a data line does not hold exactly two non-negative
            integers (message: ``"<file>:<line>: ..."``).
        OSError: the file cannot be read.
    """
    fname = os.fspath(path)
    out: dict[int, list[int]] = {}
    cache: dict[str, int] = {}
    comments: list[str] = []
    declared_nodes: int | None = None
    declared_edges: int | None = None
    raw_edges = 0
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line or line[0] == "#":
                if line and raw_edges == 0:
                    text = line[1:].rstrip("\n")
                    comments.append(text.strip())
                    m = _NODES_RE.match(line)
                    if m:
                        declared_nodes = int(m.group(1))
                        if m.group(2) is not None:
                            declared_edges = int(m.group(2))
                continue
            parts = line.split()
            if len(parts) != 2:
                if not parts:
                    continue
                raise GraphFormatError(
                    f"{fname}:{lineno}: expected 'src<TAB>dst', got {line.rstrip()!r}"
                )
            s_tok, d_tok = parts
            s = cache.get(s_tok)
            if s is None:
                s = cache[s_tok] = _parse_id(s_tok, fname, lineno, line)
            d = cache.get(d_tok)
            if d is None:
                d = cache[d_tok] = _parse_id(d_tok, fname, lineno, line)
            lst = out.get(s)
            if lst is None:
                out[s] = [d]
            else:
                lst.append(d)
            raw_edges += 1
    seen: set[int] = set(cache.values())
    del cache
    duplicates = 0
    for s, lst in out.items():
        if len(lst) > 1:
            uniq = dict.fromkeys(lst)
            if len(uniq) != len(lst):
                duplicates += len(lst) - len(uniq)
                out[s] = list(uniq)
    nodes_set = seen
    if declared_nodes is not None:
        n = declared_nodes
        if seen and 0 not in seen and max(seen) == n and min(seen) >= 1:
            declared = range(1, n + 1)  # 1-based file (e.g. polblogs)
        else:
            declared = range(n)
        nodes_set = seen.union(declared)
    return Graph(
        nodes=sorted(nodes_set),
        out=out,
        edges=raw_edges - duplicates,
        name=_graph_name(path),
        duplicates=duplicates,
        declared_nodes=declared_nodes,
        declared_edges=declared_edges,
        comments=comments,
    )


def _parse_id(tok: str, fname: str, lineno: int, line: str) -> int:
    try:
        v = int(tok)
    except ValueError:
        raise GraphFormatError(
            f"{fname}:{lineno}: node id {tok!r} is not an integer in {line.rstrip()!r}"
        ) from None
    if v < 0:
        raise GraphFormatError(f"{fname}:{lineno}: negative node id {v}")
    return v


def read_urls(path: str | os.PathLike[str]) -> dict[int, str]:
    """Read an ``id<TAB>url`` file (gzip or plain; ``#`` and blank lines skipped).

    Returns:
        ``{id: url}``; the URL is kept verbatim (may lack a scheme, e.g. the
        bare host names of ukwa-1996-hosts).

    Raises:
        GraphFormatError: a line has no tab, a non-integer id, an empty URL,
            or repeats an id.
    """
    fname = os.fspath(path)
    urls: dict[int, str] = {}
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if line[:1] == "#" or not line.strip():
                continue
            tok, sep, url = line.rstrip("\r\n").partition("\t")
            url = url.strip()
            try:
                node = int(tok)
            except ValueError:
                node = -1
            if not sep or not url or node < 0:
                raise GraphFormatError(
                    f"{fname}:{lineno}: expected 'id<TAB>url', got {line.rstrip()!r}"
                )
            if node in urls:
                raise GraphFormatError(f"{fname}:{lineno}: duplicate id {node}")
            urls[node] = url
    return urls


def reachable(graph: Graph, seed: int) -> list[int]:
    """Nodes reachable from ``seed`` (seed included), in BFS order with
    out-links visited in file order.

    Raises:
        KeyError: ``seed`` is not a node of the graph.
    """
    if seed not in graph.out and not _has_node(graph, seed):
        raise KeyError(f"seed {seed} is not a node of {graph.name}")
    order = [seed]
    visited = {seed}
    queue = deque((seed,))
    out = graph.out
    while queue:
        for v in out.get(queue.popleft(), ()):
            if v not in visited:
                visited.add(v)
                order.append(v)
                queue.append(v)
    return order


def _has_node(graph: Graph, node: int) -> bool:
    import bisect

    i = bisect.bisect_left(graph.nodes, node)
    return i < len(graph.nodes) and graph.nodes[i] == node


def _csr(graph: Graph):
    """(index, indptr, indices) arrays: CSR adjacency over ``graph.nodes``."""
    import numpy as np

    nodes = graph.nodes
    index = {n: i for i, n in enumerate(nodes)}
    indptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    for n, lst in graph.out.items():
        indptr[index[n] + 1] = len(lst)
    np.cumsum(indptr, out=indptr)
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    contiguous = bool(nodes) and nodes[0] == 0 and nodes[-1] == len(nodes) - 1
    for n, lst in graph.out.items():
        i = index[n]
        if contiguous:
            indices[indptr[i] : indptr[i + 1]] = lst
        else:
            indices[indptr[i] : indptr[i + 1]] = [index[v] for v in lst]
    return index, indptr, indices


def strongly_connected_components(graph: Graph) -> list[list[int]]:
    """Strongly connected components, largest first (ties: smallest node id
    first); each component sorted ascending.  Uses
    ``scipy.sparse.csgraph.connected_components(connection="strong")``
    (no recursion; ~1 s on cnr-2000's 325k nodes / 3.2M arcs).
    """
    import numpy as np
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import connected_components

    n = len(graph.nodes)
    if n == 0:
        return []
    _, indptr, indices = _csr(graph)
    mat = csr_array((np.ones(len(indices), dtype=np.int8), indices, indptr), shape=(n, n))
    _, labels = connected_components(mat, directed=True, connection="strong")
    comps: dict[int, list[int]] = {}
    for node, lab in zip(graph.nodes, labels.tolist()):
        comps.setdefault(lab, []).append(node)
    return sorted(comps.values(), key=lambda c: (-len(c), c[0]))


def default_seed(graph: Graph) -> int:
    """The node of maximum out-degree inside the largest strongly connected
    component (ties: lowest id).  Every node of that component reaches the
    whole component, so a crawl from it sees a large part of the graph.

    Raises:
        ValueError: the graph has no nodes.
    """
    comps = strongly_connected_components(graph)
    if not comps:
        raise ValueError(f"graph {graph.name} has no nodes")
    return max(comps[0], key=lambda n: (graph.out_degree(n), -n))


def _split_url(url: str) -> tuple[str, str]:
    """(host, path[?query]) of a URL; scheme-less strings are taken as
    ``http://`` + string (e.g. bare host names)."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    path = parts.path or "/"
    if not path.startswith("/"):
        path = "/" + path
    if parts.query:
        path += "?" + parts.query
    return parts.netloc.lower(), path


# Characters left as they are in a served path: RFC 3986 unreserved, sub-delims,
# ':', '@', '/', '?' and '%' (existing percent-encoding is kept, never decoded).
_PATH_SAFE = "/?%!$&'()*+,;=:@-._~"


def _wire_path(path: str) -> str:
    """Percent-encode (UTF-8) only what is not allowed in a request target:
    spaces, ``<>"``, controls, non-ASCII, ..."""
    return quote(path, safe=_PATH_SAFE)


def page_paths(graph: Graph, urls: dict[int, str] | None = None) -> dict[int, str]:
    """The HTTP path (root-relative, starting with ``/``) each node is served
    under by :mod:`ipr_crawl.evaluation.serve`.

    * ``urls is None``: ``/n/<id>.html``.
    * all URLs on one host: the URL's path (+ ``?query``), percent-encoding
      kept as is; an empty path becomes ``/``.  The fragment is dropped.
    * several hosts: ``/<host><path>`` (host lower-cased, port kept).
    * characters that may not appear in a request target (space, ``<>"``,
      non-ASCII, ...) are percent-encoded (UTF-8); existing ``%XX`` are kept.
    * a node without a URL: ``/n/<id>.html``.
    * a path already taken by a lower id gets ``~<id>`` appended, so paths are
      unique.  Nodes are processed in ascending id order.
    """
    if urls is None:
        return {n: f"/n/{n}.html" for n in graph.nodes}
    split = {n: _split_url(u) for n, u in urls.items()}
    hosts = {h for h, _ in split.values()}
    multi = len(hosts) > 1
    paths: dict[int, str] = {}
    taken: set[str] = set()
    for n in sorted(set(graph.nodes).union(urls)):
        if n in split:
            host, path = split[n]
            p = _wire_path("/" + host + path if multi else path)
        else:
            p = f"/n/{n}.html"
        if p in taken:
            p = f"{p}~{n}"
        taken.add(p)
        paths[n] = p
    return paths


def path_to_node(paths: dict[int, str]) -> dict[str, int]:
    """Inverse of :func:`page_paths` (paths are unique by construction).

    Raises:
        ValueError: two nodes share a path.
    """
    inv: dict[str, int] = {}
    for n, p in paths.items():
        if p in inv:
            raise ValueError(f"path {p!r} used by nodes {inv[p]} and {n}")
        inv[p] = n
    return inv


def pagerank(
    graph: Graph, damping: float = 0.85, tol: float = 1.0e-6, max_iter: int = 100
) -> dict[int, float]:
    """Exact PageRank of every node (values sum to 1).

    The same computation as ``networkx.pagerank(G, alpha=damping)`` on a
    ``DiGraph`` holding all ``graph.nodes`` and arcs (networkx 3.x
    ``_pagerank_scipy``): uniform teleport; a dangling node's rank is spread
    uniformly over all nodes; self-loops count as links; power iteration until
    the L1 change is below ``N * tol``
    (:func:`ipr_crawl.ordering.pagerank.converged_csr`).  Agreement with networkx is checked
    in tests/test_graphio.py.

    Raises:
        networkx.PowerIterationFailedConvergence: no convergence in ``max_iter``.
    """
    from ipr_crawl.ordering.pagerank import converged_csr

    if not graph.nodes:
        return {}
    _, indptr, indices = _csr(graph)
    return dict(zip(graph.nodes, converged_csr(indptr, indices, damping, tol, max_iter).tolist()))


def _write_gz(path: str, lines: Iterable[str]) -> None:
    """Write text lines to a deterministic gzip file (mtime 0, no file name)."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as fh:
                for line in lines:
                    fh.write(line)
                    fh.write("\n")


def convert_url_pairs(
    src_tsv_gz: str | os.PathLike[str],
    out_prefix: str | os.PathLike[str],
    description: Iterable[str] = (),
) -> tuple[int, int]:
    """Convert a ``src_url<TAB>dst_url`` file (first line a header, e.g.
    ``emacswiki_links_2026-08-20.tsv.gz``) to the edge-list + URL-map format.

    Ids 0..N-1 are assigned in order of first appearance, reading each line's
    source then destination.  Duplicate pairs are dropped.  Writes
    ``<out_prefix>.tsv.gz`` (``# <description line>`` for each line of
    ``description``, ``# Ids assigned ...``, ``# Nodes: N Edges: M``,
    ``# FromNodeId<TAB>ToNodeId``, then ``src<TAB>dst``) and
    ``<out_prefix>.urls.tsv.gz`` (``# ...`` headers, then ``id<TAB>url``).
    Output is byte-for-byte deterministic (gzip mtime 0).

    Returns:
        ``(nodes, edges)``.

    Raises:
        GraphFormatError: a data line does not have exactly two fields.
    """
    fname = os.fspath(src_tsv_gz)
    ids: dict[str, int] = {}
    pairs: dict[tuple[int, int], None] = {}
    with _open_text(src_tsv_gz) as fh:
        for lineno, line in enumerate(fh, 1):
            if lineno == 1 or not line.strip():
                continue
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise GraphFormatError(
                    f"{fname}:{lineno}: expected 'src_url<TAB>dst_url', got {line.rstrip()!r}"
                )
            s = ids.setdefault(parts[0], len(ids))
            d = ids.setdefault(parts[1], len(ids))
            pairs[(s, d)] = None
    desc = [f"# {d}" for d in description]
    src_name = os.path.basename(fname)
    idnote = f"# Ids assigned 0..N-1 in order of first appearance in {src_name} (source URL, then target URL, line by line)."
    prefix = os.fspath(out_prefix)
    _write_gz(
        prefix + ".tsv.gz",
        [
            *desc,
            idnote,
            f"# Nodes: {len(ids)} Edges: {len(pairs)}",
            "# FromNodeId\tToNodeId",
            *(f"{s}\t{d}" for s, d in pairs),
        ],
    )
    _write_gz(
        prefix + ".urls.tsv.gz",
        [
            *desc,
            idnote,
            "# NodeId\tURL",
            *(f"{i}\t{u}" for u, i in ids.items()),
        ],
    )
    return len(ids), len(pairs)



def rewired(graph: Graph, share: float, seed: int = 1, to: str = "indegree") -> Graph:
    """A perturbed copy of ``graph``: ``round(share x edges)`` arcs, drawn uniformly,
    are removed and each is replaced by an arc from the same source to a node drawn
    in proportion to its in-degree (``to="indegree"``: the target of another arc drawn
    uniformly) or uniformly among all nodes (``to="uniform"``: a harsher change that
    moves PageRank towards pages nobody linked to),
    re-drawn while it would be a self-loop or an arc the source has or had (so exactly
    that many arcs differ, unless 100 draws find none for a source).
    Out-degrees are kept exactly, in-degrees in expectation; the node set is kept.
    What a site's link graph looks like a while later, for measuring priors
    (``ipr-crawl simulate --prior-graph``). Deterministic for a ``seed``.

    Raises :class:`ValueError` for a share outside [0, 1] or another ``to``.
    """
    import numpy as np

    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share!r}: must be within [0, 1]")
    if to not in ("indegree", "uniform"):
        raise ValueError(f"to={to!r}: indegree or uniform")
    nodes_list = list(graph.nodes)
    arcs = [(u, v) for u, lst in graph.out.items() for v in lst]
    rng = np.random.default_rng(seed)
    k = round(share * len(arcs))
    chosen = set(rng.choice(len(arcs), size=k, replace=False).tolist()) if k else set()
    out: dict[int, list[int]] = {u: list(lst) for u, lst in graph.out.items()}
    have = {u: set(lst) for u, lst in out.items()}
    original = {u: set(lst) for u, lst in out.items()}
    for i in sorted(chosen):
        u, v = arcs[i]
        out[u].remove(v)
        have[u].discard(v)
    for i in sorted(chosen):
        u = arcs[i][0]
        for _ in range(100):
            if to == "uniform":
                w = nodes_list[int(rng.integers(len(nodes_list)))]
            else:
                w = arcs[int(rng.integers(len(arcs)))][1]
            if w != u and w not in have[u] and w not in original[u]:
                out[u].append(w)
                have[u].add(w)
                break
    out = {u: lst for u, lst in out.items() if lst}
    edges = sum(len(lst) for lst in out.values())
    nodes = sorted(set(graph.nodes).union(*(set(lst) for lst in out.values())))
    return Graph(nodes=nodes, out=out, edges=edges, name=f"{graph.name}~rewired{share:g}",
                 comments=[f" {graph.name} with {share:.0%} of its arcs rewired to {to} targets (seed {seed})"])


def write_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` in the edge-list format :func:`read_graph` reads (gzip, deterministic)."""
    lines = [f"#{c}" for c in graph.comments]
    n = len(graph.nodes)
    if n and graph.nodes[0] == 0 and graph.nodes[-1] == n - 1:  # the header declares ids 0..n-1
        lines.append(f"# Nodes: {n} Edges: {graph.edges}")
    lines.append("# FromNodeId\tToNodeId")
    _write_gz(os.fspath(path), [*lines, *(f"{u}\t{v}" for u in sorted(graph.out) for v in graph.out[u])])
