"""What the conditional-GET middleware asks of the crawl: validators to send, and
the class and next visit of a response (Tamura & Kitsuregawa 2008, §3 (2)-(5)).

:class:`RevisitObserver` belongs to the crawl's :class:`~ipr_crawl.scheduler.refresher.Refresher`;
:mod:`ipr_crawl.middlewares.conditional` only wires it to Scrapy. The rules:

- A URL fetched before gets ``If-None-Match`` (its stored ``ETag``) and
  ``If-Modified-Since`` (its stored ``Last-Modified``), RFC 9110 §13.1.2, §13.1.3.
- ``304`` -> ``not_modified`` (RFC 9110 §15.4.5); a 2xx -> ``new`` (first fetch),
  ``changed`` or ``unchanged`` by its content fingerprint (``IPR_REVISIT_HASH``);
  404/410 -> ``gone`` (revisits stop). The URL's state is updated with the
  Last-Modified rule, the policy gives the next interval, and state, due time
  and one change event are written in one script call (:mod:`ipr_crawl.store.revisit`).
- A new or changed sitemap (a sitemaps.org 0.9 ``urlset``; ``IPR_REVISIT_SITEMAP_LASTMOD``)
  makes every URL it lists whose ``<lastmod>`` is after the URL's last fetch due now,
  instead of at the time the policy chose: the site says it changed. Under a budget
  (``harmonic``) no more than the budget has left, lowest estimated change rate first.
  The URLs it shows unchanged are held until after its next reads (two periods): they
  are visited when it says they changed, or once ``IPR_REVISIT_MAX_SECS`` has passed
  since their last fetch (a ``<lastmod>`` that never moves does not stop revisits). The sitemap itself is fetched again every
  ``IPR_REVISIT_SITEMAP_SECS``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.http import Response, TextResponse
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap

from ipr_crawl.config import RevisitConfig
from ipr_crawl.meta import ITEM_RETRIES_META, LEASE_META, NETWORK_STATUS_META, RECORDED_META, REVISIT_META, lease_of
from ipr_crawl.ordering.urls import canonical_url, node_id, site_hash
from ipr_crawl.revisit.budget import RateHistogram, RateMoments, explores_new, pool_group
from ipr_crawl.revisit.fingerprint import digest, same_version
from ipr_crawl.revisit.policy import (
    DAY,
    HarmonicPolicy,
    RevisitState,
    access,
    bucket,
    budget_weight,
    estimated_rate,
    explored_first_revisit,
    next_due,
    parse_http_date,
    rate_counts,
)
from ipr_crawl.scheduler.codec import encode_request
from ipr_crawl.store.revisit import LastmodResult

if TYPE_CHECKING:
    from ipr_crawl.scheduler.refresher import Refresher

__all__ = ["FLAGS", "Observation", "RevisitObserver", "parse_w3c_datetime", "sitemap_body", "sitemap_lastmods"]

logger = logging.getLogger(__name__)

#: The binning of the crawl's rate histogram (the refresher reads it with the same).
_BINS = RateHistogram()

#: Classes of a response (also its flags).
FLAGS = ("new", "changed", "unchanged", "not_modified", "gone")
#: Meta keys not kept in the stored revisit request.
_DROP_META = (
    "redirect_urls", "redirect_reasons", "redirect_times", "redirect_ttl", "retry_times",
    "download_slot", "download_latency", "depth", "cached_response", "_dont_cache",
    REVISIT_META, RECORDED_META, LEASE_META, NETWORK_STATUS_META,
)


def parse_w3c_datetime(text: str) -> float | None:
    """A sitemap ``<lastmod>`` (W3C Datetime, https://www.w3.org/TR/NOTE-datetime:
    ``YYYY-MM-DD`` or with ``Thh:mm[:ss[.s]]TZD``) as s since the epoch; a date or
    a time without a zone is UTC. None if malformed.

    >>> parse_w3c_datetime("2024-01-02T03:04:05Z") - parse_w3c_datetime("2024-01-02")
    11045.0
    >>> parse_w3c_datetime("yesterday") is None
    True
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


#: sitemaps.org 0.9: a sitemap file is at most 50 MB uncompressed
_SITEMAP_MAX_BYTES = 50 * 1024 * 1024


def sitemap_body(response: Response) -> bytes | None:
    """The XML of a sitemap response (a sitemaps.org 0.9 ``urlset`` in its first 4 KB;
    a gzipped body read up to the protocol's 50 MB), or None for anything else. Cheap:
    nothing is parsed."""
    body = response.body
    if body[:2] == b"\x1f\x8b":  # a sitemap.xml.gz served as is (no Content-Encoding)
        try:
            body = gunzip(body, max_size=_SITEMAP_MAX_BYTES)
        except Exception:  # not gzip after all, or too big: not a sitemap we read
            return None
    return body if b"<urlset" in body[:4096] else None


def sitemap_lastmods(response: Response, body: bytes | None = None) -> list[tuple[str, float, float]] | None:
    """``(loc, lastmod, span)`` of every ``<url>`` of a sitemap response (sitemaps.org
    protocol 0.9 ``urlset``, parsed by Scrapy's :class:`~scrapy.utils.sitemap.Sitemap`)
    that has both (a malformed ``<lastmod>`` is skipped); None for anything else (an
    HTML page, a sitemap index, bad XML). ``lastmod`` in s since the epoch; ``span``
    86,400 s for a date without a time (the day it names), else 0. ``body``:
    :func:`sitemap_body`'s, if the caller has it."""
    if body is None:
        body = sitemap_body(response)
        if body is None:
            return None
    try:
        sitemap = Sitemap(body)
    except Exception:  # lxml's errors for what is not XML
        return None
    if sitemap.type != "urlset":
        return None
    out = []
    for entry in sitemap:
        loc, lastmod = entry.get("loc"), entry.get("lastmod")
        if not loc or not lastmod:
            continue
        text = str(lastmod).strip()
        when = parse_w3c_datetime(text)
        if when is not None:
            out.append((response.urljoin(str(loc)), when, 0.0 if "T" in text else DAY))
    return out


def _header(response: Response, name: bytes) -> str:
    value = response.headers.get(name)
    return value.decode("latin-1").strip() if value else ""


@dataclass(frozen=True)
class Observation:
    """A classified response: ``kind`` (one of :data:`FLAGS`), ``tau`` (s until the
    next visit; 0 for ``gone``), ``drop`` (not for the callback: its lease is settled)."""

    kind: str
    tau: float = 0.0
    drop: bool = False
    #: a sitemap: the URLs its ``<lastmod>`` made due at once
    sitemap_due: int = 0
    #: a sitemap not followed because the crawl's fetches refuted it (its figures)
    distrusted: LastmodResult | None = None


class RevisitObserver:
    """Validators and response classes of one crawl (see the module docstring)."""

    def __init__(self, refresher: Refresher, cfg: RevisitConfig, spider: Any) -> None:
        self.refresher = refresher
        self.cfg = cfg
        self.spider = spider

    def validators(self, request: Request) -> dict[bytes, str]:
        """The conditional headers for ``request``: ``If-None-Match``,
        ``If-Modified-Since`` from the URL's stored validators ({} if none, and for a
        page the frontier knows but has not recorded as fetched: a process that fetched
        it died before recording its links, so it is fetched whole again, not answered
        by a 304 that would leave its links unknown)."""
        if request.meta.get(ITEM_RETRIES_META):  # sent again for its items: fetched whole
            return {}
        id_ = node_id(request.url)
        state = self.refresher.store.load(id_)
        if state is None or self.refresher.frontier.node_state(id_) not in (None, 2):
            return {}
        headers = {}
        if state.etag:
            headers[b"If-None-Match"] = state.etag
        if state.last_modified:
            headers[b"If-Modified-Since"] = state.last_modified
        return headers

    def rate_bin(self, state: RevisitState | None, weight: float, url: str = "") -> str:
        """The URL's bin in the crawl's rate histogram (``"a:b"``; under a per-host cap,
        ``DOWNLOAD_DELAY`` > 0, ``"a:b:<host label>"``), ``""`` when the policy is not
        ``harmonic`` or the URL has no state. The weight bin is the URL's budget weight
        (:func:`~ipr_crawl.revisit.policy.budget_weight`), whose ``young=K`` factor the
        state keeps from its latest access."""
        if state is None or not isinstance(self.cfg.policy, HarmonicPolicy):
            return ""
        a, b = _BINS.key(estimated_rate(state), budget_weight(state, weight))
        return f"{a}:{b}:{self.host(url)}" if self.cfg.host_delay > 0 and url else f"{a}:{b}"

    def host(self, url: str) -> str:
        """The label of ``url``'s host in the budget ('' without a per-host cap): its
        host name's :func:`~ipr_crawl.ordering.urls.site_hash`, in hex."""
        if self.cfg.host_delay <= 0:
            return ""
        return format(site_hash((urlsplit(url).hostname or "").lower()), "x")

    def weight(self, request: Request) -> float:
        """The URL's weight in the revisit budget (``IPR_REVISIT_WEIGHT``): 1 (uniform),
        or its node's score in the frontier's ordering over the crawl's mean score
        (:meth:`Refresher.mean_score`), within [0.01, 100]; 1 when either is unknown."""
        if self.cfg.weight != "pagerank" or not isinstance(self.cfg.policy, HarmonicPolicy):
            return 1.0
        mean = self.refresher.mean_score()
        score = self.refresher.node_score(node_id(request.url))
        if not mean or score is None:
            return 1.0
        return min(100.0, max(0.01, score / mean))

    def payload(self, request: Request) -> bytes:
        """The stored copy of ``request`` its revisits are made from (no validators,
        no per-fetch meta; a callback that is not a spider method becomes ``parse``)."""
        from ipr_crawl.scheduler.refresher import SIM_TIME_HEADER

        meta = {k: v for k, v in request.meta.items() if k not in _DROP_META}
        revisit = request.replace(dont_filter=True, meta=meta)
        for name in (b"If-None-Match", b"If-Modified-Since", SIM_TIME_HEADER.encode()):
            revisit.headers.pop(name, None)
        try:
            return encode_request(revisit, self.spider)[0]
        except ValueError:
            return encode_request(revisit.replace(callback=None, errback=None), self.spider)[0]

    def cache_hit(self, request: Request, response: Response) -> Observation | None:
        """A copy Scrapy's HTTP cache served without the server's say (fresh to its
        policy, or stale for a failed download or a 5xx): not an access. A URL fetched
        before keeps its state and is due again one policy interval (``tau_{i-1}``)
        from now, outside the budget's spend; a URL the crawl has no state for takes
        the copy as its first version (``new``), binned but not counted in the spend.
        ``Observation("cache_hit")``; None for a copy that is not a 2xx."""
        if not 200 <= response.status < 300:
            return None
        id_ = node_id(request.url)
        state = self.refresher.store.load(id_)
        if state is None:
            return self.observe(request, response, spend=False)
        cfg, now = self.cfg, self.refresher.clock.now()
        tau = state.interval if state.interval > 0 else DAY
        due = next_due(now, tau, cfg.resolution, cfg.min_interval, cfg.max_interval)
        self.refresher.store.record(id_, canonical_url(request.url), state, due)  # no event, no spend
        return Observation("cache_hit", due - now)

    def observe(self, request: Request, response: Response, spend: bool = True) -> Observation | None:
        """Classify ``response`` and record the URL's new state, due time and event;
        None when the response is not one revisits judge (another status, or a 304
        to validators this crawl did not send). ``spend`` False: not counted in the
        budget's spend (a copy of Scrapy's HTTP cache, :meth:`cache_hit`)."""
        cfg, store, clock = self.cfg, self.refresher.store, self.refresher.clock
        status = response.status
        url = request.url
        id_ = node_id(url)
        curl = canonical_url(url)  # what the state, the event and the pool's group are keyed by
        redirected = request.meta.get("redirect_urls")
        if redirected:  # the URLs that redirected here are not revisited themselves
            store.unschedule([node_id(u) for u in redirected if node_id(u) != id_])
        if status in (404, 410):
            return self._gone(request, status)
        if status != 304 and not 200 <= status < 300:
            return None
        state = store.load(id_)
        if status == 304 and state is None:
            return None
        t = bucket(clock.now(), cfg.resolution)
        kind, validators = self._classify(response, state)
        changed = kind == "changed"
        last_modified = validators.get("last_modified", "")
        modified_at = parse_http_date(last_modified) if (changed and cfg.use_last_modified) else None
        weight = self.weight(request)
        old_bin = self.rate_bin(state, weight, url)  # before access() updates the state in place
        # harmonic: the rate prior of the URL's directory (revisit.budget.RatePool)
        pool = self.refresher.rate_pool()
        group = pool_group(curl) if pool is not None else ""
        interval = t - state.last if state is not None and t > state.last else 0.0
        gamma = isinstance(cfg.policy, HarmonicPolicy) and cfg.policy.prior == "gamma"
        before = rate_counts(state) if gamma else None  # state is updated in place
        # harmonic:…:new=learn: a stable share of new URLs explores with an early first
        # revisit, whose outcome teaches the crawl the rate of a URL fetched once
        learn = isinstance(cfg.policy, HarmonicPolicy) and cfg.policy.new == "learn"
        explore = learn and (state is None or state.accesses == 1) and explores_new(curl)  # matters no later
        first_revisit = explored_first_revisit(state, explore, interval)
        state, tau = access(cfg.policy, state, t, changed, modified_at, weight=weight, host=self.host(url),
                            prior_scale=pool.scale(group, at=t) if pool is not None else None,
                            etag=validators.get("etag"), last_modified=validators.get("last_modified"),
                            digest=validators.get("digest"), explore=explore)
        if pool is not None and interval > 0:
            pool.observe(group, changed, interval, at=t)  # this process's own, until the next read of the crawl's
        due = next_due(t, tau, cfg.resolution, cfg.min_interval, cfg.max_interval)
        sitemap = sitemap_body(response) if cfg.sitemap_lastmod and status != 304 else None
        result = None
        if sitemap is not None:  # a sitemap is read on its own period, not the policy's
            result = self._read_sitemap(url, response, sitemap, kind)
            useful = result is not None and not result.distrusted and result.moved + result.held > 0
            due = next_due(t, self.sitemap_period(state, useful), cfg.resolution)
            tau = due - t
        # an unchanged page the frontier has not recorded as fetched (the process that
        # fetched it died before recording its links) goes to the spider: its links
        drop = kind == "not_modified" or (
            kind == "unchanged" and cfg.skip_unchanged and self.refresher.frontier.node_state(id_) in (None, 2))
        payload = self.payload(request) if kind in ("new", "changed") else b""
        event = {
            "url": curl, "t": t, "kind": kind, "status": status, "tau": tau, "due": due,
            "m": state.m, "T": state.T, "U": state.U,
        }
        store.record(id_, curl, state, due, payload, lease_of(request) if drop else b"", event,
                     rate_bins=(old_bin, self.rate_bin(state, weight, url)),
                     pool=(group, changed, interval) if pool is not None else None,
                     moments=RateMoments.delta(before, rate_counts(state)) if before is not None else None,
                     first=(changed, interval) if first_revisit else None, spend=spend)
        if result is not None:
            return Observation(kind, tau, drop, result.moved, result if result.distrusted else None)
        return Observation(kind, tau, drop)

    def _gone(self, request: Request, status: int) -> Observation | None:
        """A 404 or 410 of a URL the crawl has state for: recorded ``gone``, never due
        again, out of the rate histogram. None for a URL without state."""
        store, url = self.refresher.store, request.url
        id_ = node_id(url)
        state = store.load(id_)
        if state is None:
            return None
        curl = canonical_url(url)
        t = bucket(self.refresher.clock.now(), self.cfg.resolution)
        store.record(id_, curl, state, None,
                     event={"url": curl, "t": t, "kind": "gone", "status": status},
                     rate_bins=(self.rate_bin(state, self.weight(request), url), ""))
        return Observation("gone")

    def _classify(self, response: Response, state: RevisitState | None) -> tuple[str, dict[str, str]]:
        """``(kind, validators)`` of a 2xx or 304: ``not_modified`` (304), ``new`` (no
        state), ``unchanged`` or ``changed`` (the body's digest, ``IPR_REVISIT_HASH``,
        against the stored one); the validators are the response's ``etag``,
        ``last_modified`` and (2xx) ``digest``, those it has."""
        cfg = self.cfg
        etag = _header(response, b"ETag")
        last_modified = _header(response, b"Last-Modified")
        validators: dict[str, str] = {}
        if etag:
            validators["etag"] = etag
        if last_modified:
            validators["last_modified"] = last_modified
        if response.status == 304:
            return "not_modified", validators
        encoding = response.encoding if isinstance(response, TextResponse) else "utf-8"
        validators["digest"] = digest(response.body, cfg.hash_mode, encoding)
        if state is None:
            return "new", validators
        if same_version(state.digest, validators["digest"], cfg.simhash_distance):
            return "unchanged", validators
        return "changed", validators

    def _read_sitemap(self, url: str, response: Response, sitemap: bytes, kind: str) -> LastmodResult | None:
        """A fetched sitemap's ``<lastmod>`` dates applied to the URLs it lists
        (:meth:`~ipr_crawl.store.revisit.RevisitStore.apply_lastmods`); None when it is
        not new or changed (an unchanged sitemap says nothing new) or lists no date."""
        cfg, store, clock = self.cfg, self.refresher.store, self.refresher.clock
        # parsed only when it changed: an unchanged sitemap says nothing new
        lastmods = sitemap_lastmods(response, sitemap) if kind in ("new", "changed") else None
        if not lastmods:
            return None
        # under a budget, no more than it has left: the spend stays the budget's; the
        # URLs the sitemap shows unchanged wait for its next reads
        result = store.apply_lastmods(
            [(node_id(u), bucket(w, cfg.resolution), span) for u, w, span in lastmods], clock.now(),
            hold=2 * cfg.sitemap_secs, limit=self.refresher.budget_headroom(), stale_after=cfg.max_interval,
        )
        logger.debug("ipr-crawl: sitemap <GET %s>: %d URLs with a lastmod, %d made due now, %d held; "
                     "lastmod confirmed by our fetches %d, refuted %d", url, len(lastmods), result.moved,
                     result.held, result.confirmed, result.refuted)
        return result

    def sitemap_period(self, state: RevisitState, useful: bool) -> float:
        """The interval (s) to a sitemap's next read: ``IPR_REVISIT_SITEMAP_SECS`` after a
        read that moved or held URLs (``useful``); otherwise twice the latest interval
        (a sitemap unchanged, distrusted or of no use is read less and less often:
        its reads are accesses of the budget), at most ``IPR_REVISIT_MAX_SECS`` (64
        periods when that is 0)."""
        cfg = self.cfg
        if useful:
            return cfg.sitemap_secs
        cap = cfg.max_interval if cfg.max_interval > 0 else 64 * cfg.sitemap_secs
        return min(max(cfg.sitemap_secs, 2 * state.last_interval), cap)
