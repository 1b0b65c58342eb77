"""Settings of ipr-crawl: reading and checking them against the settings table.

The table (:data:`SETTINGS`: name, default, type, bounds, unit and meaning of every
``IPR_*`` setting) is :mod:`ipr_crawl.settings_table`; its names are imported from
here, their public path. :data:`DEFAULTS` is what the add-on installs with ``addon``
priority, so anything a user sets in a project, a spider's ``custom_settings`` or
``-s`` on the command line wins. :func:`FrontierConfig.from_settings` and
:func:`RevisitConfig.from_settings` read them with Scrapy's typed getters and raise
:class:`ValueError` naming the setting when a value is malformed, out of range or
not finite. :func:`markdown_table` is the settings table of docs/settings.md. The
crawl id's rule is :mod:`ipr_crawl.crawl_id`'s.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ipr_crawl.crawl_id import check_crawl_id, default_crawl_id
from ipr_crawl.ordering.params import LUA_NAMES, ORDERINGS, TIE_RULES, OrderingParams, parse_ordering
from ipr_crawl.settings_table import (
    DEFAULTS,
    ORDERING_FIELDS,
    OTHER_SETTINGS,
    REVISIT_MODES,
    SETTINGS,
    Setting,
    markdown_table,
)

__all__ = [
    "SettingError", "DEFAULTS", "default_crawl_id", "LUA_NAMES", "ORDERINGS", "SETTINGS", "TIE_RULES", "FrontierConfig",
    "RevisitConfig", "REVISIT_MODES", "Setting", "markdown_table", "parse_ordering", "parse_instant", "polite_enabled",
    "OTHER_SETTINGS", "check_settings", "read", "read_other", "ORDERING_FIELDS",
]

#: ``redis+sentinel://`` URLs (parsed by ``store.connection.parse_sentinel_url``).
_SENTINEL_URL = re.compile(r"^rediss?\+sentinel://([^@/]*@)?[^@/,:]+(:\d+)?(,[^@/,:]+(:\d+)?)*/[^/]+(/\d+)?/?$")


class SettingError(ValueError):
    """A setting has a value ipr-crawl cannot use; the message names the setting and
    what is allowed. Stops the crawl before it starts."""


_BY_NAME = {s.name: s for s in SETTINGS}


#: What each kind of setting accepts, for the message refusing a malformed value.
_ACCEPTED = {
    "bool": "use True or False (or true, false, 1, 0)",
    "int": "use a whole number",
    "float": "use a number",
    "list": "use a list, or values separated by commas",
}



def _bounds(spec: Setting) -> str:
    """`` >= 0``, `` > 0``, `` in [0, 1]``... of a number setting; ``""`` for none."""
    if spec.kind not in ("int", "float") or (spec.low is None and spec.high is None):
        return ""
    if spec.low is not None and spec.high is not None:
        return f" in {'(' if spec.low_open else '['}{spec.low:g}, {spec.high:g}]"
    if spec.low is not None:
        return f" {'>' if spec.low_open else '>='} {spec.low:g}"
    return f" <= {spec.high:g}"


def _typed(settings: Any, name: str, kind: str, default: Any, bounds: str = "") -> Any:
    """Setting ``name`` read with Scrapy's getter of ``kind`` (``settings.getbool``...);
    a value the getter refuses raises :class:`SettingError` naming the setting and
    what it accepts."""
    raw = settings.get(name, default)
    try:
        return getattr(settings, "get" + kind)(name, default)
    except (TypeError, ValueError):
        raise SettingError(f"{name}={raw!r}: {_ACCEPTED[kind]}{bounds}") from None


def read_other(settings: Any, name: str) -> Any:
    """A setting of :data:`OTHER_SETTINGS` (Scrapy's, scrapy-redis's), typed; :class:`SettingError` if malformed."""
    for other, kind, default in OTHER_SETTINGS:
        if other == name:
            return _typed(settings, name, kind, default)
    raise KeyError(name)


def read(settings: Any, name: str) -> Any:
    """The value of setting ``name`` from a Scrapy ``Settings``, typed and checked against
    :data:`SETTINGS`: a malformed value, a number out of bounds, NaN or an infinity, or a
    string not among the choices raises :class:`ValueError` naming it and what is allowed."""
    spec = _BY_NAME[name]
    raw = settings.get(name, spec.default)
    if spec.kind == "str":
        value: Any = str(raw if raw is not None else "").strip()
        if spec.choices:
            value = value.lower() or str(spec.default)
            if value not in spec.choices:
                raise SettingError(f"{name}={raw!r}: allowed " + ", ".join(spec.choices))
        return value
    if raw is None and spec.default is None:  # "unset": the caller's fallback applies
        return None
    value = _typed(settings, name, spec.kind, spec.default, _bounds(spec))
    if spec.kind in ("int", "float"):
        if isinstance(value, float) and not math.isfinite(value):
            raise SettingError(f"{name}={raw!r} must be a finite number")
        if spec.low is not None and (value < spec.low or (spec.low_open and value == spec.low)):
            raise SettingError(f"{name}={value!r} must be {'>' if spec.low_open else '>='} {spec.low:g}")
        if spec.high is not None and value > spec.high:
            raise SettingError(f"{name}={value!r} must be <= {spec.high:g}")
    return value


def polite_enabled(settings: Any) -> bool:
    """``IPR_POLITE_POP``: ``"auto"`` (``DOWNLOAD_DELAY > 0`` or AutoThrottle on) or a boolean; else ValueError."""
    value = settings.get("IPR_POLITE_POP", DEFAULTS["IPR_POLITE_POP"])
    if isinstance(value, str) and value.strip().lower() == "auto":
        return read_other(settings, "DOWNLOAD_DELAY") > 0 or read_other(settings, "AUTOTHROTTLE_ENABLED")
    try:
        return settings.getbool("IPR_POLITE_POP")
    except (TypeError, ValueError):
        raise SettingError(f"IPR_POLITE_POP={value!r}: use auto, True or False") from None


#: FrontierConfig.next_run by (IPR_REVISIT_ENABLED, SCHEDULER_PERSIST)
NEXT_RUN = {(True, True): "revisits", (True, False): "revisits", (False, True): "persist", (False, False): "afresh"}


@dataclass(frozen=True)
class FrontierConfig:
    """Validated frontier settings (meanings and defaults in :data:`SETTINGS`).

    ``params`` holds the ordering's parameters; ``ordering``, ``cutoff`` and
    ``tie_rule`` are shorthands for its fields."""

    redis_url: str
    data_dir: str
    appendfsync: str
    crawl_id: str
    params: OrderingParams
    max_links_per_page: int
    lease_secs: float
    pop_batch_size: int
    requeue_batch_size: int
    redis_retry_secs: float = 60.0
    redis_wait_replicas: int = 0
    redis_tls: dict[str, str] = field(default_factory=dict)
    redis_wait_ms: int = 1000
    redis_allow_eviction: bool = False
    redis_backoff_secs: float = 0.1
    gil_switch_secs: float = 0.0002
    redis_thread: str = "auto"
    polite_pop: bool = False
    polite_buffer_size: int = 64
    polite_scan: int = 1000
    polite_min_ratio: float = 0.0
    record_pipelined: bool = True
    heartbeat_secs: float = 5.0
    lease_max_secs: float = 3600.0
    max_releases: int = 5
    item_retry_errors: tuple[str, ...] = ()
    logstats_interval: float = 60.0
    timeline_secs: float = 10.0
    prior_crawl: str = ""
    keep_crawls: int = 1
    slow_start: bool = True
    wait_for_parse: bool = True
    cluster_buckets: int = 1
    #: a finished crawl's next run by these settings: "revisits", "persist" (SCHEDULER_PERSIST), "afresh"
    next_run: str = "afresh"

    @property
    def ordering(self) -> str:
        return self.params.ordering

    @property
    def cutoff(self) -> str:
        return self.params.cutoff

    @property
    def tie_rule(self) -> str:
        return self.params.tie_rule

    @classmethod
    def from_settings(cls, settings: Any, spider_name: str = "") -> FrontierConfig:
        """Read and check the frontier's ``IPR_*`` settings of a Scrapy ``Settings``;
        raises :class:`ValueError` naming the setting and what is allowed."""
        ordering, cutoff = _ordering(settings)
        url = _redis_url(settings)
        tls = redis_tls(settings, url)
        crawl_id = _crawl_id(settings, spider_name)
        params = _ordering_params(settings, ordering, cutoff)
        prior_crawl = _prior_crawl(settings, ordering)
        buckets = _cluster_buckets(settings, params, prior_crawl)
        return cls(
            redis_url=url,
            cluster_buckets=buckets,
            data_dir=read(settings, "IPR_DATA_DIR"),
            appendfsync=read(settings, "IPR_REDIS_APPENDFSYNC"),
            crawl_id=crawl_id,
            params=params,
            prior_crawl=prior_crawl,
            keep_crawls=read(settings, "IPR_KEEP_CRAWLS"),
            max_links_per_page=read(settings, "IPR_MAX_LINKS_PER_PAGE"),
            lease_secs=read(settings, "IPR_LEASE_SECS"),
            pop_batch_size=read(settings, "IPR_POP_BATCH_SIZE"),
            slow_start=read(settings, "IPR_SLOW_START"),
            wait_for_parse=read(settings, "IPR_WAIT_FOR_PARSE"),
            record_pipelined=read(settings, "IPR_RECORD_PIPELINED"),
            requeue_batch_size=read(settings, "IPR_REQUEUE_BATCH_SIZE"),
            redis_retry_secs=read(settings, "IPR_REDIS_RETRY_SECS"),
            gil_switch_secs=read(settings, "IPR_GIL_SWITCH_SECS"),
            redis_thread=read(settings, "IPR_REDIS_THREAD"),
            redis_wait_replicas=read(settings, "IPR_REDIS_WAIT_REPLICAS"),
            redis_tls=tls,
            redis_wait_ms=read(settings, "IPR_REDIS_WAIT_MS"),
            redis_allow_eviction=read(settings, "IPR_REDIS_ALLOW_EVICTION"),
            redis_backoff_secs=read(settings, "IPR_REDIS_BACKOFF_SECS"),
            polite_pop=polite_enabled(settings),
            polite_buffer_size=read(settings, "IPR_POLITE_BUFFER_SIZE"),
            polite_scan=read(settings, "IPR_POLITE_SCAN"),
            polite_min_ratio=read(settings, "IPR_POLITE_MIN_RATIO"),
            heartbeat_secs=read(settings, "IPR_HEARTBEAT_SECS"),
            lease_max_secs=read(settings, "IPR_LEASE_MAX_SECS"),
            max_releases=read(settings, "IPR_MAX_RELEASES"),
            item_retry_errors=tuple(read(settings, "IPR_ITEM_RETRY_ERRORS")),
            logstats_interval=(
                read(settings, "IPR_LOGSTATS_INTERVAL") if settings.get("IPR_LOGSTATS_INTERVAL") is not None
                else read_other(settings, "LOGSTATS_INTERVAL")
            ),
            timeline_secs=read(settings, "IPR_TIMELINE_SECS"),
            next_run=NEXT_RUN[(read(settings, "IPR_REVISIT_ENABLED"), settings.getbool("SCHEDULER_PERSIST"))],
        )


def _ordering(settings: Any) -> tuple[str, str]:
    """``(ordering, cutoff)`` of ``IPR_ORDERING`` and ``IPR_CUTOFF``."""
    try:
        return parse_ordering(read(settings, "IPR_ORDERING"), read(settings, "IPR_CUTOFF"))
    except SettingError:
        raise
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _redis_url(settings: Any) -> str:
    """``IPR_REDIS_URL``: empty (the embedded server), or a URL of a scheme ipr-crawl connects to."""
    url = read(settings, "IPR_REDIS_URL")
    if url and not url.startswith(("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")):
        raise SettingError(
            f"IPR_REDIS_URL={url!r}: use a redis://, rediss://, unix:// or "
            "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] URL, "
            "or leave it empty for the embedded server"
        )
    if url.startswith(("redis+sentinel://", "rediss+sentinel://")) and not _SENTINEL_URL.match(url):
        raise SettingError(
            "IPR_REDIS_URL: a sentinel URL names the sentinels and the service, "
            "redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]"
        )
    return url


#: The TLS settings and redis-py's argument each gives.
TLS_SETTINGS = (("IPR_REDIS_SSL_CA_CERTS", "ssl_ca_certs"), ("IPR_REDIS_SSL_CERTFILE", "ssl_certfile"),
                ("IPR_REDIS_SSL_KEYFILE", "ssl_keyfile"))


def redis_tls(settings: Any, url: str) -> dict[str, str]:
    """redis-py's TLS arguments (``ssl_ca_certs``...) of the ``IPR_REDIS_SSL_*`` settings set: each
    an existing file, only with a ``rediss://`` URL; :class:`SettingError` naming the setting."""
    tls = {}
    for name, key in TLS_SETTINGS:
        path = str(read(settings, name) or "").strip()
        if not path:
            continue
        if not url.startswith(("rediss://", "rediss+sentinel://")):
            raise SettingError(f"{name} is set, but IPR_REDIS_URL is not a rediss:// URL (TLS)")
        if not os.path.isfile(path):
            raise SettingError(f"{name}={path!r}: no such file")
        tls[key] = path
    return tls


def _crawl_id(settings: Any, spider_name: str) -> str:
    """``IPR_CRAWL_ID``, or :func:`default_crawl_id` when it is empty; checked by
    :func:`ipr_crawl.crawl_id.check_crawl_id`."""
    crawl_id = str(settings.get("IPR_CRAWL_ID") or "").strip()
    if not crawl_id:
        if not spider_name:
            raise SettingError("IPR_CRAWL_ID is empty and the spider has no name")
        crawl_id = default_crawl_id(settings, spider_name)
    try:
        return check_crawl_id(crawl_id)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _ordering_params(settings: Any, ordering: str, cutoff: str) -> OrderingParams:
    """The ordering's parameters, each read from its setting (:data:`ORDERING_FIELDS`)."""
    values: dict[str, Any] = {}
    for name, setting in ORDERING_FIELDS.items():
        if name == "cutoff":  # IPR_ORDERING's own cut-off (ipr:pl) wins: parse_ordering decided it
            continue
        values[name] = tuple(read(settings, s) for s in setting) if isinstance(setting, tuple) else read(settings, setting)
    return OrderingParams(ordering=ordering, cutoff=cutoff, **values)


def _prior_crawl(settings: Any, ordering: str) -> str:
    """``IPR_PRIOR_CRAWL``: empty, or a crawl id, with an ordering that has scores."""
    prior_crawl = str(read(settings, "IPR_PRIOR_CRAWL") or "").strip()
    if prior_crawl:
        try:
            check_crawl_id(prior_crawl, "IPR_PRIOR_CRAWL")
        except ValueError as exc:
            raise SettingError(str(exc)) from None
        if ordering in ("bf", "larger-sites-first"):
            raise SettingError(
                f"IPR_PRIOR_CRAWL={prior_crawl!r} needs an ordering with scores; IPR_ORDERING={ordering!r} "
                "orders by discovery or by site and would ignore it")
    return prior_crawl


def _cluster_buckets(settings: Any, params: OrderingParams, prior_crawl: str) -> int:
    """``IPR_CLUSTER_BUCKETS``; more than one only with what a bucket can hold alone."""
    buckets = read(settings, "IPR_CLUSTER_BUCKETS")
    if buckets > 1:
        why = ""
        ordering, cutoff = params.ordering, params.cutoff
        if ordering in ("pr", "larger-sites-first"):
            why = f"IPR_ORDERING={ordering!r} orders by the whole crawl's graph or sites, which no bucket holds"
        elif ordering == "ipr" and cutoff != "dl1":
            why = (f"the IPR cut-off {cutoff!r} passes scores on beyond a page's direct targets, which "
                   "may lie in other buckets; use ipr:dl1 or push")
        elif prior_crawl:
            why = "a prior (IPR_PRIOR_CRAWL) is kept for one bucket only"
        elif read(settings, "IPR_REVISIT_ENABLED"):
            why = "revisits (IPR_REVISIT_ENABLED) keep their schedule for one bucket only"
        if why:
            raise SettingError(f"IPR_CLUSTER_BUCKETS={buckets}: {why}")
    return buckets


def _host_delay(settings: Any) -> float:
    """``IPR_REVISIT_HOST_DELAY_SECS``, or Scrapy's ``DOWNLOAD_DELAY`` when unset (s, >= 0)."""
    value = read(settings, "IPR_REVISIT_HOST_DELAY_SECS")
    if value is None:
        value = read_other(settings, "DOWNLOAD_DELAY") if hasattr(settings, "getfloat") else 0.0
    return max(0.0, float(value))


def parse_instant(value: Any, name: str) -> float | None:
    """POSIX seconds of an ISO 8601 date/instant (UTC when naive) or a number;
    None for an empty value. Raises :class:`ValueError` naming ``name``.

    >>> parse_instant("1970-01-02", "X"), parse_instant("", "X")
    (86400.0, None)
    """
    from datetime import datetime, timezone

    text = str(value if value is not None else "").strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise SettingError(f"{name}={value!r} must be a finite number of seconds or an ISO 8601 instant")
        return number
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        raise SettingError(f"{name}={value!r}: use an ISO 8601 date or instant, or POSIX seconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


@dataclass(frozen=True)
class RevisitConfig:
    """Validated ``IPR_REVISIT_*`` settings (meanings and defaults in :data:`SETTINGS`).

    ``policy`` is the parsed :data:`ipr_crawl.revisit.Policy`; ``virtual_start``
    is the start of a virtual clock (s) or None for the system clock.
    """

    enabled: bool
    policy: Any
    mode: str
    hash_mode: str
    simhash_distance: int
    use_last_modified: bool
    skip_unchanged: bool
    resolution: float
    min_interval: float
    max_interval: float
    horizon: float
    until: float | None
    virtual_start: float | None
    refresh_secs: float
    refresh_batch_size: int
    budget_refresh_secs: float
    retry_secs: float
    events_maxlen: int
    weight: str = "uniform"
    #: harmonic: Scrapy's DOWNLOAD_DELAY (s); > 0 caps each host's share of the budget
    #: at one revisit per delay (revisit.budget.solve_nu_hosts)
    host_delay: float = 0.0
    #: IPR_REVISIT_SITEMAP_LASTMOD
    sitemap_lastmod: bool = True
    #: IPR_REVISIT_SITEMAP_SECS (s)
    sitemap_secs: float = 86400.0

    @classmethod
    def from_settings(cls, settings: Any) -> RevisitConfig:
        """Read and check the revisit settings; :class:`ValueError` names a bad one."""
        from ipr_crawl.revisit.policy import parse_policy

        spec = read(settings, "IPR_REVISIT_POLICY") or DEFAULTS["IPR_REVISIT_POLICY"]
        try:
            policy = parse_policy(spec)
        except ValueError as exc:
            raise SettingError(f"IPR_REVISIT_POLICY={spec!r}: {exc}") from None
        budget_text = read(settings, "IPR_REVISIT_BUDGET")
        if budget_text:
            from dataclasses import replace as _replace

            from ipr_crawl.revisit.budget import parse_budget
            from ipr_crawl.revisit.policy import HarmonicPolicy

            try:
                budget = parse_budget(budget_text)
            except ValueError as exc:
                raise SettingError(f"IPR_REVISIT_BUDGET={budget_text!r}: {exc}") from None
            if not isinstance(policy, HarmonicPolicy):
                raise SettingError(
                    f"IPR_REVISIT_BUDGET={budget_text!r} is for IPR_REVISIT_POLICY=harmonic, not {spec!r}"
                )
            policy = _replace(policy, budget=budget)
        clock = read(settings, "IPR_REVISIT_CLOCK") or "system"
        if clock.lower() == "system":
            virtual_start = None
        elif clock.lower().startswith("virtual:"):
            virtual_start = parse_instant(clock[8:], "IPR_REVISIT_CLOCK")
            if virtual_start is None:
                raise SettingError(f"IPR_REVISIT_CLOCK={clock!r}: give the start, e.g. virtual:2013-01-01")
        else:
            raise SettingError(f"IPR_REVISIT_CLOCK={clock!r}: allowed system or virtual:<ISO 8601 start>")
        cfg = cls(
            enabled=read(settings, "IPR_REVISIT_ENABLED"),
            policy=policy,
            mode=read(settings, "IPR_REVISIT_MODE"),
            hash_mode=read(settings, "IPR_REVISIT_HASH"),
            simhash_distance=read(settings, "IPR_REVISIT_SIMHASH_DISTANCE"),
            use_last_modified=read(settings, "IPR_REVISIT_USE_LAST_MODIFIED"),
            skip_unchanged=read(settings, "IPR_REVISIT_SKIP_UNCHANGED"),
            resolution=read(settings, "IPR_REVISIT_RESOLUTION_SECS"),
            min_interval=read(settings, "IPR_REVISIT_MIN_SECS"),
            max_interval=read(settings, "IPR_REVISIT_MAX_SECS"),
            horizon=read(settings, "IPR_REVISIT_HORIZON_SECS"),
            until=parse_instant(settings.get("IPR_REVISIT_UNTIL"), "IPR_REVISIT_UNTIL"),
            virtual_start=virtual_start,
            refresh_secs=read(settings, "IPR_REVISIT_REFRESH_SECS"),
            refresh_batch_size=read(settings, "IPR_REVISIT_REFRESH_BATCH_SIZE"),
            budget_refresh_secs=read(settings, "IPR_REVISIT_BUDGET_REFRESH_SECS"),
            weight=read(settings, "IPR_REVISIT_WEIGHT"),
            host_delay=_host_delay(settings),
            retry_secs=read(settings, "IPR_REVISIT_RETRY_SECS"),
            events_maxlen=read(settings, "IPR_REVISIT_EVENTS_MAXLEN"),
            sitemap_lastmod=read(settings, "IPR_REVISIT_SITEMAP_LASTMOD"),
            sitemap_secs=read(settings, "IPR_REVISIT_SITEMAP_SECS"),
        )
        if cfg.max_interval and cfg.max_interval < cfg.min_interval:
            raise SettingError(
                f"IPR_REVISIT_MAX_SECS={cfg.max_interval!r} is below IPR_REVISIT_MIN_SECS={cfg.min_interval!r} "
                "(raise it, or set 0 for no upper bound)"
            )
        return cfg


def check_settings(settings: Any, spider_name: str = "(spider)") -> None:
    """Check every setting ipr-crawl reads, whatever else is on: each ``IPR_*`` of
    :data:`SETTINGS` (booleans included), the revisit settings even with
    ``IPR_REVISIT_ENABLED`` off (a typo waits for no later run to surface), and the
    Scrapy and scrapy-redis settings of :data:`OTHER_SETTINGS`. Raises
    :class:`SettingError` naming the first bad one and what it accepts."""
    for spec in SETTINGS:
        if spec.name == "IPR_POLITE_POP":
            polite_enabled(settings)
        else:
            read(settings, spec.name)
    for name, _kind, _default in OTHER_SETTINGS:
        read_other(settings, name)
    FrontierConfig.from_settings(settings, spider_name=spider_name)
    RevisitConfig.from_settings(settings)
