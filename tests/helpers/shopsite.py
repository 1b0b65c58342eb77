"""A small real shop website (twisted.web) with the request patterns Scrapy
projects use, for the drop-in tests.

- ``/``: links to the categories, to a redirect, to a page that fails once
  (503, then 200), to a missing page, and off-site.
- ``/cat/<c>``: links to its products.
- ``/product/<n>``: a product page (``<h1>`` name, ``.price``).
- ``POST /search`` with form field ``page``: a page of results; pages 1..3 of the
  same URL differ only in the body (POST pagination).
- ``POST /api/products`` with a JSON body ``{"page": n}``: JSON results.
- ``/go/<n>``: 302 to ``/product/<n>``; ``/flaky``: 503 the first time, then 200;
  ``/missing``: 404; ``/sitemap.xml``: every product.

``python tests/helpers/shopsite.py [--port N]`` prints ``serving shop at http://127.0.0.1:PORT/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import parse_qs

CATEGORIES = {"books": range(1, 7), "music": range(7, 12)}
SEARCH_PAGES = {1: [12, 13], 2: [14, 15], 3: [16]}
API_PAGES = {1: [17, 18], 2: [19]}
PRODUCTS = range(1, 21)


def _page(title: str, body: str) -> bytes:
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def main(argv: list[str] | None = None) -> int:
    from twisted.internet import reactor
    from twisted.web import resource, server

    flaky_seen: dict[str, int] = {}

    class Shop(resource.Resource):
        isLeaf = True

        def render(self, request):  # noqa: C901 - one branch per route
            path = request.path.decode()
            method = request.method.decode()
            request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
            if path == "/" and method == "GET":
                links = "".join(f'<a href="/cat/{c}">{c}</a>' for c in CATEGORIES)
                links += '<a href="/go/20">deal</a><a href="/flaky">flaky</a><a href="/missing">gone</a>'
                links += '<a href="http://offsite.invalid/page">elsewhere</a>'
                return _page("shop", links)
            if path.startswith("/cat/") and path[5:] in CATEGORIES:
                ids = CATEGORIES[path[5:]]
                return _page(path[5:], "".join(f'<a class="p" href="/product/{n}">p{n}</a>' for n in ids))
            if path.startswith("/product/") and path[9:].isdigit() and int(path[9:]) in PRODUCTS:
                n = int(path[9:])
                return _page(f"product {n}", f'<h1>Product {n}</h1><span class="price">{n * 1.5:.2f}</span>')
            if path == "/search" and method == "POST":
                form = parse_qs(request.content.read().decode())
                page = int(form.get("page", ["1"])[0])
                ids = SEARCH_PAGES.get(page, [])
                more = f'<span class="next">{page + 1}</span>' if page + 1 in SEARCH_PAGES else ""
                return _page(f"search {page}", "".join(f'<a class="p" href="/product/{n}">p{n}</a>' for n in ids) + more)
            if path == "/api/products" and method == "POST":
                request.setHeader(b"Content-Type", b"application/json")
                page = int(json.loads(request.content.read() or b"{}").get("page", 1))
                return json.dumps({"page": page, "ids": API_PAGES.get(page, []),
                                   "next": page + 1 if page + 1 in API_PAGES else None}).encode()
            if path.startswith("/go/") and path[4:].isdigit():
                request.setResponseCode(302)
                request.setHeader(b"Location", f"/product/{path[4:]}".encode())
                return b""
            if path == "/flaky":
                flaky_seen[path] = flaky_seen.get(path, 0) + 1
                if flaky_seen[path] % 2 == 1:
                    request.setResponseCode(503)
                    return _page("busy", "try again")
                return _page("flaky", "<h1>Flaky</h1>")
            if path == "/sitemap.xml":
                request.setHeader(b"Content-Type", b"application/xml")
                base = f"http://{request.getHost().host}:{request.getHost().port}"
                urls = "".join(f"<url><loc>{base}/product/{n}</loc></url>" for n in PRODUCTS)
                return (f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/'
                        f'schemas/sitemap/0.9">{urls}</urlset>').encode()
            request.setResponseCode(404)
            return _page("not found", "no such page")

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    port = reactor.listenTCP(args.port, server.Site(Shop()), interface="127.0.0.1")
    print(f"serving shop at http://127.0.0.1:{port.getHost().port}/", flush=True)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
