"""The README documents every setting the add-on reads, with its default."""

from __future__ import annotations

import re
from pathlib import Path

from ipr_crawl.config import DEFAULTS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_lists_every_setting_with_its_default() -> None:
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `(IPR_[A-Z_0-9]+)`[^|]*\| ([^|]*)\|", line)
        if m and m.group(1) not in rows:  # the settings table comes first
            rows[m.group(1)] = m.group(2)
    missing = [k for k in DEFAULTS if k not in rows and not k.startswith("IPR_IMPORTANCE_")]
    assert not missing, f"settings missing from the README's table: {missing}"
    assert "IPR_IMPORTANCE_A" in rows  # one row for A … D
    wrong = []
    for key, default in DEFAULTS.items():
        if key in rows and not key.startswith("IPR_IMPORTANCE_"):
            shown = rows[key].strip().strip("`")
            if isinstance(default, bool):
                ok = shown == str(default)
            elif isinstance(default, (int, float)):
                number = shown.replace("`", "").split()[0].replace(",", "")
                num, _, den = number.partition("/")
                try:
                    ok = abs(float(num) / float(den or 1) - float(default)) < 1e-12
                except ValueError:
                    ok = False
            elif default == "":
                ok = True  # an empty default is described in words ("spider name", "off")
            else:
                ok = shown.strip('"') == str(default)
            if not ok:
                wrong.append((key, default, rows[key].strip()))
    assert not wrong, f"README defaults differ from ipr_crawl.config.DEFAULTS: {wrong}"
