#!/usr/bin/env bash
# Prints the Python of the benchmark peers' venv (onnx, onnxruntime, numpy, tokenizers, matplotlib), making it
# first when it is missing: build/venv-peer, or $VENV. Benchmark-only: CI never needs it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$root/build/venv-peer}
if ! "$venv/bin/python" -c 'import onnx, onnxruntime, numpy, tokenizers, matplotlib' 2>/dev/null; then
  echo "peer_venv: creating $venv (onnx onnxruntime numpy tokenizers matplotlib)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q onnx onnxruntime numpy tokenizers matplotlib >&2
fi
echo "$venv/bin/python"
