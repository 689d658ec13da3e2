#pragma once

#include <cmath>
#include <cstddef>

#include "frugal/namespace.hpp"
#include "frugal/quant/activation.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/gelu.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

namespace detail {

inline float gelu_tanh(float x) noexcept {
  const float u = gelu_tanh_scale * (x + gelu_tanh_cubic * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

inline float activate(float x, activation_kind a) noexcept {
  switch (a) {
    case activation_kind::relu:
      return x > 0.0f ? x : 0.0f;
    case activation_kind::gelu:
      return gelu_tanh(x);
    case activation_kind::gelu_erf:
      return 0.5f * x * (1.0f + std::erf(x * gelu_erf_scale));
    default:
      return x;
  }
}

#if FRUGAL_QUANT_X86
// Cephes-style expf: the range reduction in two parts, a degree-5 polynomial, then 2^n.
FRUGAL_QUANT_TARGET_AVX512 inline __m512 exp_avx512(__m512 x) noexcept {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// gelu(x) = x / (1 + exp(-2u)), which equals 0.5 x (1 + tanh(u)).
// erf(z) for z >= 0 by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7, below fp32's resolution of
// 1 + erf), so gelu_erf(x) = 0.5 x (1 + sign(x) erf(|x| / sqrt 2)).
FRUGAL_QUANT_TARGET_AVX512 inline __m512 gelu_erf_avx512(__m512 x) noexcept {
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(gelu_erf_scale));
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), z, _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  p = _mm512_mul_ps(p, t);
  const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
  __m512 erf = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  erf = _mm512_mask_sub_ps(erf, neg, _mm512_setzero_ps(), erf);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), erf));
}

FRUGAL_QUANT_TARGET_AVX512 inline __m512 activate_avx512(__m512 x, activation_kind a) noexcept {
  if (a == activation_kind::relu) return _mm512_max_ps(x, _mm512_setzero_ps());
  if (a == activation_kind::gelu_erf) return gelu_erf_avx512(x);
  if (a != activation_kind::gelu) return x;
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u =
      _mm512_mul_ps(_mm512_set1_ps(gelu_tanh_scale), _mm512_fmadd_ps(_mm512_set1_ps(gelu_tanh_cubic), x3, x));
  const __m512 e = exp_avx512(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

FRUGAL_QUANT_TARGET_AVX2 inline __m256 exp_avx2(__m256 x) noexcept {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
}

FRUGAL_QUANT_TARGET_AVX2 inline __m256 gelu_erf_avx2(__m256 x) noexcept {
  const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(gelu_erf_scale));
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), z, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
  const __m256 erf = _mm256_xor_ps(_mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f)), sign);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), erf));
}

FRUGAL_QUANT_TARGET_AVX2 inline __m256 activate_avx2(__m256 x, activation_kind a) noexcept {
  if (a == activation_kind::relu) return _mm256_max_ps(x, _mm256_setzero_ps());
  if (a == activation_kind::gelu_erf) return gelu_erf_avx2(x);
  if (a != activation_kind::gelu) return x;
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u =
      _mm256_mul_ps(_mm256_set1_ps(gelu_tanh_scale), _mm256_fmadd_ps(_mm256_set1_ps(gelu_tanh_cubic), x3, x));
  const __m256 e = exp_avx2(_mm256_mul_ps(u, _mm256_set1_ps(-2.0f)));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

FRUGAL_QUANT_TARGET_AVX512 inline void activate_span_avx512(float* x, std::size_t n,
                                                            activation_kind a) noexcept {
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, m, activate_avx512(_mm512_maskz_loadu_ps(m, x + i), a));
  }
}
FRUGAL_QUANT_TARGET_AVX2 inline void activate_span_avx2(float* x, std::size_t n, activation_kind a) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, activate_avx2(_mm256_loadu_ps(x + i), a));
  for (; i < n; ++i) x[i] = activate(x[i], a);
}
#endif

inline void activate_span(float_level lv, float* x, std::size_t n, activation_kind a) noexcept {
  if (a == activation_kind::none) return;
#if FRUGAL_QUANT_X86
  if (lv == float_level::avx512) return activate_span_avx512(x, n, a);
  if (lv == float_level::avx2) return activate_span_avx2(x, n, a);
#endif
  (void)lv;
  for (std::size_t i = 0; i < n; ++i) x[i] = activate(x[i], a);
}

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
