"""This repository's own Scrapy project: ``scrapy crawl graph`` runs on ipr-crawl.

The embedded default: no IPR_REDIS_URL, so each crawl starts its own Redis with
its data in ``.scrapy/ipr``. ``settings.shared`` points at a shared server.
"""

BOT_NAME = "ipr_crawl"
SPIDER_MODULES = ["ipr_crawl.spiders"]
NEWSPIDER_MODULE = "ipr_crawl.spiders"

ADDONS = {"ipr_crawl.Addon": 0}

ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "DEBUG"
CONCURRENT_REQUESTS = 16
