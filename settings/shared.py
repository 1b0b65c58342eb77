"""Profile for a crawl shared by many processes through one Redis server.

``SCRAPY_SETTINGS_MODULE=settings.shared IPR_REDIS_URL=redis://host:6379/0 scrapy crawl graph ...``
"""

import os

from settings import *  # noqa: F401,F403

IPR_REDIS_URL = os.environ.get("IPR_REDIS_URL", "redis://127.0.0.1:6379/0")
