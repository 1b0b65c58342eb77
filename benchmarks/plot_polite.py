"""Plot the politeness trade-off measured by ``polite_pop.py`` (issue 6): for each
configuration of each run, pages/s as a multiple of DAPQ's (x) against criterion B
at N as a multiple of the plain global order's (y), with the targets as lines.

    python benchmarks/plot_polite.py docs/data/bench/polite_pop_served_ratio.json \\
        docs/data/bench/polite_pop_served_ratio2.json docs/data/bench/polite_pop_realweb_ratio.json \\
        docs/data/bench/polite_pop_d0.5.json --out docs/data/bench/polite_tradeoff.png \
        --labels "served graphs run 1 (0.25 s),served graphs run 2 (0.25 s),realweb (0.25 s),realweb (0.5 s)"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def points(path: Path) -> list[tuple[str, float, float]]:
    """``(configuration, pages/s ÷ DAPQ, B at N ÷ global)`` of one run's JSON."""
    summary = json.loads(path.read_text())["summary"]
    dapq = summary["scrapy-dapq"]["pages_per_s"]
    glob = summary["ipr:dl1 global"]["B"]
    n = max(glob, key=int)
    return [(name, x["pages_per_s"] / dapq, x["B"][n] / glob[n]) for name, x in summary.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--labels", default="", help="comma-separated legend labels, one per run (default: file names)")
    ap.add_argument("--out", default="polite_tradeoff.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = "osD^v"
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else []
    for i, path in enumerate(args.runs):
        pts = points(path)
        label = labels[i] if i < len(labels) else path.stem
        ax.scatter([p[1] for p in pts], [p[2] for p in pts], marker=markers[i % len(markers)], label=label)
        for name, x, y in pts:
            if name == "ipr:dl1 global":  # (0.2, 1.0) in every run: the legend says it
                continue
            ax.annotate(name.replace("ipr:dl1 ", ""), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axvline(0.95, color="gray", linestyle="--", linewidth=0.8)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=0.8)
    ax.annotate("global order (every run)", (0.2, 1.0), fontsize=7, xytext=(3, -12), textcoords="offset points")
    ax.set(xlabel="pages/s ÷ Scrapy DownloaderAwarePriorityQueue", ylabel="criterion B at N ÷ plain global order",
           title="Polite pop: speed against order (delay 0.25–0.5 s, 6 hosts)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
