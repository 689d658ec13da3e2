// The vectorized quantization kernels (multiply by 1/scale with a proof of exactness per block, a true
// division otherwise; vector min-max and absmax; SIMD nibble packing) against the portable ones.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;
namespace qd = frugal::quant::detail;

namespace {

std::vector<qd::float_level> simd_levels() {
  std::vector<qd::float_level> v;
  for (const q::simd_path p : frugal_test::cpu_paths({q::simd_path::avx2, q::simd_path::avx512}))
    v.push_back(p == q::simd_path::avx512 ? qd::float_level::avx512 : qd::float_level::avx2);
  return v;
}

std::string name(qd::float_level lv) { return lv == qd::float_level::avx512 ? "avx512" : "avx2"; }

// Data that stresses the fast path: ordinary values, exact ties of x / scale, values an ulp or two off
// a tie (where x * (1/scale) and x / scale may round differently), saturation and huge values.
std::vector<float> hard_data(std::size_t n, float scale, std::int32_t zp, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 60.0f);
  std::uniform_int_distribution<int> kind(0, 7), k(-300, 300), ulps(-3, 3);
  std::vector<float> x(n);
  for (auto& v : x) {
    switch (kind(rng)) {
      case 0:
      case 1:
        v = nd(rng) * scale;
        break;
      case 2:  // a tie at k + 0.5 (exact when the scale is a power of two)
        v = (static_cast<float>(k(rng)) + 0.5f) * scale;
        break;
      case 3: {  // a few ulps around a tie
        float t = (static_cast<float>(k(rng)) + 0.5f) * scale;
        for (int u = ulps(rng); u != 0; u += u > 0 ? -1 : 1)
          t = std::nextafter(
              t, u > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
        v = t;
        break;
      }
      case 4:  // near the ends of the range, ties of the shifted value included
        v = (static_cast<float>(127 - zp + k(rng) % 3) + 0.5f * static_cast<float>(k(rng) % 2)) * scale;
        break;
      case 5:
        v = (k(rng) % 2 ? 1.0f : -1.0f) * 3.0e38f;
        break;
      case 6:
        v = static_cast<float>(k(rng)) * scale * 1.0e7f;  // beyond int32 after the division
        break;
      default:
        v = static_cast<float>(k(rng) % 4) * 0.25f;
    }
    if (!std::isfinite(v)) v = std::copysign(3.0e38f, v);  // products with a huge scale stay finite
  }
  return x;
}

// quantize on every SIMD path this CPU has gives `ref`, the portable path's tensor: scales, zero
// points and integers.
void check_simd_paths_match(const std::vector<float>& x, std::size_t rows, std::size_t cols,
                            const q::scheme& s, const q::quantized_tensor& ref) {
  for (auto path : frugal_test::cpu_paths({q::simd_path::avx2, q::simd_path::avx512})) {
    CAPTURE(q::to_string(path));
    const auto got = q::quantize(x, rows, cols, s, path);
    CHECK(got.scales == ref.scales);
    CHECK(got.zero_points == ref.zero_points);
    CHECK(got.data == ref.data);
  }
}

}  // namespace

TEST_CASE("quant fast path: quantize_run on every SIMD level equals the portable division bit for bit") {
  std::mt19937 rng(2024);
  const std::vector<float> scales = {
      1.0f,   0.5f, 0.0625f, 0.1f, 0.0317f, 3.7f, 1.0e-3f, 7.1e-6f, 1.0e-39f /* 1/scale overflows */,
      3.0e38f /* 1/scale is subnormal */};
  struct range {
    std::int32_t lo, hi, zp;
  };
  const std::vector<range> ranges = {{-127, 127, 0}, {-128, 127, -5}, {0, 255, 128}, {0, 255, 17},
                                     {1, 255, 128},  {-8, 7, 0},      {-7, 7, 0},    {0, 15, 3}};
  const std::vector<std::size_t> lengths = {0, 1, 7, 15, 16, 31, 33, 63, 64, 65, 127, 128, 129, 200, 1000};
  std::size_t checked = 0;
  for (qd::float_level lv : simd_levels()) {
    const std::string level = name(lv);
    CAPTURE(level);
    for (float scale : scales)
      for (const range& rg : ranges)
        for (auto rm : {q::rounding_mode::half_to_even, q::rounding_mode::half_away_from_zero})
          for (std::size_t n : lengths) {
            CAPTURE(scale);
            CAPTURE(rg.zp);
            CAPTURE(n);
            const std::vector<float> x = hard_data(n, scale, rg.zp, rng);
            std::vector<std::int8_t> want(n + 1, 42), got(n + 1, 42);
            REQUIRE(qd::quantize_run_portable(x.data(), n, scale, rg.zp, rg.lo, rg.hi, rm, want.data()) == n);
            for (bool known_finite : {false, true}) {
              std::fill(got.begin(), got.end(), std::int8_t{42});
              CHECK(qd::quantize_run(lv, x.data(), n, scale, rg.zp, rg.lo, rg.hi, rm, got.data(),
                                     known_finite) == n);
              REQUIRE(got == want);  // the sentinel past the end is untouched too
              ++checked;
            }
          }
  }
  if (!simd_levels().empty()) CHECK(checked > 1000);
}

TEST_CASE("quant fast path: NaN and Inf are found at their first index and saturate like the scalar path") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (qd::float_level lv : simd_levels()) {
    const std::string level = name(lv);
    CAPTURE(level);
    for (std::size_t n : {1u, 17u, 64u, 100u, 257u})
      for (std::size_t pos = 0; pos < n; pos += 1 + n / 9)
        for (float sp : specials) {
          std::vector<float> x(n);
          for (auto& v : x) v = nd(rng);
          x[pos] = sp;
          if (pos + 5 < n) x[pos + 5] = specials[0];  // a later one must not hide the first
          CAPTURE(n);
          CAPTURE(pos);
          std::vector<std::int8_t> want(n), got(n);
          const std::size_t wb = qd::quantize_run_portable(x.data(), n, 0.02f, 3, -128, 127,
                                                           q::rounding_mode::half_to_even, want.data());
          REQUIRE(wb == pos);
          CHECK(qd::quantize_run(lv, x.data(), n, 0.02f, 3, -128, 127, q::rounding_mode::half_to_even,
                                 got.data()) == pos);
          CHECK(got == want);
          const qd::run_range pr = qd::minmax_portable(x.data(), n);
          for (bool symmetric : {false, true}) {
            const q::scheme s{.symmetric = symmetric};
            const qd::run_range rr = qd::range_run(lv, s, x.data(), n);
            CHECK(rr.first_nonfinite == pos);
            CHECK(q::params_from_range(rr.lo, rr.hi, s) == q::params_from_range(pr.lo, pr.hi, s));
          }
          const qd::run_range mr = qd::minmax_run(lv, x.data(), n);
          CHECK(mr.first_nonfinite == pos);
          CHECK(mr.lo == pr.lo);
          CHECK(mr.hi == pr.hi);
        }
  }
}

TEST_CASE("quant fast path: min-max and absmax ranges give the portable parameters on every length") {
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  for (qd::float_level lv : simd_levels()) {
    const std::string level = name(lv);
    CAPTURE(level);
    for (std::size_t n = 0; n <= 300; ++n) {
      std::vector<float> x(n);
      for (auto& v : x) v = nd(rng) + (n % 3 == 0 ? 4.0f : 0.0f);  // some runs all positive-ish
      if (n > 2) x[n - 1] = 40.0f + static_cast<float>(n);         // the extreme in the tail
      CAPTURE(n);
      const qd::run_range pr = qd::minmax_portable(x.data(), n);
      const qd::run_range mr = qd::minmax_run(lv, x.data(), n);
      CHECK(mr.first_nonfinite == n);
      CHECK(mr.lo == pr.lo);
      CHECK(mr.hi == pr.hi);
      for (bool symmetric : {false, true})
        for (auto t : {frugal::element_type::i8, frugal::element_type::u8, frugal::element_type::i4}) {
          const q::scheme s{.type = t, .symmetric = symmetric};
          const qd::run_range rr = qd::range_run(lv, s, x.data(), n);
          CHECK(rr.first_nonfinite == n);
          CHECK(q::params_from_range(rr.lo, rr.hi, s) == q::params_from_range(pr.lo, pr.hi, s));
        }
    }
  }
}

TEST_CASE("quant fast path: SIMD nibble packing equals the scalar packing, odd lengths included") {
  std::mt19937 rng(5);
  for (qd::float_level lv : simd_levels()) {
    const std::string level = name(lv);
    CAPTURE(level);
    for (std::size_t n = 0; n <= 260; ++n) {
      std::vector<std::int8_t> v(n);
      for (auto& e : v) e = static_cast<std::int8_t>(static_cast<int>(rng() % 16) - (n % 2 ? 8 : 0));
      std::vector<std::uint8_t> want((n + 1) / 2 + 1, 0xaa), got(want);
      qd::pack_nibbles(v.data(), n, want.data());
      qd::pack_nibbles_run(lv, v.data(), n, got.data());
      CAPTURE(n);
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("quant fast path: whole tensors quantize alike on every path, per group, per row and per tensor") {
  std::mt19937 rng(31);
  const std::size_t rows = 7, cols = 384;
  std::vector<float> x = hard_data(rows * cols, 0.05f, 0, rng);
  for (std::size_t i = 0; i < x.size(); i += 3) x[i] = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  for (frugal::element_type t :
       {frugal::element_type::i8, frugal::element_type::u8, frugal::element_type::i4})
    for (bool symmetric : {true, false})
      for (auto g : {q::granularity::per_tensor, q::granularity::per_channel, q::granularity::per_group}) {
        const q::scheme s{.type = t,
                          .granularity = g,
                          .group_size = g == q::granularity::per_group ? 128 : 0,
                          .symmetric = symmetric,
                          .nonfinite = q::nonfinite_policy::saturate};
        std::vector<float> y = x;
        y[cols + 5] = std::numeric_limits<float>::quiet_NaN();  // saturate policy: NaN -> zero point
        y[3 * cols + 200] = -std::numeric_limits<float>::infinity();
        const auto ref = q::quantize(y, rows, cols, s, q::simd_path::portable);
        const auto ref_static =
            q::quantize(y, rows, cols, s, q::choose_params(y, rows, cols, s, q::simd_path::portable),
                        q::simd_path::portable);
        CHECK(ref_static.data == ref.data);
        check_simd_paths_match(y, rows, cols, s, ref);
        for (auto path : frugal_test::cpu_paths({q::simd_path::avx2, q::simd_path::avx512})) {
          CAPTURE(q::to_string(path));
          CHECK(q::quantize(y, rows, cols, s, q::choose_params(y, rows, cols, s, path), path).data ==
                ref.data);
        }
      }
}

TEST_CASE(
    "quant fast path: groupwise int4 weights hold the integers of the scalar formula with the fp16 scale") {
  std::mt19937 rng(77);
  const std::size_t rows = 5, cols = 256;
  std::vector<float> w = hard_data(rows * cols, 0.01f, 0, rng);
  for (auto& v : w) v = std::max(-5.0f, std::min(5.0f, v));  // quantize_int4 needs finite fp16 scales
  for (int G : {32, 64, 128})
    for (bool symmetric : {true, false}) {
      const auto w4 = q::quantize_int4(w, rows, cols, {.group_size = G, .symmetric = symmetric});
      const q::scheme s{.type = frugal::element_type::i4, .symmetric = symmetric};
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t g = r * (cols / static_cast<std::size_t>(G)) + c / static_cast<std::size_t>(G);
          const std::int32_t zp = symmetric ? 0 : w4.zero_points[g];
          REQUIRE(w4.value(r, c) == qd::quantize_value(w[r * cols + c], static_cast<float>(w4.scales[g]), zp,
                                                       q::qmin(s), q::qmax(s),
                                                       q::rounding_mode::half_to_even));
        }
    }
}

TEST_CASE(
    "quant fast path: symmetric groups quantized one at a time equal the portable path, odd sizes too") {
  std::mt19937 rng(41);
  for (int g : {32, 48, 64, 96, 256})
    for (frugal::element_type t :
         {frugal::element_type::i8, frugal::element_type::u8, frugal::element_type::i4})
      for (bool narrow : {true, false})
        for (auto policy : {q::nonfinite_policy::error, q::nonfinite_policy::saturate})
          for (auto rounding : {q::rounding_mode::half_to_even, q::rounding_mode::half_away_from_zero}) {
            CAPTURE(g);
            CAPTURE(frugal::to_string(t));
            CAPTURE(narrow);
            CAPTURE(static_cast<int>(rounding));
            const std::size_t rows = 6, cols = static_cast<std::size_t>(g) * 4;
            std::vector<float> x = hard_data(rows * cols, 0.03f, 0, rng);
            // An all-zero group (scale 1), then a group whose max |x| is subnormal.
            std::fill_n(x.begin() + static_cast<std::ptrdiff_t>(cols), g, 0.0f);
            x[4 * cols + 3] = 1e-40f;
            for (std::size_t i = 4 * cols + 4; i < 4 * cols + static_cast<std::size_t>(g); ++i) x[i] = 0.0f;
            if (policy == q::nonfinite_policy::saturate)
              x[2 * cols + 7] = std::numeric_limits<float>::quiet_NaN();
            const q::scheme s{.type = t,
                              .granularity = q::granularity::per_group,
                              .group_size = g,
                              .narrow_range = narrow,
                              .rounding = rounding,
                              .nonfinite = policy};
            const auto ref = q::quantize(x, rows, cols, s, q::simd_path::portable);
            check_simd_paths_match(x, rows, cols, s, ref);
          }
  // Under the error policy a NaN in any group is reported at its index, on every path.
  std::vector<float> y(4 * 128, 0.5f);
  y[3 * 128 + 77] = -std::numeric_limits<float>::infinity();
  for (auto path :
       frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512})) {
    CHECK_THROWS_WITH_AS(
        q::quantize(y, 2, 256, {.granularity = q::granularity::per_group, .group_size = 128}, path),
        doctest::Contains("data[461] is -Inf"), std::invalid_argument);
  }
}

TEST_CASE("quant fast path: exact ties of x / scale in symmetric groups round by the scheme's mode") {
  // Each group's max |x| is 31.75 (i8, u8: 31.75 / 127) or 1.75 (i4: 1.75 / 7), so every scale is 0.25
  // exactly and every (k + 0.5) * 0.25 is an exact tie of x / scale.
  for (frugal::element_type t :
       {frugal::element_type::i8, frugal::element_type::u8, frugal::element_type::i4}) {
    const float top = t == frugal::element_type::i4 ? 1.75f : 31.75f;
    const int kmax = t == frugal::element_type::i4 ? 6 : 126;
    const std::size_t g = 64, rows = 3, cols = 4 * g;
    std::vector<float> x(rows * cols);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const int k = static_cast<int>(i % static_cast<std::size_t>(2 * kmax)) - kmax;
      x[i] = i % g == 0 ? top : (static_cast<float>(k) + 0.5f) * 0.25f;
    }
    for (auto rounding : {q::rounding_mode::half_to_even, q::rounding_mode::half_away_from_zero}) {
      CAPTURE(frugal::to_string(t));
      CAPTURE(static_cast<int>(rounding));
      const q::scheme s{.type = t,
                        .granularity = q::granularity::per_group,
                        .group_size = static_cast<int>(g),
                        .rounding = rounding};
      const auto ref = q::quantize(x, rows, cols, s, q::simd_path::portable);
      REQUIRE(ref.scales[0] == 0.25f);
      // 2.5 -> 2 or 3: the two modes differ on this data, so the comparison below can tell them apart.
      const std::int32_t zp = ref.zero_points[0];
      const float tie = 2.5f * 0.25f;
      const auto at = std::find(x.begin(), x.end(), tie) - x.begin();
      REQUIRE(at < static_cast<std::ptrdiff_t>(x.size()));
      CHECK(ref.value(static_cast<std::size_t>(at) / cols, static_cast<std::size_t>(at) % cols) - zp ==
            (rounding == q::rounding_mode::half_to_even ? 2 : 3));
      check_simd_paths_match(x, rows, cols, s, ref);
    }
  }
}

TEST_CASE("quant fast path: quantize_int4 reports a group whose scale fp16 cannot hold") {
  std::vector<float> w(2 * 64, 1.0f);
  for (std::size_t i = 64; i < 96; ++i) w[i] = 1e-12f;  // absmax / 7 is below fp16's smallest subnormal
  CHECK_THROWS_WITH_AS(
      q::quantize_int4(w, 2, 64, {.group_size = 32}),
      doctest::Contains("frugal::quant::quantize_int4: group 2 needs a scale that fp16 cannot hold"),
      std::invalid_argument);
}

TEST_CASE("quant fast path: f32 -> bf16 with streaming stores equals the portable conversion") {
  // Above the 4 MiB of output where the SIMD paths switch to non-temporal stores, with an output that
  // starts off the vector alignment and a length off the vector width.
  std::mt19937 rng(5);
  const std::size_t n = (std::size_t{1} << 21) + 37;
  std::vector<float> x(n);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (auto& v : x) {
    const std::uint32_t b = bits(rng);
    std::memcpy(&v, &b, sizeof v);  // every class of float: NaN, Inf, subnormals, ties
  }
  std::vector<q::bfloat16> ref(n + 1), got(n + 1);
  q::convert(std::span<const float>(x), std::span<q::bfloat16>(ref).subspan(1), q::simd_path::portable);
  for (auto path : frugal_test::cpu_paths({q::simd_path::avx2, q::simd_path::avx512})) {
    CAPTURE(q::to_string(path));
    std::fill(got.begin(), got.end(), q::bfloat16{});
    q::convert(std::span<const float>(x), std::span<q::bfloat16>(got).subspan(1), path);
    CHECK(got == ref);
  }
}

TEST_CASE("quant fast path: per-group quantize beyond 4 MiB (non-temporal stores) equals the portable path") {
  // 4.2 MB of int8 output: above stream_bytes, where symmetric 8-bit groups are written with
  // non-temporal stores. A NaN in row 700 makes the kernel give that row back (saturate policy: the
  // general path redoes it); an Inf in row 1000 does the same under the error policy, which throws.
  std::mt19937 rng(12);
  const std::size_t rows = 1025, cols = 4096;
  std::vector<float> x = hard_data(rows * cols, 0.02f, 0, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] = nd(rng);
  x[700 * cols + 129] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(rows * cols >= qd::stream_bytes);
  for (frugal::element_type t : {frugal::element_type::i8, frugal::element_type::u8})
    for (int g : {128, 64}) {
      CAPTURE(frugal::to_string(t));
      CAPTURE(g);
      const q::scheme s{.type = t,
                        .granularity = q::granularity::per_group,
                        .group_size = g,
                        .nonfinite = q::nonfinite_policy::saturate};
      const auto ref = q::quantize(x, rows, cols, s, q::simd_path::portable);
      check_simd_paths_match(x, rows, cols, s, ref);
    }
  std::vector<float> y = x;
  y[700 * cols + 129] = 0.5f;
  y[1000 * cols + 3] = std::numeric_limits<float>::infinity();
  const std::string inf_at = "data[" + std::to_string(1000 * cols + 3) + "] is +Inf";
  for (auto path :
       frugal_test::cpu_paths({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512})) {
    CAPTURE(q::to_string(path));
    CHECK_THROWS_WITH_AS(
        q::quantize(y, rows, cols, {.granularity = q::granularity::per_group, .group_size = 128}, path),
        doctest::Contains(inf_at.c_str()), std::invalid_argument);
  }
}

TEST_CASE(
    "quant fast path: the group kernel asked to stream into an output off 16 or 32 bytes writes the same") {
  // Non-temporal stores need 16-byte alignment: at 1 byte off the kernel must use ordinary stores, at
  // 16 off 32 it streams in 16-byte halves. Each output equals the one written without streaming.
  std::mt19937 rng(13);
  const std::size_t g = 128, runs = 32;
  std::vector<float> x(g * runs);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& v : x) v = nd(rng);
  for (qd::float_level lv : simd_levels()) {
    CAPTURE(name(lv));
    std::vector<std::int8_t> plain(g * runs);
    std::vector<float> s_plain(runs), s_stream(runs);
    REQUIRE(qd::quantize_groups_symmetric(lv, x.data(), g, runs, 127.5f, 0, -128, 127,
                                          q::rounding_mode::half_to_even, plain.data(), s_plain.data(),
                                          nullptr, false));
    alignas(64) static std::int8_t buf[g * runs + 64];
    for (std::size_t off : {0, 1, 16, 33}) {
      CAPTURE(off);
      std::fill(std::begin(buf), std::end(buf), std::int8_t{99});
      REQUIRE(qd::quantize_groups_symmetric(lv, x.data(), g, runs, 127.5f, 0, -128, 127,
                                            q::rounding_mode::half_to_even, buf + off, s_stream.data(),
                                            nullptr, true));
      CHECK(std::equal(plain.begin(), plain.end(), buf + off));
      CHECK(s_stream == s_plain);
      CHECK(buf[off + g * runs] == 99);  // nothing written past the end
    }
  }
}
