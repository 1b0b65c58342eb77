"""Markdown tables for docs/research/results.md from the JSON files of `ipr-crawl simulate`.

    python benchmarks/results_tables.py docs/data/results/NAME.json [...]

Prints, per graph: authorities and hubs acquired (003's definition) at the
checkpoints, and B / A(1 %) at 1, 5, 10, 20 % of the reachable pages.
"""

from __future__ import annotations

import argparse
import json


def main(paths: list[str]) -> int:
    for path in paths:
        data = json.load(open(path))
        rows = data["orderings"]
        print(f"\n#### {data['graph']}: authorities (in-degree ≥ {data['authority_threshold']}) / hubs "
              f"(out-degree ≥ {data['hub_threshold']}) acquired\n")
        fr = [cp["fraction"] for cp in rows["bf"]["checkpoints"]]
        print("| ordering | " + " | ".join(f"{f:.0%} ({cp['pages']} p.)" for f, cp in zip(fr, rows["bf"]["checkpoints"])) + " |")
        print("|---|" + "---:|" * len(fr))
        for name, row in rows.items():
            cells = [f"{cp['authorities']} / {cp['hubs']}" for cp in row["checkpoints"]]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"\n#### {data['graph']}: criterion B (PageRank fetched) and A(1 %) as the crawl proceeds\n")
        pick = [0.01, 0.05, 0.1, 0.2, 0.5]
        print("| ordering | " + " | ".join(f"B@{f:.0%}" for f in pick) + " | " + " | ".join(f"A1%@{f:.0%}" for f in pick) + " |")
        print("|---|" + "---:|" * (2 * len(pick)))
        for name, row in rows.items():
            cps = {cp["fraction"]: cp for cp in row["checkpoints"]}
            b = [f"{cps[f]['B']:.3f}" if f in cps else "—" for f in pick]
            a = [f"{cps[f]['A']['0.01']:.3f}" if f in cps else "—" for f in pick]
            print(f"| {name} | " + " | ".join(b + a) + " |")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="JSON files written by `ipr-crawl simulate --json`")
    raise SystemExit(main(ap.parse_args().paths))
