"""``ipr-crawl dashboard``: a read-only web page of a store's crawls, live, and their
Prometheus metrics, served by Twisted's web server (``twisted.web``, already a
dependency of Scrapy).

Routes (GET and HEAD only; anything else is 405: nothing here writes):

- ``/``: the page (``static/index.html``; charts with uPlot, shipped in ``static/``,
  so the page works offline); it asks ``/api/...`` every few seconds;
- ``/api/crawls``: ``{"where", "crawls": [ids], "refresh_secs"}``;
- ``/api/crawl/<id>``: :meth:`~ipr_crawl.dashboard.views.CrawlView.snapshot` as JSON, or
  ``{"error": text}`` (HTTP 503 for a store that cannot be read, 404 for an unknown id);
- ``/metrics``: :class:`~ipr_crawl.dashboard.metrics.CrawlCollector`'s exposition.

Bound to 127.0.0.1 by default. Bound to any other address it requires a token
(``--token`` or ``IPR_DASHBOARD_TOKEN``) and refuses to start without one; the token is
then asked of every request, as ``Authorization: Bearer <token>`` (what Prometheus's
``authorization`` scrape option sends), ``?token=`` (a browser's first visit) or the
cookie the page sets from it. Store calls run on Twisted's thread pool, so a slow Redis
does not hold the server.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
from pathlib import Path
from typing import Any

from twisted.internet import threads
from twisted.web import resource, server, static

from ipr_crawl.dashboard.views import CrawlView, crawl_ids, open_view
from ipr_crawl.store import crawl_keys

__all__ = ["Dashboard", "DashboardError", "build_site", "is_loopback", "serve"]

logger = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
TOKEN_ENV = "IPR_DASHBOARD_TOKEN"
COOKIE = b"ipr_dashboard_token"


class DashboardError(ValueError):
    """A dashboard that must not start (a non-loopback bind without a token, no store)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) binds to loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Dashboard:
    """The crawls of one Redis (``client``; ``where``: its redacted location for the
    page), each read through a cached :class:`CrawlView`; ``only``: one crawl id
    (``--crawl-id``) or ``""`` for every crawl there."""

    def __init__(self, client: Any, where: str, only: str = "", refresh_secs: float = 3.0,
                 curves_secs: float = 15.0) -> None:
        self.client = client
        self.where = where
        self.only = only
        self.refresh_secs = refresh_secs
        self.curves_secs = curves_secs
        self.views: dict[str, CrawlView] = {}
        #: every crawl shown so far: with Redis away, /metrics says each is down
        self.seen: set[str] = set()

    def crawls(self) -> list[str]:
        """The crawl ids shown (blocking: Redis)."""
        present = crawl_ids(self.client)
        shown = [c for c in present if c == self.only] if self.only else present
        self.seen.update(shown)
        return shown

    def view(self, crawl_id: str) -> CrawlView:
        """The cached view of ``crawl_id`` (its store, or its buckets')."""
        if crawl_id not in self.views:
            self.views[crawl_id] = open_view(self.client, crawl_id, self.curves_secs)
        return self.views[crawl_id]

    def snapshot(self, crawl_id: str, detail: bool = True) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON data)`` of one crawl (blocking): 200 and its snapshot,
        404 for a crawl not there (or not this dashboard's), 503 and the error for a store
        that cannot be read."""
        try:
            if (self.only and crawl_id != self.only) or not self.client.exists(crawl_keys(crawl_id)["meta"]):
                return 404, {"error": f"no crawl {crawl_id!r} in {self.where}; crawls there: "
                             f"{', '.join(self.crawls()) or 'none'}"}
            return 200, self.view(crawl_id).snapshot(detail=detail)
        except Exception as exc:  # noqa: BLE001 - shown on the page, not a stack trace
            self.views.pop(crawl_id, None)
            return 503, {"error": f"cannot read crawl {crawl_id!r} in {self.where}: {exc}"}

    def snapshots(self) -> dict[str, dict[str, Any]]:
        """Every crawl's snapshot without curves (for /metrics), or its error."""
        try:
            ids = self.crawls()
        except Exception as exc:  # noqa: BLE001
            return {c: {"error": str(exc)} for c in sorted(self.seen or {self.only})}
        return {c: self.snapshot(c, detail=False)[1] for c in ids}


class _Json(resource.Resource):
    isLeaf = True

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        self.dashboard = dashboard

    def render_GET(self, request: Any) -> Any:
        path = [p.decode("utf-8", "replace") for p in request.postpath if p]

        def answer() -> tuple[int, dict[str, Any]]:
            if path == ["crawls"]:
                try:
                    return 200, {"where": self.dashboard.where, "crawls": self.dashboard.crawls(),
                                 "refresh_secs": self.dashboard.refresh_secs, "only": self.dashboard.only}
                except Exception as exc:  # noqa: BLE001
                    return 503, {"error": f"cannot read {self.dashboard.where}: {exc}", "crawls": []}
            if len(path) == 2 and path[0] == "crawl":
                return self.dashboard.snapshot(path[1])
            return 404, {"error": f"no such path: /api/{'/'.join(path)}"}

        def send(result: tuple[int, dict[str, Any]]) -> None:
            code, data = result
            request.setResponseCode(code)
            request.setHeader(b"content-type", b"application/json")
            request.setHeader(b"cache-control", b"no-store")
            request.write(json.dumps(data, default=str).encode())
            request.finish()

        threads.deferToThread(answer).addCallback(send).addErrback(lambda f: _fail(request, f))
        return server.NOT_DONE_YET


class _Metrics(resource.Resource):
    isLeaf = True

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        from prometheus_client import CollectorRegistry

        from ipr_crawl.dashboard.metrics import CrawlCollector

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(CrawlCollector(dashboard.snapshots))

    def render_GET(self, request: Any) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        def send(body: bytes) -> None:
            request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
            request.write(body)
            request.finish()

        threads.deferToThread(generate_latest, self.registry).addCallback(send).addErrback(lambda f: _fail(request, f))
        return server.NOT_DONE_YET


def _fail(request: Any, failure: Any) -> None:
    logger.error("ipr-crawl dashboard: %s", failure.getErrorMessage())
    request.setResponseCode(500)
    request.write(json.dumps({"error": failure.getErrorMessage()}).encode())
    request.finish()


class _Guard(resource.Resource):
    """Read-only (GET/HEAD), and with ``token`` set, only for requests that carry it."""

    def __init__(self, inner: resource.Resource, token: str) -> None:
        super().__init__()
        self.inner = inner
        self.token = token.encode()

    def getChildWithDefault(self, name: bytes, request: Any) -> Any:  # noqa: N802 - Twisted's name
        if request.method not in (b"GET", b"HEAD"):
            return resource.ErrorPage(405, "Method Not Allowed", "The dashboard is read-only.")
        if self.token and not self._allowed(request):
            return resource.ErrorPage(401, "Unauthorized", "A token is required: ?token=, or "
                                      "Authorization: Bearer <token>.")
        request.postpath.insert(0, name)
        request.prepath.pop()
        return resource.getChildForRequest(self.inner, request)

    def render(self, request: Any) -> Any:
        return self.getChildWithDefault(b"", request).render(request)

    def _allowed(self, request: Any) -> bool:
        given = [request.args.get(b"token", [b""])[0], request.getCookie(COOKIE) or b""]
        auth = request.getHeader(b"authorization") or b""
        if auth.lower().startswith(b"bearer "):
            given.append(auth[7:].strip())
        if any(g and hmac.compare_digest(g, self.token) for g in given):
            if request.args.get(b"token"):  # a browser's first visit: the page's own requests carry it on
                request.addCookie(COOKIE, self.token, httpOnly=True, path=b"/", sameSite="strict")
            return True
        return False


def build_site(dashboard: Dashboard, token: str = "") -> server.Site:
    """The Twisted :class:`~twisted.web.server.Site` of ``dashboard``."""
    root: Any = resource.Resource()  # Twisted's interfaces are zope's: mypy sees no IResource
    root.putChild(b"", static.File(str(STATIC / "index.html"), defaultType="text/html"))
    root.putChild(b"static", static.File(str(STATIC)))
    root.putChild(b"api", _Json(dashboard))
    root.putChild(b"metrics", _Metrics(dashboard))
    site = server.Site(_Guard(root, token))
    site.displayTracebacks = False
    return site


def serve(dashboard: Dashboard, bind: str = "127.0.0.1", port: int = 8450, token: str = "",
          ready: Any = None) -> None:
    """Serve ``dashboard`` on ``bind``:``port`` until the process is stopped (runs the
    reactor). ``token``: asked of every request (default: ``IPR_DASHBOARD_TOKEN``).
    ``ready(url)`` is called once listening. Raises :class:`DashboardError` for a
    non-loopback ``bind`` without a token."""
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor
    token = token or os.environ.get(TOKEN_ENV, "")
    if not is_loopback(bind) and not token:
        raise DashboardError(
            f"refusing to serve on {bind} without a token: anyone who reaches it would read the crawl. Give "
            f"--token (or set {TOKEN_ENV}), or bind to 127.0.0.1 (the default)")
    listening = reactor.listenTCP(port, build_site(dashboard, token), interface=bind)
    host = f"[{bind}]" if ":" in bind else bind
    url = f"http://{host}:{listening.getHost().port}/"
    if ready is not None:
        ready(url)
    reactor.run()


def run(crawl_id: str, redis_url: str, data_dir: str, bind: str = "127.0.0.1", port: int = 8450,
        token: str = "", refresh_secs: float = 3.0, command: str = "ipr-crawl dashboard") -> int:
    """What ``ipr-crawl dashboard`` and ``scrapy frontier dashboard`` run: open the store
    (never creating one), print the URL, serve until stopped. Returns the exit status
    (1 with one line on stderr for no store, Redis away at start, a bad bind)."""
    import sys

    from ipr_crawl.store import connect, redact
    from ipr_crawl.store.inspect import embedded_store_exists

    where = redact(redis_url) if redis_url else f"the embedded store in {os.path.abspath(data_dir)}"
    if not redis_url and not embedded_store_exists(data_dir):
        print(f"{command}: no embedded store in {os.path.abspath(data_dir)}: run this in the Scrapy project's "
              "folder, or give --data-dir (IPR_DATA_DIR) or --redis-url (IPR_REDIS_URL)", file=sys.stderr)
        return 1
    try:
        client = connect(redis_url, data_dir)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any way of not reaching it: one line, not a traceback
        print(f"{command}: cannot reach {where}: {exc}", file=sys.stderr)
        return 1
    dashboard = Dashboard(client, where, crawl_id, refresh_secs=refresh_secs)

    def ready(url: str) -> None:
        shown = url + ("?token=<token>" if token or os.environ.get(TOKEN_ENV) else "")
        print(f"{command}: the crawls of {where} at {shown} (Prometheus: {url}metrics); Ctrl-C stops",
              flush=True)

    try:
        serve(dashboard, bind, port, token, ready=ready)
    except (DashboardError, OSError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    return 0
