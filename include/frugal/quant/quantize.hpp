#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/config.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/scheme.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Scales and zero points of a scheme applied to one tensor, indexed as `param_index` says.
struct quant_params {
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;
};

/// @brief A quantized tensor: its integers, scales, zero points, scheme and shape.
///
/// i8 elements are stored as two's-complement bytes, u8 as bytes, one per element, row-major. i4 rows
/// are packed two per byte, ceil(cols/2) bytes per row: element 2j in the low nibble of byte j, 2j+1 in
/// the high nibble; symmetric i4 nibbles are two's complement (-8..7), asymmetric ones unsigned (0..15).
struct quantized_tensor {
  quant::scheme scheme;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;

  /// @brief Bytes per stored row.
  std::size_t row_bytes() const noexcept { return scheme.type == element_type::i4 ? (cols + 1) / 2 : cols; }
  /// @brief The integer at (r, c).
  std::int32_t value(std::size_t r, std::size_t c) const noexcept {
    const std::uint8_t* row = data.data() + r * row_bytes();
    switch (scheme.type) {
      case element_type::i8:
        return static_cast<std::int8_t>(row[c]);
      case element_type::i4: {
        const std::int32_t nib = (c & 1) ? row[c / 2] >> 4 : row[c / 2] & 0xf;
        return scheme.symmetric ? (nib ^ 8) - 8 : nib;
      }
      default:
        return row[c];
    }
  }
  /// @brief The real value ONNX DequantizeLinear gives for (r, c).
  float dequantized(std::size_t r, std::size_t c) const noexcept {
    const std::size_t p = param_index(scheme, cols, r, c);
    return static_cast<float>(value(r, c) - zero_points[p]) * scales[p];
  }
  /// @brief Memory of the integers, the fp32 scales and (asymmetric only) the int32 zero points.
  std::size_t memory_bytes() const noexcept {
    return data.size() + scales.size() * sizeof(float) +
           (scheme.symmetric ? 0 : zero_points.size() * sizeof(std::int32_t));
  }
};

namespace detail {

inline float round_int(float v, rounding_mode m) noexcept {
  return m == rounding_mode::half_to_even ? std::nearbyint(v) : std::round(v);
}

// ONNX QuantizeLinear: saturate(round(x / scale) + zero_point). NaN maps to the zero point (real 0).
inline std::int32_t quantize_value(float x, float scale, std::int32_t zp, std::int32_t lo, std::int32_t hi,
                                   rounding_mode m) noexcept {
  if (std::isnan(x)) return zp;
  const float v = round_int(x / scale, m) + static_cast<float>(zp);
  if (!(v > static_cast<float>(lo))) return lo;
  if (v > static_cast<float>(hi)) return hi;
  return static_cast<std::int32_t>(v);
}

inline bool is_finite_bits(float x) noexcept { return std::isfinite(x); }

struct run_range {
  float lo;
  float hi;
  std::size_t first_nonfinite;  // n when every value is finite
};

inline run_range minmax_portable(const float* x, std::size_t n) noexcept {
  run_range r{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), n};
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_finite_bits(x[i])) {
      if (r.first_nonfinite == n) r.first_nonfinite = i;
      continue;
    }
    r.lo = std::min(r.lo, x[i]);
    r.hi = std::max(r.hi, x[i]);
  }
  return r;
}

// Returns the index of the first non-finite input (n if none); NaN is written as the zero point.
inline std::size_t quantize_run_portable(const float* x, std::size_t n, float scale, std::int32_t zp,
                                         std::int32_t lo, std::int32_t hi, rounding_mode m,
                                         std::int8_t* out) noexcept {
  std::size_t bad = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (bad == n && !is_finite_bits(x[i])) bad = i;
    out[i] = static_cast<std::int8_t>(static_cast<std::uint8_t>(quantize_value(x[i], scale, zp, lo, hi, m)));
  }
  return bad;
}

inline void dequantize_run_portable(const std::int8_t* q, bool is_unsigned, std::size_t n, float scale,
                                    std::int32_t zp, float* out) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t v = is_unsigned ? static_cast<std::uint8_t>(q[i]) : q[i];
    out[i] = static_cast<float>(v - zp) * scale;
  }
}

#if FRUGAL_QUANT_X86
FRUGAL_QUANT_TARGET_AVX512 inline run_range minmax_avx512(const float* x, std::size_t n) noexcept {
  __m512 vlo = _mm512_set1_ps(std::numeric_limits<float>::infinity()),
         vhi = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i expmask = _mm512_set1_epi32(0x7f800000);
  std::size_t bad = n;
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __mmask16 nonfinite =
        _mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(_mm512_castps_si512(v), expmask), expmask);
    const __mmask16 ok = m & static_cast<__mmask16>(~nonfinite);
    vlo = _mm512_mask_min_ps(vlo, ok, vlo, v);
    vhi = _mm512_mask_max_ps(vhi, ok, vhi, v);
    if (nonfinite && bad == n) bad = i + static_cast<std::size_t>(__builtin_ctz(nonfinite));
  }
  return {_mm512_reduce_min_ps(vlo), _mm512_reduce_max_ps(vhi), bad};
}

FRUGAL_QUANT_TARGET_AVX512 inline __m512 round_avx512(__m512 v, rounding_mode m) noexcept {
  if (m == rounding_mode::half_to_even)
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 d = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(d, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
  return _mm512_mask_add_ps(t, up, t, one);
}

FRUGAL_QUANT_TARGET_AVX512 inline std::size_t quantize_run_avx512(const float* x, std::size_t n, float scale,
                                                                  std::int32_t zp, std::int32_t lo,
                                                                  std::int32_t hi, rounding_mode rm,
                                                                  std::int8_t* out) noexcept {
  const __m512 vs = _mm512_set1_ps(scale), vzp = _mm512_set1_ps(static_cast<float>(zp));
  const __m512 vlo = _mm512_set1_ps(static_cast<float>(lo)), vhi = _mm512_set1_ps(static_cast<float>(hi));
  const __m512i expmask = _mm512_set1_epi32(0x7f800000);
  std::size_t bad = n;
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __mmask16 nonfinite =
        _mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(_mm512_castps_si512(v), expmask), expmask);
    if (nonfinite && bad == n) bad = i + static_cast<std::size_t>(__builtin_ctz(nonfinite));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    v = _mm512_mask_mov_ps(v, nan, _mm512_setzero_ps());
    __m512 q = _mm512_add_ps(round_avx512(_mm512_div_ps(v, vs), rm), vzp);
    q = _mm512_min_ps(_mm512_max_ps(q, vlo), vhi);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, m, _mm512_cvtps_epi32(q));
  }
  return bad;
}

FRUGAL_QUANT_TARGET_AVX512 inline void dequantize_run_avx512(const std::int8_t* q, bool is_unsigned,
                                                             std::size_t n, float scale, std::int32_t zp,
                                                             float* out) noexcept {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i vzp = _mm512_set1_epi32(zp);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    const __m128i b = _mm_maskz_loadu_epi8(m, q + i);
    const __m512i w = is_unsigned ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(w, vzp)), vs));
  }
}

FRUGAL_QUANT_TARGET_AVX2 inline run_range minmax_avx2(const float* x, std::size_t n) noexcept {
  __m256 vlo = _mm256_set1_ps(std::numeric_limits<float>::infinity()),
         vhi = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity()),
               absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  std::size_t bad = n, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 finite = _mm256_cmp_ps(_mm256_and_ps(v, absmask), inf, _CMP_LT_OQ);
    vlo = _mm256_blendv_ps(vlo, _mm256_min_ps(vlo, v), finite);
    vhi = _mm256_blendv_ps(vhi, _mm256_max_ps(vhi, v), finite);
    const int bad_lanes = ~_mm256_movemask_ps(finite) & 0xff;
    if (bad_lanes && bad == n)
      bad = i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(bad_lanes)));
  }
  alignas(32) float lo8[8], hi8[8];
  _mm256_store_ps(lo8, vlo);
  _mm256_store_ps(hi8, vhi);
  run_range r = minmax_portable(x + i, n - i);
  if (r.first_nonfinite != n - i && bad == n) bad = i + r.first_nonfinite;
  for (int k = 0; k < 8; ++k) {
    r.lo = std::min(r.lo, lo8[k]);
    r.hi = std::max(r.hi, hi8[k]);
  }
  r.first_nonfinite = bad;
  return r;
}

FRUGAL_QUANT_TARGET_AVX2 inline std::size_t quantize_run_avx2(const float* x, std::size_t n, float scale,
                                                              std::int32_t zp, std::int32_t lo,
                                                              std::int32_t hi, rounding_mode rm,
                                                              std::int8_t* out) noexcept {
  const __m256 vs = _mm256_set1_ps(scale), vzp = _mm256_set1_ps(static_cast<float>(zp));
  const __m256 vlo = _mm256_set1_ps(static_cast<float>(lo)), vhi = _mm256_set1_ps(static_cast<float>(hi));
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity()),
               absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8,
                                        12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  std::size_t bad = n, i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    const __m256 finite = _mm256_cmp_ps(_mm256_and_ps(v, absmask), inf, _CMP_LT_OQ);
    const int bad_lanes = ~_mm256_movemask_ps(finite) & 0xff;
    if (bad_lanes && bad == n)
      bad = i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(bad_lanes)));
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
    __m256 q = _mm256_div_ps(v, vs);
    if (rm == rounding_mode::half_to_even) {
      q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 up =
          _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(q, t), absmask), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
      const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(q, _mm256_set1_ps(-0.0f)));
      q = _mm256_add_ps(t, _mm256_and_ps(one, up));
    }
    q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, vzp), vlo), vhi);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_cvtps_epi32(q), pick);
    const auto lo32 = static_cast<std::uint32_t>(_mm256_extract_epi32(bytes, 0));
    const auto hi32 = static_cast<std::uint32_t>(_mm256_extract_epi32(bytes, 4));
    const std::uint64_t packed = lo32 | static_cast<std::uint64_t>(hi32) << 32;
    std::memcpy(out + i, &packed, 8);
  }
  const std::size_t tail_bad = quantize_run_portable(x + i, n - i, scale, zp, lo, hi, rm, out + i);
  if (tail_bad != n - i && bad == n) bad = i + tail_bad;
  return bad;
}

FRUGAL_QUANT_TARGET_AVX2 inline void dequantize_run_avx2(const std::int8_t* q, bool is_unsigned,
                                                         std::size_t n, float scale, std::int32_t zp,
                                                         float* out) noexcept {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i vzp = _mm256_set1_epi32(zp);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    const __m256i w = is_unsigned ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(w, vzp)), vs));
  }
  dequantize_run_portable(q + i, is_unsigned, n - i, scale, zp, out + i);
}
#endif

inline run_range minmax_run(float_level lv, const float* x, std::size_t n) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return minmax_avx512(x, n);
  if (lv == float_level::avx2) return minmax_avx2(x, n);
#endif
  (void)lv;
  return minmax_portable(x, n);
}

inline std::size_t quantize_run(float_level lv, const float* x, std::size_t n, float scale, std::int32_t zp,
                                std::int32_t lo, std::int32_t hi, rounding_mode m,
                                std::int8_t* out) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return quantize_run_avx512(x, n, scale, zp, lo, hi, m, out);
  if (lv == float_level::avx2) return quantize_run_avx2(x, n, scale, zp, lo, hi, m, out);
#endif
  (void)lv;
  return quantize_run_portable(x, n, scale, zp, lo, hi, m, out);
}

inline void dequantize_run(float_level lv, const std::int8_t* q, bool is_unsigned, std::size_t n, float scale,
                           std::int32_t zp, float* out) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return dequantize_run_avx512(q, is_unsigned, n, scale, zp, out);
  if (lv == float_level::avx2) return dequantize_run_avx2(q, is_unsigned, n, scale, zp, out);
#endif
  (void)lv;
  dequantize_run_portable(q, is_unsigned, n, scale, zp, out);
}

[[noreturn]] inline void throw_nonfinite(const char* who, std::size_t index, float v) {
  throw std::invalid_argument(std::string(who) + ": data[" + std::to_string(index) + "] is " +
                              (std::isnan(v) ? "NaN"
                               : v > 0       ? "+Inf"
                                             : "-Inf") +
                              " (set scheme.nonfinite = saturate to allow it)");
}

inline void check_data_size(std::size_t size, std::size_t rows, std::size_t cols, const char* who) {
  // rows * cols may wrap (2^32 x 2^32 is 0), which would let an empty span pass for a huge shape.
  if (cols != 0 && rows > std::numeric_limits<std::size_t>::max() / cols)
    throw std::invalid_argument(std::string(who) + ": rows * cols = " + std::to_string(rows) + " * " +
                                std::to_string(cols) + " overflows size_t");
  if (size != rows * cols)
    throw std::invalid_argument(std::string(who) + ": data has " + std::to_string(size) +
                                " elements, not rows * cols = " + std::to_string(rows) + " * " +
                                std::to_string(cols));
}

// Packs int8 values (already in the nibble's range) two per byte: 2j low, 2j+1 high.
inline void pack_nibbles(const std::int8_t* v, std::size_t n, std::uint8_t* out) noexcept {
  for (std::size_t j = 0; j + 1 < n; j += 2)
    out[j / 2] = static_cast<std::uint8_t>((static_cast<std::uint8_t>(v[j]) & 0xfu) |
                                           (static_cast<std::uint8_t>(v[j + 1]) & 0xfu) << 4);
  if (n & 1) out[n / 2] = static_cast<std::uint8_t>(v[n - 1]) & 0xfu;
}

// Visits the contiguous runs of a row-major tensor that share one parameter: (row, first col, length, param).
template <class F>
void for_each_run(const scheme& s, std::size_t rows, std::size_t cols, F&& f) {
  for (std::size_t r = 0; r < rows; ++r) {
    if (s.granularity == granularity::per_group) {
      const auto g = static_cast<std::size_t>(s.group_size);
      for (std::size_t c = 0; c < cols; c += g) f(r, c, g, param_index(s, cols, r, c));
    } else {
      f(r, std::size_t{0}, cols, param_index(s, cols, r, 0));
    }
  }
}

}  // namespace detail

/// @brief The scale and zero point for the real range [lo, hi], widened to include 0 (gemmlowp).
/// Symmetric: scale = max(|lo|, |hi|) / ((qmax - qmin) / 2) (absmax/127 for narrow i8), fixed zero point.
/// Asymmetric: scale = (hi - lo) / (qmax - qmin), zero_point = qmin - round(lo / scale), clamped.
/// A range of zero width gets scale 1 so that zero stays exact.
inline std::pair<float, std::int32_t> params_from_range(float lo, float hi, const scheme& s) noexcept {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  const auto qlo = qmin(s), qhi = qmax(s);
  const float levels = static_cast<float>(qhi - qlo);
  if (s.symmetric) {
    float scale = std::max(-lo, hi) / (levels / 2.0f);
    if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
    return {scale, symmetric_zero_point(s)};
  }
  float scale = hi / levels - lo / levels;
  if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
  const float zp = static_cast<float>(qlo) - std::nearbyint(lo / scale);
  return {scale, static_cast<std::int32_t>(std::clamp(zp, static_cast<float>(qlo), static_cast<float>(qhi)))};
}

/// @brief Min-max quantization parameters of a rows x cols row-major tensor under scheme `s`.
inline quant_params choose_params(std::span<const float> data, std::size_t rows, std::size_t cols,
                                  const scheme& s, simd_path path = simd_path::automatic) {
  constexpr const char* who = "frugal::quant::choose_params";
  validate(s, rows, cols, who);
  detail::check_data_size(data.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  const std::size_t np = param_count(s, rows, cols);
  std::vector<float> lo(np, std::numeric_limits<float>::infinity()),
      hi(np, -std::numeric_limits<float>::infinity());
  if (s.granularity == granularity::per_channel && s.axis == 1) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      const float v = data[i];
      if (!std::isfinite(v)) {
        if (s.nonfinite == nonfinite_policy::error) detail::throw_nonfinite(who, i, v);
        continue;
      }
      lo[i % cols] = std::min(lo[i % cols], v);
      hi[i % cols] = std::max(hi[i % cols], v);
    }
  } else {
    detail::for_each_run(s, rows, cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
      const float* x = data.data() + r * cols + c;
      const detail::run_range rr = detail::minmax_run(lv, x, n);
      if (rr.first_nonfinite != n && s.nonfinite == nonfinite_policy::error)
        detail::throw_nonfinite(who, r * cols + c + rr.first_nonfinite, x[rr.first_nonfinite]);
      lo[p] = std::min(lo[p], rr.lo);
      hi[p] = std::max(hi[p], rr.hi);
    });
  }
  quant_params out;
  out.scales.resize(np);
  out.zero_points.resize(np);
  for (std::size_t p = 0; p < np; ++p)
    std::tie(out.scales[p], out.zero_points[p]) = params_from_range(lo[p], hi[p], s);
  return out;
}

/// @brief Throws std::invalid_argument naming the first bad scale or zero point.
inline void validate_params(const quant_params& p, const scheme& s, std::size_t rows, std::size_t cols,
                            const char* who) {
  const std::string w(who);
  const std::size_t np = param_count(s, rows, cols);
  if (p.scales.size() != np)
    throw std::invalid_argument(w + ": params.scales has " + std::to_string(p.scales.size()) +
                                " entries, the scheme needs " + std::to_string(np));
  if (p.zero_points.size() != np)
    throw std::invalid_argument(w + ": params.zero_points has " + std::to_string(p.zero_points.size()) +
                                " entries, the scheme needs " + std::to_string(np));
  for (std::size_t i = 0; i < np; ++i)
    if (!(p.scales[i] > 0.0f) || !std::isfinite(p.scales[i]))
      throw std::invalid_argument(w + ": params.scales[" + std::to_string(i) +
                                  "] = " + std::to_string(p.scales[i]) + " must be finite and > 0");
  for (std::size_t i = 0; i < np; ++i)
    if (p.zero_points[i] < qmin(s) || p.zero_points[i] > qmax(s))
      throw std::invalid_argument(w + ": params.zero_points[" + std::to_string(i) +
                                  "] = " + std::to_string(p.zero_points[i]) + " is outside [" +
                                  std::to_string(qmin(s)) + ", " + std::to_string(qmax(s)) + "]");
}

/// @brief Quantizes a rows x cols row-major tensor with the given parameters (ONNX QuantizeLinear:
/// saturate(round(x / scale) + zero_point)).
inline quantized_tensor quantize(std::span<const float> data, std::size_t rows, std::size_t cols,
                                 const scheme& s, quant_params params,
                                 simd_path path = simd_path::automatic) {
  constexpr const char* who = "frugal::quant::quantize";
  validate(s, rows, cols, who);
  detail::check_data_size(data.size(), rows, cols, who);
  validate_params(params, s, rows, cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  quantized_tensor q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(rows * q.row_bytes());
  const auto lo = qmin(s), hi = qmax(s);
  const bool packed = s.type == element_type::i4;
  std::vector<std::int8_t> row_tmp(packed ? cols : 0);
  if (s.granularity == granularity::per_channel && s.axis == 1) {
    for (std::size_t r = 0; r < rows; ++r) {
      auto* out = packed ? row_tmp.data() : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols);
      for (std::size_t c = 0; c < cols; ++c) {
        const float v = data[r * cols + c];
        if (!std::isfinite(v) && s.nonfinite == nonfinite_policy::error)
          detail::throw_nonfinite(who, r * cols + c, v);
        out[c] = static_cast<std::int8_t>(static_cast<std::uint8_t>(
            detail::quantize_value(v, params.scales[c], params.zero_points[c], lo, hi, s.rounding)));
      }
      if (packed) detail::pack_nibbles(row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
    }
  } else {
    detail::for_each_run(s, rows, cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
      const float* x = data.data() + r * cols + c;
      auto* out = packed ? row_tmp.data() + c : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols + c);
      const std::size_t bad =
          detail::quantize_run(lv, x, n, params.scales[p], params.zero_points[p], lo, hi, s.rounding, out);
      if (bad != n && s.nonfinite == nonfinite_policy::error)
        detail::throw_nonfinite(who, r * cols + c + bad, x[bad]);
      if (packed && c + n == cols)
        detail::pack_nibbles(row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
    });
  }
  q.scales = std::move(params.scales);
  q.zero_points = std::move(params.zero_points);
  return q;
}

/// @brief Quantizes with min-max parameters (choose_params), the dynamic quantization of PyTorch/ONNX.
/// Per-row and per-group parameters are computed run by run, while the run is still in cache, so the
/// data is read from memory once; per-tensor and per-column ones need the whole range first.
inline quantized_tensor quantize(std::span<const float> data, std::size_t rows, std::size_t cols,
                                 const scheme& s, simd_path path = simd_path::automatic) {
  const bool fused =
      s.granularity == granularity::per_group || (s.granularity == granularity::per_channel && s.axis == 0);
  if (!fused) return quantize(data, rows, cols, s, choose_params(data, rows, cols, s, path), path);
  constexpr const char* who = "frugal::quant::quantize";
  validate(s, rows, cols, who);
  detail::check_data_size(data.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  quantized_tensor q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(rows * q.row_bytes());
  const std::size_t np = param_count(s, rows, cols);
  q.scales.resize(np);
  q.zero_points.resize(np);
  const auto lo = qmin(s), hi = qmax(s);
  const bool packed = s.type == element_type::i4;
  std::vector<std::int8_t> row_tmp(packed ? cols : 0);
  detail::for_each_run(s, rows, cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
    const float* x = data.data() + r * cols + c;
    const detail::run_range rr = detail::minmax_run(lv, x, n);
    if (rr.first_nonfinite != n && s.nonfinite == nonfinite_policy::error)
      detail::throw_nonfinite(who, r * cols + c + rr.first_nonfinite, x[rr.first_nonfinite]);
    std::tie(q.scales[p], q.zero_points[p]) = params_from_range(rr.lo, rr.hi, s);
    auto* out = packed ? row_tmp.data() + c : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols + c);
    detail::quantize_run(lv, x, n, q.scales[p], q.zero_points[p], lo, hi, s.rounding, out);
    if (packed && c + n == cols)
      detail::pack_nibbles(row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
  });
  return q;
}

/// @brief Dequantizes into `out` (rows * cols floats): ONNX DequantizeLinear, (q - zero_point) * scale.
inline void dequantize(const quantized_tensor& q, std::span<float> out,
                       simd_path path = simd_path::automatic) {
  constexpr const char* who = "frugal::quant::dequantize";
  detail::check_data_size(out.size(), q.rows, q.cols, who);
  const scheme& s = q.scheme;
  // A quantized_tensor is a plain aggregate (it may come from disk): check it against its own shape.
  validate(s, q.rows, q.cols, who);
  if (q.data.size() != q.rows * q.row_bytes())
    throw std::invalid_argument(std::string(who) + ": data has " + std::to_string(q.data.size()) +
                                " bytes, the shape needs rows * row_bytes() = " + std::to_string(q.rows * q.row_bytes()));
  validate_params(quant_params{q.scales, q.zero_points}, s, q.rows, q.cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  if (s.type == element_type::i4 || (s.granularity == granularity::per_channel && s.axis == 1)) {
    for (std::size_t r = 0; r < q.rows; ++r)
      for (std::size_t c = 0; c < q.cols; ++c) out[r * q.cols + c] = q.dequantized(r, c);
    return;
  }
  const bool is_unsigned = s.type == element_type::u8;
  detail::for_each_run(s, q.rows, q.cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
    const auto* src = reinterpret_cast<const std::int8_t*>(q.data.data() + r * q.cols + c);
    detail::dequantize_run(lv, src, is_unsigned, n, q.scales[p], q.zero_points[p],
                           out.data() + r * q.cols + c);
  });
}

/// @brief Dequantizes into a new rows x cols matrix.
inline row_matrix dequantize(const quantized_tensor& q) {
  row_matrix out(static_cast<Eigen::Index>(q.rows), static_cast<Eigen::Index>(q.cols));
  dequantize(q, std::span<float>(out.data(), q.rows * q.cols));
  return out;
}

namespace detail {
// A Ref may have an outer stride; the toolkit works on contiguous rows.
template <class F>
decltype(auto) with_contiguous(const Eigen::Ref<const row_matrix>& x, F&& f) {
  if (x.outerStride() == x.cols() || x.rows() <= 1)
    return f(std::span<const float>(x.data(), static_cast<std::size_t>(x.size())));
  const row_matrix copy = x;
  return f(std::span<const float>(copy.data(), static_cast<std::size_t>(copy.size())));
}
}  // namespace detail

/// @brief Quantizes an Eigen matrix (any storage order; a column-major one is copied to row-major).
inline quantized_tensor quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s) {
  return detail::with_contiguous(x, [&](std::span<const float> d) {
    return quantize(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()), s);
  });
}

/// @brief Quantizes an Eigen matrix with the given parameters.
inline quantized_tensor quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s,
                                 quant_params params) {
  return detail::with_contiguous(x, [&](std::span<const float> d) {
    return quantize(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()), s,
                    std::move(params));
  });
}

/// @brief Quantizes then dequantizes (for accuracy studies): the values the scheme can represent.
inline row_matrix fake_quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s) {
  return dequantize(quantize(x, s));
}

/// @brief fake_quantize on a span, writing rows * cols floats to `out`.
inline void fake_quantize(std::span<const float> data, std::size_t rows, std::size_t cols, const scheme& s,
                          std::span<float> out) {
  dequantize(quantize(data, rows, cols, s), out);
}

}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END
