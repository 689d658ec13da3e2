#!/usr/bin/env bash
# Builds, on the build machine, everything benchmarks/gpu/run.sh runs on the GPU machine, into one small folder
# that travels with the device command (carry ["build/gpu-carry"]):
#   build/gpu-carry/bin/      the GPU test binaries and bench_gpu_gemm (sm_80 + sm_90a, Release)
#   build/gpu-carry/doctest/  doctest.h, for run.sh's nvcc-only rebuild should a binary not start there
#   build/gpu-carry/eigen3/   Eigen's headers, for the same rebuild (test_weights includes the host quant toolkit)
#   build/gpu-carry/sass_counts.md   per-kernel counts of IMMA/HMMA/IGMMA/HGMMA/QGMMA and LDL/STL
#   build/gpu-carry/commit.txt, needed.txt (each binary's NEEDED libraries: only the CUDA toolkit's and libc's)
# libstdc++ and libgcc are linked statically, so a binary needs nothing of Debian's beyond glibc (2.36 here,
# older than any current CUDA image's). Usage: benchmarks/gpu/build.sh [build dir, default build/gpu]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/gpu}
carry=$here/build/gpu-carry
targets=(test_cuda_device test_cuda_fragments test_cuda_gemm_checks test_cuda_gemm test_cuda_faults test_cuda_weights
  test_cuda_pool bench_gpu_gemm)

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_ENABLE_CUDA=ON -DFRUGAL_BUILD_TESTS=ON \
  -DFRUGAL_BUILD_BENCHMARKS=ON -DFRUGAL_BUILD_EXAMPLES=OFF \
  "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc -Wl,--as-needed" >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/doctest"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [[ -n "$f" ]] || { echo "build.sh: $t was not built" >&2; exit 1; }
  cp "$f" "$carry/bin/"
done
cp "$build/carry/doctest/doctest.h" "$carry/doctest/"
rm -rf "$carry/eigen3"
cp -r /usr/include/eigen3 "$carry/eigen3"
git -C "$here" rev-parse HEAD >"$carry/commit.txt" 2>/dev/null || echo unknown >"$carry/commit.txt"
git -C "$here" status --porcelain -- cuda tests/cuda benchmarks/gpu | grep -q . && echo "(with uncommitted changes)" >>"$carry/commit.txt" || true

# Every binary may need only these: the CUDA runtime and cuBLASLt from the toolkit, and glibc's own.
allowed='^(libcudart\.so\.13|libcublasLt\.so\.13|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
: >"$carry/needed.txt"
bad=0
for f in "$carry"/bin/*; do
  libs=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "$(basename "$f"): $(echo $libs)" >>"$carry/needed.txt"
  for l in $libs; do
    [[ "$l" =~ $allowed ]] || { echo "build.sh: $(basename "$f") needs $l, which a bare CUDA machine lacks" >&2; bad=1; }
  done
  glibc=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "  newest glibc symbol: $glibc" >>"$carry/needed.txt"
done
(( bad == 0 )) || exit 1

# Per-kernel tensor-core and local-memory instruction counts: cuobjdump and nvdisasm from the toolkit, or
# PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (13.2; 13.0 is not on PyPI) in build/venv:
#   python3 -m venv build/venv && build/venv/bin/pip install "nvidia-cuda-cuobjdump==13.2.*" "nvidia-cuda-nvdisasm==13.2.*"
cuobjdump=$(command -v cuobjdump || ls "$here"/build/venv/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2>/dev/null | head -1 || true)
if [[ -n "$cuobjdump" ]]; then
  export PATH="$(dirname "$cuobjdump"):$PATH"
  "$here/benchmarks/gpu/sass_counts.sh" "$cuobjdump" "$carry/bin/bench_gpu_gemm" >"$carry/sass_counts.md"
else
  echo "cuobjdump not found: no SASS counts (see the pip line above)" >"$carry/sass_counts.md"
fi
du -sh "$carry"
