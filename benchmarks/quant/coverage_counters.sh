#!/usr/bin/env bash
# Builds benchmarks/quant/coverage_counters.cpp four ways, at the dev preset's -O1 -march=native, and runs each:
#   benchmarks/quant/coverage_counters.sh [out-dir]      (default build/coverage_counters)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/coverage_counters}
mkdir -p "$out"
flags=(-g -O1 -march=native -std=gnu++20 -I"$root/include" -isystem /usr/include/eigen3 -pthread)
declare -A ways=([plain]="" [coverage]="--coverage" [atomic]="--coverage -fprofile-update=atomic"
  [no_loop_im]="--coverage -fno-tree-loop-im")
for way in plain coverage atomic no_loop_im; do
  # shellcheck disable=SC2086
  g++ "${flags[@]}" ${ways[$way]} "$root/benchmarks/quant/coverage_counters.cpp" -o "$out/$way"
  (cd "$out" && printf '%-11s ' "$way" && "./$way")
done
