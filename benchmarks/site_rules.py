"""Variants of the ``push`` rule on real site graphs, exact order (issue 13's search).

Replays each site graph written by ``benchmarks/realsite_order.py --graph-out DIR``
(node 0 is the start URL) through the pure-Python statement of the rule
(:class:`ipr_crawl.ordering.reference.ReferenceFrontier`), one page at a time, with
the frontier's pop key changed as the variant says, and prints B (the exact PageRank
mass of the first 10 % of the site's pages fetched) per site:

- ``ordering=bf`` / ``ordering=blc`` / ``ordering=push``: the rules as they are;
- ``startmass=M``: the start URL begins with mass M (units of ``IPR_INITIAL_SCORE``;
  a teleport to the start URL, personalised PageRank);
- ``depth=K``: priority x K^depth, depth = fewest links from the start URL;
- ``urldepth=K``: priority x K^u, u = the URL's '/' count less the start URL's (the
  location metric of Cho, Garcia-Molina & Page, WWW 1998, §2; needs ``<site>.urls.tsv.gz``);
- ``conf=K``: priority x c / (c + K), c = fetched pages linking to the URL;
- ``inpow=K``: priority x c^K (push toward ``blc``);
- ``tie=url``: equal keys go by the URL's BLC tie key (fewer '/', then shorter) before
  discovery order, as the store's ``blc`` does;
- ``tie=page``: a page's links are numbered (discovery order, and the order of its
  out-links) by the URL's BLC tie key, then document order: the URL tie key among the
  new URLs of one page only;
- ``band=R``: keys within a factor 1 + R of each other are equal (the key's logarithm
  to base 1 + R, rounded down), so that the tie rule decides among them;
- ``known=P``: each fetched page adds (fetched / known URLs)^P instead of 1 (the start
  URL 1): link mass counts more while the frontier is large against what was fetched;
- ``mix=R``: every R-th page is the queued URL found first (breadth-first), the others
  by the key.
- ``budget=N`` / ``damping=D``: ``push``'s ``IPR_PUSH_BUDGET`` / ``IPR_PUSH_DAMPING``.
- ``addc=K``: priority + K x c x (known URLs - fetched) / (out-links recorded): the
  in-link mass a URL may get from the pages not fetched yet, if they link to it as the
  fetched ones do (c of them per fetched page), each link worth a mean out-link's share;
  ``addcap=M``: that term at most M x the priority.

    python benchmarks/site_rules.py --graphs DIR --sites python,django,postgres \\
        ordering=push ordering=bf ordering=blc startmass=50 depth=0.4 conf=3

(``bf`` and ``blc`` without URL tie keys unless ``tie=url``.) Measured 2026-11-23 and
2026-11-25: docs/research/orderings.md, "Three more rules tried" and "Sites outside realweb".
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from ipr_crawl.evaluation.graphio import Graph, pagerank, read_graph, read_urls
from ipr_crawl.ordering.params import OrderingParams
from ipr_crawl.ordering.reference import QUEUED, Node, ReferenceFrontier
from ipr_crawl.ordering.urls import tie_key


def crawl(g: Graph, params: OrderingParams, budget: int, key: Callable[[float, int, int, int], float],
          start_mass: float, known_power: float | None = None, mix: int = 0,
          urls: dict[int, str] | None = None, url_ties: bool = False, addc: float = 0.0,
          addcap: float = float("inf"), band: float = 0.0, page_ties: bool = False) -> list[int]:
    """Fetch order of the first ``budget`` pages from node 0, popping the queued URL of
    largest ``key(priority, fetched in-linkers, depth, URL depth)`` (URL depth: its '/'
    count less the start URL's, ``urls`` by node; ties: with ``url_ties`` the smaller BLC tie
    key of the URL, then discovery order);
    ``known_power`` P: the page fetched k-th adds (k / known URLs)^P; ``addc`` K: the key
    plus K x c x (known URLs - fetched) / out-links recorded, at each pop, at most ``addcap``
    x the priority; ``band`` R: keys compared as floor(log_(1+R) key)."""
    urls = urls or {}
    ties = {n: tie_key(u) for n, u in urls.items()} if url_ties else {}
    page_key = {n: tie_key(u) for n, u in urls.items()} if page_ties else {}
    slashes = {n: u.count("/") for n, u in urls.items()}
    top = slashes.get(0, 0)
    f = ReferenceFrontier(params)
    f.enqueue(0, 0)
    f.nodes[0].s += start_mass
    inlinks: dict[int, int] = {}
    depth = {0: 0}
    order: list[int] = []
    out_total = 0
    while len(order) < budget:
        # addc: the in-links a queued URL may have among the pages not fetched yet, c x (known
        # URLs - fetched) / fetched, each worth a mean out-link's share, 1 / (out-links / fetched)
        lift = addc * (len(f.nodes) - len(order)) / out_total if out_total else 0.0
        queued = [(k, n) for k, n in f.nodes.items() if n.state == QUEUED and k not in f.in_flight]
        if not queued:
            break
        def full(kn: tuple[int, Node], lift: float = lift) -> float:
            k = (key(kn[1].s, inlinks.get(kn[0], 0), depth[kn[0]], slashes.get(kn[0], top) - top)
                 + min(lift * inlinks.get(kn[0], 0), addcap * kn[1].s))
            if band and k > 0:
                return float(math.floor(math.log(k) / math.log1p(band)))
            return k
        if mix and len(order) % mix == mix - 1:
            page = min(queued, key=lambda kn: kn[1].seq)[0]
        else:
            page = min(queued, key=lambda kn: (-full(kn), ties.get(kn[0], 0), kn[1].seq))[0]
        f.in_flight.add(page)
        order.append(page)
        if known_power is not None:
            f.initial = (len(order) / len(f.nodes)) ** known_power
        links = list(dict.fromkeys(g.out.get(page, ())))
        if page_ties:
            links.sort(key=lambda t: page_key.get(t, 0))
        out_total += len(links)
        for t in links:
            inlinks[t] = inlinks.get(t, 0) + 1
            depth[t] = min(depth.get(t, depth[page] + 1), depth[page] + 1)
        f.record_page(page, 0, [(t, 0) for t in links])
    return order


Key = Callable[[float, int, int, int], float]


def make_key(kind: str, k: float) -> Key:
    """The pop key of a variant: the priority as it is, x k^depth, x k^(URL depth), or
    x c / (c + k)."""
    def key(s: float, c: int, d: int, u: int) -> float:
        if kind == "depth":
            return s * k**d
        if kind == "urldepth":
            return s * k**u
        if kind == "conf":
            return s * c / (c + k)
        if kind == "inpow":
            return s * c**k
        return s
    return key


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", required=True, help="folder of <site>.tsv.gz (realsite_order.py --graph-out)")
    ap.add_argument("--sites", default="python,django,postgres,scipy,boost,linux")
    ap.add_argument("--fraction", type=float, default=0.10)
    ap.add_argument("variants", nargs="+", help="ordering=NAME, startmass=M, depth=K, conf=K, known=P, mix=R, addc=K, addcap=M, band=R, tie=url, tie=page (comma-joined)")
    args = ap.parse_args(argv)
    sites = [s.strip() for s in args.sites.split(",") if s.strip()]
    graphs = {}
    urls: dict[str, dict[int, str]] = {}
    for site in sites:
        g = read_graph(f"{args.graphs}/{site}.tsv.gz")
        url_file = f"{args.graphs}/{site}.urls.tsv.gz"
        urls[site] = read_urls(url_file) if os.path.exists(url_file) else {}
        graphs[site] = (g, pagerank(g), max(1, round(args.fraction * len(g.nodes))))
    print(f"{'variant':32s} " + " ".join(f"{s:>9s}" for s in sites) + "      mean")
    for variant in args.variants:
        ordering, start_mass, known_power, mix, url_ties, addc, addcap = "push", 0.0, None, 0, False, 0.0, float("inf")
        page_ties = False
        band = 0.0
        key = make_key("", 0.0)
        extra: dict[str, float] = {}
        for part in variant.split(","):
            name, _, value = part.partition("=")
            if name == "ordering":
                ordering = value
            elif name == "startmass":
                start_mass = float(value)
            elif name == "addc":
                addc = float(value)
            elif name == "addcap":
                addcap = float(value)
            elif name == "band":
                band = float(value)
            elif name == "mix":
                mix = int(value)
            elif name == "known":
                known_power = float(value)
            elif name == "tie" and value == "url":
                url_ties = True
            elif name == "tie" and value == "page":
                page_ties = True
            elif name in ("budget", "damping"):
                extra[f"push_{name}"] = int(value) if name == "budget" else float(value)
            elif name in ("depth", "urldepth", "conf", "inpow"):
                key = make_key(name, float(value))
            else:
                ap.error(f"unknown variant part {part!r}")
        params = OrderingParams(ordering=ordering, cutoff="dl1" if ordering == "ipr" else "", **extra)
        row = [sum(pr[n] for n in crawl(g, params, budget, key, start_mass, known_power, mix, urls[site], url_ties, addc,
                                           addcap, band, page_ties))
               for site, (g, pr, budget) in graphs.items()]
        print(f"{variant:32s} " + " ".join(f"{b:9.3f}" for b in row) + f" {sum(row) / len(row):9.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
