#pragma once

#include <cmath>
#include <cstddef>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/cpu.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// The two loops of kv_attention over one block of one head, per SIMD level. Each fixes its reduction
// order: a score is one dot product over head_dim in the order the level states; an output element sums
// its tokens in position order. Neither depends on which other rows or tokens a call holds.

// scores[t] = scale * dot(q, k + t * D) for t < count.
// portable: d = 0, 1, ..., D - 1, one accumulator.
inline void kv_scores_portable(const float* q, const float* k, std::size_t count, std::size_t D, float scale,
                               float* scores) noexcept {
  for (std::size_t t = 0; t < count; ++t) {
    const float* kt = k + t * D;
    float s = 0.0f;
    for (std::size_t d = 0; d < D; ++d) s += q[d] * kt[d];
    scores[t] = s * scale;
  }
}

// acc[d] += w[t] * v[t * D + d] for t = 0, 1, ..., count - 1 in that order.
inline void kv_accumulate_portable(float* acc, const float* w, const float* v, std::size_t count,
                                   std::size_t D) noexcept {
  for (std::size_t t = 0; t < count; ++t)
    for (std::size_t d = 0; d < D; ++d) acc[d] += w[t] * v[t * D + d];
}

#if FRUGAL_QUANT_X86
FRUGAL_QUANT_SIMD_BEGIN

// avx512: 16 lanes, lane j sums d = j, j + 16, ... with FMA (the last partial vector masked), then
// _mm512_reduce_add_ps's fixed tree.
FRUGAL_QUANT_TARGET_AVX512 inline void kv_scores_avx512(const float* q, const float* k, std::size_t count,
                                                        std::size_t D, float scale, float* scores) noexcept {
  const std::size_t full = D / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (D - full)) - 1u);
  for (std::size_t t = 0; t < count; ++t) {
    const float* kt = k + t * D;
    __m512 acc = _mm512_setzero_ps();
    std::size_t d = 0;
    for (; d < full; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(kt + d), acc);
    if (tail)
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + d), _mm512_maskz_loadu_ps(tail, kt + d), acc);
    scores[t] = _mm512_reduce_add_ps(acc) * scale;
  }
}

FRUGAL_QUANT_TARGET_AVX512 inline void kv_accumulate_avx512(float* acc, const float* w, const float* v,
                                                            std::size_t count, std::size_t D) noexcept {
  const std::size_t full = D / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (D - full)) - 1u);
  for (std::size_t d = 0; d < full; d += 16) {
    __m512 a = _mm512_loadu_ps(acc + d);
    for (std::size_t t = 0; t < count; ++t)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), _mm512_loadu_ps(v + t * D + d), a);
    _mm512_storeu_ps(acc + d, a);
  }
  if (tail) {
    __m512 a = _mm512_maskz_loadu_ps(tail, acc + full);
    for (std::size_t t = 0; t < count; ++t)
      a = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), _mm512_maskz_loadu_ps(tail, v + t * D + full), a);
    _mm512_mask_storeu_ps(acc + full, tail, a);
  }
}

// avx2: 8 lanes, lane j sums d = j, j + 8, ... with FMA (the last partial vector masked), then
// (lanes 0-3 + 4-7), (0-1 + 2-3), (0 + 1).
FRUGAL_QUANT_TARGET_AVX2 inline __m256i kv_mask8(std::size_t n) noexcept {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

FRUGAL_QUANT_TARGET_AVX2 inline void kv_scores_avx2(const float* q, const float* k, std::size_t count,
                                                    std::size_t D, float scale, float* scores) noexcept {
  const std::size_t full = D / 8 * 8;
  const __m256i tail = kv_mask8(D - full);
  for (std::size_t t = 0; t < count; ++t) {
    const float* kt = k + t * D;
    __m256 acc = _mm256_setzero_ps();
    std::size_t d = 0;
    for (; d < full; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kt + d), acc);
    if (d < D) acc = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, tail), _mm256_maskload_ps(kt + d, tail), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    scores[t] = _mm_cvtss_f32(s) * scale;
  }
}

FRUGAL_QUANT_TARGET_AVX2 inline void kv_accumulate_avx2(float* acc, const float* w, const float* v,
                                                        std::size_t count, std::size_t D) noexcept {
  const std::size_t full = D / 8 * 8;
  for (std::size_t d = 0; d < full; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (std::size_t t = 0; t < count; ++t)
      a = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), _mm256_loadu_ps(v + t * D + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (std::size_t d = full; d < D; ++d)
    for (std::size_t t = 0; t < count; ++t) acc[d] = std::fma(w[t], v[t * D + d], acc[d]);
}

FRUGAL_QUANT_SIMD_END
#endif

struct kv_kernels {
  void (*scores)(const float*, const float*, std::size_t, std::size_t, float, float*) noexcept;
  void (*accumulate)(float*, const float*, const float*, std::size_t, std::size_t) noexcept;
};

inline kv_kernels kv_kernels_for(quant::detail::float_level level) noexcept {
#if FRUGAL_QUANT_X86
  if (level == quant::detail::float_level::avx512) return {&kv_scores_avx512, &kv_accumulate_avx512};
  if (level == quant::detail::float_level::avx2) return {&kv_scores_avx2, &kv_accumulate_avx2};
#else
  (void)level;
#endif
  return {&kv_scores_portable, &kv_accumulate_portable};
}

}  // namespace detail
FRUGAL_END_NAMESPACE

#include "frugal/detail/macro_unscope.hpp"
