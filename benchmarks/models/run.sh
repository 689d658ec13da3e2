#!/usr/bin/env bash
# MiniLM precision benchmark, frugal against onnxruntime, in one sitting: builds frugal_embed (release
# preset), exports the ONNX peer (fp32, and int8 by quantize_dynamic), embeds the 220 fixture sentences
# with every frugal precision and both ORT precisions at --batch 32 on 1 and 2 threads, and writes
# results/minilm.md, results/minilm.png and results/minilm.json.
#   benchmarks/models/run.sh [<out-dir>]          (default benchmarks/models/results)
# Environment: MODEL (model directory, default build/models/all-MiniLM-L6-v2), VENV (the peer's venv,
# default build/venv-peer, created when missing), WORK (scratch folder, default build/models-bench),
# REPS (frugal processes per precision and thread count, best taken; default 3), PEER_REPS (timed ORT
# passes after a warm-up, best taken; default 3), INPUT_ORDER (1: also time ORT batching in input order
# at 2 threads, one pass; default 1), JOBS (build parallelism, default 2), PRECISIONS (frugal's, space
# separated), FRUGAL_MAX_CPU_ISA (caps frugal's kernels, e.g. avx2 to time an AVX2-only CPU's paths).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
model=${MODEL:-$root/build/models/all-MiniLM-L6-v2}
venv=${VENV:-$root/build/venv-peer}
work=${WORK:-$root/build/models-bench}
reps=${REPS:-3}
peer_reps=${PEER_REPS:-3}
jobs=${JOBS:-2}
fixture=$root/tests/models/fixtures/embeddings.jsonl
calibration=$root/tests/models/fixtures/calibration.txt
precisions=(${PRECISIONS:-fp32 fp16 bf16 int8 int8-per-channel int8-per-tensor int8-7bit int4})
threads=(1 2)
batch=32

for f in config.json model.safetensors vocab.txt tokenizer.json; do
  [[ -s $model/$f ]] || { echo "models: $model/$f is missing (see benchmarks/models/README.md)" >&2; exit 1; }
done

# The peer's Python packages live in a venv of their own; nothing here is needed by CI.
py=$(VENV=$venv "$root/benchmarks/peer_venv.sh")

# frugal_embed, release preset.
(cd "$root" && cmake --preset release >/dev/null && cmake --build --preset release -j "$jobs" --target frugal_embed)
embed=
for candidate in "$root/build/release/examples/models/frugal_embed" "$root/build/release/examples-models/frugal_embed"; do
  [[ -x $candidate ]] && { embed=$candidate; break; }
done
[[ -n $embed ]] || { echo "models: frugal_embed not found under build/release" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "$load_start" >"$work/loadavg_start"
date -u +%Y-%m-%dT%H:%M:%SZ >"$work/started"

# The sentences: the fixture's texts, one per line. One fixture line is whitespace only and holds '\n'
# and '\r'; they become spaces, which tokenize the same (to nothing).
"$py" - "$fixture" "$work/sentences.txt" <<'EOF'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8", newline="\n") as o:
    for line in f:
        o.write(json.loads(line)["text"].replace("\r", " ").replace("\n", " ") + "\n")
EOF

# The peer's graphs, checked against sentence-transformers' embeddings.
"$py" "$here/peer_onnxruntime.py" build --model "$model" --out "$work" --fixture "$fixture" \
  2> >(grep -v MergeShapeInfo >&2) >"$work/ort_build.log"

# frugal: every precision, 1 and 2 threads, REPS processes each (each writes the same embeddings file).
for p in "${precisions[@]}"; do
  for t in "${threads[@]}"; do
    for ((r = 1; r <= reps; ++r)); do
      "$embed" --model "$model" --precision "$p" --input "$work/sentences.txt" --output "$work/frugal_${p}_t${t}.jsonl" \
        --batch "$batch" --threads "$t" --calibration "$calibration" --stats 2>"$work/frugal_${p}_t${t}_r${r}.log"
      cat "$work/frugal_${p}_t${t}_r${r}.log" >&2
    done
  done
done

# onnxruntime: fp32 and int8, 1 and 2 threads, batches formed longest-first (sentence-transformers'
# order); and, as a side figure, in input order at 2 threads.
for p in fp32 int8; do
  for t in "${threads[@]}"; do
    "$py" "$here/peer_onnxruntime.py" run --model "$model" --onnx "$work/ort_$p.onnx" --input "$work/sentences.txt" \
      --output "$work/ort_${p}_length_t${t}.jsonl" --threads "$t" --batch "$batch" --reps "$peer_reps" \
      --order length --json "$work/ort_${p}_length_t${t}.json" 2> >(grep -v MergeShapeInfo >&2)
  done
  if [[ ${INPUT_ORDER:-1} == 1 ]]; then
    "$py" "$here/peer_onnxruntime.py" run --model "$model" --onnx "$work/ort_$p.onnx" --input "$work/sentences.txt" \
      --output "$work/ort_${p}_input_t2.jsonl" --threads 2 --batch "$batch" --reps 1 \
      --order input --json "$work/ort_${p}_input_t2.json" 2> >(grep -v MergeShapeInfo >&2)
  fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
echo "$load_end" >"$work/loadavg_end"

cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2-)
isa=
for f in avx2 avx512f avx512_vnni avx_vnni amx_int8; do
  [[ " $flags " == *" $f "* ]] && isa+="$f "
done
isa=${isa% }
echo "models: CPU ${cpu_model:-unknown}; ISA flags present: ${isa:-none of avx2 avx512f avx512_vnni avx_vnni amx_int8}" >&2
[[ -n ${FRUGAL_MAX_CPU_ISA:-} ]] && echo "models: frugal capped at FRUGAL_MAX_CPU_ISA=$FRUGAL_MAX_CPU_ISA" >&2

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain -- include examples/models benchmarks/models ':!benchmarks/models/results' \
  2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
[[ -z $dirty ]] || commit="$commit, plus uncommitted ${dirty% }"
"$py" "$here/report.py" --work "$work" --out "$out" --fixture "$fixture" --cpu-model "${cpu_model:-unknown}" \
  --isa "$isa" --load-start "$load_start" --load-end "$load_end" --nproc "$(nproc)" --commit "$commit" \
  --command "${FRUGAL_MAX_CPU_ISA:+FRUGAL_MAX_CPU_ISA=$FRUGAL_MAX_CPU_ISA }${PRECISIONS:+PRECISIONS=\"$PRECISIONS\" }${INPUT_ORDER:+INPUT_ORDER=$INPUT_ORDER }benchmarks/models/run.sh${1:+ $1}" --reps "$reps" --peer-reps "$peer_reps" --batch "$batch"
