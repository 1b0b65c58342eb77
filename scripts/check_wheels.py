"""Whether ``pip install ipr-crawl`` finds a wheel for every runtime dependency on the
platforms Scrapy runs on (Linux x86-64 and ARM, macOS 14 ARM and 12 Intel, Windows): each
requirement of ``pyproject.toml``, its environment marker evaluated for the platform,
fetched with ``pip download --only-binary=:all: --platform TAG --python-version 3.11
--no-deps`` from the configured index (PyPI).

Usage: ``python scripts/check_wheels.py [--python-version 3.11]``. Prints one line per
platform and requirement (``wheel``, ``skipped by its marker`` or ``NO WHEEL``) and
exits 1 when a requirement the platform installs has no wheel.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
#: (pip platform tag, the marker environment of that platform)
PLATFORMS = {
    "manylinux2014_x86_64": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"},
    "manylinux2014_aarch64": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "aarch64"},
    "macosx_14_0_arm64": {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"},
    "macosx_12_0_x86_64": {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "x86_64"},
    "win_amd64": {"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64"},
}


def requirements() -> list[Requirement]:
    """The runtime requirements of pyproject.toml, their extras (``redis[hiredis]``) as
    requirements of their own."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in data["project"]["dependencies"]]
    extra = {"redis": ["hiredis"]}
    return reqs + [Requirement(x) for r in reqs for x in (extra.get(r.name, []) if "hiredis" in r.extras else [])]


def has_wheel(req: Requirement, tag: str, python: str, where: str) -> bool:
    spec = f"{req.name}{req.specifier}"
    run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                          "--platform", tag, "--python-version", python, "-d", where, spec],
                         capture_output=True, text=True)
    return run.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.11")
    args = parser.parse_args(argv)
    missing = 0
    with tempfile.TemporaryDirectory() as where:
        for tag, marker_env in PLATFORMS.items():
            env = {**default_environment(), **marker_env, "python_version": args.python_version}
            for req in requirements():
                if req.marker is not None and not req.marker.evaluate(env):
                    print(f"{tag:24} {req.name:20} skipped by its marker ({req.marker})")
                    continue
                ok = has_wheel(req, tag, args.python_version, where)
                missing += not ok
                print(f"{tag:24} {req.name:20} {'wheel' if ok else 'NO WHEEL'}", flush=True)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
