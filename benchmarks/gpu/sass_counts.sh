#!/usr/bin/env bash
# Per-kernel instruction counts from a CUDA binary's SASS, as a markdown table: the tensor-core instructions
# (IMMA/HMMA for mma.sync, IGMMA/HGMMA/QGMMA for wgmma) and local-memory traffic (LDL/STL: spills or arrays
# indexed at run time). Instead of the full dump, which is tens of MB.
#   benchmarks/gpu/sass_counts.sh <cuobjdump> <binary>
set -euo pipefail
cuobjdump=$1
bin=$2
demangle=cat
command -v c++filt >/dev/null && demangle=c++filt
echo "| arch | kernel | IMMA | HMMA | IGMMA | HGMMA | QGMMA | LDL | STL |"
echo "|---|---|---|---|---|---|---|---|---|"
"$cuobjdump" --dump-sass "$bin" | awk '
  function flush() {
    if (fn != "") printf "| %s | %s | %d | %d | %d | %d | %d | %d | %d |\n", arch, fn, c["IMMA"], c["HMMA"], c["IGMMA"], c["HGMMA"], c["QGMMA"], c["LDL"], c["STL"]
    split("", c)
  }
  /^[ \t]*arch = / { arch = $3 }
  /Function : / { flush(); fn = $3 }
  /\/\*[0-9a-f]+\*\// {
    line = $0
    sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)   # drop the address
    sub(/^@!?U?P[T0-9]+[ \t]+/, "", line)      # and a predicate
    split(line, w, /[ .;]/)
    op = w[1]
    if (op == "IMMA" || op == "HMMA" || op == "IGMMA" || op == "HGMMA" || op == "QGMMA" || op == "LDL" || op == "STL") c[op]++
  }
  END { flush() }' | $demangle | sed -e 's/frugal::v0::cuda::kernel:://g; s/frugal::v0::cuda:://g; s/(\(gemm_tn_params\|weight_only_params\|quantize_rows_params\))//; s/^\(| [^|]*| \)void /\1/'
