#!/usr/bin/env python3
"""Draws the language-model demo's ladder (frugal_demo's ladder.json) as one PNG: cost per 1M output tokens
and p99 time to first token, by step, with matplotlib as benchmarks/precision/plot.py draws.

    plot.py ladder.json ladder.png
"""
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py needs matplotlib: apt-get install -y python3-matplotlib")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        ladder = json.load(f)
    steps = ladder["steps"]
    if not steps:
        sys.exit(f"{sys.argv[1]}: no steps")
    labels = [f"{s['step']}. {s['name']}" for s in steps]
    cost = [s["cost_per_million_output"] for s in steps]
    ttft = [s["ttft_ms"]["p99"] / 1000 for s in steps]
    cur = steps[0]["currency"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    bars = a.bar(range(len(steps)), cost, color="#1f77b4")
    a.set_yscale("log")
    a.set_ylabel(f"{cur} per 1M output tokens (log)")
    a.set_title("Cost per 1M output tokens, from the ledger")
    for r, c in zip(bars, cost):
        a.annotate(f"{c:.3g}", (r.get_x() + r.get_width() / 2, c), ha="center", va="bottom", fontsize=8)
    bars = b.bar(range(len(steps)), ttft, color="#ff7f0e")
    b.set_yscale("log")
    b.set_ylabel("p99 time to first token, s (log)")
    b.set_title("p99 time to first token")
    for r, t in zip(bars, ttft):
        b.annotate(f"{t:.3g}", (r.get_x() + r.get_width() / 2, t), ha="center", va="bottom", fontsize=8)
    for ax in (a, b):
        ax.set_xticks(range(len(steps)))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    tr = ladder["traffic"]
    fig.suptitle(f"frugal demo: {ladder['model']}, {ladder['threads']} threads, {tr['requests']} chat requests "
                 f"from {tr['clients']} clients, at {ladder['gpu']['name']} {ladder['gpu']['hourly_usd']}/h",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
