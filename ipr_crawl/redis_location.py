"""Where a project's crawls keep their Redis, found one way for ``scrapy crawl`` (the
scheduler) and ``scrapy frontier``: :func:`locate`.

In this order: ``IPR_REDIS_URL``, with the ``IPR_REDIS_SSL_*`` files of a ``rediss://``
URL (redis-py's ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``); else the server of
scrapy-redis when the project uses scrapy-redis (:func:`scrapy_redis_settings`); else the
embedded server in ``IPR_DATA_DIR`` (default ``.scrapy/ipr`` of the project, of the
working folder when no ``scrapy.cfg`` is found).

>>> from scrapy.settings import Settings
>>> locate(Settings({"IPR_REDIS_URL": "redis://h:6379/0"}), createdir=False).url
'redis://h:6379/0'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from scrapy.exceptions import NotConfigured
from scrapy.utils.project import data_path

from ipr_crawl.config import TLS_SETTINGS, redis_tls

__all__ = ["TLS_SETTINGS", "RedisLocation", "embedded_data_dir", "locate", "project_location", "redis_tls",
           "scrapy_redis_settings"]

@dataclass(frozen=True)
class RedisLocation:
    """A project's Redis: ``url`` (``IPR_REDIS_URL``, or scrapy-redis's ``REDIS_URL`` /
    ``REDIS_HOST``:``REDIS_PORT``; ``""``: the embedded server) with its ``tls`` arguments,
    ``scrapy_redis`` why scrapy-redis's server is used (``""``: it is not), and the
    embedded server's ``data_dir``."""

    url: str
    data_dir: str
    tls: dict[str, str] = field(default_factory=dict)
    scrapy_redis: str = ""

    def url_with_tls(self) -> str:
        """``url`` with the TLS arguments in its query (redis-py's ``from_url`` reads them),
        for a caller that takes a URL only."""
        if not self.tls:
            return self.url
        query = "&".join(f"{key}={quote(path, safe='/')}" for key, path in self.tls.items())
        return f"{self.url}{'&' if '?' in self.url else '?'}{query}"


def scrapy_redis_settings(settings: Any, spidercls: Any = None) -> str:
    """Why the crawl uses scrapy-redis's server when ``IPR_REDIS_URL`` is empty:
    the scrapy-redis setting the project sets (``REDIS_URL``, ``REDIS_HOST``,
    ``REDIS_PORT``, ``REDIS_PARAMS``), or its spider being a scrapy-redis
    ``RedisSpider``/``RedisCrawlSpider``, or ``RedisPipeline`` being on; ``""``: none."""
    for name in ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_PARAMS"):
        if settings.get(name):
            return name
    if isinstance(spidercls, type) and any(
        base.__module__.startswith("scrapy_redis.") for base in spidercls.__mro__
    ):
        return f"spider {spidercls.__name__}"
    pipelines = settings.getdict("ITEM_PIPELINES")
    if any(str(k).startswith("scrapy_redis.") for k in pipelines):
        return "RedisPipeline"
    return ""


def embedded_data_dir(createdir: bool = True) -> str:
    """``.scrapy/ipr`` of the project; of the working folder when the settings
    module is known but no ``scrapy.cfg`` is (a scrapyd job)."""
    try:
        # created here, not by Scrapy: its data_path (2.13) races when two crawlers of one
        # process open at once ("FileExistsError: .scrapy/ipr")
        path = data_path("ipr", createdir=False)
    except NotConfigured:
        path = os.path.abspath(os.path.join(".scrapy", "ipr"))
    if createdir:
        os.makedirs(path, exist_ok=True)
    return path


def locate(settings: Any, spidercls: Any = None, createdir: bool = True) -> RedisLocation:
    """The project's Redis (see the module doc); ``createdir``: make the embedded server's
    folder (a crawl does; an operator's command never creates a store). Raises
    :class:`~ipr_crawl.config.SettingError` (a ValueError) for a TLS setting that cannot be used
    (:func:`~ipr_crawl.config.redis_tls`)."""
    url = str(settings.get("IPR_REDIS_URL") or "").strip()
    data_dir = str(settings.get("IPR_DATA_DIR") or "") or embedded_data_dir(createdir)
    if url:
        return RedisLocation(url, data_dir, redis_tls(settings, url))
    redis_tls(settings, "")  # a TLS setting without IPR_REDIS_URL: the error names it
    source = scrapy_redis_settings(settings, spidercls)
    if source and settings.get("REDIS_URL"):
        url = str(settings.get("REDIS_URL"))
    elif source:  # scrapy-redis's defaults: localhost:6379
        url = f"redis://{settings.get('REDIS_HOST') or 'localhost'}:{settings.getint('REDIS_PORT', 6379)}/0"
    return RedisLocation(url, data_dir, {}, source)


def project_location() -> RedisLocation | None:
    """Inside a Scrapy project (a ``scrapy.cfg`` here or above): where its crawls keep
    their Redis (:func:`locate` of the project's settings; no folder is made); None
    outside one. For the ``ipr-crawl`` commands."""
    from scrapy.utils.conf import closest_scrapy_cfg
    from scrapy.utils.project import get_project_settings

    if not closest_scrapy_cfg():
        return None
    return locate(get_project_settings(), createdir=False)
