#!/usr/bin/env bash
# Compares precisions of the language model: SmolLM2-135M-Instruct (its Q4_1 GGUF file) in fp32, native
# (the file's Q4_1 blocks), int8 and int4, all through frugal_generate. Writes llm.json, llm.md and the
# llm_*.png plots into <out-dir>, and every raw output into <out-dir>/raw.
#   benchmarks/precision/llm.sh <out-dir>
# Per precision:
#   perplexity  --perplexity TEXT --ctx 512 (llama-perplexity's method), and its difference from fp32
#   agreement   --chat --input PROMPTS --max-tokens 32 --temperature 0, one prompt per step: the share of
#               prompts whose tokens equal fp32's, and the mean share of tokens before the first difference
#   memory      weight bytes, KV bytes per token and at the model's context (--bench's output)
#   speed       --bench --n-prompt 256 --n-gen 64 --repetitions 3 (llama-bench's method) at 1 and 2 threads,
#               precisions interleaved per thread count
# fp16 and bf16 are not among them: frugal has no CPU GEMM with 16-bit weights (llm.md says so).
# Environment: FRUGAL_GENERATE (an existing frugal_generate; otherwise one is built, Release, in
# FRUGAL_PRECISION_LLM_BUILD, default build/precision-llm), JOBS (default 2), FRUGAL_GGUF_MODEL (default
# build/models/SmolLM2-135M-Instruct.Q4_1.gguf, from cmake/quickstart.sh), TEXT (default
# /usr/share/common-licenses/GPL-3, as the tests), PROMPTS (default llm_prompts.txt beside this script),
# PRECISIONS (default "fp32 native int8 int4"; fp32 first, it is the reference), THREADS (default "1 2"),
# REPS (default 3), N_PROMPT (256), N_GEN (64), MAX_TOKENS (32), PYTHON (an interpreter with matplotlib).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=benchmarks/precision/common.sh
source "$here/common.sh"
out=$(out_dir "$0" "$@")
raw=$out/raw
mkdir -p "$raw"
python=$(matplotlib_python)

model=${FRUGAL_GGUF_MODEL:-$root/build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
prompts=${PROMPTS:-$here/llm_prompts.txt}
read -r -a precisions <<<"${PRECISIONS:-fp32 native int8 int4}"
read -r -a threads <<<"${THREADS:-1 2}"
reps=${REPS:-3}
n_prompt=${N_PROMPT:-256}
n_gen=${N_GEN:-64}
max_tokens=${MAX_TOKENS:-32}
for f in "$model" "$text" "$prompts"; do
  [[ -s $f ]] || { echo "llm: $f is missing or empty (the model comes from cmake/quickstart.sh)" >&2; exit 1; }
done
[[ ${precisions[0]} == fp32 ]] || { echo "llm: PRECISIONS must start with fp32, the reference" >&2; exit 2; }

if [[ -n ${FRUGAL_GENERATE:-} ]]; then
  gen=$FRUGAL_GENERATE
  [[ -x $gen ]] || { echo "llm: FRUGAL_GENERATE=$gen is not an executable" >&2; exit 1; }
else
  build=${FRUGAL_PRECISION_LLM_BUILD:-$root/build/precision-llm}
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_ENABLE_CUDA=OFF -DFRUGAL_BUILD_TESTS=OFF \
    -DFRUGAL_BUILD_EXAMPLES=ON -DFRUGAL_BUILD_BENCHMARKS=OFF >"$build/configure.log"
  cmake --build "$build" -j "${JOBS:-2}" --target frugal_generate
  gen=$build/examples/models/frugal_generate
fi

# The machine may be shared: the load average is kept before every step, and llm.md reports it.
rm -f "$raw"/*
note_load() { echo "$1 $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw/loadavg.txt"; }
most_threads=$(printf '%s\n' "${threads[@]}" | sort -n | tail -1)
note_load start
for p in "${precisions[@]}"; do
  echo "llm: $p: perplexity, greedy generation" >&2
  note_load "perplexity-$p"
  "$gen" --model "$model" --precision "$p" --threads "$most_threads" --perplexity "$text" --ctx 512 \
    >"$raw/perplexity-$p.json"
  note_load "generate-$p"
  # One prompt per step: fp32's Eigen GEMMs round differently at other batch sizes.
  "$gen" --model "$model" --precision "$p" --threads "$most_threads" --chat --input "$prompts" \
    --max-tokens "$max_tokens" --temperature 0 --parallel 1 --stats >"$raw/generate-$p.jsonl" 2>"$raw/generate-$p.stats.json"
done
for t in "${threads[@]}"; do
  for p in "${precisions[@]}"; do
    echo "llm: $p: bench at $t thread(s)" >&2
    note_load "bench-$p-t$t"
    "$gen" --model "$model" --precision "$p" --threads "$t" --bench --n-prompt "$n_prompt" --n-gen "$n_gen" \
      --repetitions "$reps" >"$raw/bench-$p-t$t.json"
  done
done
note_load end

# Paths under the checkout are given relative to it, others by their name alone, so the results name no
# folder of the machine they ran on (the held-out text's system path excepted).
rel() { case $1 in "$root"/*) echo "${1#"$root"/}" ;; /usr/share/*) echo "$1" ;; *) basename "$1" ;; esac; }
grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|avx512_fp16|avx_vnni|amx_tile|amx_int8|amx_bf16|f16c' \
  /proc/cpuinfo | sort -u | tr '\n' ' ' >"$raw/cpu_flags.txt" || true
"$python" "$here/plot.py" --llm "$out/llm.json" --llm-raw "$raw" --out "$out" \
  --commit "$(measured_commit "$root" include examples/models benchmarks/precision)" \
  --command "benchmarks/precision/llm.sh $(rel "$out")" --cpu-model "$(cpu_model_name)" \
  --llm-setup "model=$(rel "$model")" "text=$(rel "$text")" "prompts=$(rel "$prompts")" "ctx=512" \
  "max_tokens=$max_tokens" "n_prompt=$n_prompt" "n_gen=$n_gen" "repetitions=$reps" "nproc=$(nproc)"
