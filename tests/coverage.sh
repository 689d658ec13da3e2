#!/usr/bin/env bash
# Line and branch coverage of the host headers (include/frugal) under the host test suite.
#   tests/coverage.sh [build-dir]     (default build/coverage)
# Configures a Debug build with --coverage -O0 (gcc/gcov), runs ctest, and prints lcov's summary of
# include/frugal/*. The tracefile is left at <build-dir>/coverage.info (genhtml can render it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build/coverage}")
jobs=${COVERAGE_JOBS:-2}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DFRUGAL_ENABLE_CUDA=OFF -DFRUGAL_BUILD_BENCHMARKS=OFF \
  -DFRUGAL_BUILD_EXAMPLES=OFF -DCMAKE_CXX_FLAGS="--coverage -O0" -DCMAKE_EXE_LINKER_FLAGS="--coverage" >/dev/null
cmake --build "$build" -j"$jobs"
lcov --quiet --zerocounters --directory "$build"
# The packaging tests build consumer projects of their own; they add no coverage of the headers.
ctest --test-dir "$build" -j"$jobs" --output-on-failure -LE package || echo "coverage: some tests failed (see above); coverage is still reported" >&2
lcov --quiet --capture --directory "$build" --include '*/include/frugal/*' --output-file "$build/coverage.info" \
  --rc lcov_branch_coverage=1 --ignore-errors gcov,source
lcov --summary "$build/coverage.info" --rc lcov_branch_coverage=1
# Per file, so that a gap is easy to find.
lcov --list "$build/coverage.info" --rc lcov_branch_coverage=1
