"""PageRank over a collected graph: one power iteration (the ``pr`` ordering), or
converged (an earlier crawl's PageRank as a prior, ``IPR_PRIOR_CRAWL``).

Yamada et al. 2004 §4.2 ("PR"): PageRank over the collected graph, recomputed
every N fetched pages as ONE power iteration starting from the previous values.
The iteration is networkx's (``nx.pagerank``): dangling nodes (here also every
discovered, unfetched URL: its out-links are unknown) spread their mass
uniformly; damping ``d`` (0.85).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["power_step", "converged", "converged_csr"]


def power_step(
    n: int, src: np.ndarray, dst: np.ndarray, previous: np.ndarray, damping: float = 0.85
) -> np.ndarray:
    """One iteration ``x' = d (A^T D^-1 x + dangling(x)/n) + (1 - d)/n``.

    ``src``/``dst``: int arrays of the edges (indexes < n; duplicates count once);
    ``previous``: float array of length n, the previous values; entries <= 0
    (nodes without a previous value) start at 1/n; the vector is normalised to
    sum 1 first. Returns a float array of length n summing to 1.

    >>> power_step(2, np.array([0]), np.array([1]), np.zeros(2)).round(4).tolist()
    [0.2875, 0.7125]
    """
    if n == 0:
        return np.zeros(0)
    x = np.where(previous > 0, previous, 1.0 / n).astype(float)
    x /= x.sum()
    if len(src):
        a = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
        a.data[:] = 1.0  # duplicate arcs count once
        outdeg = np.asarray(a.sum(axis=1)).ravel()
    else:
        a = sp.csr_matrix((n, n))
        outdeg = np.zeros(n)
    inv = np.divide(1.0, outdeg, out=np.zeros(n), where=outdeg > 0)
    dangling = x[outdeg == 0].sum()
    y = damping * (a.T @ (x * inv) + dangling / n) + (1.0 - damping) / n
    return np.asarray(y / y.sum())


def converged_csr(
    indptr: np.ndarray, indices: np.ndarray, damping: float = 0.85, tol: float = 1.0e-6, max_iter: int = 100
) -> np.ndarray:
    """Converged PageRank of a CSR adjacency (row i's out-links: ``indices[indptr[i]:
    indptr[i+1]]``, distinct), values summing to 1.

    The computation of ``networkx.pagerank(G, alpha=damping)`` (networkx 3.x
    ``_pagerank_scipy``; Page, Brin, Motwani & Winograd 1999): uniform teleport, a
    dangling node's rank spread uniformly, power iteration until the L1 change is
    below ``n * tol``, on a scipy CSR matrix (cnr-2000, 3.2M arcs: ~100 MB, seconds).

    Raises:
        networkx.PowerIterationFailedConvergence: no convergence in ``max_iter``.
    """
    n = len(indptr) - 1
    if n <= 0:
        return np.zeros(0)
    deg = np.diff(indptr).astype(float)
    nz = deg != 0
    inv = np.zeros(n)
    inv[nz] = 1.0 / deg[nz]
    mat = sp.csr_array((np.repeat(inv, np.diff(indptr)), indices, indptr), shape=(n, n))
    mat_t = mat.T.tocsr()
    dangling = np.where(~nz)[0]
    p = np.full(n, 1.0 / n)
    x = p.copy()
    for _ in range(max_iter):
        xlast = x
        x = damping * (mat_t @ x + x[dangling].sum() * p) + (1 - damping) * p
        if np.absolute(x - xlast).sum() < n * tol:
            return np.asarray(x)
    import networkx as nx

    raise nx.PowerIterationFailedConvergence(max_iter)


def converged(n: int, src: np.ndarray, dst: np.ndarray, damping: float = 0.85) -> np.ndarray:
    """:func:`converged_csr` of the graph of ``n`` nodes with edges ``src -> dst``
    (int arrays of indexes < n; duplicate arcs count once). A float array of length n.

    >>> converged(2, np.array([0]), np.array([1])).round(4).tolist()
    [0.3509, 0.6491]
    """
    if n == 0:
        return np.zeros(0)
    a = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    a.sum_duplicates()
    a.sort_indices()
    return converged_csr(a.indptr.astype(np.int64), a.indices.astype(np.int64), damping)
