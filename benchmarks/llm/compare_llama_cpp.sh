#!/usr/bin/env bash
# frugal's LLM path against llama.cpp on the same GGUF file, the same CPU, in one sitting. Per thread count,
# interleaved: llama-bench (pp and tg), frugal_generate --bench at each precision, and the machine's read
# bandwidth; then perplexity of both on the same text, and load time and peak RSS of a minimal run of each.
# Writes a markdown report to stdout (and OUT/report.md) and every raw output and OUT/summary.json to OUT.
#
#   benchmarks/llm/compare_llama_cpp.sh --llama-bin DIR --frugal-bin DIR --model FILE.gguf [options]
#     --llama-bin DIR      llama.cpp's tools (llama-bench, llama-perplexity; llama-completion for the load
#                          run when present, else llama-bench -p 0 -n 1): benchmarks/llm/setup_peer.sh prints it
#     --frugal-bin DIR     a build folder holding frugal_generate and bench_read_bandwidth (searched below it)
#     --model FILE         the GGUF file both engines run
#     --text FILE          perplexity text (default /usr/share/common-licenses/GPL-3)
#     --repetitions R      llama-bench -r and frugal --repetitions (default 5); also the timed load runs
#     --threads "1 2"      thread counts of the speed runs
#     --n-prompt N         prompt tokens of the prefill test (default 512)
#     --n-gen N            generated tokens of the decode test (default 128)
#     --ctx N              perplexity context (default 512; the text must hold at least 2N tokens)
#     --ppl-threads N      threads of the perplexity runs (default 2)
#     --precisions "..."   frugal's precisions (default "native fp32 int8 int4"; the first is the headline)
#     --bandwidth-bytes L  buffer sizes of bench_read_bandwidth (default 512M,2G; the largest is the ceiling)
#     --out DIR            raw outputs (default build/llm-compare)
#     --llama-only         run llama.cpp's half and the bandwidth only (no frugal_generate needed)
# Exits non-zero, naming the step, when a tool is missing or any run fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

die() {
  echo "compare_llama_cpp: $*" >&2
  exit 1
}

llama_bin= frugal_bin= model= text=/usr/share/common-licenses/GPL-3 reps=5 threads="1 2" n_prompt=512 n_gen=128
ctx=512 ppl_threads=2 precisions="native fp32 int8 int4" bw_bytes=512M,2G out=$root/build/llm-compare llama_only=0
while (($#)); do
  case $1 in
    --llama-only) llama_only=1; shift; continue ;;
    -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
  (($# >= 2)) || die "$1 needs a value (see --help)"
  case $1 in
    --llama-bin) llama_bin=$2 ;;
    --frugal-bin) frugal_bin=$2 ;;
    --model) model=$2 ;;
    --text) text=$2 ;;
    --repetitions) reps=$2 ;;
    --threads) threads=$2 ;;
    --n-prompt) n_prompt=$2 ;;
    --n-gen) n_gen=$2 ;;
    --ctx) ctx=$2 ;;
    --ppl-threads) ppl_threads=$2 ;;
    --precisions) precisions=$2 ;;
    --bandwidth-bytes) bw_bytes=$2 ;;
    --out) out=$2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done

[[ -n $llama_bin ]] || die "--llama-bin DIR is required (benchmarks/llm/setup_peer.sh prints it)"
[[ -n $frugal_bin ]] || die "--frugal-bin DIR is required (a build folder with bench_read_bandwidth)"
[[ -n $model ]] || die "--model FILE.gguf is required"
[[ -f $model && -r $model ]] || die "model $model is not a readable file"
[[ -f $text && -r $text ]] || die "perplexity text $text is not a readable file"
for n in "$reps" "$n_prompt" "$n_gen" "$ctx" "$ppl_threads" $threads; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "\"$n\" is not a positive integer (--repetitions, --threads, --n-prompt, --n-gen, --ctx, --ppl-threads)"
done
[[ -n ${threads// /} ]] || die "--threads lists no thread count"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (Debian package time); it measures load time and peak RSS"
command -v python3 >/dev/null || die "python3 is missing; it parses the JSON"
model=$(realpath "$model")
text=$(realpath "$text")

tool() {
  local dir=$1 name=$2 found
  [[ -x $dir/$name && -f $dir/$name ]] && { echo "$dir/$name"; return 0; }
  found=$(find -L "$dir" -maxdepth 4 -type f -name "$name" -perm -u+x 2>/dev/null | sort | head -n 1)
  [[ -n $found ]] || return 1
  echo "$found"
}
[[ -d $llama_bin ]] || die "--llama-bin $llama_bin is not a folder"
[[ -d $frugal_bin ]] || die "--frugal-bin $frugal_bin is not a folder"
llama_bench=$llama_bin/llama-bench
llama_ppl=$llama_bin/llama-perplexity
[[ -x $llama_bench ]] || die "$llama_bench is missing or not executable"
[[ -x $llama_ppl ]] || die "$llama_ppl is missing or not executable"
llama_load=
[[ -x $llama_bin/llama-completion ]] && llama_load=$llama_bin/llama-completion
bandwidth=$(tool "$frugal_bin" bench_read_bandwidth) ||
  die "bench_read_bandwidth not found under $frugal_bin (cmake --build DIR --target bench_read_bandwidth)"
generate=
if ((!llama_only)); then
  generate=$(tool "$frugal_bin" frugal_generate) ||
    die "frugal_generate not found under $frugal_bin (cmake --build DIR --target frugal_generate), or pass --llama-only"
fi

mkdir -p "$out"
out=$(realpath "$out")
raw=$out/raw
rm -rf "$raw"
mkdir -p "$raw"

# run NAME CMD...: stdout to raw/NAME.out, stderr to raw/NAME.err, with /usr/bin/time's wall seconds and
# peak RSS (KiB) in raw/NAME.time. Any failure stops the comparison with the command and its stderr's tail.
run() {
  local name=$1
  shift
  echo "compare_llama_cpp: $name" >&2
  printf '%q ' "$@" >"$raw/$name.cmd"
  local rc=0
  /usr/bin/time -o "$raw/$name.time" -f '%e %M' "$@" <"/dev/null" >"$raw/$name.out" 2>"$raw/$name.err" || rc=$?
  if ((rc != 0)); then
    echo "compare_llama_cpp: step $name failed with exit $rc: $(cat "$raw/$name.cmd")" >&2
    ((rc == 132)) && echo "compare_llama_cpp: exit 132 is SIGILL: an instruction this CPU or VM refuses (llama.cpp built with AMX? see setup_peer.sh)" >&2
    tail -n 15 "$raw/$name.err" >&2
    exit 1
  fi
}

cut -d' ' -f1-3 /proc/loadavg >"$raw/loadavg_before"
date -u +%Y-%m-%dT%H:%M:%SZ >"$raw/started"
lscpu >"$raw/lscpu.txt"
grep -m1 -E '^flags' /proc/cpuinfo >"$raw/cpu_flags.txt"
nproc >"$raw/nproc"
git -C "$root" rev-parse --short HEAD >"$raw/frugal_commit" 2>/dev/null || echo unknown >"$raw/frugal_commit"
"$llama_bench" --version >"$raw/llama_version" 2>&1 || true
printf '%s\n' "$model" >"$raw/model"
printf '%s\n' "$text" >"$raw/text"
{
  echo "threads=$threads"
  echo "repetitions=$reps"
  echo "n_prompt=$n_prompt"
  echo "n_gen=$n_gen"
  echo "ctx=$ctx"
  echo "ppl_threads=$ppl_threads"
  echo "precisions=$([[ $llama_only == 1 ]] || echo "$precisions")"
  echo "bandwidth_bytes=$bw_bytes"
  echo "llama_load_tool=$(basename "${llama_load:-$llama_bench}")"
} >"$raw/settings"

# Speed, interleaved per thread count so both engines and the bandwidth see the same machine state.
for t in $threads; do
  run "llama_bench_t$t" "$llama_bench" -m "$model" -p "$n_prompt" -n "$n_gen" -t "$t" -r "$reps" -o json
  if ((!llama_only)); then
    for p in $precisions; do
      run "frugal_bench_${p}_t$t" "$generate" --model "$model" --precision "$p" --threads "$t" --bench \
        --n-prompt "$n_prompt" --n-gen "$n_gen" --repetitions "$reps"
    done
  fi
  run "bandwidth_t$t" "$bandwidth" --threads "$t" --bytes "$bw_bytes"
done

# Perplexity on the same text and context.
run llama_ppl "$llama_ppl" -m "$model" -f "$text" -c "$ctx" -t "$ppl_threads"
if ((!llama_only)); then
  for p in $precisions; do
    run "frugal_ppl_$p" "$generate" --model "$model" --precision "$p" --perplexity "$text" --ctx "$ctx" \
      --threads "$ppl_threads"
  done
fi

# Load time and peak RSS of a minimal run (one token), the file already in the page cache: one untimed run
# of each engine first, then the timed ones interleaved.
llama_min() {
  if [[ -n $llama_load ]]; then
    # -c: a context as small as the perplexity's, so the KV cache does not default to the model's 8192.
    run "$1" "$llama_load" -m "$model" -p hi -n 1 -no-cnv -c "$ctx" -t "$ppl_threads" --no-warmup
  else
    run "$1" "$llama_bench" -m "$model" -p 0 -n 1 -r 1 -t "$ppl_threads" -o json
  fi
}
frugal_min() {
  run "$1" "$generate" --model "$model" --precision "$2" --threads "$ppl_threads" --prompt hi --max-tokens 1 --stats
}
llama_min llama_load_warm
((llama_only)) || frugal_min frugal_load_warm "${precisions%% *}"
for ((i = 1; i <= reps; ++i)); do
  llama_min "llama_load_$i"
  if ((!llama_only)); then
    for p in $precisions; do frugal_min "frugal_load_${p}_$i" "$p"; done
  fi
done

cut -d' ' -f1-3 /proc/loadavg >"$raw/loadavg_after"
date -u +%Y-%m-%dT%H:%M:%SZ >"$raw/finished"

python3 "$here/compare_report.py" "$raw" "$out/summary.json" | tee "$out/report.md"
echo "compare_llama_cpp: raw outputs in $raw, summary in $out/summary.json" >&2
