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
