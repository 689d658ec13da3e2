#!/usr/bin/env bash
# Before/after of the benchmarks of record (batcher submit, cache hit, int8 GEMM) for two builds of the
# release preset, interleaved in one sitting: ROUNDS rounds, each running both builds' binaries back to back
# (the order alternates), every benchmark with 5 repetitions; prints each benchmark's median time per round
# and the after/before ratio of the medians (above 1: after is slower).
#   benchmarks/tidy/ab.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]
# e.g. git worktree add /tmp/before <rev>; cmake --preset release (in each); build bench_batcher bench_cache
# bench_quant; then this script with the two build/release folders.
set -euo pipefail
before=$1 after=$2 rounds=${3:-3}
declare -A filter=(
  [bench_batcher]='BM_(frugal_future|frugal_callback|naive_queue)/producers:1/batch:32/'
  [bench_cache]='^hit/(frugal_lru|frugal_lru_visit|reference_map_list_mutex)/10000$'
  [bench_quant]='BM_gemm_w8a8/m:(16|64)/nk:4096/path:[2356]/reduce:0'
)
out=$(mktemp -d)
for r in $(seq 1 "$rounds"); do
  order=("$before" "$after")
  ((r % 2 == 0)) && order=("$after" "$before")
  for dir in "${order[@]}"; do
    tag=$([[ $dir == "$before" ]] && echo before || echo after)
    for b in bench_batcher bench_cache bench_quant; do
      "$dir/benchmarks/$b" --benchmark_filter="${filter[$b]}" --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null >"$out/$tag.$b.$r.json"
    done
  done
done
python3 - "$out" "$rounds" <<'PY'
import glob, json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def medians(tag, r):
    m = {}
    for f in glob.glob(f"{out}/{tag}.*.{r}.json"):
        for b in json.load(open(f))["benchmarks"]:
            if b.get("aggregate_name") == "median":
                m[b["run_name"]] = b["real_time"]
    return m
names = sorted(medians("before", 1))
print(f"{'benchmark':70s} " + " ".join(f"r{r} ratio" for r in range(1, rounds + 1)) + "   median ratio")
for n in names:
    ratios = []
    for r in range(1, rounds + 1):
        b, a = medians("before", r).get(n), medians("after", r).get(n)
        if b and a:
            ratios.append(a / b)
    print(f"{n:70s} " + " ".join(f"{x:8.3f}" for x in ratios) + f"   {statistics.median(ratios):8.3f}")
PY
