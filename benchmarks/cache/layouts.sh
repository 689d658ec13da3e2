#!/usr/bin/env bash
# Times the 1M-entry cache hit of two versions of the headers under several memory layouts: the
# process's environment is padded by 0, 500, 1000, ... bytes, which moves its stack and with it where
# the program's data lands, so that a difference that follows the layout and not the version shows.
# Each layout runs bench_cache's hit/frugal_lru/1000000 from both builds, then the same loop alone
# (hit_alone.cpp, built here against each version's include/ with the same flags).
#
#   benchmarks/cache/layouts.sh BASE_TREE BASE_BUILD CHANGE_TREE CHANGE_BUILD [LAYOUTS]
#
# A tree is a checkout (a `git worktree add`), a build its Release build with bench_cache built.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
base_tree=$1 base_build=$2 change_tree=$3 change_build=$4 layouts=${5:-8}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in base change; do
  tree_var=${v}_tree build_var=${v}_build
  [ -x "${!build_var}/benchmarks/bench_cache" ] || { echo "layouts.sh: no ${!build_var}/benchmarks/bench_cache" >&2; exit 2; }
  [ -f "${!tree_var}/include/frugal/cache.hpp" ] || { echo "layouts.sh: no ${!tree_var}/include/frugal/cache.hpp" >&2; exit 2; }
  c++ -std=c++20 -O3 -DNDEBUG -I"${!tree_var}/include" "$here/hit_alone.cpp" -lxxhash -o "$tmp/alone_$v"
done
bench() { "$1/benchmarks/bench_cache" --benchmark_filter='^hit/frugal_lru/1000000$' --benchmark_min_time=0.3 2>/dev/null |
  awk '/^hit\//{print $2}'; }
alone() { "$1" 1000000 3 | awk '{print $2}'; }
printf '%-8s %12s %12s %12s %12s\n' pad bench_base bench_change alone_base alone_change
sum_b=0 sum_a=0
for ((i = 0; i < layouts; ++i)); do
  pad=$((i * 500))
  p=$(head -c "$pad" /dev/zero | tr '\0' x)
  bb=$(FRUGAL_LAYOUT_PAD=$p bench "$base_build") bc=$(FRUGAL_LAYOUT_PAD=$p bench "$change_build")
  ab=$(FRUGAL_LAYOUT_PAD=$p alone "$tmp/alone_base") ac=$(FRUGAL_LAYOUT_PAD=$p alone "$tmp/alone_change")
  printf '%-8s %12s %12s %12s %12s\n' "$pad" "$bb" "$bc" "$ab" "$ac"
  sum_b=$(awk -v s="$sum_b" -v b="$bb" -v c="$bc" 'BEGIN{print s + log(c / b)}')
  sum_a=$(awk -v s="$sum_a" -v b="$ab" -v c="$ac" 'BEGIN{print s + log(c / b)}')
done
awk -v b="$sum_b" -v a="$sum_a" -v n="$layouts" \
  'BEGIN{printf "geomean change/base over %d layouts: bench_cache %.3f, alone %.3f\n", n, exp(b / n), exp(a / n)}'
