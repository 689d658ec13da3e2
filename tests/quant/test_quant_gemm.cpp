#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

std::vector<q::simd_path> int8_paths() {
  return frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx_vnni,
                                 q::simd_path::avx512_vnni, q::simd_path::amx});
}
std::vector<q::simd_path> float_paths() {
  return frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512});
}

q::quantized_activations random_activations(std::size_t m, std::size_t k, std::mt19937& rng, bool asym) {
  q::quantized_activations a;
  a.rows = m;
  a.cols = k;
  a.data.resize(m * k);
  for (auto& v : a.data) v = static_cast<std::int8_t>(static_cast<int>(rng() % 256) - 128);
  for (std::size_t i = 0; i < m; ++i) {
    a.scales.push_back(0.01f + static_cast<float>(rng() % 100) / 1000.0f);
    if (asym) a.zero_points.push_back(static_cast<int>(rng() % 41) - 20);
  }
  return a;
}

q::quantized_weights random_weights(std::size_t n, std::size_t k, std::mt19937& rng) {
  std::vector<std::int8_t> d(n * k);
  for (auto& v : d) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  d[0] = -128;  // the full int8 range must be exact too
  std::vector<float> s(n);
  for (auto& v : s) v = 0.005f + static_cast<float>(rng() % 100) / 5000.0f;
  return q::make_quantized_weights(d, n, k, s);
}

std::vector<std::int32_t> naive_acc(const q::quantized_activations& a, const q::quantized_weights& w) {
  std::vector<std::int32_t> c(a.rows * w.rows, 0);
  for (std::size_t m = 0; m < a.rows; ++m)
    for (std::size_t n = 0; n < w.rows; ++n)
      for (std::size_t k = 0; k < a.cols; ++k)
        c[m * w.rows + n] += static_cast<std::int32_t>(a.data[m * a.cols + k]) * w.data[n * a.cols + k];
  return c;
}

// Every supported int8 path gives `want` (the naive loop's sums unless given) for A x W^T.
void check_every_path(const q::quantized_activations& a, const q::quantized_weights& w,
                      const std::vector<std::int32_t>& want) {
  for (auto path : int8_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<std::int32_t> got(a.rows * w.rows, -1);
    q::gemm_w8a8_s32(a, w, got, path);
    CHECK(got == want);
  }
}
void check_every_path(const q::quantized_activations& a, const q::quantized_weights& w) {
  check_every_path(a, w, naive_acc(a, w));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace

TEST_CASE("quant gemm: every int8 path gives int32 accumulators bit-exact with a naive triple loop") {
  std::mt19937 rng(1234);
  const std::size_t paths = int8_paths().size();
  CAPTURE(paths);
  for (std::size_t m = 1; m <= 17; ++m) {
    const std::size_t k = 2 * (rng() % 40) + 1;  // odd K
    const std::size_t n = 1 + rng() % 70;
    CAPTURE(m);
    CAPTURE(k);
    CAPTURE(n);
    const auto a = random_activations(m, k, rng, false);
    const auto w = random_weights(n, k, rng);
    check_every_path(a, w);
  }
  // The extremes: -128 * -128 over a long K, the worst case of the unsigned-offset trick.
  q::quantized_activations a{.rows = 3,
                             .cols = 1001,
                             .data = std::vector<std::int8_t>(3 * 1001, -128),
                             .scales = {1, 1, 1},
                             .zero_points = {}};
  a.data[5] = 127;
  const auto w = q::make_quantized_weights(std::vector<std::int8_t>(33 * 1001, -128), 33, 1001,
                                           std::vector<float>(33, 1.0f));
  const auto want = naive_acc(a, w);
  CHECK(want[33 + 5] == 128 * 128 * 1001);
  check_every_path(a, w, want);
}

TEST_CASE(
    "quant gemm: the fused W8A8 epilogue applies scales, zero points, bias and activation on every path") {
  std::mt19937 rng(99);
  for (bool asym : {false, true})
    for (auto act : {q::activation_kind::none, q::activation_kind::relu, q::activation_kind::gelu,
                     q::activation_kind::gelu_erf}) {
      const std::size_t m = 1 + rng() % 12, k = 37, n = 1 + rng() % 50;
      const auto a = random_activations(m, k, rng, asym);
      const auto w = random_weights(n, k, rng);
      std::vector<float> bias(n);
      for (auto& b : bias) b = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 50.0f;
      const auto acc = naive_acc(a, w);
      std::vector<float> want(m * n);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          const double za = asym ? a.zero_points[i] : 0;
          double v = (acc[i * n + j] - za * w.col_sums[j]) * a.scales[i] * w.scales[j] + bias[j];
          if (act == q::activation_kind::relu) v = std::max(v, 0.0);
          if (act == q::activation_kind::gelu)
            v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
          if (act == q::activation_kind::gelu_erf) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
          want[i * n + j] = static_cast<float>(v);
        }
      for (auto path : int8_paths()) {
        CAPTURE(q::to_string(path));
        const q::gemm_options opt{.bias = bias, .activation = act, .path = path};
        std::vector<float> out(m * n);
        q::gemm_w8a8(a, w, out, opt);
        std::vector<q::half> out16(m * n);
        q::gemm_w8a8(a, w, out16, opt);
        std::vector<q::bfloat16> outb(m * n);
        q::gemm_w8a8(a, w, outb, opt);
        for (std::size_t i = 0; i < m * n; ++i) {
          const float tol = 2e-5f * (1.0f + std::abs(want[i]));
          CHECK(std::abs(out[i] - want[i]) <= tol);
          CHECK(std::abs(static_cast<float>(out16[i]) - want[i]) <= 1e-3f * (1.0f + std::abs(want[i])));
          CHECK(std::abs(static_cast<float>(outb[i]) - want[i]) <= 8e-3f * (1.0f + std::abs(want[i])));
        }
        // The half output is the round-to-nearest-even of the fp32 result of the same path.
        for (std::size_t i = 0; i < m * n; ++i) CHECK(out16[i].bits == q::half(out[i]).bits);
        for (std::size_t i = 0; i < m * n; ++i) CHECK(outb[i].bits == q::bfloat16(out[i]).bits);
      }
    }
}

TEST_CASE("quant gemm: W8A8 on real matrices tracks the Eigen fp32 reference") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  q::row_matrix x(9, 96), w(40, 96);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
  for (int i = 0; i < w.size(); ++i) w.data()[i] = 0.05f * nd(rng);
  std::vector<float> bias(40, 0.1f);
  const q::row_matrix ref = q::reference_gemm(x, w, bias, q::activation_kind::gelu);
  for (bool sym : {true, false}) {
    const auto qa = q::quantize_rows(x, {.symmetric = sym});
    CHECK(qa.scales[0] == doctest::Approx(sym ? x.row(0).cwiseAbs().maxCoeff() / 127.0f
                                              : (x.row(0).maxCoeff() - x.row(0).minCoeff()) / 255.0f));
    q::row_matrix out;
    q::gemm_w8a8(qa, q::quantize_weights_per_channel(w), out,
                 {.bias = bias, .activation = q::activation_kind::gelu});
    CHECK(out.rows() == 9);
    CHECK(out.cols() == 40);
    CHECK(q::cosine_similarity(ref, out) > 0.999);
    CHECK(q::relative_error(ref, out) < 0.03);
  }
  const float amax = x.cwiseAbs().maxCoeff();
  const auto st = q::quantize_rows(x, {.static_scale = amax / 127.0f});
  CHECK(st.scales == std::vector<float>(9, amax / 127.0f));
  for (int j = 0; j < 96; ++j)
    CHECK(st.data[static_cast<std::size_t>(j)] ==
          static_cast<int>(std::nearbyint(x(0, j) / (amax / 127.0f))));
  const auto clipped = q::quantize_rows(x, {.static_scale = amax / 1270.0f});
  CHECK(*std::max_element(clipped.data.begin(), clipped.data.end()) == 127);
  CHECK(error_of([&] { q::quantize_rows(x, {.static_scale = -1.0f}); }).find("options.static_scale") !=
        std::string::npos);
}

TEST_CASE("quant gemm: requantization to int8 uses gemmlowp's fixed-point multiplier") {
  SUBCASE("the fixed-point primitives") {
    const auto fm = q::quantize_multiplier(0.25);
    CHECK(fm.multiplier == 1 << 30);
    CHECK(fm.shift == -1);
    CHECK(q::multiply_by_quantized_multiplier(100, fm) == 25);
    CHECK(q::multiply_by_quantized_multiplier(102, fm) == 26);  // 25.5 rounds away from zero
    CHECK(q::multiply_by_quantized_multiplier(-102, fm) == -26);
    CHECK(q::multiply_by_quantized_multiplier(7, q::quantize_multiplier(3.0)) == 21);
    CHECK(q::saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX);
    CHECK(q::rounding_divide_by_pot(5, 1) == 3);
    CHECK(q::rounding_divide_by_pot(-5, 1) == -3);
    CHECK(error_of([] { q::quantize_multiplier(0.0); }).find("multiplier") != std::string::npos);
  }
  std::mt19937 rng(77);
  for (bool uniform : {true, false}) {
    auto a = random_activations(5, 29, rng, false);
    if (uniform) a.scales.assign(5, 0.02f);
    const auto w = random_weights(19, 29, rng);
    const std::vector<float> bias(19, 0.3f);
    const float so = 0.05f;
    const auto acc = naive_acc(a, w);
    for (auto path : int8_paths()) {
      std::vector<std::int8_t> out(5 * 19);
      q::gemm_w8a8(a, w, out, {.output_scale = so, .output_zero_point = 3, .bias = bias, .path = path});
      for (std::size_t i = 0; i < 5; ++i)
        for (std::size_t j = 0; j < 19; ++j) {
          const double real = acc[i * 19 + j] * static_cast<double>(a.scales[i]) * w.scales[j] + 0.3;
          const double want = std::clamp(std::nearbyint(real / so) + 3, -128.0, 127.0);
          CHECK(std::abs(out[i * 19 + j] - want) <= 1.0);
        }
    }
  }
}

TEST_CASE("quant gemm: weight-only int8 and int4 match the dequantized reference on every path") {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t m : {1u, 2u, 3u, 5u}) {
    const std::size_t n = 1 + rng() % 21, k = 128;
    q::row_matrix x(static_cast<int>(m), static_cast<int>(k)), w(static_cast<int>(n), static_cast<int>(k));
    for (int i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
    for (int i = 0; i < w.size(); ++i) w.data()[i] = nd(rng);
    std::vector<float> bias(n, -0.5f);
    const auto w8 = q::quantize_weights_per_channel(w);
    q::row_matrix w8_real(static_cast<int>(n), static_cast<int>(k));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < k; ++c)
        w8_real(static_cast<int>(r), static_cast<int>(c)) =
            static_cast<float>(w8.data[r * k + c]) * w8.scales[r];
    for (auto path : float_paths()) {
      CAPTURE(q::to_string(path));
      q::row_matrix out;
      q::gemm_weight_only(x, w8, out, {.bias = bias, .activation = q::activation_kind::relu, .path = path});
      const q::row_matrix ref = q::reference_gemm(x, w8_real, bias, q::activation_kind::relu);
      CHECK((out - ref).cwiseAbs().maxCoeff() < 1e-4f * (1.0f + ref.cwiseAbs().maxCoeff()));
      for (bool sym : {true, false})
        for (int g : {32, 64, 128}) {
          const auto w4 = q::quantize_int4(w, {.group_size = g, .symmetric = sym});
          q::row_matrix out4;
          q::gemm_weight_only(x, w4, out4, {.path = path});
          const q::row_matrix ref4 = q::reference_gemm(x, q::dequantize(w4));
          CHECK((out4 - ref4).cwiseAbs().maxCoeff() < 1e-4f * (1.0f + ref4.cwiseAbs().maxCoeff()));
        }
    }
    // fp16 activations are widened exactly.
    std::vector<q::half> xh(m * k);
    std::vector<float> xr(m * k);
    for (std::size_t i = 0; i < m * k; ++i) {
      xh[i] = q::half(x.data()[i]);
      xr[i] = static_cast<float>(xh[i]);
    }
    std::vector<float> o1(m * n), o2(m * n);
    q::gemm_weight_only(std::span<const q::half>(xh), m, w8, o1);
    q::gemm_weight_only(std::span<const float>(xr), m, w8, o2);
    CHECK(o1 == o2);
  }
}

TEST_CASE("quant gemm: mismatched shapes and options fail with a clear error") {
  std::mt19937 rng(2);
  const auto a = random_activations(2, 8, rng, false);
  const auto w = random_weights(3, 8, rng);
  const auto w9 = random_weights(3, 9, rng);
  std::vector<float> out(6), small(5);
  CHECK(error_of([&] { q::gemm_w8a8(a, w9, out); }).find("K = 8 but weights have K = 9") !=
        std::string::npos);
  CHECK(error_of([&] { q::gemm_w8a8(a, w, small); }).find("out has 5 elements") != std::string::npos);
  const std::vector<float> bias(2);
  CHECK(error_of([&] { q::gemm_w8a8(a, w, out, {.bias = bias}); }).find("options.bias has 2") !=
        std::string::npos);
  CHECK(error_of([&] { q::gemm_weight_only(std::vector<float>(15), 2, w, out); }).find("x has 15") !=
        std::string::npos);
  std::vector<std::int8_t> o8(6);
  CHECK(error_of([&] { q::gemm_w8a8(a, w, o8, {.output_scale = 0.0f}); }).find("options.output_scale") !=
        std::string::npos);
  CHECK(error_of([&] {
          q::make_quantized_weights(std::vector<std::int8_t>(6), 2, 3, std::vector<float>{1.0f, 0.0f});
        }).find("scales[1]") != std::string::npos);
  if (!q::is_supported(q::simd_path::avx512_vnni))
    CHECK(error_of([&] {
            q::gemm_w8a8(a, w, out, {.path = q::simd_path::avx512_vnni});
          }).find("not supported") != std::string::npos);
}

TEST_CASE(
    "quant gemm: apply_activation's exact GELU matches erf on every float path, and int8 output refuses it") {
  std::vector<float> x;
  for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) / 400.0f);  // -10 .. 10
  x.push_back(-1e30f);
  x.push_back(1e30f);
  for (auto path : float_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<float> y = x;
    q::apply_activation(y, q::activation_kind::gelu_erf, path);
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x[i], want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      worst = std::max(worst, std::abs(y[i] - want) / std::max(1.0, std::abs(want)));
    }
    CHECK(worst < 2e-6);
    CHECK(y[x.size() - 2] == 0.0f);  // -1e30: erf saturates to -1, never NaN
    CHECK(y.back() == 1e30f);
  }
  const auto a = q::quantize_rows(std::vector<float>(4, 1.0f), 1, 4);
  const auto w = q::quantize_weights_per_channel(std::vector<float>(8, 0.5f), 2, 4);
  std::vector<std::int8_t> out(2);
  CHECK_THROWS_WITH_AS(
      q::gemm_w8a8(a, w, out, q::requantize_options{.activation = q::activation_kind::gelu_erf}),
      doctest::Contains("gelu_erf"), std::invalid_argument);
}

// Issue 19, class 2: every field of every argument struct is validated before memory is touched, with
// an error that names the function and the field.
#define CHECK_INVALID(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), std::invalid_argument)

TEST_CASE("quant gemm: hostile argument structs fail with an error naming the function and the field") {
  std::mt19937 rng(19);
  const auto a0 = random_activations(2, 40, rng, true);
  const auto w0 = random_weights(4, 40, rng);
  std::vector<float> out(8), xf(2 * 40, 0.5f);
  std::vector<std::int8_t> o8(8);
  const q::simd_path path = q::simd_path::portable;  // the check must not depend on the kernel
  SUBCASE("quantized_weights") {
    auto w = w0;
    const auto run = [&] { q::gemm_w8a8(a0, w, out, {.path = path}); };
    const auto wo = [&] { q::gemm_weight_only(xf, 2, w, out); };
    w.scales.pop_back();
    CHECK_INVALID(run(), "frugal::quant::gemm_w8a8: weights.scales has 3 entries, not N = 4");
    CHECK_INVALID(wo(), "frugal::quant::gemm_weight_only: weights.scales has 3 entries");
    w = w0;
    w.scales[1] = std::nanf("");
    CHECK_INVALID(run(), "weights.scales[1]");
    CHECK_INVALID(wo(), "weights.scales[1]");
    w = w0;
    w.data.clear();  // null data with rows * cols = 160
    CHECK_INVALID(run(), "weights.data has 0 elements, not N * K = 4 * 40");
    CHECK_INVALID(wo(), "weights.data has 0 elements");  // gemm_weight_only read it unchecked
    w = w0;
    w.packed.clear();  // the CPU copy missing: the SIMD kernels read it
    CHECK_INVALID(run(), "weights.packed has 0 bytes");
    CHECK_NOTHROW(wo());  // weight-only GEMM does not need it
    w = w0;
    w.packed_corr.resize(4);
    CHECK_INVALID(run(), "weights.packed_corr has 4 entries");
    w = w0;
    w.col_sums.clear();
    CHECK_INVALID(run(), "weights.col_sums has 0 entries, not N = 4");
    w = w0;
    w.col_sums[2] += 1;
    CHECK_INVALID(run(), "weights.packed_corr[2]");
    w = w0;
    w.col_sums[0] = 1 << 30;  // would overflow za * colsum in the epilogue
    w.packed_corr[0] = 0;
    CHECK_INVALID(run(), "weights.col_sums[0]");
  }
  SUBCASE("quantized_activations") {
    auto a = a0;
    const auto run = [&] { q::gemm_w8a8(a, w0, out, {.path = path}); };
    a.data.clear();
    CHECK_INVALID(run(), "frugal::quant::gemm_w8a8: activations.data has 0 elements, not M * K = 2 * 40");
    a = a0;
    a.scales = {1.0f};
    CHECK_INVALID(run(), "activations.scales has 1 entries, not M = 2");
    a = a0;
    a.scales[1] = -std::numeric_limits<float>::infinity();
    CHECK_INVALID(run(), "activations.scales[1]");
    a = a0;
    a.zero_points.resize(3);
    CHECK_INVALID(run(), "activations.zero_points has 3 entries");
    a = a0;
    a.zero_points[0] = 1 << 24;
    CHECK_INVALID(run(), "activations.zero_points[0] = 16777216 is outside [-128, 127]");
  }
  SUBCASE("options") {
    CHECK_INVALID(q::gemm_w8a8(a0, w0, out, {.activation = static_cast<q::activation_kind>(9)}),
                  "options.activation 9");
    CHECK_INVALID(q::gemm_weight_only(xf, 2, w0, out, {.activation = static_cast<q::activation_kind>(9)}),
                  "options.activation 9");
    CHECK_INVALID(q::gemm_w8a8(a0, w0, o8, {.activation = q::activation_kind::gelu}), "options.activation");
    for (float bad : {0.0f, -1.0f, std::nanf(""), std::numeric_limits<float>::infinity()})
      CHECK_INVALID(q::gemm_w8a8(a0, w0, o8, {.output_scale = bad}), "options.output_scale");
    // Finite and > 0, but sa * sb / output_scale needs a shift beyond 31 (1 << shift was UB).
    CHECK_INVALID(q::gemm_w8a8(a0, w0, o8, {.output_scale = 1e-30f}), "options.output_scale = ");
    const std::vector<float> bias = {0.0f, std::nanf(""), 0.0f, 0.0f};
    CHECK_INVALID(q::gemm_w8a8(a0, w0, o8, {.bias = bias}), "options.bias[1]");
    CHECK_INVALID(q::quantize_multiplier(1e30), "frugal::quant::quantize_multiplier");
    // A hand-made shift beyond 31 acts as 31 (x * 2^31 already saturates), without UB.
    CHECK(q::multiply_by_quantized_multiplier(5, {1 << 30, 200}) ==
          q::multiply_by_quantized_multiplier(5, {1 << 30, 31}));
    CHECK(q::multiply_by_quantized_multiplier(-5, {1 << 30, 200}) ==
          q::multiply_by_quantized_multiplier(-5, {1 << 30, 31}));
    CHECK(q::multiply_by_quantized_multiplier(5, {1 << 30, -200}) == 0);
  }
  SUBCASE("int4_weights, in the GEMM and in dequantize") {
    std::vector<float> wf(4 * 64);
    for (auto& v : wf) v = static_cast<float>(static_cast<int>(rng() % 200) - 100) / 50.0f;
    const auto i40 = q::quantize_int4(wf, 4, 64, {.group_size = 32, .symmetric = false});
    std::vector<float> x(2 * 64, 0.25f);
    auto w = i40;
    const auto run = [&] { q::gemm_weight_only(x, 2, w, out); };
    w.group_size = 0;  // was a SIGFPE in k % g
    CHECK_INVALID(run(), "frugal::quant::gemm_weight_only: weights.group_size must be > 0");
    CHECK_INVALID(q::dequantize(w), "frugal::quant::dequantize: weights.group_size must be > 0");
    w.group_size = 48;
    CHECK_INVALID(run(), "weights.cols (64) must be even and a multiple of weights.group_size (48)");
    w = i40;
    w.packed.clear();
    CHECK_INVALID(run(), "weights.packed has 0 bytes, not N * K / 2 = 128");
    CHECK_INVALID(q::dequantize(w), "weights.packed has 0 bytes");
    w = i40;
    w.scales.pop_back();
    CHECK_INVALID(q::dequantize(w), "weights.scales has 7 entries, not N * K / group_size = 8");
    w = i40;
    w.zero_points.clear();
    CHECK_INVALID(run(), "weights.zero_points has 0 entries, not 8 (one per group)");
    w = i40;
    w.symmetric = true;  // symmetric keeps no zero points
    CHECK_INVALID(q::dequantize(w), "weights.zero_points has 8 entries, not 0 (symmetric)");
    w = i40;
    w.group_size = 16;  // consistent, but the kernels need a multiple of 32
    w.scales.resize(16);
    w.zero_points.resize(16);
    CHECK_INVALID(run(), "weights.group_size must be a multiple of 32");
    CHECK_NOTHROW(q::dequantize(w));
  }
  SUBCASE("quantized_tensor and its scheme in dequantize") {
    std::vector<float> x(4 * 8, 1.0f);
    const auto t0 = q::quantize(x, 4, 8, q::scheme{});
    auto t = t0;
    t.scheme.granularity = static_cast<q::granularity>(7);
    CHECK_INVALID(q::dequantize(t), "frugal::quant::dequantize: scheme.granularity 7");
    t = t0;
    t.scheme.granularity = q::granularity::per_group;  // group_size 0: no division by it
    CHECK_INVALID(q::dequantize(t), "scheme.group_size must be > 0");
    t = t0;
    t.scheme.rounding = static_cast<q::rounding_mode>(5);
    CHECK_INVALID(q::quantize(x, 4, 8, t.scheme), "scheme.rounding 5 is not a rounding_mode");
    t = t0;
    t.scales[0] = 0.0f;
    CHECK_INVALID(q::dequantize(t), "params.scales[0]");
  }
  SUBCASE("valid structs still give the exact result on every path") {
    const auto want = naive_acc(a0, w0);
    for (auto p : int8_paths()) {
      std::vector<std::int32_t> got(8);
      q::gemm_w8a8_s32(a0, w0, got, p);
      CHECK(got == want);
    }
    CHECK_NOTHROW(q::gemm_w8a8(a0, w0, o8, {.output_scale = 0.05f}));
    CHECK_NOTHROW(q::gemm_weight_only(xf, 2, w0, out));
  }
}

// Issue 19, class 1: a size product that wraps (2^32 * 2^32 is 0 in 64 bits) let an empty buffer pass
// a size check for a huge shape; every product at a public boundary is checked.
TEST_CASE("quant: size products that overflow size_t are rejected before any allocation or access") {
  constexpr std::size_t big = std::size_t{1} << 32, huge = std::size_t{1} << 33;
  std::mt19937 rng(91);
  SUBCASE("int4 packing") {
    // unpack_int4: rows * ceil(cols / 2) = 2^33 * 2^31 wraps to 0, so an empty span matched.
    CHECK_INVALID(q::unpack_int4({}, huge, big), "frugal::quant::unpack_int4: rows * ceil(cols / 2) = ");
    CHECK_INVALID(q::unpack_int4({}, huge, big), "overflows size_t");
    CHECK_INVALID(q::pack_int4({}, big, big),
                  "frugal::quant::pack_int4: rows * cols = 4294967296 * 4294967296");
    CHECK_INVALID(q::unpack_int4({}, 1, std::numeric_limits<std::size_t>::max()),
                  "not rows * ceil(cols / 2)");
    q::int4_weights w;
    w.rows = huge;
    w.cols = big;
    w.group_size = 32;
    CHECK_INVALID(q::dequantize(w), "weights.rows * weights.cols / 2");
  }
  SUBCASE("weights, activations and outputs") {
    CHECK_INVALID(q::make_quantized_weights({}, big, big, {}),
                  "frugal::quant::make_quantized_weights: N * K = ");
    q::quantized_activations a;
    a.rows = big;
    a.cols = big;
    const auto w = random_weights(2, 8, rng);
    std::vector<float> out;
    CHECK_INVALID(q::gemm_w8a8(a, w, out), "activations.rows * activations.cols = ");
    a = random_activations(2, 8, rng, false);
    q::quantized_weights wb;
    wb.rows = huge;
    wb.cols = big;
    CHECK_INVALID(q::gemm_w8a8(a, wb, out), "weights.rows * weights.cols = ");
    CHECK_INVALID(q::gemm_weight_only(std::vector<float>(16), 2, wb, out), "weights.rows * weights.cols = ");
    q::row_matrix om;
    CHECK_INVALID(q::gemm_w8a8(a, wb, om), "weights.rows * weights.cols");  // before the resize
    // M * K for the weight-only GEMM: x of 0 elements for M = 2^61, K = 8.
    CHECK_INVALID(q::gemm_weight_only({}, std::size_t{1} << 61, w, out),
                  "frugal::quant::gemm_weight_only: M * K = ");
    CHECK_INVALID(q::quantize_rows({}, big, big), "frugal::quant::quantize_rows: rows * cols = ");
    q::quantized_tensor t;
    t.rows = huge;
    t.cols = big;
    CHECK_INVALID(q::dequantize(t), "frugal::quant::dequantize: rows * cols = ");  // before the allocation
    // 0 x 2^63 passes every size check, but not the cast to Eigen::Index.
    t.rows = 0;
    t.cols = std::size_t{1} << 63;
    t.data.clear();
    t.scales = {1.0f};
    t.zero_points = {0};
    CHECK_INVALID(q::dequantize(t), "does not fit Eigen::Index");
    q::int4_weights w4;
    w4.rows = 0;
    w4.cols = std::size_t{1} << 63;
    w4.group_size = 32;
    CHECK_INVALID(q::dequantize(w4), "does not fit Eigen::Index");
  }
  SUBCASE("K beyond max_gemm_k: 128 * col_sums would overflow int32") {
    const std::size_t k = q::detail::max_gemm_k + 4;
    std::vector<std::int8_t> d(2 * k, -128);  // |col_sum| = 128 K: 128 * that is 2^31 + 2^16, past int32
    const auto w = q::make_quantized_weights(d, 2, k, std::vector<float>{1.0f, 1.0f});
    CHECK(w.col_sums.empty());
    CHECK(w.packed.empty());
    CHECK(w.packed_corr.empty());
    q::quantized_activations a;
    a.rows = 1;
    a.cols = k;
    a.data.assign(k, 1);
    a.scales = {1.0f};
    std::vector<float> out(2);
    CHECK_INVALID(q::gemm_w8a8(a, w, out), "K = 65540 exceeds 65536");
    // The weights still serve the weight-only GEMM, exactly.
    q::gemm_weight_only(std::vector<float>(k, 1.0f), 1, w, out);
    CHECK(out[0] == -128.0f * static_cast<float>(k));
    CHECK(out[1] == out[0]);
    // At max_gemm_k itself the correction fits, and the int8 GEMM is exact.
    const std::size_t km = q::detail::max_gemm_k;
    const auto wm =
        q::make_quantized_weights(std::vector<std::int8_t>(km, -128), 1, km, std::vector<float>{1.0f});
    REQUIRE(wm.packed_corr.size() == 16);
    CHECK(wm.packed_corr[0] == 128 * wm.col_sums[0]);
    a.cols = km;
    a.data.assign(km, -128);
    std::vector<std::int32_t> acc(1);
    q::gemm_w8a8_s32(a, wm, acc);
    CHECK(acc[0] == 128 * 128 * static_cast<std::int32_t>(km));
  }
}

// Issue 25: AVX2 without VNNI takes vpmaddubsw for activations in [-64, 63], the only range in which its
// int16 pair sums cannot saturate against weights in [-128, 127].
TEST_CASE("quant gemm: reduce-range activations are exact on every path, at the saturation bounds too") {
  namespace qd = q::detail;
  SUBCASE("pack_u7 accepts exactly [-64, 63]") {
    std::vector<std::uint8_t> out(8, 0xff);
    const std::vector<std::int8_t> ok{-64, 63, 0, -1};
    CHECK(qd::pack_u7(ok.data(), 2, 2, out.data(), 4));
    CHECK(out == std::vector<std::uint8_t>{0, 127, 0, 0, 64, 63, 0, 0});  // padding zeroed
    for (int bad : {-65, 64, -128, 127}) {
      CAPTURE(bad);
      const std::vector<std::int8_t> b{0, static_cast<std::int8_t>(bad), 5};
      CHECK_FALSE(qd::pack_u7(b.data(), 1, 3, out.data(), 4));
    }
  }
  SUBCASE("random shapes against a naive loop") {
    std::mt19937 rng(4321);
    for (std::size_t m = 1; m <= 13; ++m) {
      const std::size_t k = 1 + rng() % 90, n = 1 + rng() % 70;
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      auto a = random_activations(m, k, rng, m % 2 == 0);
      for (auto& v : a.data) v = static_cast<std::int8_t>(static_cast<int>(rng() % 128) - 64);
      for (auto& z : a.zero_points) z = static_cast<int>(rng() % 128) - 64;
      const auto w = random_weights(n, k, rng);
      check_every_path(a, w);
    }
  }
  SUBCASE("the largest pairs: 63 * 127 and 63 * -128 over K = 4099, and -64 (fed as 0)") {
    const std::size_t k = 4099;
    q::quantized_activations a{.rows = 3, .cols = k, .data = {}, .scales = {1, 1, 1}, .zero_points = {}};
    a.data.assign(k, 63);
    a.data.insert(a.data.end(), k, -64);
    for (std::size_t t = 0; t < k; ++t) a.data.push_back(t % 2 ? 63 : -64);
    std::vector<std::int8_t> wd(k, 127);
    wd.insert(wd.end(), k, -128);
    for (std::size_t t = 0; t < k; ++t) wd.push_back(t % 3 ? -128 : 127);
    const auto w = q::make_quantized_weights(wd, 3, k, std::vector<float>(3, 1.0f));
    const auto want = naive_acc(a, w);
    CHECK(want[0] == 63 * 127 * 4099);
    CHECK(want[1] == -63 * 128 * 4099);
    CHECK(want[3 + 1] == 64 * 128 * 4099);
    check_every_path(a, w, want);
  }
  SUBCASE("quantize_rows with reduce_range: 7 bits, and the W8A8 result still tracks fp32") {
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    q::row_matrix x(9, 96), w(40, 96);
    for (int i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
    for (int i = 0; i < w.size(); ++i) w.data()[i] = 0.05f * nd(rng);
    const q::row_matrix ref = q::reference_gemm(x, w, {}, q::activation_kind::none);
    const auto qw = q::quantize_weights_per_channel(w);
    for (bool sym : {true, false}) {
      CAPTURE(sym);
      const auto qa = q::quantize_rows(x, {.symmetric = sym, .reduce_range = true});
      const auto [lo, hi] = std::minmax_element(qa.data.begin(), qa.data.end());
      CHECK(*lo >= (sym ? -63 : -64));
      CHECK(*hi <= 63);
      CHECK(*hi - *lo >= 120);  // the 7 bits are used, not a narrower range
      CHECK(qa.scales[0] == doctest::Approx(sym ? x.row(0).cwiseAbs().maxCoeff() / 63.0f
                                                : (x.row(0).maxCoeff() - x.row(0).minCoeff()) / 127.0f));
      for (auto path : int8_paths()) {
        q::row_matrix out;
        q::gemm_w8a8(qa, qw, out, {.path = path});
        CHECK(q::cosine_similarity(ref, out) > 0.999);
        CHECK(q::relative_error(ref, out) < 0.05);
      }
    }
    const float amax = x.cwiseAbs().maxCoeff();
    const auto st = q::quantize_rows(x, {.static_scale = amax / 127.0f, .reduce_range = true});
    CHECK(st.scales[0] == doctest::Approx(amax / 63.0f));
    for (auto v : st.data) CHECK(std::abs(static_cast<int>(v)) <= 63);
    CHECK(error_of([&] {
            q::quantize_rows(x, {.static_scale = 3e38f, .reduce_range = true});
          }).find("reduce_range") != std::string::npos);
  }
}

// The kernels walk A in blocks of rows (detail::a_block_rows): with a long K a block is 64 rows, so that
// M = 150 crosses two block boundaries with a ragged last block, on every path.
TEST_CASE("quant gemm: row blocks of A across a long K stay exact, full-range and 7-bit") {
  std::mt19937 rng(777);
  const std::size_t m = 150, k = 3001, n = 45;
  CHECK(q::detail::a_block_rows(3004, 8) == 64);
  CHECK(q::detail::a_block_rows(3004 * 2, 2) == 64);
  CHECK(q::detail::a_block_rows(128, 4) == 192);
  CHECK(q::detail::a_block_rows(64, 8) == 256);
  CHECK(q::detail::a_block_rows(0, 8) == 256);  // K = 0 (found by fuzz_quant_gemm: a division by zero)
  {
    const q::quantized_activations a0{
        .rows = 3, .cols = 0, .data = {}, .scales = {1, 1, 1}, .zero_points = {}};
    const auto w0 = q::make_quantized_weights({}, 5, 0, std::vector<float>(5, 1.0f));
    check_every_path(a0, w0, std::vector<std::int32_t>(15, 0));
  }
  // More rows than one AMX block (amx_block_rows), with an M tail and an odd number of panels.
  {
    const std::size_t big_m = q::detail::amx_block_rows + 77;
    const auto a = random_activations(big_m, 70, rng, false);
    const auto w = random_weights(40, 70, rng);
    check_every_path(a, w);
  }
  for (bool seven : {false, true}) {
    CAPTURE(seven);
    auto a = random_activations(m, k, rng, false);
    if (seven)
      for (auto& v : a.data) v = static_cast<std::int8_t>(static_cast<int>(rng() % 128) - 64);
    const auto w = random_weights(n, k, rng);
    check_every_path(a, w);
  }
}

TEST_CASE("quant gemm: packed weights and the kernels' scratch start on a cache line") {
  // Tile rows and 64-byte loads that straddle two lines run the AMX kernel at a third of its speed; glibc
  // puts large blocks 16 bytes off a line, so the alignment must come from the allocator, not from luck.
  std::mt19937 rng(5);
  for (std::size_t n : {1, 17, 300, 2000}) {
    const auto w = random_weights(n, 129, rng);
    CHECK(reinterpret_cast<std::uintptr_t>(w.packed.data()) % q::cache_line_bytes == 0);
    const q::quantized_weights copy = w;
    CHECK(reinterpret_cast<std::uintptr_t>(copy.packed.data()) % q::cache_line_bytes == 0);
  }
  for (std::size_t bytes : {0, 1, 1000, 1 << 20}) {
    const auto s = q::detail::aligned_scratch<std::int16_t>(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(s.get()) % q::cache_line_bytes == 0);
  }
}
