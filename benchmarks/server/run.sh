#!/usr/bin/env bash
# Load test of examples/server (frugal_server) against its peer (peer_server.py: stdlib HTTP + onnxruntime),
# in one sitting, on 127.0.0.1 only, every wrk run bounded in time:
#   1. builds frugal_server in the release preset;
#   2. a corpus of 2048 distinct real sentences (lines >= 20 bytes of /usr/share/games/fortunes);
#   3. the ladder (a) no batching fp32, (b) batching fp32, (c) + int8, (d) + cache, each at -c 1 16 64 256;
#   4. the peer (fp32, int8) at the same concurrencies;
#   5. overload: frugal at -c 512 against --max-queued 64 for 60 s, every response checked;
#   6. writes benchmarks/server/results/load.md (and the raw wrk output under results/raw/).
#
#   benchmarks/server/run.sh            (env: PEER_PY=python with onnxruntime, default build/venv-peer, DURATION=10s, OVERLOAD_S=60)
# A partial or variant sitting: NAME=load_x (results/NAME.md, results/raw_NAME/), STEPS="c d",
# PEERS="fp32", PEER_EXTRA="--tcp-nodelay", OVERLOAD_EXTRA (default "--http-nice 19"), FRUGAL_EXTRA="--model-threads 2", OVERLOAD=0, FRUGAL_SERVER_BIN=another build of frugal_server,
# FRUGAL_LOAD_NOTE="a line for the report".
# Needs: cmake, a C++20 compiler, libcpp-httplib-dev, wrk, curl, python3; the model in
# build/models/all-MiniLM-L6-v2 (or FRUGAL_MODEL_DIR); for the peer, a venv with onnx, onnxruntime,
# numpy and tokenizers (benchmarks/models/README.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
MODEL=${FRUGAL_MODEL_DIR:-$ROOT/build/models/all-MiniLM-L6-v2}
DURATION=${DURATION:-10s}
OVERLOAD_S=${OVERLOAD_S:-60}
CONCURRENCY=${CONCURRENCY:-"1 16 64 256"}
NAME=${NAME:-load}
STEPS=${STEPS-"a b c d"}  # "-" not ":-": an empty list skips
PEERS=${PEERS-"fp32 int8"}
# The peer's Python: build/venv-peer, made when missing (only when a peer runs).
PEER_PY=${PEER_PY:-}
if [ -n "$PEERS" ] && [ -z "$PEER_PY" ]; then PEER_PY=$("$ROOT/benchmarks/peer_venv.sh"); fi
export PEER_EXTRA=${PEER_EXTRA:-}
# The overload server's extra flags: its HTTP threads below the model's, so that accepted work gets the CPU.
export OVERLOAD_EXTRA=${OVERLOAD_EXTRA---http-nice 19}
OVERLOAD=${OVERLOAD:-1}
WORK=$ROOT/build/$NAME
RES=$ROOT/benchmarks/server/results
RAW=$RES/raw
[ "$NAME" = load ] || RAW=$RES/raw_$NAME
LUA=$ROOT/benchmarks/server/post_latency.lua
SERVER=${FRUGAL_SERVER_BIN:-$ROOT/build/release/examples/server/frugal_server}
mkdir -p "$WORK" "$RAW"
rm -f "$RAW"/*.txt "$WORK"/rows.tsv "$WORK"/overload.env "$WORK"/idle_rss "$WORK"/exits
START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export FRUGAL_LOAD_AVG_START; FRUGAL_LOAD_AVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
export FRUGAL_EXTRA="${FRUGAL_EXTRA:-}"
echo "$START_DATE" > "$WORK/date"

echo "== build" >&2
cmake --preset release > "$WORK/configure.log" 2>&1
cmake --build --preset release --target frugal_server > "$WORK/build.log" 2>&1

echo "== corpus" >&2
CORPUS=$WORK/corpus.txt
for f in /usr/share/games/fortunes/*; do
  case $f in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && cat "$f"
done | iconv -f utf-8 -t utf-8 -c | sed 's/^[[:space:]]*//; s/[[:space:]]*$//' |
  awk 'length($0) >= 20 && !seen[$0]++' |
  awk 'BEGIN { srand(1) } { printf "%.9f\t%s\n", rand(), $0 }' | sort -k1,1 | cut -f2- | awk 'NR <= 2048' > "$CORPUS"
[ "$(wc -l < "$CORPUS")" -eq 2048 ] || { echo "corpus: fewer than 2048 sentences" >&2; exit 1; }
export FRUGAL_WRK_SENTENCES=$CORPUS

PID= PORT=
start() {  # start LOGNAME CMD...: runs CMD, waits for "listening on HOST:PORT"
  local log=$WORK/$1.log; shift
  "$@" > "$log.out" 2> "$log.err" &
  PID=$!
  for _ in $(seq 300); do
    if grep -q '^listening on' "$log.out" 2> /dev/null; then
      PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$log.out"); return 0
    fi
    kill -0 "$PID" 2> /dev/null || { cat "$log.err" >&2; return 1; }
    sleep 1
  done
  echo "no listening line from $*" >&2; return 1
}
EXIT=
stop() {  # SIGTERM, wait; sets EXIT to the exit status
  kill -TERM "$PID"; EXIT=0; wait "$PID" || EXIT=$?
}
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$PID/status"; }
hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$PID/status"; }
# frugal's ledger: cost summed over features, ok requests summed over features
cost_ok() {
  curl -s "http://127.0.0.1:$PORT/metrics" | awk '
    /^frugal_cost_usd_total\{/ { c += $2 }
    /^frugal_requests_total\{.*outcome="ok"/ { n += $2 }
    END { printf "%.9f %d\n", c, n }'
}

# one wrk run: wrk_row SYSTEM STEP C  (appends a row to rows.tsv)
wrk_row() {
  local sys=$1 step=$2 c=$3 before after raw=$RAW/$1_$2_c$3.txt
  [ "$sys" = frugal ] && before=$(cost_ok) || before="0 0"
  local t=2; [ "$c" -lt 2 ] && t=1  # wrk needs connections >= threads
  wrk -t "$t" -c "$c" -d "$DURATION" --timeout 30s --latency -s "$LUA" "http://127.0.0.1:$PORT/v1/embeddings" > "$raw" 2>&1 || true
  [ "$sys" = frugal ] && after=$(cost_ok) || after="0 0"
  local line non2xx
  line=$(grep '^FRUGAL_WRK' "$raw" || echo 'FRUGAL_WRK missing')
  non2xx=$(awk '/Non-2xx or 3xx responses/ { print $NF }' "$raw"); non2xx=${non2xx:-0}
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sys" "$step" "$c" "$line" "$non2xx" "$before" "$after" "$(rss_kb) $(hwm_kb)" >> "$WORK/rows.tsv"
  echo "$sys $step c=$c: $line non2xx=$non2xx" >&2
}

# shellcheck disable=SC2206
FRUGAL_COMMON=(--model "$MODEL" --port 0 --http-threads 256 --max-queued 512 --window-ms 5 ${FRUGAL_EXTRA:-})
declare -A STEP_ARGS=(
  [a]="--max-batch 1 --cache-entries 0 --precision fp32"
  [b]="--max-batch 64 --cache-entries 0 --precision fp32"
  [c]="--max-batch 64 --cache-entries 0 --precision int8"
  [d]="--max-batch 64 --cache-entries 10000 --precision int8"
)
for step in $STEPS; do
  echo "== frugal step $step: ${STEP_ARGS[$step]}" >&2
  # shellcheck disable=SC2206
  args=(${STEP_ARGS[$step]})
  start "frugal_$step" "$SERVER" "${FRUGAL_COMMON[@]}" "${args[@]}"
  echo "$step idle_rss_kb $(rss_kb)" >> "$WORK/idle_rss"
  for c in $CONCURRENCY; do wrk_row frugal "$step" "$c"; done
  stop; echo "frugal_$step $EXIT" >> "$WORK/exits"
done

for prec in $PEERS; do
  echo "== peer $prec" >&2
  start "peer_$prec" "$PEER_PY" benchmarks/server/peer_server.py --model "$MODEL" --port 0 --precision "$prec" \
    --threads 1 --onnx-dir "$WORK/peer-onnx" $PEER_EXTRA
  echo "peer_$prec idle_rss_kb $(rss_kb)" >> "$WORK/idle_rss"
  for c in $CONCURRENCY; do wrk_row peer "$prec" "$c"; done
  stop; echo "peer_$prec $EXIT" >> "$WORK/exits"
done

if [ "$OVERLOAD" = 1 ]; then
echo "== overload: -c 512 for ${OVERLOAD_S}s against --max-queued 64" >&2
# shellcheck disable=SC2086
start frugal_overload "$SERVER" --model "$MODEL" --port 0 --http-threads 512 --max-queued 64 --window-ms 5 \
  --max-batch 64 --cache-entries 0 --precision int8 $OVERLOAD_EXTRA
rss_before=$(rss_kb)
# RSS once a second, and a probe (curl, one request at a time) that times each answer, 429s included
( while kill -0 "$PID" 2> /dev/null; do rss_kb; sleep 1; done ) > "$WORK/overload_rss.txt" 2> /dev/null &
rss_loop=$!
body=$(head -1 "$CORPUS" | python3 -c 'import json,sys; print(json.dumps({"model":"all-MiniLM-L6-v2","input":sys.stdin.read().strip()}))')
( end=$((SECONDS + OVERLOAD_S - 2)); sleep 2
  while [ $SECONDS -lt $end ]; do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' -d "$body" \
      "http://127.0.0.1:$PORT/v1/embeddings" || true
    sleep 0.2
  done ) > "$WORK/overload_probe.txt" &
probe=$!
FRUGAL_WRK_CHECK=1 wrk -t 2 -c 512 -d "${OVERLOAD_S}s" --timeout 30s --latency -s "$LUA" \
  "http://127.0.0.1:$PORT/v1/embeddings" > "$RAW/overload_c512.txt" 2>&1 || true
wait "$probe" || true
rss_after=$(rss_kb)
sleep 2
readyz=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")
after_emb=$(curl -s -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$PORT/v1/embeddings" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["data"][0]["embedding"]))' || echo fail)
wrk -t 2 -c 16 -d 5s --timeout 30s --latency -s "$LUA" "http://127.0.0.1:$PORT/v1/embeddings" > "$RAW/overload_after_c16.txt" 2>&1 || true
metrics_after=$(curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^frugal_(requests_total|batcher_queue|process_resident)' | tr '\n' ';' || true)
stop; overload_exit=$EXIT
kill "$rss_loop" 2> /dev/null || true
cat > "$WORK/overload.env" << EOF
rss_before_kb=$rss_before
rss_after_kb=$rss_after
rss_max_kb=$(sort -n "$WORK/overload_rss.txt" | tail -1)
readyz=$readyz
after_embedding_dims=$after_emb
exit=$overload_exit
metrics_after="$metrics_after"
EOF
fi
echo "== report" >&2
PEER_PY=$PEER_PY python3 "$ROOT/benchmarks/server/report.py" "$WORK" "$RES/$NAME.md" "$RAW"
echo "wrote $RES/$NAME.md" >&2
