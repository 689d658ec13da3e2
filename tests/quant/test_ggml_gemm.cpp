// gemm_ggml on GGUF's Q4_1 and Q8_0 blocks: the repack against gguf::dequantize, the GEMM against a double
// reference, every SIMD path against the portable one, and a row's bits whatever shares its call.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "../support/requires.hpp"
#include "frugal/model/gguf.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;
namespace gguf = frugal::gguf;

namespace {

std::uint16_t half_bits(float f) { return q::detail::float_to_half_bits(f); }

void put_half(std::vector<std::byte>& raw, std::size_t at, std::uint16_t h) { std::memcpy(&raw[at], &h, 2); }

// Random blocks with the extremes: every nibble, q = -128 and 127, a zero and a subnormal scale, negative
// scales and mins.
std::vector<std::byte> random_raw(q::ggml_format f, std::size_t n, std::size_t k, std::mt19937& rng) {
  const std::size_t bb = f == q::ggml_format::q4_1 ? 20 : 34, blocks = n * k / 32;
  std::vector<std::byte> raw(blocks * bb);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (auto& b : raw) b = static_cast<std::byte>(rng() & 0xff);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::size_t at = i * bb;
    put_half(raw, at, half_bits(i % 17 == 3 ? 0.0f : i % 19 == 5 ? 3e-7f : scale(rng)));
    if (f == q::ggml_format::q4_1) put_half(raw, at + 2, half_bits(scale(rng) * 4.0f));
  }
  if (blocks > 0) {
    raw[bb - 1] = std::byte{0x80};
    raw[bb - 2] = std::byte{0x7f};
    raw[bb - 3] = std::byte{0xf0};
    raw[bb - 4] = std::byte{0x0f};
  }
  return raw;
}

std::vector<float> gguf_dequantize(q::ggml_format f, const std::vector<std::byte>& raw, std::size_t n,
                                   std::size_t k) {
  gguf::tensor_info t;
  t.name = "w";
  t.dims = {k, n};
  t.type = f == q::ggml_format::q4_1 ? gguf::ggml_type::q4_1 : gguf::ggml_type::q8_0;
  t.elements = n * k;
  t.data = std::span<const std::byte>(raw);
  return gguf::dequantize(t);
}

std::vector<float> random_x(std::size_t m, std::size_t k, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (auto& v : x) v = d(rng);
  if (x.size() >= 128) {
    std::fill(x.begin() + 32, x.begin() + 40, 0.0f);  // a block partly zero
    x[5] = 1e-40f;                                    // a subnormal
    // A block whose amax / 127 is below the smallest normal float (all zeros), and one of ties: dx = 1,
    // so x * (1 / dx) is exactly k + 0.5, which rounds to even.
    for (std::size_t j = 64; j < 96; ++j) x[j] *= 1e-37f;
    for (std::size_t j = 96; j < 128; ++j) x[j] = static_cast<float>(static_cast<int>(j) - 112) + 0.5f;
    x[127] = 127.0f;
  }
  return x;
}

std::vector<q::simd_path> runnable_paths() {
  return frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx_vnni,
                                 q::simd_path::avx512, q::simd_path::avx512_vnni, q::simd_path::amx});
}

std::vector<float> run(const std::vector<float>& x, std::size_t m, const q::ggml_weights& w,
                       q::ggml_gemm_options opt = {}) {
  std::vector<float> out(m * w.rows, -1.0f);
  q::gemm_ggml(x, m, w, out, opt);
  return out;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const q::ggml_format formats[] = {q::ggml_format::q4_1, q::ggml_format::q8_0};

}  // namespace

TEST_CASE("ggml: dequantize of the repacked weights is gguf::dequantize of the raw blocks, bit for bit") {
  std::mt19937 rng(1);
  for (auto f : formats)
    for (std::size_t n : {1u, 15u, 16u, 17u, 45u})
      for (std::size_t k : {32u, 96u, 576u}) {
        CAPTURE(to_string(f));
        CAPTURE(n);
        CAPTURE(k);
        const auto raw = random_raw(f, n, k, rng);
        const q::ggml_weights w = q::make_ggml_weights(f, raw, n, k);
        CHECK(w.format == f);
        CHECK(w.rows == n);
        CHECK(w.cols == k);
        CHECK(w.bytes() >= raw.size());
        const auto ours = q::dequantize(w), theirs = gguf_dequantize(f, raw, n, k);
        CHECK(same_bits(ours, theirs));
      }
}

// Exact inputs: x integers in [-127, 127] with 127 in every block (dx = 1, qx = x), scales 1/16 and mins
// -1/2: every product and partial sum is a multiple of 1/16 below 2^20, so the float result is exact.
TEST_CASE("ggml: gemm_ggml on exactly representable operands equals the exact sum on every path") {
  std::mt19937 rng(2);
  const std::size_t m = 5, n = 33, k = 256;
  for (auto f : formats) {
    const std::size_t bb = f == q::ggml_format::q4_1 ? 20 : 34;
    auto raw = random_raw(f, n, k, rng);
    for (std::size_t i = 0; i < n * k / 32; ++i) {
      put_half(raw, i * bb, half_bits(0.0625f));
      if (f == q::ggml_format::q4_1) put_half(raw, i * bb + 2, half_bits(-0.5f));
    }
    const auto w = q::make_ggml_weights(f, raw, n, k);
    const auto wf = q::dequantize(w);
    std::vector<float> x(m * k);
    for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 255) - 127);
    for (std::size_t b = 0; b < m * k / 32; ++b) x[b * 32 + b % 32] = (b & 1) ? 127.0f : -127.0f;
    for (auto p : runnable_paths()) {
      CAPTURE(to_string(p));
      CAPTURE(to_string(f));
      const auto out = run(x, m, w, {.path = p});
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          double ref = 0.0;
          for (std::size_t t = 0; t < k; ++t) ref += static_cast<double>(x[i * k + t]) * wf[j * k + t];
          REQUIRE(static_cast<double>(out[i * n + j]) == ref);
        }
    }
  }
}

// The bound: x = dx * qx + e with |e| <= dx / 2 (plus the rounding of 1 / dx, under 0.01 dx), so the
// quantization moves the dot by at most 0.51 * sum_b dx_b * sum_{k in b} |w_k|; each block's terms pass
// through at most 2 * KB + 4 roundings of relative 2^-24, each on a partial sum bounded by
// S = sum_k (|dw qw| + |mw|) (|x_k| + dx).
// Checks out (m x n) against the double-precision product of x and the raw weights' values (gguf's).
void check_within_bound(q::ggml_format f, std::span<const std::byte> raw, std::size_t n, std::size_t k,
                        const std::vector<float>& x, std::size_t m, const std::vector<float>& out) {
  const std::size_t kb = k / 32, bb = f == q::ggml_format::q4_1 ? 20 : 34;
  const auto wf = q::dequantize(q::make_ggml_weights(f, raw, n, k));
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double ref = 0.0, quant = 0.0, s = 0.0;
      for (std::size_t b = 0; b < kb; ++b) {
        double amax = 0.0;
        for (std::size_t t = b * 32; t < b * 32 + 32; ++t)
          amax = std::max(amax, std::fabs(static_cast<double>(x[i * k + t])));
        const double dx = amax / 127.0;
        std::uint16_t mh = 0;
        if (f == q::ggml_format::q4_1) std::memcpy(&mh, &raw[(j * kb + b) * bb + 2], 2);
        const double mw = q::detail::half_bits_to_float(mh);
        for (std::size_t t = b * 32; t < b * 32 + 32; ++t) {
          const double wv = wf[j * k + t], xv = x[i * k + t];
          ref += wv * xv;
          quant += 0.51 * dx * std::fabs(wv);
          s += (std::fabs(wv - mw) + std::fabs(mw)) * (std::fabs(xv) + dx);
        }
      }
      const double bound = quant + (2.0 * static_cast<double>(kb) + 4.0) * 0x1p-24 * s;
      CAPTURE(i);
      CAPTURE(j);
      REQUIRE(std::fabs(out[i * n + j] - ref) <= bound);
    }
}

TEST_CASE("ggml: gemm_ggml is within its derived bound of a double-precision reference") {
  std::mt19937 rng(3);
  const std::size_t m = 7, n = 40, k = 576;
  for (auto f : formats) {
    CAPTURE(to_string(f));
    const auto raw = random_raw(f, n, k, rng);
    const auto x = random_x(m, k, rng);
    check_within_bound(f, raw, n, k, x, m, run(x, m, q::make_ggml_weights(f, raw, n, k)));
  }
}

TEST_CASE("ggml: SmolLM2's Q4_1 and Q8_0 tensors repack to gguf's bits and multiply within the bound" *
          frugal_test::needs(frugal_test::gguf_model())) {
  const gguf::file file(frugal_test::gguf_model_path());
  std::mt19937 rng(8);
  for (const char* name : {"blk.0.attn_q.weight", "blk.3.ffn_down.weight", "token_embd.weight"}) {
    CAPTURE(name);
    const gguf::tensor_info& t = file.tensor(name);
    const auto f = t.type == gguf::ggml_type::q4_1 ? q::ggml_format::q4_1 : q::ggml_format::q8_0;
    REQUIRE((t.type == gguf::ggml_type::q4_1 || t.type == gguf::ggml_type::q8_0));
    const std::size_t k = t.row_length(), n = std::min<std::size_t>(t.rows(), 2000);
    const auto raw = t.data.first(n * t.row_bytes());
    const auto w = q::make_ggml_weights(f, raw, n, k);
    std::vector<float> want(n * k);
    gguf::dequantize_rows(t, 0, n, want);
    CHECK(same_bits(q::dequantize(w), want));
    const std::size_t m = 3;
    const auto x = random_x(m, k, rng);
    check_within_bound(f, raw, n, k, x, m, run(x, m, w));
  }
}

TEST_CASE("ggml: every SIMD path this CPU runs gives the portable path's bits") {
  std::mt19937 rng(4);
  for (auto f : formats)
    for (std::size_t n : {1u, 15u, 17u, 200u})
      for (std::size_t m : {1u, 3u, 16u, 35u}) {
        const std::size_t k = 160;
        const auto w = q::make_ggml_weights(f, random_raw(f, n, k, rng), n, k);
        const auto x = random_x(m, k, rng);
        const auto ref = run(x, m, w, {.path = q::simd_path::portable});
        for (auto p : runnable_paths()) {
          CAPTURE(to_string(f));
          CAPTURE(to_string(p));
          CAPTURE(n);
          CAPTURE(m);
          CHECK(same_bits(run(x, m, w, {.path = p}), ref));
        }
      }
}

// 37 x 600 splits over N on two threads (at M = 1 too); 100 x 17 splits over M and quantizes x on both.
TEST_CASE("ggml: a row's output is the same bits alone, among 37 or 100 rows, and on two threads") {
  std::mt19937 rng(5);
  q::thread_pool pool(2);
  const std::size_t k = 576;
  for (auto f : formats)
    for (auto [m, n] : {std::pair<std::size_t, std::size_t>{37, 600}, {100, 17}}) {
      const auto w = q::make_ggml_weights(f, random_raw(f, n, k, rng), n, k);
      const auto x = random_x(m, k, rng);
      for (auto p : runnable_paths()) {
        CAPTURE(to_string(f));
        CAPTURE(to_string(p));
        CAPTURE(m);
        const auto all = run(x, m, w, {.path = p});
        const auto threaded = run(x, m, w, {.path = p, .threads = &pool});
        CHECK(same_bits(all, threaded));
        for (std::size_t r : {std::size_t{0}, std::size_t{7}, std::size_t{16}, m - 1}) {
          const std::vector<float> row(x.begin() + static_cast<std::ptrdiff_t>(r * k),
                                       x.begin() + static_cast<std::ptrdiff_t>((r + 1) * k));
          CAPTURE(r);
          CHECK(same_bits(run(row, 1, w, {.path = p}), std::span<const float>(all).subspan(r * n, n)));
          CHECK(same_bits(run(row, 1, w, {.path = p, .threads = &pool}),
                          std::span<const float>(all).subspan(r * n, n)));
        }
      }
    }
}

// The server's shapes: every M from 1 to 40 (decode steps of up to 40 sequences, and prefill chunks mixed
// with them), and a prefill step of 200 rows, against shapes of SmolLM2's projections, each on two threads
// several times over. In a build whose coverage counters were not atomic, gcc
// kept a loop counter of the AVX-512 VNNI tile in a gcov counter that the other thread moved, and whole 8 x
// 16 tiles came out wrong (NaN in the server; issue 60): a single call rarely shows it, repeated calls do.
TEST_CASE("ggml: M = 1 to 40 and prefill-sized M on two threads, repeated, give the portable path's bits") {
  std::mt19937 rng(9);
  q::thread_pool pool(2);
  struct shape {
    std::size_t n, k;
  };
  for (auto f : formats)
    for (const shape s : {shape{576, 576}, shape{1536, 576}}) {
      const auto w = q::make_ggml_weights(f, random_raw(f, s.n, s.k, rng), s.n, s.k);
      std::vector<std::size_t> ms;
      for (std::size_t m = 1; m <= 40; ++m) ms.push_back(m);
      if (s.n == 576 && s.k == 576) ms.push_back(200);
      for (const std::size_t m : ms) {
        const auto x = random_x(m, s.k, rng);
        const auto ref = run(x, m, w, {.path = q::simd_path::portable});
        for (auto p : runnable_paths()) {
          if (p == q::simd_path::portable) continue;
          CAPTURE(to_string(f));
          CAPTURE(to_string(p));
          CAPTURE(s.n);
          CAPTURE(s.k);
          CAPTURE(m);
          const int repeats = m > 40 ? 8 : 3;
          for (int r = 0; r < repeats; ++r)
            REQUIRE(same_bits(run(x, m, w, {.path = p, .threads = &pool}), ref));
        }
      }
    }
}

TEST_CASE("ggml: M = 0 and N = 0 write nothing, K = 0 writes zeros") {
  std::mt19937 rng(6);
  const auto w =
      q::make_ggml_weights(q::ggml_format::q8_0, random_raw(q::ggml_format::q8_0, 3, 64, rng), 3, 64);
  std::vector<float> none;
  q::gemm_ggml(none, 0, w, none);
  const auto empty = q::make_ggml_weights(q::ggml_format::q4_1, {}, 0, 64);
  CHECK(empty.bytes() == 0);
  const std::vector<float> x(64, 1.0f);
  q::gemm_ggml(x, 1, empty, none);
  const auto flat = q::make_ggml_weights(q::ggml_format::q4_1, {}, 4, 0);
  std::vector<float> out(8, -1.0f);
  q::gemm_ggml(none, 2, flat, out);
  CHECK(out == std::vector<float>(8, 0.0f));
}

TEST_CASE("ggml: bad weights, shapes and activations are std::invalid_argument naming what is wrong") {
  std::mt19937 rng(7);
  const auto raw = random_raw(q::ggml_format::q4_1, 2, 64, rng);
  const auto throws_with = [](auto&& call, const std::string& what) {
    try {
      call();
      FAIL("no exception, expected one naming " << what);
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
    }
  };
  throws_with([&] { q::make_ggml_weights(q::ggml_format::q4_1, raw, 2, 48); },
              "make_ggml_weights: cols = 48 is not a multiple");
  throws_with([&] { q::make_ggml_weights(q::ggml_format::q4_1, raw, 3, 64); },
              "make_ggml_weights: raw has 80");
  throws_with([&] { q::make_ggml_weights(q::ggml_format::q8_0, raw, 2, 64); },
              "make_ggml_weights: raw has 80");
  auto inf = raw;
  put_half(inf, 20 + 2, 0x7c00);  // row 0, block 1: m = +inf
  throws_with([&] { q::make_ggml_weights(q::ggml_format::q4_1, inf, 2, 64); },
              "row 0 block 1 has a scale (m) that is not finite");
  put_half(inf, 40, 0x7e00);  // row 1, block 0: d = NaN
  put_half(inf, 22, half_bits(1.0f));
  throws_with([&] { q::make_ggml_weights(q::ggml_format::q4_1, inf, 2, 64); },
              "row 1 block 0 has a scale (d) that is not finite");

  const auto w = q::make_ggml_weights(q::ggml_format::q4_1, raw, 2, 64);
  std::vector<float> x(128, 0.5f), out(4);
  throws_with([&] { q::gemm_ggml(std::span<const float>(x).first(127), 2, w, out); }, "gemm_ggml: x has 127");
  throws_with([&] { q::gemm_ggml(x, 2, w, std::span<float>(out).first(3)); }, "gemm_ggml: out has 3");
  x[70] = std::nanf("");
  throws_with([&] { q::gemm_ggml(x, 2, w, out); }, "gemm_ggml: x[70] = nan is not finite");
  x[70] = 0.0f;
  x[3] = -INFINITY;
  throws_with([&] { q::gemm_ggml(x, 2, w, out); }, "gemm_ggml: x[3] = -inf is not finite");
  x[3] = 0.0f;
  auto broken = w;
  broken.scales.pop_back();
  throws_with([&] { q::gemm_ggml(x, 2, broken, out); }, "gemm_ggml: weights.scales has");
  broken = w;
  broken.cols = 96;
  throws_with([&] { q::gemm_ggml(x, 2, broken, out); }, "gemm_ggml: weights.quants has");
  for (auto p : {q::simd_path::avx2, q::simd_path::avx_vnni, q::simd_path::avx512, q::simd_path::avx512_vnni,
                 q::simd_path::amx})
    if (!q::is_supported(p))
      throws_with([&] { q::gemm_ggml(x, 2, w, out, {.path = p}); }, "is not supported by this CPU");
}
