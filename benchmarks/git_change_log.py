"""A page change log for ``ipr-crawl revisit-sim``, from the history of a git repository.

Each file whose path matches ``--pattern`` is a page of a site rendered from the
repository; the pattern's first group names the page, so a file renamed or moved
(``pep-0001.txt`` -> ``peps/pep-0001.rst``) stays the same page, as its rendered URL
does. The history is read as the site's branch saw it: first-parent commits of
``--branch``, each merge compared with its first parent, at the committer time (UTC):

    git log BRANCH --first-parent --diff-merges=first-parent -M --name-status

- a modification, or a rename with edits, is a change of the page at that instant;
  a pure rename is none;
- a page begins at its first addition and ends at its last deletion (or at the last
  commit if it still exists); a page added again after a deletion gets one change;
- a commit that touches more than ``--bulk`` pages (a mass edit: a licence header, a
  format migration) is kept apart: its changes go to ``--bulk-out`` instead (the
  tldr-pages log of the shared data sets is cut the same way);
- two changes of one page in the same second are one;
- ``--renames exact`` finds only files moved unchanged (git ``-M100%``, from object ids
  alone), for a copy of a repository that lacks some file contents (git then fails to
  read a blob under the default ``-M``, and says so).

Writes ``--changes`` (``page_url,change_time_utc_iso8601``) and ``--pages``
(``page_url,first_seen,last_seen``), gzip-compressed CSV, the format ``revisit-sim``
reads (:func:`ipr_crawl.evaluation.revisit_sim.write_log`). Example (PEPs, the site https://peps.python.org/):

    python benchmarks/git_change_log.py --repo peps.git --branch main \\
        --pattern 'pep-(\\d{4})\\.(?:txt|rst)$' --url 'https://peps.python.org/pep-{}/' \\
        --changes peps_changes.csv.gz --pages peps_pages.csv.gz --bulk-out peps_bulk.csv.gz
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from ipr_crawl.evaluation.revisit_sim import Page, write_log


def read_history(repo: str, branch: str, renames: str = "similar") -> list[tuple[int, list[tuple[str, list[str]]]]]:
    """Commits oldest first: ``(committer time, [(status, paths)])``. ``renames``:
    ``similar`` (git's ``-M``: a file moved with edits is still found, which reads the
    files' contents) or ``exact`` (``-M100%``: only files moved unchanged, found from
    the object ids alone: for a partial clone or a snapshot without some blobs).
    Raises :class:`RuntimeError` with git's message when git fails."""
    cmd = ["git", "-C", repo, "-c", "core.quotepath=off", "-c", "diff.renameLimit=100000", "log", branch,
           "--first-parent", "--diff-merges=first-parent", "-M" if renames == "similar" else "-M100%",
           "--name-status", "--format=C %ct"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        hint = (" (a blob is missing: try --renames exact)"
                if "unable to read" in run.stderr and renames == "similar" else "")
        raise RuntimeError(f"git log failed in {repo}: {run.stderr.strip()}{hint}")
    out = run.stdout
    commits: list[tuple[int, list[tuple[str, list[str]]]]] = []
    for line in out.splitlines():
        if line.startswith("C "):
            commits.append((int(line[2:]), []))
        elif line.strip() and commits:
            status, *paths = line.split("\t")
            commits[-1][1].append((status, paths))
    commits.reverse()
    return commits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="a git repository (a work tree or a bare git directory)")
    ap.add_argument("--branch", default="HEAD")
    ap.add_argument("--pattern", required=True, help="regular expression on the path; group 1 names the page")
    ap.add_argument("--url", required=True, help="the page's URL, {} = group 1 of the pattern")
    ap.add_argument("--bulk", type=int, default=100, help="a commit touching more pages is a bulk commit")
    ap.add_argument("--changes", required=True)
    ap.add_argument("--pages", required=True)
    ap.add_argument("--bulk-out", default="", help="the bulk commits' changes (default: dropped)")
    ap.add_argument("--renames", choices=("similar", "exact"), default="similar",
                    help="moved files: similar (git -M, reads contents) or exact (-M100%%, object ids only: "
                         "for a repository copy that lacks some file contents)")
    args = ap.parse_args(argv)
    try:
        pattern = re.compile(args.pattern)
        if pattern.groups < 1:
            ap.error("--pattern needs a group that names the page")
    except re.error as e:
        ap.error(f"--pattern: {e}")
    if "{}" not in args.url:
        ap.error("--url needs {} where the page's name goes")

    def page(path: str) -> str | None:
        m = pattern.search(path)
        return args.url.format(m.group(1)) if m else None

    try:
        commits = read_history(args.repo, args.branch, args.renames)
    except RuntimeError as exc:
        print(f"git_change_log: {exc}", file=sys.stderr)
        return 2
    if not commits:
        print(f"{args.repo}: no commits on {args.branch}", file=sys.stderr)
        return 1
    end = commits[-1][0]
    alive: dict[str, int] = {}  # page -> files that render it now
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    changes: set[tuple[str, int]] = set()
    bulk: set[tuple[str, int]] = set()
    bulk_commits = 0
    for t, entries in commits:
        touched: list[tuple[str, bool]] = []  # (page, is a change)
        for status, paths in entries:
            kind = status[:1]
            if kind == "R" or kind == "C":
                old, new = page(paths[0]), page(paths[1])
                edited = status[1:] != "100"
                if kind == "R" and old and old != new:
                    alive[old] -= 1
                    if alive[old] == 0:
                        last[old] = t
                if new:
                    if kind == "C" or old != new:
                        touched.append((new, alive.get(new, 0) > 0 and edited))
                        alive[new] = alive.get(new, 0) + 1
                        first.setdefault(new, t)
                        last.pop(new, None)
                    elif edited:
                        touched.append((new, True))
                continue
            p = page(paths[0])
            if not p:
                continue
            if kind == "A":
                again = p in first and alive.get(p, 0) == 0
                alive[p] = alive.get(p, 0) + 1
                first.setdefault(p, t)
                last.pop(p, None)
                touched.append((p, again))
            elif kind == "D":
                alive[p] = alive.get(p, 1) - 1
                if alive[p] == 0:
                    last[p] = t
            else:  # M, T
                touched.append((p, True))
        target = changes
        if len({p for p, _ in touched}) > args.bulk:
            target, bulk_commits = bulk, bulk_commits + 1
        for p, changed in touched:
            if changed:
                target.add((p, t))
    pages = [Page(p, first[p], last.get(p, end)) for p in sorted(first)]
    by_url = {p.url: p for p in pages}
    for p, t in sorted(changes):
        by_url[p].changes.append(t)
    write_log(pages, args.changes, args.pages)
    if args.bulk_out:
        write_log([Page(p, 0, 0, [t]) for p, t in sorted(bulk)], args.bulk_out)
    changed = len({p for p, _ in changes})
    print(f"{len(commits)} commits, {len(pages)} pages ({changed} with a change), {len(changes)} changes, "
          f"{bulk_commits} bulk commits ({len(bulk)} changes kept apart); "
          f"{time.strftime('%Y-%m-%d', time.gmtime(commits[0][0]))} .. {time.strftime('%Y-%m-%d', time.gmtime(end))}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
