"""Switch the ipr-crawl add-on on for every Scrapy crawler of this Python process.

Python imports ``sitecustomize`` at start-up from the first ``sys.path`` entry
that has one, so putting this folder on ``PYTHONPATH`` reaches the pytest
process of Scrapy's test suite and every ``python -m scrapy.cmdline`` /
``scrapy`` subprocess its tests spawn (Scrapy's ``get_testenv()`` keeps
``PYTHONPATH``, prepending Scrapy's own folder).

What it does depends on ``IPR_CONFORMANCE``:

* unset or ``plain``: nothing (the plain run has the same ``PYTHONPATH``);
* ``addon``: the add-on is on for every crawler, by two hooks:

  1. once ``scrapy.settings.default_settings`` has been executed,
     ``"ipr_crawl.Addon": 0`` is added to its ``ADDONS`` dict, so every
     :class:`scrapy.settings.Settings` starts with it (at ``default`` priority);
  2. a settings module that sets ``ADDONS`` itself replaces that default
     wholesale -- and ``scrapy startproject``'s template has ``ADDONS = {}``, so
     every project-based command test (``fetch --spider``, ``parse``, ``check``,
     ``shell`` in a project) would silently run without the add-on. So
     ``AddonManager.load_settings`` and ``load_pre_crawler_settings`` are
     wrapped to put ``ipr_crawl.Addon`` (priority 0) into ``ADDONS`` when it is
     missing, as a user adding it to their project's ``ADDONS`` would;

* ``isolated``: as ``addon``, plus this module's :class:`IsolateCrawl` add-on
  (priority 1, after ipr-crawl's) which gives every crawler a crawl id of its
  own (``IPR_CRAWL_ID=conformance-<uuid>``), so no crawl resumes another's
  frontier. This is NOT the add-on's stock behaviour (the crawl id defaults to
  the spider name); it only separates that one cause from the others.

Nothing is imported from Scrapy here: the hooks wait for the tests' own imports
(so reactor selection and import order stay the tests' own). An existing
``sitecustomize`` further on ``sys.path`` is chained to, so this one hides nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import uuid

_MODE = os.environ.get("IPR_CONFORMANCE", "plain").strip().lower()
ADDON_PATH = "ipr_crawl.Addon"
ISOLATE_PATH = "sitecustomize.IsolateCrawl"


class IsolateCrawl:
    """Add-on giving each crawler its own ``IPR_CRAWL_ID`` (``isolated`` mode only)."""

    def update_settings(self, settings) -> None:  # noqa: ANN001 - Scrapy's Settings
        settings.set("IPR_CRAWL_ID", f"conformance-{uuid.uuid4().hex[:12]}", priority="addon")


def _wanted() -> dict[str, int]:
    wanted = {ADDON_PATH: 0}
    if _MODE == "isolated":
        wanted[ISOLATE_PATH] = 1
    return wanted


def _patch_defaults(module) -> None:  # noqa: ANN001 - scrapy.settings.default_settings
    addons = dict(getattr(module, "ADDONS", {}) or {})
    for path, prio in _wanted().items():
        addons.setdefault(path, prio)
    module.ADDONS = addons


def _ensure_addons(settings) -> None:  # noqa: ANN001 - scrapy.settings.BaseSettings
    """Put the wanted add-ons into ``settings["ADDONS"]`` when a higher-priority
    ``ADDONS`` (e.g. a project's ``ADDONS = {}``) replaced the patched default."""
    from scrapy.utils.misc import load_object

    present = set()
    for key in (settings.get("ADDONS") or {}):
        try:
            present.add(load_object(key) if isinstance(key, str) else key)
        except Exception:  # noqa: BLE001, S112 - a broken entry is Scrapy's to report
            continue
    for path, prio in _wanted().items():
        if load_object(path) not in present:
            settings.set_in_component_priority_dict("ADDONS", path, prio)


def _patch_addons(module) -> None:  # noqa: ANN001 - scrapy.addons
    manager = module.AddonManager
    load_settings = manager.load_settings
    load_pre = manager.load_pre_crawler_settings.__func__

    def patched_load_settings(self, settings):  # noqa: ANN001, ANN202
        _ensure_addons(settings)
        return load_settings(self, settings)

    def patched_load_pre(cls, settings):  # noqa: ANN001, ANN202
        _ensure_addons(settings)
        return load_pre(cls, settings)

    manager.load_settings = patched_load_settings
    manager.load_pre_crawler_settings = classmethod(patched_load_pre)


_PATCHES = {
    "scrapy.settings.default_settings": _patch_defaults,
    "scrapy.addons": _patch_addons,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec):  # noqa: ANN001, ANN201
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001
        self.inner.exec_module(module)
        _PATCHES[module.__name__](module)

    def __getattr__(self, name: str):  # noqa: ANN204 - get_source, get_filename, ...
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


def _chain_next_sitecustomize() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` (if any) after this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if _MODE in ("addon", "isolated"):
    for _name, _fn in _PATCHES.items():
        if _name in sys.modules:  # imported before us (not expected): patch in place
            _fn(sys.modules[_name])
    sys.meta_path.insert(0, _Finder())
elif _MODE != "plain":
    raise SystemExit(f"IPR_CONFORMANCE={_MODE!r}: expected plain, addon or isolated")

_chain_next_sitecustomize()
