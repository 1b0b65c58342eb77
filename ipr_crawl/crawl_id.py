"""The crawl id: the one rule for what it may hold, and its default.

A crawl's keys all live under one Redis hash tag, ``ipr:{<crawl id>}:*``
(:func:`ipr_crawl.store.keys.crawl_keys`), so an id is non-empty and holds no ``{``
or ``}``. The settings (``IPR_CRAWL_ID``, ``IPR_PRIOR_CRAWL``,
:mod:`ipr_crawl.config`) and the store's key names both check an id with
:func:`check_crawl_id`. Pure: no Scrapy, no Redis.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_crawl_id", "default_crawl_id"]


def check_crawl_id(crawl_id: str, setting: str = "IPR_CRAWL_ID") -> str:
    """``crawl_id`` itself when it can name a crawl's hash tag.

    Raises :class:`ValueError` naming ``setting`` for an id that is empty (or only
    whitespace) or holds ``{`` or ``}``.

    >>> check_crawl_id("books.catalog")
    'books.catalog'
    >>> check_crawl_id("a{b}")
    Traceback (most recent call last):
    ...
    ValueError: IPR_CRAWL_ID='a{b}': no '{' or '}' (the id is the Redis hash tag of the crawl's keys, ipr:{<id>}:*)
    """
    if not crawl_id.strip():
        raise ValueError(f"{setting}={crawl_id!r}: must be non-empty, without '{{' or '}}'")
    if "{" in crawl_id or "}" in crawl_id:
        raise ValueError(
            f"{setting}={crawl_id!r}: no '{{' or '}}' (the id is the Redis hash tag of the crawl's keys, ipr:{{<id>}}:*)"
        )
    return crawl_id


def default_crawl_id(settings: Any, spider_name: str) -> str:
    """``<project>.<spider>``: the crawl id when ``IPR_CRAWL_ID`` is empty. The project
    is ``BOT_NAME`` (``scrapy startproject`` sets it to the project's name), so two
    projects with a spider of the same name on one Redis (scrapyd) never share a crawl.

    >>> default_crawl_id({"BOT_NAME": "books"}, "catalog")
    'books.catalog'
    """
    project = str(settings.get("BOT_NAME") or "scrapybot").replace("{", "").replace("}", "")
    return f"{project}.{spider_name}"
