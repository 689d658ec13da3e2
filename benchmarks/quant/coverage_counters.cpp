// gemm_ggml's AVX-512 VNNI path on two threads under gcc's coverage counters: how many of 3,000 calls of a
// 329 x 576 x 576 Q4_1 product differ from the one-thread result, and how long they take. Built four ways by
// coverage_counters.sh (no coverage; --coverage; --coverage -fprofile-update=atomic; --coverage
// -fno-tree-loop-im, the dev preset's): it measures why the dev preset turns off loop-invariant motion
// instead of making the counters atomic (issue 60).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;
namespace d = frugal::quant::detail;

int main() {
  if (!q::is_supported(q::simd_path::avx512_vnni)) {
    std::puts("coverage_counters: this CPU has no AVX-512 VNNI; nothing to measure");
    return 77;
  }
  std::mt19937 rng(1);
  q::thread_pool pool(2);
  const std::size_t m = 329, n = 576, k = 576, kb = k / 32, bb = 20;
  std::vector<std::byte> raw(n * kb * bb);
  for (auto& b : raw) b = std::byte(rng() & 0xff);
  for (std::size_t i = 0; i < n * kb; ++i) {
    const std::uint16_t h = d::float_to_half_bits(0.01f);
    std::memcpy(&raw[i * bb], &h, 2);
    std::memcpy(&raw[i * bb + 2], &h, 2);
  }
  const auto w = q::make_ggml_weights(q::ggml_format::q4_1, raw, n, k);
  std::vector<float> x(m * k);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> ref(m * n), out(m * n);
  q::gemm_ggml(x, m, w, ref, {.path = q::simd_path::avx512_vnni});
  int wrong = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < 3000; ++it) {
    q::gemm_ggml(x, m, w, out, {.path = q::simd_path::avx512_vnni, .threads = &pool});
    wrong += std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) != 0;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrong calls %d of 3000, %.2f s\n", wrong, s);
  return 0;
}
