"""The ``ipr-crawl`` command's output: piped into ``head``, it ends quietly (no
BrokenPipeError traceback); ``top``'s table shows the order key it is sorted by."""

from __future__ import annotations

import subprocess
import sys

from ipr_crawl.store.inspect import format_top

_SPAM = """
import sys
import ipr_crawl.cli as cli

def spam(args):
    for _ in range(200_000):
        print("x" * 80)

def register(sub):
    sub.add_parser("spam").set_defaults(func=spam)

cli.add_history_parser = register  # one more subcommand, printing far more than a pipe holds
sys.exit(cli.main(["spam"]))
"""


def test_output_piped_to_head_ends_quietly() -> None:
    run = subprocess.run(f"{sys.executable} -c '{_SPAM}' | head -1", shell=True, capture_output=True, text=True,
                         timeout=60)
    assert run.stdout == "x" * 80 + "\n"
    assert run.stderr == "", run.stderr[-2000:]


def test_top_shows_the_priority_it_is_sorted_by() -> None:
    rows = [
        {"url": "http://a.test/1", "host": "a.test", "score": 0.17, "priority": 3.0, "depth": 1, "in_links": 2},
        {"url": "http://a.test/2", "host": "a.test", "score": 0.23, "priority": 2.0, "depth": 1, "in_links": 1},
    ]
    head, first, second = format_top(rows).splitlines()
    assert head.split()[:3] == ["#", "priority", "score"]
    assert [float(line.split()[1]) for line in (first, second)] == [3.0, 2.0]  # sorted by what it shows


def test_status_inside_a_project_finds_its_scrapy_redis_server(tmp_path, redis_client, crawl_id) -> None:
    """Inside a Scrapy project whose crawls use scrapy-redis's REDIS_URL, `ipr-crawl
    status` finds the crawl where `scrapy crawl` keeps it, with no option (it looked for
    an embedded store and exited 1)."""
    import json
    import os

    from ipr_crawl.store import FrontierStore

    FrontierStore(redis_client, crawl_id, "bf").open()
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "__init__.py").write_text("")
    (tmp_path / "proj" / "settings.py").write_text(
        f'BOT_NAME = "proj"\nREDIS_URL = "unix://{redis_client.socket_file}"\n')
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    run = subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "status", "--crawl-id", crawl_id, "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["known"] == 0
