#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

std::vector<q::simd_path> float_paths() {
  return frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512});
}

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Independent references: value arithmetic in double, no bit tricks.
double ref_half_value(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}
double ref_bf16_value(std::uint16_t h) {
  const int e = (h >> 7) & 255, m = h & 127;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 255)
    return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(m, -133);
  return s * std::ldexp(128 + m, e - 134);
}
// Round a finite double to a binary format with `mbits` mantissa bits, minimum normal exponent emin,
// and overflow threshold `inf_at`, ties to even by std::nearbyint.
std::uint16_t ref_encode(double x, int mbits, int emin, int bias, double inf_at, std::uint16_t inf_bits) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(x);
  if (a >= inf_at) return sign | inf_bits;
  if (a < std::ldexp(1.0, emin))
    return sign | static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, mbits - emin)));
  int E;
  std::frexp(a, &E);
  int e = E - 1;
  double qv = std::nearbyint(std::ldexp(a, mbits - e));
  if (qv == std::ldexp(1.0, mbits + 1)) {
    qv /= 2;
    ++e;
  }
  return sign | static_cast<std::uint16_t>((e + bias) << mbits | (static_cast<int>(qv) - (1 << mbits)));
}
std::uint16_t ref_half_bits(float f) { return ref_encode(f, 10, -14, 15, 65520.0, 0x7c00); }
std::uint16_t ref_bf16_bits(float f) {
  return ref_encode(f, 7, -126, 127, std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0x7f80);
}

std::vector<float> encode_inputs(bool bf16) {
  std::vector<float> in;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const double v = bf16 ? ref_bf16_value(h) : ref_half_value(h);
    if (std::isnan(v)) continue;
    in.push_back(static_cast<float>(v));
    // The midpoint to the next value up is exactly representable: the tie cases.
    const auto next = static_cast<std::uint16_t>(h + 1);
    const double w = bf16 ? ref_bf16_value(next) : ref_half_value(next);
    if ((h & 0x7fff) < (bf16 ? 0x7f80 : 0x7c00) && std::isfinite(w) && ((h ^ next) & 0x8000) == 0) {
      const auto mid = static_cast<float>((v + w) / 2);
      in.push_back(mid);
      in.push_back(std::nextafter(mid, 0.0f));
      in.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const float f = from_bits(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(f)) in.push_back(f);
  }
  in.push_back(std::numeric_limits<float>::max());
  in.push_back(-std::numeric_limits<float>::denorm_min());
  return in;
}

q::row_matrix outlier_matrix(int rows, int cols, unsigned seed, int outliers = 4, float gain = 50.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  q::row_matrix w(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) w(r, c) = nd(rng);
  for (int i = 0; i < outliers; ++i) w.row((i * 7 + 3) % rows) *= gain;
  return w;
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

TEST_CASE("element_type: bits per element and lower-case names") {
  using frugal::element_type;
  CHECK(frugal::element_bits(element_type::i4) == 4);
  CHECK(frugal::element_bits(element_type::boolean) == 8);
  CHECK(frugal::element_bits(element_type::f8_e4m3) == 8);
  CHECK(frugal::element_bits(element_type::bf16) == 16);
  CHECK(frugal::element_bits(element_type::u32) == 32);
  CHECK(frugal::element_bits(element_type::f64) == 64);
  CHECK(frugal::element_bits(static_cast<element_type>(99)) == 0);
  CHECK(std::string(frugal::to_string(element_type::f32)) == "f32");
  CHECK(std::string(frugal::to_string(element_type::u8)) == "u8");
  CHECK(std::string(frugal::to_string(element_type::i4)) == "i4");
  CHECK(std::string(frugal::to_string(element_type::f8_e4m3)) == "f8_e4m3");
  CHECK(std::string(frugal::to_string(static_cast<element_type>(99))) == "?");
  static_assert(frugal::element_bits(element_type::f16) == 16, "usable in constant expressions");
}

TEST_CASE("quant: fp16 decodes all 65,536 bit patterns exactly, on every path") {
  std::vector<q::half> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b] = q::half::from_bits(static_cast<std::uint16_t>(b));
  for (auto path : float_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<float> out(all.size());
    q::convert(all, out, path);
    int bad = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const double ref = ref_half_value(static_cast<std::uint16_t>(b));
      if (std::isnan(ref)) {
        // NaN stays NaN with its payload, quieted.
        const std::uint32_t want = (b & 0x8000u) << 16 | 0x7f800000u | (b & 0x3ffu) << 13 | 0x400000u;
        bad += to_bits(out[b]) != want;
      } else {
        bad += !(static_cast<double>(out[b]) == ref && std::signbit(out[b]) == std::signbit(ref));
      }
    }
    CHECK(bad == 0);
  }
  CHECK(static_cast<float>(q::half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(q::half::from_bits(0x7bff)) == 65504.0f);
}

TEST_CASE("quant: fp16 encoding rounds to nearest even, with ties, subnormals, overflow and NaN") {
  const std::vector<float> in = encode_inputs(false);
  for (auto path : float_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<q::half> out(in.size());
    q::convert(in, out, path);
    int bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i) bad += out[i].bits != ref_half_bits(in[i]);
    CHECK(bad == 0);
    std::vector<float> nans = {from_bits(0x7fc00000u), from_bits(0xff800001u), from_bits(0x7fa5a000u)};
    std::vector<q::half> hn(nans.size());
    q::convert(nans, hn, path);
    CHECK(hn[0].bits == 0x7e00);
    CHECK(hn[1].bits == 0xfe00);
    CHECK(hn[2].bits == (0x7e00 | (0x25a000u >> 13)));
  }
  CHECK(q::half(65519.0f).bits == 0x7bff);
  CHECK(q::half(65520.0f).bits == 0x7c00);
  CHECK(q::half(2049.0f).bits == q::half(2048.0f).bits);  // tie to even
  CHECK(q::half(std::ldexp(1.0f, -25)).bits == 0);        // tie to even: 0
  CHECK(q::half(std::ldexp(1.5f, -25)).bits == 1);
}

TEST_CASE("quant: bf16 decodes all 65,536 bit patterns and encodes ties, subnormals, overflow and NaN") {
  std::vector<q::bfloat16> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b] = q::bfloat16::from_bits(static_cast<std::uint16_t>(b));
  const std::vector<float> in = encode_inputs(true);
  for (auto path : float_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<float> out(all.size());
    q::convert(all, out, path);
    int bad = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const double ref = ref_bf16_value(static_cast<std::uint16_t>(b));
      bad += std::isnan(ref) ? to_bits(out[b]) != b << 16 : !(static_cast<double>(out[b]) == ref);
    }
    CHECK(bad == 0);
    std::vector<q::bfloat16> enc(in.size());
    q::convert(in, enc, path);
    bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i) bad += enc[i].bits != ref_bf16_bits(in[i]);
    CHECK(bad == 0);
    std::vector<float> nans = {from_bits(0x7f800001u), from_bits(0xffc12345u)};
    std::vector<q::bfloat16> bn(2);
    q::convert(nans, bn, path);
    CHECK(bn[0].bits == 0x7fc0);
    CHECK(bn[1].bits == 0xffc1);
  }
  CHECK(q::bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);
  CHECK(q::bfloat16(from_bits(0x00018000u)).bits == 0x0002);  // subnormal tie to even, not flushed
}

TEST_CASE("quant: half and bfloat16 interoperate with Eigen bit for bit, and bulk conversion handles tails") {
  for (float f : {0.0f, -0.0f, 1.0f, -3.14159f, 65504.0f, 1e-7f, 70000.0f}) {
    const Eigen::half eh(f);
    CHECK(q::half(eh).bits == q::half(f).bits);
    CHECK(Eigen::numext::bit_cast<std::uint16_t>(static_cast<Eigen::half>(q::half(f))) == q::half(f).bits);
    const Eigen::bfloat16 eb(f);
    CHECK(q::bfloat16(eb).bits == q::bfloat16(f).bits);
    CHECK(static_cast<float>(static_cast<Eigen::bfloat16>(q::bfloat16(f))) ==
          static_cast<float>(q::bfloat16(f)));
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  for (std::size_t n : {0u, 1u, 7u, 15u, 17u, 1003u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    for (auto path : float_paths()) {
      std::vector<q::half> h(n);
      std::vector<q::bfloat16> b(n);
      q::convert(x, h, path);
      q::convert(x, b, path);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(h[i].bits == ref_half_bits(x[i]));
        CHECK(b[i].bits == ref_bf16_bits(x[i]));
      }
    }
  }
  // Large arrays take the non-temporal-store path; an odd offset makes the output misaligned.
  std::vector<float> big(std::size_t{2} << 20 | 5);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 4099) * 0.37f - 700.0f;
  const std::span<const float> src = std::span<const float>(big).subspan(1);
  for (auto path : float_paths()) {
    CAPTURE(q::to_string(path));
    std::vector<q::half> h(src.size() + 1);
    std::vector<q::bfloat16> b(src.size() + 1);
    q::convert(src, std::span<q::half>(h).subspan(1), path);
    q::convert(src, std::span<q::bfloat16>(b).subspan(1), path);
    std::vector<float> back(src.size() + 1), backb(src.size() + 1);
    q::convert(std::span<const q::half>(h).subspan(1), std::span<float>(back).subspan(1), path);
    q::convert(std::span<const q::bfloat16>(b).subspan(1), std::span<float>(backb).subspan(1), path);
    int bad = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      bad += h[i + 1].bits != q::detail::float_to_half_bits(src[i]);
      bad += b[i + 1].bits != q::detail::float_to_bf16_bits(src[i]);
      bad += back[i + 1] != q::detail::half_bits_to_float(h[i + 1].bits);
      bad += backb[i + 1] != q::detail::bf16_bits_to_float(b[i + 1].bits);
    }
    CHECK(bad == 0);
  }
  std::vector<float> two(2);
  std::vector<q::half> three(3);
  CHECK(error_of([&] { q::convert(two, three); }).find("output has 3") != std::string::npos);
}

TEST_CASE("quant: quantize follows the ONNX formulas on hand-checked edge cases") {
  const auto quant1 = [](std::vector<float> x, q::scheme s, float scale, std::int32_t zp) {
    const auto t = q::quantize(x, 1, x.size(), s, q::quant_params{{scale}, {zp}});
    std::vector<int> v;
    for (std::size_t i = 0; i < x.size(); ++i) v.push_back(t.value(0, i));
    return v;
  };
  const q::scheme sym{};
  SUBCASE("round half to even, and half away from zero as the option") {
    CHECK(quant1({0.5f, 1.5f, 2.5f, -2.5f, -0.5f, -1.5f, 3.5f}, sym, 1.0f, 0) ==
          std::vector<int>{0, 2, 2, -2, 0, -2, 4});
    q::scheme away = sym;
    away.rounding = q::rounding_mode::half_away_from_zero;
    CHECK(quant1({0.5f, 1.5f, 2.5f, -2.5f, -0.5f}, away, 1.0f, 0) == std::vector<int>{1, 2, 3, -3, -1});
    // x / scale, not x * (1 / scale): 0.3 / 0.1 rounds to 3 either way, 0.25 / 0.1 = 2.5 -> 2.
    CHECK(quant1({0.25f, 0.35f}, sym, 0.1f, 0) == std::vector<int>{2, 4});
  }
  SUBCASE("saturation at both ends, narrow vs full range") {
    CHECK(quant1({1000.0f, -1000.0f, 127.4f, -127.6f}, sym, 1.0f, 0) ==
          std::vector<int>{127, -127, 127, -127});
    q::scheme full = sym;
    full.narrow_range = false;
    CHECK(quant1({1000.0f, -1000.0f, -127.6f}, full, 1.0f, 0) == std::vector<int>{127, -128, -128});
    const q::scheme u8{.type = frugal::element_type::u8, .symmetric = false};
    CHECK(quant1({-200.0f, 0.0f, 1.0f, 500.0f}, u8, 1.0f, 128) == std::vector<int>{0, 128, 129, 255});
  }
  SUBCASE("int4 limits -8..7, narrow -7..7, asymmetric 0..15") {
    const q::scheme i4{.type = frugal::element_type::i4, .narrow_range = false};
    CHECK(quant1({-100.0f, -8.0f, -7.5f, 7.0f, 7.5f, 100.0f}, i4, 1.0f, 0) ==
          std::vector<int>{-8, -8, -8, 7, 7, 7});
    const q::scheme i4n{.type = frugal::element_type::i4};
    CHECK(quant1({-100.0f, 100.0f}, i4n, 1.0f, 0) == std::vector<int>{-7, 7});
    const q::scheme i4a{.type = frugal::element_type::i4, .symmetric = false};
    CHECK(quant1({-100.0f, 0.0f, 100.0f}, i4a, 1.0f, 3) == std::vector<int>{0, 3, 15});
  }
  SUBCASE("the range is widened to include zero, so zero is exact") {
    const q::scheme asym{.symmetric = false};
    const auto [s1, z1] = q::params_from_range(1.0f, 5.0f, asym);
    CHECK(s1 == doctest::Approx(5.0f / 255.0f));
    CHECK(z1 == -128);
    const auto [s2, z2] = q::params_from_range(-3.0f, -1.0f, asym);
    CHECK(s2 == doctest::Approx(3.0f / 255.0f));
    CHECK(z2 == 127);
    const auto t = q::quantize(std::vector<float>{-0.7f, 0.0f, 2.9f}, 1, 3, asym);
    CHECK(t.dequantized(0, 1) == 0.0f);
    const auto [s3, z3] = q::params_from_range(-1.0f, 2.0f, q::scheme{});
    CHECK(s3 == doctest::Approx(2.0f / 127.0f));
    CHECK(z3 == 0);
  }
  SUBCASE("dequantize is (q - zero_point) * scale exactly") {
    const q::scheme asym{.type = frugal::element_type::u8, .symmetric = false};
    std::vector<float> x = {-1.0f, -0.3f, 0.0f, 0.77f, 2.0f};
    const auto t = q::quantize(x, 1, x.size(), asym);
    std::vector<float> back(x.size());
    q::dequantize(t, back);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(back[i] == static_cast<float>(t.value(0, i) - t.zero_points[0]) * t.scales[0]);
      CHECK(std::abs(back[i] - x[i]) <= t.scales[0] / 2 * 1.0001f);
    }
  }
}

TEST_CASE("quant: every SIMD path quantizes and dequantizes bit for bit like the scalar formula") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const std::size_t rows = 5, cols = 67;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = nd(rng);
  for (std::size_t i = 0; i < x.size(); i += 5)
    x[i] = std::nearbyint(x[i] * 4) / 4 + 0.5f;  // exact halves at scale 1
  for (frugal::element_type t :
       {frugal::element_type::i8, frugal::element_type::u8, frugal::element_type::i4})
    for (bool symmetric : {true, false})
      for (auto rounding : {q::rounding_mode::half_to_even, q::rounding_mode::half_away_from_zero}) {
        std::vector<q::scheme> schemes = {{.type = t, .symmetric = symmetric, .rounding = rounding},
                                          {.type = t,
                                           .granularity = q::granularity::per_channel,
                                           .axis = 0,
                                           .symmetric = symmetric,
                                           .rounding = rounding},
                                          {.type = t,
                                           .granularity = q::granularity::per_channel,
                                           .axis = 1,
                                           .symmetric = symmetric,
                                           .rounding = rounding},
                                          {.type = t,
                                           .granularity = q::granularity::per_group,
                                           .group_size = 67,
                                           .symmetric = symmetric,
                                           .rounding = rounding}};
        for (const auto& s : schemes) {
          auto ref = q::quantize(x, rows, cols, s, q::simd_path::portable);
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) {
              const std::size_t p = q::param_index(s, cols, r, c);
              const std::int32_t want = q::detail::quantize_value(
                  x[r * cols + c], ref.scales[p], ref.zero_points[p], q::qmin(s), q::qmax(s), rounding);
              REQUIRE(ref.value(r, c) == want);
            }
          const auto two_pass = q::quantize(x, rows, cols, s, q::choose_params(x, rows, cols, s));
          CHECK(two_pass.data == ref.data);
          CHECK(two_pass.scales == ref.scales);
          std::vector<float> ref_back(x.size());
          q::dequantize(ref, ref_back, q::simd_path::portable);
          for (auto path : float_paths()) {
            CAPTURE(q::to_string(path));
            const auto got = q::quantize(x, rows, cols, s, path);
            CHECK(got.scales == ref.scales);
            CHECK(got.zero_points == ref.zero_points);
            CHECK(got.data == ref.data);
            std::vector<float> back(x.size());
            q::dequantize(got, back, path);
            CHECK(back == ref_back);
          }
        }
      }
}

TEST_CASE("quant: per-channel and per-group error is lower than per-tensor on outlier channels") {
  const q::row_matrix w = outlier_matrix(64, 256, 5);
  const auto err = [&](const q::scheme& s) { return q::relative_error(w, q::fake_quantize(w, s)); };
  const double tensor = err({});
  const double channel = err({.granularity = q::granularity::per_channel, .axis = 0});
  const double group = err({.granularity = q::granularity::per_group, .group_size = 32});
  const q::scheme g32{.granularity = q::granularity::per_group, .group_size = 32};
  const std::span<const float> ws(w.data(), static_cast<std::size_t>(w.size()));
  CHECK(q::quantize(w, g32).data == q::quantize(ws, 64, 256, g32, q::choose_params(ws, 64, 256, g32)).data);
  CHECK(channel < tensor / 4);
  CHECK(group < tensor / 4);
  const double i4_group =
      err({.type = frugal::element_type::i4, .granularity = q::granularity::per_group, .group_size = 32});
  const double i4_tensor = err({.type = frugal::element_type::i4});
  CHECK(i4_group < i4_tensor);
  CHECK(q::sqnr_db(w, q::fake_quantize(w, {.granularity = q::granularity::per_channel})) > 35.0);
}

TEST_CASE("quant: bad input fails with an error that names what and where") {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const q::scheme per_row{.granularity = q::granularity::per_channel, .axis = 0};
  SUBCASE("a scale of zero, NaN, Inf or below zero") {
    for (float bad : {0.0f, std::nanf(""), std::numeric_limits<float>::infinity(), -1.0f}) {
      const std::string e = error_of([&] {
        q::quantize(x, 2, 3, per_row, q::quant_params{{1.0f, bad}, {0, 0}});
      });
      CHECK(e.find("params.scales[1]") != std::string::npos);
    }
  }
  SUBCASE("a shape that does not divide into groups") {
    const std::string e = error_of(
        [&] { q::quantize(x, 2, 3, q::scheme{.granularity = q::granularity::per_group, .group_size = 2}); });
    CHECK(e.find("not a multiple of scheme.group_size") != std::string::npos);
    CHECK(error_of([&] {
            q::quantize_int4(std::vector<float>(2 * 96), 2, 96, {.group_size = 64});
          }).find("cols (96)") != std::string::npos);
    CHECK(error_of([&] {
            q::quantize_int4(std::vector<float>(2 * 96), 2, 96, {.group_size = 48});
          }).find("options.group_size") != std::string::npos);
  }
  SUBCASE("a zero point outside the range") {
    const q::scheme u8{
        .type = frugal::element_type::u8, .granularity = q::granularity::per_channel, .symmetric = false};
    const std::string e = error_of([&] {
      q::quantize(x, 2, 3, u8, q::quant_params{{1.0f, 1.0f}, {0, 256}});
    });
    CHECK(e.find("params.zero_points[1] = 256 is outside [0, 255]") != std::string::npos);
    CHECK(error_of([&] {
            q::quantize(x, 2, 3, per_row, q::quant_params{{1.0f}, {0}});
          }).find("params.scales has 1") != std::string::npos);
  }
  SUBCASE("NaN or Inf in the data, by default") {
    x[4] = std::nanf("");
    CHECK(error_of([&] { q::quantize(x, 2, 3, per_row); }).find("data[4] is NaN") != std::string::npos);
    for (auto path : float_paths())
      CHECK(error_of([&] {
              q::quantize(x, 2, 3, per_row, q::quant_params{{1.0f, 1.0f}, {0, 0}}, path);
            }).find("data[4] is NaN") != std::string::npos);
    x[4] = 5.0f;
    x[2] = -std::numeric_limits<float>::infinity();
    CHECK(error_of([&] { q::quantize(x, 2, 3, q::scheme{}); }).find("data[2] is -Inf") != std::string::npos);
    CHECK(error_of([&] { q::quantize_rows(x, 2, 3); }).find("data[2] is -Inf") != std::string::npos);
  }
  SUBCASE("the saturate policy: Inf saturates, NaN becomes the zero point") {
    x[1] = std::numeric_limits<float>::infinity();
    x[2] = -std::numeric_limits<float>::infinity();
    x[3] = std::nanf("");
    for (auto path : float_paths()) {
      q::scheme s{
          .type = frugal::element_type::u8, .symmetric = false, .nonfinite = q::nonfinite_policy::saturate};
      const auto t = q::quantize(x, 1, 6, s, path);
      CHECK(t.value(0, 1) == 255);
      CHECK(t.value(0, 2) == 0);
      CHECK(t.value(0, 3) == t.zero_points[0]);
      CHECK(t.dequantized(0, 3) == 0.0f);
      CHECK(t.scales[0] == doctest::Approx(6.0f / 255.0f));  // the range ignores non-finite values
    }
  }
  SUBCASE("the wrong element type, axis or data size") {
    CHECK(error_of([&] {
            q::quantize(x, 2, 3, q::scheme{.type = frugal::element_type::f16});
          }).find("scheme.type") != std::string::npos);
    CHECK(error_of([&] {
            q::quantize(x, 2, 3, q::scheme{.granularity = q::granularity::per_channel, .axis = 2});
          }).find("scheme.axis") != std::string::npos);
    CHECK(error_of([&] { q::quantize(x, 2, 4, q::scheme{}); }).find("data has 6 elements") !=
          std::string::npos);
  }
}

TEST_CASE("quant: int4 packs two per byte, low nibble first, and round-trips") {
  const std::vector<std::int8_t> v = {1, -2, 7, -8, 0, 5, -1};
  const auto packed = q::pack_int4(v, 1, 7);
  REQUIRE(packed.size() == 4);
  CHECK(packed[0] == 0xe1);
  CHECK(packed[1] == 0x87);
  CHECK(packed[2] == 0x50);
  CHECK(packed[3] == 0x0f);
  CHECK(q::unpack_int4(packed, 1, 7) == v);
  std::mt19937 rng(1);
  std::vector<std::int8_t> u(6 * 10);
  for (auto& e : u) e = static_cast<std::int8_t>(rng() % 16);
  CHECK(q::unpack_int4(q::pack_int4(u, 6, 10, false), 6, 10, false) == u);
  CHECK(error_of([&] {
          q::pack_int4(std::vector<std::int8_t>{3, 9}, 1, 2);
        }).find("values[1] = 9") != std::string::npos);

  SUBCASE("groupwise int4 weights carry fp16 scales and uint8 zero points in the documented layout") {
    const q::row_matrix w = outlier_matrix(8, 256, 9, 1, 10.0f);
    for (bool symmetric : {true, false}) {
      const auto w4 = q::quantize_int4(w, {.group_size = 64, .symmetric = symmetric});
      CHECK(w4.packed.size() == 8 * 128);
      CHECK(w4.scales.size() == 8 * 4);
      CHECK(w4.zero_points.size() == (symmetric ? 0u : 32u));
      CHECK(w4.memory_bytes() == 8 * 128 + 64 + (symmetric ? 0 : 32));
      const q::row_matrix back = q::dequantize(w4);
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 256; ++k) {
          const std::size_t g = static_cast<std::size_t>(n) * 4 + static_cast<std::size_t>(k) / 64;
          const float scale = static_cast<float>(w4.scales[g]);
          const int zp = symmetric ? 0 : w4.zero_points[g];
          const std::uint8_t byte =
              w4.packed[static_cast<std::size_t>(n) * 128 + static_cast<std::size_t>(k) / 2];
          int nib = (k & 1) ? byte >> 4 : byte & 15;
          if (symmetric) nib = nib >= 8 ? nib - 16 : nib;
          CHECK(back(n, k) == static_cast<float>(nib - zp) * scale);
          CHECK(std::abs(back(n, k) - w(n, k)) <= scale * 0.5f * 1.001f);
        }
    }
  }
}

TEST_CASE(
    "quant: calibration observers produce min-max, moving-average, percentile, MSE and entropy ranges") {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(400), b(400);
  for (auto& v : a) v = nd(rng);
  for (auto& v : b) v = 2.0f * nd(rng);
  SUBCASE("min-max over batches equals min-max of all the data, per tensor and per channel") {
    q::minmax_observer obs;
    obs.observe(a, 20, 20);
    obs.observe(b, 20, 20);
    std::vector<float> all = a;
    all.insert(all.end(), b.begin(), b.end());
    const q::scheme s{.symmetric = false};
    const auto want = q::choose_params(all, 40, 20, s);
    const auto got = obs.compute_params(s);
    CHECK(got.scales == want.scales);
    CHECK(got.zero_points == want.zero_points);
    CHECK(obs.stats().batches == 2);
    CHECK(obs.stats().values == 800);
    q::minmax_observer per_col({.granularity = q::granularity::per_channel, .axis = 1});
    per_col.observe(a, 20, 20);
    per_col.observe(b, 20, 20);
    const q::scheme sc{.granularity = q::granularity::per_channel, .axis = 1};
    const auto pc = per_col.compute_params(sc);
    CHECK(pc.scales == q::choose_params(all, 40, 20, sc).scales);
    CHECK(error_of([&] { per_col.compute_params(q::scheme{}); }).find("granularity") != std::string::npos);
  }
  SUBCASE("moving average moves the range by the averaging constant") {
    q::moving_average_minmax_observer obs({.averaging_constant = 0.25f});
    obs.observe(std::vector<float>{-1.0f, 1.0f}, 1, 2);
    obs.observe(std::vector<float>{-5.0f, 9.0f}, 1, 2);
    CHECK(obs.min_values()[0] == doctest::Approx(-2.0f));
    CHECK(obs.max_values()[0] == doctest::Approx(3.0f));
    CHECK(error_of([] {
            q::moving_average_minmax_observer({.averaging_constant = 0.0f});
          }).find("options.averaging_constant") != std::string::npos);
  }
  std::vector<float> heavy(20000);
  for (auto& v : heavy) v = nd(rng);
  heavy[17] = 40.0f;
  heavy[99] = -35.0f;
  const q::scheme sym{};
  const float minmax_scale = q::choose_params(heavy, 1, heavy.size(), sym).scales[0];
  SUBCASE("percentile clips the outliers and keeps the bulk") {
    q::percentile_observer obs({.percentile = 99.9});
    obs.observe(heavy, 100, 200);
    const float scale = obs.compute_params(sym).scales[0];
    CHECK(scale * 127 > 2.8f);  // the 99.9th percentile of |N(0,1)| is 3.29
    CHECK(scale * 127 < 3.8f);
    CHECK(scale < minmax_scale / 5);
  }
  SUBCASE("the histogram grows with later batches without losing counts") {
    q::percentile_observer obs({.percentile = 100.0});
    obs.observe(a, 20, 20);
    obs.observe(heavy, 100, 200);
    CHECK(obs.range(0) >= 40.0f);
    CHECK(obs.compute_params(sym).scales[0] * 127 >= 40.0f);
  }
  SUBCASE("MSE clipping beats min-max on heavy tails") {
    q::mse_observer obs;
    obs.observe(heavy, 100, 200);
    const auto p = obs.compute_params(sym);
    CHECK(p.scales[0] < minmax_scale);
    const auto err = [&](const q::quant_params& qp) {
      std::vector<float> back(heavy.size());
      q::dequantize(q::quantize(heavy, 1, heavy.size(), sym, qp), back);
      return q::relative_error(heavy, back);
    };
    CHECK(err(p) < err(q::choose_params(heavy, 1, heavy.size(), sym)));
  }
  SUBCASE("entropy (KL) picks a threshold inside the range") {
    q::entropy_observer obs;
    obs.observe(heavy, 100, 200);
    const float t = obs.threshold(0);
    CHECK(t > 2.5f);
    CHECK(t < 35.0f);
    CHECK(obs.compute_params(sym).scales[0] == doctest::Approx(t / 127.0f));
  }
  SUBCASE("per-channel histogram observers keep one range per channel") {
    std::vector<float> x(2 * 500);
    for (std::size_t i = 0; i < 500; ++i) {
      x[i] = nd(rng);
      x[500 + i] = 10.0f * nd(rng);
    }
    q::percentile_observer obs(
        {.histogram = {.observer = {.granularity = q::granularity::per_channel, .axis = 0}, .bins = 256},
         .percentile = 99.0});
    obs.observe(x, 2, 500);
    const auto p = obs.compute_params({.granularity = q::granularity::per_channel, .axis = 0});
    REQUIRE(p.scales.size() == 2);
    CHECK(p.scales[1] > 5 * p.scales[0]);
  }
}

TEST_CASE("quant: SmoothQuant moves activation outliers into the weights without changing X W^T") {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  q::row_matrix x(16, 64), w(32, 64);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
  for (int i = 0; i < w.size(); ++i) w.data()[i] = 0.1f * nd(rng);
  x.col(5) *= 60.0f;
  x.col(40) *= 30.0f;
  std::vector<float> absmax(64);
  for (int j = 0; j < 64; ++j) absmax[static_cast<std::size_t>(j)] = x.col(j).cwiseAbs().maxCoeff();
  const auto sq = q::smoothquant(w, absmax, 0.5f);
  for (int j : {0, 5, 40})
    CHECK(sq.factors[static_cast<std::size_t>(j)] ==
          doctest::Approx(std::sqrt(absmax[static_cast<std::size_t>(j)]) /
                          std::sqrt(w.col(j).cwiseAbs().maxCoeff())));
  q::row_matrix xs = x;
  q::smooth_activations(xs, sq.factors);
  const q::row_matrix before = x * w.transpose(), after = xs * sq.weights.transpose();
  CHECK(q::relative_error(before, after) < 1e-6);
  CHECK((before - after).cwiseAbs().maxCoeff() < 1e-4f * before.cwiseAbs().maxCoeff());
  const float max_after = xs.cwiseAbs().maxCoeff();
  CHECK(max_after < x.cwiseAbs().maxCoeff() / 3);
  CHECK(sq.act_scale == doctest::Approx(max_after / 127.0f));
  // The point: per-tensor int8 activations lose much less after smoothing.
  const auto e = [](const q::row_matrix& m) {
    return q::relative_error(m, q::fake_quantize(m, q::scheme{}));
  };
  CHECK(e(xs) < e(x));
  CHECK(error_of([&] { q::smoothing_factors(absmax, w, 1.5f); }).find("alpha") != std::string::npos);
  CHECK(error_of([&] { q::smoothing_factors(std::vector<float>(3), w); }).find("act_absmax has 3") !=
        std::string::npos);
}

TEST_CASE("quant: metrics give the textbook values") {
  const std::vector<float> ref = {3.0f, 4.0f}, approx = {3.0f, 4.5f};
  CHECK(q::relative_error(ref, approx) == doctest::Approx(0.1));
  CHECK(q::sqnr_db(ref, approx) == doctest::Approx(20.0));
  CHECK(q::max_abs_error(ref, approx) == doctest::Approx(0.5));
  CHECK(q::cosine_similarity(std::vector<float>{1, 0}, std::vector<float>{0, 1}) == doctest::Approx(0.0));
  CHECK(q::cosine_similarity(std::vector<float>{1, 2}, std::vector<float>{2, 4}) == doctest::Approx(1.0));
  CHECK(q::relative_error(ref, ref) == 0.0);
  CHECK(std::isinf(q::sqnr_db(ref, ref)));
  const auto h = q::error_histogram(std::vector<float>{0, 0, 0, 0}, std::vector<float>{-1, 0.1f, 0.2f, 1}, 4);
  CHECK(h.lo == doctest::Approx(-1.0));
  CHECK(h.hi == doctest::Approx(1.0));
  CHECK(h.counts == std::vector<std::size_t>{1, 0, 2, 1});
  Eigen::MatrixXf a = Eigen::MatrixXf::Ones(2, 3);
  q::row_matrix b = q::row_matrix::Ones(2, 3) * 2.0f;
  CHECK(q::cosine_similarity(a, b) == doctest::Approx(1.0));
  CHECK(q::relative_error(a, b) == doctest::Approx(1.0));
  CHECK(error_of([&] { q::relative_error(ref, std::vector<float>(3)); }).find("approximation has 3") !=
        std::string::npos);
}

// Issue 19, class 3: NaN and Inf through calibration and scale computation. Observers skip them and
// count them; a channel with nothing finite, and a NaN or infinite range, is an error instead of a
// silent scale of 1; values near FLT_MAX keep every range, scale and cast finite.
#define CHECK_INVALID(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), std::invalid_argument)

TEST_CASE("quant: NaN and Inf in calibration and scale computation have defined, tested behaviour") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf(""),
              fmax = std::numeric_limits<float>::max();
  const q::scheme sym{}, asym{.symmetric = false};
  SUBCASE("params_from_range") {
    for (const q::scheme& s : {sym, asym}) {
      CHECK_INVALID(q::params_from_range(-inf, inf, s),
                    "frugal::quant::params_from_range: the range [-inf, inf]");
      CHECK_INVALID(q::params_from_range(nan, 1.0f, s), "is NaN or infinite");
      CHECK_INVALID(q::params_from_range(0.0f, nan, s), "is NaN or infinite");
      CHECK_INVALID(q::params_from_range(-inf, 1.0f, s), "is NaN or infinite");
      // The empty range (a min-max over nothing finite) widens to [0, 0]: scale 1, zero exact.
      const auto [scale, zp] = q::params_from_range(inf, -inf, s);
      CHECK(scale == 1.0f);
      CHECK(zp == (s.symmetric ? q::symmetric_zero_point(s) : q::qmin(s)));  // real 0 exactly
      // The widest finite range gives a finite scale and an in-range zero point.
      const auto [s2, z2] = q::params_from_range(-fmax, fmax, s);
      CHECK(std::isfinite(s2));
      CHECK(s2 > 1e35f);
      CHECK(z2 >= q::qmin(s));
      CHECK(z2 <= q::qmax(s));
    }
  }
  SUBCASE("min-max observer: skips and counts NaN and Inf; a channel with nothing finite is an error") {
    q::minmax_observer obs;
    obs.observe(std::vector<float>{nan, inf, 1.0f, -2.0f, -inf, 0.5f}, 2, 3);
    CHECK(obs.stats().values == 3);
    CHECK(obs.stats().nonfinite == 3);
    CHECK(obs.min_values()[0] == -2.0f);
    CHECK(obs.max_values()[0] == 1.0f);
    CHECK(obs.compute_params(asym).scales ==
          q::choose_params(std::vector<float>{1.0f, -2.0f}, 1, 2, asym).scales);
    q::minmax_observer per_col({.granularity = q::granularity::per_channel, .axis = 1});
    per_col.observe(std::vector<float>{1.0f, nan, -1.0f, inf}, 2, 2);  // column 1: NaN and Inf only
    CHECK_INVALID(
        per_col.compute_params({.granularity = q::granularity::per_channel, .axis = 1}),
        "frugal::quant::minmax_observer: channel 1 has seen no finite value (2 NaN or Inf skipped)");
    per_col.observe(std::vector<float>{0.0f, 3.0f}, 1, 2);
    CHECK(per_col.compute_params({.granularity = q::granularity::per_channel, .axis = 1}).scales[1] ==
          doctest::Approx(3.0f / 127.0f));
  }
  SUBCASE("moving average: a channel's first finite batch sets it, and steps near FLT_MAX stay finite") {
    q::moving_average_minmax_observer obs(
        {.observer = {.granularity = q::granularity::per_channel, .axis = 1}, .averaging_constant = 0.5f});
    obs.observe(std::vector<float>{nan, 1.0f}, 1, 2);  // channel 0 sees nothing finite yet
    CHECK_INVALID(obs.compute_params({.granularity = q::granularity::per_channel, .axis = 1}),
                  "frugal::quant::moving_average_minmax_observer: channel 0 has seen no finite value");
    obs.observe(std::vector<float>{-4.0f, 3.0f}, 1, 2);
    CHECK(obs.min_values()[0] == -4.0f);  // was Inf + c * (x - Inf) = NaN
    CHECK(obs.max_values()[0] == -4.0f);
    CHECK(obs.max_values()[1] == 2.0f);
    q::moving_average_minmax_observer big({.averaging_constant = 0.5f});
    big.observe(std::vector<float>{fmax}, 1, 1);
    big.observe(std::vector<float>{-fmax}, 1, 1);  // x - range = -2 FLT_MAX overflows float
    CHECK(big.min_values()[0] == 0.0f);
    CHECK(std::isfinite(big.compute_params(asym).scales[0]));
  }
  SUBCASE("histogram observers: ranges near FLT_MAX stay finite, and nothing finite is an error") {
    q::percentile_observer pct({.percentile = 100.0});
    q::mse_observer mse({.candidates = 4});
    q::entropy_observer ent;
    const std::vector<float> first = {1.0f, -0.5f, 0.25f, 3e38f}, second = {-fmax, nan, inf, 2.0f};
    const auto feed = [&](auto& obs) {
      obs.observe(first, 1, 4);
      obs.observe(second, 1, 4);  // the range doubles from 3e38 past FLT_MAX: it was +Inf in float
      CHECK(obs.stats().nonfinite == 2);
      CHECK(obs.stats().values == 6);
      CHECK(obs.range(0) == fmax);
      for (const q::scheme& s : {sym, asym}) {
        const auto p = obs.compute_params(s);
        CHECK(std::isfinite(p.scales[0]));
        CHECK(p.scales[0] > 0.0f);
      }
    };
    feed(pct);
    feed(mse);
    feed(ent);
    CHECK(std::isfinite(ent.threshold(0)));
    CHECK(pct.compute_params(sym).scales[0] == doctest::Approx(fmax / 127.0f));
    q::percentile_observer nothing;
    nothing.observe(std::vector<float>{nan, -inf}, 1, 2);
    CHECK(nothing.stats().nonfinite == 2);
    CHECK_INVALID(nothing.compute_params(sym),
                  "frugal::quant::percentile_observer: channel 0 has seen no finite value");
    q::entropy_observer nothing_e;
    nothing_e.observe(std::vector<float>{nan}, 1, 1);
    CHECK_INVALID(nothing_e.compute_params(sym), "channel 0 has seen no finite value");
    CHECK_INVALID(q::percentile_observer({.histogram = {.bins = std::size_t{1} << 62}}), "options.bins");
  }
  SUBCASE("schemes: saturate maps Inf to the ends and NaN to the zero point; error names the index") {
    const std::vector<float> x = {inf, -inf, nan, 0.5f, -1.0f, 2.0f};
    for (const q::granularity g :
         {q::granularity::per_tensor, q::granularity::per_channel, q::granularity::per_group}) {
      q::scheme s{.granularity = g, .group_size = g == q::granularity::per_group ? 3 : 0};
      CHECK_INVALID(q::quantize(x, 2, 3, s), "data[0] is +Inf");
      s.nonfinite = q::nonfinite_policy::saturate;
      const auto t = q::quantize(x, 2, 3, s);
      CHECK(t.value(0, 0) == q::qmax(s));
      CHECK(t.value(0, 1) == q::qmin(s));
      CHECK(t.value(0, 2) == t.zero_points[q::param_index(s, 3, 0, 2)]);
      for (float sc : t.scales) CHECK((std::isfinite(sc) && sc > 0.0f));
    }
    // A row of nothing but NaN and Inf under saturate: its finite range is empty, so scale 1.
    const q::scheme row{.granularity = q::granularity::per_channel,
                        .nonfinite = q::nonfinite_policy::saturate};
    const auto t = q::quantize(std::vector<float>{nan, inf, 1.0f, 1.0f}, 2, 2, row);
    CHECK(t.scales[0] == 1.0f);
    CHECK(t.value(0, 1) == 127);
    CHECK_INVALID(q::quantize_rows(std::vector<float>{1.0f, inf}, 1, 2), "data[1] is +Inf");
    CHECK_INVALID(q::quantize_int4(std::vector<float>(32, nan), 1, 32, {.group_size = 32}), "data[0] is NaN");
  }
  SUBCASE("SmoothQuant factors") {
    q::row_matrix w(2, 2);
    w << 1.0f, inf, 2.0f, 1.0f;
    CHECK_INVALID(q::smoothing_factors(std::vector<float>{1.0f, 1.0f}, w), "w column 1 holds NaN or Inf");
    w << 1.0f, 1e-40f, 2.0f, 1e-40f;
    // sqrt(3e38) / sqrt(1e-40) is 1.7e39: its cast to float was undefined.
    CHECK_INVALID(q::smoothing_factors(std::vector<float>{1.0f, 3e38f}, w), "the factor of channel 1");
    CHECK_INVALID(q::smoothing_factors(std::vector<float>{nan, 1.0f}, w), "act_absmax[0]");
    CHECK_INVALID(q::smoothing_factors(std::vector<float>{1.0f, 1.0f}, w, nan), "alpha");
    w << 1.0f, 4.0f, 2.0f, 1.0f;
    CHECK_INVALID(q::smooth_weights(w, std::vector<float>{1.0f, 0.0f}),
                  "frugal::quant::smooth_weights: s[1] = 0");
    CHECK_INVALID(q::smooth_activations(w, std::vector<float>{nan, 1.0f}),
                  "frugal::quant::smooth_activations: s[0]");
    const auto s = q::smoothing_factors(std::vector<float>{4.0f, 16.0f}, w);
    CHECK(s[0] == doctest::Approx(std::sqrt(4.0f / 2.0f)));
    CHECK(s[1] == doctest::Approx(std::sqrt(16.0f / 4.0f)));
  }
}
