"""Build the egg that ``scrapyd-deploy --egg`` sends to scrapyd.

The egg holds only this repository's Scrapy project settings (the ``settings``
package, ``ADDONS = {"ipr_crawl.Addon": 0}``) and the ``[scrapy]`` entry point
scrapyd reads; the library itself (``ipr_crawl``: scheduler, Lua scripts,
middlewares, the ``graph`` spider) is installed in scrapyd's environment with
``pip install``, where its package data (the Lua scripts) is in place.
scrapyd-deploy's own egg build would write a ``setup.py`` into the repository
and pack every package it finds, Lua scripts left out.

    python scripts/build_scrapyd_egg.py dist/ipr_crawl_project.egg [--settings settings]
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_egg(out: str | Path, settings_module: str = "settings", version: str = "1.0") -> Path:
    """Write the egg to ``out`` and return its path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    package = REPO / "settings"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as egg:
        for path in sorted(package.glob("*.py")):
            egg.write(path, f"settings/{path.name}")
        egg.writestr("EGG-INFO/PKG-INFO", f"Metadata-Version: 2.1\nName: ipr-crawl-project\nVersion: {version}\n")
        egg.writestr("EGG-INFO/entry_points.txt", f"[scrapy]\nsettings = {settings_module}\n")
        egg.writestr("EGG-INFO/top_level.txt", "settings\n")
        egg.writestr("EGG-INFO/zip-safe", "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="path of the egg to write")
    parser.add_argument("--settings", default="settings", help="settings module of the jobs (default: settings)")
    parser.add_argument("--version", default="1.0")
    args = parser.parse_args(argv)
    print(build_egg(args.out, args.settings, args.version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
