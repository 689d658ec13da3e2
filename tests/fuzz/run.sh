#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs each for the given time, two at a time.
#   tests/fuzz/run.sh <build-dir> <seconds-per-harness> [harness...]
# Fails on any crash, sanitizer report, leak, timeout or out-of-memory. Prints runs per harness.
# The corpus a run grows goes to <build-dir>/corpus/<harness>; the seeds in tests/fuzz/corpus are only
# read. FUZZ_JOBS (default 2) sets how many harnesses run at once.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 <build-dir> <seconds-per-harness> [harness...]" >&2
  exit 2
fi
build=$(realpath -m "$1")
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
harnesses=("$@")
# By default every harness there is: each tests/fuzz/fuzz_<name>.cpp, so none can be forgotten here.
if [[ ${#harnesses[@]} -eq 0 ]]; then
  for f in "$here"/fuzz_*.cpp; do
    f=${f##*/fuzz_}
    harnesses+=("${f%.cpp}")
  done
fi
jobs=${FUZZ_JOBS:-2}
# Every harness has committed seeds (git keeps no empty folder, so a harness without any would find
# its seed folder missing on a fresh clone and libFuzzer would exit at once): say so before building.
for h in "${harnesses[@]}"; do
  if ! compgen -G "$here/corpus/$h/*" >/dev/null; then
    echo "$0: no seeds in $here/corpus/$h: commit at least one input there" >&2
    exit 2
  fi
done

cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

run_one() {
  local h=$1 out="$build/runs/$1" t0
  t0=$(date +%s)
  mkdir -p "$out" "$build/corpus/$h"
  # -timeout: one input taking over 10 s is a hang. -rss_limit_mb: 2 GB is a leak or a runaway allocation.
  local rc=0
  (cd "$out" && "$build/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/" "$build/corpus/$h" "$here/corpus/$h" >"$out/log" 2>&1) || rc=$?
  echo $(($(date +%s) - t0)) >"$out/seconds"
  return $rc
}

declare -A status
pending=("${harnesses[@]}")
running=()
while [[ ${#pending[@]} -gt 0 || ${#running[@]} -gt 0 ]]; do
  while [[ ${#pending[@]} -gt 0 && ${#running[@]} -lt $jobs ]]; do
    h=${pending[0]}
    pending=("${pending[@]:1}")
    run_one "$h" &
    status[$h]=$!
    running+=("$h")
  done
  wait -n || true
  still=()
  for h in "${running[@]}"; do
    if kill -0 "${status[$h]}" 2>/dev/null; then still+=("$h"); else wait "${status[$h]}" && status[$h]=ok || status[$h]=fail; fi
  done
  running=("${still[@]+"${still[@]}"}")
done

failed=0
printf '%-14s %-6s %8s %12s %10s %8s\n' harness result seconds executions exec/s corpus
for h in "${harnesses[@]}"; do
  log="$build/runs/$h/log"
  runs=$(awk '/stat::number_of_executed_units/ {v=$2} END {print v}' "$log")
  rate=$(awk '/stat::average_exec_per_sec/ {v=$2} END {print v}' "$log")
  corpus=$(find "$build/corpus/$h" -type f | wc -l)
  result=${status[$h]}
  if grep -qE 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: ' "$log"; then
    result=fail
  fi
  secs=$(cat "$build/runs/$h/seconds" 2>/dev/null || echo '?')
  printf '%-14s %-6s %8s %12s %10s %8s\n' "$h" "$result" "$secs" "${runs:-?}" "${rate:-?}" "$corpus"
  if [[ $result != ok ]]; then
    failed=1
    echo "---- $h: last lines of $log" >&2
    grep -vE '^#[0-9]+|^\s+NEW_FUNC' "$log" | tail -40 >&2
    ls "$build/runs/$h"/crash-* "$build/runs/$h"/leak-* "$build/runs/$h"/timeout-* "$build/runs/$h"/oom-* 2>/dev/null >&2 || true
  fi
done
exit $failed
