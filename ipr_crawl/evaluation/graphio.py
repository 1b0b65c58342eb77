"""What the crawl experiments derive from a real web graph: reachable sets, a
default seed, the HTTP path of each page, exact PageRank, and perturbed copies of a
graph.

The graph files (edge lists, URL maps) are read and written by
:mod:`ipr_crawl.evaluation.graphfiles`; their names import from here too
(:class:`Graph`, :func:`read_graph`, :func:`read_urls`, :func:`write_graph`,
:func:`convert_url_pairs`, :class:`GraphFormatError`).
"""

from __future__ import annotations

from collections import deque
from urllib.parse import quote, urlsplit

from ipr_crawl.evaluation.graphfiles import (
    Graph,
    GraphFormatError,
    convert_url_pairs,
    read_graph,
    read_urls,
    write_graph,
)

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
    in tests/rules/test_graphio.py.

    Raises:
        networkx.PowerIterationFailedConvergence: no convergence in ``max_iter``.
    """
    from ipr_crawl.ordering.pagerank import converged_csr

    if not graph.nodes:
        return {}
    _, indptr, indices = _csr(graph)
    return dict(zip(graph.nodes, converged_csr(indptr, indices, damping, tol, max_iter).tolist()))


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
