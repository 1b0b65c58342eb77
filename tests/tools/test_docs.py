"""The settings page (docs/settings.md) holds the table :data:`ipr_crawl.config.SETTINGS` gives,
and every instruction that names a command, module or file names one that exists:
README.md and every page under docs/ are checked for references a user of a fresh
clone cannot follow, links that lead nowhere, and paths, modules and ``ipr-crawl``
commands that are not in the tree."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from ipr_crawl.config import (
    DEFAULTS,
    ORDERING_FIELDS,
    SETTINGS,
    FrontierConfig,
    RevisitConfig,
    markdown_table,
    read,
)
from ipr_crawl.ordering import OrderingParams

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _prose(page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _resolves(dotted: str) -> bool:
    """``ipr_crawl.a.b.Name``: a module, or an attribute of the longest importable prefix."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _commands() -> set[str]:
    from ipr_crawl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["--help"])
    return set(re.search(r"\{([a-z,-]+)\}", out.getvalue()).group(1).split(","))


SETTINGS_PAGE = REPO / "docs" / "settings.md"


def test_settings_page_table_is_generated_from_the_settings_table() -> None:
    """docs/settings.md holds ``markdown_table()`` with its links (written from the
    repository's root) made relative to docs/; the README links to that page, and the
    settings it names in its own short table are real ones with their real defaults."""
    text = SETTINGS_PAGE.read_text(encoding="utf-8")
    table = markdown_table().strip().replace("](docs/", "](")
    assert table in text, "regenerate docs/settings.md's table from ipr_crawl.config.markdown_table()"
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in text, setting.name
    readme = README.read_text(encoding="utf-8")
    assert "(docs/settings.md)" in readme
    rows = {s.name: s for s in SETTINGS}
    full = {line.split(" | ")[0]: line.split(" | ")[1] for line in table.splitlines() if line.startswith("| `IPR_")}
    for name, default in re.findall(r"^\| `(IPR_\w+)` \| (.+?) \|", readme, re.M):
        assert name in rows, f"README names {name}: no such setting"
        assert full[f"| `{name}`"] == default, f"README: {name}'s default is {full[f'| `{name}`']}"


def test_every_default_passes_its_own_validation() -> None:
    settings = Settings(DEFAULTS)
    for setting in SETTINGS:
        assert read(settings, setting.name) == setting.default or setting.kind == "str", setting.name
    FrontierConfig.from_settings(settings, "spider")
    RevisitConfig.from_settings(settings)


def test_ordering_params_defaults_are_the_settings_tables() -> None:
    """The settings table owns the ordering parameters' defaults: every field of
    ``OrderingParams`` but ``ordering`` is filled by a setting (ORDERING_FIELDS), and
    its default is that setting's default in SETTINGS; a crawl with every default
    gets ``OrderingParams()`` but for the ordering."""
    fields = {f.name: f.default for f in dataclasses.fields(OrderingParams)}
    assert set(ORDERING_FIELDS) == set(fields) - {"ordering"}
    for name, setting in ORDERING_FIELDS.items():
        table = tuple(DEFAULTS[s] for s in setting) if isinstance(setting, tuple) else DEFAULTS[setting]
        assert fields[name] == table, f"OrderingParams.{name} = {fields[name]!r}, {setting} = {table!r}"
    cfg = FrontierConfig.from_settings(Settings(DEFAULTS), "spider")
    assert cfg.params == dataclasses.replace(OrderingParams(), ordering=DEFAULTS["IPR_ORDERING"], cutoff="")


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", float("inf"), float("nan")])
@pytest.mark.parametrize("name", [s.name for s in SETTINGS if s.kind == "float"])
def test_non_finite_numbers_are_refused_by_name(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(name)):
        read(Settings({name: value}), name)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_readme_reference_a_user_cannot_follow(page: Path) -> None:
    """No folder outside the clone, no file of the project's own notes, no seed file
    numbers or issue numbers: the papers are cited, the data described."""
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text, "describe the data, or point at ipr_crawl/data/SOURCES.md"
    assert "/work/" not in text
    for note in ("ALGORITHMS.md", "DESIGN.md", "STYLE.md"):
        assert note not in text, f"{note} is not in this repository"
    seeds = re.findall(r"(?<![\d.,])\b00[0-4]\b(?![A-Za-z%])", text)
    assert not seeds, "seed file numbers: cite the paper instead"
    assert not re.search(r"\bissue \d+\b", text, re.I)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_link_leads_somewhere(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_path_module_and_command_named_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    prose = _prose(text)
    top = r"(?:ipr_crawl|middlewares|tests|benchmarks|scripts|settings|docs)/"
    for path in re.findall(rf"`({top}[^`\s]*)`", prose):
        path = path.split("::")[0]
        found = list(REPO.glob(path)) if "*" in path else [REPO / path] if (REPO / path).exists() else []
        assert found, f"{path}: not in the tree"
    for script in re.findall(rf"\bpython3? ({top}\S+\.py)", text):
        assert (REPO / script).is_file(), f"{script}: not in the tree"
    for module in re.findall(r"python3? -m ([\w.]+)", text):
        assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
    for dotted in re.findall(r"`(ipr_crawl\.[\w.]+)", prose):
        assert _resolves(dotted.rstrip(".")), f"{dotted}: no such module or attribute"
    named = set(re.findall(r"`ipr-crawl ([a-z][a-z-]*)", prose))
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        named |= set(re.findall(r"^\s*ipr-crawl ([a-z][a-z-]*)", block, re.M))
    assert named <= _commands(), f"ipr-crawl {sorted(named - _commands())}: no such command"


def test_library_cites_papers_not_project_notes() -> None:
    """Docstrings, help texts and script headers cite what a reader can look up
    (author, year, section), not the project's seed file numbers or notes."""
    bad = []
    for path in [*(REPO / "ipr_crawl").rglob("*.py"), *(REPO / "ipr_crawl").rglob("*.lua"), *(REPO / "middlewares").glob("*.py")]:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\b00[0-4](?:'s)? (?:§|Fig)|\(00[0-4]\)|seed ``00|\.\./shared|DESIGN\.md|ALGORITHMS\.md|\bissue \d", line):
                bad.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not bad, "\n".join(bad)


def _architecture_tree() -> set[str]:
    """The paths the module tree of docs/architecture.md names: one entry a line, its
    folder given by its indentation (two spaces a level)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M) if b.startswith("ipr_crawl/"))
    named: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines():
        entry = line.split()[0] if line.strip() else ""
        if not (entry.endswith("/") or entry.endswith(".py")):
            continue  # the rest of the line before it
        level = (len(line) - len(line.lstrip(" "))) // 2
        folders = folders[:level]
        path = "".join(folders) + entry
        named.add(path)
        if entry.endswith("/"):
            folders.append(entry)
    return named


def test_architecture_names_every_module() -> None:
    """Every module of the package (``.py`` under ipr_crawl/ and middlewares/) has its
    line in docs/architecture.md's tree, under its own folder."""
    named = _architecture_tree()
    modules = sorted(
        p.relative_to(REPO).as_posix()
        for top in ("ipr_crawl", "middlewares")
        for p in (REPO / top).rglob("*.py")
    )
    missing = [m for m in modules if m not in named]
    assert not missing, f"docs/architecture.md does not name: {missing}"
