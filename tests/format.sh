#!/usr/bin/env bash
# Checks that every C++ and CUDA file in the repository is formatted with the checked-in .clang-format
# (Debian's clang-format 14). With --fix, formats them instead.
#   tests/format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu' '*.h')
if [[ ${1:-} == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "$0: the files above are not formatted; run tests/format.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says"
