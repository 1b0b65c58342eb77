"""The README's settings table is the one :data:`ipr_crawl.config.SETTINGS` gives,
and every instruction that names a command, module or file names one that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from ipr_crawl.config import DEFAULTS, SETTINGS, FrontierConfig, RevisitConfig, markdown_table, read

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_readme_settings_table_is_generated_from_the_settings_table() -> None:
    text = README.read_text(encoding="utf-8")
    assert markdown_table() in text, "regenerate README's table from ipr_crawl.config.markdown_table()"
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in text, setting.name


def test_every_default_passes_its_own_validation() -> None:
    settings = Settings(DEFAULTS)
    for setting in SETTINGS:
        assert read(settings, setting.name) == setting.default or setting.kind == "str", setting.name
    FrontierConfig.from_settings(settings, "spider")
    RevisitConfig.from_settings(settings)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", float("inf"), float("nan")])
@pytest.mark.parametrize("name", [s.name for s in SETTINGS if s.kind == "float"])
def test_non_finite_numbers_are_refused_by_name(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(name)):
        read(Settings({name: value}), name)
