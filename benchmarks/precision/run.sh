#!/usr/bin/env bash
# Compares precisions: builds bench_precision (Release, its own build folder), runs it, runs the GPU
# GEMM benchmark too when a CUDA device is present, then draws the PNGs and results.md into <out-dir>.
#   benchmarks/precision/run.sh <out-dir>
# Environment: FRUGAL_PRECISION_BUILD (build folder, default build/precision), JOBS (default 2),
# GPU_MD (a bench_gpu_gemm --md table from an earlier GPU run, used instead of running it here),
# PYTHON (an interpreter with matplotlib), REPS (repetitions, default 5), MIN_TIME (seconds per
# repetition, default 0.1), FILTER (a benchmark regex).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FRUGAL_PRECISION_BUILD:-$root/build/precision}
jobs=${JOBS:-2}
reps=${REPS:-5}
min_time=${MIN_TIME:-0.1}

# shellcheck source=benchmarks/precision/common.sh
source "$here/common.sh"
out=$(out_dir "$0" "$@")
python=$(matplotlib_python)

gpu=OFF
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  gpu=AUTO
fi
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_ENABLE_CUDA=$gpu -DFRUGAL_BUILD_TESTS=OFF \
  -DFRUGAL_BUILD_EXAMPLES=OFF -DFRUGAL_BUILD_BENCHMARKS=ON >"$build/configure.log"
cmake --build "$build" -j "$jobs" --target bench_precision

gpu_md=()
if [[ -n ${GPU_MD:-} ]]; then
  # A table from an earlier GPU visit (bench_gpu_gemm --md, e.g. benchmarks/gpu/run.sh's bench.md).
  [[ -s $GPU_MD ]] || { echo "precision: GPU_MD=$GPU_MD is missing or empty" >&2; exit 1; }
  [[ $GPU_MD -ef $out/gpu.md ]] || cp "$GPU_MD" "$out/gpu.md"
  gpu_md=(--gpu "$out/gpu.md")
elif [[ $gpu == AUTO ]]; then
  if cmake --build "$build" -j "$jobs" --target bench_gpu_gemm; then
    "$build/benchmarks/gpu/bench_gpu_gemm" --md "$out/gpu.md" | tee "$out/gpu.txt" ||
      echo "precision: bench_gpu_gemm exited non-zero (see $out/gpu.txt); its table is used as far as it got" >&2
    [[ -s $out/gpu.md ]] && gpu_md=(--gpu "$out/gpu.md")
  else
    echo "precision: bench_gpu_gemm did not build; the GPU half is skipped" >&2
  fi
else
  echo "precision: no CUDA device, CPU only" >&2
fi

# Repetitions run interleaved in random order, so a burst of load from other users of a shared machine
# lands on one repetition of many benchmarks rather than on every repetition of one.
args=(--benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true --benchmark_min_time="$min_time"
  --benchmark_enable_random_interleaving=true
  --benchmark_out="$out/cpu.json" --benchmark_out_format=json)
[[ -n ${FILTER:-} ]] && args+=(--benchmark_filter="$FILTER")
"$build/benchmarks/bench_precision" "${args[@]}" | tee "$build/cpu.txt"

commit=$(measured_commit "$root" include benchmarks/precision.cmake benchmarks/precision)
cpu_model=$(cpu_model_name)
"$python" "$here/plot.py" --cpu "$out/cpu.json" "${gpu_md[@]}" --out "$out" --commit "$commit" \
  --command "benchmarks/precision/run.sh $1" --cpu-model "${cpu_model:-unknown}"
