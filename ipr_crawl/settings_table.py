"""The settings table of ipr-crawl: every ``IPR_*`` setting's name, default, type,
bounds, unit and meaning (:data:`SETTINGS`), once.

The defaults the add-on installs (:data:`DEFAULTS`), the validation
(:func:`ipr_crawl.config.read`), the ordering parameters' defaults (a test holds
:class:`ipr_crawl.ordering.OrderingParams` to :data:`ORDERING_FIELDS`'s rows) and
docs/settings.md (:func:`markdown_table`) all come from it. The Scrapy and
scrapy-redis settings ipr-crawl reads too are in :data:`OTHER_SETTINGS`.
Import these names from :mod:`ipr_crawl.config`, their public path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipr_crawl.ordering.params import ORDERINGS, TIE_RULES
from ipr_crawl.revisit.fingerprint import HASH_MODES

__all__ = [
    "DEFAULTS", "ORDERING_FIELDS", "OTHER_SETTINGS", "REVISIT_MODES", "SETTINGS", "Setting", "markdown_table",
]

#: Crawl lifetimes with revisits: fetch what is due at start and close, or stay
#: open and sleep until the next due time.
REVISIT_MODES = ("run-once", "continuous")


@dataclass(frozen=True)
class Setting:
    """One ``IPR_*`` setting.

    ``kind``: ``bool``, ``int``, ``float``, ``str``, ``list`` (Scrapy's getters);
    ``low``/``high``: inclusive bounds of numbers (None: none), ``low_open``: ``low``
    itself is refused; ``choices``: allowed strings (lower-cased); ``unit``: shown
    in the table; ``doc``: its meaning (Markdown).
    """

    name: str
    default: Any
    kind: str
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    unit: str = ""
    shown_default: str = ""


S = Setting
_ORDER_DOC = (
    "`ipr` (or `ipr:dl1`, `ipr:pl`, `ipr:vr`, `ipr:ar`), `push`, `blc`, `ifs`, `importance`, `pr`, "
    "`opic`, `larger-sites-first`, `bf` (see [docs/orderings.md](docs/orderings.md))"
)
#: Every setting of ipr-crawl, in the README's order.
SETTINGS: tuple[Setting, ...] = (
    S("IPR_ENABLED", True, "bool", "off: the add-on does nothing, the middlewares raise `NotConfigured`"),
    S("IPR_REDIS_URL", "", "str", "`redis://`, `rediss://` (TLS; password in the URL) or `unix://` URL of a "
      "shared server; the URL of any node of a Redis Cluster uses the cluster; "
      "`redis+sentinel://HOST:PORT[,HOST:PORT…]/SERVICE[/DB]` the primary that Redis Sentinel names "
      "([docs/scaling.md](docs/scaling.md)); empty: embedded server"),
    S("IPR_DATA_DIR", "", "str", "embedded server's folder (`ipr.rdb`, `appendonly.aof`); empty: `.scrapy/ipr` of the project"),
    S("IPR_REDIS_APPENDFSYNC", "everysec", "str", "embedded server's AOF fsync policy",
      choices=("always", "everysec", "no")),
    S("IPR_REDIS_SSL_CA_CERTS", "", "str", "`rediss://`: the CA certificate (PEM file) that signed the server's "
      "certificate; empty: the system's CAs (as `?ssl_ca_certs=` in the URL)"),
    S("IPR_REDIS_SSL_CERTFILE", "", "str", "`rediss://`: this client's certificate (PEM file), for a server with "
      "`tls-auth-clients yes`"),
    S("IPR_REDIS_SSL_KEYFILE", "", "str", "`rediss://`: the private key (PEM file) of `IPR_REDIS_SSL_CERTFILE`"),
    S("IPR_REDIS_WAIT_REPLICAS", 0, "int", "after each page's record call, wait (Redis `WAIT`) until this many "
      "replicas have it, so that a failover cannot lose it; 0: do not wait ([docs/scaling.md](docs/scaling.md))",
      low=0),
    S("IPR_REDIS_ALLOW_EVICTION", False, "bool", "start on a Redis whose `maxmemory-policy` may evict any key "
      "when it is full (`allkeys-*`), which is refused otherwise: an evicted key is a page lost without a word "
      "([docs/operations.md](docs/operations.md#a-full-redis))"),
    S("IPR_REDIS_WAIT_MS", 1000, "int", "`IPR_REDIS_WAIT_REPLICAS`: wait at most this long; fewer replicas in time "
      "are counted in `ipr/redis/wait_short`, the crawl goes on and sends no `WAIT` to that server for 5 s", low=1, unit="ms"),
    S("IPR_CLUSTER_BUCKETS", 1, "int", "split the crawl over this many buckets by host, each under its own "
      "Redis Cluster hash tag `ipr:{<id>:<bucket>}:*`, so that one crawl spreads over several masters; links "
      "between buckets go through outboxes. 1: one hash tag (one server, or one slot of a cluster). Not with "
      "`pr`, `larger-sites-first`, the `ipr` cut-offs beyond `dl1`, a prior or revisits "
      "([docs/scaling.md](docs/scaling.md))", low=1, high=255),
    S("IPR_REDIS_RETRY_SECS", 60.0, "float", "a Redis command that fails (server restarted, network down) is "
      "sent again for up to this long, then the crawl stops cleanly", low=0.0, unit="s"),
    S("IPR_REDIS_THREAD", "auto", "str", "where the scheduler's Redis calls are made: `auto`, pipelined (written "
      "without waiting for replies, one write per server and turn of the loop; a Redis Cluster and buckets too) "
      "on Scrapy's asyncio event loop, or with another `TWISTED_REACTOR` on a private asyncio loop in one I/O "
      "thread, while Redis answers; on the scheduler's Redis thread while it is away, so that the crawl never "
      "sits in a retry; `always`: on the thread (at a CPU cost) "
      "([docs/architecture.md](docs/architecture.md#the-event-loop-never-waits-on-redis))",
      choices=("auto", "always")),
    S("IPR_GIL_SWITCH_SECS", 0.0002, "float", "while the crawl runs with its calls on the Redis thread "
      "(`IPR_REDIS_THREAD=always`; a client with no asyncio twin: Sentinel), Python's thread switch interval "
      "(`sys.setswitchinterval`; its default is 0.005): how long the busy crawler may keep the scheduler's "
      "Redis thread waiting for the interpreter before each reply is read; `0` leaves Python's own "
      "([docs/architecture.md](docs/architecture.md#the-event-loop-never-waits-on-redis))", low=0.0, unit="s"),
    S("IPR_REDIS_BACKOFF_SECS", 0.1, "float", "first wait between those retries; doubled after each failure, at most 5 s",
      low=0.001, unit="s"),
    S("IPR_CRAWL_ID", "", "str", "the crawl's key space `ipr:{<id>}:*`; no `{` `}`; a second run with the same "
      "id resumes an interrupted crawl, and starts a finished one afresh with it as the prior (`IPR_KEEP_CRAWLS`; "
      "scrapy-redis's `SCHEDULER_PERSIST=True` keeps it finished instead)", shown_default="BOT_NAME.spider name"),
    S("IPR_RESET", False, "bool", "delete the crawl's keys at start and crawl afresh, without a prior (also when "
      "Scrapy's scrapy-redis-style `SCHEDULER_FLUSH_ON_START` is true); its archives stay. Not while other "
      "processes crawl it (live heartbeats): then this one joins them, with a WARNING"),
    S("IPR_KEEP_CRAWLS", 1, "int", "finished crawls of this id kept when it is run again and starts afresh: "
      "the finished crawl is kept as `<id>~<n>` and is the new crawl's prior (unless `IPR_PRIOR_CRAWL` names "
      "another), older ones are deleted; `0`: deleted, no prior "
      "([docs/dropin.md](docs/dropin.md#runs-reruns-and-resets))", low=0),
    S("IPR_ORDERING", "push", "str", _ORDER_DOC),
    S("IPR_CUTOFF", "dl1", "str", "IPR cut-off when `IPR_ORDERING=ipr`", choices=ORDERINGS["ipr"]),
    S("IPR_PL_PAGES", 8, "int", "L of the PL cut-off (pages updated beyond DL1)", low=0),
    S("IPR_VR_THETA", 1.5, "float", "θ of the VR cut-off", low=0.0, low_open=True),
    S("IPR_AR_THRESHOLD", 29 / 30, "float", "a_q / s_q threshold of the AR cut-off", low=0.0, low_open=True,
      shown_default="29/30"),
    S("IPR_PROPAGATION_CAP", 1000, "int", "score updates beyond the direct targets per page (PL/VR/AR); what it "
      "drops is counted in `ipr/propagation/dropped`", low=0),
    S("IPR_PUSH_BUDGET", 10, "int", "`push`: edge updates per fetched page spent pushing residuals on, beyond the "
      "page's own out-links (a strict bound); pages whose budget ran out with residuals left are counted in "
      "`ipr/push/budget_exhausted`", low=0),
    S("IPR_PUSH_DAMPING", 0.85, "float", "`push`: damping factor d (share of a node's mass passed to its out-links)",
      low=0.0, high=1.0, low_open=True),
    S("IPR_PUSH_EPSILON", 0.0, "float", "`push`: residuals below this (in units of `IPR_INITIAL_SCORE`) are kept, "
      "not pushed", low=0.0),
    S("IPR_PRIOR_CRAWL", "", "str", "an earlier crawl's id in the same Redis (e.g. last week's job): its "
      "collected graph's converged PageRank, computed at this crawl's start if not yet stored "
      "(`ipr-crawl pagerank`), raises the priority of the URLs it knows (Baeza-Yates et al. 2005's "
      "historical strategy; not with `bf` or `larger-sites-first`)"),
    S("IPR_PRIOR_WEIGHT", 1.0, "float", "with `IPR_PRIOR_CRAWL`: a known URL's priority is its ordering's score "
      "+ this × its PageRank in the earlier crawl × that crawl's URL count (mean 1)", low=0.0),
    S("IPR_IMPORTANCE_A", 0.2, "float", "a of the `importance` ordering (Matsuoka et al.)", low=0.0),
    S("IPR_IMPORTANCE_B", 0.1, "float", "b of the `importance` ordering", low=0.0),
    S("IPR_IMPORTANCE_C", 1.0, "float", "c of the `importance` ordering", low=0.0),
    S("IPR_IMPORTANCE_D", 0.5, "float", "d of the `importance` ordering", low=0.0),
    S("IPR_PR_INTERVAL_PAGES", 165000, "int", "`pr`: one PageRank power iteration every N fetched pages "
      "(Yamada et al. 2004, §4.2)", low=1),
    S("IPR_PR_DAMPING", 0.85, "float", "`pr`: damping factor, in (0, 1)", low=0.0, high=0.999999, low_open=True),
    S("IPR_OPIC_INITIAL_CASH", 1.0, "float", "`opic`: cash of a start URL", low=0.0, low_open=True),
    S("IPR_INITIAL_SCORE", 1.0, "float", "value a page gets once when fetched (IPR, Yamada et al. 2004, §3)",
      low=0.0, low_open=True),
    S("IPR_TIE_RULE", "same-site", "str", "URLs of one page that the ordering cannot tell apart: `same-site` "
      "first, `other-site` first, or `none` (document order)", choices=TIE_RULES),
    S("IPR_MAX_LINKS_PER_PAGE", 10000, "int", "distinct out-links recorded per page (bounds one record call); "
      "the rest counted in `ipr/links/over_cap`", low=1),
    S("IPR_LEASE_SECS", 600.0, "float", "a leased request not settled within this goes back to the frontier, "
      "unless its process still beats (`IPR_LEASE_MAX_SECS`); a dead process's leases go back sooner "
      "(`IPR_HEARTBEAT_SECS`)", low=0.001, unit="s"),
    S("IPR_LEASE_MAX_SECS", 3600.0, "float", "a live process's leased request (its heartbeat beating) is kept "
      "past `IPR_LEASE_SECS` (a long download, an item in a slow pipeline) up to this age, then goes back to the "
      "frontier with a WARNING (`ipr/lease/overdue`); at most `IPR_LEASE_SECS`: never kept past it",
      low=0.0, unit="s"),
    S("IPR_MAX_RELEASES", 5, "int", "a leased request whose lease goes back more than this many times because its "
      "process died or lost it (a page that crashes every crawler that fetches it) is settled as failed with a "
      "WARNING (`ipr/lease/dead_lettered`), kept for `ipr-crawl release-leases --dead`; 0: no limit", low=0),
    S("IPR_ITEM_RETRY_ERRORS", ["builtins.ConnectionError", "builtins.TimeoutError", "redis.exceptions.ConnectionError",
      "redis.exceptions.TimeoutError"], "list", "an item whose pipeline raised one of these exception classes (a "
      "database or Redis away for a while) has its page fetched again, up to `IPR_MAX_RELEASES` times "
      "(`ipr/items/retried`): at least once, not exactly once ([docs/dropin.md](docs/dropin.md)); empty: Scrapy's "
      "behaviour, the item is logged and dropped"),
    S("IPR_HEARTBEAT_SECS", 5.0, "float", "each crawler process renews its heartbeat this often; the leases of a "
      "process silent for 2 × this go back to the frontier at the next pop of any process", low=0.05, unit="s"),
    S("IPR_LOGSTATS_INTERVAL", None, "float", "an INFO line with the frontier's size, requests in flight, pages "
      "recorded per minute and the best URL, this often; 0: never", low=0.0, unit="s",
      shown_default="LOGSTATS_INTERVAL"),
    S("IPR_TIMELINE_SECS", 10.0, "float", "one sample of the crawl's counts this often (for `ipr-crawl status` and "
      "`report`), in Redis, the last 20,000 kept; more often in a crawl's first minutes (every twentieth of its "
      "age, at least 1 s) so that a short crawl can be drawn; 0: none", low=0.0, unit="s"),
    S("IPR_POP_BATCH_SIZE", 8, "int", "requests leased per Redis round trip, at most half of `CONCURRENT_REQUESTS` "
      "(at least 1: with `CONCURRENT_REQUESTS=1` and `IPR_WAIT_FOR_PARSE` each request is chosen after the page "
      "before it is recorded)",
      low=1),
    S("IPR_SLOW_START", True, "bool", "at a process's start, hand the engine at most as many requests at once "
      "as the process has recorded pages (at least 1), doubling each round trip up to "
      "`CONCURRENT_REQUESTS`: the first pages are chosen with their predecessors' links known"),
    S("IPR_WAIT_FOR_PARSE", True, "bool", "count the requests whose pages are still being parsed against "
      "`CONCURRENT_REQUESTS`: a request is leased only while fewer are downloading or being parsed, so it is "
      "chosen with the links of the pages downloaded before it recorded (off: Scrapy's own count, downloads "
      "only; a few % more pages/s where parsing takes as long as downloading)"),
    S("IPR_RECORD_PIPELINED", True, "bool", "send a parsed page's record call without waiting for its reply; the "
      "reply is read at the next record or pop (off: wait for each reply)"),
    S("IPR_REQUEUE_BATCH_SIZE", 100, "int", "expired leases moved back per pop, at most", low=1),
    S("IPR_POLITE_POP", "auto", "str", "hand out the best request whose host (download slot) can take one now; "
      "`auto`: on when `DOWNLOAD_DELAY > 0` or AutoThrottle is on; `True`, `False`"),
    S("IPR_POLITE_SCAN", 1000, "int", "polite pop: frontier entries (best first) searched for the best URL of "
      "each host that is not busy", low=1),
    S("IPR_POLITE_MIN_RATIO", 0.0, "float", "polite pop: a free host's best URL goes out only if its priority is "
      "at least this × the frontier's best (0: any; 1: the best's ties only); bf and larger-sites-first ignore it",
      low=0.0, high=1.0),
    S("IPR_POLITE_BUFFER_SIZE", 64, "int", "polite pop: leased requests one process holds, at most", low=1),
    S("IPR_REVISIT_ENABLED", False, "bool", "revisits: the conditional-GET middleware and the refresher; off, a "
      "crawl fetches each URL once"),
    S("IPR_REVISIT_POLICY", "harmonic:8/y:new=learn:young=0.5", "str", "estimator of the next visit: "
      "`harmonic[:N/y|N/d][:pool=directory|:prior=gamma][:new=learn[:young=K]]` (the "
      "default: revisits under a budget, 8 per URL per year; Kolobov et al. 2019; `new=learn`: the change rate of a "
      "URL fetched once learned from early first revisits of an eighth of new URLs, 3 days after their first fetch "
      "(`new=prior`: the fixed prior); `young=K`: a URL's weight in the budget, for its first 3 "
      "accesses, times (learned rate / prior rate)^K, at least 1 (`young=0.5` the default; "
      "`young=0`: none); `pool=directory`: the rate prior "
      "pooled per directory; `prior=gamma`: the rate prior fitted to the crawl's own observations, a Gamma-Poisson "
      "empirical Bayes estimate, not with `new=learn`; docs/revisits.md), `mle-min`, `mle-avg`, "
      "`mle-mix[:MU_LOW-MU_HIGH][:TAU2][:xALPHA]`, `aimd[:D][:R][:TAU2][:pair]`, "
      "`nutch-adaptive[:INC][:DEC][:MIN][:MAX][:TAU2]`, `fixed:INTERVAL` (Tamura & Kitsuregawa 2008, §4)"),
    S("IPR_REVISIT_MODE", "run-once", "str", "`run-once`: fetch what is due at start plus new discoveries, then "
      "close (cron, scrapyd); `continuous`: stay open while a revisit is scheduled", choices=REVISIT_MODES),
    S("IPR_REVISIT_HASH", "body", "str", "what \"changed\" compares: `body` (SHA-1 of the bytes), `text` "
      "(visible text), `simhash` (near-duplicates)", choices=HASH_MODES),
    S("IPR_REVISIT_SIMHASH_DISTANCE", 4, "int", "`simhash`: versions whose 64-bit fingerprints differ in at most "
      "this many bits are the same", low=0, high=64),
    S("IPR_REVISIT_USE_LAST_MODIFIED", True, "bool", "the changed interval ends at `Last-Modified`, the rest "
      "counts as unchanged (Tamura & Kitsuregawa 2008, §4.1.3)"),
    S("IPR_REVISIT_SKIP_UNCHANGED", True, "bool", "an unchanged 200 does not reach the callback (like a 304)"),
    S("IPR_REVISIT_SITEMAP_LASTMOD", True, "bool", "a fetched sitemap (sitemaps.org 0.9 `urlset`) makes each "
      "URL it lists with a `<lastmod>` newer than the URL's last fetch due at once, unless the crawl's own "
      "fetches refute it (docs/revisits.md)"),
    S("IPR_REVISIT_SITEMAP_SECS", 86400.0, "float", "with IPR_REVISIT_SITEMAP_LASTMOD: a sitemap is fetched again "
      "after this long (one day) when its read moved or held URLs, else at twice its latest interval (up to "
      "IPR_REVISIT_MAX_SECS), not when the revisit policy would", low=1.0, unit="s"),
    S("IPR_REVISIT_RESOLUTION_SECS", 0.0, "float", "due times in buckets of this many seconds (the paper: 86400); "
      "0: exact", low=0.0, unit="s"),
    S("IPR_REVISIT_MIN_SECS", 3600.0, "float", "no revisit sooner than this after an access", low=0.0, unit="s"),
    S("IPR_REVISIT_MAX_SECS", 90 * 86400.0, "float", "no revisit later than this after an access (90 days); 0: no "
      "bound", low=0.0, unit="s"),
    S("IPR_REVISIT_HORIZON_SECS", 0.0, "float", "`continuous`: close when nothing is due within this (0: wait for "
      "the next due time however far); `run-once`: also fetch what falls due within this after the start",
      low=0.0, unit="s"),
    S("IPR_REVISIT_UNTIL", "", "str", "no revisit after this instant (ISO 8601 or POSIX s); `continuous` closes "
      "when the next one is later"),
    S("IPR_REVISIT_CLOCK", "system", "str", "`system`, or `virtual:<ISO start>` for simulations (see "
      "`serve-changes`)"),
    S("IPR_REVISIT_BUDGET", "", "str", "`harmonic` policy: the revisit budget, `N/d` (revisits per day for the whole "
      "crawl) or `N/y` (per URL per year); empty: the policy spec's (`harmonic:8/y:new=learn:young=0.5`), else `4/y`"),
    S("IPR_REVISIT_WEIGHT", "uniform", "str", "`harmonic`: a URL's weight w in the budget: `uniform` (1), or "
      "`pagerank` (its link-based score in the frontier's ordering over the crawl's mean: important pages kept "
      "fresher)", choices=("uniform", "pagerank")),
    S("IPR_REVISIT_HOST_DELAY_SECS", None, "float", "`harmonic`: per-host politeness in the budget: no host "
      "gets more than one revisit per this many seconds of the crawl's clock; the budget a host cannot take goes "
      "to the others, what none can take is logged and counted (`ipr/revisit/unplaced_per_day`); 0: no cap",
      low=0.0, unit="s", shown_default="DOWNLOAD_DELAY"),
    S("IPR_REVISIT_BUDGET_REFRESH_SECS", 3600.0, "float", "`harmonic`: the budget's multiplier ν is solved again "
      "from the crawl's rate histogram at most this often (the crawl's clock)", low=0.0, unit="s"),
    S("IPR_REVISIT_REFRESH_SECS", 1.0, "float", "at most one refresher call (due URLs -> forced queue) per this",
      low=0.0, unit="s"),
    S("IPR_REVISIT_REFRESH_BATCH_SIZE", 1000, "int", "due URLs moved per refresher call", low=1),
    S("IPR_REVISIT_RETRY_SECS", 3600.0, "float", "a revisit whose response never came (process died) is due "
      "again after this", low=1.0, unit="s"),
    S("IPR_REVISIT_EVENTS_MAXLEN", 100000, "int", "length cap of the crawl's change stream (`XADD MAXLEN ~`)", low=1),
    S("IPR_START_URLS_KEY", "", "str", "Redis key (list, set or sorted set) to read start URLs from, as "
      "scrapy-redis's `RedisSpider` does; `%(name)s`, `%(crawl_id)s` filled in; empty: off"),
    S("IPR_START_URLS_BATCH_SIZE", 0, "int", "entries read per batch; 0: `CONCURRENT_REQUESTS`", low=0),
    S("IPR_START_URLS_IDLE_SECS", 0.0, "float", "an idle crawl stays open this long waiting for new entries; "
      "`-1`: forever (scrapy-redis's `MAX_IDLE_TIME_BEFORE_CLOSE`)", low=-1.0, unit="s"),
    S("IPR_IMPORT_SCRAPY_REDIS", "", "str", "`pickle`: carry a scrapy-redis crawl of this spider over, once, at "
      "start: its queue (`SCHEDULER_QUEUE_KEY`, read with scrapy-redis's serializer, pickle: only for a queue "
      "you trust) into the frontier, its duplicate filter's fingerprints (`SCHEDULER_DUPEFILTER_KEY`) as URLs "
      "already fetched; empty: not read (a WARNING names the keys when they are there) "
      "([docs/dropin.md](docs/dropin.md#coming-from-scrapy-redis))", choices=("", "pickle")),
    S("IPR_IMPORT_SCRAPY_REDIS_DELETE", False, "bool", "with `IPR_IMPORT_SCRAPY_REDIS`: delete scrapy-redis's "
      "queue and duplicate-filter keys once imported (a queue with requests that could not be read stays)"),
    S("IPR_GRAPH_STAY_ON_HOSTS", True, "bool", "`graph` spider: only the start URLs' host:port pairs"),
    S("IPR_GRAPH_HTTP_ONLY", False, "bool", "`graph` spider: only http/https (non-HTTP links are never followed anyway)"),
    S("IPR_GRAPH_SKIP_QUERY", False, "bool", "`graph` spider: skip URLs with a query string or `cgi`"),
    S("IPR_GRAPH_EXTENSIONS", [], "list", "`graph` spider: only these extensions (e.g. `html,htm,asp,jsp,php,cfm`); "
      "paths without one are kept"),
)
del S
#: The defaults the add-on installs (from :data:`SETTINGS`).
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


#: The :class:`ipr_crawl.ordering.OrderingParams` field each ordering setting fills
#: (``importance``: the four settings a, b, c, d). The dataclass's defaults are this
#: table's (``tests/tools/test_docs.py`` holds them to it); ``ordering`` is the exception:
#: ``OrderingParams()`` is ``ipr:dl1``, the crawl's default ``IPR_ORDERING`` is ``push``.
ORDERING_FIELDS: dict[str, str | tuple[str, ...]] = {
    "cutoff": "IPR_CUTOFF",
    "initial_score": "IPR_INITIAL_SCORE",
    "pl_pages": "IPR_PL_PAGES",
    "vr_theta": "IPR_VR_THETA",
    "ar_threshold": "IPR_AR_THRESHOLD",
    "propagation_cap": "IPR_PROPAGATION_CAP",
    "importance": ("IPR_IMPORTANCE_A", "IPR_IMPORTANCE_B", "IPR_IMPORTANCE_C", "IPR_IMPORTANCE_D"),
    "opic_initial_cash": "IPR_OPIC_INITIAL_CASH",
    "pr_interval_pages": "IPR_PR_INTERVAL_PAGES",
    "pr_damping": "IPR_PR_DAMPING",
    "tie_rule": "IPR_TIE_RULE",
    "push_budget": "IPR_PUSH_BUDGET",
    "push_damping": "IPR_PUSH_DAMPING",
    "push_epsilon": "IPR_PUSH_EPSILON",
    "prior_weight": "IPR_PRIOR_WEIGHT",
}

#: Settings of Scrapy and scrapy-redis that ipr-crawl reads too, with their kind and
#: default: :func:`check_settings` refuses a malformed one by name at start, as it
#: does the ``IPR_*`` ones (Scrapy's getters would raise a ``ValueError`` naming none).
OTHER_SETTINGS: tuple[tuple[str, str, Any], ...] = (
    ("SCHEDULER_PERSIST", "bool", False),  # scrapy-redis: keep the crawl's queue at close
    ("SCHEDULER_FLUSH_ON_START", "bool", False),  # scrapy-redis: IPR_RESET's other name
    ("SCHEDULER_DEBUG", "bool", False),
    ("DOWNLOAD_DELAY", "float", 0.0),
    ("AUTOTHROTTLE_ENABLED", "bool", False),
    ("LOGSTATS_INTERVAL", "float", 60.0),
    ("CONCURRENT_REQUESTS", "int", 16),
    ("DEPTH_PRIORITY", "int", 0),
    ("HTTPERROR_ALLOW_ALL", "bool", False),
    ("HTTPCACHE_ENABLED", "bool", False),
)


def markdown_table() -> str:
    """The settings table of docs/settings.md, from :data:`SETTINGS`."""
    lines = ["| setting | default | meaning |", "|---|---|---|"]
    for s in SETTINGS:
        if s.shown_default:
            default = s.shown_default if s.shown_default.isalpha() or " " in s.shown_default else f"`{s.shown_default}`"
        elif isinstance(s.default, str):
            default = f'`"{s.default}"`'
        else:
            default = f"`{s.default!r}`"
        doc = s.doc
        if s.choices and "`" + s.choices[0] + "`" not in doc:
            doc += ": " + ", ".join(f"`{c}`" for c in s.choices)
        if s.unit:
            doc += f" ({s.unit})"
        lines.append(f"| `{s.name}` | {default} | {doc} |")
    return "\n".join(lines)
