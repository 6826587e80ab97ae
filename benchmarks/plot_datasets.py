#!/usr/bin/env python3
"""Plot the datasets benchmark: small files against packed shards, cold, warm and after eviction.

Reads the runs ``benchmarks/datasets.py`` saved (benchmarks/results/datasets.json) and writes one PNG
(docs/datasets-benchmark.png): a panel per link, grouped bars of read MB/s per phase, the packed/small ratio
over each group, and a caption line with each run's date and command. Matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

REPO = Path(__file__).resolve().parent.parent
LINKS = ("loopback", "shaped")
PHASES = (
    ("cold", "cold\n(empty cache)"),
    ("warm", "warm\n(dataset cached)"),
    ("evicted", "after eviction\n(cache = half the dataset)"),
)
LAYOUTS = (("small", "small files", "#d62728"), ("packed", "packed shards", "#1f77b4"))


def load(path: Path) -> dict:
    """The runs per link, each checked for the figures the plot needs; a one-line error otherwise."""
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"--results {path}: expected the JSON benchmarks/datasets.py writes ({exc!r})") from None
    for link in LINKS:
        for layout, _, _ in LAYOUTS:
            for phase, _ in PHASES:
                try:
                    float(runs[link]["read"][layout][phase]["MBps"])
                except (KeyError, TypeError, ValueError):
                    raise SystemExit(
                        f"--results {path}: runs.{link}.read.{layout}.{phase}.MBps is missing or not a number; "
                        f"hint: run `python benchmarks/datasets.py --modes {link}`"
                    ) from None
    return runs


def title(link: str, run: dict) -> str:
    net = run.get("network", {})
    if link == "shaped" and "rate_mbit" in net:
        return f"shaped link ({net['rate_mbit']:g} Mbit/s, {net['delay_ms']:g} ms round trip)"
    return f"{link} (no shaping)"


def panel(ax, link: str, run: dict) -> None:
    """Grouped bars, each labelled with its MB/s, and the packed/small ratio above each phase."""
    width = 0.38
    for i, (layout, label, colour) in enumerate(LAYOUTS):
        values = [run["read"][layout][phase]["MBps"] for phase, _ in PHASES]
        xs = [x + (i - 0.5) * width for x in range(len(PHASES))]
        bars = ax.bar(xs, values, width, label=label, color=colour)
        ax.bar_label(bars, fmt="%.1f", padding=2, fontsize=9)
    for x, (phase, _) in enumerate(PHASES):
        small = run["read"]["small"][phase]["MBps"]
        packed = run["read"]["packed"][phase]["MBps"]
        top = max(small, packed)
        ax.annotate(
            f"{packed / small:.1f}x packed/small",
            (x, top),
            xytext=(0, 16),
            textcoords="offset points",
            ha="center",
            fontsize=10,
            fontweight="bold",
        )
    ax.set_xticks(range(len(PHASES)), [name for _, name in PHASES])
    ax.set_title(title(link, run), fontsize=11)
    ax.set_xlabel("read pass (JuiceFS local cache, page cache dropped)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def caption(runs: dict) -> str:
    commands = {runs[link]["command"].strip() for link in LINKS}
    dates = ", ".join(f"{link} {runs[link]['when'].replace('T', ' ')}" for link in LINKS)
    config = runs[LINKS[0]].get("config", {})
    shape = (
        f"{config['samples']} samples x {config['sample_kib']} KiB, shards of {config['shard_mib']:g} MiB, "
        f"DataLoader {config['workers']} workers, batch {config['batch']}, {config['step_ms']:g} ms step; "
        if {"samples", "sample_kib", "shard_mib", "workers", "batch", "step_ms"} <= set(config)
        else ""
    )
    command = " and ".join(sorted(commands))
    return f"{shape}read MB/s, one pass each.\nRuns: {dates}, made by: {command} (benchmarks/results/datasets.json)"


def plot(runs: dict, out: Path) -> None:
    fig, axes = plt.subplots(1, len(LINKS), figsize=(12, 5.8), sharey=True)
    for ax, link in zip(axes, LINKS, strict=True):
        panel(ax, link, runs[link])
    axes[0].set_ylabel("read throughput (MB/s = 10⁶ bytes/s)")
    top = max(runs[link]["read"][lay][ph]["MBps"] for link in LINKS for lay, _, _ in LAYOUTS for ph, _ in PHASES)
    axes[0].set_ylim(0, top * 1.22)
    axes[0].legend(loc="upper left")
    fig.suptitle("Reading the same dataset as small files and as packed shards, through a DataLoader", fontsize=13)
    fig.text(0.5, 0.012, caption(runs), ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results" / "datasets.json")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "datasets-benchmark.png")
    args = ap.parse_args(argv)
    plot(load(args.results), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
