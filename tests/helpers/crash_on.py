"""An extension for tests: the crawler process dies (``os._exit``, as an out-of-memory
kill would end it) when it receives a response whose URL ends with
``IPR_TEST_CRASH_ON`` (an environment variable): a page that crashes every crawler
that fetches it. ``EXTENSIONS={"tests.helpers.crash_on.CrashOn": 0}``, run from the
repository."""

from __future__ import annotations

import os
from typing import Any

from scrapy import signals


class CrashOn:
    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    @classmethod
    def from_crawler(cls, crawler: Any) -> CrashOn:
        ext = cls(os.environ.get("IPR_TEST_CRASH_ON", ""))
        crawler.signals.connect(ext.response_received, signal=signals.response_received)
        return ext

    def response_received(self, response: Any, request: Any, spider: Any) -> None:
        if self.suffix and response.url.endswith(self.suffix):
            os._exit(137)
