#!/usr/bin/env bash
# The one GPU visit: correctness first, then timing, each result line printed as it completes.
#
# Before it, on the build machine: benchmarks/gpu/build.sh   (fills build/gpu-carry, ~10 MiB, see there)
# The device command (tool `run`), exactly:
#   command:   bash benchmarks/gpu/run.sh
#   carry:     ["build/gpu-carry"]
#   timeout_s: 600
# It needs nothing on the GPU machine but the NVIDIA driver and a CUDA 13 runtime and cuBLASLt (the toolkit's, or
# the pip wheels' beside PyTorch). Should a carried binary not start there, it is rebuilt with the toolkit's nvcc
# alone from the working tree and the carried doctest.h.
#
# Steps, in order, each under `timeout` with its own cap, and all under one deadline of TOTAL_S (default 470 s,
# so the sum stays under 480): the device info; test_cuda_device, test_cuda_fragments, test_cuda_gemm_checks
# (15 s each); test_cuda_gemm (every kernel against float64 host references and cuBLASLt, M = 1, 2, 3, 7, 16, 17,
# ..., K and N tails; 180 s); test_cuda_faults (60 s); test_cuda_weights (the host toolkit's weights uploaded and
# run against the host GEMMs; 15 s); test_cuda_pool (the model pool with a device-memory budget; 15 s);
# bench_gpu_gemm (D2D copy roof, then fp16/bf16/int8 TN at
# 4096^3 and 8192^3, M = 1, 16, 64 x 8192^2, weight-only M = 1, 16, 64 x 8192^2, all against cuBLASLt in the same
# process; 120 s); bench_gpu_gemm --sweep (tuning data; what is left, at most 60 s).
#
# What comes back, under $OUT (2 files): summary.md, written line by line as results arrive (so a kill keeps
# what ran), and logs.tar.gz (every log, the benchmark tables, the SASS counts), refreshed after every step.
#   Off the device: OUT=/tmp/x bash benchmarks/gpu/run.sh   (reaches each binary's "no GPU" skip line)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:?set OUT to the folder that comes back}
carry=${CARRY:-$here/build/gpu-carry}
total=${TOTAL_S:-470}
start=$(date +%s)
work=$(mktemp -d /tmp/frugal-gpu.XXXXXX)
logs=$work/logs
mkdir -p "$out" "$logs"
summary=$out/summary.md

say() { echo "$*"; echo "$*" >>"$summary"; }
left() { echo $((total - ($(date +%s) - start))); }
cap() { local l; l=$(left); ((l < $1)) && echo $((l > 1 ? l : 1)) || echo "$1"; }
pack() { tar -czf "$out/logs.tar.gz.tmp" -C "$work" logs && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }

: >"$summary"
say "# GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say ""
say "- commit: $(cat "$carry/commit.txt" 2>/dev/null || echo 'unknown (no build/gpu-carry/commit.txt)')"
gpu=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,temperature.gpu,power.draw --format=csv,noheader 2>&1 || echo "nvidia-smi failed")
say "- GPU (name, driver, memory, max SM clock, SM clock, temperature, power): $gpu"
say "- host: $(nproc) cores, $(uname -r)"

# The CUDA runtime and cuBLASLt: the toolkit's, else the pip wheels' (PyTorch's venv has them).
libdirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
  $(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/bin/x)")/../lib64 \
  /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib \
  /opt/torch/.venv/lib/python3*/site-packages/nvidia/cublas/lib \
  /opt/torch/.venv/lib/python3*/site-packages/nvidia/cuda_runtime/lib; do
  [[ -d "$d" ]] && libdirs+="$d:"
done
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"
say "- library path: ${libdirs%:}"

tests=(test_cuda_device test_cuda_fragments test_cuda_gemm_checks test_cuda_gemm test_cuda_faults test_cuda_weights
  test_cuda_pool)
bins=$carry/bin
# A binary that cannot start (a missing library, a foreign loader) is rebuilt here with nvcc alone.
startable=1
for b in "${tests[@]}" bench_gpu_gemm; do
  if [[ ! -x "$bins/$b" ]]; then startable=0; echo "$b: missing" >>"$logs/ldd.txt"; continue; fi
  { echo "== $b"; ldd "$bins/$b"; } >>"$logs/ldd.txt" 2>&1
  if ldd "$bins/$b" 2>&1 | grep -q "not found"; then startable=0; fi
done
[[ "${REBUILD:-0}" == 1 ]] && startable=0
if ((startable == 0)); then
  say "- carried binaries cannot start here (see logs/ldd.txt): rebuilding with $(command -v nvcc || echo 'no nvcc')"
  bins=$work/bin
  mkdir -p "$bins"
  flags=(-std=c++20 -O2 -I"$here/include" -I"$here/cuda" -I"$here/tests/cuda" -I"$carry" -I"$carry/eigen3" -Xcompiler=-static-libstdc++
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr)
  srcs=(test_device test_fragments test_gemm_checks test_gemm_gpu test_faults test_weights test_pool_device)
  for i in "${!tests[@]}"; do
    timeout "$(cap 240)" nvcc "${flags[@]}" "$here/tests/test_main.cpp" "$here/tests/cuda/${srcs[$i]}.cu" \
      -o "$bins/${tests[$i]}" -lcublasLt >"$logs/build_${tests[$i]}.log" 2>&1 &
  done
  timeout "$(cap 240)" nvcc "${flags[@]}" "$here/benchmarks/gpu/bench_gemm.cu" -o "$bins/bench_gpu_gemm" -lcublasLt \
    >"$logs/build_bench_gpu_gemm.log" 2>&1 &
  wait
  say "- rebuilt in $(($(date +%s) - start)) s since the start"
fi
say ""
say "## Correctness (fresh random data; the seed is in each log)"
say ""
say "| binary | verdict | test cases | assertions | s |"
say "|---|---|---|---|---|"

failures=""
run_test() {
  local t=$1 limit=$2 t0 rc verdict cases asserts
  t0=$(date +%s)
  if [[ ! -x "$bins/$t" ]]; then say "| $t | NOT BUILT | | | |"; return; fi
  if (($(left) <= 1)); then say "| $t | NOT RUN (out of time) | | | |"; return; fi
  timeout "$(cap "$limit")" "$bins/$t" --no-intro=true --duration=true >"$logs/$t.log" 2>&1
  rc=$?
  cases=$(grep -Eo 'test cases: *[0-9]+ \| *[0-9]+ passed \| *[0-9]+ failed( \| *[0-9]+ skipped)?' "$logs/$t.log" | tail -1 | sed 's/test cases: *//; s/|/,/g')
  asserts=$(grep -Eo 'assertions: *[0-9]+ \| *[0-9]+ passed \| *[0-9]+ failed' "$logs/$t.log" | tail -1 | sed 's/assertions: *//; s/|/,/g')
  if ((rc == 124)); then verdict="TIMED OUT (cap ${limit} s)"
  elif ((rc == 77)); then verdict="SKIPPED: $(grep -m1 -o 'missing gpu: .*' "$logs/$t.log")"
  elif ((rc == 0)); then verdict="passed"
  else verdict="FAILED (rc $rc)"; failures+=$'\n'"### $t"$'\n'"$(grep -E -m 25 'ERROR|FATAL|TEST CASE|SUBCASE|seed' "$logs/$t.log")"; fi
  say "| $t | $verdict | $cases | $asserts | $(($(date +%s) - t0)) |"
  pack
}
run_test test_cuda_device 15
run_test test_cuda_fragments 15
run_test test_cuda_gemm_checks 15
run_test test_cuda_gemm 180
run_test test_cuda_faults 60
run_test test_cuda_weights 15
run_test test_cuda_pool 15
if [[ -n "$failures" ]]; then
  say ""
  say "### First failing checks"
  say '```'
  say "$failures"
  say '```'
fi

say ""
say "## Timing against cuBLASLt (same process; median of CUDA-graph replays over input sets > L2)"
say ""
if [[ -x "$bins/bench_gpu_gemm" ]] && (($(left) > 5)); then
  limit=$(cap 120)
  # Rows stream to the terminal and the log as they are measured; the table goes into the summary after.
  timeout "$limit" "$bins/bench_gpu_gemm" --budget-s $((limit - 15)) --md "$logs/bench.md" 2>&1 | tee "$logs/bench.log"
  rc=${PIPESTATUS[0]}
  grep -E '^(device|copy roof|SKIPPED|SOME|FAILED|cuBLASLt)' "$logs/bench.log" >>"$summary"
  say ""
  grep -E '^\|' "$logs/bench.log" | awk '!seen[$0]++' >>"$summary"
  say ""
  say "bench_gpu_gemm exit $rc$( ((rc == 124)) && echo " (TIMED OUT at $limit s: the rows above are those that finished)")"
  pack
else
  say "bench_gpu_gemm: not built or out of time"
fi
if [[ -x "$bins/bench_gpu_gemm" ]] && (($(left) > 20)) && [[ "${SWEEP:-1}" != 0 ]]; then
  limit=$(cap 60)
  say ""
  say "## Tuning sweep (ours only, quick timings)"
  timeout "$limit" "$bins/bench_gpu_gemm" --sweep --quick --budget-s $((limit - 10)) --md "$logs/sweep.md" >"$logs/sweep.log" 2>&1
  rc=$?
  say "bench_gpu_gemm --sweep exit $rc; rows in logs/sweep.md and logs/sweep.log ($(grep -c '^| ' "$logs/sweep.log" 2>/dev/null || echo 0) lines)"
fi

say ""
say "## SASS: per-kernel instruction counts"
say ""
if [[ -f "$carry/sass_counts.md" && "$bins" == "$carry/bin" ]]; then
  cp "$carry/sass_counts.md" "$logs/"
  grep -E '^\|( arch|---| sm_)' "$carry/sass_counts.md" | awk -F'|' 'NR <= 2 || $4 + $5 + $6 + $7 + $8 + $9 + $10 > 0' >>"$summary"
elif command -v cuobjdump >/dev/null && (($(left) > 5)); then
  timeout "$(cap 20)" "$here/benchmarks/gpu/sass_counts.sh" "$(command -v cuobjdump)" "$bins/bench_gpu_gemm" >"$logs/sass_counts.md" 2>&1
  awk -F'|' 'NR <= 2 || $4 + $5 + $6 + $7 + $8 + $9 + $10 > 0' "$logs/sass_counts.md" >>"$summary"
else
  say "no SASS counts"
fi
say ""
say "total $(($(date +%s) - start)) s (deadline $total s)"
pack
echo
cat "$summary" | grep -E '^\| (test_|binary)' || true
rm -rf "$work"
