#pragma once

// Kernels of gemm_ggml (frugal/quant/ggml.hpp): fp32 activations times GGUF's Q4_1 or Q8_0 weights, kept
// in their blocks of 32.
//
// The weights are repacked losslessly into panels of 16 output columns. For panel p and block b
// (elements 32b..32b+31 of each column), the quants sit at ((p * KB + b) * QB) and the fp16 scales at
// ((p * KB + b) * SB), zero for the columns past N:
// - Q8_0, QB = 512: 8 groups of 64 bytes; group g holds q[4g + t] ^ 0x80 (q + 128) of column c at byte
//   c * 4 + t. SB = 16: d of each column.
// - Q4_1, QB = 256: 4 groups of 64 bytes; group g holds the GGUF byte 4g + t of column c at byte c * 4 + t,
//   whose low nibble is element 4g + t and high nibble element 16 + 4g + t. SB = 32: d of the 16 columns,
//   then m.
// One group is the unsigned operand of one AVX-512 vpdpbusd (16 columns x 4 elements) against 4 bytes of
// the activation row broadcast; on 256-bit registers each group is two halves of 8 columns.
//
// vpdpbusd and vpmaddubsw multiply unsigned by signed bytes. The nibbles are unsigned already. Q8_0 feeds
// q + 128 to vpdpbusd, whose sum is then off by exactly 128 * sum(qx): the accumulator starts at
// -128 * sum(qx). vpmaddubsw adds two products into a saturating int16, which (q + 128) * qx would
// overflow, so the paths without VNNI take |q| against qx with q's sign (llama.cpp's trick): a pair is at
// most 2 * 128 * 127 = 32512. Every path thus computes each block's exact integer sum, and the float
// steps after it are the same operations in the same order in every lane: all paths agree bit for bit.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

inline constexpr std::size_t ggml_panel = 16, ggml_block = 32;

inline constexpr std::size_t ggml_panels(std::size_t n) noexcept {
  return n / ggml_panel + (n % ggml_panel != 0);
}
inline constexpr std::size_t ggml_quant_bytes(bool q41) noexcept { return q41 ? 256 : 512; }
inline constexpr std::size_t ggml_scale_count(bool q41) noexcept { return q41 ? 32 : 16; }

// One block of 32 values of an activation row, quantized: d the scale, s = d * sum(q) (Q4_1's min term),
// corr = -128 * sum(q) (the VNNI Q8_0 kernels' start).
struct ggml_xblock {
  float d;
  float s;
  std::int32_t corr;
};

struct ggml_operands {
  const std::uint8_t* wq;   // packed quants
  const std::uint16_t* ws;  // packed fp16 scales
  std::size_t n, kb;        // N, K / 32
  const std::int8_t* xq;    // M x K quantized activations
  const ggml_xblock* xm;    // M x kb
};

inline int ggml_round(float t) noexcept {
#if FRUGAL_QUANT_X86
  return _mm_cvtss_si32(_mm_set_ss(t));  // the rounding mode's nearest, as the SIMD paths' vcvtps2dq
#else
  return static_cast<int>(std::nearbyint(t));
#endif
}

// The scale of a block whose largest magnitude has the bits `amax`: amax / 127, or 0 when that is below
// the smallest normal float (its reciprocal could overflow; such a block is zeros to 2^-126).
inline float ggml_x_scale(std::uint32_t amax) noexcept {
  const float d = std::bit_cast<float>(amax) / 127.0f;
  return d >= std::numeric_limits<float>::min() ? d : 0.0f;
}

// Quantizes rows [0, rows) of x (K = kb * 32 columns); the index of the first non-finite value, or
// SIZE_MAX when all are finite (the rows before the block holding it are quantized).
inline std::size_t ggml_quantize_x_portable(const float* x, std::size_t rows, std::size_t kb, std::int8_t* q,
                                            ggml_xblock* meta) noexcept {
  for (std::size_t blk = 0; blk < rows * kb; ++blk) {
    const float* v = x + blk * ggml_block;
    std::uint32_t amax = 0;
    for (std::size_t j = 0; j < ggml_block; ++j)
      amax = std::max(amax, std::bit_cast<std::uint32_t>(v[j]) & 0x7fffffffu);
    if (amax >= 0x7f800000u) {
      std::size_t j = 0;
      while (std::isfinite(v[j])) ++j;
      return blk * ggml_block + j;
    }
    const float d = ggml_x_scale(amax), id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (std::size_t j = 0; j < ggml_block; ++j) {
      const int qv = ggml_round(v[j] * id);
      q[blk * ggml_block + j] = static_cast<std::int8_t>(qv);
      sum += qv;
    }
    meta[blk] = {d, d * static_cast<float>(sum), -128 * sum};
  }
  return SIZE_MAX;
}

#if FRUGAL_QUANT_X86
// ggml_quantize_x_portable with vectors: the same scalar d and 1 / d, the same products, vcvtps2dq's
// rounding (the rounding mode's, as _mm_cvtss_si32) and an exact integer sum, so the same bits.
FRUGAL_QUANT_TARGET_AVX512 inline std::size_t ggml_quantize_x_avx512(const float* x, std::size_t rows,
                                                                     std::size_t kb, std::int8_t* q,
                                                                     ggml_xblock* meta) noexcept {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  for (std::size_t blk = 0; blk < rows * kb; ++blk) {
    const float* v = x + blk * ggml_block;
    const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
    const std::uint32_t amax =
        _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), magnitude),
                                                 _mm512_and_si512(_mm512_castps_si512(v1), magnitude)));
    if (amax >= 0x7f800000u) return ggml_quantize_x_portable(v, 1, 1, q, meta) + blk * ggml_block;
    const float d = ggml_x_scale(amax), id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv)),
                  q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + blk * ggml_block), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + blk * ggml_block + 16), _mm512_cvtepi32_epi8(q1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    meta[blk] = {d, d * static_cast<float>(sum), -128 * sum};
  }
  return SIZE_MAX;
}

FRUGAL_QUANT_TARGET_AVX2 inline std::size_t ggml_quantize_x_avx2(const float* x, std::size_t rows,
                                                                 std::size_t kb, std::int8_t* q,
                                                                 ggml_xblock* meta) noexcept {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  for (std::size_t blk = 0; blk < rows * kb; ++blk) {
    const float* v = x + blk * ggml_block;
    __m256 f[4];
    __m256i m = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      f[j] = _mm256_loadu_ps(v + 8 * j);
      m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(f[j]), magnitude));
    }
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
    const auto amax = static_cast<std::uint32_t>(_mm_cvtsi128_si32(m4));
    if (amax >= 0x7f800000u) return ggml_quantize_x_portable(v, 1, 1, q, meta) + blk * ggml_block;
    const float d = ggml_x_scale(amax), id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i qi[4];
    for (int j = 0; j < 4; ++j) qi[j] = _mm256_cvtps_epi32(_mm256_mul_ps(f[j], idv));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    const int sum = _mm_cvtsi128_si32(s4);
    // packs works within 128-bit lanes: the permutation puts the 8 groups of 4 back in order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + blk * ggml_block),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    meta[blk] = {d, d * static_cast<float>(sum), -128 * sum};
  }
  return SIZE_MAX;
}
#endif

template <bool Q41>
inline void ggml_portable(const ggml_operands& o, std::size_t m0, std::size_t m1, std::size_t n0,
                          std::size_t n1, float* out) noexcept {
  constexpr std::size_t qb = ggml_quant_bytes(Q41), sb = ggml_scale_count(Q41);
  const std::size_t k = o.kb * ggml_block;
  for (std::size_t i = m0; i < m1; ++i)
    for (std::size_t n = n0; n < n1; ++n) {
      const std::size_t p = n / ggml_panel, c = n % ggml_panel;
      float acc = 0.0f;
      for (std::size_t b = 0; b < o.kb; ++b) {
        const std::uint8_t* wq = o.wq + (p * o.kb + b) * qb + c * 4;
        const std::uint16_t* ws = o.ws + (p * o.kb + b) * sb + c;
        const std::int8_t* xb = o.xq + i * k + b * ggml_block;
        std::int32_t isum = 0;
        if constexpr (Q41) {
          for (std::size_t j = 0; j < 16; ++j) {
            const std::uint8_t byte = wq[j / 4 * 64 + j % 4];
            isum += (byte & 15) * xb[j] + (byte >> 4) * xb[j + 16];
          }
        } else {
          for (std::size_t j = 0; j < 32; ++j)
            isum += static_cast<std::int8_t>(wq[j / 4 * 64 + j % 4] ^ 0x80u) * xb[j];
        }
        const ggml_xblock& xm = o.xm[i * o.kb + b];
        acc = std::fma(static_cast<float>(isum), half_bits_to_float(ws[0]) * xm.d, acc);
        if constexpr (Q41) acc = std::fma(half_bits_to_float(ws[16]), xm.s, acc);
      }
      out[i * o.n + n] = acc;
    }
}

#if FRUGAL_QUANT_X86

// The vector operations of the four SIMD paths. The kernel below is one template over them, defined once
// per target (FRUGAL_GGML_TILE) so that a path without VNNI is never compiled where the compiler could
// fuse its vpmaddwd + vpaddd into a vpdpwssd.
struct ggml_avx512 {
  using iv = __m512i;
  using fv = __m512;
  struct w8 {
    iv abs, sign;
  };
  static constexpr bool corr8 = false;
  FRUGAL_QUANT_TARGET_AVX512 static iv load(const std::uint8_t* p) noexcept { return _mm512_loadu_si512(p); }
  FRUGAL_QUANT_TARGET_AVX512 static iv bcast(const std::int8_t* p) noexcept {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  FRUGAL_QUANT_TARGET_AVX512 static iv set1(std::int32_t v) noexcept { return _mm512_set1_epi32(v); }
  FRUGAL_QUANT_TARGET_AVX512 static iv zero() noexcept { return _mm512_setzero_si512(); }
  FRUGAL_QUANT_TARGET_AVX512 static iv add(iv a, iv b) noexcept { return _mm512_add_epi32(a, b); }
  FRUGAL_QUANT_TARGET_AVX512 static iv low_nibbles(iv v) noexcept {
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
  }
  FRUGAL_QUANT_TARGET_AVX512 static iv high_nibbles(iv v) noexcept {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
  }
  FRUGAL_QUANT_TARGET_AVX512 static iv dot4(iv acc, iv u, iv x) noexcept {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, x), _mm512_set1_epi16(1)));
  }
  FRUGAL_QUANT_TARGET_AVX512 static w8 prep8(iv u) noexcept {
    const iv w = _mm512_xor_si512(u, _mm512_set1_epi8(static_cast<char>(0x80)));
    return {_mm512_abs_epi8(w), w};
  }
  FRUGAL_QUANT_TARGET_AVX512 static iv dot8(iv acc, const w8& w, iv x) noexcept {
    const iv sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w.sign), _mm512_setzero_si512(), x);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w.abs, sx), _mm512_set1_epi16(1)));
  }
  FRUGAL_QUANT_TARGET_AVX512 static fv halves(const std::uint16_t* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  FRUGAL_QUANT_TARGET_AVX512 static fv cvt(iv v) noexcept { return _mm512_cvtepi32_ps(v); }
  FRUGAL_QUANT_TARGET_AVX512 static fv set1f(float v) noexcept { return _mm512_set1_ps(v); }
  FRUGAL_QUANT_TARGET_AVX512 static fv zerof() noexcept { return _mm512_setzero_ps(); }
  FRUGAL_QUANT_TARGET_AVX512 static fv mul(fv a, fv b) noexcept { return _mm512_mul_ps(a, b); }
  FRUGAL_QUANT_TARGET_AVX512 static fv fma(fv a, fv b, fv c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  FRUGAL_QUANT_TARGET_AVX512 static void store(float* p, fv v, std::size_t cols) noexcept {
    if (cols == 16)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << cols) - 1u), v);
  }
};

struct ggml_avx512_vnni : ggml_avx512 {
  using w8 = iv;
  static constexpr bool corr8 = true;
  FRUGAL_QUANT_TARGET_AVX512VNNI static iv dot4(iv acc, iv u, iv x) noexcept {
    return _mm512_dpbusd_epi32(acc, u, x);
  }
  FRUGAL_QUANT_TARGET_AVX512VNNI static w8 prep8(iv u) noexcept { return u; }
  FRUGAL_QUANT_TARGET_AVX512VNNI static iv dot8(iv acc, w8 u, iv x) noexcept {
    return _mm512_dpbusd_epi32(acc, u, x);
  }
};

struct ggml_avx2 {
  using iv = __m256i;
  using fv = __m256;
  struct w8 {
    iv abs, sign;
  };
  static constexpr bool corr8 = false;
  FRUGAL_QUANT_TARGET_AVX2 static iv load(const std::uint8_t* p) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  FRUGAL_QUANT_TARGET_AVX2 static iv bcast(const std::int8_t* p) noexcept {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  FRUGAL_QUANT_TARGET_AVX2 static iv set1(std::int32_t v) noexcept { return _mm256_set1_epi32(v); }
  FRUGAL_QUANT_TARGET_AVX2 static iv zero() noexcept { return _mm256_setzero_si256(); }
  FRUGAL_QUANT_TARGET_AVX2 static iv add(iv a, iv b) noexcept { return _mm256_add_epi32(a, b); }
  FRUGAL_QUANT_TARGET_AVX2 static iv low_nibbles(iv v) noexcept {
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
  }
  FRUGAL_QUANT_TARGET_AVX2 static iv high_nibbles(iv v) noexcept {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
  }
  FRUGAL_QUANT_TARGET_AVX2 static iv dot4(iv acc, iv u, iv x) noexcept {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
  }
  FRUGAL_QUANT_TARGET_AVX2 static w8 prep8(iv u) noexcept {
    const iv w = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_abs_epi8(w), w};
  }
  FRUGAL_QUANT_TARGET_AVX2 static iv dot8(iv acc, const w8& w, iv x) noexcept {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x, w.sign)),
                                                   _mm256_set1_epi16(1)));
  }
  FRUGAL_QUANT_TARGET_AVX2 static fv halves(const std::uint16_t* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  FRUGAL_QUANT_TARGET_AVX2 static fv cvt(iv v) noexcept { return _mm256_cvtepi32_ps(v); }
  FRUGAL_QUANT_TARGET_AVX2 static fv set1f(float v) noexcept { return _mm256_set1_ps(v); }
  FRUGAL_QUANT_TARGET_AVX2 static fv zerof() noexcept { return _mm256_setzero_ps(); }
  FRUGAL_QUANT_TARGET_AVX2 static fv mul(fv a, fv b) noexcept { return _mm256_mul_ps(a, b); }
  FRUGAL_QUANT_TARGET_AVX2 static fv fma(fv a, fv b, fv c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  FRUGAL_QUANT_TARGET_AVX2 static void store(float* p, fv v, std::size_t cols) noexcept {
    if (cols == 8) return _mm256_storeu_ps(p, v);
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    std::memcpy(p, t, cols * sizeof(float));
  }
};

struct ggml_avx_vnni : ggml_avx2 {
  using w8 = iv;
  static constexpr bool corr8 = true;
  FRUGAL_QUANT_TARGET_AVXVNNI static iv dot4(iv acc, iv u, iv x) noexcept {
    return _mm256_dpbusd_avx_epi32(acc, u, x);
  }
  FRUGAL_QUANT_TARGET_AVXVNNI static w8 prep8(iv u) noexcept { return u; }
  FRUGAL_QUANT_TARGET_AVXVNNI static iv dot8(iv acc, w8 u, iv x) noexcept {
    return _mm256_dpbusd_avx_epi32(acc, u, x);
  }
};

// MR rows from i0 times the V-wide slice of panel p that starts at column `sub` * lanes (0 for 512-bit
// vectors, 0 or 8 for 256-bit ones); `cols` of its columns are stored at out (row stride o.n).
#  define FRUGAL_GGML_TILE(NAME, TARGET)                                                            \
    template <class V, bool Q41, int MR>                                                            \
    TARGET inline void NAME(const ggml_operands& o, std::size_t i0, std::size_t p, std::size_t sub, \
                            float* out, std::size_t cols) noexcept {                                \
      using iv = typename V::iv;                                                                    \
      using fv = typename V::fv;                                                                    \
      constexpr std::size_t qb = ggml_quant_bytes(Q41), sb = ggml_scale_count(Q41);                 \
      constexpr std::size_t lanes = sizeof(fv) / sizeof(float);                                     \
      const std::size_t k = o.kb * ggml_block;                                                      \
      const std::uint8_t* wq = o.wq + p * o.kb * qb + sub * lanes * 4;                              \
      const std::uint16_t* ws = o.ws + p * o.kb * sb + sub * lanes;                                 \
      const std::int8_t* xq = o.xq + i0 * k;                                                        \
      const ggml_xblock* xm = o.xm + i0 * o.kb;                                                     \
      fv acc[MR];                                                                                   \
      FRUGAL_QUANT_UNROLL(8)                                                                        \
      for (int i = 0; i < MR; ++i) acc[i] = V::zerof();                                             \
      for (std::size_t b = 0; b < o.kb; ++b, wq += qb, ws += sb) {                                  \
        const fv dw = V::halves(ws);                                                                \
        if constexpr (Q41) {                                                                        \
          iv lo[4], hi[4];                                                                          \
          FRUGAL_QUANT_UNROLL(4)                                                                    \
          for (int g = 0; g < 4; ++g) {                                                             \
            const iv raw = V::load(wq + g * 64);                                                    \
            lo[g] = V::low_nibbles(raw);                                                            \
            hi[g] = V::high_nibbles(raw);                                                           \
          }                                                                                         \
          const fv mw = V::halves(ws + 16);                                                         \
          FRUGAL_QUANT_UNROLL(8)                                                                    \
          for (int i = 0; i < MR; ++i) {                                                            \
            const std::int8_t* xb = xq + i * k + b * ggml_block;                                    \
            iv s0 = V::dot4(V::zero(), lo[0], V::bcast(xb)),                                        \
               s1 = V::dot4(V::zero(), hi[0], V::bcast(xb + 16));                                   \
            FRUGAL_QUANT_UNROLL(3)                                                                  \
            for (int g = 1; g < 4; ++g) {                                                           \
              s0 = V::dot4(s0, lo[g], V::bcast(xb + 4 * g));                                        \
              s1 = V::dot4(s1, hi[g], V::bcast(xb + 16 + 4 * g));                                   \
            }                                                                                       \
            const ggml_xblock& m = xm[i * o.kb + b];                                                \
            acc[i] = V::fma(V::cvt(V::add(s0, s1)), V::mul(dw, V::set1f(m.d)), acc[i]);             \
            acc[i] = V::fma(mw, V::set1f(m.s), acc[i]);                                             \
          }                                                                                         \
        } else {                                                                                    \
          typename V::w8 w[8];                                                                      \
          FRUGAL_QUANT_UNROLL(8)                                                                    \
          for (int g = 0; g < 8; ++g) w[g] = V::prep8(V::load(wq + g * 64));                        \
          FRUGAL_QUANT_UNROLL(8)                                                                    \
          for (int i = 0; i < MR; ++i) {                                                            \
            const std::int8_t* xb = xq + i * k + b * ggml_block;                                    \
            const ggml_xblock& m = xm[i * o.kb + b];                                                \
            iv s0 = V::corr8 ? V::set1(m.corr) : V::zero(), s1 = V::zero();                         \
            FRUGAL_QUANT_UNROLL(4)                                                                  \
            for (int g = 0; g < 8; g += 2) {                                                        \
              s0 = V::dot8(s0, w[g], V::bcast(xb + 4 * g));                                         \
              s1 = V::dot8(s1, w[g + 1], V::bcast(xb + 4 * g + 4));                                 \
            }                                                                                       \
            acc[i] = V::fma(V::cvt(V::add(s0, s1)), V::mul(dw, V::set1f(m.d)), acc[i]);             \
          }                                                                                         \
        }                                                                                           \
      }                                                                                             \
      FRUGAL_QUANT_UNROLL(8)                                                                        \
      for (int i = 0; i < MR; ++i) V::store(out + i * o.n, acc[i], cols);                           \
    }

FRUGAL_GGML_TILE(ggml_tile_avx2, FRUGAL_QUANT_TARGET_AVX2)
FRUGAL_GGML_TILE(ggml_tile_avx_vnni, FRUGAL_QUANT_TARGET_AVXVNNI)
FRUGAL_GGML_TILE(ggml_tile_avx512, FRUGAL_QUANT_TARGET_AVX512)
FRUGAL_GGML_TILE(ggml_tile_avx512_vnni, FRUGAL_QUANT_TARGET_AVX512VNNI)
#  undef FRUGAL_GGML_TILE

// Rows [m0, m1) times columns [n0, n1) (n0 on a panel), panel by panel so that a panel's weights stay in
// L1 while every row passes them: first the rows `head` takes (head(p, m0, m1, out) returns where it
// stopped), then MR rows at a time and the remainder in tiles of 4, 2 and 1.
template <class V, bool Q41, int MR, class Tile, class Head>
inline void ggml_columns(const ggml_operands& o, std::size_t m0, std::size_t m1, std::size_t n0,
                         std::size_t n1, float* out, Tile tile, Head head) noexcept {
  constexpr std::size_t lanes = sizeof(typename V::fv) / sizeof(float);
  for (std::size_t p = n0 / ggml_panel; p * ggml_panel < n1; ++p)
    for (std::size_t sub = 0; sub * lanes < ggml_panel && p * ggml_panel + sub * lanes < n1; ++sub) {
      const std::size_t c0 = p * ggml_panel + sub * lanes, cols = std::min(lanes, n1 - c0);
      std::size_t i = head(p, m0, m1, out);
      for (; i + MR <= m1; i += MR)
        tile(std::integral_constant<int, MR>{}, i, p, sub, out + i * o.n + c0, cols);
      if (MR > 4 && i + 4 <= m1) {
        tile(std::integral_constant<int, 4>{}, i, p, sub, out + i * o.n + c0, cols);
        i += 4;
      }
      if (i + 2 <= m1) {
        tile(std::integral_constant<int, 2>{}, i, p, sub, out + i * o.n + c0, cols);
        i += 2;
      }
      if (i < m1) tile(std::integral_constant<int, 1>{}, i, p, sub, out + i * o.n + c0, cols);
    }
}

// AMX: TDPBSUD adds a 16-row tile of signed bytes (16 rows of x, one block of 32) times an 8 x 64-byte tile
// of unsigned ones (one block of a panel: row r holds elements 4r..4r+3 of the 16 columns, the layout of
// the packed groups) into a 16 x 16 int32 tile: the 16 x 16 exact block sums at once, which the AVX-512
// epilogue then scales as every path does. Q8_0's panels are such tiles already; Q4_1's are unpacked per
// panel into ggml_amx_panel (low nibbles to rows 0..3, high ones to rows 4..7). Tiles 0-1 take two blocks'
// sums, 2-3 their rows of x, 4-5 their panel blocks.
inline constexpr std::size_t ggml_amx_rows = 16, ggml_amx_block_bytes = 512;

struct alignas(64) ggml_amx_config {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

FRUGAL_QUANT_TARGET_AMX inline void ggml_amx_start() noexcept {
  ggml_amx_config cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.rows[t] = t < 4 ? 16 : 8;
    cfg.colsb[t] = t == 2 || t == 3 ? 32 : 64;
  }
  // GCC 12 does not see ldtilecfg's read of the rows and colsb fields, and dropped their stores as dead.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

FRUGAL_QUANT_TARGET_AMX inline void ggml_amx_stop() noexcept { _tile_release(); }

FRUGAL_QUANT_TARGET_AVX512 inline void ggml_amx_unpack_q41(const std::uint8_t* wq, std::size_t kb,
                                                           std::uint8_t* out) noexcept {
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (std::size_t b = 0; b < kb; ++b)
    for (int g = 0; g < 4; ++g) {
      const __m512i raw = _mm512_loadu_si512(wq + b * 256 + g * 64);
      _mm512_store_si512(out + b * 512 + g * 64, _mm512_and_si512(raw, low));
      _mm512_store_si512(out + b * 512 + (4 + g) * 64, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low));
    }
}

template <bool Q41>
FRUGAL_QUANT_TARGET_AVX512 inline void ggml_amx_epilogue(__m512 (&acc)[16], const std::int32_t* c,
                                                         const std::uint16_t* ws, const ggml_xblock* xm,
                                                         std::size_t kb) noexcept {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws)));
  const __m512 mw = Q41 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + 16))) : dw;
  FRUGAL_QUANT_UNROLL(16)
  for (int i = 0; i < 16; ++i) {
    const ggml_xblock& m = xm[static_cast<std::size_t>(i) * kb];
    __m512i s = _mm512_load_si512(c + i * 16);
    if constexpr (!Q41) s = _mm512_add_epi32(s, _mm512_set1_epi32(m.corr));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(m.d)), acc[i]);
    if constexpr (Q41) acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(m.s), acc[i]);
  }
}

// Rows i0..i0 + 15 times panel p, whose blocks of 512 bytes are at wb.
template <bool Q41>
FRUGAL_QUANT_TARGET_AMX inline void ggml_tile_amx(const ggml_operands& o, std::size_t i0, std::size_t p,
                                                  const std::uint8_t* wb, float* out,
                                                  std::size_t cols) noexcept {
  constexpr std::size_t sb = ggml_scale_count(Q41);
  const std::size_t k = o.kb * ggml_block;
  const std::int8_t* xq = o.xq + i0 * k;
  const ggml_xblock* xm = o.xm + i0 * o.kb;
  const std::uint16_t* ws = o.ws + p * o.kb * sb;
  alignas(64) std::int32_t c[2][256];
  __m512 acc[16];
  FRUGAL_QUANT_UNROLL(16)
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const auto stride = static_cast<long>(k);
  std::size_t b = 0;
  for (; b + 2 <= o.kb; b += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, xq + b * ggml_block, stride);
    _tile_loadd(3, xq + b * ggml_block + ggml_block, stride);
    _tile_loadd(4, wb + b * ggml_amx_block_bytes, 64);
    _tile_loadd(5, wb + (b + 1) * ggml_amx_block_bytes, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 5);
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    ggml_amx_epilogue<Q41>(acc, c[0], ws + b * sb, xm + b, o.kb);
    ggml_amx_epilogue<Q41>(acc, c[1], ws + (b + 1) * sb, xm + b + 1, o.kb);
  }
  if (b < o.kb) {
    _tile_zero(0);
    _tile_loadd(2, xq + b * ggml_block, stride);
    _tile_loadd(4, wb + b * ggml_amx_block_bytes, 64);
    _tile_dpbsud(0, 2, 4);
    _tile_stored(0, c[0], 64);
    ggml_amx_epilogue<Q41>(acc, c[0], ws + b * sb, xm + b, o.kb);
  }
  const auto mask = static_cast<__mmask16>((1u << cols) - 1u);
  FRUGAL_QUANT_UNROLL(16)
  for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + static_cast<std::size_t>(i) * o.n, mask, acc[i]);
}

#endif

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
