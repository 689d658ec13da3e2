#!/usr/bin/env bash
# A corpus embedded by 1, 2 and 4 shard processes of frugal_batch_job on this machine: wall time, machine
# time (the sum of the shard processes' run times: what a fleet of one spot machine per shard pays for) and
# its cost at a given hourly price per machine; then 4 shards, each SIGKILLed once at a random time and
# restarted with its index, for the records redone per preemption. Every merged output is compared with the
# single-process run (cmp).
#
#   benchmarks/job/fleet.sh [--bin build/h/examples/batch_job/frugal_batch_job] [--records 2000]
#                           [--model DIR|stand-in] [--price 0.12] [--every 64] [--batch 32] [--dir DIR]
#
# --model defaults to $FRUGAL_MODEL_DIR (MiniLM), else stand-in. --price is USD per machine-hour (the default
# is a 4-vCPU spot VM's order of magnitude). On a machine with fewer cores than shards the shards share
# them: wall time stops falling and machine time rises, which is what the table then shows.
set -euo pipefail

bin=build/h/examples/batch_job/frugal_batch_job
records=2000
model=${FRUGAL_MODEL_DIR:-stand-in}
price=0.12
every=64
batch=32
dir=
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --price) price=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "usage: see the head of $0" >&2; exit 64 ;;
  esac
done
[[ -x $bin ]] || { echo "$0: no $bin; build the frugal_batch_job target" >&2; exit 2; }
if [[ -z $dir ]]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"
now() { date +%s.%N; }
log=$dir/log.txt
: >"$log"
"$bin" --generate "$records" "$dir/in.jsonl"
common=(--model "$model" --input "$dir/in.jsonl" --batch "$batch" --every "$every" --threads 1)

# One shard process to completion, restarted after a SIGKILL; prints its run seconds.
run_shard() {  # prefix index count [kill_after_s]
  local prefix=$1 i=$2 n=$3 kill_after=${4:-} t0 rc
  t0=$(now)
  "$bin" "${common[@]}" --output-prefix "$prefix" --shard-index "$i" --shard-count "$n" >>"$log" 2>&1 &
  local pid=$!
  if [[ -n $kill_after ]]; then
    sleep "$kill_after"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null && rc=0 || rc=$?
  if [[ $rc -ne 0 ]]; then
    [[ $rc -eq 137 ]] || { echo "$0: shard $i of $n exited $rc; see $log" >&2; exit 1; }
    # The work this preemption costs: results written past the last checkpoint, which the restart drops
    # (all of them when the kill came before the first checkpoint).
    local d
    d=$(printf '%s/shard-%05d-of-%05d' "$prefix" "$i" "$n")
    local written=0 kept=0
    [[ -f $d/output.jsonl ]] && written=$(wc -l <"$d/output.jsonl")
    [[ -f $d/checkpoint.json ]] && kept=$(sed -E 's/.*"records_done":([0-9]+).*/\1/' "$d/checkpoint.json")
    echo "$((written - kept))" >"$prefix/redone-$i"
    "$bin" "${common[@]}" --output-prefix "$prefix" --shard-index "$i" --shard-count "$n" >>"$log" 2>&1
  fi
  awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'
}

fleet() {  # count [kill]: prints "wall machine"
  local n=$1 kill=${2:-} prefix=$dir/out-$1-${2:-clean} t0 i
  rm -rf "$prefix"
  mkdir -p "$prefix"
  t0=$(now)
  for ((i = 0; i < n; i++)); do
    local k=
    [[ -n $kill ]] && k=$(awk -v s="$RANDOM" -v w="$kill" 'BEGIN { printf "%.3f", w * (0.2 + 0.6 * s / 32767) }')
    run_shard "$prefix" "$i" "$n" "$k" >"$prefix/time-$i" &
  done
  wait
  local wall machine
  wall=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
  machine=$(cat "$prefix"/time-* | awk '{ s += $1 } END { printf "%.3f", s }')
  "$bin" --merge --output-prefix "$prefix" --shard-count "$n" --output "$prefix/merged.jsonl" >>"$log" 2>&1
  cmp -s "$prefix/merged.jsonl" "$dir/single.jsonl" || { echo "$0: $n shards: merged output differs" >&2; exit 1; }
  echo "$wall $machine"
}

"$bin" "${common[@]}" --output "$dir/single.jsonl" --checkpoint-dir "$dir/single-ckpt" >>"$log" 2>&1
echo "corpus: $records records (frugal_batch_job --generate), model: $model, batch $batch, checkpoint every" \
  "$every records, 1 thread per shard, $(nproc) cores, price \$$price per machine-hour"
echo
echo "| shards | wall s | records/s | machine s | cost per 1M records (USD) |"
echo "|---:|---:|---:|---:|---:|"
four_wall=
for n in 1 2 4; do
  read -r wall machine < <(fleet "$n")
  four_wall=$wall
  awk -v n="$n" -v w="$wall" -v m="$machine" -v r="$records" -v p="$price" \
    'BEGIN { printf "| %d | %.2f | %.0f | %.2f | %.4f |\n", n, w, r / w, m, m / 3600 * p * 1e6 / r }'
done
echo
read -r wall machine < <(fleet 4 "$four_wall")
read -r sum kills < <(cat "$dir/out-4-$four_wall"/redone-* 2>/dev/null | awk '{ s += $1; n++ } END { printf "%d %d\n", s, n }')
echo "4 shards, each SIGKILLed once at a uniform time in 20..80% of the clean 4-shard wall time, restarted:"
awk -v w="$wall" -v m="$machine" -v s="$sum" -v k="$kills" -v e="$every" -v r="$records" -v p="$price" \
  'BEGIN { printf "wall %.2f s, machine %.2f s (cost per 1M records %.4f USD); %d preemptions, %d records redone, %.1f per preemption (checkpoint every %d)\n", w, m, m / 3600 * p * 1e6 / r, k, s, k ? s / k : 0, e }'
