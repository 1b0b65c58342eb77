"""``ipr-crawl dashboard``: a live, read-only web page of a store's crawls and their
Prometheus metrics (:mod:`~ipr_crawl.dashboard.server`, :mod:`~ipr_crawl.dashboard.views`,
:mod:`~ipr_crawl.dashboard.metrics`)."""
