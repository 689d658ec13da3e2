#!/usr/bin/env python3
"""Draws the precision comparison from bench_precision's Google Benchmark JSON (and, when given, the
Markdown table of bench_gpu_gemm) into PNG plots and a Markdown table; with --llm, the language model's
comparison from llm.sh (llm.json, first collected from llm.sh's raw outputs when --llm-raw names them).

    plot.py --cpu cpu.json [--gpu gpu.md] --out DIR [--commit SHA] [--command "..."]
    plot.py --llm llm.json [--llm-raw RAW --llm-setup KEY=VALUE...] --out DIR [--commit SHA] [--command "..."]
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

ORDER = ["fp32", "native", "fp16", "bf16", "int8_w8a8", "int8_w8a8_smoothquant", "int8_w8a8_reduce_range",
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
    "native": "native (the file's Q4_1)",
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
    "native": "#8c564b",
}
MARKERS = {"fp32": "o", "fp16": "s", "bf16": "D", "int8_w8a8": "^", "int8_w8a8_smoothquant": "v",
           "int8_w8a8_reduce_range": "<", "int8_w8a8_smoothquant_reduce_range": ">", "w8a16": "P",
           "w4a16_g128": "X", "native": "h"}
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


def save_figure(fig, out, name):
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)


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
    save_figure(fig, out, "cpu_throughput.png")


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
    save_figure(fig, out, "cpu_speedup.png")


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
    save_figure(fig, out, "memory.png")


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
    save_figure(fig, out, "cpu_tradeoff.png")


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
    save_figure(fig, out, "cpu_decode_dram.png")
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
        save_figure(fig, out, fname)
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


# The language model (llm.sh): frugal_generate's precision names, drawn in the colours of their GEMM above.
LLM_STYLE = {"fp32": ("fp32", "fp32 (Eigen)"), "native": ("native", "native (Q4_1 blocks)"),
             "int8": ("int8_w8a8", "int8 W8A8"), "int4": ("w4a16_g128", "int4 W4A16 g64/g128")}
MB = 1e6
NO_16BIT = ("not measured: frugal has no CPU GEMM with fp16 or bf16 weights. include/frugal/quant/ converts "
            "16-bit values to fp32 and multiplies fp32, int8, int4 and GGUF-block (Q4_1, Q8_0) weights only; the encoder's fp16/bf16 "
            "widens each layer's weights to fp32 per call, which moves more bytes than fp32 itself")


def llm_color(p):
    return COLORS.get(LLM_STYLE.get(p, (p,))[0])


def llm_label(p):
    return LLM_STYLE.get(p, (p, p))[1]


def read_json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def agreement(ref, other):
    """Greedy agreement of one precision's generations with fp32's, prompt by prompt."""
    if [r["prompt"] for r in ref] != [o["prompt"] for o in other]:
        sys.exit("plot.py: the generations do not answer the same prompts in the same order")
    prefix = []
    for r, o in zip(ref, other):
        a, b = r["ids"], o["ids"]
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        prefix.append((n, max(len(a), len(b))))
    return {"prompts": len(prefix),
            "exact": sum(n == total for n, total in prefix) / len(prefix),
            "prefix_share": sum(n / total if total else 1.0 for n, total in prefix) / len(prefix),
            "first_difference": [n if n < total else None for n, total in prefix]}


def collect_llm(raw, setup, commit, command, cpu_model):
    """Turns llm.sh's raw outputs into llm.json's document."""
    load = {}
    with open(os.path.join(raw, "loadavg.txt")) as f:
        for line in f:
            step, *avg = line.split()
            load[step] = [float(x) for x in avg]
    precs = [step.split("-", 1)[1] for step in load if step.startswith("perplexity-")]
    with open(os.path.join(raw, "cpu_flags.txt")) as f:
        flags = f.read().split()
    ref = read_json_lines(os.path.join(raw, "generate-fp32.jsonl"))
    rows = []
    for p in precs:
        with open(os.path.join(raw, f"perplexity-{p}.json")) as f:
            ppl = json.load(f)
        with open(os.path.join(raw, f"generate-{p}.stats.json")) as f:
            stats = json.loads(f.read().strip().splitlines()[-1])
        speed = {}
        for name in sorted(os.listdir(raw)):
            m = re.fullmatch(rf"bench-{re.escape(p)}-t(\d+)\.json", name)
            if m:
                with open(os.path.join(raw, name)) as f:
                    b = json.load(f)
                speed[m.group(1)] = {"prefill": b["prefill_tokens_per_s"], "decode": b["decode_tokens_per_s"],
                                     "load_avg": load.get(f"bench-{p}-t{m.group(1)}")}
                fixed = {k: b[k] for k in ("weight_bytes", "kv_bytes_per_token", "context", "isa", "n_prompt",
                                           "n_gen", "repetitions")}
        rows.append({"precision": p, **fixed,
                     "kv_bytes_at_context": fixed["kv_bytes_per_token"] * fixed["context"],
                     "perplexity": ppl["perplexity"], "perplexity_chunks": ppl["chunks"],
                     "scored_tokens": ppl["scored_tokens"],
                     "generation": {"prefill_tokens_per_s": stats["prefill_tokens_per_s"],
                                    "decode_tokens_per_s": stats["decode_tokens_per_s"], "kv_mb_peak": stats["kv_mb"]},
                     "agreement": agreement(ref, read_json_lines(os.path.join(raw, f"generate-{p}.jsonl"))),
                     "speed": speed})
    base = rows[0]["perplexity"]
    for r in rows:
        r["perplexity_vs_fp32"] = r["perplexity"] / base - 1.0
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "command": command,
            "machine": {"cpu_model": cpu_model, "cpu_flags": flags, "load_avg": load},
            "setup": setup, "precisions": rows, "not_measured": {"fp16": NO_16BIT, "bf16": NO_16BIT}}


def annotated_bars(ax, xs, vals, width, notes, **kw):
    bars = ax.bar(xs, vals, width, **kw)
    for bar, note in zip(bars, notes):
        ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=7)
    return bars


def precision_axis(ax, precs, ylabel, title, legend=None):
    """One precision per tick; legend: where the legend goes (none without)."""
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8, loc=legend)
    ax.set_xticks(range(len(precs)))
    ax.set_xticklabels([textwrap.fill(llm_label(p), 14) for p in precs], fontsize=8)
    ax.margins(y=0.15)


def plot_llm_quality(doc, out):
    rows = doc["precisions"]
    precs = [r["precision"] for r in rows]
    colors = [llm_color(p) for p in precs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    annotated_bars(a, range(len(rows)), [r["perplexity"] for r in rows], 0.6,
                   [f"{r['perplexity']:.2f}\n{r['perplexity_vs_fp32']:+.1%}" for r in rows], color=colors)
    a.axhline(rows[0]["perplexity"], color=COLORS["fp32"], linestyle="--", linewidth=1)
    precision_axis(a, precs, f"perplexity, ctx {doc['setup'].get('ctx', '?')} (lower is better)",
                   f"Perplexity on {os.path.basename(doc['setup'].get('text', '?'))} (vs fp32)")
    for j, (key, label, hatch) in enumerate((("exact", "prompts equal to fp32's", None),
                                             ("prefix_share", "mean share of tokens before the first difference",
                                              "//"))):
        vals = [r["agreement"][key] for r in rows]
        annotated_bars(b, [i + (j - 0.5) * 0.4 for i in range(len(rows))], vals, 0.4, [f"{v:.0%}" for v in vals],
                       color=colors, hatch=hatch, alpha=0.55 if hatch else 0.9, edgecolor="black", linewidth=0.5,
                       label=label)
    b.set_ylim(0, 1.15)
    b.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    precision_axis(b, precs, "share", f"Greedy agreement with fp32, {rows[0]['agreement']['prompts']} chat prompts, "
                   f"{doc['setup'].get('max_tokens', '?')} tokens", legend="upper right")
    save_figure(fig, out, "llm_quality.png")


def plot_llm_speed(doc, out):
    rows = doc["precisions"]
    precs = [r["precision"] for r in rows]
    threads = sorted({t for r in rows for t in r["speed"]}, key=int)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, phase, n in zip(axes, ("prefill", "decode"), ("n_prompt", "n_gen")):
        width = 0.8 / len(threads)
        for j, t in enumerate(threads):
            vals = [r["speed"].get(t, {}).get(phase, {}).get("mean", 0.0) for r in rows]
            sds = [r["speed"].get(t, {}).get(phase, {}).get("sd", 0.0) for r in rows]
            annotated_bars(ax, [i + (j - (len(threads) - 1) / 2) * width for i in range(len(rows))], vals, width,
                           [f"{v:.0f}" for v in vals], yerr=sds, capsize=3, color=[llm_color(p) for p in precs],
                           hatch="//" if j else None, alpha=0.9 - 0.35 * j / len(threads), edgecolor="black",
                           linewidth=0.5,
                           label=f"{t} thread{'s' if t != '1' else ''}")
        precision_axis(ax, precs, "tokens/s (mean ± sd)",
                       f"{phase.capitalize()}, {rows[0][n]} tokens from an empty cache", legend="best")
    save_figure(fig, out, "llm_speed.png")


def plot_llm_memory(doc, out):
    rows = doc["precisions"]
    precs = [r["precision"] for r in rows]
    base = rows[0]["weight_bytes"]
    fig, ax = plt.subplots(figsize=(9, 5))
    annotated_bars(ax, range(len(rows)), [r["weight_bytes"] / MB for r in rows], 0.6,
                   [f"{r['weight_bytes'] / MB:.1f}" + (f"\n{base / r['weight_bytes']:.1f}x smaller"
                                                       if r["weight_bytes"] != base else "") for r in rows],
                   color=[llm_color(p) for p in precs])
    kv = rows[0]["kv_bytes_per_token"]
    for tokens, style in ((int(doc["setup"].get("ctx", 512)), ":"), (rows[0]["context"], "--")):
        ax.axhline(kv * tokens / MB, color="gray", linestyle=style, linewidth=1,
                   label=f"KV cache of one sequence at {tokens} tokens: {kv * tokens / MB:.1f} MB")
    precision_axis(ax, precs, "MB (10^6 bytes)",
                   f"Weights per precision; the KV cache is fp32 in all ({kv / 1024:.0f} KiB per token)",
                   legend="best")
    save_figure(fig, out, "llm_memory.png")


def plot_llm_tradeoff(doc, out):
    rows = doc["precisions"]
    t = min((t for r in rows for t in r["speed"]), key=int, default=None)
    if t is None:
        return False
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for r in rows:
        p, x = r["precision"], r["speed"][t]["decode"]["mean"]
        ax.scatter(x, r["perplexity"], s=40 + r["weight_bytes"] / MB, color=llm_color(p),
                   marker=MARKERS.get(LLM_STYLE.get(p, (p,))[0], "o"), alpha=0.85)
        ax.annotate(f"{llm_label(p)}, {r['weight_bytes'] / MB:.0f} MB", (x, r["perplexity"]), textcoords="offset points",
                    xytext=(8, 8), fontsize=8)
    ax.set_xlabel(f"decode tokens/s, {t} thread{'s' if t != '1' else ''}")
    ax.set_ylabel("perplexity (lower is better)")
    ax.set_title("Accuracy against decode speed (marker area: weight MB)")
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.2, y=0.1)
    save_figure(fig, out, "llm_tradeoff.png")
    return True


def load_range(doc, prefix):
    vals = [v[0] for k, v in doc["machine"]["load_avg"].items() if k.startswith(prefix)]
    return f"{min(vals):.1f}-{max(vals):.1f}" if vals else "?"


def write_llm_table(doc, out):
    rows, setup, mach = doc["precisions"], doc["setup"], doc["machine"]
    threads = sorted({t for r in rows for t in r["speed"]}, key=int)
    isas = sorted({r["isa"] for r in rows})
    start, end = mach["load_avg"].get("start", []), mach["load_avg"].get("end", [])
    lines = [f"- **Date:** {doc['date']}",
             f"- **Machine:** {mach['cpu_model']}, {setup.get('nproc', '?')} CPUs; flags: {' '.join(mach['cpu_flags'])}; "
             f"ISA path of frugal's kernels: {', '.join(isas)}",
             f"- **Load average** (1 min): {start[0] if start else '?'} at the start, {end[0] if end else '?'} at the end, "
             f"{load_range(doc, 'bench-')} before the speed runs, {load_range(doc, 'perplexity-')} before the "
             "perplexity runs (the machine is shared: speed figures are lower bounds; perplexity and agreement are "
             "deterministic)",
             f"- **Commit:** `{doc['commit']}`",
             f"- **Command:** `{doc['command']}`",
             f"- **Model:** `{setup.get('model', '?')}`",
             "",
             "| precision | ISA path | weights MB | perplexity | vs fp32 | greedy: prompts equal to fp32 | "
             f"greedy: tokens before the first difference | "
             + " | ".join(f"prefill tok/s, {t}T" for t in threads) + " | "
             + " | ".join(f"decode tok/s, {t}T" for t in threads) + " |",
             "|---|---|---:|---:|---:|---:|---:|" + "---:|" * (2 * len(threads))]
    for r in rows:
        a = r["agreement"]
        ref = r["precision"] == "fp32"

        def rate(t, phase):
            s = r["speed"].get(t, {}).get(phase)
            return f"{s['mean']:.0f} ± {s['sd']:.0f}" if s else "—"

        same = round(a["exact"] * a["prompts"])
        quality = (["reference"] * 3 if ref else
                   [f"{r['perplexity_vs_fp32']:+.2%}", f"{a['exact']:.0%} ({same}/{a['prompts']})",
                    f"{a['prefix_share']:.0%}"])
        lines.append(f"| {llm_label(r['precision'])} | {r['isa']} | {r['weight_bytes'] / MB:.1f} | "
                     f"{r['perplexity']:.4f} | " + " | ".join(quality) + " | "
                     + " | ".join(rate(t, "prefill") for t in threads) + " | "
                     + " | ".join(rate(t, "decode") for t in threads) + " |")
    for p in doc.get("not_measured", {}):
        lines.append(f"| {p} | no CPU GEMM | — | — | — | — | — | " + " | ".join("—" for _ in range(2 * len(threads))) + " |")
    r0 = rows[0]
    kv, ctx = r0["kv_bytes_per_token"], int(setup.get("ctx", 512))
    lines += ["",
              "**KV cache** (fp32 K and V of every layer, the same in every precision): "
              f"{kv} bytes ({kv / 1024:.0f} KiB) per token of one sequence; {kv * ctx / MB:.1f} MB at {ctx} tokens, "
              f"{r0['kv_bytes_at_context'] / MB:.1f} MB at the model's context of {r0['context']} tokens.",
              "",
              f"- **Perplexity:** `frugal_generate --perplexity {setup.get('text', '?')} --ctx {ctx}` (llama-perplexity's "
              f"method: {r0['perplexity_chunks']} chunks, {r0['scored_tokens']} scored tokens).",
              f"- **Greedy agreement:** `frugal_generate --chat --input {setup.get('prompts', '?')} --max-tokens "
              f"{setup.get('max_tokens', '?')} --temperature 0 --parallel 1`, {r0['agreement']['prompts']} prompts; a "
              "prompt agrees when its tokens equal fp32's exactly; the second figure is the mean over prompts of the "
              "tokens before the first difference over the longer answer's length. One prompt per step, as fp32's "
              "Eigen GEMMs round differently at other batch sizes.",
              f"- **Speed:** `frugal_generate --bench --n-prompt {r0['n_prompt']} --n-gen {r0['n_gen']} --repetitions "
              f"{r0['repetitions']} --threads T` (llama-bench's method: random tokens, prefill in one pass, then "
              "single-token decode steps, each from an empty cache, after one warm-up run), mean ± sd of the "
              "repetitions; precisions interleaved per thread count.",
              "- **MB** are 10^6 bytes; weights include scales and zero points.",
              "- **int4** is frugal's groupwise asymmetric W4A16: groups of 128 where K allows it; SmolLM2's K = 576 "
              "(Q/K/V, O, gate/up and the output projection) is not a multiple of 128 and takes groups of 64; the FFN "
              "down projection (K = 1536) keeps 128. It re-quantizes weights that are already Q4_1.",
              "- **native** keeps the file's Q4_1 blocks (Q8_0 where the file has them) on `quant::gemm_ggml`; "
              "**int8** is W8A8, per-channel weights from the dequantized file and per-token activations, without "
              "SmoothQuant; **fp32** dequantizes the file once.",
              f"- **fp16, bf16:** {NO_16BIT}.",
              ""]
    text = "\n".join(lines)
    with open(os.path.join(out, "llm.md"), "w") as f:
        f.write(text)
    return text


def llm_main(a):
    if a.llm_raw:
        setup = dict(kv.split("=", 1) for kv in a.llm_setup)
        doc = collect_llm(a.llm_raw, setup, a.commit, a.command, a.cpu_model)
        with open(a.llm, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    with open(a.llm) as f:
        doc = json.load(f)
    plot_llm_quality(doc, a.out)
    plot_llm_speed(doc, a.out)
    plot_llm_memory(doc, a.out)
    made = ["llm_quality.png", "llm_speed.png", "llm_memory.png"]
    if plot_llm_tradeoff(doc, a.out):
        made.append("llm_tradeoff.png")
    print(write_llm_table(doc, a.out))
    print("wrote " + ", ".join(os.path.join(a.out, m) for m in made + ["llm.md"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", help="bench_precision's --benchmark_out JSON")
    ap.add_argument("--gpu", help="bench_gpu_gemm's --md table, if it ran")
    ap.add_argument("--out", required=True, help="folder for the PNGs and results.md")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--cpu-model", default="", help="the CPU's model name, for the machine line")
    ap.add_argument("--llm", help="llm.json: the language model's comparison (written first with --llm-raw)")
    ap.add_argument("--llm-raw", help="llm.sh's raw outputs, collected into --llm")
    ap.add_argument("--llm-setup", nargs="*", default=[], metavar="KEY=VALUE", help="llm.sh's settings, with --llm-raw")
    a = ap.parse_args()
    if bool(a.cpu) == bool(a.llm):
        ap.error("give one of --cpu and --llm")
    if a.llm_raw and not a.llm:
        ap.error("--llm-raw goes with --llm")
    os.makedirs(a.out, exist_ok=True)
    if a.llm:
        llm_main(a)
        return
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
