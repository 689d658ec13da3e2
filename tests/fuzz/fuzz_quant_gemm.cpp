// The argument structs of quant/gemm.hpp and quant/int4.hpp, built valid from the fuzzer's bytes and
// then, most of the time, broken in one field. Property: a broken struct is std::invalid_argument from
// "frugal::quant::" before any memory is read (ASan sees no access past a buffer, UBSan no division by
// zero or overflow); an intact one gives the reference result on the portable and the automatic path
// (and the AMX path where the CPU has it).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

[[noreturn]] void fail(const char* what, std::size_t i = 0, double a = 0, double b = 0) {
  std::fprintf(stderr, "fuzz_quant_gemm: %s (index %zu: %.9g vs %.9g)\n", what, i, a, b);
  std::abort();
}

float bad_float(FuzzedDataProvider& fdp) {
  constexpr float bad[] = {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  return bad[fdp.ConsumeIntegralInRange<int>(0, 4)];
}

// A buffer length that differs from n.
std::size_t other_len(FuzzedDataProvider& fdp, std::size_t n) {
  return fdp.ConsumeBool() || n == 0 ? n + 1 : n - 1;
}

// A shape field that differs from n: one more, one less, or one that makes a product wrap.
std::size_t other_size(FuzzedDataProvider& fdp, std::size_t n) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      return n + 1;
    case 1:
      return n == 0 ? 1 : n - 1;
    default:
      return n + (std::size_t{1} << 63);
  }
}

// Calls f, which must throw std::invalid_argument from frugal::quant:: exactly when `broken`.
template <class F>
bool run(bool broken, const char* what, F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).rfind("frugal::quant::", 0) != 0) fail("an error that does not say where");
    if (!broken) {
      std::fprintf(stderr, "unexpected error: %s\n", e.what());
      fail(what);
    }
    return false;
  }
  if (broken) fail(what);
  return true;
}

void fuzz_w8a8(FuzzedDataProvider& fdp) {
  const std::size_t m = fdp.ConsumeIntegralInRange<std::size_t>(0, 5);
  const std::size_t n = fdp.ConsumeIntegralInRange<std::size_t>(0, 20);
  const std::size_t k = fdp.ConsumeIntegralInRange<std::size_t>(0, 70);
  q::quantized_activations a;
  a.rows = m;
  a.cols = k;
  for (std::size_t i = 0; i < m * k; ++i) a.data.push_back(fdp.ConsumeIntegral<std::int8_t>());
  const bool asym = fdp.ConsumeBool();
  for (std::size_t i = 0; i < m; ++i) {
    a.scales.push_back(std::ldexp(1.0f, fdp.ConsumeIntegralInRange(-12, 0)));
    if (asym) a.zero_points.push_back(fdp.ConsumeIntegralInRange<std::int32_t>(-128, 127));
  }
  std::vector<std::int8_t> wd(n * k);
  for (auto& v : wd) v = fdp.ConsumeIntegral<std::int8_t>();
  std::vector<float> ws(n);
  for (auto& v : ws) v = std::ldexp(1.0f, fdp.ConsumeIntegralInRange(-12, 0));
  q::quantized_weights w = q::make_quantized_weights(wd, n, k, ws);
  std::vector<std::int32_t> want(m * n, 0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t t = 0; t < k; ++t) want[i * n + j] += a.data[i * k + t] * wd[j * k + t];

  std::size_t out_size = m * n;
  bool broken = true;
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 1:
      a.data.resize(other_len(fdp, a.data.size()));
      break;
    case 2:
      a.scales.resize(other_len(fdp, m));
      break;
    case 3:
      if (m == 0) return;
      a.scales[fdp.ConsumeIntegralInRange<std::size_t>(0, m - 1)] = bad_float(fdp);
      break;
    case 4:
      a.zero_points.resize(m + 1);  // neither 0 nor M
      break;
    case 5:
      if (!asym || m == 0) return;
      a.zero_points[fdp.ConsumeIntegralInRange<std::size_t>(0, m - 1)] =
          fdp.ConsumeBool() ? 128 + fdp.ConsumeIntegralInRange<std::int32_t>(0, 1 << 24) : -129;
      break;
    case 6:
      w.data.resize(other_len(fdp, w.data.size()));
      break;
    case 7:
      w.scales.resize(other_len(fdp, n));
      break;
    case 8:
      if (n == 0) return;
      w.scales[fdp.ConsumeIntegralInRange<std::size_t>(0, n - 1)] = bad_float(fdp);
      break;
    case 9:
      w.col_sums.resize(other_len(fdp, n));
      break;
    case 10:
      if (n == 0) return;
      w.col_sums[fdp.ConsumeIntegralInRange<std::size_t>(0, n - 1)] += fdp.ConsumeBool() ? 1 : -1;
      break;
    case 11:
      w.packed.resize(other_len(fdp, w.packed.size()));
      break;
    case 12:
      w.packed_corr.resize(other_len(fdp, w.packed_corr.size()));
      break;
    case 13:
      // A shape field that no longer matches the buffers; huge values make the products wrap.
      if (fdp.ConsumeBool())
        a.rows = other_size(fdp, a.rows);
      else
        w.rows = other_size(fdp, w.rows);
      break;
    case 14:
      out_size = other_len(fdp, out_size);
      break;
    default:
      broken = false;
  }
  // AMX, where the CPU has it, by name too: the automatic path takes it only from M = 16 rows.
  for (q::simd_path path : {q::simd_path::portable, q::simd_path::automatic, q::simd_path::amx}) {
    if (!q::is_supported(path)) continue;
    std::vector<std::int32_t> got(out_size);
    if (run(broken, "gemm_w8a8_s32", [&] { q::gemm_w8a8_s32(a, w, got, path); }))
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) fail("gemm_w8a8_s32 differs from the reference", i, got[i], want[i]);
    std::vector<float> f32(out_size);
    run(broken, "gemm_w8a8", [&] { q::gemm_w8a8(a, w, f32, {.path = path}); });
    std::vector<std::int8_t> i8(out_size);
    const float os = std::ldexp(1.0f, fdp.ConsumeIntegralInRange(-20, 4));
    run(broken, "gemm_w8a8 requantized", [&] { q::gemm_w8a8(a, w, i8, {.output_scale = os, .path = path}); });
  }
  // Weight-only reads data and scales only: the other corruptions leave it valid.
  bool wo_broken = w.data.size() != n * k || w.scales.size() != n;
  for (float s : w.scales) wo_broken = wo_broken || !(s > 0.0f) || !std::isfinite(s);
  if (w.rows == n && w.cols == k && out_size == m * n) {
    std::vector<float> x(m * k, 1.0f), out(m * n);
    run(wo_broken, "gemm_weight_only", [&] { q::gemm_weight_only(x, m, w, out); });
  }
}

void fuzz_int4(FuzzedDataProvider& fdp) {
  const int g = fdp.ConsumeBool() ? 32 : 64;
  const std::size_t n = fdp.ConsumeIntegralInRange<std::size_t>(0, 9);
  const std::size_t k = static_cast<std::size_t>(g) * fdp.ConsumeIntegralInRange<std::size_t>(1, 3);
  const std::size_t m = fdp.ConsumeIntegralInRange<std::size_t>(0, 3);
  std::vector<float> wf(n * k), x(m * k);
  for (auto& v : wf) v = static_cast<float>(fdp.ConsumeIntegralInRange(-64, 64)) / 16.0f;
  for (auto& v : x) v = static_cast<float>(fdp.ConsumeIntegralInRange(-64, 64)) / 16.0f;
  const bool symmetric = fdp.ConsumeBool();
  q::int4_weights w = q::quantize_int4(wf, n, k, {.group_size = g, .symmetric = symmetric});
  const std::size_t groups = n * (k / static_cast<std::size_t>(g));
  bool broken = true;
  switch (fdp.ConsumeIntegralInRange<int>(0, 9)) {
    case 1: {
      constexpr int bad[] = {0, -32, 7, std::numeric_limits<int>::min()};
      w.group_size = bad[fdp.ConsumeIntegralInRange<int>(0, 3)];
      break;
    }
    case 2:
      w.packed.resize(other_len(fdp, w.packed.size()));
      break;
    case 3:
      w.scales.resize(other_len(fdp, groups));
      break;
    case 4:
      w.zero_points.resize(symmetric ? 1 : other_len(fdp, groups));
      break;
    case 5:
      if (groups == 0) return;
      w.symmetric = !w.symmetric;  // the zero points no longer match
      break;
    case 6:
      w.rows = other_size(fdp, n);
      break;
    case 7:
      // Odd, or (with rows) so large that rows * cols / 2 wraps; 0 x 2^63 would be a consistent empty.
      w.cols = fdp.ConsumeBool() || n == 0 ? k + 1 : k + (std::size_t{1} << 63);
      break;
    default:
      broken = false;
  }
  if (run(broken, "dequantize(int4_weights)", [&] { (void)q::dequantize(w); })) {
    const q::row_matrix back = q::dequantize(w);
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < k; ++c)
        if (back(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) != w.dequantized(r, c))
          fail("dequantize differs from dequantized()", r * k + c);
  }
  for (q::simd_path path : {q::simd_path::portable, q::simd_path::automatic}) {
    std::vector<float> out(m * n);
    if (!run(broken, "gemm_weight_only(int4)", [&] { q::gemm_weight_only(x, m, w, out, {.path = path}); }))
      continue;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        // The SIMD paths take the zero point out of the sum: scale * (sum x * u - zp * sum x), with u the
        // stored nibble (symmetric: u = value + 8 and zp = 8; see detail/gemm_int4.hpp). Their rounding is
        // relative to sum |x| * (u + zp) * scale, not to the sum of |x * (u - zp) * scale|.
        double want = 0, mag = 0;
        for (std::size_t t = 0; t < k; ++t) {
          const std::size_t g = j * w.groups_per_row() + t / static_cast<std::size_t>(w.group_size);
          const double zp = w.symmetric ? 8 : w.zero_points[g];
          const double u = w.symmetric ? w.value(j, t) + 8 : w.value(j, t);
          const double xv = x[i * k + t];
          want += xv * w.dequantized(j, t);
          mag += std::abs(xv) * (u + zp) * std::abs(static_cast<float>(w.scales[g]));
        }
        const double got = out[i * n + j];
        if (std::abs(got - want) > 1e-5 * mag + 1e-6)
          fail("gemm_weight_only(int4) is off", i * n + j, got, want);
      }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  if (fdp.ConsumeBool())
    fuzz_w8a8(fdp);
  else
    fuzz_int4(fdp);
  return 0;
}
