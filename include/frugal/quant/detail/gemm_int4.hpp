#pragma once

// W4A16 kernels: C[m][n] = sum_g s[n][g] * sum_{k in g} X[m][k] * (u[n][k] - zp[n][g]), X fp32, u the
// stored nibble (for symmetric weights u = nibble ^ 8 and zp = 8, since (nibble ^ 8) - 8 is the
// two's-complement value). The zero point is taken out of the inner loop:
//   sum_k x * (u - zp) = sum_k x * u - zp * xsum[m][g],
// so the loop only widens nibbles, converts and multiplies, and -zp * xsum seeds lane 0 of the group's
// accumulator. The scale is applied once per group.
//
// X is re-packed once per call (pack_x_int4) so that the nibbles are used where they lie in a register:
// a nibble masked in place is u * 16^p, and the X value it meets is pre-multiplied by 16^-p, which is
// exact for every normal x (a power of two) and saves a shift per vector. Per 32 values of K:
// - AVX-512: 16 bytes are widened to 16 int32 lanes (lane l = byte l); nibble p of lane l is k = 2l + p.
// - AVX2: 16 bytes are widened as 8 int16 words to int32 lanes; nibble p of lane l is k = 4l + p.
//
// Every output element goes through the same operations in the same order whatever the block shape
// (MR rows of X by NR rows of W) and wherever a block starts, so a split of M or N over threads
// gives the same bits as one thread.

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

// Where the block kernels find their operands: row r of W at packed + r * k / 2, its group scales at
// scales + r * k / g, its zero points (null when symmetric) at zps + r * k / g.
struct int4_operands {
  const float* xp;    // X re-packed, M x K
  const float* xsum;  // M x K/g sums of X per group
  std::size_t k, g;
  const std::uint8_t* packed;
  const half* scales;
  const std::uint8_t* zps;
};

// Lays X out for the kernels of `avx512` (or AVX2) and sums every group of each row in order.
inline void pack_x_int4(bool avx512, const float* x, std::size_t m, std::size_t k, std::size_t g, float* xp,
                        float* xsum) noexcept {
  const std::size_t groups = k / g;
  for (std::size_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float* pi = xp + i * k;
    for (std::size_t b = 0; b < k; b += 32)
      for (std::size_t t = 0; t < 32; ++t) {
        // Element t of the block is nibble p of lane l; it goes to the vector of nibble p.
        const std::size_t lanes = avx512 ? 16 : 8, p = avx512 ? t % 2 : t % 4, l = avx512 ? t / 2 : t / 4;
        pi[b + p * lanes + l] = xi[b + t] * (p == 0 ? 1.0f : p == 1 ? 0x1p-4f : p == 2 ? 0x1p-8f : 0x1p-12f);
      }
    for (std::size_t q = 0; q < groups; ++q) {
      float s = 0.0f;
      for (std::size_t t = q * g; t < (q + 1) * g; ++t) s += xi[t];
      xsum[i * groups + q] = s;
    }
  }
}

#if FRUGAL_QUANT_X86
FRUGAL_QUANT_TARGET_AVX2 inline float half_to_float_f16c(half h) noexcept {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.bits)));
}

// sums[i * NR + j] = row m0 + i of C at column n[j], before the bias. Two accumulators per output
// (nibbles 0 and 1 of a lane) keep enough independent FMA chains in flight at M = 1.
template <bool Symmetric, int MR, int NR>
FRUGAL_QUANT_TARGET_AVX512 inline void w4_block_avx512(const int4_operands& o, std::size_t m0,
                                                       const std::size_t* n, float* sums) noexcept {
  const std::size_t k = o.k, g = o.g, groups = k / g;
  const __m512i lo4 = _mm512_set1_epi32(0x0f), hi4 = _mm512_set1_epi32(0xf0), flip = _mm512_set1_epi32(0x88);
  const std::uint8_t* w[NR];
  FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) w[j] = o.packed + n[j] * (k / 2);
  const float* x = o.xp + m0 * k;
  const float* xs = o.xsum + m0 * groups;
  __m512 tot[MR][NR];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) tot[i][j] = _mm512_setzero_ps();
  for (std::size_t q = 0; q < groups; ++q) {
    __m512 a0[MR][NR], a1[MR][NR];
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < NR; ++j) {
      const float zp = Symmetric ? 8.0f : static_cast<float>(o.zps[n[j] * groups + q]);
      FRUGAL_QUANT_UNROLL(4)
      for (int i = 0; i < MR; ++i) {
        a0[i][j] = _mm512_zextps128_ps512(_mm_set_ss(-zp * xs[static_cast<std::size_t>(i) * groups + q]));
        a1[i][j] = _mm512_setzero_ps();
      }
    }
    for (std::size_t t = q * g; t < (q + 1) * g; t += 32) {
      FRUGAL_QUANT_UNROLL(4)
      for (int j = 0; j < NR; ++j) {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[j] + t / 2)));
        if constexpr (Symmetric) v = _mm512_xor_si512(v, flip);
        const __m512 f0 = _mm512_cvtepi32_ps(_mm512_and_si512(v, lo4)),
                     f1 = _mm512_cvtepi32_ps(_mm512_and_si512(v, hi4));
        FRUGAL_QUANT_UNROLL(4)
        for (int i = 0; i < MR; ++i) {
          const float* xi = x + static_cast<std::size_t>(i) * k + t;
          a0[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xi), f0, a0[i][j]);
          a1[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xi + 16), f1, a1[i][j]);
        }
      }
    }
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < NR; ++j) {
      const __m512 s = _mm512_set1_ps(half_to_float_f16c(o.scales[n[j] * groups + q]));
      FRUGAL_QUANT_UNROLL(4)
      for (int i = 0; i < MR; ++i)
        tot[i][j] = _mm512_fmadd_ps(_mm512_add_ps(a0[i][j], a1[i][j]), s, tot[i][j]);
    }
  }
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) sums[i * NR + j] = _mm512_reduce_add_ps(tot[i][j]);
}

FRUGAL_QUANT_TARGET_AVX2 inline float reduce_add_avx2(__m256 v) noexcept {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// As w4_block_avx512, with 8 lanes: nibbles 0 and 2 go to one accumulator, 1 and 3 to the other.
template <bool Symmetric, int MR, int NR>
FRUGAL_QUANT_TARGET_AVX2 inline void w4_block_avx2(const int4_operands& o, std::size_t m0,
                                                   const std::size_t* n, float* sums) noexcept {
  const std::size_t k = o.k, g = o.g, groups = k / g;
  const __m256i m0x = _mm256_set1_epi32(0x000f), m1x = _mm256_set1_epi32(0x00f0),
                m2x = _mm256_set1_epi32(0x0f00), m3x = _mm256_set1_epi32(0xf000),
                flip = _mm256_set1_epi32(0x8888);
  const std::uint8_t* w[NR];
  FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) w[j] = o.packed + n[j] * (k / 2);
  const float* x = o.xp + m0 * k;
  const float* xs = o.xsum + m0 * groups;
  __m256 tot[MR][NR];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) tot[i][j] = _mm256_setzero_ps();
  for (std::size_t q = 0; q < groups; ++q) {
    __m256 a0[MR][NR], a1[MR][NR];
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < NR; ++j) {
      const float zp = Symmetric ? 8.0f : static_cast<float>(o.zps[n[j] * groups + q]);
      FRUGAL_QUANT_UNROLL(4)
      for (int i = 0; i < MR; ++i) {
        a0[i][j] = _mm256_castps128_ps256(_mm_set_ss(-zp * xs[static_cast<std::size_t>(i) * groups + q]));
        a0[i][j] = _mm256_insertf128_ps(a0[i][j], _mm_setzero_ps(), 1);
        a1[i][j] = _mm256_setzero_ps();
      }
    }
    for (std::size_t t = q * g; t < (q + 1) * g; t += 32) {
      FRUGAL_QUANT_UNROLL(4)
      for (int j = 0; j < NR; ++j) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[j] + t / 2)));
        if constexpr (Symmetric) v = _mm256_xor_si256(v, flip);
        const __m256 f0 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m0x)),
                     f1 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m1x)),
                     f2 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m2x)),
                     f3 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m3x));
        FRUGAL_QUANT_UNROLL(4)
        for (int i = 0; i < MR; ++i) {
          const float* xi = x + static_cast<std::size_t>(i) * k + t;
          a0[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi), f0, a0[i][j]);
          a1[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 8), f1, a1[i][j]);
          a0[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 16), f2, a0[i][j]);
          a1[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xi + 24), f3, a1[i][j]);
        }
      }
    }
    FRUGAL_QUANT_UNROLL(4)
    for (int j = 0; j < NR; ++j) {
      const __m256 s = _mm256_set1_ps(half_to_float_f16c(o.scales[n[j] * groups + q]));
      FRUGAL_QUANT_UNROLL(4)
      for (int i = 0; i < MR; ++i)
        tot[i][j] = _mm256_fmadd_ps(_mm256_add_ps(a0[i][j], a1[i][j]), s, tot[i][j]);
    }
  }
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(4)
  for (int j = 0; j < NR; ++j) sums[i * NR + j] = reduce_add_avx2(tot[i][j]);
}

// Rows [m0, m) and columns [n0, n1) of C (row stride n) on the AVX-512 or AVX2 kernels: N in blocks of 4 (the
// last block repeats its last row and drops it), and in each, M in blocks the kernel's registers hold. The
// block of W (4 rows) stays in L1 while every block of X passes it.
template <bool Symmetric>
inline void w4_columns(bool avx512, const int4_operands& o, std::size_t m0, std::size_t m, std::size_t n,
                       std::size_t n0, std::size_t n1, float* out) noexcept {
  float s[8];
  for (std::size_t j = n0; j < n1; j += 4) {
    const std::size_t nj = std::min<std::size_t>(4, n1 - j);
    const std::size_t cols[4] = {j, std::min(j + 1, n1 - 1), std::min(j + 2, n1 - 1),
                                 std::min(j + 3, n1 - 1)};
    for (std::size_t i = m0; i < m;) {
      std::size_t mi = 1;
      if (avx512) {
        mi = m - i >= 2 ? 2 : 1;
        if (mi == 2)
          w4_block_avx512<Symmetric, 2, 4>(o, i, cols, s);
        else
          w4_block_avx512<Symmetric, 1, 4>(o, i, cols, s);
        for (std::size_t a = 0; a < mi; ++a)
          for (std::size_t b = 0; b < nj; ++b) out[(i + a) * n + j + b] = s[a * 4 + b];
      } else if (m - i >= 2) {
        // Two rows of X by two of W: 8 accumulators and 4 totals, within AVX2's 16 registers.
        mi = 2;
        w4_block_avx2<Symmetric, 2, 2>(o, i, cols, s);
        w4_block_avx2<Symmetric, 2, 2>(o, i, cols + 2, s + 4);
        for (std::size_t a = 0; a < 2; ++a)
          for (std::size_t b = 0; b < nj; ++b) out[(i + a) * n + j + b] = s[(b / 2) * 4 + a * 2 + b % 2];
      } else {
        w4_block_avx2<Symmetric, 1, 4>(o, i, cols, s);
        for (std::size_t b = 0; b < nj; ++b) out[i * n + j + b] = s[b];
      }
      i += mi;
    }
  }
}
#endif

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
