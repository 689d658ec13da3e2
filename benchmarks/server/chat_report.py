#!/usr/bin/env python3
"""Writes OUT/chat_vs_llama_server.json and .md from what chat_vs_llama_server.sh left in OUT.

    chat_report.py OUT     (env: REJECT_P99_MAX_S, RSS_SLACK_MB, THREADS, CTX_PER_SLOT, as the script sets them)

Exits 1 when an overload check fails (the files are written either way).
"""
import json
import os
import re
import sys

out = sys.argv[1]
raw, work = os.path.join(out, "raw"), os.path.join(out, "work")
reject_p99_max = float(os.environ.get("REJECT_P99_MAX_S", "0.5"))
rss_slack_mb = float(os.environ.get("RSS_SLACK_MB", "256"))

env = {}
for line in open(os.path.join(work, "env.txt")):
    k, _, v = line.rstrip("\n").partition(" ")
    env[k] = v

COST = re.compile(r'^(frugal_\w*output_cost_per_million_tokens\w*)\{feature="([^"]*)"\} (\S+)$', re.M)


def cost_per_million_output(metrics_path):
    """The ledger's output cost per 1M tokens on /metrics, by feature, with its series name."""
    try:
        text = open(metrics_path).read()
    except OSError:
        return None
    found = {f: (name, float(v)) for name, f, v in COST.findall(text)}
    if not found:
        return None
    name, v = found.get("default", next(iter(found.values())))
    return {"series": name, "value": v}


def ms(d, k):
    v = d.get(k)
    return None if v is None else v * 1000


runs = []
runs_path = os.path.join(work, "runs.jsonl")
if os.path.exists(runs_path):
    for line in open(runs_path):
        r = json.loads(line)
        s = json.load(open(os.path.join(raw, r["load"])))
        row = {
            "server": r["server"],
            "concurrency": r["concurrency"],
            "requests": s["requests"],
            "ok": s["ok"],
            "errors": s["errors"],
            "errors_by_kind": s["errors_by_kind"],
            "wall_s": s["wall_s"],
            "output_tokens": s["output_tokens"],
            "output_tokens_per_s": s["output_tokens_per_s"],
            "requests_per_s": s["ok"] / s["wall_s"] if s["wall_s"] > 0 else 0,
            "ttft_p50_ms": ms(s["ttft_s"], "p50"),
            "ttft_p99_ms": ms(s["ttft_s"], "p99"),
            "itl_p50_ms": ms(s["itl_s"], "p50"),
            "itl_p99_ms": ms(s["itl_s"], "p99"),
            "e2e_p50_s": s["e2e_s"]["p50"],
            "e2e_p99_s": s["e2e_s"]["p99"],
            "prompt_tokens": s["prompt_tokens"],
            "cached_prompt_tokens": s["cached_prompt_tokens"],
            "stale_connection_retries": s["stale_connection_retries"],
            "vmhwm_mib": r["vmhwm_kb"] / 1024,
            "exit": r["exit"],
            "load_avg_before": env.get(f"{r['server']}_c{r['concurrency']}", "").replace("load_avg_before ", ""),
        }
        if r["server"] == "frugal":
            row["cost_per_million_output"] = cost_per_million_output(
                os.path.join(raw, f"frugal_c{r['concurrency']}.metrics.txt"))
        runs.append(row)

overload = None
checks = []
ov_env_path = os.path.join(work, "overload.env.json")
if os.path.exists(ov_env_path):
    e = json.load(open(ov_env_path))
    s = json.load(open(os.path.join(raw, "overload.json")))
    bound_mib = e["idle_rss_kb"] / 1024 + e["kv_budget_mb"] + rss_slack_mb
    rej = s["rejection_s"]
    overload = {"load": s, "server": e, "rss_bound_mib": bound_mib}

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    check("rejections immediate", s["rejected"] == 0 or rej["p99"] <= reject_p99_max,
          f"{s['rejected']} rejected, p99 {rej['p99']} s (bound {reject_p99_max} s)")
    check("rejections carry Retry-After", s["rejected_with_retry_after"] == s["rejected"],
          f"{s['rejected_with_retry_after']} of {s['rejected']}")
    check("some requests rejected", s["rejected"] > 0, f"{s['rejected']} of {s['requests']}")
    check("every accepted stream completes", s["errors"] == 0,
          f"{s['ok']} completed, {s['disconnected']} left on purpose, errors {s['errors_by_kind']}")
    check("disconnected clients free their blocks (KV back to idle)", e["idle"] == 1,
          f"nothing running or waiting and {e['idle_kv_used']} KV blocks used (as before the run) "
          f"{e['idle_after_s']} s after it" if e["idle"] else f"not idle {e['idle_after_s']} s after the run")
    check("RSS bounded", e["vmhwm_kb"] / 1024 <= bound_mib,
          f"peak {e['vmhwm_kb'] / 1024:.0f} MiB, idle {e['idle_rss_kb'] / 1024:.0f} MiB, bound {bound_mib:.0f} MiB "
          f"(idle + KV budget {e['kv_budget_mb']} MiB + {rss_slack_mb:.0f})")
    check("/healthz and /readyz OK afterwards", e["healthz"] == 200 and e["readyz"] == 200,
          f"/healthz {e['healthz']}, /readyz {e['readyz']}")
    check("SIGTERM exits 0", e["exit"] == 0, f"exit {e['exit']}")

result = {"env": env, "threads": int(os.environ.get("THREADS", "2")),
          "ctx_per_slot": int(os.environ.get("CTX_PER_SLOT", "512")), "runs": runs, "overload": overload,
          "checks": checks}
with open(os.path.join(out, "chat_vs_llama_server.json"), "w") as f:
    json.dump(result, f, indent=2)


def f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)


md = ["# Streaming chat load: frugal_server against llama-server", ""]
md.append(f"{env.get('date', '')}; {env.get('cpu', '')}, {env.get('cores', '')} cores; commit {env.get('commit', '')}; "
          f"model {env.get('model', '')}; {result['threads']} threads each; {result['ctx_per_slot']} tokens of KV "
          f"per concurrent request; load average {env.get('load_avg_start', '')} at the start, "
          f"{env.get('load_avg_end', '')} at the end.")
if "llama_server" in env:
    md.append(f"llama-server: {env['llama_server']}.")
md += ["", "Closed loop (bench_chat_load, the chat trace, greedy, streamed). TTFT and ITL in ms; RSS is the peak "
       "(VmHWM); cost is frugal's ledger (frugal_server's --hourly-usd).", "",
       "| server | C | ok / sent | errors | out tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | e2e p50 (s) | "
       "cached prompt tok | $ / 1M out | peak RSS MiB | load avg before |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in runs:
    cost = r.get("cost_per_million_output")
    md.append(f"| {r['server']} | {r['concurrency']} | {r['ok']} / {r['requests']} | {r['errors']} | "
              f"{f(r['output_tokens_per_s'])} | {f(r['ttft_p50_ms'])} | {f(r['ttft_p99_ms'])} | "
              f"{f(r['itl_p50_ms'])} | {f(r['itl_p99_ms'])} | {f(r['e2e_p50_s'], '{:.2f}')} | "
              f"{r['cached_prompt_tokens']} / {r['prompt_tokens']} | "
              f"{'-' if not cost else '{:.4f}'.format(cost['value'])} | {f(r['vmhwm_mib'], '{:.0f}')} | "
              f"{r['load_avg_before']} |")
if overload:
    s, e = overload["load"], overload["server"]
    rej = s["rejection_s"]
    md += ["", f"Overload: frugal_server (max_running {e['max_running']}, max_waiting {e['max_waiting']}) at "
           f"{e['rate_per_s']:.2f} requests/s ({e['rate_per_s'] / max(e['capacity_per_s'], 1e-9):.0f} x its best "
           f"closed-loop {e['capacity_per_s']:.2f} requests/s) for {s['duration_s']:.0f} s, open loop; "
           f"{s['disconnect_planned']} clients set to leave mid-stream.", "",
           "| arrivals sent | accepted | completed | left mid-stream | rejected | rejection p50 / p99 / max ms | "
           "with Retry-After | errors | out tok/s | TTFT p50 / p99 ms | idle again after s | RSS idle / peak MiB |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
           f"| {s['requests']} | {s['accepted']} | {s['ok']} | {s['disconnected']} | {s['rejected']} "
           f"{json.dumps(s['rejected_by_status'])} | {f(ms(rej, 'p50'))} / {f(ms(rej, 'p99'))} / {f(ms(rej, 'max'))} | "
           f"{s['rejected_with_retry_after']} | {s['errors']} | {f(s['output_tokens_per_s'])} | "
           f"{f(ms(s['ttft_s'], 'p50'))} / {f(ms(s['ttft_s'], 'p99'))} | {e['idle_after_s']} | "
           f"{e['idle_rss_kb'] / 1024:.0f} / {e['vmhwm_kb'] / 1024:.0f} |", ""]
    md += ["| check | | |", "|---|---|---|"]
    md += [f"| {c['check']} | {'ok' if c['ok'] else 'FAILED'} | {c['detail']} |" for c in checks]
    if s.get("arrivals_late_50ms"):
        md.append(f"\n{s['arrivals_late_50ms']} arrivals were sent more than 50 ms late (the generator shares "
                  f"the CPU), {s['arrivals_not_sent']} not sent.")
with open(os.path.join(out, "chat_vs_llama_server.md"), "w") as fo:
    fo.write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if all(c["ok"] for c in checks) else 1)
