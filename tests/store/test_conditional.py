"""ConditionalGetMiddleware, RevisitStore and the refresher against the real
redis-server of the session: validators, classification, dropped 304s, leases,
due times, the change stream, run-once / continuous, configuration errors."""

from __future__ import annotations

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

from ipr_crawl.addon import CONDITIONAL_MIDDLEWARE, Addon
from ipr_crawl.config import DEFAULTS, RevisitConfig
from ipr_crawl.evaluation.revisit_sim import parse_time
from ipr_crawl.meta import LEASE_META
from ipr_crawl.middlewares.conditional import ConditionalGetMiddleware
from ipr_crawl.ordering.urls import node_id
from ipr_crawl.revisit.policy import DAY
from ipr_crawl.scheduler import IprScheduler
from ipr_crawl.store.revisit import format_history

T0 = parse_time("2020-01-01")
LM = "Wed, 01 Jan 2020 00:00:00 GMT"


class PageSpider(Spider):
    name = "pages"

    def parse(self, response):  # pragma: no cover - never called here
        return None


class Harness:
    """An opened IprScheduler + ConditionalGetMiddleware on the session's Redis."""

    def __init__(self, redis_client, crawl_id, **settings):
        values = dict(DEFAULTS)
        values.update(
            IPR_REDIS_URL="unix://" + redis_client.socket_file,
            IPR_CRAWL_ID=crawl_id,
            IPR_REVISIT_ENABLED=True,
            IPR_REVISIT_CLOCK="virtual:2020-01-01",
            IPR_REVISIT_MIN_SECS=0,
            # the conditional-GET mechanics with the papers' policy (its first interval: 15 d)
            IPR_REVISIT_POLICY="mle-mix:0.1-10:15d",
        )
        values.update(settings)
        self.crawler = get_crawler(PageSpider, values)
        self.spider = PageSpider()
        self.crawler.spider = self.spider
        self.scheduler = IprScheduler.from_crawler(self.crawler)
        self.scheduler.open(self.spider)
        self.mw = ConditionalGetMiddleware.from_crawler(self.crawler)
        self.refresher = self.scheduler.revisits
        self.store = self.refresher.store
        self.redis = redis_client

    def close(self):
        self.scheduler.close("finished")

    def stats(self, name):
        return self.crawler.stats.get_value(f"ipr/revisit/{name}", 0)

    def fetch(self, url, body=b"", status=200, headers=None, meta=None, request=None):
        """process_request + process_response; returns (request, response or the IgnoreRequest)."""
        req = request or Request(url, callback=self.spider.parse, meta=meta or {})
        done(self.mw.process_request(req))
        cls = HtmlResponse if status == 200 else Response
        kw = {"encoding": "utf-8"} if cls is HtmlResponse else {}
        resp = cls(url, status=status, body=body, headers=headers or {}, request=req, **kw)
        try:
            return req, done(self.mw.process_response(req, resp))
        except IgnoreRequest as exc:
            return req, exc

    def advance(self, days):
        self.refresher.clock.advance_to(self.refresher.clock.now() + days * DAY)


def done(coro):
    """The value of a middleware coroutine that has nothing to wait for: the harness's
    scheduler runs without an event loop, so its store calls are answered at once."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the middleware waited with no event loop to wait on")


@pytest.fixture
def harness(redis_client, crawl_id):
    made = []

    def make(**settings):
        h = Harness(redis_client, crawl_id, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_classification_validators_and_flags(harness):
    h = harness()
    url = "http://site.test/a"
    req, resp = h.fetch(url, b"<p>one</p>", headers={"ETag": '"v1"', "Last-Modified": LM})
    assert b"If-None-Match" not in req.headers  # first fetch: nothing stored
    assert "new" in resp.flags and req.meta["ipr_revisit"] == "new"
    assert h.store.due_at(node_id(url)) == T0 + 15 * DAY  # tau_2 of mle-mix:0.1-10:15d

    h.advance(15)
    req, out = h.fetch(url, status=304)
    assert req.headers.getlist(b"If-None-Match") == [b'"v1"']  # one value, RFC 9110 §13.1.2
    assert req.headers.getlist(b"If-Modified-Since") == [LM.encode()]
    assert isinstance(out, IgnoreRequest) and req.meta["ipr_revisit"] == "not_modified"

    h.advance(150)
    req, resp = h.fetch(url, b"<p>two</p>", headers={"ETag": '"v2"'})
    assert "changed" in resp.flags
    h.advance(1)
    req, out = h.fetch(url, b"<p>two</p>", headers={"ETag": '"v2"'})
    assert isinstance(out, IgnoreRequest) and req.meta["ipr_revisit"] == "unchanged"
    state = h.store.load(node_id(url))
    assert (state.accesses, state.m, state.etag, state.last_modified) == (4, 1, '"v2"', LM)
    assert state.U == 15 * DAY + 1 * DAY and state.T == 166 * DAY
    assert [h.stats(k) for k in ("new", "changed", "unchanged", "not_modified", "validators_sent")] == [1, 1, 1, 1, 3]
    kinds = [e.fields["kind"] for e in h.store.events(url)]
    assert kinds == ["new", "not_modified", "changed", "unchanged"]
    text = format_history(url, state, h.store.due_at(node_id(url)), list(h.store.events(url)))
    assert "not_modified" in text and "m 1" in text


def test_user_validators_win_and_304_can_reach_the_callback(harness):
    h = harness()
    url = "http://site.test/b"
    h.fetch(url, b"x", headers={"ETag": '"stored"'})
    h.advance(15)
    req = Request(url, headers={"If-None-Match": '"mine"'}, meta={"handle_httpstatus_list": [304]})
    req, resp = h.fetch(url, status=304, request=req)
    assert req.headers.getlist(b"If-None-Match") == [b'"mine"']
    assert resp.status == 304 and "not_modified" in resp.flags  # handed on, flagged
    assert req.meta["_ipr_recorded"]  # the link graph keeps the page's out-links


def test_unchanged_can_reach_the_callback(harness):
    h = harness(IPR_REVISIT_SKIP_UNCHANGED=False)
    url = "http://site.test/c"
    h.fetch(url, b"same")
    h.advance(15)
    _, resp = h.fetch(url, b"same")
    assert "unchanged" in resp.flags and resp.body == b"same"


@pytest.mark.parametrize(
    "mode, second, kind",
    [
        ("body", "<div><p>hello  world</p></div>", "changed"),
        ("text", "<div class='x'><p>hello  world</p></div><!-- c -->", "unchanged"),
        ("text", "<p>hello there</p>", "changed"),
    ],
)
def test_hash_modes(harness, mode, second, kind):
    h = harness(IPR_REVISIT_HASH=mode)
    url = "http://site.test/h"
    h.fetch(url, b"<p>hello world</p>")
    h.advance(15)
    req, _ = h.fetch(url, second.encode())
    assert req.meta["ipr_revisit"] == kind


def test_simhash_ignores_a_counter(harness):
    h = harness(IPR_REVISIT_HASH="simhash")
    url = "http://site.test/s"
    text = " ".join(f"paragraph {i} about buffers windows and frames in emacs" for i in range(40))
    h.fetch(url, f"<p>visits: 1041</p><p>{text}</p>".encode())
    h.advance(15)
    req, _ = h.fetch(url, f"<p>visits: 1042</p><p>{text}</p>".encode())
    assert req.meta["ipr_revisit"] == "unchanged"
    h.advance(150)
    req, _ = h.fetch(url, f"<p>visits: 1043</p><p>{text[::-1]}</p>".encode())
    assert req.meta["ipr_revisit"] == "changed"


def test_last_modified_rule(harness):
    h = harness(IPR_REVISIT_USE_LAST_MODIFIED=True)
    url = "http://site.test/lm"
    h.fetch(url, b"v1")
    h.advance(15)
    changed_at = "Sat, 04 Jan 2020 00:00:00 GMT"  # 3 days after the first access
    h.fetch(url, b"v2", headers={"Last-Modified": changed_at})
    s = h.store.load(node_id(url))
    assert (s.tc_min, s.U, s.T) == (3 * DAY, 12 * DAY, 15 * DAY)
    h2 = harness(IPR_REVISIT_USE_LAST_MODIFIED=False)
    h2.store.client.delete(h2.store.keys["revisit"])
    h2.refresher.clock.advance_to(T0)
    h2.fetch(url, b"v1")
    h2.advance(15)
    h2.fetch(url, b"v2", headers={"Last-Modified": changed_at})
    s = h2.store.load(node_id(url))
    assert (s.tc_min, s.U) == (15 * DAY, 0.0)


def test_dropped_response_settles_its_lease(harness):
    h = harness(IPR_REVISIT_MODE="continuous")
    url = "http://site.test/l"
    h.fetch(url, b"v1")
    h.advance(15)
    assert h.refresher.refresh() == 1  # due -> forced queue
    _, items = h.scheduler.store.pop(8, 600)
    (member, payload), = items
    assert member[:1] == b"F" and b"site.test/l" in payload
    assert h.redis.zcard(h.store.keys["lease"]) == 1
    req = Request(url, callback=h.spider.parse, meta={LEASE_META: member.hex()})
    _, out = h.fetch(url, status=304, request=req)
    assert isinstance(out, IgnoreRequest)
    assert h.redis.zcard(h.store.keys["lease"]) == 0
    assert not h.redis.hexists(h.store.keys["req"], member)
    # U/T = 1: mu_high * tau_prev = 150 d, capped by IPR_REVISIT_MAX_SECS (default 90 d)
    assert h.store.due_at(node_id(url)) == T0 + 15 * DAY + 90 * DAY


def test_gone_and_redirect_stop_revisits(harness):
    h = harness()
    a, b, c = "http://site.test/gone", "http://site.test/old", "http://site.test/new"
    h.fetch(a, b"x")
    h.fetch(b, b"y")
    h.advance(15)
    _, resp = h.fetch(a, b"not here", status=404)
    assert resp.status == 404 and "gone" in resp.flags
    assert h.store.due_at(node_id(a)) is None and h.store.load(node_id(a)) is not None
    h.fetch(c, b"z", meta={"redirect_urls": [b]})
    assert h.store.due_at(node_id(b)) is None and h.store.due_at(node_id(c)) is not None


def test_refresher_modes_and_until(harness, redis_client):
    h = harness(IPR_REVISIT_MODE="continuous", IPR_REVISIT_UNTIL="2020-03-01")
    urls = [f"http://site.test/r{i}" for i in range(3)]
    for u in urls:
        h.fetch(u, b"v")
    assert h.scheduler.has_pending_requests()  # continuous: revisits scheduled
    # virtual clock: nothing pending, so the refresher jumps to the first due time
    assert h.refresher.refresh() == 3 and h.refresher.clock.now() == T0 + 15 * DAY
    assert h.store.clock() == T0 + 15 * DAY
    _, items = h.scheduler.store.pop(8, 600)
    assert len(items) == 3
    # the next due times are 150 days later: past IPR_REVISIT_UNTIL, so the crawl may close
    for (member, _), u in zip(items, urls):
        h.fetch(u, status=304, request=Request(u, callback=h.spider.parse, meta={LEASE_META: member.hex()}))
    assert h.store.earliest_due() > parse_time("2020-03-01")
    assert not h.scheduler.has_pending_requests()
    assert h.refresher.refresh() == 0

    once = harness(IPR_REVISIT_MODE="run-once", IPR_REVISIT_CLOCK="virtual:2020-09-01")
    assert not once.refresher.keeps_open()
    assert once.refresher.refresh() == 3  # all were due before the clock's start


def test_change_stream_is_bounded(harness):
    h = harness(IPR_REVISIT_EVENTS_MAXLEN=10)
    for i in range(400):
        h.fetch(f"http://site.test/e{i}", b"x")
    # XADD MAXLEN ~ trims whole stream nodes (100 entries by default)
    assert h.redis.xlen(h.store.keys["changes"]) <= 10 + 100


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("IPR_REVISIT_POLICY", "mle-mix:10-1", "IPR_REVISIT_POLICY"),
        ("IPR_REVISIT_MODE", "forever", "IPR_REVISIT_MODE"),
        ("IPR_REVISIT_HASH", "md5", "IPR_REVISIT_HASH"),
        ("IPR_REVISIT_CLOCK", "virtual:", "IPR_REVISIT_CLOCK"),
        ("IPR_REVISIT_UNTIL", "next year", "IPR_REVISIT_UNTIL"),
        ("IPR_REVISIT_MIN_SECS", "-5", "IPR_REVISIT_MIN_SECS"),
        ("IPR_REVISIT_SIMHASH_DISTANCE", "65", "IPR_REVISIT_SIMHASH_DISTANCE"),
        ("IPR_REVISIT_REFRESH_BATCH_SIZE", "0", "IPR_REVISIT_REFRESH_BATCH_SIZE"),
    ],
)
def test_bad_settings_are_named(name, value, message):
    settings = Settings({"IPR_REVISIT_ENABLED": True, name: value})
    with pytest.raises(ValueError, match=message):
        Addon().update_settings(settings)


def test_addon_wires_the_middleware_only_when_enabled():
    off = Settings()
    Addon().update_settings(off)
    conditional = load_object(CONDITIONAL_MIDDLEWARE)  # the add-on keys its middlewares by class
    assert conditional not in off.getdict("DOWNLOADER_MIDDLEWARES")
    on = Settings({"IPR_REVISIT_ENABLED": True})
    Addon().update_settings(on)
    assert on.getdict("DOWNLOADER_MIDDLEWARES")[conditional] == 580
    cfg = RevisitConfig.from_settings(on)
    assert cfg.policy.name == "harmonic:8/y:new=learn:young=0.5" and cfg.mode == "run-once"


def test_run_once_horizon_takes_what_falls_due_soon(harness):
    h = harness()
    for u in ("http://site.test/h1", "http://site.test/h2"):
        h.fetch(u, b"v")  # due 2020-01-16
    early = harness(IPR_REVISIT_CLOCK="virtual:2020-01-05")
    assert early.refresher.refresh() == 0
    ahead = harness(IPR_REVISIT_CLOCK="virtual:2020-01-05", IPR_REVISIT_HORIZON_SECS=1e9,
                    IPR_REVISIT_POLICY="fixed:1d", IPR_REVISIT_REFRESH_BATCH_SIZE=1)
    assert ahead.refresher.refresh() == 2  # in batches of 1, in one sweep
    _, items = ahead.scheduler.store.pop(8, 600)
    for member, payload in items:
        url = "http://site.test/h1" if b"/h1" in payload else "http://site.test/h2"
        req = Request(url, callback=ahead.spider.parse, meta={LEASE_META: member.hex()})
        ahead.fetch(url, status=304, request=req)  # next visit: one day later, inside the horizon
    assert ahead.store.earliest_due() == parse_time("2020-01-06")
    assert ahead.refresher.refresh() == 0  # a run-once crawl revisits a URL at most once


def test_policy_below_the_floor_is_announced(harness, caplog):
    with caplog.at_level("WARNING"):
        harness(IPR_REVISIT_POLICY="fixed:10s", IPR_REVISIT_MIN_SECS=3600)
    assert "raised to 3600 s" in caplog.text


def test_a_lost_revisit_is_due_again_after_the_retry_time(harness):
    h = harness(IPR_REVISIT_MODE="continuous", IPR_REVISIT_RETRY_SECS=7200)
    url = "http://site.test/lost"
    h.fetch(url, b"v1")
    h.advance(15)
    assert h.refresher.refresh() == 1
    assert h.store.due_at(node_id(url)) == T0 + 15 * DAY + 7200  # in flight: its retry instant
    assert h.refresher.refresh() == 0  # not moved twice
    h.refresher.clock.advance_to(T0 + 15 * DAY + 7200)  # the response never came
    assert h.refresher.refresh() == 1


def test_visits_scheduled_beyond_the_max_are_pulled_in_at_start(harness, caplog):
    """A URL an earlier version pushed out by decades (a burst of 304s) is due at
    IPR_REVISIT_MAX_SECS after the next start, not in 2067."""
    h = harness(IPR_REVISIT_MAX_SECS=0)
    url = "http://site.test/far"
    h.fetch(url, b"v1")
    far = T0 + 15_000 * DAY
    h.redis.zadd(h.store.keys["due"], {node_id(url): far})
    h.close()
    with caplog.at_level("INFO"):
        again = harness(IPR_REVISIT_MAX_SECS=90 * DAY)
    assert again.store.due_at(node_id(url)) == T0 + 90 * DAY
    assert "1 revisits were scheduled later than IPR_REVISIT_MAX_SECS" in caplog.text


def test_pagerank_weight_keeps_important_pages_fresher(harness):
    """IPR_REVISIT_WEIGHT=pagerank: under one budget, a URL with a higher score in the
    frontier's ordering gets a shorter interval than one with a lower score."""
    from ipr_crawl.store import Link

    h = harness(IPR_REVISIT_POLICY="harmonic:4/y", IPR_REVISIT_WEIGHT="pagerank")
    hub, rare = "http://site.test/hub", "http://site.test/rare"
    store = h.scheduler.store
    # ten pages link to the hub, one to the rare page: their IPR scores differ
    for k in range(10):
        store.record_page(node_id(f"http://site.test/p{k}"), 0, [Link(node_id(hub), 0, b"")])
    store.record_page(node_id("http://site.test/q"), 0, [Link(node_id(rare), 0, b"")])
    assert h.refresher.node_score(node_id(hub)) > h.refresher.node_score(node_id(rare)) > 0
    h.fetch(hub, b"v1")
    h.fetch(rare, b"v1")
    assert h.store.due_at(node_id(hub)) < h.store.due_at(node_id(rare))


def test_sitemap_lastmods_read_urlsets_only_and_skip_bad_dates():
    """What IPR_REVISIT_SITEMAP_LASTMOD reads: a sitemaps.org urlset's <loc>/<lastmod>
    pairs (W3C Datetime, UTC without a zone; a date alone spans its day); a malformed lastmod, an entry without one,
    a sitemap index, an HTML page and broken XML give nothing, and raise nothing."""
    from scrapy.http import HtmlResponse, XmlResponse

    from ipr_crawl.scheduler.revisits import parse_w3c_datetime, sitemap_lastmods

    body = (b'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>http://a.test/x</loc><lastmod>2024-03-01</lastmod></url>"
            b"<url><loc>/rel</loc><lastmod>2024-03-01T10:00:00+01:00</lastmod></url>"
            b"<url><loc>http://a.test/bad</loc><lastmod>last tuesday</lastmod></url>"
            b"<url><loc>http://a.test/none</loc></url></urlset>")
    got = sitemap_lastmods(XmlResponse("http://a.test/sitemap.xml", body=body))
    assert got == [("http://a.test/x", parse_w3c_datetime("2024-03-01T00:00:00Z"), 86400.0),  # a day
                   ("http://a.test/rel", parse_w3c_datetime("2024-03-01T09:00:00Z"), 0.0)]
    index = (b'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
             b"<sitemap><loc>http://a.test/s1.xml</loc><lastmod>2024-03-01</lastmod></sitemap></sitemapindex>")
    assert sitemap_lastmods(XmlResponse("http://a.test/i.xml", body=index)) is None
    assert sitemap_lastmods(HtmlResponse("http://a.test/", body=b"<html><body>urlset</body></html>")) is None
    assert sitemap_lastmods(XmlResponse("http://a.test/b.xml", body=b"<urlset><url><loc>http://a.test/x")) in (None, [])
    import gzip

    from scrapy.http import Response

    assert sitemap_lastmods(Response("http://a.test/s.xml.gz", body=gzip.compress(body))) == got
    assert sitemap_lastmods(Response("http://a.test/s.xml.gz", body=b"\x1f\x8bnot gzip")) is None


def test_a_redis_error_hands_the_lease_back_instead_of_failing_the_page(harness):
    """A middleware's store call that fails on Redis (a failover, a restart, LOADING)
    reaches the frontier middleware as the request's error: the page did nothing wrong,
    so its lease goes back to the frontier and the URL is fetched again, not marked
    failed for good (ack.lua ``release``, not ``fail``)."""
    import redis

    h = harness()
    url = "http://site.test/r"
    assert h.scheduler.enqueue_request(Request(url, callback=h.spider.parse))
    _, items = h.scheduler.store.pop(8, 600)
    (member, _), = items
    req = Request(url, callback=h.spider.parse, meta={LEASE_META: member.hex()})
    assert h.scheduler.settle_failure(req, redis.ConnectionError("Connection reset by peer"))
    assert h.redis.zcard(h.store.keys["lease"]) == 0
    assert h.crawler.stats.get_value("ipr/frontier/failed") is None
    assert h.crawler.stats.get_value("ipr/frontier/released_after_redis_error") == 1
    # queued again: the next pop hands it out
    _, again = h.scheduler.store.pop(8, 600)
    assert [m for m, _ in again] == [member]
    # a failure of the page itself still marks it failed
    req = Request(url, callback=h.spider.parse, meta={LEASE_META: member.hex()})
    assert h.scheduler.settle_failure(req, OSError("connection refused by the site"))
    assert h.crawler.stats.get_value("ipr/frontier/failed") == 1


def test_a_page_not_recorded_in_the_frontier_gets_no_validators(harness):
    """The fault checker's seed 20261203: a process recorded a page's revisit state (its
    ETag) and died before recording the page's links; the page went back to the
    frontier. Its refetch must be unconditional: a 304 would be dropped and its links
    never recorded (the crawl closed finished with pages never found)."""
    h = harness()
    url = "http://site.test/died"
    h.fetch(url, b"<p>one</p>", headers={"ETag": '"v1"'})  # the revisit state is stored ...
    assert h.scheduler.enqueue_request(Request(url, callback=h.spider.parse))  # ... the frontier's node is queued
    assert h.scheduler.store.node_state(node_id(url)) == 0
    req, resp = h.fetch(url, b"<p>one</p>", headers={"ETag": '"v1"'})
    assert b"If-None-Match" not in req.headers
    assert not isinstance(resp, IgnoreRequest)
    # once the frontier has it fetched, a revisit is conditional again
    _, items = h.scheduler.store.pop(1, 600)
    h.scheduler.store.record_page(node_id(url), 0, [], lease=items[0][0])
    req, _ = h.fetch(url, status=304)
    assert req.headers.getlist(b"If-None-Match") == [b'"v1"']


def test_a_record_that_fails_on_a_script_error_hands_its_lease_back(harness, caplog):
    """A page's record call that fails with a script error (not Redis away) leaves the
    page's lease in flight no more: it goes back to the frontier and the page is fetched
    again (its links recorded then), with one ERROR line."""
    import redis

    h = harness()
    url = "http://site.test/script-error"
    assert h.scheduler.enqueue_request(Request(url, callback=h.spider.parse))
    _, items = h.scheduler.store.pop(1, 600)
    (member, _), = items
    h.scheduler.leases.held[member] = None
    with caplog.at_level("ERROR"):
        h.scheduler.leases.record_failed(member, redis.ResponseError("ERR Error running script"))
    assert "recording a page failed" in caplog.text
    assert member not in h.scheduler.leases.held
    assert h.redis.zcard(h.scheduler.store.keys["lease"]) == 0
    assert h.crawler.stats.get_value("ipr/lease/released_after_record_error") == 1
    _, again = h.scheduler.store.pop(1, 600)
    assert [m for m, _ in again] == [member]


def test_a_closed_scheduler_answers_empty_and_writes_nothing(harness, redis_client):
    """After close(): has_pending_requests() False, next_request() None, enqueue_request()
    False, and no key of the crawl written by them (Scrapy's own scheduler is inert then too)."""
    h = harness()
    assert h.scheduler.enqueue_request(Request("http://a.example/x", callback=h.spider.parse))
    assert h.scheduler.has_pending_requests()
    h.scheduler.close("shutdown")
    keys = sorted(redis_client.scan_iter(match=f"ipr:{{{h.scheduler.config.crawl_id}}}:*"))
    before = {k: redis_client.dump(k) for k in keys if redis_client.type(k) != b"stream"}
    assert h.scheduler.has_pending_requests() is False
    assert h.scheduler.next_request() is None
    assert h.scheduler.enqueue_request(Request("http://a.example/y", callback=h.spider.parse)) is False
    after = {k: redis_client.dump(k) for k in keys if redis_client.type(k) != b"stream"}
    assert after == before


def test_ipr_dont_revisit_opts_a_request_out_and_the_old_key_still_works(harness):
    """meta["ipr_dont_revisit"]: no revisit state, no class; the former "dont_revisit"
    does the same and warns once that it is deprecated."""
    import warnings

    h = harness()
    req, resp = h.fetch("http://site.test/out", b"<p>x</p>", meta={"ipr_dont_revisit": True})
    assert "ipr_revisit" not in req.meta and h.store.due_at(node_id("http://site.test/out")) is None
    import ipr_crawl.meta

    ipr_crawl.meta._warned_old_key = False  # once per process: this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path in ("old", "old2"):
            req, resp = h.fetch(f"http://site.test/{path}", b"<p>x</p>", meta={"dont_revisit": True})
            assert "ipr_revisit" not in req.meta and h.store.due_at(node_id(f"http://site.test/{path}")) is None
    assert [w.category for w in caught if "dont_revisit" in str(w.message)] == [DeprecationWarning]
    req, resp = h.fetch("http://site.test/in", b"<p>x</p>")
    assert req.meta["ipr_revisit"] == "new"
