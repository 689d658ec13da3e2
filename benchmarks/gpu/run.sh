#!/usr/bin/env bash
# The one GPU visit: runs the GPU tests, then the benchmark, writes full logs to <logdir>, prints a short table last.
#   benchmarks/gpu/run.sh <logdir> [build dir, default build/cuda]
# The build folder is the one configured on the build machine (cmake -DFRUGAL_ENABLE_CUDA=ON, targets
# test_cuda_device test_cuda_gemm_checks test_cuda_gemm test_cuda_faults bench_gpu_gemm) and carried over whole.
# When its binaries are missing, they are built here with nvcc alone (needs doctest.h: /usr/include or <build>/carry).
set -uo pipefail
logdir=${1:?usage: run.sh <logdir> [build dir]}
build=${2:-build/cuda}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$logdir"
cudabin=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
export LD_LIBRARY_PATH="${cudabin}/../lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
start=$(date +%s)

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true; } >"$logdir/gpu.txt" 2>&1
git -C "$here" rev-parse HEAD >"$logdir/commit.txt" 2>/dev/null || true

tests=(test_cuda_device test_cuda_gemm_checks test_cuda_gemm test_cuda_faults)
bins="$build/tests/cuda"
bench="$build/benchmarks/gpu/bench_gpu_gemm"
missing=0
for t in "${tests[@]}"; do [[ -x "$bins/$t" ]] || missing=1; done
[[ -x "$bench" ]] || missing=1
if (( missing )); then
  echo "binaries missing under $build: building with nvcc" | tee "$logdir/build.log"
  out="$logdir/bin"
  mkdir -p "$out"
  flags=(-std=c++20 -O2 -I"$here/include" -I"$here/cuda" -I"$here/tests/cuda" -I"$build/carry"
         -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr)
  nvcc "${flags[@]}" "$here/tests/test_main.cpp" "$here/tests/cuda/test_device.cu" -o "$out/test_cuda_device" >>"$logdir/build.log" 2>&1 &
  nvcc "${flags[@]}" "$here/tests/test_main.cpp" "$here/tests/cuda/test_gemm_checks.cu" -o "$out/test_cuda_gemm_checks" -lcublasLt >>"$logdir/build.log" 2>&1 &
  nvcc "${flags[@]}" "$here/tests/test_main.cpp" "$here/tests/cuda/test_gemm_gpu.cu" -o "$out/test_cuda_gemm" -lcublasLt >>"$logdir/build.log" 2>&1 &
  nvcc "${flags[@]}" "$here/tests/test_main.cpp" "$here/tests/cuda/test_faults.cu" -o "$out/test_cuda_faults" -lcublasLt >>"$logdir/build.log" 2>&1 &
  nvcc "${flags[@]}" "$here/benchmarks/gpu/bench_gemm.cu" -o "$out/bench_gpu_gemm" -lcublasLt >>"$logdir/build.log" 2>&1 &
  wait
  bins="$out"
  bench="$out/bench_gpu_gemm"
fi

declare -A result
for t in "${tests[@]}"; do
  if [[ ! -x "$bins/$t" ]]; then result[$t]="NOT BUILT"; continue; fi
  timeout 300 "$bins/$t" --no-intro=true --duration=true >"$logdir/$t.log" 2>&1
  rc=$?
  if grep -q "SKIPPED GPU tests" "$logdir/$t.log"; then result[$t]="SKIPPED"
  elif (( rc == 0 )); then result[$t]="passed"
  else result[$t]="FAILED (rc $rc)"; fi
  result[$t]+=" $(grep -Eo 'test cases: *[0-9]+ \| *[0-9]+ passed \| *[0-9]+ failed' "$logdir/$t.log" | tail -1)"
done

if command -v cuobjdump >/dev/null && [[ -x "$bench" ]]; then
  cuobjdump --dump-sass "$bench" >"$logdir/bench.sass" 2>&1 || true
fi

bench_rc="not built"
sweep_rc="not run"
if [[ -x "$bench" ]]; then
  timeout 360 "$bench" --md "$logdir/bench.md" >"$logdir/bench.log" 2>&1
  bench_rc=$?
  # Tuning data for the defaults (tiles by M, rows per block x split-K); skipped with SWEEP=0.
  if [[ "${SWEEP:-1}" != 0 ]]; then
    timeout 180 "$bench" --sweep --md "$logdir/sweep.md" >"$logdir/sweep.log" 2>&1
    sweep_rc=$?
  fi
fi

echo
echo "== GPU: $(tail -n +2 "$logdir/gpu.txt" 2>/dev/null | head -1)   commit $(cat "$logdir/commit.txt" 2>/dev/null)"
for t in "${tests[@]}"; do printf '%-24s %s\n' "$t" "${result[$t]}"; done
echo "bench_gpu_gemm exit: $bench_rc (full log $logdir/bench.log); sweep exit: $sweep_rc ($logdir/sweep.md)"
[[ -f "$logdir/bench.md" ]] && cat "$logdir/bench.md"
echo "total $(( $(date +%s) - start )) s"
