"""A small real HTTP server (twisted.web) serving malformed input for crawls.

Every case of :data:`CASES` has an ASCII entry page linked from ``/``; the
malformed part is in that page's headers (ETag, Last-Modified), its body, its
status (redirect loops, ...) or the one link it holds (odd schemes, IDNA,
percent-encoding, 10 kB URLs, ...). The server also answers as an HTTP proxy:
a crawl run with ``http_proxy`` pointing at it fetches *any* http URL from it
(request line ``GET http://host/path``), so links to IDNA hosts need no DNS.
Unknown paths are 404.

``python tests/helpers/badsite.py [--port N]`` prints
``serving badsite at http://127.0.0.1:PORT/`` and serves until killed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import sys
from dataclasses import dataclass, field
from urllib.parse import urlsplit

#: Over-cap link page: distinct on-site links on one page.
MANY_LINKS = 100_000
#: Size of the big body.
BIG_BODY = 50 * 1024 * 1024
TEN_KB_PATH = "/t/" + "a" * (10 * 1024)
HUNDRED_KB_PATH = "/t/" + "b" * (100 * 1024)


@dataclass
class Case:
    """One malformed input.

    ``entry``: path of the page the index links to. ``expect``: regexes the
    crawl's log must match (``{base}`` is the site's ``http://127.0.0.1:PORT``).
    ``headers``: extra response headers of the entry page (raw bytes allowed);
    ``body``/``ctype``/``status`` override the default small HTML page; ``link``:
    the one href the entry page holds.
    """

    name: str
    kind: str
    entry: str = ""
    expect: list[str] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    link: str | None = None
    status: int = 200
    ctype: bytes = b"text/html; charset=utf-8"
    body: bytes | None = None

    def __post_init__(self) -> None:
        self.entry = self.entry or f"/{self.kind}/{self.name}"


def _crawled(path: str, status: int = 200) -> str:
    """Regex of Scrapy's fetch log line of ``{base}path``."""
    return rf"Crawled \({status}\) <GET {{base}}{re.escape(path)}>"


def _fetched_ok(path: str) -> str:
    return _crawled(path)


def _skipped(reason: str) -> str:
    return rf"not following \S.* \({reason}\)"


def _header_case(name: str, *headers: tuple[bytes, bytes]) -> Case:
    path = f"/h/{name}"
    return Case(name, "h", expect=[_fetched_ok(path)], headers=list(headers))


def _url_case(name: str, link: str, *expect: str) -> Case:
    return Case(name, "u", link=link, expect=[_fetched_ok(f"/u/{name}"), *expect])


def _body_case(name: str, body: bytes, ctype: bytes = b"text/html; charset=utf-8", *expect: str,
               headers: list[tuple[bytes, bytes]] | None = None) -> Case:
    path = f"/b/{name}"
    return Case(name, "b", expect=list(expect) or [_fetched_ok(path)], body=body, ctype=ctype,
                headers=headers or [])


_rng = random.Random(5)
_BINARY = bytes(_rng.randrange(256) for _ in range(4096))
_PAGE = b"<!DOCTYPE html><html><head><title>%s</title></head><body>%s</body></html>"

CASES: list[Case] = [
    # -- ETag -----------------------------------------------------------------------------
    _header_case("etag-empty", (b"ETag", b"")),
    _header_case("etag-empty-quotes", (b"ETag", b'""')),
    _header_case("etag-huge-8k", (b"ETag", b'"' + b"e" * 8000 + b'"')),
    _header_case("etag-huge-15k", (b"ETag", b'"' + b"e" * 15000 + b'"')),
    _header_case("etag-non-ascii-utf8", (b"ETag", '"café-ß-日本"'.encode())),
    _header_case("etag-non-ascii-latin1", (b"ETag", b'"caf\xe9"')),
    _header_case("etag-control-chars", (b"ETag", b'"a\x01\x7fb"')),
    _header_case("etag-weak", (b"ETag", b'W/"weak-1"')),
    _header_case("etag-unquoted", (b"ETag", b"unquoted-etag")),
    _header_case("etag-star", (b"ETag", b"*")),
    _header_case("etag-twice", (b"ETag", b'"one"'), (b"ETag", b'"two"')),
    # -- Last-Modified ----------------------------------------------------------------------
    _header_case("lm-empty", (b"Last-Modified", b"")),
    _header_case("lm-huge", (b"Last-Modified", b"Sun, 06 Nov 1994 08:49:37 GMT" + b" x" * 4000)),
    _header_case("lm-non-ascii", (b"Last-Modified", "Sön, 06 Növ 1994 08:49:37 GMT".encode())),
    _header_case("lm-future", (b"Last-Modified", b"Fri, 31 Dec 9999 23:59:59 GMT")),
    _header_case("lm-future-near", (b"Last-Modified", b"Sat, 01 Jan 2050 00:00:00 GMT")),
    _header_case("lm-rfc1123", (b"Last-Modified", b"Sun, 06 Nov 1994 08:49:37 GMT")),
    _header_case("lm-rfc850", (b"Last-Modified", b"Sunday, 06-Nov-94 08:49:37 GMT")),
    _header_case("lm-rfc850-century", (b"Last-Modified", b"Friday, 31-Dec-99 23:59:59 GMT")),
    _header_case("lm-asctime", (b"Last-Modified", b"Sun Nov  6 08:49:37 1994")),
    _header_case("lm-asctime-unpadded", (b"Last-Modified", b"Sun Nov 6 08:49:37 1994")),
    _header_case("lm-epoch", (b"Last-Modified", b"Thu, 01 Jan 1970 00:00:00 GMT")),
    _header_case("lm-before-epoch", (b"Last-Modified", b"Mon, 01 Jan 1900 00:00:00 GMT")),
    _header_case("lm-year-zero", (b"Last-Modified", b"Sat, 01 Jan 0000 00:00:00 GMT")),
    _header_case("lm-numeric", (b"Last-Modified", b"784111777")),
    _header_case("lm-iso8601", (b"Last-Modified", b"1994-11-06T08:49:37Z")),
    _header_case("lm-offset", (b"Last-Modified", b"Sun, 06 Nov 1994 08:49:37 +0200")),
    _header_case("lm-out-of-range", (b"Last-Modified", b"Sun, 32 Nov 1994 25:61:61 GMT")),
    _header_case("lm-twice", (b"Last-Modified", b"Sun, 06 Nov 1994 08:49:37 GMT"),
                 (b"Last-Modified", b"garbage")),
    _header_case("both-garbage", (b"ETag", b"\xff\xfe"), (b"Last-Modified", b"\xff\xfe")),
    # -- URLs -----------------------------------------------------------------------------
    _url_case("scheme-ftp", "ftp://127.0.0.1/pub/file.txt", _skipped("scheme")),
    _url_case("scheme-mailto", "mailto:someone@example.org", _skipped("scheme")),
    _url_case("scheme-javascript", "javascript:alert(1)", _skipped("scheme")),
    _url_case("scheme-data", "data:text/html,<a href=/x>x</a>", _skipped("scheme")),
    _url_case("scheme-file", "file:///etc/passwd", _skipped("scheme")),
    _url_case("scheme-tel", "tel:+1-555-0100", _skipped("scheme")),
    _url_case("scheme-unknown", "foo+bar://host/path", _skipped("scheme")),
    _url_case("scheme-ws", "ws://127.0.0.1/socket", _skipped("scheme")),
    _url_case("scheme-uppercase", "HTTP://{host}/t/upper-scheme", _fetched_ok("/t/upper-scheme")),
    _url_case("protocol-relative", "//{host}/t/protocol-relative", _fetched_ok("/t/protocol-relative")),
    _url_case("fragment-only", "#section-2", _skipped("fragment")),
    _url_case("fragment-self", "/u/fragment-self#top"),
    _url_case("fragment-other", "/t/fragment-target#part", r"Crawled \(200\) <GET {base}/t/fragment-target(#part)?>"),
    _url_case("idna-host", "http://bücher.example/t/idna", r"Crawled \(200\) <GET http://xn--bcher-kva\.example/t/idna>"),
    _url_case("idna-emoji-host", "http://☃.example/t/snowman", r"Crawled \(200\) <GET http://xn--n3h\.example/t/snowman>"),
    _url_case("idna-invalid-label", "http://" + "x" * 70 + ".example/t/long-label",
              r"(not following \S+ \(invalid\)|Crawled \(\d+\) <GET http://x{70}\.example/t/long-label>|Error downloading <GET http://x{70})"),
    _url_case("pct-tilde", "/t/%7Euser", r"Crawled \(200\) <GET {base}/t/(%7E|~)user>"),
    _url_case("pct-utf8", "/t/%E2%82%AC-euro", _fetched_ok("/t/%E2%82%AC-euro")),
    _url_case("pct-raw-unicode", "/t/€-raw", _fetched_ok("/t/%E2%82%AC-raw")),
    _url_case("pct-invalid", "/t/bad%zz%", r"Crawled \(200\) <GET {base}/t/bad%(25)?zz%(25)?>"),
    _url_case("pct-slash", "/t/a%2Fb", _fetched_ok("/t/a%2Fb")),
    _url_case("space-in-path", "/t/a b c", _fetched_ok("/t/a%20b%20c")),
    _url_case("query-odd", "/t/q?b=2&a=1&a=&&=x", r"Crawled \(200\) <GET {base}/t/q\?\S*>"),
    _url_case("url-10kb", TEN_KB_PATH, _fetched_ok(TEN_KB_PATH)),
    _url_case("url-100kb", HUNDRED_KB_PATH, r"Ignoring link \(url length > \d+\): {base}/t/bbbb"),
    _url_case("port-out-of-range", "http://127.0.0.1:99999/t/port", _skipped("invalid")),
    _url_case("ipv6-unclosed", "http://[::1/t/ipv6", _skipped("invalid")),
    _url_case("empty-host", "http:///t/empty-host", r"(not following \S+ \((invalid|host)\)|Crawled \(\d+\) <GET http:///t/empty-host>)"),
    _url_case("userinfo", "http://user:pw@{host}/t/userinfo", r"Crawled \(200\) <GET http://(user:pw@)?{hostre}/t/userinfo>"),
    _url_case("backslashes", "\\t\\backslash", r"Crawled \((200|404)\) <GET {base}\S*backslash>"),
    _url_case("whitespace-around", "  \n /t/whitespace \t ", _fetched_ok("/t/whitespace")),
    # -- bodies ---------------------------------------------------------------------------
    _body_case("empty", b""),
    _body_case("binary-as-html", _BINARY),
    _body_case("binary-octet-stream", _BINARY, b"application/octet-stream"),
    _body_case("big-50mb", b"", b"text/html; charset=utf-8",
               _fetched_ok("/b/big-50mb"), _fetched_ok("/t/after-big-body")),
    _body_case("json", b'{"links": ["/t/not-a-link"]}', b"application/json"),
    _body_case("pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF", b"application/pdf"),
    _body_case("png", b"\x89PNG\r\n\x1a\n" + _BINARY[:512], b"image/png"),
    _body_case("text-plain-urls", b"see /t/not-followed and http://127.0.0.1/\n", b"text/plain"),
    _body_case("rss-xml", b'<?xml version="1.0"?><rss><channel><link>/t/rss-link</link></channel></rss>',
               b"application/rss+xml"),
    _body_case("charset-unknown", _PAGE % (b"x", b"<a href='/t/charset-unknown-link'>l</a>"),
               b"text/html; charset=x-no-such-charset", _fetched_ok("/b/charset-unknown")),
    _body_case("charset-utf16-lie", _PAGE % (b"x", b"<a href='/t/utf16-lie'>l</a>"), b"text/html; charset=utf-16"),
    _body_case("invalid-utf8", _PAGE % (b"\xff\xfe\xc3", b"<a href='/t/after-invalid-utf8'>\xc3\x28</a>"),
               b"text/html; charset=utf-8", _fetched_ok("/b/invalid-utf8"), _fetched_ok("/t/after-invalid-utf8")),
    _body_case("nul-bytes", _PAGE % (b"\x00\x00", b"<a href='/t/after\x00nul'>x</a>\x00")),
    _body_case("deeply-nested", b"<html><body>" + b"<div>" * 100_000 + b"<a href='/t/deep'>d</a>" + b"</div>" * 100_000),
    _body_case("gzip-garbage", b"this is not gzip", b"text/html", r"Error downloading <GET {base}/b/gzip-garbage>",
               headers=[(b"Content-Encoding", b"gzip")]),
    _body_case("gzip-valid", gzip.compress(_PAGE % (b"g", b"<a href='/t/from-gzip'>g</a>")),
               b"text/html", _fetched_ok("/b/gzip-valid"), _fetched_ok("/t/from-gzip"),
               headers=[(b"Content-Encoding", b"gzip")]),
    _body_case("truncated", b"short", b"text/html", r"(Error downloading|Gave up retrying) <GET {base}/b/truncated>"),
    # Scrapy's MetaRefreshMiddleware raises on it in process_response: the lease is settled by the errback.
    _body_case("meta-refresh-js", b"<html><head><meta http-equiv='refresh' content='0; url=javascript:alert(1)'></head></html>",
               b"text/html", r"Error downloading <GET {base}/b/meta-refresh-js>"),
    _body_case("base-href-ftp", b"<html><head><base href='ftp://example.org/'></head><body><a href='rel'>r</a></body></html>",
               b"text/html", _fetched_ok("/b/base-href-ftp"), _skipped("scheme")),
    # -- many out-links ---------------------------------------------------------------------
    Case("links-100k", "b", expect=[_fetched_ok("/b/links-100k"), r"'ipr/links/over_cap': \d+",
                                     r"/b/links-100k: \d+ distinct out-links recorded \(IPR_MAX_LINKS_PER_PAGE\), "
                                     r"the \d+ link requests after them dropped"]),
    # -- statuses and redirects ---------------------------------------------------------------
    Case("loop-two", "r", expect=[r"Redirecting \(302\) to <GET {base}/r/loop-two-b> from <GET {base}/r/loop-two>",
                                   r"Redirecting \(302\) to <GET {base}/r/loop-two> from <GET {base}/r/loop-two-b>"]),
    Case("loop-self", "r", expect=[r"Redirecting \(302\) to <GET {base}/r/loop-self> from <GET {base}/r/loop-self>"]),
    Case("chain-25", "r", expect=[r"max redirections reached|Discarding <GET {base}/r/chain-25/\d+>"]),
    Case("to-ftp", "r", expect=[_crawled("/r/to-ftp", 302)]),
    Case("no-location", "r", expect=[_crawled("/r/no-location", 302)]),
    Case("empty-location", "r", expect=[r"<GET {base}/r/empty-location>"]),
    Case("to-idna", "r", expect=[r"Redirecting \(302\) to <GET http://xn--bcher-kva\.example/t/idna-redirect>"]),
    Case("status-500", "r", expect=[r"Gave up retrying <GET {base}/r/status-500>"]),
    Case("status-404", "r", expect=[_crawled("/r/status-404", 404)]),
    Case("status-204", "r", expect=[_crawled("/r/status-204", 204)]),
    Case("status-999", "r", expect=[_crawled("/r/status-999", 999)]),
]


def index_page(cases: list[Case]) -> bytes:
    items = "".join(f"<li><a href='{c.entry}'>{c.name}</a></li>" for c in cases)
    return _PAGE % (b"bad input", f"<ul>{items}</ul>".encode())


def small_page(title: str, link: str | None = None) -> bytes:
    body = ""
    if link is not None:
        body = f"<a href='{link}'>the link</a>"
    return _PAGE % (title.encode(), body.encode("utf-8"))


def make_site():
    """A twisted.web Site answering every case."""
    from twisted.web import resource, server

    by_entry = {c.entry: c for c in CASES}

    class BadSite(resource.Resource):
        isLeaf = True

        def render(self, request):
            uri = request.uri.decode("latin-1")
            if uri.startswith(("http://", "https://")):  # proxy request
                uri = urlsplit(uri)._replace(scheme="", netloc="").geturl() or "/"
            path = uri.split("?")[0]
            host = f"127.0.0.1:{request.getHost().port}"
            request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
            if path == "/":
                return index_page(CASES)
            if path == "/h/":  # the header cases only
                return index_page([c for c in CASES if c.kind == "h"])
            case = by_entry.get(path)
            if path.startswith("/r/chain-25/"):
                n = int(path.rsplit("/", 1)[1])
                request.setResponseCode(302)
                request.setHeader(b"Location", f"/r/chain-25/{n + 1}".encode())
                return b""
            if case is None:
                if path.startswith("/m/"):
                    request.setResponseCode(404)
                    return b"gone"
                if path.startswith(("/t/", "/u/", "/h/", "/b/")) or "bücher" in uri or "xn--" in uri:
                    return small_page(path[:100])
                request.setResponseCode(404)
                return b"<html>not found</html>"
            for name, value in case.headers:
                request.responseHeaders.addRawHeader(name, value)
            if case.kind == "r":
                return redirect(request, case)
            if case.kind == "u":
                return small_page(case.name, case.link.replace("{host}", host) if case.link else None)
            if case.name == "links-100k":
                links = "".join(f"<a href='/m/{i}'>{i}</a> " for i in range(MANY_LINKS))
                return _PAGE % (b"many", links.encode())
            if case.name == "big-50mb":
                chunk = b" " * (1024 * 1024)
                request.write(b"<html><body>")
                for _ in range(BIG_BODY // len(chunk)):
                    request.write(chunk)
                request.write(b"<a href='/t/after-big-body'>after</a></body></html>")
                request.finish()
                return server.NOT_DONE_YET
            if case.name == "truncated":
                request.setHeader(b"Content-Length", b"100000")
                request.write(b"only a few bytes")
                request.channel.transport.loseConnection()
                return server.NOT_DONE_YET
            if case.kind == "b":
                request.setHeader(b"Content-Type", case.ctype)
                return case.body if case.body is not None else small_page(case.name)
            return small_page(case.name)

    def redirect(request, case: Case) -> bytes:
        name = case.name
        target = {
            "loop-two": b"/r/loop-two-b",
            "loop-self": b"/r/loop-self",
            "chain-25": b"/r/chain-25/0",
            "to-ftp": b"ftp://example.org/file",
            "empty-location": b"",
            "to-idna": "http://bücher.example/t/idna-redirect".encode(),
            "loop-two-b": b"/r/loop-two",
        }
        codes = {"status-500": 500, "status-404": 404, "status-204": 204, "status-999": 999}
        if name in codes:
            request.setResponseCode(codes[name])
            return b"" if name == "status-204" else small_page(name)
        request.setResponseCode(302)
        if name in target:
            request.setHeader(b"Location", target[name])
        return small_page(name)

    root = BadSite()
    site = server.Site(root)
    site.displayTracebacks = False
    # /r/loop-two-b is not a case entry: it redirects back to /r/loop-two.
    loop_b = Case("loop-two-b", "r")
    by_entry[loop_b.entry] = loop_b
    return site


def main(argv: list[str] | None = None) -> int:
    from twisted.internet import reactor
    from twisted.python import log

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    log.startLogging(open(os.devnull, "w"), setStdout=False)  # noqa: SIM115
    port = reactor.listenTCP(args.port, make_site(), interface="127.0.0.1")
    sys.stdout.write(f"serving badsite at http://127.0.0.1:{port.getHost().port}/\n")
    sys.stdout.flush()
    reactor.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
