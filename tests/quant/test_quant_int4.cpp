// The W4A16 kernels (AVX2 and AVX-512, nibbles unpacked in registers, the zero point taken out of the
// inner loop) against the portable path, and quantize_int4's one-pass layout against the generic quantize.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

std::vector<q::simd_path> simd_paths() {
  return frugal_test::cpu_paths({q::simd_path::avx2, q::simd_path::avx512});
}

// Random nibbles, scales and zero points, the extremes included: every nibble value and zero point
// 0 and 15 must come out right, which quantizing random data would rarely hit.
q::int4_weights random_int4(std::size_t n, std::size_t k, int g, bool symmetric, std::mt19937& rng) {
  q::int4_weights w;
  w.rows = n;
  w.cols = k;
  w.group_size = g;
  w.symmetric = symmetric;
  w.packed.resize(n * k / 2);
  for (auto& b : w.packed) b = static_cast<std::uint8_t>(rng() % 256);
  w.packed[0] = 0x88;  // -8, -8 when symmetric
  w.packed.back() = 0x77;
  const std::size_t groups = n * k / static_cast<std::size_t>(g);
  for (std::size_t i = 0; i < groups; ++i)
    w.scales.push_back(q::half(0.001f + static_cast<float>(rng() % 1000) / 5e4f));
  if (!symmetric)
    for (std::size_t i = 0; i < groups; ++i)
      w.zero_points.push_back(static_cast<std::uint8_t>(i == 0 ? 0 : i == 1 ? 15 : rng() % 16));
  return w;
}

}  // namespace

TEST_CASE("quant int4: the AVX2 and AVX-512 W4A16 kernels match the portable path on odd shapes") {
  std::mt19937 rng(25);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct shape {
    std::size_t k;
    int g;
  };
  for (shape s : {shape{32, 32}, shape{96, 32}, shape{64, 64}, shape{192, 64}, shape{128, 128},
                  shape{384, 128}, shape{256, 256}})
    for (std::size_t m : {1u, 2u, 3u, 17u})
      for (std::size_t n : {1u, 3u, 5u, 33u})
        for (bool sym : {true, false}) {
          CAPTURE(s.k);
          CAPTURE(s.g);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(sym);
          const auto w = random_int4(n, s.k, s.g, sym, rng);
          std::vector<float> x(m * s.k), bias(n);
          for (auto& v : x) v = nd(rng);
          for (auto& v : bias) v = nd(rng);
          std::vector<float> ref(m * n);
          q::gemm_weight_only(x, m, w, ref, {.bias = bias, .path = q::simd_path::portable});
          // The bound: fp32 rounding of sum |x| |w| (the correction term -zp * xsum at most doubles it).
          std::vector<float> mag(m * n, 0.0f);
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j)
              for (std::size_t t = 0; t < s.k; ++t)
                mag[i * n + j] +=
                    std::abs(x[i * s.k + t]) *
                    (std::abs(w.dequantized(j, t)) +
                     16.0f * static_cast<float>(w.scales[j * (s.k / static_cast<std::size_t>(s.g)) +
                                                         t / static_cast<std::size_t>(s.g)]));
          for (auto path : simd_paths()) {
            CAPTURE(q::to_string(path));
            std::vector<float> out(m * n);
            q::gemm_weight_only(x, m, w, out, {.bias = bias, .path = path});
            for (std::size_t e = 0; e < m * n; ++e)
              CHECK(std::abs(out[e] - ref[e]) <= 1e-5f * (1.0f + mag[e]));
            // Every row is what the same kernel gives that row alone: blocks of M change no bits.
            for (std::size_t i = 0; i < m; i += 7) {
              std::vector<float> one(n);
              q::gemm_weight_only(std::span<const float>(x).subspan(i * s.k, s.k), 1, w, one,
                                  {.bias = bias, .path = path});
              for (std::size_t j = 0; j < n; ++j) CHECK(one[j] == out[i * n + j]);
            }
          }
        }
}

TEST_CASE("quant int4: the kernels are exact where fp32 is, so integer data gives integer results") {
  // x in small integers and scales of 1 keep every product and partial sum exact in fp32: all paths
  // must then give the same bits as the exact integer sum.
  std::mt19937 rng(7);
  for (bool sym : {true, false}) {
    const std::size_t m = 3, n = 7, k = 256;
    auto w = random_int4(n, k, 32, sym, rng);
    for (auto& h : w.scales) h = q::half(1.0f);
    std::vector<float> x(m * k);
    for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
    std::vector<float> exact(m * n, 0.0f);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        long long s = 0;
        for (std::size_t t = 0; t < k; ++t)
          s += static_cast<long long>(x[i * k + t]) *
               (w.value(j, t) - (sym ? 0 : w.zero_points[j * (k / 32) + t / 32]));
        exact[i * n + j] = static_cast<float>(s);
      }
    for (auto path :
         frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512})) {
      CAPTURE(q::to_string(path));
      std::vector<float> out(m * n);
      q::gemm_weight_only(x, m, w, out, {.path = path});
      CHECK(out == exact);
    }
  }
}

TEST_CASE("quant int4: quantize_int4 gives the integers and scales of the generic per-group quantize") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (bool sym : {true, false})
    for (int g : {32, 64, 128}) {
      const std::size_t rows = 5, cols = static_cast<std::size_t>(g) * 3;
      std::vector<float> x(rows * cols);
      for (auto& v : x) v = nd(rng);
      x[7] = 0.0f;
      const auto w = q::quantize_int4(x, rows, cols, {.group_size = g, .symmetric = sym});
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t gi = r * (cols / static_cast<std::size_t>(g)) + c / static_cast<std::size_t>(g);
          const float s = static_cast<float>(w.scales[gi]);
          const int zp = sym ? 0 : w.zero_points[gi];
          const int lo = sym ? -8 : 0, hi = sym ? 7 : 15;
          const int expect = std::clamp(static_cast<int>(std::nearbyint(x[r * cols + c] / s)) + zp, lo, hi);
          CHECK(w.value(r, c) == expect);
        }
    }
  std::vector<float> bad(2 * 64, 1.0f);
  bad[70] = std::nanf("");
  CHECK_THROWS_WITH_AS(q::quantize_int4(bad, 2, 64, {.group_size = 32}),
                       doctest::Contains("frugal::quant::quantize_int4: data[70] is NaN"),
                       std::invalid_argument);
}
