// Quantize, dequantize and fake-quantize with a scheme, shape, data and parameters all taken from the
// fuzzer's bytes. Property: either std::invalid_argument, exactly when an independent check says the
// input is bad, or a result that satisfies the ONNX formulas as computed here, on every SIMD path.
#include <fuzzer/FuzzedDataProvider.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

[[noreturn]] void fail(const char* what, std::size_t i = 0, double a = 0, double b = 0) {
  std::fprintf(stderr, "fuzz_quant: %s (index %zu: %.9g vs %.9g)\n", what, i, a, b);
  std::abort();
}

// The ONNX ranges, written out rather than taken from qmin/qmax.
struct range {
  std::int32_t lo, hi;
};
range ref_range(const q::scheme& s) {
  switch (s.type) {
    case frugal::element_type::i8:
      return {s.symmetric && s.narrow_range ? -127 : -128, 127};
    case frugal::element_type::u8:
      return {s.symmetric && s.narrow_range ? 1 : 0, 255};
    default:
      if (!s.symmetric) return {0, 15};
      return {s.narrow_range ? -7 : -8, 7};
  }
}

std::size_t ref_param_count(const q::scheme& s, std::size_t rows, std::size_t cols) {
  if (s.granularity == q::granularity::per_tensor) return 1;
  if (s.granularity == q::granularity::per_channel) return s.axis == 0 ? rows : cols;
  return rows * (cols / static_cast<std::size_t>(s.group_size));
}

std::size_t ref_param_index(const q::scheme& s, std::size_t cols, std::size_t r, std::size_t c) {
  if (s.granularity == q::granularity::per_tensor) return 0;
  if (s.granularity == q::granularity::per_channel) return s.axis == 0 ? r : c;
  const auto g = static_cast<std::size_t>(s.group_size);
  return r * (cols / g) + c / g;
}

// QuantizeLinear: saturate(round(x / y_scale) + y_zero_point), with x / y_scale in float as ONNX does.
std::int32_t ref_quantize(float x, float scale, std::int32_t zp, range rg, q::rounding_mode m) {
  if (std::isnan(x)) return zp;
  const float t = x / scale;
  const double r = m == q::rounding_mode::half_to_even ? static_cast<double>(std::nearbyint(t))
                                                       : static_cast<double>(std::round(t));
  const double v = r + zp;
  if (v <= rg.lo) return rg.lo;
  if (v >= rg.hi) return rg.hi;
  return static_cast<std::int32_t>(v);
}

// The stored integer at (r, c), decoded from the documented layout, not through quantized_tensor::value.
std::int32_t stored(const q::quantized_tensor& t, std::size_t r, std::size_t c) {
  if (t.scheme.type == frugal::element_type::i4) {
    const std::uint8_t byte = t.data[r * ((t.cols + 1) / 2) + c / 2];
    const std::int32_t nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
    return t.scheme.symmetric && nib >= 8 ? nib - 16 : nib;
  }
  const std::uint8_t byte = t.data[r * t.cols + c];
  return t.scheme.type == frugal::element_type::i8 ? static_cast<std::int8_t>(byte) : byte;
}

bool scheme_ok(const q::scheme& s, std::size_t cols) {
  if (s.type != frugal::element_type::i8 && s.type != frugal::element_type::u8 &&
      s.type != frugal::element_type::i4)
    return false;
  if (s.granularity == q::granularity::per_channel && s.axis != 0 && s.axis != 1) return false;
  if (s.granularity == q::granularity::per_group &&
      (s.group_size <= 0 || cols % static_cast<std::size_t>(s.group_size) != 0))
    return false;
  return true;
}

bool any_nonfinite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return true;
  return false;
}

// Checks a quantized tensor against the formula, element by element, and its dequantization bit for bit.
void check_tensor(const q::quantized_tensor& t, const std::vector<float>& x, const q::scheme& s,
                  std::size_t rows, std::size_t cols) {
  const range rg = ref_range(s);
  const std::size_t np = ref_param_count(s, rows, cols);
  const std::size_t row_bytes = s.type == frugal::element_type::i4 ? (cols + 1) / 2 : cols;
  if (t.rows != rows || t.cols != cols) fail("shape changed");
  if (t.data.size() != rows * row_bytes)
    fail("data size", 0, double(t.data.size()), double(rows * row_bytes));
  if (t.scales.size() != np || t.zero_points.size() != np)
    fail("parameter count", 0, double(t.scales.size()), double(np));
  for (std::size_t p = 0; p < np; ++p) {
    if (!(t.scales[p] > 0) || !std::isfinite(t.scales[p])) fail("scale not finite and > 0", p, t.scales[p]);
    if (t.zero_points[p] < rg.lo || t.zero_points[p] > rg.hi)
      fail("zero point out of range", p, t.zero_points[p]);
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t p = ref_param_index(s, cols, r, c);
      const std::int32_t want = ref_quantize(x[r * cols + c], t.scales[p], t.zero_points[p], rg, s.rounding);
      const std::int32_t got = stored(t, r, c);
      if (got != want) fail("QuantizeLinear mismatch", r * cols + c, got, want);
      if (t.value(r, c) != got) fail("quantized_tensor::value disagrees with the layout", r * cols + c);
    }
  for (q::simd_path path : {q::simd_path::portable, q::simd_path::automatic}) {
    std::vector<float> out(rows * cols, -1.0f);
    q::dequantize(t, out, path);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) {
        const std::size_t p = ref_param_index(s, cols, r, c);
        const float want = static_cast<float>(stored(t, r, c) - t.zero_points[p]) * t.scales[p];
        const float got = out[r * cols + c];
        if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want))
          fail("DequantizeLinear mismatch", r * cols + c, got, want);
      }
  }
}

// Min-max parameters: the scale follows the range (widened to 0) up to float rounding, and every finite
// input is reconstructed within half a step.
void check_minmax(const q::quantized_tensor& t, const std::vector<float>& x, const q::scheme& s,
                  std::size_t rows, std::size_t cols) {
  const range rg = ref_range(s);
  const std::size_t np = ref_param_count(s, rows, cols);
  std::vector<double> lo(np, 0.0), hi(np, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      if (!std::isfinite(v)) continue;
      const std::size_t p = ref_param_index(s, cols, r, c);
      lo[p] = std::min(lo[p], double(v));
      hi[p] = std::max(hi[p], double(v));
    }
  const double levels = rg.hi - rg.lo;
  for (std::size_t p = 0; p < np; ++p) {
    const double want = s.symmetric ? std::max(-lo[p], hi[p]) / (levels / 2) : (hi[p] - lo[p]) / levels;
    const double got = t.scales[p];
    if (want == 0) {
      if (got != 1.0) fail("zero-width range must get scale 1", p, got);
    } else if (want > 1e-30 && want < 1e37 && std::abs(got - want) > 1e-5 * want) {
      fail("min-max scale", p, got, want);
    }
    if (s.symmetric && t.zero_points[p] != (s.type == frugal::element_type::u8 ? 128 : 0))
      fail("symmetric zero point", p, t.zero_points[p]);
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      const std::size_t p = ref_param_index(s, cols, r, c);
      const double scale = t.scales[p];
      if (!std::isfinite(v) || scale < std::numeric_limits<float>::min() || scale > 1e37) continue;
      const double back = (stored(t, r, c) - t.zero_points[p]) * scale;
      if (std::abs(back - v) > scale * 0.501 + std::abs(double(v)) * 1e-6)
        fail("min-max reconstruction error above half a step", r * cols + c, back, v);
    }
}

float take_float(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:  // any bit pattern: NaN, Inf, subnormals
      return std::bit_cast<float>(fdp.ConsumeIntegral<std::uint32_t>());
    case 1:
      return static_cast<float>(fdp.ConsumeIntegralInRange<int>(-300, 300)) / 2.0f;  // ties
    default:
      return fdp.ConsumeFloatingPointInRange<float>(-1000.0f, 1000.0f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  q::scheme s;
  constexpr frugal::element_type types[] = {frugal::element_type::i8, frugal::element_type::u8,
                                            frugal::element_type::i4, frugal::element_type::f32,
                                            frugal::element_type::f16};
  s.type = types[fdp.ConsumeIntegralInRange<int>(0, 4)];
  s.granularity = static_cast<q::granularity>(fdp.ConsumeIntegralInRange<int>(0, 2));
  s.axis = fdp.ConsumeIntegralInRange<int>(-1, 2);
  s.group_size = fdp.ConsumeIntegralInRange<int>(-1, 9);
  s.symmetric = fdp.ConsumeBool();
  s.narrow_range = fdp.ConsumeBool();
  s.rounding = fdp.ConsumeBool() ? q::rounding_mode::half_to_even : q::rounding_mode::half_away_from_zero;
  s.nonfinite = fdp.ConsumeBool() ? q::nonfinite_policy::error : q::nonfinite_policy::saturate;
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 3);
  std::size_t rows = fdp.ConsumeIntegralInRange<std::size_t>(0, 12);
  std::size_t cols = fdp.ConsumeIntegralInRange<std::size_t>(0, 40);
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    // Shapes whose element count overflows size_t.
    rows = fdp.ConsumeIntegral<std::size_t>();
    cols = fdp.ConsumeIntegral<std::size_t>();
  }
  std::size_t product;
  const bool overflow = __builtin_mul_overflow(rows, cols, &product);
  // An empty tensor with a huge other side would only test the allocator.
  if (!overflow && (product > 4096 || rows > 4096 || cols > 4096)) return 0;
  const bool size_mismatch = fdp.ConsumeIntegralInRange<int>(0, 31) == 0;
  const std::size_t n = overflow        ? fdp.ConsumeIntegralInRange<std::size_t>(0, 8)
                        : size_mismatch ? product + 1
                                        : product;
  std::vector<float> x(n);
  for (auto& v : x) v = take_float(fdp);
  const bool shape_ok = !overflow && !size_mismatch && scheme_ok(s, cols);
  const bool data_ok = s.nonfinite == q::nonfinite_policy::saturate || !any_nonfinite(x);

  bool params_ok = true;
  try {
    if (mode == 0 || mode == 2) {
      std::optional<q::quantized_tensor> first;
      for (q::simd_path path : {q::simd_path::portable, q::simd_path::automatic}) {
        q::quantized_tensor t = q::quantize(x, rows, cols, s, path);
        if (!shape_ok || !data_ok) fail("quantize accepted a bad input");
        check_tensor(t, x, s, rows, cols);
        check_minmax(t, x, s, rows, cols);
        if (first &&
            (first->data != t.data || first->scales != t.scales || first->zero_points != t.zero_points))
          fail("the SIMD path differs from the portable one");
        first = std::move(t);
      }
      if (mode == 2) {
        std::vector<float> fq(rows * cols), deq(rows * cols);
        q::fake_quantize(x, rows, cols, s, fq);
        q::dequantize(*first, deq);
        for (std::size_t i = 0; i < fq.size(); ++i)
          if (std::bit_cast<std::uint32_t>(fq[i]) != std::bit_cast<std::uint32_t>(deq[i]))
            fail("fake_quantize is not dequantize(quantize())", i, fq[i], deq[i]);
      }
    } else if (mode == 1) {
      // Caller-given parameters, possibly bad.
      q::quant_params params;
      const std::size_t np = shape_ok ? ref_param_count(s, rows, cols) : 1;
      const std::size_t ns = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? np + 1 : np;
      const std::size_t nz = fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? np + 1 : np;
      for (std::size_t i = 0; i < ns; ++i)
        params.scales.push_back(fdp.ConsumeBool() ? take_float(fdp)
                                                  : std::ldexp(1.0f, fdp.ConsumeIntegralInRange(-8, 8)));
      for (std::size_t i = 0; i < nz; ++i)
        params.zero_points.push_back(fdp.ConsumeIntegralInRange<std::int32_t>(-140, 270));
      params_ok = shape_ok && ns == np && nz == np;
      if (params_ok) {
        const range rg = ref_range(s);
        for (float v : params.scales) params_ok = params_ok && std::isfinite(v) && v > 0;
        for (std::int32_t z : params.zero_points) params_ok = params_ok && z >= rg.lo && z <= rg.hi;
      }
      const q::quant_params copy = params;
      q::quantized_tensor t = q::quantize(x, rows, cols, s, std::move(params), q::simd_path::automatic);
      if (!params_ok || !data_ok) fail("quantize accepted bad parameters or data");
      if (t.scales != copy.scales || t.zero_points != copy.zero_points)
        fail("the given parameters were not kept");
      check_tensor(t, x, s, rows, cols);
    } else {
      // Dequantize a tensor built from raw bytes, with a consistent layout.
      if (!shape_ok) return 0;
      q::quantized_tensor t;
      t.scheme = s;
      t.rows = rows;
      t.cols = cols;
      t.data =
          fdp.ConsumeBytes<std::uint8_t>(rows * (s.type == frugal::element_type::i4 ? (cols + 1) / 2 : cols));
      t.data.resize(rows * (s.type == frugal::element_type::i4 ? (cols + 1) / 2 : cols));
      if (s.type == frugal::element_type::i4 && cols % 2 == 1)
        for (std::size_t r = 0; r < rows; ++r) t.data[r * ((cols + 1) / 2) + cols / 2] &= 0x0f;
      const range rg = ref_range(s);
      for (std::size_t i = 0; i < ref_param_count(s, rows, cols); ++i) {
        t.scales.push_back(std::ldexp(1.0f + fdp.ConsumeIntegralInRange(0, 255) / 256.0f,
                                      fdp.ConsumeIntegralInRange(-20, 20)));
        t.zero_points.push_back(fdp.ConsumeIntegralInRange<std::int32_t>(rg.lo, rg.hi));
      }
      // A tensor whose data or parameters are too short for its shape must be rejected, not read past.
      if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0 && rows * cols != 0) {
        if (fdp.ConsumeBool())
          t.data.pop_back();
        else
          t.scales.pop_back();
        std::vector<float> out(rows * cols);
        try {
          q::dequantize(t, out);
        } catch (const std::invalid_argument&) {
          return 0;
        }
        fail("dequantize accepted a tensor that does not match its shape");
      }
      // Stored values outside [lo, hi] (e.g. -128 in narrow i8) still dequantize by the formula.
      std::vector<float> out(rows * cols);
      q::dequantize(t, out);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          const std::size_t p = ref_param_index(s, cols, r, c);
          const float want = static_cast<float>(stored(t, r, c) - t.zero_points[p]) * t.scales[p];
          if (std::bit_cast<std::uint32_t>(out[r * cols + c]) != std::bit_cast<std::uint32_t>(want))
            fail("dequantize of a raw tensor", r * cols + c, out[r * cols + c], want);
        }
    }
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.rfind("frugal::quant::", 0) != 0) fail("an error that does not say where it came from");
    const bool expected = !shape_ok || !data_ok || !params_ok;
    if (!expected) {
      std::fprintf(stderr, "unexpected error: %s\n", e.what());
      fail("a valid input was rejected");
    }
  }
  return 0;
}
