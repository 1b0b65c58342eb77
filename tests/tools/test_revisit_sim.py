"""``ipr-crawl revisit-sim``: the replay rules on hand-worked pages, against a
day-by-day reference, and the command end to end on a real change-log sample."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TEST_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from ipr_crawl.evaluation.revisit_sim import interval_bucket, load_log, parse_time, simulate, simulate_page
from ipr_crawl.revisit.policy import DAY, parse_policy

#: The shipped EmacsWiki change-log sample: its first 1,100 pages and their changes
#: (tests/data/SOURCES.md says how it was cut from ../shared/data/changes).
SAMPLE_PAGES = TEST_DATA / "emacswiki_pages.first1100.csv.gz"
SAMPLE_CHANGES = TEST_DATA / "emacswiki_changes.first1100.csv.gz"
T0 = parse_time("2020-01-01")


def test_hand_worked_fixed_week():
    # two changes on day 3 are one version; day 10 another; the window ends on day 15
    changes = [T0 + 3 * DAY + 10, T0 + 3 * DAY + 500, T0 + 10 * DAY + 7]
    r = simulate_page(parse_policy("fixed:7d"), T0 + 3600, T0 + 15 * DAY, changes)
    assert r.visits == [T0, T0 + 7 * DAY, T0 + 14 * DAY]
    assert (r.versions, r.fetched, r.accesses) == (3, 3, 3)
    assert (r.coverage, r.efficiency) == (1.0, 1.0)


def test_hand_worked_missed_version_and_same_day_change():
    # a change on the first day belongs to the first version; days 2 and 5 both
    # fall before the visit of day 7: one of them is missed
    changes = [T0 + 100, T0 + 2 * DAY, T0 + 5 * DAY]
    r = simulate_page(parse_policy("fixed:7d"), T0, T0 + 7 * DAY, changes)
    assert (r.versions, r.fetched, r.accesses) == (3, 2, 2)
    assert r.version_fetched == [True, False, True]


def test_mle_follows_eq5_on_a_page():
    # tau2 = 15d: visit day 15 sees the day-9 change; then T=15, U=0 -> alpha*mu_low*t_c = 1.5 -> 2 days
    r = simulate_page(parse_policy("mle-mix:0.1-10:15d"), T0, T0 + 40 * DAY, [T0 + 9 * DAY])
    assert r.visits[:3] == [T0, T0 + 15 * DAY, T0 + 17 * DAY]
    # then U/T = 2/17 -> mu = 1/log(17/2) = 0.467 -> tau = 7.0 days
    assert r.visits[3] == T0 + 24 * DAY


def reference(interval_days: int, first_day: int, last_day: int, change_days: list[int]):
    """Day-by-day statement of the rules for fixed:<k>d."""
    days = sorted({d for d in change_days if first_day < d <= last_day})
    versions = 1 + len(days)
    visits = list(range(first_day, last_day + 1, interval_days))
    fetched, seen = 1, 0
    for v in visits[1:]:
        now = sum(1 for d in days if d <= v)
        if now > seen:
            fetched += 1
            seen = now
    return versions, fetched, len(visits)


@settings(max_examples=200)
@given(st.integers(1, 30), st.integers(0, 50), st.integers(0, 400), st.lists(st.integers(0, 500), max_size=30))
def test_fixed_matches_day_by_day_reference(k, first, length, changes):
    last = first + length
    r = simulate_page(
        parse_policy(f"fixed:{k}d"), T0 + first * DAY + 3600, T0 + last * DAY + 7200, [T0 + d * DAY + 60 for d in changes]
    )
    assert (r.versions, r.fetched, r.accesses) == reference(k, first, last, changes)


@settings(max_examples=100)
@given(
    st.sampled_from(["mle-mix:0.1-10:15d", "mle-min:0.5-2:3d", "mle-avg:0.1-10:1d:x0.5", "aimd:1d:0.5", "aimd:2d:0.3:pair", "nutch-adaptive", "fixed:1d"]),
    st.integers(0, 2000),
    st.lists(st.integers(0, 2000), max_size=40),
    st.booleans(),
)
def test_invariants(spec, length, changes, lm):
    r = simulate_page(parse_policy(spec), T0, T0 + length * DAY + 3600, [T0 + d * DAY + 1 for d in changes], use_last_modified=lm)
    assert 1 <= r.fetched <= min(r.versions, r.accesses)
    assert r.versions == 1 + len({d for d in changes if 0 < d <= length})
    assert r.visits == sorted(set(r.visits)) and r.visits[-1] <= T0 + length * DAY
    assert sum(r.version_fetched) == r.fetched
    if spec == "fixed:1d":
        assert r.coverage == 1.0


def test_interval_buckets():
    assert interval_bucket(1.0) == (1, 2)
    assert interval_bucket(29.99) == (29, 30)
    assert interval_bucket(30) == (30, 40)
    assert interval_bucket(99.9) == (90, 100)
    assert interval_bucket(100) == (100, 130)
    assert interval_bucket(6199) == (6190, 6220)


def write_sample(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """The first ``n`` pages of the shipped EmacsWiki change-log sample with their changes."""
    pages_out, changes_out = tmp_path / "emacswiki_pages.csv.gz", tmp_path / "emacswiki_changes.csv.gz"
    keep = set()
    with gzip.open(SAMPLE_PAGES, "rt", newline="") as f, gzip.open(pages_out, "wt", newline="") as g:
        reader, writer = csv.reader(f), csv.writer(g)
        writer.writerow(next(reader))
        for row in reader:
            if len(keep) >= n:
                break
            keep.add(row[0])
            writer.writerow(row)
    assert len(keep) == n, f"the sample has only {len(keep)} pages"
    with gzip.open(SAMPLE_CHANGES, "rt", newline="") as f, gzip.open(changes_out, "wt", newline="") as g:
        reader, writer = csv.reader(f), csv.writer(g)
        writer.writerow(next(reader))
        writer.writerows(row for row in reader if row[0] in keep)
    return changes_out, pages_out


def test_command_on_real_log(tmp_path):
    changes, pages = write_sample(tmp_path, 400)
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    policies = "mle-mix:0.1-10:15d,aimd:1d:0.5,fixed:7d"
    proc = subprocess.run(
        [sys.executable, "-m", "ipr_crawl.cli", "revisit-sim", "--changes", str(changes), "--pages", str(pages),
         "--policies", policies, "--start", "2012-01-01", "--end", "2013-01-01",
         "--json", str(out_json), "--plot", str(out_png)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "pages (100%)" in proc.stderr  # the progress indicator
    result = json.loads(out_json.read_text())
    assert out_png.stat().st_size > 10_000
    assert set(result["policies"]) == set(policies.split(","))
    for name, p in result["policies"].items():
        assert {"coverage", "efficiency", "accesses", "versions", "missed", "by_interval", "by_month"} <= set(p)
        assert 0 < p["coverage"] <= 1 and 0 < p["efficiency"] <= 1
        assert p["missed"] == p["true_versions"] - p["versions"]
        assert sum(r["pages"] for r in p["by_interval"]) == p["pages_changed"]
        assert sum(m["true_versions"] for m in p["by_month"]) == p["true_versions"]
        assert sum(m["accesses"] for m in p["by_month"]) == p["accesses"]
        assert all("2012-01" <= m["month"] <= "2013-01" for m in p["by_month"])
        assert name in proc.stdout
    # the same numbers from the library on the same pages
    direct = simulate(load_log(str(changes), str(pages)), ["fixed:7d"], start=parse_time("2012-01-01"), end=parse_time("2013-01-01"))
    assert direct["policies"]["fixed:7d"]["accesses"] == result["policies"]["fixed:7d"]["accesses"]


def test_command_rejects_bad_policy(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ipr_crawl.cli", "revisit-sim", "--changes", "x", "--pages", "y", "--policies", "mle-mix:3-1"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode != 0 and "mu_low < mu_high" in proc.stderr


def test_load_log_variants(tmp_path):
    pages = tmp_path / "p.csv"
    pages.write_text(
        "http://a.test/x,2020-01-01 00:00:00,2020-03-01T00:00:00Z\n"  # no header, space separator
        "\n"
        "http://a.test/y,1577836800,1583020800,extra\n"  # POSIX seconds, an extra column
        "http://a.test/y,2019-12-01,2020-01-15\n"  # listed twice: one window
    )
    changes = tmp_path / "c.csv"
    changes.write_text(
        "url,when\n"
        "http://a.test/x,2020-01-10T12:00:00.5+00:00\n"
        "http://a.test/unknown,2020-01-10\n"
        "http://a.test/y,2020-01-05T00:00:00Z\n"
        "http://a.test/x,2020-01-03\n"
    )
    x, y = load_log(str(changes), str(pages))
    assert (x.url, x.first_seen, x.last_seen) == ("http://a.test/x", T0, parse_time("2020-03-01"))
    assert x.changes == [parse_time("2020-01-03"), parse_time("2020-01-10") + 43200.5]
    assert (y.first_seen, y.last_seen, y.changes) == (parse_time("2019-12-01"), parse_time("2020-03-01"), [parse_time("2020-01-05")])
    changes.write_text("page_url,change_time_utc_iso8601\nhttp://a.test/x,yesterday\n")
    with pytest.raises(ValueError, match=r"c.csv:2: bad time"):
        load_log(str(changes), str(pages))


def test_a_log_in_two_files_replays_as_one(tmp_path):
    """revisit-sim --changes A --changes B (a log whose bulk commits are kept apart):
    the changes of both files, per page, as if they were one file; the CLI writes both
    names in the JSON."""
    with gzip.open(SAMPLE_CHANGES, "rt") as f:
        header, *rows = f.read().splitlines()
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("\n".join([header, *rows[::2]]) + "\n")
    b.write_text("\n".join([header, *rows[1::2]]) + "\n")
    whole = {p.url: p.changes for p in load_log(str(SAMPLE_CHANGES), str(SAMPLE_PAGES))}
    split = {p.url: p.changes for p in load_log([str(a), str(b)], str(SAMPLE_PAGES))}
    assert split == whole and sum(map(len, whole.values())) > 0
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "ipr_crawl.cli", "revisit-sim", "--changes", str(a), "--changes", str(b),
                    "--pages", str(SAMPLE_PAGES), "--policies", "fixed:30d", "--json", str(out), "--quiet"],
                   check=True, cwd=REPO, capture_output=True)
    result = json.loads(out.read_text())
    assert result["changes"] == [str(a), str(b)]
    assert result["policies"]["fixed:30d"]["coverage"] == simulate(load_log(str(SAMPLE_CHANGES), str(SAMPLE_PAGES)), ["fixed:30d"])["policies"]["fixed:30d"]["coverage"]
