"""Graph files: reading and writing the edge lists and URL maps of real web graphs.

File formats (those of ``tests/data/*.tsv.gz``, see tests/data/SOURCES.md):

* edge list ``NAME.tsv.gz`` (gzip or plain text, UTF-8): optional ``#`` header
  lines, one of which may be ``# Nodes: N Edges: M``; then one
  ``src<TAB>dst`` line per directed link, both non-negative integer ids.
  Any run of blanks/tabs separates the two fields; blank lines are skipped.
* URL map ``NAME.urls.tsv.gz``: ``#`` lines, then ``id<TAB>url``.

Node ids are the file's own integers; they are never renumbered. What the
experiments derive from a graph (reachable sets, seed, paths, PageRank) is in
:mod:`ipr_crawl.evaluation.graphio`, which also gives these names.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

__all__ = ["Graph", "GraphFormatError", "convert_url_pairs", "read_graph", "read_urls", "write_graph"]

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
    with _open_text(path) as fh:
        out, seen, comments, declared_nodes, declared_edges, raw_edges = _read_edges(fh, fname)
    duplicates = _drop_duplicates(out)
    return Graph(
        nodes=sorted(_node_set(seen, declared_nodes)),
        out=out,
        edges=raw_edges - duplicates,
        name=_graph_name(path),
        duplicates=duplicates,
        declared_nodes=declared_nodes,
        declared_edges=declared_edges,
        comments=comments,
    )


def _read_edges(
    fh: IO[str], fname: str
) -> tuple[dict[int, list[int]], set[int], list[str], int | None, int | None, int]:
    """The arcs of an open edge-list file as read: ``(out-links per source, every id
    seen, header comments, declared nodes, declared edges, arcs read)``. Raises
    :class:`GraphFormatError` as :func:`read_graph` does."""
    out: dict[int, list[int]] = {}
    cache: dict[str, int] = {}
    comments: list[str] = []
    declared_nodes: int | None = None
    declared_edges: int | None = None
    raw_edges = 0
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
    return out, set(cache.values()), comments, declared_nodes, declared_edges, raw_edges


def _drop_duplicates(out: dict[int, list[int]]) -> int:
    """Repeated arcs dropped from ``out`` in place (first occurrence kept); returns how many."""
    duplicates = 0
    for s, lst in out.items():
        if len(lst) > 1:
            uniq = dict.fromkeys(lst)
            if len(uniq) != len(lst):
                duplicates += len(lst) - len(uniq)
                out[s] = list(uniq)
    return duplicates


def _node_set(seen: set[int], declared_nodes: int | None) -> set[int]:
    """The ids seen plus the header's declared range (``1..N`` for an evidently
    1-based file: id N used, id 0 never)."""
    nodes_set = seen
    if declared_nodes is not None:
        n = declared_nodes
        if seen and 0 not in seen and max(seen) == n and min(seen) >= 1:
            declared = range(1, n + 1)  # 1-based file (e.g. polblogs)
        else:
            declared = range(n)
        nodes_set = seen.union(declared)
    return nodes_set


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



def write_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` in the edge-list format :func:`read_graph` reads (gzip, deterministic)."""
    lines = [f"#{c}" for c in graph.comments]
    n = len(graph.nodes)
    if n and graph.nodes[0] == 0 and graph.nodes[-1] == n - 1:  # the header declares ids 0..n-1
        lines.append(f"# Nodes: {n} Edges: {graph.edges}")
    lines.append("# FromNodeId\tToNodeId")
    _write_gz(os.fspath(path), [*lines, *(f"{u}\t{v}" for u in sorted(graph.out) for v in graph.out[u])])
