#!/usr/bin/env bash
# Two frugal_server replicas behind the same Zipf traffic, without and with the shared Redis tier (issue 23):
# total model calls and the ledger's cost per 1k requests. Everything runs on 127.0.0.1 and is stopped after.
#   benchmarks/server/replicas.sh [SERVER_BIN] [SECONDS]   (default: build/release/examples/server/frugal_server, 10)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${1:-build/release/examples/server/frugal_server}
secs=${2:-10}
model=${FRUGAL_MODEL_DIR:-$PWD/build/models/all-MiniLM-L6-v2}
[ -x "$bin" ] || { echo "replicas.sh: build frugal_server first (cmake --build --preset release --target frugal_server)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# 2,048 distinct fortunes lines of >= 20 bytes: the traffic, drawn Zipf(1) by post.lua.
python3 - "$work/corpus.txt" <<'PY'
import glob, os, random, sys
lines = set()
for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.isfile(f) and not f.endswith((".dat", ".u8")):
        lines.update(l.rstrip("\n") for l in open(f, encoding="utf-8", errors="replace") if len(l.rstrip("\n")) >= 20)
lines = sorted(lines)
random.Random(7).shuffle(lines)
open(sys.argv[1], "w").write("\n".join(lines[:2048]) + "\n")
PY
# A series' value; a name without labels sums its series (the batchers' are per model).
metric() {
  curl -s "http://127.0.0.1:$1/metrics" | awk -v k="$2" '
    { n = $1; if (index(k, "{") == 0) sub(/\{.*/, "", n) }
    n == k { s += $2; f = 1 }
    END { if (f) print s }'
}
start_server() {  # port, extra flags...
  local port=$1; shift
  "$bin" --model "$model" --port "$port" --precision int8 --cache-entries 1024 --http-threads 64 "$@" > "$work/s$port.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.1; done
  echo "replicas.sh: server on $port did not get ready" >&2; cat "$work/s$port.out" >&2; exit 1
}
echo "| setup | requests | model calls (batches) | inputs computed | cache hits (both tiers) | Redis hits | cost per 1k requests |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for mode in none redis; do
  extra=()
  if [ "$mode" = redis ]; then
    rport=$(free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no > "$work/redis.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
    extra=(--redis "127.0.0.1:$rport")
  fi
  a=$(free_port); start_server "$a" "${extra[@]}"
  b=$(free_port); start_server "$b" "${extra[@]}"
  wrks=()
  for p in $a $b; do
    FRUGAL_WRK_SENTENCES="$work/corpus.txt" wrk -t 1 -c 16 -d "${secs}s" -s benchmarks/server/post.lua \
      "http://127.0.0.1:$p/v1/embeddings" > "$work/wrk$p.txt" 2>&1 &
    wrks+=($!)
  done
  wait "${wrks[@]}"
  if grep -h "Non-2xx" "$work"/wrk*.txt; then echo "replicas.sh: non-2xx answers (above)" >&2; fi
  req=0 calls=0 inputs=0 hits=0 rhits=0 cost=0
  for p in $a $b; do
    r=$(metric "$p" 'frugal_requests_total{feature="default",outcome="ok"}')
    c=$(metric "$p" frugal_batcher_batches_total)
    i=$(metric "$p" frugal_batcher_completed_total)
    h=$(metric "$p" 'frugal_cache_hits_total{feature="default"}')
    rh=$(metric "$p" frugal_redis_hits_total); rh=${rh:-0}
    u=$(metric "$p" frugal_total_cost_usd_total)
    read -r req calls inputs hits rhits cost < <(python3 -c "print($req+$r, $calls+$c, $inputs+$i, $hits+$h, $rhits+$rh, $cost+$u)")
  done
  per1k=$(python3 -c "print(f'\${1000*$cost/$req:.6f}')")
  label=$([ "$mode" = redis ] && echo "2 replicas + shared Redis tier" || echo "2 replicas, LRU each")
  echo "| $label | $req | $calls | $inputs | $hits | $rhits | $per1k |"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
done
