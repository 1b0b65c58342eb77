"""pytest plugin of the conformance harness (``-p ipr_conformance_plugin``).

Writes one JSON line per test phase report to the file named by
``IPR_CONFORMANCE_REPORT`` as soon as pytest produces it, so that a run killed
by the harness's per-file timeout still leaves the outcome of every test it
finished. Each line: ``{"nodeid", "when", "outcome", "xfail", "message"}``,
``message`` being the one-line crash message of a failure or the reason of a skip.
"""

from __future__ import annotations

import json
import os

_PATH = os.environ.get("IPR_CONFORMANCE_REPORT", "")
_out = None


def _message(report) -> str:  # noqa: ANN001
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, lineno, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = crash.message
    else:
        text = str(longrepr).strip().splitlines()[-1] if str(longrepr).strip() else ""
    return " ".join(text.split())[:400]


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    global _out
    if not _PATH:
        return
    if _out is None:
        _out = open(_PATH, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the session
    record = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
        "message": _message(report) if not report.passed or hasattr(report, "wasxfail") else "",
    }
    _out.write(json.dumps(record) + "\n")
    _out.flush()


def pytest_unconfigure(config) -> None:  # noqa: ANN001
    global _out
    if _out is not None:
        _out.close()
        _out = None
