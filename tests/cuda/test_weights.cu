// The host-to-device seam (weights.cuh): the arguments built from the host toolkit's weights read every
// field where the kernels expect it. The host suite needs no device and must pass everywhere; the upload
// suite runs the uploaded weights through the GEMMs and is skipped without a device.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "frugal/cuda/gemm.cuh"
#include "frugal/cuda/weights.cuh"
#include "gpu_test.hpp"

namespace fc = frugal::cuda;
namespace fq = frugal::quant;

namespace {
const fc::device_info ampere{8, 0, 108};

fq::quantized_weights int8_weights(std::size_t n, std::size_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(n * k);
  for (float& v : w) v = u(rng);
  return fq::quantize_weights_per_channel(w, n, k);
}

fq::int4_weights int4_weights(std::size_t n, std::size_t k, bool symmetric, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(n * k);
  for (float& v : w) v = u(rng);
  return fq::quantize_int4(w, n, k, {.group_size = 64, .symmetric = symmetric});
}

// Only alignment is inspected by can_implement, so host storage stands in for device pointers.
alignas(256) std::int8_t a8[1 << 16];
alignas(256) float floats[4096];
alignas(256) std::int32_t ints[4096];
alignas(256) unsigned char out[1 << 16];
}  // namespace

TEST_SUITE("weights-host") {
  TEST_CASE("make_w8a8_arguments: quantized_weights' fields land where gemm_w8a8 reads them") {
    std::mt19937 rng(7);
    const auto w = int8_weights(48, 64, rng);
    const fc::w8a8_weight_pointers p{.data = a8, .scales = floats, .col_sums = ints, .bias = floats + 64};
    fc::gemm_w8a8_arguments g{.m = 5, .a = a8, .lda = 64, .scale_a = floats, .c = out, .ldc = 48};
    REQUIRE(static_cast<bool>(fc::make_w8a8_arguments(w, p, g)));
    CHECK(g.n == 48);
    CHECK(g.k == 64);
    CHECK(g.b == a8);
    CHECK(g.ldb == 64);
    CHECK(g.scale_b == floats);
    CHECK(g.colsum_b == ints);
    CHECK(g.bias == floats + 64);
    CHECK(g.m == 5);  // the activation half is the caller's
    CHECK(g.a == a8);
    CHECK(fc::can_implement(g, ampere).code == frugal::cuda_errc::success);
  }

  TEST_CASE("make_w8a8_arguments: a field that disagrees with the shape is refused by name") {
    std::mt19937 rng(8);
    const fc::w8a8_weight_pointers p{.data = a8, .scales = floats};
    auto check_refused = [&](const fq::quantized_weights& w, frugal::cuda_errc code, const char* what) {
      fc::gemm_w8a8_arguments g;
      const fc::status s = fc::make_w8a8_arguments(w, p, g);
      CHECK(s.code == code);
      CHECK(s.message.find(what) != std::string::npos);
      CHECK(g.b == nullptr);
    };
    auto w = int8_weights(16, 32, rng);
    w.scales.pop_back();
    check_refused(w, frugal::cuda_errc::invalid_problem, "weights.scales");
    w = int8_weights(16, 32, rng);
    w.data.resize(15 * 32);
    check_refused(w, frugal::cuda_errc::invalid_problem, "weights.data");
    w = int8_weights(16, 32, rng);
    w.col_sums.resize(3);
    check_refused(w, frugal::cuda_errc::invalid_problem, "weights.col_sums");
    check_refused(fq::quantized_weights{}, frugal::cuda_errc::invalid_problem, "weights.rows");
    fc::gemm_w8a8_arguments g;
    CHECK(fc::make_w8a8_arguments(int8_weights(16, 32, rng), {.data = a8}, g).code ==
          frugal::cuda_errc::invalid_pointer);
  }

  TEST_CASE("make_w4a16_arguments: int4_weights' fields land where gemm_w4a16 reads them") {
    std::mt19937 rng(9);
    for (const bool symmetric : {true, false}) {
      CAPTURE(symmetric);
      const auto w = int4_weights(32, 256, symmetric, rng);
      const fc::w4a16_weight_pointers p{.packed = reinterpret_cast<const std::uint8_t*>(a8),
                                        .scales = reinterpret_cast<const __half*>(floats),
                                        .zero_points = reinterpret_cast<const std::uint8_t*>(ints)};
      fc::gemm_w4a16_arguments g{.m = 1, .x = out, .ldx = 256, .c = out + 8192, .ldc = 32};
      REQUIRE(static_cast<bool>(fc::make_w4a16_arguments(w, p, g)));
      CHECK(g.n == 32);
      CHECK(g.k == 256);
      CHECK(g.ldw == 128);
      CHECK(g.group_size == 64);
      CHECK(g.w == p.packed);
      CHECK(g.scale == p.scales);
      CHECK(g.zero_point == (symmetric ? nullptr : p.zero_points));
      CHECK(fc::can_implement(g, ampere).code == frugal::cuda_errc::success);
    }
  }

  TEST_CASE("make_w4a16_arguments: asymmetric weights without zero points, or a short field, are refused") {
    std::mt19937 rng(10);
    const fc::w4a16_weight_pointers p{.packed = reinterpret_cast<const std::uint8_t*>(a8),
                                      .scales = reinterpret_cast<const __half*>(floats)};
    fc::gemm_w4a16_arguments g;
    CHECK(fc::make_w4a16_arguments(int4_weights(32, 256, false, rng), p, g).code ==
          frugal::cuda_errc::invalid_pointer);
    auto w = int4_weights(32, 256, true, rng);
    w.scales.pop_back();
    const fc::status s = fc::make_w4a16_arguments(w, p, g);
    CHECK(s.code == frugal::cuda_errc::invalid_problem);
    CHECK(s.message.find("weights.scales") != std::string::npos);
    w = int4_weights(32, 256, true, rng);
    w.group_size = 96;
    CHECK(fc::make_w4a16_arguments(w, p, g).code == frugal::cuda_errc::unsupported_group);
  }
}

TEST_CASE("upload: W8A8 weights from the host toolkit give the host GEMM's result on the device" *
          FRUGAL_NEEDS_GPU) {
  std::mt19937 rng(11);
  const std::size_t m = 8, n = 64, k = 128;
  const auto w = int8_weights(n, k, rng);
  std::vector<float> bias(n);
  for (std::size_t i = 0; i < n; ++i) bias[i] = 0.01f * static_cast<float>(i);
  std::vector<float> x(m * k);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  const auto a = fq::quantize_rows(x, m, k);
  std::vector<float> want(m * n);
  fq::gemm_w8a8(a, w, want, {.bias = bias});

  fc::device_w8a8_weights dw;
  REQUIRE(static_cast<bool>(fc::upload(w, bias, dw)));
  CHECK(dw.bytes() == n * k + 2 * n * sizeof(float) + n * sizeof(std::int32_t));
  fc::device_buffer<std::int8_t> da(m * k);
  fc::device_buffer<float> dsa(m), dc(m * n);
  da.upload(a.data.data(), m * k);
  dsa.upload(a.scales.data(), m);
  fc::gemm_w8a8_arguments g = dw.arguments;
  g.m = static_cast<int>(m);
  g.a = da.data();
  g.lda = static_cast<int>(k);
  g.scale_a = dsa.data();
  g.c = dc.data();
  g.ldc = static_cast<int>(n);
  g.c_type = frugal::element_type::f32;
  REQUIRE(static_cast<bool>(fc::run(g)));
  std::vector<float> got(m * n);
  dc.download(got.data(), m * n);
  for (std::size_t i = 0; i < m * n; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

TEST_CASE("upload: int4 weights from the host toolkit give the host weight-only GEMM's result" *
          FRUGAL_NEEDS_GPU) {
  std::mt19937 rng(12);
  const std::size_t m = 2, n = 64, k = 256;
  for (const bool symmetric : {true, false}) {
    CAPTURE(symmetric);
    const auto w = int4_weights(n, k, symmetric, rng);
    std::vector<float> x(m * k);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = static_cast<float>(fq::half(u(rng)));
    std::vector<float> want(m * n);
    fq::gemm_weight_only(x, m, w, want);

    fc::device_w4a16_weights dw;
    REQUIRE(static_cast<bool>(fc::upload(w, {}, dw)));
    std::vector<__half> xh(m * k);
    for (std::size_t i = 0; i < m * k; ++i) xh[i] = __float2half_rn(x[i]);
    fc::device_buffer<__half> dx(m * k);
    fc::device_buffer<float> dc(m * n);
    dx.upload(xh.data(), m * k);
    fc::gemm_w4a16_arguments g = dw.arguments;
    g.m = static_cast<int>(m);
    g.x = dx.data();
    g.ldx = static_cast<int>(k);
    g.c = dc.data();
    g.ldc = static_cast<int>(n);
    g.c_type = frugal::element_type::f32;
    g.split_k = 1;
    REQUIRE(static_cast<bool>(fc::run(g)));
    std::vector<float> got(m * n);
    dc.download(got.data(), m * n);
    for (std::size_t i = 0; i < m * n; ++i)
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-2));  // fp16 dequant, as test_cuda_gemm allows
  }
}
