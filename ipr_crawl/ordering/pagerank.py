"""One power iteration of PageRank over a collected graph (the ``pr`` ordering).

Yamada et al. 2004 §4.2 ("PR"): PageRank over the collected graph, recomputed
every N fetched pages as ONE power iteration starting from the previous values.
The iteration is networkx's (``nx.pagerank``): dangling nodes (here also every
discovered, unfetched URL: its out-links are unknown) spread their mass
uniformly; damping ``d`` (0.85).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["power_step"]


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
