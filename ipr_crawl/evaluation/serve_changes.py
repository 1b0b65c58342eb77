"""Serve a real change log over HTTP at a simulated clock: each page as it was then.

``ipr-crawl serve-changes --changes C.csv.gz --pages P.csv.gz --port N
[--start DATE] [--speed X] [--resolution 1d] [--noise]`` serves every page of
the log (the change-log format of ``tests/data``) at its URL's path (``/host/path``
when the log has several hosts) while the page exists at the simulated time
(404 before ``first_seen`` and after ``last_seen``). The body is derived from
the page's version number (how many changes happened up to the clock): the
same version always gives the same bytes, a new version a different text of
~150 words. Responses carry ``Last-Modified`` (the latest change, or
``first_seen``), a strong ``ETag`` (hash of the body), ``Cache-Control:
no-cache`` (a cache must revalidate), and conditional requests are answered
with 304 (RFC 9110 §13.1: ``If-None-Match`` first, ``If-Modified-Since`` only
without it). ``--noise`` adds a per-request counter to the body and sends no validators
(a dynamic page: it changes on every fetch for a byte hash, not for a
near-duplicate hash).

The clock: ``--start`` (default: the earliest ``first_seen``) plus real time
elapsed times ``--speed`` (default 0: stopped); ``POST /_ipr/clock?advance=SECS``
or ``?set=ISO`` moves it; ``GET /_ipr/clock`` reads it (JSON). A request with
an ``Ipr-Sim-Time`` header (s since the epoch; the crawler's virtual clock,
``IPR_REVISIT_CLOCK``) is answered as of that instant. With ``--resolution``
(e.g. ``1d``) time goes in buckets as in ``revisit-sim``: a request in bucket
``d`` sees every change of buckets ``<= d``, changes of one bucket are one
version and Last-Modified is the start of the change's bucket.

Other resources: ``/_ipr/index`` links every page alive at the clock;
``/_ipr/sitemap.xml`` lists them as a sitemap (sitemaps.org 0.9), each with its
``<lastmod>``: its Last-Modified instant, or with ``--sitemap-lastmod`` a wrong one as
sites publish them: ``frozen`` (the page's first version, never moves), ``build``
(the start of the current day, as a site rebuilt daily stamps every page) or
``partial`` (frozen for half the pages, chosen by a hash of the URL, true for the rest);
``/_ipr/pages.tsv`` lists ``url<TAB>path``; ``/_ipr/log.tsv`` lists every page
request served: ``sim time, path, status, If-None-Match values received,
If-Modified-Since values received``. Once listening it prints
``serving changes: <n> pages at http://host:port/_ipr/index`` (flushed).
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import html
import json
import random
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from twisted.web import http, resource, server

from ipr_crawl.evaluation.changelog import Page, load_log, parse_time
from ipr_crawl.revisit.budget import in_share
from ipr_crawl.revisit.policy import DAY, bucket, parse_duration

__all__ = ["ChangeSite", "add_serve_changes_parser", "main"]

_WORDS = ["emacs", "lisp", "buffer", "window", "frame", "mode", "hook", "key", "map", "face", "file", "directory", "page", "wiki", "edit", "command", "function", "variable", "package", "library", "version", "change", "list", "tree", "node", "string", "number", "search", "replace", "region", "mark", "point", "line", "column", "cursor", "text", "font", "color", "theme", "menu", "tool", "server", "client", "process", "shell", "terminal", "remote", "network", "mail", "news", "calendar", "diary", "org", "agenda"]


def _path(url: str, multi_host: bool) -> str:
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return f"/{parts.netloc}{path}" if multi_host else path


#: What ``/_ipr/sitemap.xml`` gives as a page's ``<lastmod>`` (see the module doc).
SITEMAP_LASTMODS = ("changes", "frozen", "build", "partial")


class ChangeSite(resource.Resource):
    """The pages of a change log at a simulated clock (see the module doc)."""

    isLeaf = True

    def __init__(
        self,
        pages: Sequence[Page],
        start: float,
        speed: float = 0.0,
        resolution: float = 0.0,
        noise: bool = False,
        sitemap_lastmod: str = "changes",
    ) -> None:
        super().__init__()
        if sitemap_lastmod not in SITEMAP_LASTMODS:
            raise ValueError(f"sitemap_lastmod {sitemap_lastmod!r}: one of {', '.join(SITEMAP_LASTMODS)}")
        self.sitemap_lastmod = sitemap_lastmod
        self.pages = list(pages)
        hosts = {urlsplit(p.url).netloc for p in self.pages}
        self.multi_host = len(hosts) > 1
        self.by_path = {_path(p.url, self.multi_host): p for p in self.pages}
        self.resolution = float(resolution)
        self.noise = noise
        self.served = 0
        self.log: list[tuple[float, str, int, list[str], list[str]]] = []
        self._origin = float(start)
        self._real0 = time.monotonic()
        self.speed = float(speed)
        # change instants (or buckets) after first_seen, per page
        self._changes: dict[str, list[float]] = {}
        for p in self.pages:
            if self.resolution > 0:
                d0 = bucket(p.first_seen, self.resolution)
                cs = sorted({bucket(c, self.resolution) for c in p.changes if p.first_seen < c <= p.last_seen})
                self._changes[p.url] = [c for c in cs if c > d0]
            else:
                self._changes[p.url] = [c for c in p.changes if p.first_seen < c <= p.last_seen]

    # -- the clock -------------------------------------------------------------------------
    def now(self) -> float:
        return self._origin + (time.monotonic() - self._real0) * self.speed

    def set_now(self, t: float) -> None:
        self._origin = float(t)
        self._real0 = time.monotonic()

    def _view(self, t: float) -> float:
        return bucket(t, self.resolution) if self.resolution > 0 else t

    # -- pages ----------------------------------------------------------------------------------
    def _first(self, page: Page) -> float:
        """The instant (or bucket) of ``page``'s first version."""
        return bucket(page.first_seen, self.resolution) if self.resolution > 0 else page.first_seen

    def alive(self, page: Page, t: float) -> bool:
        return self._first(page) <= self._view(t) <= page.last_seen

    def version(self, page: Page, t: float) -> tuple[int, float]:
        """``(version number, its Last-Modified instant)`` of ``page`` at ``t``."""
        changes = self._changes[page.url]
        k = bisect.bisect_right(changes, self._view(t))
        if k:
            return k, changes[k - 1]
        return 0, self._first(page)

    def lastmod(self, page: Page, t: float) -> float:
        """The sitemap's ``<lastmod>`` (s) of ``page`` at ``t``, by ``sitemap_lastmod``."""
        if self.sitemap_lastmod == "frozen" or (self.sitemap_lastmod == "partial" and not in_share(page.url, 0.5)):
            return self._first(page)
        if self.sitemap_lastmod == "build":
            return bucket(t, DAY)
        return self.version(page, t)[1]

    def body(self, page: Page, version: int) -> bytes:
        rng = random.Random(hashlib.sha1(f"{page.url}\n{version}".encode()).digest())
        words = " ".join(rng.choice(_WORDS) for _ in range(150))
        title = html.escape(page.url)
        counter = f"<p>Visitors: {self.served}</p>" if self.noise else ""
        return (
            f"<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>version {version}</p><p>{words}</p>{counter}</body></html>\n"
        ).encode()

    # -- HTTP ------------------------------------------------------------------------------------
    def _json(self, request: server.Request, data: Any) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return (json.dumps(data) + "\n").encode()

    def _clock(self, request: server.Request) -> bytes:
        if request.method == b"POST":
            args = parse_qs(urlsplit(request.uri.decode("latin-1")).query)
            try:
                if "advance" in args:
                    self.set_now(self.now() + parse_duration(args["advance"][0]))
                elif "set" in args:
                    self.set_now(parse_time(args["set"][0]))
            except ValueError as exc:
                request.setResponseCode(http.BAD_REQUEST)
                return self._json(request, {"error": str(exc)})
        t = self.now()
        return self._json(request, {"now": t, "iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), "speed": self.speed})

    def render(self, request: server.Request) -> bytes:  # GET, HEAD, POST
        raw = request.uri.decode("latin-1").split("#", 1)[0]
        if "://" in raw.split("?", 1)[0]:
            rest = raw.split("://", 1)[1]
            raw = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        if raw.split("?", 1)[0] == "/_ipr/clock":
            return self._clock(request)
        sim = request.getHeader(b"ipr-sim-time")
        try:
            t = float(sim) if sim else self.now()
        except ValueError:
            t = self.now()
        if raw == "/_ipr/index":
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            links = "".join(
                f'<li><a href="{html.escape(path)}">{html.escape(p.url)}</a></li>'
                for path, p in self.by_path.items() if self.alive(p, t)
            )
            return f"<!DOCTYPE html><html><body><ul>{links}</ul></body></html>\n".encode()
        if raw == "/_ipr/sitemap.xml":  # sitemaps.org 0.9: each live page, lastmod = Last-Modified
            request.setHeader(b"content-type", b"application/xml; charset=utf-8")
            host = (request.getHeader(b"host") or b"localhost").decode("latin-1")
            entries = "".join(
                f"<url><loc>http://{html.escape(host)}{html.escape(path)}</loc><lastmod>"
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.lastmod(p, t)))}</lastmod></url>"
                for path, p in self.by_path.items() if self.alive(p, t)
            )
            return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                    f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>\n').encode()
        if raw == "/_ipr/pages.tsv":
            request.setHeader(b"content-type", b"text/tab-separated-values; charset=utf-8")
            return "".join(f"{p.url}\t{path}\n" for path, p in self.by_path.items()).encode()
        if raw == "/_ipr/log.tsv":
            request.setHeader(b"content-type", b"text/tab-separated-values; charset=utf-8")
            return "".join(
                f"{t_!r}\t{path}\t{status}\t{'|'.join(inm)}\t{'|'.join(ims)}\n" for t_, path, status, inm, ims in self.log
            ).encode()
        page = self.by_path.get(raw)
        inm = [v.decode("latin-1") for v in request.requestHeaders.getRawHeaders(b"if-none-match", [])]
        ims = [v.decode("latin-1") for v in request.requestHeaders.getRawHeaders(b"if-modified-since", [])]
        if page is None or not self.alive(page, t):
            request.setResponseCode(http.NOT_FOUND)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            if page is not None:
                self.log.append((t, raw, 404, inm, ims))
            return b"404 not found\n"
        self.served += 1
        version, modified = self.version(page, t)
        body = self.body(page, version)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        status = 200
        if self.noise:  # a dynamic page: no validators, new bytes every time
            self.log.append((t, raw, status, inm, ims))
            return body
        etag = '"' + hashlib.sha1(body).hexdigest()[:20] + '"'
        request.setHeader(b"etag", etag.encode())
        request.setHeader(b"last-modified", http.datetimeToString(int(modified)))
        if inm:
            tags = {tag.strip() for value in inm for tag in value.split(",")}
            if etag in tags or "*" in tags:
                status = 304
        elif ims:
            since = http.stringToDatetime(ims[0].encode("latin-1")) if ims[0] else None
            if since is not None and int(modified) <= since:
                status = 304
        self.log.append((t, raw, status, inm, ims))
        if status == 304:
            request.setResponseCode(http.NOT_MODIFIED)
            return b""
        return body


def add_serve_changes_parser(sub: Any) -> None:
    """Register ``ipr-crawl serve-changes``."""
    p = sub.add_parser(
        "serve-changes",
        help="serve a change log over HTTP at a simulated clock",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _arguments(p)
    p.set_defaults(func=_run)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--changes", required=True)
    p.add_argument("--pages", required=True)
    p.add_argument("--port", type=int, default=8102, help="0: any free port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--start", help="simulated start (ISO 8601); default: the earliest first_seen")
    p.add_argument("--speed", type=float, default=0.0, help="simulated seconds per real second (0: stopped)")
    p.add_argument("--resolution", default="0", help="time buckets, e.g. 1d (default: exact instants)")
    p.add_argument("--noise", action="store_true", help="a per-request counter in every body")
    p.add_argument("--sitemap-lastmod", choices=SITEMAP_LASTMODS, default="changes",
                   help="the sitemap's <lastmod>: each page's Last-Modified (changes), its first version (frozen), "
                        "today (build), or frozen for half the pages (partial)")


def _run(args: argparse.Namespace) -> int:
    from twisted.internet import reactor

    pages = load_log(args.changes, args.pages)
    if not pages:
        print("no pages in the log", file=sys.stderr)
        return 2
    start = parse_time(args.start) if args.start else min(p.first_seen for p in pages)
    site = ChangeSite(pages, start, args.speed, parse_duration(args.resolution), args.noise, args.sitemap_lastmod)
    the_reactor: Any = reactor
    port = the_reactor.listenTCP(args.port, server.Site(site), interface=args.host)
    print(f"serving changes: {len(pages)} pages at http://{args.host}:{port.getHost().port}/_ipr/index", flush=True)
    the_reactor.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ipr_crawl.evaluation.serve_changes ...`` (same arguments as the sub-command)."""
    p = argparse.ArgumentParser(prog="serve-changes", description=__doc__)
    _arguments(p)
    return _run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
