#!/usr/bin/env python3
"""Turns a benchmarks/models/run.sh work folder into minilm.md, minilm.png and minilm.json.

    report.py --work DIR --out DIR --fixture embeddings.jsonl [--cpu-model ...] [--isa ...] ...

Reads frugal_<precision>_t<threads>.jsonl and its --stats logs, and the peer's ort_<p>_<order>_t<N>.json
and .jsonl. Accuracy is against frugal fp32 (itself checked against sentence-transformers).
"""
import argparse
import datetime
import glob
import json
import os
import re
import sys
import textwrap

import numpy as np

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("report.py needs matplotlib (the peer venv has it: see benchmarks/models/README.md)")

FRUGAL = ["fp32", "fp16", "bf16", "int8", "int8-per-channel", "int8-per-tensor", "int8-7bit", "int4"]
PRETTY = {
    "fp32": "frugal fp32",
    "fp16": "frugal fp16",
    "bf16": "frugal bf16",
    "int8": "frugal int8 SmoothQuant",
    "int8-per-channel": "frugal int8 per-channel",
    "int8-per-tensor": "frugal int8 per-tensor",
    "int8-7bit": "frugal int8 SmoothQuant, 7-bit acts",
    "int4": "frugal int4 g128",
    "ort-fp32": "ORT fp32",
    "ort-int8": "ORT int8 dynamic",
}
MARGIN = 0.01


def load_jsonl(path):
    with open(path) as f:
        return np.array([json.loads(line) for line in f], dtype=np.float64)


def unit(e):
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def top1(e):
    s = unit(e) @ unit(e).T
    np.fill_diagonal(s, -np.inf)
    order = np.argsort(-s, axis=1)
    rows = np.arange(len(e))
    return order[:, 0], s[rows, order[:, 0]] - s[rows, order[:, 1]]


def accuracy(e, ref, ref_top, confident):
    c = np.sum(unit(e) * unit(ref), axis=1)
    t, _ = top1(e)
    agree = t == ref_top
    return {"cos_mean": float(c.mean()), "cos_min": float(c.min()), "top1_all": float(agree.mean()),
            "top1_all_n": int(agree.sum()), "top1_conf": float(agree[confident].mean()),
            "top1_conf_n": int(agree[confident].sum())}


STATS = re.compile(r"([\d.]+) sentences/s.*linear weights ([\d.]+) MB, other weights ([\d.]+) MB; peak RSS ([\d.]+) MB")


def frugal_stats(work, p, t):
    runs = []
    for log in sorted(glob.glob(os.path.join(work, f"frugal_{p}_t{t}_r*.log"))):
        with open(log) as f:
            m = STATS.search(f.read())
        if m:
            runs.append(tuple(float(x) for x in m.groups()))
    if not runs:
        return None
    return {"sps": [r[0] for r in runs], "sps_best": max(r[0] for r in runs), "linear_MB": runs[0][1],
            "other_MB": runs[0][2], "rss_MB": max(r[3] for r in runs)}


def peer_stats(work, p, order, t):
    path = os.path.join(work, f"ort_{p}_{order}_t{t}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(x, spec=".1f"):
    return "—" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--cpu-model", default="unknown")
    ap.add_argument("--isa", default="")
    ap.add_argument("--load-start", default="?")
    ap.add_argument("--load-end", default="?")
    ap.add_argument("--nproc", default="?")
    ap.add_argument("--commit", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    w = a.work
    for attr, name in (("load_start", "loadavg_start"), ("load_end", "loadavg_end")):
        path = os.path.join(w, name)
        if getattr(a, attr) == "?" and os.path.exists(path):
            setattr(a, attr, open(path).read().strip())
    os.makedirs(a.out, exist_ok=True)

    st = np.array([json.loads(line)["embedding"] for line in open(a.fixture)], dtype=np.float64)
    ref = load_jsonl(os.path.join(w, "frugal_fp32_t1.jsonl"))
    c_st = np.sum(unit(ref) * unit(st), axis=1)
    ref_top, ref_margin = top1(ref)
    confident = ref_margin >= MARGIN
    n, n_conf = len(ref), int(confident.sum())

    rows = []
    for p in FRUGAL:
        path = os.path.join(w, f"frugal_{p}_t1.jsonl")
        if not os.path.exists(path):
            continue
        r = {"key": p, "name": PRETTY[p], **accuracy(load_jsonl(path), ref, ref_top, confident)}
        for t in (1, 2):
            s = frugal_stats(w, p, t)
            r[f"sps_t{t}"] = s["sps_best"] if s else None
            r[f"runs_t{t}"] = s["sps"] if s else []
            if s:
                r["linear_MB"], r["rss_MB"] = s["linear_MB"], max(r.get("rss_MB", 0), s["rss_MB"])
        rows.append(r)
    with open(os.path.join(w, "ort_build.json")) as f:
        build = json.load(f)
    peer_input = {}
    for p in ("fp32", "int8"):
        path = os.path.join(w, f"ort_{p}_length_t1.jsonl")
        if not os.path.exists(path):
            continue
        r = {"key": f"ort-{p}", "name": PRETTY[f"ort-{p}"], **accuracy(load_jsonl(path), ref, ref_top, confident)}
        for t in (1, 2):
            s = peer_stats(w, p, "length", t)
            r[f"sps_t{t}"] = s["sentences_per_s_best"] if s else None
            r[f"runs_t{t}"] = [s["sentences"] / x for x in s["seconds"]] if s else []
            if s:
                r["linear_MB"], r["rss_MB"] = s["linear_MB"], max(r.get("rss_MB", 0), s["peak_rss_MB"])
                r["padding"] = s["padding_fraction"]
        rows.append(r)
        s = peer_stats(w, p, "input", 2)
        if s:
            peer_input[p] = s
    by = {r["key"]: r for r in rows}

    def ratio(x, y, t):
        a_, b_ = by.get(x, {}).get(f"sps_t{t}"), by.get(y, {}).get(f"sps_t{t}")
        return a_ / b_ if a_ and b_ else None

    # ------------------------------------------------------------------ markdown
    L = []
    started = open(os.path.join(w, "started")).read().strip() if os.path.exists(os.path.join(w, "started")) else \
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    isa = a.isa.split()
    # FRUGAL_MAX_CPU_ISA (as run.sh passed it to frugal_embed) lowers what frugal may use.
    cap = os.environ.get("FRUGAL_MAX_CPU_ISA", "")
    order = ["portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "amx"]
    if cap in order:
        allowed = order[:order.index(cap) + 1]
        isa = [f for f in isa if f in allowed or (f == "avx512f" and "avx512" in allowed)
               or (f == "amx_int8" and "amx" in allowed)]
    int8_path = ("amx (AMX tiles from 16 rows, avx512_vnni below)" if "amx_int8" in isa and "avx512_vnni" in isa
                 else "avx512_vnni" if "avx512_vnni" in isa else "avx_vnni" if "avx_vnni" in isa else
                 "avx2" if "avx2" in isa else "portable")
    L.append("# MiniLM (all-MiniLM-L6-v2): frugal precisions against onnxruntime")
    L.append("")
    L.append("> **Load.** This run was made on a small machine (load average {0} at the start, {1} at the end, on {2} "
             "cores; the benchmark's own processes count in it). Where the load was well above what the benchmark "
             "itself makes, other work shared the cores: throughput figures, and the ratios between them, can then be "
             "off by tens of percent; accuracy and memory figures are not affected.".format(a.load_start, a.load_end,
                                                                                           a.nproc))
    L.append("")
    L.append(f"- **Date:** {started}")
    L.append(f"- **CPU:** {a.cpu_model}, {a.nproc} cores; ISA flags present: {a.isa or 'none of avx2 avx512f avx512_vnni avx_vnni amx_int8'}")
    L.append(f"- **ISA paths:** frugal's int8 GEMMs dispatch at run time to the best of amx > avx512_vnni > avx_vnni > avx2 > "
             f"portable, so here **{int8_path}**"
             + (f" (capped by FRUGAL_MAX_CPU_ISA={cap})" if cap else "")
             + (" (no VNNI: 8-bit activations widen to int16 for vpmaddwd, 7-bit ones take vpmaddubsw)"
                if int8_path == "avx2" else "")
             + "; frugal's fp32 GEMMs are Eigen built with -march=native. onnxruntime picks its own kernels (MLAS) "
               "for the same CPU.")
    if a.commit:
        L.append(f"- **Commit:** `{a.commit}`")
    if a.command:
        L.append(f"- **Command:** `{a.command}`")
    L.append(f"- **Sentences:** the {n} lines of `tests/models/fixtures/embeddings.jsonl` (truncated at 256 tokens; "
             f"{sum(1 for _ in open(os.path.join(w, 'sentences.txt')))} lines, in file order), batch {a.batch}.")
    L.append(f"- **Timing:** sentences/s over all {n} sentences, tokenization included. frugal: best of {a.reps} "
             f"`frugal_embed --stats` processes (each one pass, no warm-up; model load excluded). ORT: best of "
             f"{a.peer_reps} passes after a warm-up pass, in one Python process per (precision, threads), "
             "intra_op_num_threads = threads, inter_op 1, ORT_ENABLE_ALL; the tokenizers package limited to one thread.")
    L.append(f"- **Batching:** frugal packs each batch's tokens without padding. ORT pads each batch to its longest "
             f"sentence, batches formed longest-first by characters as sentence-transformers' `encode()` does: "
             f"{fmt(by.get('ort-fp32', {}).get('padding', None) and 100 * by['ort-fp32']['padding'])}% of the token slots "
             "are padding" + (", against " + fmt(100 * peer_input['fp32']['padding_fraction']) +
                               "% with batches in input order" if 'fp32' in peer_input else "") + ".")
    L.append(f"- **ONNX graph:** built from model.safetensors with the onnx helper API (opset {build.get('opset')}, "
             f"onnx {build.get('onnx')}, onnxruntime {build.get('onnxruntime')}); its fp32 output against "
             f"sentence-transformers over the fixture: min cosine **{build['fixture']['cosine_min']:.7f}** "
             f"(mean {build['fixture']['cosine_mean']:.7f}). frugal fp32 against the same: min cosine "
             f"**{c_st.min():.7f}**.")
    s = build.get("int8_settings", {})
    L.append(f"- **ORT int8:** `quantize_dynamic(weight_type=QuantType.{s.get('weight_type')}, "
             f"per_channel={s.get('per_channel')}, reduce_range={s.get('reduce_range')}, "
             f"op_types_to_quantize={s.get('op_types_to_quantize')})`: "
             f"{build.get('int8_ops', {}).get('MatMulInteger', 0)} linear MatMuls became MatMulInteger with "
             "per-call dynamic uint8 activations (DynamicQuantizeLinear, per tensor); the "
             f"{build.get('int8_ops', {}).get('MatMul', 0)} attention MatMuls stay fp32, as in frugal"
             + (f". per_channel=True failed: {s['per_channel_error']}" if s.get("per_channel_error") else "") + ".")
    L.append("")
    L.append(f"Accuracy is against frugal fp32. Top-1: for each sentence, its nearest other sentence by cosine; "
             f"*confident* counts only the {n_conf} of {n} queries whose fp32 top-1 beats its second by ≥ {MARGIN}; "
             f"the other {n - n_conf} are near-ties (the fixture's empty and whitespace-only lines tie exactly), "
             "where any rounding can swap the top two.")
    L.append("")
    L.append("| precision | cosine mean | cosine min | top-1, confident | top-1, all | linear weights MB | peak RSS MB "
             "| sentences/s, 1 thread | sentences/s, 2 threads |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        L.append(f"| {r['name']} | {r['cos_mean']:.6f} | {r['cos_min']:.6f} | "
                 f"{100 * r['top1_conf']:.1f}% ({r['top1_conf_n']}/{n_conf}) | {100 * r['top1_all']:.1f}% "
                 f"({r['top1_all_n']}/{n}) | {fmt(r.get('linear_MB'), '.2f')} | {fmt(r.get('rss_MB'))} | "
                 f"{fmt(r.get('sps_t1'))} | {fmt(r.get('sps_t2'))} |")
    L.append("")
    L.append("Linear weights: the 36 encoder linear layers (weights in their stored format with scales, and biases); "
             "embeddings and LayerNorm (47.7 MB in fp32) come on top for both engines. Peak RSS is that of the "
             "whole process: for frugal, `frugal_embed`; for ORT, a Python process holding onnxruntime, numpy and "
             "tokenizers, and ORT's padded activations.")
    f_rss = [r["rss_MB"] for r in rows if not r["key"].startswith("ort") and r.get("rss_MB")]
    if f_rss and max(f_rss) - min(f_rss) <= 0.02 * max(f_rss):
        L.append("")
        L.append(f"frugal's peak RSS is the same ({max(f_rss):.0f} MB) in every precision: it is reached while "
                 "loading, when the fp32 model.safetensors is mapped and converted (checked once with a one-line input, which gave the same "
                 "peak), so the saving of a lower precision shows in the linear-weights column, not in the peak.")
    slower = [r["name"] for r in rows if r.get("sps_t1") and r.get("sps_t2") and r["sps_t2"] < r["sps_t1"]]
    if slower:
        L.append("")
        L.append("2 threads ran slower than 1 for " + ", ".join(slower) + ": other jobs were holding the cores, "
                 "so the 2-thread column mostly measures the machine's load.")
    L.append("")
    L.append("| ratio (sentences/s) | 1 thread | 2 threads | issue 20 asks |")
    L.append("|---|---:|---:|---:|")
    for x, y, goal in (("int8", "ort-int8", "≥ 1.5x"), ("int8-per-channel", "ort-int8", "—"),
                       ("fp32", "ort-fp32", "≥ 0.9x")):
        if x in by and y in by:
            L.append(f"| {by[x]['name']} / {by[y]['name']} | {fmt(ratio(x, y, 1), '.2f')}x | "
                     f"{fmt(ratio(x, y, 2), '.2f')}x | {goal} |")
    if peer_input:
        L.append("")
        L.append("ORT with batches in input order (more padding), 2 threads, one pass after a warm-up: " +
                 "; ".join(f"{PRETTY['ort-' + p]} {s['sentences_per_s_best']:.1f} sentences/s "
                           f"({100 * s['padding_fraction']:.1f}% padding)" for p, s in peer_input.items()) + ".")
    L.append("")
    L.append("Every timed run (sentences/s), for judging the noise:")
    L.append("")
    for r in rows:
        L.append(f"- {r['name']}: 1 thread " + ", ".join(f"{x:.1f}" for x in r.get("runs_t1", [])) +
                 "; 2 threads " + ", ".join(f"{x:.1f}" for x in r.get("runs_t2", [])))
    L.append("")
    L.append("![sentences/s and accuracy per precision](minilm.png)")
    text = "\n".join(L) + "\n"
    with open(os.path.join(a.out, "minilm.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "minilm.json"), "w") as f:
        json.dump({"rows": rows, "ort_input_order": peer_input, "ort_build": build,
                   "frugal_fp32_vs_st_min": float(c_st.min()), "confident_queries": n_conf, "queries": n,
                   "cpu_model": a.cpu_model, "isa": a.isa, "load_start": a.load_start, "load_end": a.load_end,
                   "commit": a.commit, "started": started}, f, indent=2)

    # ------------------------------------------------------------------ plot
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(16, 5.5))
    names = [r["name"] for r in rows]
    xs = np.arange(len(rows))
    colors = ["#1f77b4" if not r["key"].startswith("ort") else "#d62728" for r in rows]
    for j, (t, hatch) in enumerate(((1, None), (2, "//"))):
        vals = [r.get(f"sps_t{t}") or 0 for r in rows]
        bars = ax1.bar(xs + (j - 0.5) * 0.4, vals, 0.4, color=colors, alpha=0.9 if t == 1 else 0.55, hatch=hatch,
                       edgecolor="black", linewidth=0.5, label=f"{t} thread{'s' if t > 1 else ''}")
        for b, v in zip(bars, vals):
            ax1.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax1.set_xticks(xs)
    ax1.set_xticklabels([textwrap.fill(nm, 11) for nm in names], fontsize=7)
    ax1.set_ylabel(f"sentences/s (batch {a.batch}, best run)")
    ax1.set_title(f"Throughput on {a.cpu_model} (shared, noisy); blue frugal, red onnxruntime", fontsize=9)
    ax1.legend(fontsize=8)
    ax1.margins(y=0.12)
    # 1 - cosine on a log axis; frugal fp32, the reference, has no bar.
    err = [float("nan") if r["key"] == "fp32" else max(1 - r["cos_mean"], 1e-9) for r in rows]
    bars = ax2.bar(xs, err, 0.6, color=colors, edgecolor="black", linewidth=0.5)
    for b, r in zip(bars, rows):
        ref_bar = r["key"] == "fp32"
        ax2.annotate("reference" if ref_bar else f"{r['cos_mean']:.6f}",
                     (b.get_x() + b.get_width() / 2, min(e for e in err if e == e) if ref_bar else b.get_height()),
                     ha="center", va="bottom", fontsize=7)
    ax2.set_yscale("log")
    ax2.set_xticks(xs)
    ax2.set_xticklabels([textwrap.fill(nm, 11) for nm in names], fontsize=7)
    ax2.set_ylabel("1 − mean cosine against frugal fp32 (log; labels: mean cosine)")
    ax2.set_title(f"Accuracy over the {n} fixture sentences", fontsize=9)
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "minilm.png"), dpi=110)
    plt.close(fig)
    print(text)
    print(f"wrote {a.out}/minilm.md, minilm.png, minilm.json")


if __name__ == "__main__":
    main()
