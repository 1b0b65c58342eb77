"""An item pipeline for tests that fails for a while, as one writing to a database or to
Redis does while its server restarts: the first item of each page whose URL ends with
one of ``IPR_TEST_FLAKY_SUFFIXES`` (comma-separated, environment) raises
:class:`ConnectionError`; every other item passes, and is written to
``IPR_TEST_FLAKY_OUT`` (one URL per line). ``ITEM_PIPELINES={"tests.helpers.flaky_pipeline.FlakyPipeline": 300}``,
run from the repository."""

from __future__ import annotations

import os
from typing import Any


class FlakyPipeline:
    def __init__(self) -> None:
        self.suffixes = tuple(s for s in os.environ.get("IPR_TEST_FLAKY_SUFFIXES", "").split(",") if s)
        self.failed: set[str] = set()
        self.out = open(os.environ["IPR_TEST_FLAKY_OUT"], "a")  # noqa: SIM115 - closed with the spider

    def process_item(self, item: Any, spider: Any = None) -> Any:
        url = item["url"]
        if url.endswith(self.suffixes) and url not in self.failed:
            self.failed.add(url)
            raise ConnectionError(f"the item store is away (test): {url}")
        self.out.write(url + "\n")
        self.out.flush()
        return item

    def close_spider(self, spider: Any = None) -> None:
        self.out.close()
