#pragma once

// Weight-only kernels: C[m][n] = sum_k X[m][k] * W[n][k], X fp32 M x K, W int8 (or packed int4)
// N x K row-major, dequantized on the fly. At M = 1 this is a GEMV that streams W once, so moving a
// quarter (int8) or an eighth (int4) of the bytes of fp32 weights is where the speed comes from.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

// out[i * ldo + j] = dot(X row i, W row j) for rows [m0, m1) and columns [n0, n1), raw (before the
// per-channel scale).
inline void wo8_portable(const float* x, std::size_t m0, std::size_t m1, std::size_t k, const std::int8_t* w,
                         std::size_t n0, std::size_t n1, std::size_t ldo, float* out) noexcept {
  for (std::size_t i = m0; i < m1; ++i)
    for (std::size_t j = n0; j < n1; ++j) {
      const float* xi = x + i * k;
      const std::int8_t* wj = w + j * k;
      float s = 0.0f;
      for (std::size_t t = 0; t < k; ++t) s += xi[t] * static_cast<float>(wj[t]);
      out[i * ldo + j] = s;
    }
}

// Symmetric nibbles are sign-extended, asymmetric ones have their zero point subtracted.
inline void wo4_portable(const float* x, std::size_t m0, std::size_t m1, std::size_t k, const std::uint8_t* w,
                         const half* scales, const std::uint8_t* zps, std::size_t g, std::size_t n0,
                         std::size_t n1, std::size_t ldo, float* out) noexcept {
  const std::size_t groups = k / g;
  for (std::size_t i = m0; i < m1; ++i)
    for (std::size_t j = n0; j < n1; ++j) {
      const float* xi = x + i * k;
      const std::uint8_t* wj = w + j * (k / 2);
      float total = 0.0f;
      for (std::size_t q = 0; q < groups; ++q) {
        const float zp = zps ? static_cast<float>(zps[j * groups + q]) : 0.0f;
        float s = 0.0f;
        for (std::size_t t = q * g; t < (q + 1) * g; ++t) {
          const int nib = (t & 1) ? wj[t / 2] >> 4 : wj[t / 2] & 0xf;
          const float v = zps ? static_cast<float>(nib) - zp : static_cast<float>((nib ^ 8) - 8);
          s += xi[t] * v;
        }
        total += s * static_cast<float>(scales[j * groups + q]);
      }
      out[i * ldo + j] = total;
    }
}

#if FRUGAL_QUANT_X86
template <int MR>
FRUGAL_QUANT_TARGET_AVX512 inline void wo8_block_avx512(const float* x, std::size_t k,
                                                        const std::int8_t* const* w, float* sums) noexcept {
  __m512 acc[MR][4];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm512_setzero_ps();
  for (std::size_t t = 0; t < k; t += 16) {
    const __mmask16 msk = k - t >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - t)) - 1u);
    __m512 wf[4];
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < 4; ++j)
      wf[j] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(msk, w[j] + t)));
    FRUGAL_QUANT_UNROLL(4)
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(msk, x + static_cast<std::size_t>(i) * k + t);
      FRUGAL_QUANT_UNROLL(4)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wf[j], acc[i][j]);
    }
  }
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < 4; ++j) sums[i * 4 + j] = _mm512_reduce_add_ps(acc[i][j]);
}

template <int MR>
FRUGAL_QUANT_TARGET_AVX2 inline void wo8_block_avx2(const float* x, std::size_t k,
                                                    const std::int8_t* const* w, float* sums) noexcept {
  __m256 acc[MR][4];
  FRUGAL_QUANT_UNROLL(2)
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
  std::size_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 wf[4];
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < 4; ++j)
      wf[j] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[j] + t))));
    FRUGAL_QUANT_UNROLL(2)
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + static_cast<std::size_t>(i) * k + t);
      FRUGAL_QUANT_UNROLL(4)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wf[j], acc[i][j]);
    }
  }
  FRUGAL_QUANT_UNROLL(2)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < 4; ++j) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[i][j]);
    float s =
        ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (std::size_t u = t; u < k; ++u)
      s += x[static_cast<std::size_t>(i) * k + u] * static_cast<float>(w[j][u]);
    sums[i * 4 + j] = s;
  }
}
#endif

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
