#!/usr/bin/env python3
"""Draws the precision comparison from bench_precision's Google Benchmark JSON (and, when given, the
Markdown table of bench_gpu_gemm) into PNG plots and a Markdown table.

    plot.py --cpu cpu.json [--gpu gpu.md] --out DIR [--commit SHA] [--command "..."]
"""
import argparse
import datetime
import json
import math
import os
import re
import sys
import textwrap

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot.py needs matplotlib: apt-get install -y python3-matplotlib")

ORDER = ["fp32", "fp16", "bf16", "int8_w8a8", "int8_w8a8_smoothquant", "int8_w8a8_reduce_range",
         "int8_w8a8_smoothquant_reduce_range", "w8a16", "w4a16_g128"]
PRETTY = {
    "fp32": "fp32 (Eigen)",
    "fp16": "fp16 weights+acts",
    "bf16": "bf16 weights+acts",
    "int8_w8a8": "int8 W8A8",
    "int8_w8a8_smoothquant": "int8 W8A8 + SmoothQuant",
    "int8_w8a8_reduce_range": "int8 W8A8, 7-bit acts",
    "int8_w8a8_smoothquant_reduce_range": "int8 W8A8 + SQ, 7-bit acts",
    "w8a16": "W8A16 (int8 weight-only)",
    "w4a16_g128": "W4A16 (int4 g128)",
}
COLORS = {
    "fp32": "#222222",
    "fp16": "#1f77b4",
    "bf16": "#17becf",
    "int8_w8a8": "#d62728",
    "int8_w8a8_smoothquant": "#ff7f0e",
    "int8_w8a8_reduce_range": "#e377c2",
    "int8_w8a8_smoothquant_reduce_range": "#bcbd22",
    "w8a16": "#2ca02c",
    "w4a16_g128": "#9467bd",
}
MARKERS = {"fp32": "o", "fp16": "s", "bf16": "D", "int8_w8a8": "^", "int8_w8a8_smoothquant": "v",
           "int8_w8a8_reduce_range": "<", "int8_w8a8_smoothquant_reduce_range": ">", "w8a16": "P",
           "w4a16_g128": "X"}
MIB = 1024.0 * 1024.0


def load_cpu(path):
    """Returns (context, rows): one row per (precision, M, N, K) with the median and the spread of the repetitions."""
    with open(path) as f:
        doc = json.load(f)
    runs = {}
    for b in doc["benchmarks"]:
        name = b.get("run_name", b["name"])
        m = re.match(r"(gemm|gemm_cold)/([^/]+)/M:(\d+)/N:(\d+)/K:(\d+)", name)
        if not m:
            continue
        kind = b.get("aggregate_name", "iteration") if b.get("run_type") == "aggregate" else "iteration"
        runs.setdefault(name, {"cold": m.group(1) == "gemm_cold", "prec": m.group(2), "M": int(m.group(3)),
                               "N": int(m.group(4)), "K": int(m.group(5))})
        runs[name].setdefault(kind, []).append(b)
    rows = []
    for r in runs.values():
        src = r.get("median", r.get("iteration"))
        if not src:
            continue
        b = src[0]
        row = {k: r[k] for k in ("cold", "prec", "M", "N", "K")}
        row["gflops"] = b["FLOPS"] / 1e9
        row["tokens_s"] = b.get("items_per_second", float("nan"))
        row["cpu_time"] = b["cpu_time"]
        row["time_unit"] = b.get("time_unit", "us")
        row["weight_bytes"] = b["weight_bytes"]
        row["sqnr_db"] = b.get("sqnr_db")
        row["rel_err"] = b.get("rel_err")
        row["cosine"] = b.get("cosine")
        mean, sd = r.get("mean"), r.get("stddev")
        row["cv"] = sd[0]["FLOPS"] / mean[0]["FLOPS"] if mean and sd and mean[0]["FLOPS"] else None
        row["reps"] = b.get("repetitions", 1)
        rows.append(row)
    return doc.get("context", {}), rows


def load_gpu(path):
    """Parses bench_gpu_gemm's Markdown table: kernel | M | N | K | ours us | cuBLASLt us | ... | baseline."""
    header, rows = "", []
    with open(path) as f:
        for line in f:
            if not line.startswith("|"):
                if line.strip() and not header:
                    header = line.strip()
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 6 or not cells[1].isdigit():
                continue

            def num(s):
                try:
                    return float(s.rstrip("x%"))
                except ValueError:
                    return float("nan")

            rows.append({"kernel": cells[0], "M": int(cells[1]), "N": int(cells[2]), "K": int(cells[3]),
                         "ours_us": num(cells[4]), "theirs_us": num(cells[5]), "note": cells[-1]})
    return header, rows


def shapes_of(rows):
    return sorted({(r["N"], r["K"]) for r in rows}, key=lambda s: (s[0] * s[1], s))


def by(rows, prec, n, k, cold=False):
    return sorted((r for r in rows if r["prec"] == prec and r["N"] == n and r["K"] == k and r["cold"] == cold),
                  key=lambda r: r["M"])


def precisions(rows):
    present = {r["prec"] for r in rows}
    return [p for p in ORDER if p in present] + sorted(present - set(ORDER))


def baseline(rows, n, k, cold=False):
    return {r["M"]: r for r in by(rows, "fp32", n, k, cold)}


def m_ticks(ax, ms):
    ax.set_xticks(ms)
    ax.set_xticklabels([str(m) for m in ms])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def machine_line(ctx, model=""):
    caches = ", ".join(f"L{c['level']} {c['size'] // 1024} KiB" for c in ctx.get("caches", []) if c.get("type") != "Instruction")
    return (f"{model + ', ' if model else ''}{ctx.get('host_name', '?')}: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz "
            f"({caches}); Eigen SIMD {ctx.get('eigen_simd', '?')}; frugal kernels: {ctx.get('frugal_cpu_features', '?')}; "
            f"-march=native: {ctx.get('march_native', '?')}; load average at start "
            f"{', '.join(f'{x:.1f}' for x in ctx.get('load_avg', []))}")


def plot_throughput(rows, out):
    shapes = shapes_of(rows)
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
    for ax, (n, k) in zip(axes[0], shapes):
        for p in precisions(rows):
            pts = by(rows, p, n, k)
            if pts:
                ax.plot([r["M"] for r in pts], [r["gflops"] for r in pts], marker=MARKERS.get(p, "o"),
                        color=COLORS.get(p), label=PRETTY.get(p, p))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        m_ticks(ax, sorted({r["M"] for r in rows if (r["N"], r["K"]) == (n, k)}))
        ax.set_xlabel("M (tokens per GEMM call)")
        ax.set_ylabel("throughput (GFLOP/s, 2·M·N·K per call)")
        ax.set_title(f"CPU GEMM throughput, N={n}, K={k}, 1 thread")
        ax.grid(True, which="both", alpha=0.3)
        flop_per_token = 2.0 * n * k
        sec = ax.secondary_yaxis("right", functions=(lambda g, f=flop_per_token: g * 1e9 / f,
                                                     lambda t, f=flop_per_token: t * f / 1e9))
        sec.set_ylabel("tokens/s")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cpu_throughput.png"), dpi=110)
    plt.close(fig)


def plot_speedup(rows, out):
    shapes = shapes_of(rows)
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
    for ax, (n, k) in zip(axes[0], shapes):
        base = baseline(rows, n, k)
        for p in precisions(rows):
            if p == "fp32":
                continue
            pts = [r for r in by(rows, p, n, k) if r["M"] in base]
            if pts:
                ax.plot([r["M"] for r in pts], [r["gflops"] / base[r["M"]]["gflops"] for r in pts],
                        marker=MARKERS.get(p, "o"), color=COLORS.get(p), label=PRETTY.get(p, p))
        ax.axhline(1.0, color=COLORS["fp32"], linestyle="--", linewidth=1, label="fp32 (Eigen) = 1")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        m_ticks(ax, sorted(base))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.set_xlabel("M (tokens per GEMM call)")
        ax.set_ylabel("speedup over fp32 at the same M (x)")
        ax.set_title(f"CPU speedup over Eigen fp32, N={n}, K={k}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cpu_speedup.png"), dpi=110)
    plt.close(fig)


def plot_memory(rows, out):
    shapes = shapes_of(rows)
    precs = precisions(rows)
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.8 / len(shapes)
    for i, (n, k) in enumerate(shapes):
        vals = []
        for p in precs:
            pts = by(rows, p, n, k)
            vals.append(pts[0]["weight_bytes"] / MIB if pts else 0.0)
        base = vals[precs.index("fp32")] if "fp32" in precs else None
        xs = [j + (i - (len(shapes) - 1) / 2) * width for j in range(len(precs))]
        bars = ax.bar(xs, vals, width, label=f"N={n}, K={k}", alpha=0.85)
        for bar, v in zip(bars, vals):
            note = f"{v:.1f}" + (f"\n{base / v:.1f}x smaller" if base and v and v != base else "")
            ax.annotate(note, (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(precs)))
    ax.set_xticklabels([textwrap.fill(PRETTY.get(p, p), 14) for p in precs], fontsize=8)
    ax.set_ylabel("weight memory (MiB, including scales)")
    ax.set_title("Weight memory per precision (one layer)")
    ax.legend()
    ax.margins(y=0.15)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=110)
    plt.close(fig)


def plot_tradeoff(rows, out):
    n, k = shapes_of(rows)[0]
    base = baseline(rows, n, k)
    ms = sorted(base)
    m_lo, m_hi = ms[0], ms[-1]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for p in precisions(rows):
        if p == "fp32":
            continue
        pts = {r["M"]: r for r in by(rows, p, n, k)}
        if m_lo not in pts or pts[m_lo].get("sqnr_db") is None:
            continue
        for m, filled in ((m_lo, True), (m_hi, False)):
            if m not in pts:
                continue
            r = pts[m]
            ax.scatter(r["gflops"] / base[m]["gflops"], r["sqnr_db"], s=80, marker=MARKERS.get(p, "o"),
                       facecolors=COLORS.get(p) if filled else "none", edgecolors=COLORS.get(p),
                       label=PRETTY.get(p, p) if filled else None)
        a, b = pts[m_lo], pts.get(m_hi)
        if b:
            ax.plot([a["gflops"] / base[m_lo]["gflops"], b["gflops"] / base[m_hi]["gflops"]],
                    [a["sqnr_db"], b["sqnr_db"]], color=COLORS.get(p), alpha=0.4, linewidth=1)
    ax.axvline(1.0, color=COLORS["fp32"], linestyle="--", linewidth=1)
    ax.text(1.0, ax.get_ylim()[0], " fp32", va="bottom", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.set_xlabel(f"speedup over fp32 (filled: M={m_lo}, decode; hollow: M={m_hi}, prefill)")
    ax.set_ylabel("output SQNR vs fp32 (dB, higher is more accurate)")
    ax.set_title(f"Accuracy vs speed, N={n}, K={k} (outlier weights and activations)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cpu_tradeoff.png"), dpi=110)
    plt.close(fig)


def plot_cold(rows, out):
    """Decode (M=1) with the weights in cache (as timed above) and evicted to DRAM before every call."""
    shapes = [s for s in shapes_of(rows) if by(rows, "fp32", *s, cold=True)]
    if not shapes:
        return False
    precs = [p for p in precisions(rows) if p != "fp32"]
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
    for ax, (n, k) in zip(axes[0], shapes):
        for j, (cold, hatch, label) in enumerate(((False, "//", "weights in cache"), (True, None, "weights in DRAM"))):
            base = baseline(rows, n, k, cold).get(1)
            vals = []
            for p in precs:
                pts = [r for r in by(rows, p, n, k, cold) if r["M"] == 1]
                vals.append(pts[0]["gflops"] / base["gflops"] if pts and base else 0.0)
            xs = [i + (j - 0.5) * 0.4 for i in range(len(precs))]
            bars = ax.bar(xs, vals, 0.4, hatch=hatch, color=[COLORS.get(p) for p in precs], alpha=0.55 if hatch else 0.9,
                          edgecolor="black", linewidth=0.5, label=label + (f" (fp32 {base['gflops']:.1f} GFLOP/s)" if base else ""))
            for bar, v in zip(bars, vals):
                ax.annotate(f"{v:.1f}x", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(precs)))
        ax.set_xticklabels([textwrap.fill(PRETTY.get(p, p), 14) for p in precs], fontsize=8)
        ax.set_ylabel("speedup over fp32 at M=1, same cache state (x)")
        ax.set_title(f"Decode (M=1), N={n}, K={k}: cached vs DRAM weights")
        ax.legend(fontsize=8)
        ax.margins(y=0.12)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cpu_decode_dram.png"), dpi=110)
    plt.close(fig)
    return True


def gpu_baselines(rows):
    """cuBLASLt fp16 time per shape: the 'theirs' column of every row whose baseline is LT f16."""
    base = {}
    for r in rows:
        if r["note"].startswith("LT f16") and not math.isnan(r["theirs_us"]):
            base.setdefault((r["M"], r["N"], r["K"]), r["theirs_us"])
    return base


def plot_gpu(rows, out):
    base = gpu_baselines(rows)
    shapes = sorted({(r["N"], r["K"]) for r in rows if r["M"] < r["N"]})
    made = []
    for fname, ylabel, value in (
            ("gpu_throughput.png", "throughput (TFLOP/s, 2·M·N·K per call)", lambda r: 2e-6 * r["M"] * r["N"] * r["K"] / r["ours_us"]),
            ("gpu_speedup.png", "speedup over cuBLASLt fp16 at the same shape (x)",
             lambda r: base.get((r["M"], r["N"], r["K"]), float("nan")) / r["ours_us"])):
        fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
        for ax, (n, k) in zip(axes[0], shapes):
            kernels = sorted({r["kernel"] for r in rows if (r["N"], r["K"]) == (n, k)})
            for kern in kernels:
                pts = sorted((r for r in rows if r["kernel"] == kern and (r["N"], r["K"]) == (n, k)), key=lambda r: r["M"])
                ys = [value(r) for r in pts]
                if any(not math.isnan(y) for y in ys):
                    ax.plot([r["M"] for r in pts], ys, marker="o", label=kern)
            if fname == "gpu_throughput.png":
                lt = sorted((m, 2e-6 * m * nn * kk / t) for (m, nn, kk), t in base.items() if (nn, kk) == (n, k))
                if lt:
                    ax.plot([m for m, _ in lt], [v for _, v in lt], "k--", marker=".", label="cuBLASLt fp16")
                ax.set_yscale("log")
            else:
                ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="cuBLASLt fp16 = 1")
            ax.set_xscale("log", base=2)
            m_ticks(ax, sorted({r["M"] for r in rows if (r["N"], r["K"]) == (n, k)}))
            ax.set_xlabel("M (tokens per GEMM call)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"GPU GEMM, N={n}, K={k}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=110)
        plt.close(fig)
        made.append(fname)
    return made


def fmt_err(x):
    return "—" if x is None else (f"{x:.2e}" if x < 1e-3 else f"{x:.4f}")


def write_table(ctx, rows, gpu, out, commit, command, model=""):
    lines = []
    when = ctx.get("date") or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines.append(f"- **Date:** {when}")
    lines.append(f"- **Machine:** {machine_line(ctx, model)}")
    if commit:
        lines.append(f"- **Commit:** `{commit}`")
    if command:
        lines.append(f"- **Command:** `{command}`")
    reps = max((r["reps"] for r in rows), default=1)
    cvs = [r["cv"] for r in rows if r["cv"] is not None]
    lines.append(f"- **Timing:** single thread, CPU time, median of {reps} repetitions"
                 + (f"; spread across repetitions (stddev / mean of GFLOP/s): median {sorted(cvs)[len(cvs) // 2]:.1%}, "
                    f"worst {max(cvs):.1%}" if cvs else ""))
    lines.append("")
    for n, k in shapes_of(rows):
        base = baseline(rows, n, k)
        ms = sorted({r["M"] for r in rows if r["N"] == n and r["K"] == k and not r["cold"]})
        cold_base = baseline(rows, n, k, True).get(1)
        lines.append(f"**N={n}, K={k}: GFLOP/s (speedup over fp32 at the same M)**")
        lines.append("")
        lines.append("| precision | weights MiB | SQNR dB | rel. error | cosine | " + " | ".join(f"M={m}" for m in ms) +
                     (" | M=1, W in DRAM |" if cold_base else " |"))
        lines.append("|---|---:|---:|---:|---:|" + "---:|" * (len(ms) + (1 if cold_base else 0)))
        for p in precisions(rows):
            pts = {r["M"]: r for r in by(rows, p, n, k)}
            if not pts:
                continue
            any_r = pts[max(pts)]
            sq = "reference" if p == "fp32" else (f"{any_r['sqnr_db']:.1f}" if any_r["sqnr_db"] is not None else "—")
            cos = "1" if p == "fp32" else (f"{any_r['cosine']:.6f}" if any_r["cosine"] is not None else "—")
            cells = []
            for m in ms:
                r = pts.get(m)
                if not r:
                    cells.append("—")
                elif p == "fp32" or m not in base:
                    cells.append(f"{r['gflops']:.1f}")
                else:
                    cells.append(f"{r['gflops']:.1f} ({r['gflops'] / base[m]['gflops']:.2f}x)")
            if cold_base:
                c = [r for r in by(rows, p, n, k, True) if r["M"] == 1]
                if not c:
                    cells.append("—")
                elif p == "fp32":
                    cells.append(f"{c[0]['gflops']:.1f}")
                else:
                    cells.append(f"{c[0]['gflops']:.1f} ({c[0]['gflops'] / cold_base['gflops']:.2f}x)")
            lines.append(f"| {PRETTY.get(p, p)} | {any_r['weight_bytes'] / MIB:.1f} | {sq} | "
                         f"{'0' if p == 'fp32' else fmt_err(any_r['rel_err'])} | {cos} | " + " | ".join(cells) + " |")
        lines.append("")
    spread = 0.0
    for n, k in shapes_of(rows):
        for p in precisions(rows):
            sq = [r["sqnr_db"] for r in by(rows, p, n, k) if r["sqnr_db"] is not None]
            if sq:
                spread = max(spread, max(sq) - min(sq))
    lines.append("SQNR, relative error (Frobenius) and cosine are of the GEMM output against the fp32 output at the "
                 f"largest M timed; across M they move by at most {spread:.1f} dB.")
    if any(r["cold"] for r in rows):
        lines.append("")
        lines.append("*M=1, W in DRAM*: before every call an untimed read of 512 MiB evicts the weights from the caches, "
                     "so they come from DRAM, as a model's layers do when they take turns; 8 calls per repetition, "
                     "ratio over fp32 under the same condition. The other columns time back-to-back calls on one "
                     "layer, whose weights can stay in the L3.")
    if gpu:
        header, grows = gpu
        lines.append("")
        lines.append("**GPU** " + (f"({header})" if header else ""))
        lines.append("")
        base = gpu_baselines(grows)
        lines.append("| kernel | M | N | K | ours us | baseline us | vs own baseline | vs cuBLASLt fp16 | baseline |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in grows:
            f16 = base.get((r["M"], r["N"], r["K"]))
            vs_f16 = f"{f16 / r['ours_us']:.2f}x" if f16 else "—"
            lines.append(f"| {r['kernel']} | {r['M']} | {r['N']} | {r['K']} | {r['ours_us']:.2f} | {r['theirs_us']:.2f} | "
                         f"{r['theirs_us'] / r['ours_us']:.2f}x | "
                         f"{vs_f16} | {r['note']} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", required=True, help="bench_precision's --benchmark_out JSON")
    ap.add_argument("--gpu", help="bench_gpu_gemm's --md table, if it ran")
    ap.add_argument("--out", required=True, help="folder for the PNGs and results.md")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--cpu-model", default="", help="the CPU's model name, for the machine line")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ctx, rows = load_cpu(a.cpu)
    if not rows:
        sys.exit(f"plot.py: no gemm/... benchmarks in {a.cpu}")
    plot_throughput(rows, a.out)
    plot_speedup(rows, a.out)
    plot_memory(rows, a.out)
    plot_tradeoff(rows, a.out)
    made = ["cpu_throughput.png", "cpu_speedup.png", "memory.png", "cpu_tradeoff.png"]
    if plot_cold(rows, a.out):
        made.append("cpu_decode_dram.png")
    gpu = None
    if a.gpu and os.path.exists(a.gpu):
        gpu = load_gpu(a.gpu)
        if gpu[1]:
            made += plot_gpu(gpu[1], a.out)
    print(write_table(ctx, rows, gpu, a.out, a.commit, a.command, a.cpu_model))
    print("wrote " + ", ".join(os.path.join(a.out, m) for m in made + ["results.md"]))


if __name__ == "__main__":
    main()
