"""The code's shape, read from the source (issue 43): no import circle anywhere in the
package, no module over 500 lines, no function over 80.

Every ``import`` statement counts, function-local and ``TYPE_CHECKING`` ones included:
a circle hidden in a function is still a circle a reader has to hold in their head.
Only the imports written count, not the parent packages Python imports on the way
(``import ipr_crawl.store.keys`` runs ``ipr_crawl/__init__.py`` too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"ipr_crawl": REPO / "ipr_crawl", "middlewares": REPO / "middlewares"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
#: Modules or functions allowed over the limits, each with its reason. Empty: none is.
ALLOWED: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package and the middlewares."""
    out = {}
    for top, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = [top, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _import_graph(modules: dict[str, Path]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from pkg import sub` imports the submodule when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_no_import_circle_anywhere() -> None:
    graph = _import_graph(_modules())
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles, f"import circles (every import counted, function-local ones too): {circles}"


def test_the_circle_check_catches_one(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from pkg.a import f\n")
    modules = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    graph = _import_graph(modules)
    assert [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1] == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_modules_and_functions_stay_small(name: str) -> None:
    path = _modules()[name]
    text = path.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    if name not in ALLOWED:
        assert lines <= MAX_MODULE_LINES, f"{path.relative_to(REPO)}: {lines} lines (at most {MAX_MODULE_LINES})"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            where = f"{name}.{node.name}"
            assert length <= MAX_FUNCTION_LINES or where in ALLOWED, (
                f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length} lines (at most {MAX_FUNCTION_LINES})"
            )
