#!/usr/bin/env bash
# The result cache's 2-thread / 1-thread throughput on the 90/10 Zipf(0.99) mix (and on the same
# reads without the writes, and on the mix over 1024 cached keys), over several runs
# of bench_cache. On a shared VM one run says little: each run interleaves the repetitions of all the
# variants at random (so that drift in the machine's speed falls on all of them alike), each variant's
# ratio is taken from its medians, and the last lines give the median, lowest and highest ratio over
# the runs. The private-per-thread variant shares nothing between its threads: its ratio is what the
# machine allows for this work at that moment.
#
# With a second bench_cache (e.g. one built against an earlier cache header), each run runs both, one
# after the other, and their variants are named a/... and b/...: an A/B comparison in alternation.
# The summary gives, per variant, the median, lowest and highest ratio and the median times at 1 and 2
# threads, so that a ratio raised by a slower single thread shows as such.
#
#   benchmarks/cache/scaling.sh [path/to/bench_cache] [runs] [path/to/other/bench_cache]
set -euo pipefail
bench=${1:-build/cache-rel/benchmarks/bench_cache}
runs=${2:-6}
other=${3:-}
[[ -x "$bench" ]] || { echo "scaling.sh: no executable bench_cache at '$bench'" >&2; exit 2; }
[[ -z "$other" || -x "$other" ]] || { echo "scaling.sh: no executable bench_cache at '$other'" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "scaling.sh: runs must be a positive integer, got '$runs'" >&2; exit 2; }
filter='(mix90_10|reads)_zipf0.99(_1k_keys)?/(frugal_lru|frugal_lru_visit|frugal_lru_private_per_thread|frugal_lru_visit_private_per_thread|reference_map_list_mutex)/'
all=$(mktemp)
trap 'rm -f "$all"' EXIT
one_run() {  # bench run prefix
  "$1" --benchmark_filter="$filter" --benchmark_min_time=0.1 --benchmark_repetitions=8 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
    --benchmark_format=csv 2>/dev/null |
    awk -F, -v run="$2" -v prefix="$3" '$1 ~ /_median"$/ {
      name = $1; gsub(/"/, "", name); sub(/^mix90_10_zipf0\.99_1k_keys\//, "mix_1k_keys/", name); sub(/^mix90_10_zipf0\.99\//, "mix/", name); sub(/^reads_zipf0\.99\//, "reads/", name); sub(/\/real_time/, "", name)
      split(name, p, "/threads:"); t = p[2]; sub(/_median$/, "", t)
      print run, prefix p[1], t, $3, $7 }' >>"$all"
}
for ((r = 1; r <= runs; ++r)); do
  if [[ -z "$other" ]]; then
    one_run "$bench" "$r" ""
  else
    one_run "$bench" "$r" "a/"
    one_run "$other" "$r" "b/"
  fi
done
[[ -z "$other" ]] || echo "a = $bench, b = $other"
awk '
  function median(a, m,   i, j, x) {  # sorts a[1..m] in place
    for (i = 2; i <= m; ++i) { x = a[i]; j = i - 1; while (j >= 1 && a[j] > x) { a[j + 1] = a[j]; --j }; a[j + 1] = x }
    return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  { key = $1 " " $2; ns[key, $3] = $4; ops[key, $3] = $5; variants[$2] = 1; seen[key] = 1 }
  END {
    printf "%-4s %-36s %10s %10s %8s\n", "run", "variant", "1t ns/op", "2t ns/op", "2t/1t"
    for (key in seen) {
      split(key, k, " ")
      if (!((key, 1) in ops) || !((key, 2) in ops)) continue
      ratio = ops[key, 2] / ops[key, 1]
      line[k[1] + 0, k[2]] = sprintf("%-4s %-36s %10.1f %10.1f %7.2fx", k[1], k[2], ns[key, 1], ns[key, 2], ratio)
      c = ++n[k[2]]; r[k[2], c] = ratio; t1[k[2], c] = ns[key, 1]; t2[k[2], c] = ns[key, 2]
      if (k[1] + 0 > last) last = k[1] + 0
    }
    for (i = 1; i <= last; ++i) for (v in variants) if ((i, v) in line) print line[i, v]
    print ""
    printf "%-38s %5s %8s %8s %8s %10s %10s\n", "variant", "runs", "median", "lowest", "highest", "1t ns/op", "2t ns/op"
    for (v in variants) {
      m = n[v]
      for (i = 1; i <= m; ++i) { s[i] = r[v, i]; a1[i] = t1[v, i]; a2[i] = t2[v, i] }
      med = median(s, m)
      printf "%-38s %5d %7.2fx %7.2fx %7.2fx %10.1f %10.1f\n", v, m, med, s[1], s[m], median(a1, m), median(a2, m) | "sort"
    }
    close("sort")
  }' "$all"
