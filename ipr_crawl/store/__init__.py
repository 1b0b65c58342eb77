"""Every Redis access of ipr-crawl (no Scrapy here).

- :mod:`~ipr_crawl.store.connection`: connecting, the embedded server; :mod:`~ipr_crawl.store.retry`:
  bounded retries with back-off.
- :mod:`~ipr_crawl.store.keys`: one crawl's key names and schema version.
- :mod:`~ipr_crawl.store.record`: the node record, defined once for Python, numpy and Lua.
- :mod:`~ipr_crawl.store.frontier`: enqueue, lease, record, settle (``lua/``); its parts
  :mod:`~ipr_crawl.store.pipelined` (the record call sent, its reply read later) and
  :mod:`~ipr_crawl.store.reads` (sizes, records, the collected graph).
- :mod:`~ipr_crawl.store.revisit`: revisit state, due times, the change stream.
- :mod:`~ipr_crawl.store.replay`: the scripts driven over a stored graph (evaluation).
"""

from ipr_crawl.store.connection import FrontierUnavailable, adopt, connect, redact
from ipr_crawl.store.frontier import FrontierStore, IncompatibleCrawl
from ipr_crawl.store.keys import SCHEMA_VERSION, crawl_keys
from ipr_crawl.store.record import Link, NodeRecord, RecordResult

__all__ = [
    "SCHEMA_VERSION", "FrontierStore", "FrontierUnavailable", "IncompatibleCrawl", "Link",
    "NodeRecord", "RecordResult", "adopt", "connect", "crawl_keys", "redact",
]
