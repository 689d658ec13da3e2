#pragma once

// The runs under quantize.hpp: scalar reference kernels, their AVX2 and AVX-512 versions, and the
// dispatch by float_level. Every path returns what the scalar one returns (ONNX QuantizeLinear).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/checked.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/scheme.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {
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

// Packs int8 values (already in the nibble's range) two per byte: 2j low, 2j+1 high.
inline void pack_nibbles(const std::int8_t* v, std::size_t n, std::uint8_t* out) noexcept {
  for (std::size_t j = 0; j + 1 < n; j += 2)
    out[j / 2] = static_cast<std::uint8_t>((static_cast<std::uint8_t>(v[j]) & 0xfu) |
                                           (static_cast<std::uint8_t>(v[j + 1]) & 0xfu) << 4);
  if (n & 1) out[n / 2] = static_cast<std::uint8_t>(v[n - 1]) & 0xfu;
}

#if FRUGAL_QUANT_X86
// Min-max that skips NaN/Inf lane by lane and finds the first of them: the path for data that has some.
FRUGAL_QUANT_TARGET_AVX512 inline run_range minmax_avx512_checked(const float* x, std::size_t n) noexcept {
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

// x / scale with a true division, lane-masked: the exact path for tails and for blocks the fast path flags.
FRUGAL_QUANT_TARGET_AVX512 inline std::size_t quantize_run_avx512_div(const float* x, std::size_t n,
                                                                      float scale, std::int32_t zp,
                                                                      std::int32_t lo, std::int32_t hi,
                                                                      rounding_mode rm,
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

FRUGAL_QUANT_TARGET_AVX2 inline run_range minmax_avx2_checked(const float* x, std::size_t n) noexcept {
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

// Rounds q to an integer in the given mode, whatever MXCSR says.
FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline __m256 round_avx2(__m256 q,
                                                                                 rounding_mode rm) noexcept {
  if (rm == rounding_mode::half_to_even)
    return _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // Away from zero: trunc(q), plus one step away from zero where |q - trunc(q)| >= 0.5 (q - trunc(q) is
  // exact).
  const __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 up =
      _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(q, t), absmask), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(q, _mm256_set1_ps(-0.0f)));
  return _mm256_add_ps(t, _mm256_and_ps(step, up));
}

FRUGAL_QUANT_TARGET_AVX2 inline std::size_t quantize_run_avx2_div(const float* x, std::size_t n, float scale,
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
    __m256 q = round_avx2(_mm256_div_ps(v, vs), rm);
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

// The fast paths below quantize with x * (1 / scale) and prove, block by block, that the result equals
// the one x / scale gives (ONNX QuantizeLinear), or redo the block with the division. With r = 1/scale
// rounded to nearest and normal, t = fma(x, r, zp) is within 2^-13 of fl(x / scale) + zp wherever the
// result does not saturate (|x / scale| < 512): r carries a relative error of 2^-24, the fma another
// 2^-24 of |t| < 768, and fl(x / scale) half an ulp (2^-16). Rounding to an integer only changes at
// half-integers, so when every t of a block is more than 2^-11 from one, round(t) = round(fl(x / scale))
// + zp in both rounding modes (which differ only on exact ties, and a tie is always flagged). Beyond the
// range both saturate, and t is clamped to +-1024 before the conversion so that overflow saturates too.
// A block with a value near a half-integer, or with NaN/Inf (when the data is not known to be finite),
// goes through the division kernel, which also finds the first non-finite index.
inline constexpr float near_half = 0.5f - 1.0f / 2048.0f;

FRUGAL_QUANT_TARGET_AVX512 __attribute__((always_inline)) inline run_range minmax_avx512_body(
    const float* x, std::size_t n) noexcept {
  const __m512 zero = _mm512_setzero_ps();
  __m512 lo0 = _mm512_set1_ps(std::numeric_limits<float>::infinity()), lo1 = lo0, lo2 = lo0, lo3 = lo0;
  __m512 hi0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), hi1 = hi0, hi2 = hi0, hi3 = hi0;
  // z stays 0 while every value is finite: x * 0 is NaN for NaN and Inf, and NaN sticks in the sum.
  __m512 z0 = zero, z1 = zero, z2 = zero, z3 = zero;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16),
                 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48);
    lo0 = _mm512_min_ps(lo0, v0), lo1 = _mm512_min_ps(lo1, v1), lo2 = _mm512_min_ps(lo2, v2),
    lo3 = _mm512_min_ps(lo3, v3);
    hi0 = _mm512_max_ps(hi0, v0), hi1 = _mm512_max_ps(hi1, v1), hi2 = _mm512_max_ps(hi2, v2),
    hi3 = _mm512_max_ps(hi3, v3);
    z0 = _mm512_fmadd_ps(v0, zero, z0), z1 = _mm512_fmadd_ps(v1, zero, z1),
    z2 = _mm512_fmadd_ps(v2, zero, z2), z3 = _mm512_fmadd_ps(v3, zero, z3);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    lo0 = _mm512_mask_min_ps(lo0, m, lo0, v);
    hi0 = _mm512_mask_max_ps(hi0, m, hi0, v);
    z0 = _mm512_fmadd_ps(v, zero, z0);
  }
  const __m512 z = _mm512_add_ps(_mm512_add_ps(z0, z1), _mm512_add_ps(z2, z3));
  if (_mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q)) return minmax_avx512_checked(x, n);
  return {_mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(lo0, lo1), _mm512_min_ps(lo2, lo3))),
          _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(hi0, hi1), _mm512_max_ps(hi2, hi3))), n};
}

FRUGAL_QUANT_TARGET_AVX512 __attribute__((always_inline)) inline std::size_t quantize_run_avx512_body(
    const float* x, std::size_t n, float scale, std::int32_t zp, std::int32_t lo, std::int32_t hi,
    rounding_mode rm, std::int8_t* out, bool known_finite, const float* prefetch) noexcept {
  const float r = 1.0f / scale;
  if (!std::isnormal(r)) return quantize_run_avx512_div(x, n, scale, zp, lo, hi, rm, out);
  constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  constexpr int abs_max = 0x0b, clamp_abs = 0x02;  // vrangeps: max |a|,|b| (sign cleared); min, sign of a
  const __m512 vr = _mm512_set1_ps(r), vzp = _mm512_set1_ps(static_cast<float>(zp)),
               thr = _mm512_set1_ps(near_half), cap = _mm512_set1_ps(1024.0f), zero = _mm512_setzero_ps();
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i blo = _mm512_set1_epi8(static_cast<char>(lo)), bhi = _mm512_set1_epi8(static_cast<char>(hi));
  const bool is_unsigned = hi > 127;
  std::size_t bad = n, i = 0;
  for (; i + 64 <= n; i += 64) {
    if (prefetch)
      for (std::size_t l = 0; l < 64; l += 16)
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + i + l), _MM_HINT_T0);
    const __m512 t0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), vr, vzp),
                 t1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), vr, vzp),
                 t2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), vr, vzp),
                 t3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), vr, vzp);
    // t - round(t), in [-0.5, 0.5]; the largest magnitude of the block says whether any is near a tie.
    const __m512 f = _mm512_range_ps(
        _mm512_range_ps(_mm512_reduce_ps(t0, nearest), _mm512_reduce_ps(t1, nearest), abs_max),
        _mm512_range_ps(_mm512_reduce_ps(t2, nearest), _mm512_reduce_ps(t3, nearest), abs_max), abs_max);
    __mmask16 flag = _mm512_cmp_ps_mask(f, thr, _CMP_GT_OQ);
    if (!known_finite) {
      const __m512 z = _mm512_fmadd_ps(
          t3, zero, _mm512_fmadd_ps(t2, zero, _mm512_fmadd_ps(t1, zero, _mm512_mul_ps(t0, zero))));
      flag |= _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);
    }
    if (flag) {
      const std::size_t b = quantize_run_avx512_div(x + i, 64, scale, zp, lo, hi, rm, out + i);
      if (b != 64 && bad == n) bad = i + b;
      continue;
    }
    const __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_range_ps(t0, cap, clamp_abs), nearest),
                  i1 = _mm512_cvt_roundps_epi32(_mm512_range_ps(t1, cap, clamp_abs), nearest),
                  i2 = _mm512_cvt_roundps_epi32(_mm512_range_ps(t2, cap, clamp_abs), nearest),
                  i3 = _mm512_cvt_roundps_epi32(_mm512_range_ps(t3, cap, clamp_abs), nearest);
    const __m512i w01 = _mm512_packs_epi32(i0, i1), w23 = _mm512_packs_epi32(i2, i3);
    const __m512i b = is_unsigned ? _mm512_max_epu8(_mm512_min_epu8(_mm512_packus_epi16(w01, w23), bhi), blo)
                                  : _mm512_max_epi8(_mm512_min_epi8(_mm512_packs_epi16(w01, w23), bhi), blo);
    _mm512_storeu_si512(out + i, _mm512_permutexvar_epi32(order, b));
  }
  if (i == n) return bad;  // a call per group of 64 or 128 would cost as much as the group
  const std::size_t tail_bad = quantize_run_avx512_div(x + i, n - i, scale, zp, lo, hi, rm, out + i);
  if (tail_bad != n - i && bad == n) bad = i + tail_bad;
  return bad;
}

FRUGAL_QUANT_TARGET_AVX512 inline void pack_nibbles_avx512(const std::int8_t* v, std::size_t n,
                                                           std::uint8_t* out) noexcept {
  const __m512i low = _mm512_set1_epi16(0x000f), high = _mm512_set1_epi16(0x00f0);
  std::size_t j = 0;
  for (; j + 64 <= n; j += 64) {
    const __m512i w = _mm512_loadu_si512(v + j);  // 16-bit lanes: element 2k low byte, 2k+1 high byte
    const __m512i b =
        _mm512_or_si512(_mm512_and_si512(w, low), _mm512_and_si512(_mm512_srli_epi16(w, 4), high));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j / 2), _mm512_cvtepi16_epi8(b));
  }
  pack_nibbles(v + j, n - j, out + j / 2);
}

FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline run_range minmax_avx2_body(
    const float* x, std::size_t n) noexcept {
  const __m256 zero = _mm256_setzero_ps();
  __m256 lo0 = _mm256_set1_ps(std::numeric_limits<float>::infinity()), lo1 = lo0, lo2 = lo0, lo3 = lo0;
  __m256 hi0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), hi1 = hi0, hi2 = hi0, hi3 = hi0;
  __m256 z0 = zero, z1 = zero, z2 = zero, z3 = zero;  // NaN once a non-finite value was seen
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8),
                 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
    lo0 = _mm256_min_ps(lo0, v0), lo1 = _mm256_min_ps(lo1, v1), lo2 = _mm256_min_ps(lo2, v2),
    lo3 = _mm256_min_ps(lo3, v3);
    hi0 = _mm256_max_ps(hi0, v0), hi1 = _mm256_max_ps(hi1, v1), hi2 = _mm256_max_ps(hi2, v2),
    hi3 = _mm256_max_ps(hi3, v3);
    z0 = _mm256_fmadd_ps(v0, zero, z0), z1 = _mm256_fmadd_ps(v1, zero, z1),
    z2 = _mm256_fmadd_ps(v2, zero, z2), z3 = _mm256_fmadd_ps(v3, zero, z3);
  }
  const __m256 z = _mm256_add_ps(_mm256_add_ps(z0, z1), _mm256_add_ps(z2, z3));
  if (_mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q))) return minmax_avx2_checked(x, n);
  alignas(32) float lo8[8], hi8[8];
  _mm256_store_ps(lo8, _mm256_min_ps(_mm256_min_ps(lo0, lo1), _mm256_min_ps(lo2, lo3)));
  _mm256_store_ps(hi8, _mm256_max_ps(_mm256_max_ps(hi0, hi1), _mm256_max_ps(hi2, hi3)));
  run_range rr = minmax_portable(x + i, n - i);
  if (rr.first_nonfinite != n - i) return minmax_avx2_checked(x, n);
  for (int k = 0; k < 8; ++k) {
    rr.lo = std::min(rr.lo, lo8[k]);
    rr.hi = std::max(rr.hi, hi8[k]);
  }
  rr.first_nonfinite = n;
  return rr;
}

FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline std::size_t quantize_run_avx2_body(
    const float* x, std::size_t n, float scale, std::int32_t zp, std::int32_t lo, std::int32_t hi,
    rounding_mode rm, std::int8_t* out, bool known_finite, const float* prefetch) noexcept {
  const float r = 1.0f / scale;
  if (!std::isnormal(r)) return quantize_run_avx2_div(x, n, scale, zp, lo, hi, rm, out);
  constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 vr = _mm256_set1_ps(r), vzp = _mm256_set1_ps(static_cast<float>(zp)),
               thr = _mm256_set1_ps(near_half), cap = _mm256_set1_ps(1024.0f),
               ncap = _mm256_set1_ps(-1024.0f), absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
               zero = _mm256_setzero_ps();
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i blo = _mm256_set1_epi8(static_cast<char>(lo)), bhi = _mm256_set1_epi8(static_cast<char>(hi));
  const bool is_unsigned = hi > 127;
  std::size_t bad = n, i = 0;
  for (; i + 32 <= n; i += 32) {
    if (prefetch)
      for (std::size_t l = 0; l < 32; l += 16)
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + i + l), _MM_HINT_T0);
    const __m256 t0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vr, vzp),
                 t1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), vr, vzp),
                 t2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), vr, vzp),
                 t3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), vr, vzp);
    const __m256 r0 = _mm256_round_ps(t0, nearest), r1 = _mm256_round_ps(t1, nearest),
                 r2 = _mm256_round_ps(t2, nearest), r3 = _mm256_round_ps(t3, nearest);
    // |t - round(t)| is NaN for a non-finite t, and the ordered compare below would miss it, so
    // non-finite values are looked for separately unless the data is known to be finite.
    const __m256 f = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(_mm256_sub_ps(t0, r0), absmask),
                                                 _mm256_and_ps(_mm256_sub_ps(t1, r1), absmask)),
                                   _mm256_max_ps(_mm256_and_ps(_mm256_sub_ps(t2, r2), absmask),
                                                 _mm256_and_ps(_mm256_sub_ps(t3, r3), absmask)));
    int flag = _mm256_movemask_ps(_mm256_cmp_ps(f, thr, _CMP_GT_OQ));
    if (!known_finite) {
      const __m256 z = _mm256_fmadd_ps(
          t3, zero, _mm256_fmadd_ps(t2, zero, _mm256_fmadd_ps(t1, zero, _mm256_mul_ps(t0, zero))));
      flag |= _mm256_movemask_ps(_mm256_cmp_ps(z, z, _CMP_UNORD_Q));
    }
    if (flag) {
      const std::size_t b = quantize_run_avx2_div(x + i, 32, scale, zp, lo, hi, rm, out + i);
      if (b != 32 && bad == n) bad = i + b;
      continue;
    }
    // Rounded values are integers: clamp to +-1024 (an infinite t saturates too) and truncate exactly.
    const __m256i i0 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r0, ncap), cap)),
                  i1 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r1, ncap), cap)),
                  i2 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r2, ncap), cap)),
                  i3 = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r3, ncap), cap));
    const __m256i w01 = _mm256_packs_epi32(i0, i1), w23 = _mm256_packs_epi32(i2, i3);
    const __m256i b = is_unsigned ? _mm256_max_epu8(_mm256_min_epu8(_mm256_packus_epi16(w01, w23), bhi), blo)
                                  : _mm256_max_epi8(_mm256_min_epi8(_mm256_packs_epi16(w01, w23), bhi), blo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permutevar8x32_epi32(b, order));
  }
  if (i == n) return bad;
  const std::size_t tail_bad = quantize_run_avx2_div(x + i, n - i, scale, zp, lo, hi, rm, out + i);
  if (tail_bad != n - i && bad == n) bad = i + tail_bad;
  return bad;
}

// The range a symmetric scheme needs: only max |x| matters to params_from_range, so this returns
// {-max|x|, max|x|}. The magnitudes are compared as integers (the bits of |x| order like |x| for finite
// values), and a maximum at or above the bits of Inf reveals a NaN or Inf: then the checked min-max runs.
FRUGAL_QUANT_TARGET_AVX512 __attribute__((always_inline)) inline run_range absmax_avx512_body(
    const float* x, std::size_t n) noexcept {
  const __m512i mag = _mm512_set1_epi32(0x7fffffff);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x + i), mag));
    a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), mag));
    a2 = _mm512_max_epu32(a2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), mag));
    a3 = _mm512_max_epu32(a3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), mag));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + i), mag));
  }
  const std::uint32_t bits =
      _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3)));
  if (bits >= 0x7f800000u) return minmax_avx512_checked(x, n);
  float a;
  std::memcpy(&a, &bits, sizeof a);
  return {n == 0 ? std::numeric_limits<float>::infinity() : -a,
          n == 0 ? -std::numeric_limits<float>::infinity() : a, n};
}

// The largest |x| bits of a short tail, out of line so that the vector loop's caller stays small.
[[gnu::noinline]] inline std::uint32_t absmax_bits_tail(const float* x, std::size_t n) noexcept {
  std::uint32_t bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, x + i, sizeof b);
    bits = std::max(bits, b & 0x7fffffffu);
  }
  return bits;
}

// The largest |x| of n floats as the bits of a float (those order like |x| for finite values; bits at or
// above Inf's reveal a NaN or Inf), the lanes' maximum taken in registers (through memory, 8 scalar loads
// would wait on the vector store).
FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline std::uint32_t absmax_bits_avx2(
    const float* x, std::size_t n) noexcept {
  const __m256i mag = _mm256_set1_epi32(0x7fffffff);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto* p = reinterpret_cast<const __m256i*>(x + i);
    a0 = _mm256_max_epu32(a0, _mm256_and_si256(_mm256_loadu_si256(p), mag));
    a1 = _mm256_max_epu32(a1, _mm256_and_si256(_mm256_loadu_si256(p + 1), mag));
    a2 = _mm256_max_epu32(a2, _mm256_and_si256(_mm256_loadu_si256(p + 2), mag));
    a3 = _mm256_max_epu32(a3, _mm256_and_si256(_mm256_loadu_si256(p + 3), mag));
  }
  const __m256i m = _mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3));
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
  auto bits = static_cast<std::uint32_t>(_mm_cvtsi128_si32(h));
  if (i != n) [[unlikely]]
    bits = std::max(bits, absmax_bits_tail(x + i, n - i));
  return bits;
}

FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline run_range absmax_avx2_body(
    const float* x, std::size_t n) noexcept {
  const std::uint32_t bits = absmax_bits_avx2(x, n);
  if (bits >= 0x7f800000u) return minmax_avx2_checked(x, n);
  float a;
  std::memcpy(&a, &bits, sizeof a);
  return {n == 0 ? std::numeric_limits<float>::infinity() : -a,
          n == 0 ? -std::numeric_limits<float>::infinity() : a, n};
}

FRUGAL_QUANT_TARGET_AVX512 inline run_range minmax_avx512(const float* x, std::size_t n) noexcept {
  return minmax_avx512_body(x, n);
}
FRUGAL_QUANT_TARGET_AVX512 inline run_range absmax_avx512(const float* x, std::size_t n) noexcept {
  return absmax_avx512_body(x, n);
}
FRUGAL_QUANT_TARGET_AVX512 inline std::size_t quantize_run_avx512(const float* x, std::size_t n, float scale,
                                                                  std::int32_t zp, std::int32_t lo,
                                                                  std::int32_t hi, rounding_mode rm,
                                                                  std::int8_t* out, bool known_finite,
                                                                  const float* prefetch) noexcept {
  return quantize_run_avx512_body(x, n, scale, zp, lo, hi, rm, out, known_finite, prefetch);
}
// A row of `runs` runs of n elements each, in one call so that the constants stay in registers.
FRUGAL_QUANT_TARGET_AVX512 inline void range_runs_avx512(const float* x, std::size_t n, std::size_t runs,
                                                         bool symmetric, run_range* out) noexcept {
  if (symmetric)
    for (std::size_t k = 0; k < runs; ++k) out[k] = absmax_avx512_body(x + k * n, n);
  else
    for (std::size_t k = 0; k < runs; ++k) out[k] = minmax_avx512_body(x + k * n, n);
}
FRUGAL_QUANT_TARGET_AVX512 inline std::size_t quantize_runs_avx512(const float* x, std::size_t n,
                                                                   std::size_t runs, const float* scales,
                                                                   const std::int32_t* zps, std::int32_t lo,
                                                                   std::int32_t hi, rounding_mode rm,
                                                                   std::int8_t* out, const run_range* ranges,
                                                                   const float* prefetch) noexcept {
  std::size_t bad = n * runs;
  for (std::size_t k = 0; k < runs; ++k) {
    const std::size_t b = quantize_run_avx512_body(x + k * n, n, scales[k], zps[k], lo, hi, rm, out + k * n,
                                                   ranges && ranges[k].first_nonfinite == n,
                                                   prefetch ? prefetch + k * n : nullptr);
    if (b != n && bad == n * runs) bad = k * n + b;
  }
  return bad;
}

FRUGAL_QUANT_TARGET_AVX2 inline run_range minmax_avx2(const float* x, std::size_t n) noexcept {
  return minmax_avx2_body(x, n);
}
FRUGAL_QUANT_TARGET_AVX2 inline run_range absmax_avx2(const float* x, std::size_t n) noexcept {
  return absmax_avx2_body(x, n);
}
FRUGAL_QUANT_TARGET_AVX2 inline std::size_t quantize_run_avx2(const float* x, std::size_t n, float scale,
                                                              std::int32_t zp, std::int32_t lo,
                                                              std::int32_t hi, rounding_mode rm,
                                                              std::int8_t* out, bool known_finite,
                                                              const float* prefetch) noexcept {
  return quantize_run_avx2_body(x, n, scale, zp, lo, hi, rm, out, known_finite, prefetch);
}
FRUGAL_QUANT_TARGET_AVX2 inline void range_runs_avx2(const float* x, std::size_t n, std::size_t runs,
                                                     bool symmetric, run_range* out) noexcept {
  if (symmetric)
    for (std::size_t k = 0; k < runs; ++k) out[k] = absmax_avx2_body(x + k * n, n);
  else
    for (std::size_t k = 0; k < runs; ++k) out[k] = minmax_avx2_body(x + k * n, n);
}
FRUGAL_QUANT_TARGET_AVX2 inline std::size_t quantize_runs_avx2(const float* x, std::size_t n,
                                                               std::size_t runs, const float* scales,
                                                               const std::int32_t* zps, std::int32_t lo,
                                                               std::int32_t hi, rounding_mode rm,
                                                               std::int8_t* out, const run_range* ranges,
                                                               const float* prefetch) noexcept {
  std::size_t bad = n * runs;
  for (std::size_t k = 0; k < runs; ++k) {
    const std::size_t b = quantize_run_avx2_body(x + k * n, n, scales[k], zps[k], lo, hi, rm, out + k * n,
                                                 ranges && ranges[k].first_nonfinite == n,
                                                 prefetch ? prefetch + k * n : nullptr);
    if (b != n && bad == n * runs) bad = k * n + b;
  }
  return bad;
}

// Symmetric per-group quantization of a row of `runs` groups of g, one group at a time while it is in
// L1: max |x| (as integer bits, which order like |x| for finite values), scale = max|x| / half_levels
// (params_from_range's formula for a symmetric scheme, 1 for an all-zero group), rounded to fp16 when
// scale_bits is not null (the W4A16 layout), then round(x / scale) + zp.
// Returns false at the first group with NaN or Inf, or whose scale fp16 cannot hold, having written
// part of the row: the caller redoes the row on the general path, which reports or saturates it.
//
// The quantizer divides: x / scale rounded is the definition itself, so no value near a tie needs a
// second look. The divider keeps up with memory (vdivps ymm issues about every 3.5 cycles on AMD Zen 3
// and Zen 4, by the published instruction tables), where multiplying by 1/scale and proving each block
// free of near-ties (quantize_run_*_body) spends 31 operations on 32 floats; dividing made this path
// 1.2-1.3x faster on Zen 4 (issue 25, benchmarks/RESULTS.md). |x / scale| is at most half_levels, twice that
// with an fp16 scale rounded from a subnormal, so the conversion cannot overflow. Unsigned: u8 (zero point
// 128). Nearest: half to even through vcvtps2dq, chosen only when MXCSR rounds to nearest (otherwise vroundps
// rounds first, as the other modes do). Clamp: the integers are clamped to [lo, hi] (int4). An 8-bit type
// skips the clamp: with a normal fp32 scale from the group's own max |x|, |x / scale| rounds to at most
// half_levels (127, or 127.5 -> 128 without narrow range, which the saturating pack turns into 127), so the
// packs' saturation is the clamp; a group with a subnormal scale goes through the division kernel, which
// clamps. 8-bit types with fp16 scales are left to the general path (no caller asks for them). stream: the
// output is large and written once (not a row buffer read back at once), so the integers go out through
// non-temporal stores, which skip its read-for-ownership (stream_bytes in cpu.hpp).
FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline float group_scale(
    std::uint32_t absmax_bits, float half_levels, std::uint16_t* fp16) noexcept {
  float a;
  std::memcpy(&a, &absmax_bits, sizeof a);
  float scale = a / half_levels;
  if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
  if (fp16) {
    const __m128i h = _mm_cvtps_ph(_mm_set_ss(scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    scale = _mm_cvtss_f32(_mm_cvtph_ps(h));
    if (!(scale > 0.0f) || !std::isfinite(scale)) return 0.0f;
    *fp16 = static_cast<std::uint16_t>(_mm_extract_epi16(h, 0));
  }
  return scale;
}

// The scale of group k (0 for a group that cannot be done here: NaN, Inf, or an fp16 scale out of range).
// Helpers are functions, not lambdas: nvcc's host pass drops a lambda's target attribute.
FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline float group_scale_at(
    const float* x, std::size_t g, std::size_t k, float half_levels, std::uint16_t* scale_bits) noexcept {
  const std::uint32_t bits = absmax_bits_avx2(x + k * g, g);
  return bits >= 0x7f800000u ? 0.0f : group_scale(bits, half_levels, scale_bits ? scale_bits + k : nullptr);
}

// round(q) in mode rm, as int32, plus the zero point for u8.
template <bool Unsigned, bool Nearest>
FRUGAL_QUANT_TARGET_AVX2 __attribute__((always_inline)) inline __m256i group_int_avx2(rounding_mode rm,
                                                                                      __m256i vzp,
                                                                                      __m256 q) noexcept {
  __m256i v;
  if constexpr (Nearest)
    v = _mm256_cvtps_epi32(q);
  else
    v = _mm256_cvttps_epi32(round_avx2(q, rm));
  if constexpr (Unsigned) v = _mm256_add_epi32(v, vzp);
  return v;
}

template <bool Unsigned, bool Nearest, bool Clamp, std::size_t G = 0>
FRUGAL_QUANT_TARGET_AVX2 inline bool groups_symmetric_avx2(const float* x, std::size_t g, std::size_t runs,
                                                           float half_levels, std::int32_t zp,
                                                           std::int32_t lo, std::int32_t hi, rounding_mode rm,
                                                           std::int8_t* out, float* scales,
                                                           std::uint16_t* scale_bits, bool stream) noexcept {
  const __m256i vzp = _mm256_set1_epi32(zp);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i blo = _mm256_set1_epi8(static_cast<char>(lo)), bhi = _mm256_set1_epi8(static_cast<char>(hi));
  if constexpr (G != 0) g = G;  // the usual group size, with every loop unrolled
  // Non-temporal stores need every 32-byte block of the output 16-byte aligned.
  stream = stream && g % 32 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  // Each group's max |x| and scale, then its integers, while it is in L1: the same order as a plain
  // loop. Finding group k + 1's scale before dividing group k (to overlap the scalar division) ran at
  // 0.80-0.93x the plain loop, against 0.96-1.06x in this order (the kernels alone, without streaming, in
  // a throw-away harness on Zen 4; benchmarks/RESULTS.md).
  for (std::size_t k = 0; k < runs; ++k) {
    const float* xk = x + k * g;
    const float scale = group_scale_at(x, g, k, half_levels, scale_bits);
    if (scale == 0.0f) {
      if (stream) _mm_sfence();
      return false;
    }
    scales[k] = scale;
    std::int8_t* o = out + k * g;
    if (!Clamp && !(scale >= std::numeric_limits<float>::min())) {
      quantize_run_avx2_div(xk, g, scale, zp, lo, hi, rm, o);
      continue;
    }
    std::size_t i = 0;
    const __m256 vs = _mm256_set1_ps(scale);
    for (; i + 32 <= g; i += 32) {
      const __m256i i0 = group_int_avx2<Unsigned, Nearest>(rm, vzp,
                                                           _mm256_div_ps(_mm256_loadu_ps(xk + i), vs)),
                    i1 = group_int_avx2<Unsigned, Nearest>(rm, vzp,
                                                           _mm256_div_ps(_mm256_loadu_ps(xk + i + 8), vs)),
                    i2 = group_int_avx2<Unsigned, Nearest>(rm, vzp,
                                                           _mm256_div_ps(_mm256_loadu_ps(xk + i + 16), vs)),
                    i3 = group_int_avx2<Unsigned, Nearest>(rm, vzp,
                                                           _mm256_div_ps(_mm256_loadu_ps(xk + i + 24), vs));
      const __m256i w01 = _mm256_packs_epi32(i0, i1), w23 = _mm256_packs_epi32(i2, i3);
      __m256i b = Unsigned ? _mm256_packus_epi16(w01, w23) : _mm256_packs_epi16(w01, w23);
      if constexpr (Clamp) b = _mm256_max_epi8(_mm256_min_epi8(b, bhi), blo);
      b = _mm256_permutevar8x32_epi32(b, order);
      if (stream) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(o + i), _mm256_castsi256_si128(b));
        _mm_stream_si128(reinterpret_cast<__m128i*>(o + i + 16), _mm256_extracti128_si256(b, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), b);
      }
    }
    if (i != g) quantize_run_avx2_div(xk + i, g - i, scale, zp, lo, hi, rm, o + i);
  }
  if (stream) _mm_sfence();
  return true;
}

// Picks the instantiation: Clamp for types narrower than 8 bits (int4), Unsigned for u8, and the loops
// unrolled for groups of 128 in the usual case. Unsigned with Clamp, or an 8-bit type with fp16 scales,
// is not instantiated and goes to the general path. The AVX-512 level takes this kernel too: memory is the
// limit (neither a plain multiply nor an FMA-corrected one was faster than the division), and an AVX-512
// twin ran slower (both measured in throw-away builds on Zen 4; benchmarks/RESULTS.md gives the figures).
inline bool quantize_groups_symmetric_avx2(const float* x, std::size_t g, std::size_t runs, float half_levels,
                                           std::int32_t zp, std::int32_t lo, std::int32_t hi,
                                           rounding_mode rm, std::int8_t* out, float* scales,
                                           std::uint16_t* scale_bits, bool stream) noexcept {
#  define FRUGAL_QUANT_GROUPS_ARGS x, g, runs, half_levels, zp, lo, hi, rm, out, scales, scale_bits, stream
  const bool narrow = hi < 127;
  const bool is_unsigned = hi > 127;
  if ((!narrow && scale_bits) || (narrow && is_unsigned)) return false;
  const bool nearest = rm == rounding_mode::half_to_even && (_mm_getcsr() & 0x6000u) == 0;
  if (narrow)
    return nearest ? groups_symmetric_avx2<false, true, true>(FRUGAL_QUANT_GROUPS_ARGS)
                   : groups_symmetric_avx2<false, false, true>(FRUGAL_QUANT_GROUPS_ARGS);
  if (is_unsigned)
    return nearest ? groups_symmetric_avx2<true, true, false>(FRUGAL_QUANT_GROUPS_ARGS)
                   : groups_symmetric_avx2<true, false, false>(FRUGAL_QUANT_GROUPS_ARGS);
  if (nearest && g == 128) return groups_symmetric_avx2<false, true, false, 128>(FRUGAL_QUANT_GROUPS_ARGS);
  return nearest ? groups_symmetric_avx2<false, true, false>(FRUGAL_QUANT_GROUPS_ARGS)
                 : groups_symmetric_avx2<false, false, false>(FRUGAL_QUANT_GROUPS_ARGS);
#  undef FRUGAL_QUANT_GROUPS_ARGS
}

FRUGAL_QUANT_TARGET_AVX2
inline void pack_nibbles_avx2(const std::int8_t* v, std::size_t n, std::uint8_t* out) noexcept {
  const __m256i low = _mm256_set1_epi16(0x000f), high = _mm256_set1_epi16(0x00f0);
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
    const __m256i b =
        _mm256_or_si256(_mm256_and_si256(w, low), _mm256_and_si256(_mm256_srli_epi16(w, 4), high));
    // packus gives (lane 0 bytes, lane 0 bytes, lane 1 bytes, lane 1 bytes) as 8-byte quarters.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(b, b), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j / 2), _mm256_castsi256_si128(p));
  }
  pack_nibbles(v + j, n - j, out + j / 2);
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

// The range of a run for a symmetric scheme: {-max|x|, max|x|} over the finite values (params_from_range
// of a symmetric scheme reads only max(-lo, hi)), with the first non-finite index as minmax_run gives it.
inline run_range absmax_run(float_level lv, const float* x, std::size_t n) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return absmax_avx512(x, n);
  if (lv == float_level::avx2) return absmax_avx2(x, n);
#endif
  (void)lv;
  return minmax_portable(x, n);
}

// The range of a run as scheme s reads it.
inline run_range range_run(float_level lv, const scheme& s, const float* x, std::size_t n) noexcept {
  return s.symmetric ? absmax_run(lv, x, n) : minmax_run(lv, x, n);
}

// A row of `runs` runs of n elements: the range of each (as range_run gives it).
inline void range_runs(float_level lv, const scheme& s, const float* x, std::size_t n, std::size_t runs,
                       run_range* out) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return range_runs_avx512(x, n, runs, s.symmetric, out);
  if (lv == float_level::avx2) return range_runs_avx2(x, n, runs, s.symmetric, out);
#endif
  for (std::size_t k = 0; k < runs; ++k) out[k] = minmax_portable(x + k * n, n);
}

// A row of `runs` runs of n elements, run k with scales[k] and zps[k]; ranges (null when not known)
// says whether run k is known to be finite. prefetch: the next row (or null), fetched meanwhile.
// Returns the index in the row of the first non-finite value (n * runs if none).
inline std::size_t quantize_runs(float_level lv, const float* x, std::size_t n, std::size_t runs,
                                 const float* scales, const std::int32_t* zps, std::int32_t lo,
                                 std::int32_t hi, rounding_mode m, std::int8_t* out, const run_range* ranges,
                                 const float* prefetch) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512)
    return quantize_runs_avx512(x, n, runs, scales, zps, lo, hi, m, out, ranges, prefetch);
  if (lv == float_level::avx2)
    return quantize_runs_avx2(x, n, runs, scales, zps, lo, hi, m, out, ranges, prefetch);
#endif
  (void)ranges;
  (void)prefetch;
  std::size_t bad = n * runs;
  for (std::size_t k = 0; k < runs; ++k) {
    const std::size_t b = quantize_run_portable(x + k * n, n, scales[k], zps[k], lo, hi, m, out + k * n);
    if (b != n && bad == n * runs) bad = k * n + b;
  }
  return bad;
}

// known_finite: the caller has already checked that x holds no NaN or Inf (dynamic quantization did).
// prefetch: n floats to bring into cache meanwhile (the next row), or null.
inline std::size_t quantize_run(float_level lv, const float* x, std::size_t n, float scale, std::int32_t zp,
                                std::int32_t lo, std::int32_t hi, rounding_mode m, std::int8_t* out,
                                bool known_finite = false, const float* prefetch = nullptr) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512)
    return quantize_run_avx512(x, n, scale, zp, lo, hi, m, out, known_finite, prefetch);
  if (lv == float_level::avx2)
    return quantize_run_avx2(x, n, scale, zp, lo, hi, m, out, known_finite, prefetch);
#endif
  (void)known_finite;
  (void)prefetch;
  (void)lv;
  return quantize_run_portable(x, n, scale, zp, lo, hi, m, out);
}

// quantize_groups_symmetric_avx2 on the AVX2 and AVX-512 levels (see there); the portable path has none
// (returns false).
inline bool quantize_groups_symmetric(float_level lv, const float* x, std::size_t g, std::size_t runs,
                                      float half_levels, std::int32_t zp, std::int32_t lo, std::int32_t hi,
                                      rounding_mode rm, std::int8_t* out, float* scales,
                                      std::uint16_t* scale_bits, bool stream = false) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512 || lv == float_level::avx2)
    return quantize_groups_symmetric_avx2(x, g, runs, half_levels, zp, lo, hi, rm, out, scales, scale_bits,
                                          stream);
#endif
  (void)lv, (void)x, (void)g, (void)runs, (void)half_levels, (void)zp, (void)lo, (void)hi, (void)rm;
  (void)out, (void)scales, (void)scale_bits, (void)stream;
  return false;
}

inline void pack_nibbles_run(float_level lv, const std::int8_t* v, std::size_t n,
                             std::uint8_t* out) noexcept {
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return pack_nibbles_avx512(v, n, out);
  if (lv == float_level::avx2) return pack_nibbles_avx2(v, n, out);
#endif
  (void)lv;
  pack_nibbles(v, n, out);
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
  if (size != checked_mul(rows, cols, who, "rows * cols"))
    throw std::invalid_argument(std::string(who) + ": data has " + std::to_string(size) +
                                " elements, not rows * cols = " + std::to_string(rows) + " * " +
                                std::to_string(cols));
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
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
