#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

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

// Calls run(std::integral_constant<std::size_t, n>{}) for n in [1, 8], so that a kernel keeps n
// accumulators in registers.
template <class Run>
inline void kv_with_vectors(std::size_t n, Run&& run) {
  switch (n) {
    case 1:
      run(std::integral_constant<std::size_t, 1>{});
      break;
    case 2:
      run(std::integral_constant<std::size_t, 2>{});
      break;
    case 3:
      run(std::integral_constant<std::size_t, 3>{});
      break;
    case 4:
      run(std::integral_constant<std::size_t, 4>{});
      break;
    case 5:
      run(std::integral_constant<std::size_t, 5>{});
      break;
    case 6:
      run(std::integral_constant<std::size_t, 6>{});
      break;
    case 7:
      run(std::integral_constant<std::size_t, 7>{});
      break;
    default:
      run(std::integral_constant<std::size_t, 8>{});
      break;
  }
}

#if FRUGAL_QUANT_X86
FRUGAL_QUANT_SIMD_BEGIN

// avx512: 16 lanes, lane j sums d = j, j + 16, ... with FMA (the last partial vector masked), then
// _mm512_reduce_add_ps's fixed tree. Four tokens at a time, each with its own accumulator, so that their
// chains overlap; a token's operations are the same as alone.
FRUGAL_QUANT_TARGET_AVX512 inline __m512 kv_dot_avx512(const float* q, const float* kt, std::size_t full,
                                                       __mmask16 tail) noexcept {
  __m512 acc = _mm512_setzero_ps();
  std::size_t d = 0;
  for (; d < full; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(kt + d), acc);
  if (tail)
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + d), _mm512_maskz_loadu_ps(tail, kt + d), acc);
  return acc;
}

FRUGAL_QUANT_TARGET_AVX512 inline void kv_scores_avx512(const float* q, const float* k, std::size_t count,
                                                        std::size_t D, float scale, float* scores) noexcept {
  const std::size_t full = D / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (D - full)) - 1u);
  std::size_t t = 0;
  for (; t + 4 <= count; t += 4) {
    const float* k0 = k + t * D;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t d = 0;
    for (; d < full; d += 16) {
      const __m512 qv = _mm512_loadu_ps(q + d);
      a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + d), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + D + d), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 2 * D + d), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 3 * D + d), a3);
    }
    if (tail) {
      const __m512 qv = _mm512_maskz_loadu_ps(tail, q + d);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tail, k0 + d), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tail, k0 + D + d), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tail, k0 + 2 * D + d), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(tail, k0 + 3 * D + d), a3);
    }
    scores[t] = _mm512_reduce_add_ps(a0) * scale;
    scores[t + 1] = _mm512_reduce_add_ps(a1) * scale;
    scores[t + 2] = _mm512_reduce_add_ps(a2) * scale;
    scores[t + 3] = _mm512_reduce_add_ps(a3) * scale;
  }
  for (; t < count; ++t) scores[t] = _mm512_reduce_add_ps(kv_dot_avx512(q, k + t * D, full, tail)) * scale;
}

// acc[d] += w[t] * v[t * D + d], t in order, for NV vectors of 16 from d0 (the last one masked): the tokens
// run outside, the NV accumulators inside, so that NV chains overlap.
template <std::size_t NV>
FRUGAL_QUANT_TARGET_AVX512 inline void kv_accumulate_avx512_run(float* acc, const float* w, const float* v,
                                                                std::size_t count, std::size_t D,
                                                                __mmask16 last) noexcept {
  __m512 a[NV];
  for (std::size_t j = 0; j < NV; ++j)
    a[j] = _mm512_maskz_loadu_ps(j + 1 == NV ? last : __mmask16{0xFFFF}, acc + 16 * j);
  for (std::size_t t = 0; t < count; ++t) {
    const __m512 wt = _mm512_set1_ps(w[t]);
    const float* row = v + t * D;
    for (std::size_t j = 0; j < NV; ++j)
      a[j] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(j + 1 == NV ? last : __mmask16{0xFFFF}, row + 16 * j),
                             a[j]);
  }
  for (std::size_t j = 0; j < NV; ++j)
    _mm512_mask_storeu_ps(acc + 16 * j, j + 1 == NV ? last : __mmask16{0xFFFF}, a[j]);
}

FRUGAL_QUANT_TARGET_AVX512 inline void kv_accumulate_avx512(float* acc, const float* w, const float* v,
                                                            std::size_t count, std::size_t D) noexcept {
  for (std::size_t d0 = 0; d0 < D; d0 += 128) {
    const std::size_t left = std::min<std::size_t>(D - d0, 128), nv = (left + 15) / 16;
    const __mmask16 last =
        left % 16 == 0 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (left % 16)) - 1u);
    kv_with_vectors(nv, [&](auto n) { kv_accumulate_avx512_run<n()>(acc + d0, w, v + d0, count, D, last); });
  }
}

// avx2: 8 lanes, lane j sums d = j, j + 8, ... with FMA (the last partial vector masked), then
// (lanes 0-3 + 4-7), (0-1 + 2-3), (0 + 1).
FRUGAL_QUANT_TARGET_AVX2 inline __m256i kv_mask8(std::size_t n) noexcept {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

FRUGAL_QUANT_TARGET_AVX2 inline float kv_hsum_avx2(__m256 acc) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Four tokens at a time, each with its own accumulator; a token's operations are the same as alone.
FRUGAL_QUANT_TARGET_AVX2 inline void kv_scores_avx2(const float* q, const float* k, std::size_t count,
                                                    std::size_t D, float scale, float* scores) noexcept {
  const std::size_t full = D / 8 * 8;
  const __m256i tail = kv_mask8(D - full);
  std::size_t t = 0;
  for (; t + 4 <= count; t += 4) {
    const float* k0 = k + t * D;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t d = 0;
    for (; d < full; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + D + d), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * D + d), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * D + d), a3);
    }
    if (d < D) {
      const __m256 qv = _mm256_maskload_ps(q + d, tail);
      a0 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + d, tail), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + D + d, tail), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + 2 * D + d, tail), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k0 + 3 * D + d, tail), a3);
    }
    scores[t] = kv_hsum_avx2(a0) * scale;
    scores[t + 1] = kv_hsum_avx2(a1) * scale;
    scores[t + 2] = kv_hsum_avx2(a2) * scale;
    scores[t + 3] = kv_hsum_avx2(a3) * scale;
  }
  for (; t < count; ++t) {
    const float* kt = k + t * D;
    __m256 acc = _mm256_setzero_ps();
    std::size_t d = 0;
    for (; d < full; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kt + d), acc);
    if (d < D) acc = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, tail), _mm256_maskload_ps(kt + d, tail), acc);
    scores[t] = kv_hsum_avx2(acc) * scale;
  }
}

// acc[d] += w[t] * v[t * D + d], t in order, for NV full vectors of 8 from acc: tokens outside, the NV
// accumulators inside.
template <std::size_t NV>
FRUGAL_QUANT_TARGET_AVX2 inline void kv_accumulate_avx2_run(float* acc, const float* w, const float* v,
                                                            std::size_t count, std::size_t D) noexcept {
  __m256 a[NV];
  for (std::size_t j = 0; j < NV; ++j) a[j] = _mm256_loadu_ps(acc + 8 * j);
  for (std::size_t t = 0; t < count; ++t) {
    const __m256 wt = _mm256_set1_ps(w[t]);
    const float* row = v + t * D;
    for (std::size_t j = 0; j < NV; ++j) a[j] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(row + 8 * j), a[j]);
  }
  for (std::size_t j = 0; j < NV; ++j) _mm256_storeu_ps(acc + 8 * j, a[j]);
}

FRUGAL_QUANT_TARGET_AVX2 inline void kv_accumulate_avx2(float* acc, const float* w, const float* v,
                                                        std::size_t count, std::size_t D) noexcept {
  const std::size_t full = D / 8 * 8;
  for (std::size_t d0 = 0; d0 < full; d0 += 64) {
    kv_with_vectors(std::min<std::size_t>((full - d0) / 8, 8),
                    [&](auto n) { kv_accumulate_avx2_run<n()>(acc + d0, w, v + d0, count, D); });
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
