#!/usr/bin/env bash
# Line and branch coverage of the public headers (include/frugal) from a build instrumented with
# FRUGAL_COVERAGE=ON (the dev preset is) whose tests have run. Fails when lines fall under the minimum.
#   tests/coverage.sh <build-dir> [min-line-percent]      (default 90)
# Writes <build-dir>/coverage.txt (per file) and <build-dir>/coverage.json (gcovr's summary).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 <build-dir> [min-line-percent]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "$1")
min=${2:-90}
if [[ -z $(find "$build" -name '*.gcda' -print -quit) ]]; then
  echo "$0: no coverage data in $build: configure it with -DFRUGAL_COVERAGE=ON and run its tests first" >&2
  exit 2
fi
# Headers are compiled into many test binaries; gcovr merges their counts per line. Branches are
# reported, not enforced: most of them are the compiler's (exception edges), not the code's.
gcovr --root "$root" --filter "$root/include/frugal/" --exclude-throw-branches --exclude-unreachable-branches \
  -j "${COVERAGE_JOBS:-2}" --gcov-ignore-parse-errors --txt "$build/coverage.txt" --json-summary "$build/coverage.json" \
  --print-summary --fail-under-line "$min" "$build"
