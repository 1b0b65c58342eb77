"""Scrapy middlewares of ipr-crawl (installed as ``ipr_crawl.middlewares``).

- :class:`~ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware` (spider
  middleware): records each parsed page with its out-links in one script call.
- :class:`~ipr_crawl.middlewares.frontier.FrontierDownloaderMiddleware`
  (downloader middleware): settles the lease of a request that failed for good.
"""
