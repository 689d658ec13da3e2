#!/usr/bin/env python3
"""Reads compare_llama_cpp.sh's raw folder, writes the summary JSON and prints the markdown report.

    compare_report.py RAW_DIR SUMMARY.json

Standard library only. Any output that is missing or does not parse stops it with a message naming the file.
"""
import json
import re
import statistics
import sys
from pathlib import Path


def fail(msg):
    sys.exit(f"compare_report: {msg}")


def read(raw, name):
    path = raw / name
    if not path.is_file():
        fail(f"{path} is missing")
    return path.read_text(encoding="utf-8", errors="replace")


def json_objects(text):
    """Every JSON value that is alone on its line, or the whole text when it is one JSON value."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return found


def one_object(raw, name, key):
    objs = [o for o in json_objects(read(raw, name)) if isinstance(o, dict) and key in o]
    if not objs:
        fail(f"{raw / name} holds no JSON object with \"{key}\"")
    return objs[-1]


def time_file(raw, name):
    lines = [l for l in read(raw, name).splitlines() if re.fullmatch(r"[0-9.]+ [0-9]+", l.strip())]
    if not lines:
        fail(f"{raw / name} holds no '%e %M' line of /usr/bin/time")
    wall, rss_kib = lines[-1].split()
    return float(wall), int(rss_kib) * 1024


def settings(raw):
    out = {}
    for line in read(raw, "settings").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def llama_bench(raw, t):
    results = json_objects(read(raw, f"llama_bench_t{t}.out"))
    if not results or not isinstance(results[0], list):
        fail(f"{raw}/llama_bench_t{t}.out is not llama-bench's JSON array")
    pp = [r for r in results[0] if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
    tg = [r for r in results[0] if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
    if len(pp) != 1 or len(tg) != 1:
        fail(f"{raw}/llama_bench_t{t}.out: expected one pp and one tg test, got {len(pp)} and {len(tg)}")
    return {
        "prefill_tokens_per_s": {"mean": pp[0]["avg_ts"], "sd": pp[0]["stddev_ts"]},
        "decode_tokens_per_s": {"mean": tg[0]["avg_ts"], "sd": tg[0]["stddev_ts"]},
        "weight_bytes": tg[0]["model_size"],
        "cpu_info": tg[0].get("cpu_info"),
        "backends": tg[0].get("backends"),
        "model_type": tg[0].get("model_type"),
    }


def system_info_features(text):
    m = re.search(r"system_info:.*?\| CPU : (.*)", text)
    if not m:
        return None
    return [k.strip() for k, v in re.findall(r"([A-Z0-9_]+) = ([0-9]+)", m.group(1)) if v != "0"]


def main():
    if len(sys.argv) != 3:
        fail("usage: compare_report.py RAW_DIR SUMMARY.json")
    raw = Path(sys.argv[1])
    cfg = settings(raw)
    threads = [int(t) for t in cfg["threads"].split()]
    precisions = cfg["precisions"].split()
    summary = {"settings": cfg}

    lscpu = read(raw, "lscpu.txt")
    m = re.search(r"^Model name:\s*(.*)$", lscpu, re.M)
    flags = read(raw, "cpu_flags.txt").split(":", 1)[-1].split()
    isa_flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8",
                             "amx_bf16") if f in flags]
    llama_ppl_text = read(raw, "llama_ppl.err") + read(raw, "llama_ppl.out")
    machine = {
        "cpu": m.group(1).strip() if m else "?",
        "cpus": int(read(raw, "nproc").strip()),
        "isa_flags": isa_flags,
        "loadavg_before": read(raw, "loadavg_before").strip(),
        "loadavg_after": read(raw, "loadavg_after").strip(),
        "started": read(raw, "started").strip(),
        "finished": read(raw, "finished").strip(),
        "frugal_commit": read(raw, "frugal_commit").strip(),
        "llama_version": read(raw, "llama_version").strip().splitlines()[0] if read(raw, "llama_version").strip() else "?",
        "llama_isa": system_info_features(llama_ppl_text),
        "model": read(raw, "model").strip(),
        "text": read(raw, "text").strip(),
    }
    summary["machine"] = machine

    bandwidth = {}
    for t in threads:
        rows = [o for o in json_objects(read(raw, f"bandwidth_t{t}.out")) if isinstance(o, dict) and "gb_per_s" in o]
        if not rows:
            fail(f"{raw}/bandwidth_t{t}.out holds no bandwidth line")
        bandwidth[t] = {"runs": rows, "ceiling": max(rows, key=lambda r: r["bytes"])}
    summary["bandwidth"] = {str(t): b for t, b in bandwidth.items()}

    speed = []
    for t in threads:
        ll = llama_bench(raw, t)
        speed.append({"engine": "llama.cpp", "precision": "native", "threads": t, **ll})
        for p in precisions:
            fr = one_object(raw, f"frugal_bench_{p}_t{t}.out", "decode_tokens_per_s")
            for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "weight_bytes", "isa"):
                if key not in fr:
                    fail(f"{raw}/frugal_bench_{p}_t{t}.out lacks \"{key}\"")
            speed.append({"engine": "frugal", "precision": p, "threads": t, **fr})
    ceiling = {t: bandwidth[t]["ceiling"]["gb_per_s"] for t in threads}
    for row in speed:
        gbs = row["weight_bytes"] * row["decode_tokens_per_s"]["mean"] / 1e9
        row["decode_gb_per_s"] = gbs
        row["decode_share_of_bandwidth"] = gbs / ceiling[row["threads"]]
    llama_by_t = {r["threads"]: r for r in speed if r["engine"] == "llama.cpp"}
    for row in speed:
        ref = llama_by_t[row["threads"]]
        row["prefill_ratio"] = row["prefill_tokens_per_s"]["mean"] / ref["prefill_tokens_per_s"]["mean"]
        row["decode_ratio"] = row["decode_tokens_per_s"]["mean"] / ref["decode_tokens_per_s"]["mean"]
    summary["speed"] = speed

    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", llama_ppl_text)
    if not m:
        fail(f"{raw}/llama_ppl.err holds no 'Final estimate: PPL = ...' line")
    ppl = [{"engine": "llama.cpp", "precision": "native", "perplexity": float(m.group(1)),
            "plus_minus": float(m.group(2))}]
    for p in precisions:
        fr = one_object(raw, f"frugal_ppl_{p}.out", "perplexity")
        ppl.append({"engine": "frugal", "precision": p, "perplexity": fr["perplexity"], "chunks": fr.get("chunks")})
    for row in ppl:
        row["relative_difference"] = row["perplexity"] / ppl[0]["perplexity"] - 1
    summary["perplexity"] = ppl

    reps = int(cfg["repetitions"])
    load = []

    def load_rows(engine, precision, prefix, own_re):
        walls, rss, own = [], [], []
        for i in range(1, reps + 1):
            w, r = time_file(raw, f"{prefix}_{i}.time")
            walls.append(w)
            rss.append(r)
            mm = re.search(own_re, read(raw, f"{prefix}_{i}.out") + read(raw, f"{prefix}_{i}.err"))
            if mm:
                own.append(float(mm.group(1)))
        load.append({"engine": engine, "precision": precision, "wall_s": statistics.median(walls),
                     "own_load_ms": statistics.median(own) if own else None, "peak_rss_bytes": max(rss),
                     "runs": reps})

    load_rows("llama.cpp", "native", "llama_load", r"load time =\s*([0-9.]+) ms")
    for p in precisions:
        load_rows("frugal", p, f"frugal_load_{p}", r"\"load_ms\"\s*:\s*([0-9.]+)")
        if load[-1]["own_load_ms"] is None:
            fail(f"{raw}/frugal_load_{p}_1.* hold no \"load_ms\" (frugal_generate --stats)")
    summary["load"] = load

    Path(sys.argv[2]).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    n_prompt, n_gen = cfg["n_prompt"], cfg["n_gen"]
    w = print
    w(f"# frugal vs llama.cpp: {Path(machine['model']).name}\n")
    w(f"- CPU: {machine['cpu']}, {machine['cpus']} CPUs; ISA flags: {' '.join(isa_flags) or 'none'}")
    isas = sorted({r["isa"] for r in speed if r["engine"] == "frugal"})
    w(f"- ISA path: frugal `{', '.join(isas) or '-'}`; llama.cpp "
      f"`{' '.join(machine['llama_isa']) if machine['llama_isa'] else '?'}` ({llama_by_t[threads[0]]['backends']})")
    w(f"- load average before {machine['loadavg_before']}, after {machine['loadavg_after']} "
      f"({machine['started']} to {machine['finished']})")
    w(f"- frugal {machine['frugal_commit']}; llama.cpp {machine['llama_version']}")
    w(f"- settings: pp{n_prompt}, tg{n_gen}, repetitions {reps} (mean ± sd); perplexity ctx {cfg['ctx']} on "
      f"{machine['text']} at {cfg['ppl_threads']} threads; load: median of {reps} one-token run(s) "
      f"({cfg['llama_load_tool']} for llama.cpp)\n")

    w(f"## Speed (tokens/s)\n")
    w(f"| threads | engine | precision | pp{n_prompt} | tg{n_gen} | pp vs llama.cpp | tg vs llama.cpp "
      f"| weights MB | decode GB/s | share of read bandwidth |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for r in speed:
        pp, tg = r["prefill_tokens_per_s"], r["decode_tokens_per_s"]
        w(f"| {r['threads']} | {r['engine']} | {r['precision']} | {pp['mean']:.1f} ± {pp['sd']:.1f} "
          f"| {tg['mean']:.1f} ± {tg['sd']:.1f} | {r['prefill_ratio']:.2f} | {r['decode_ratio']:.2f} "
          f"| {r['weight_bytes'] / 1e6:.1f} | {r['decode_gb_per_s']:.2f} | {100 * r['decode_share_of_bandwidth']:.0f}% |")
    w("\nDecode GB/s = weight bytes x tg tokens/s; the share is of the read bandwidth at the same thread count "
      "(the largest buffer below).\n")

    w("## Read bandwidth (bench_read_bandwidth)\n")
    w("| threads | buffer MiB | GB/s (best pass) | median | best kernel | by kernel |")
    w("|---|---|---|---|---|---|")
    for t in threads:
        for r in bandwidth[t]["runs"]:
            by = ", ".join(f"{k} {v:.1f}" for k, v in r.get("by_isa", {}).items())
            w(f"| {t} | {r['bytes'] >> 20} | {r['gb_per_s']:.2f} | {r['median_gb_per_s']:.2f} | {r['isa']} | {by} |")

    w(f"\n## Perplexity (ctx {cfg['ctx']})\n")
    w("| engine | precision | perplexity | vs llama.cpp |")
    w("|---|---|---|---|")
    for r in ppl:
        pm = f" ± {r['plus_minus']:.3f}" if "plus_minus" in r else ""
        w(f"| {r['engine']} | {r['precision']} | {r['perplexity']:.4f}{pm} | {100 * r['relative_difference']:+.2f}% |")

    w("\n## Load (a one-token run, file in the page cache)\n")
    w("| engine | precision | wall s | own load ms | peak RSS MiB |")
    w("|---|---|---|---|---|")
    for r in load:
        own = f"{r['own_load_ms']:.0f}" if r["own_load_ms"] is not None else "-"
        w(f"| {r['engine']} | {r['precision']} | {r['wall_s']:.2f} | {own} | {r['peak_rss_bytes'] / 2**20:.0f} |")


if __name__ == "__main__":
    main()
