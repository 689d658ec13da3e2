#!/usr/bin/env python3
"""Writes benchmarks/server/results/load.md from what run.sh left in its work folder.

    report.py WORK_DIR OUT.md [RAW_DIR]     (env FRUGAL_LOAD_NOTE: one more line under the header)
"""
import os
import re
import subprocess
import sys

STEPS = {
    ("frugal", "a"): "frugal (a) no batching, fp32",
    ("frugal", "b"): "frugal (b) batching, fp32",
    ("frugal", "c"): "frugal (c) batching, int8",
    ("frugal", "d"): "frugal (d) batching, int8, cache",
    ("peer", "fp32"): "peer onnxruntime fp32",
    ("peer", "int8"): "peer onnxruntime int8",
}
HOURLY_USD = 0.50  # frugal_server's --hourly-usd default, for the peer's computed cost


def kv(line):
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def main():
    work, out = sys.argv[1], sys.argv[2]
    rawdir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(out), "raw")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = []
    with open(os.path.join(work, "rows.tsv")) as f:
        for line in f:
            sysname, step, c, wrk, non2xx, before, after, rss = line.rstrip("\n").split("\t")
            w = kv(wrk)
            b0, b1 = before.split()
            a0, a1 = after.split()
            dc, dn = float(a0) - float(b0), int(a1) - int(b1)
            rss_kb, hwm_kb = (int(x) for x in rss.split())
            rows.append(dict(sys=sysname, step=step, c=int(c), w=w, non2xx=int(non2xx),
                             cost=(dc / dn * 1e6) if sysname == "frugal" and dn > 0 else None,
                             rss=rss_kb / 1024, hwm=hwm_kb / 1024))

    cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
    flags = sh("grep -m1 '^flags' /proc/cpuinfo").split()
    isa = [f for f in flags if f in ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "sha_ni", "vaes", "vpclmulqdq")
           or f.startswith("avx512") or "vnni" in f or f.startswith("amx")]
    commit = sh(f"git -C {root} rev-parse --short HEAD")
    dirty = sh(f"git -C {root} status --porcelain -- examples include benchmarks/server/run.sh benchmarks/server/peer_server.py")
    date = open(os.path.join(work, "date")).read().strip()
    ort = sh(f"{os.environ.get('PEER_PY', 'python3')} -c 'import onnxruntime; print(onnxruntime.__version__)'")

    L = []
    L.append("# Load test: frugal_server against a Python/onnxruntime peer (wrk, 127.0.0.1)\n")
    L.append(f"- Date: {date}; commit `{commit}`{' (with uncommitted changes)' if dirty else ''}; "
             f"written by `benchmarks/server/run.sh`.")
    virt = sh("lscpu | sed -n 's/^Hypervisor vendor: *//p'")
    load = os.environ.get("FRUGAL_LOAD_AVG_START", "")
    L.append(f"- CPU: {cpu}, {os.cpu_count()} cores{f' ({virt} guest)' if virt else ''}; ISA flags: {' '.join(isa)}"
             + ("" if "avx512f" in isa else " (no AVX-512)") + ("" if any("vnni" in f for f in isa) else " (no VNNI)")
             + "; frugal's int8 GEMMs take the best of amx > avx512_vnni > avx_vnni > avx2.")
    L.append(f"- Load average at the start: {load or 'not recorded'}. The server, wrk (2 threads) and the peer share "
             "the same cores; anything else running moves the figures, so read ratios within one sitting.")
    L.append("- Model: all-MiniLM-L6-v2 (384-dim), one sentence per request. Corpus: 2048 distinct lines "
             ">= 20 bytes of /usr/share/games/fortunes, drawn Zipf (s = 1) by `post.lua`.")
    L.append(f"- Peer: `benchmarks/server/peer_server.py` (stdlib ThreadingHTTPServer, onnxruntime {ort}, "
             "the ONNX graph of benchmarks/models/peer_onnxruntime.py, one session, 1 intra-op thread: "
             "a pre-run at -c 64 gave 189 req/s with 1 thread against 148 with 2, so the peer gets its better setting). "
             "No cross-request batching, no cache: what a plain deployment does. "
             + ("TCP_NODELAY on (`--tcp-nodelay`), as frugal_server sets it." if "--tcp-nodelay" in
                os.environ.get("PEER_EXTRA", "") else
                "TCP_NODELAY off (the stdlib's default): at low concurrency its answers wait out delayed ACKs."))
    extra = os.environ.get("FRUGAL_EXTRA", "")
    L.append("- frugal_server: `--http-threads 256 --max-queued 512 --window-ms 5"
             + (f" {extra}" if extra else "") + "`"
             + ("" if "--model-threads" in extra else ", 1 model thread (its default)")
             + ", plus the step's flags below.")
    if os.environ.get("FRUGAL_LOAD_NOTE"):
        L.append("- **" + os.environ["FRUGAL_LOAD_NOTE"] + "**")
    L.append("")
    L.append("## The ladder and the peer (wrk -t 2, 10 s per cell)\n")
    L.append("Latencies in ms. Cost per 1M embeddings: frugal's ledger (`frugal_cost_usd_total` summed over "
             "features, its delta over the run, over the delta of `frugal_requests_total{outcome=\"ok\"}`, x 1e6, "
             f"at the default $ {HOURLY_USD:.2f}/h); the peer has no ledger. 'Wall cost' is the same for both: "
             f"$ {HOURLY_USD:.2f}/h of the whole machine / (req/s x 3600) x 1e6. Where the two differ (at low load "
             "the ledger's is lower), the ledger's is what the server itself would bill; the difference "
             "was not traced here. Socket errors: wrk's connect, read, write and timeout "
             "counts. RSS: VmRSS after the run (peak VmHWM so far).\n")
    L.append("| system / step | c | req/s | p50 | p99 | p99.9 | non-2xx | socket errors | ledger cost / 1M emb (USD) | wall cost / 1M (USD) | RSS MB (peak) |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w = r["w"]
        sock = int(w.get("connect", 0) + w.get("read", 0) + w.get("write", 0) + w.get("timeout", 0))
        cost = f"{r['cost']:.3f}" if r["cost"] is not None else "-"
        wall = f"{HOURLY_USD / (w['rps'] * 3600) * 1e6:.2f}" if w["rps"] > 0 else "-"
        L.append(f"| {STEPS[(r['sys'], r['step'])]} | {r['c']} | {w['rps']:.1f} | {w['p50_us'] / 1e3:.1f} | "
                 f"{w['p99_us'] / 1e3:.1f} | {w['p999_us'] / 1e3:.1f} | {r['non2xx']} | {sock} | {cost} | {wall} | "
                 f"{r['rss']:.0f} ({r['hwm']:.0f}) |")
    L.append("")

    # The goal: >= 3x the peer's req/s at c = 64, at an equal or lower p99.
    at64 = {(r["sys"], r["step"]): r["w"] for r in rows if r["c"] == 64}
    peers = [k for k in at64 if k[0] == "peer"]
    if peers:
        best_peer = max(peers, key=lambda k: at64[k]["rps"])
        pw = at64[best_peer]
        L.append("## frugal / peer at concurrency 64 (goal: >= 3x the req/s at an equal or lower p99)\n")
        L.append(f"Against the better peer at c = 64, {STEPS[best_peer]} ({pw['rps']:.1f} req/s, p99 "
                 f"{pw['p99_us'] / 1e3:.0f} ms):\n")
        L.append("| frugal step | req/s | ratio | p99 ms | p99 vs peer | goal met |")
        L.append("|---|---:|---:|---:|---|---|")
        for k in sorted(k for k in at64 if k[0] == "frugal"):
            w = at64[k]
            ratio = w["rps"] / pw["rps"]
            lower = w["p99_us"] <= pw["p99_us"]
            L.append(f"| {STEPS[k]} | {w['rps']:.1f} | {ratio:.2f}x | {w['p99_us'] / 1e3:.0f} | "
                     f"{'lower or equal' if lower else 'higher'} | {'yes' if ratio >= 3 and lower else 'no'} |")
        for p in peers:
            if p != best_peer:
                L.append(f"\n(The other peer, {STEPS[p]}: {at64[p]['rps']:.1f} req/s, p99 {at64[p]['p99_us'] / 1e3:.0f} ms.)")
        L.append("")

    # Overload.
    env_path = os.path.join(work, "overload.env")
    if os.path.exists(env_path):
        env = dict(re.findall(r'^(\w+)="?(.*?)"?$', open(env_path).read(), re.M))
        raw = open(os.path.join(rawdir, "overload_c512.txt")).read()
        ow = kv(next(l for l in raw.splitlines() if l.startswith("FRUGAL_WRK")))
        probe = [l.split() for l in open(os.path.join(work, "overload_probe.txt")) if l.strip()]
        p429 = sorted(float(t) * 1e3 for c, t in probe if c == "429")
        p200 = sorted(float(t) * 1e3 for c, t in probe if c == "200")
        pother = [c for c, t in probe if c not in ("200", "429")]

        def q(xs, f):
            return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")

        after = open(os.path.join(rawdir, "overload_after_c16.txt")).read()
        aw = kv(next((l for l in after.splitlines() if l.startswith("FRUGAL_WRK")), ""))
        a_non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", after)
        secs = ow["duration_us"] / 1e6
        L.append("## Overload: -c 512 for 60 s against `--max-queued 64`\n")
        L.append("frugal_server `--precision int8 --max-batch 64 --window-ms 5 --max-queued 64 --cache-entries 0 "
                 "--http-threads 512" + (" " + os.environ["OVERLOAD_EXTRA"] if os.environ.get("OVERLOAD_EXTRA") else "") + "` (no cache, so that every request reaches the model's queue); "
                 "`FRUGAL_WRK_CHECK=1 wrk -t 2 -c 512 -d 60s --timeout 30s` checks every response.\n")
        L.append(f"- Offered: {ow['requests']:.0f} responses in {secs:.1f} s = {ow['rps']:.0f}/s; "
                 f"accepted (200): {ow.get('ok_valid', 0) + ow.get('ok_invalid', 0):.0f} = "
                 f"{(ow.get('ok_valid', 0) + ow.get('ok_invalid', 0)) / secs:.0f}/s; "
                 f"the offered rate is {ow['rps'] / max(1e-9, (ow.get('ok_valid', 0) + ow.get('ok_invalid', 0)) / secs):.1f}x "
                 "what the server answers with embeddings.")
        L.append(f"- 429 (Retry-After): {ow.get('s429', 0):.0f}; other statuses: {ow.get('s_other', 0):.0f}; "
                 f"socket errors: connect {ow['connect']:.0f}, read {ow['read']:.0f}, write {ow['write']:.0f}, "
                 f"timeout {ow['timeout']:.0f}.")
        L.append(f"- Every 200 valid (a list with one 384-number embedding at index 0): "
                 f"{ow.get('ok_valid', 0):.0f} valid, {ow.get('ok_invalid', 0):.0f} invalid.")
        L.append(f"- Latency over all responses (mostly 429s): p50 {ow['p50_us'] / 1e3:.1f} ms, p99 "
                 f"{ow['p99_us'] / 1e3:.1f} ms, p99.9 {ow['p999_us'] / 1e3:.1f} ms, max {ow['max_us'] / 1e3:.1f} ms.")
        L.append(f"- A probe (curl, one request every 0.2 s during the run) timed each answer: {len(p429)} 429s, "
                 f"p50 {q(p429, .5):.1f} ms, max {max(p429) if p429 else float('nan'):.1f} ms; "
                 f"{len(p200)} 200s, p50 {q(p200, .5):.1f} ms, max {max(p200) if p200 else float('nan'):.1f} ms; "
                 f"{len(pother)} other.")
        L.append(f"- RSS: {int(env['rss_before_kb']) / 1024:.0f} MB before, {int(env['rss_max_kb']) / 1024:.0f} MB "
                 f"at most (sampled each second), {int(env['rss_after_kb']) / 1024:.0f} MB after.")
        L.append(f"- After the load: /readyz {env['readyz']}; one request answered a "
                 f"{env['after_embedding_dims']}-number embedding; a 5 s wrk at -c 16 gave "
                 f"{aw.get('rps', 0):.1f} req/s, p99 {aw.get('p99_us', 0) / 1e3:.1f} ms, "
                 f"{a_non2xx.group(1) if a_non2xx else 0} non-2xx; SIGTERM exit status {env['exit']}.")
        L.append(f"- /metrics after: `{env.get('metrics_after', '')}`")
        L.append("")

    exits = open(os.path.join(work, "exits")).read().split("\n") if os.path.exists(os.path.join(work, "exits")) else []
    idle = open(os.path.join(work, "idle_rss")).read().split("\n") if os.path.exists(os.path.join(work, "idle_rss")) else []
    L.append("## Exit statuses after SIGTERM, idle RSS after start\n")
    L.append("- exits: " + "; ".join(e for e in exits if e))
    L.append("- idle RSS (kB): " + "; ".join(e for e in idle if e))
    L.append("")
    L.append("## Commands\n")
    L.append("```sh")
    L.append("benchmarks/server/run.sh     # PEER_PY=build/venv-peer/bin/python by default (benchmarks/peer_venv.sh)")
    L.append("# which runs:")
    L.append("cmake --preset release && cmake --build --preset release --target frugal_server")
    L.append("frugal_server --model build/models/all-MiniLM-L6-v2 --port 0 --http-threads 256 --max-queued 512 --window-ms 5 \\")
    L.append("  (a) --max-batch 1 --cache-entries 0 --precision fp32 | (b) --max-batch 64 --cache-entries 0 --precision fp32 \\")
    L.append("  (c) --max-batch 64 --cache-entries 0 --precision int8 | (d) --max-batch 64 --cache-entries 10000 --precision int8")
    L.append("python benchmarks/server/peer_server.py --model build/models/all-MiniLM-L6-v2 --port 0 --precision fp32|int8 --threads 1")
    L.append("FRUGAL_WRK_SENTENCES=build/load/corpus.txt wrk -t 2 -c C -d 10s --timeout 30s --latency \\")
    L.append("  -s benchmarks/server/post_latency.lua http://127.0.0.1:PORT/v1/embeddings      # C in 1 16 64 256")
    L.append("frugal_server ... --http-threads 512 --max-queued 64 --window-ms 5 --max-batch 64 --cache-entries 0 --precision int8"
             + (" " + os.environ["OVERLOAD_EXTRA"] if os.environ.get("OVERLOAD_EXTRA") else ""))
    L.append("FRUGAL_WRK_CHECK=1 wrk -t 2 -c 512 -d 60s --timeout 30s --latency -s benchmarks/server/post_latency.lua URL")
    L.append("```")
    L.append("\n`--timeout 30s`: wrk's default 2 s timeout drops the slowest requests from its latency figures; "
             "with 30 s they are counted. The raw wrk output of every cell is in `results/raw/`.")
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
