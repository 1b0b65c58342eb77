"""Run a few real-crawl tests under the oldest Scrapy ipr-crawl supports (issue 42, item 3).

    python3 scripts/oldest_scrapy.py                       # Scrapy 2.13.*, the default tests
    python3 scripts/oldest_scrapy.py --scrapy 2.16.0       # another release
    python3 scripts/oldest_scrapy.py -- tests/crawls/test_crawl.py -x   # other pytest arguments

Builds (once) a virtualenv outside the repository, by default
``$TMPDIR/ipr-scrapy-<version>``: that Scrapy, then the project's other runtime
dependencies from ``pyproject.toml`` (so the ``scrapy>=…`` pin cannot pull in another
Scrapy), pytest and hypothesis, then this repository editable without dependencies.
Then runs pytest from the repository with that venv's Python; the tests start
``python -m scrapy`` with the same interpreter, so every crawl runs on that Scrapy.
The exit status is pytest's. Needs PyPI.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The oldest supported Scrapy: its newest patch release.
OLDEST = "2.13.*"
#: A small set that crosses every version difference (ipr_crawl/scheduler/compat.py):
#: the middlewares in a full drop-in crawl (retries, redirects, POST, errbacks, items),
#: the refusals in one line with exit status 1 (a rerun's too), the reactor-less setting,
#: a resumed crawl and the exact fetch order of a real graph. About 2 minutes of crawls.
DEFAULT_TESTS = [
    "tests/crawls/test_scrapy_versions.py",
    "tests/crawls/test_dropin.py::test_same_requests_and_items_as_without_the_addon[shop]",
    "tests/crawls/test_dropin.py::test_bad_settings_and_overrides_say_so_in_one_line",
    "tests/crawls/test_crawl.py::test_one_request_at_a_time_is_the_exact_order_at_the_default_pop_batch",
    "tests/crawls/test_crawl.py::test_resume_fetches_the_rest_once",
    "tests/crawls/test_crawl.py::test_depth_priority_is_the_first_key_as_in_scrapy",
    "tests/crawls/test_rerun.py::test_a_rerun_that_fails_to_start_lets_the_next_start_go_at_once",
]
TEST_TOOLS = ["pytest>=8", "pytest-xdist>=3.5,<4", "hypothesis>=6.100"]
#: pytest-xdist workers for the default tests (two cores: their crawls overlap)
JOBS = 3


def runtime_requirements() -> list[str]:
    """``[project] dependencies`` of pyproject.toml without Scrapy's own line."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S)
    if block is None:
        raise SystemExit("oldest_scrapy: no [project] dependencies list in pyproject.toml")
    requirements = re.findall(r'^\s*"([^"]+)",?\s*$', block[1], re.M)
    return [req for req in requirements if not re.match(r"scrapy\s*[<>=!~]", req, re.I)]


def build_venv(venv: Path, scrapy_spec: str) -> Path:
    python = venv / "bin" / "python"
    marker = venv / ".ipr-installed"
    wanted = f"scrapy=={scrapy_spec}\n" + "\n".join(runtime_requirements() + TEST_TOOLS) + f"\n{REPO}\n"
    if marker.exists() and marker.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, f"scrapy=={scrapy_spec}", *runtime_requirements(), *TEST_TOOLS], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(REPO)], check=True)
    marker.write_text(wanted)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapy", default=OLDEST, help=f"a Scrapy version or pattern (default {OLDEST})")
    parser.add_argument("--venv", type=Path, help="the virtualenv (default $TMPDIR/ipr-scrapy-<version>)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: a few crawl tests)")
    args = parser.parse_args(argv)
    venv = args.venv or Path(tempfile.gettempdir()) / f"ipr-scrapy-{args.scrapy.replace('*', 'x')}"
    t0 = time.monotonic()
    python = build_venv(venv, args.scrapy)
    version = subprocess.run([str(python), "-c", "import scrapy; print(scrapy.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    built = time.monotonic() - t0
    print(f"oldest_scrapy: Scrapy {version} in {venv} (ready in {built:.0f} s)", flush=True)
    tests = args.pytest_args or ["-n", str(JOBS), "--dist", "load", *DEFAULT_TESTS]
    # -m "": the tests named run even where they are marked slow (pyproject's addopts leave those out)
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", *tests]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    status = subprocess.run(cmd, cwd=REPO, env=env).returncode
    print(f"oldest_scrapy: Scrapy {version}: pytest exit status {status}, "
          f"{time.monotonic() - t0:.0f} s in all ({built:.0f} s for the venv)", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
