#pragma once

// Int8 x int8 -> int32 GEMM kernels: C[m][n] = sum_k A[m][k] * B[n][k], A M x K, B N x K, both
// row-major. Every path computes the exact integer sum, so all paths agree bit for bit.
//
// The SIMD paths read B re-packed into panels of 16 output channels: for panel p and k4 = k / 4,
// the 64 bytes at ((p * K4 + k4) * 64) hold B[16p + j][4 k4 + t] at j * 4 + t, zero-padded in N and K.
// One such row of 64 bytes is exactly the B operand of one AVX-512 vpdpbusd.
//
// vpdpbusd multiplies unsigned by signed bytes, so the VNNI paths feed A + 128 (a ^ 0x80) and
// subtract 128 * colsum(B[n]) at the end; that is exact while K * 255 * 128 < 2^31 (K <= 65536).
//
// Plain AVX2 has two kernels, both exact. Activations that use the full int8 range are widened to int16
// (vpmaddwd). Activations in [-64, 63] (quantize_rows with reduce_range) take vpmaddubsw, which adds two
// unsigned-by-signed byte products into an int16 and saturates: fed as A + 64 in [0, 127] against weights
// in [-128, 127], a pair lies in [-32512, 32258], so it never saturates. That is the "reduce range" of
// FBGEMM and onnxruntime; oneDNN's AVX2 int8 GEMM feeds the full A + 128 instead and does saturate.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/aligned.hpp"
#include "frugal/quant/detail/cpu.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

inline constexpr std::size_t panel_width = 16;
inline constexpr std::size_t max_gemm_k = 65536;

inline std::size_t round_up(std::size_t x, std::size_t m) noexcept { return (x + m - 1) / m * m; }

// The packers below copy M rows of K int8 activations into rows of lda >= K elements for the kernels,
// zeroing each row's padding (the panels of B are zero there too). Local __restrict pointers let the
// compiler vectorise the copies; indexing through the callers' vectors reloaded both pointers per byte.

// A + 128 (a ^ 0x80) for vpdpbusd.
inline void pack_xor80(const std::int8_t* a, std::size_t m, std::size_t k, std::uint8_t* out,
                       std::size_t lda) noexcept {
  for (std::size_t i = 0; i < m; ++i) {
    const std::int8_t* __restrict src = a + i * k;
    std::uint8_t* __restrict dst = out + i * lda;
    for (std::size_t t = 0; t < k; ++t) dst[t] = static_cast<std::uint8_t>(src[t] ^ -128);
    std::memset(dst + k, 0, lda - k);
  }
}

// A widened to int16 for vpmaddwd.
inline void pack_s16(const std::int8_t* a, std::size_t m, std::size_t k, std::int16_t* out,
                     std::size_t lda) noexcept {
  for (std::size_t i = 0; i < m; ++i) {
    const std::int8_t* __restrict src = a + i * k;
    std::int16_t* __restrict dst = out + i * lda;
    for (std::size_t t = 0; t < k; ++t) dst[t] = src[t];
    for (std::size_t t = k; t < lda; ++t) dst[t] = 0;
  }
}

// A + 64 for vpmaddubsw; says whether every value was in [-64, 63], i.e. whether the vpmaddubsw kernel may
// take A. It stops at the first row that is not: full-range activations (absmax / 127 puts +-127 in every
// row) then cost one row of packing before the int16 path, not a whole wasted pass.
inline bool pack_u7(const std::int8_t* a, std::size_t m, std::size_t k, std::uint8_t* out,
                    std::size_t lda) noexcept {
  for (std::size_t i = 0; i < m; ++i) {
    const std::int8_t* __restrict src = a + i * k;
    std::uint8_t* __restrict dst = out + i * lda;
    std::uint8_t high = 0;  // bit 7 of a + 64 is set exactly when a is outside [-64, 63]
    for (std::size_t t = 0; t < k; ++t) {
      const auto u = static_cast<std::uint8_t>(src[t] + 64);
      high |= u;
      dst[t] = u;
    }
    if (high & 0x80u) return false;
    std::memset(dst + k, 0, lda - k);
  }
  return true;
}

inline aligned_bytes pack_b_panels(const std::int8_t* b, std::size_t n, std::size_t k) {
  const std::size_t np = round_up(n, panel_width) / panel_width, k4 = round_up(k, 4) / 4;
  aligned_bytes out(np * k4 * 64, 0);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t p = r / panel_width, j = r % panel_width;
    for (std::size_t c = 0; c < k; ++c) out[(p * k4 + c / 4) * 64 + j * 4 + c % 4] = b[r * k + c];
  }
  return out;
}

// Rows of A (of lda bytes) per block, so that a block stays in L1 or L2 while every panel of B passes it:
// about 24 KiB, but never under 64 rows (fewer would stream a large B from L3 once per few rows), a multiple
// of the kernel's mr rows. Without the blocking all of A streamed from L2 or L3 once per panel (MiniLM's M is
// ~1,800 tokens): 5-12% slower at 64 x 4096^2 and 1024^3 (benchmarks/RESULTS.md, int8 on AVX2).
inline std::size_t a_block_rows(std::size_t lda, std::size_t mr) noexcept {
  const std::size_t rows =
      std::clamp<std::size_t>(24576 / std::max<std::size_t>(lda, 1), 64, 256);  // K = 0: lda 0
  return rows / mr * mr;
}

// The int32 tile a kernel hands to the epilogue: rows m0.., columns n0.. (cnt valid), row stride ldt.
struct acc_tile {
  std::size_t m0, rows, n0, cols;
  const std::int32_t* data;
  std::size_t ldt;
};

inline void gemm_s8_portable(const std::int8_t* a, std::size_t m, std::size_t k, const std::int8_t* b,
                             std::size_t n, std::vector<std::int32_t>& row, auto&& epilogue) {
  row.resize(n);
  for (std::size_t i = 0; i < m; ++i) {
    const std::int8_t* ai = a + i * k;
    for (std::size_t j = 0; j < n; ++j) {
      const std::int8_t* bj = b + j * k;
      std::int32_t s = 0;
      for (std::size_t t = 0; t < k; ++t) s += static_cast<std::int32_t>(ai[t]) * bj[t];
      row[j] = s;
    }
    epilogue(acc_tile{i, 1, 0, n, row.data(), n});
  }
}

// The AMX kernel's shape (see gemm_s8_amx below).
inline constexpr std::size_t amx_k_bytes = 64, amx_rows = 32;
// Rows of A per block, a multiple of amx_rows: each pair of panels of B passes a block once. 128, 256 and
// 512 rows, and a_block_rows' 24 KiB, gave the same times within 5% on MiniLM's shapes (M = 640, K = 384
// and 1536) and at 1024^3, measured while the buffers were still unaligned (before the cache-line
// allocator); not re-measured since.
inline constexpr std::size_t amx_block_rows = 512;

#if FRUGAL_QUANT_X86
// Named accumulators, not an array: GCC 12 shuffles an unrolled array of them between registers on
// every iteration, which halves the throughput of this loop.
#  define FRUGAL_QUANT_VNNI_ROW(i)                                          \
    if constexpr (MR > i) {                                                 \
      std::int32_t a4;                                                      \
      std::memcpy(&a4, a + static_cast<std::size_t>(i) * lda + q * 4, 4);   \
      const __m512i av = _mm512_set1_epi32(a4);                             \
      c##i##0 = _mm512_dpbusd_epi32(c##i##0, av, b0);                       \
      if constexpr (NP > 1) c##i##1 = _mm512_dpbusd_epi32(c##i##1, av, b1); \
    }
#  define FRUGAL_QUANT_VNNI_STORE(i)                                                                     \
    if constexpr (MR > i) {                                                                              \
      _mm512_storeu_si512(c + i * NP * 16, _mm512_sub_epi32(c##i##0, corr0));                            \
      if constexpr (NP > 1) _mm512_storeu_si512(c + i * NP * 16 + 16, _mm512_sub_epi32(c##i##1, corr1)); \
    }

template <int MR, int NP>
FRUGAL_QUANT_TARGET_AVX512VNNI inline void micro_avx512_vnni(const std::uint8_t* a, std::size_t lda,
                                                             const std::int8_t* b, std::size_t k4,
                                                             const std::int32_t* corr,
                                                             std::int32_t* c) noexcept {
  const __m512i z = _mm512_setzero_si512();
  __m512i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
  __m512i c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
  for (std::size_t q = 0; q < k4; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b + q * 64);
    const __m512i b1 = NP > 1 ? _mm512_loadu_si512(b + (k4 + q) * 64) : b0;
    FRUGAL_QUANT_VNNI_ROW(0)
    FRUGAL_QUANT_VNNI_ROW(1)
    FRUGAL_QUANT_VNNI_ROW(2)
    FRUGAL_QUANT_VNNI_ROW(3)
    FRUGAL_QUANT_VNNI_ROW(4)
    FRUGAL_QUANT_VNNI_ROW(5)
    FRUGAL_QUANT_VNNI_ROW(6)
    FRUGAL_QUANT_VNNI_ROW(7)
  }
  const __m512i corr0 = _mm512_loadu_si512(corr);
  const __m512i corr1 = NP > 1 ? _mm512_loadu_si512(corr + 16) : corr0;
  FRUGAL_QUANT_VNNI_STORE(0)
  FRUGAL_QUANT_VNNI_STORE(1)
  FRUGAL_QUANT_VNNI_STORE(2)
  FRUGAL_QUANT_VNNI_STORE(3)
  FRUGAL_QUANT_VNNI_STORE(4)
  FRUGAL_QUANT_VNNI_STORE(5)
  FRUGAL_QUANT_VNNI_STORE(6)
  FRUGAL_QUANT_VNNI_STORE(7)
  (void)corr1;
}
#  undef FRUGAL_QUANT_VNNI_ROW
#  undef FRUGAL_QUANT_VNNI_STORE

template <int NP>
FRUGAL_QUANT_TARGET_AVX512VNNI inline void micro_avx512_vnni_rows(int mr, const std::uint8_t* a,
                                                                  std::size_t lda, const std::int8_t* b,
                                                                  std::size_t k4, const std::int32_t* corr,
                                                                  std::int32_t* c) noexcept {
  switch (mr) {
    case 8:
      return micro_avx512_vnni<8, NP>(a, lda, b, k4, corr, c);
    case 7:
      return micro_avx512_vnni<7, NP>(a, lda, b, k4, corr, c);
    case 6:
      return micro_avx512_vnni<6, NP>(a, lda, b, k4, corr, c);
    case 5:
      return micro_avx512_vnni<5, NP>(a, lda, b, k4, corr, c);
    case 4:
      return micro_avx512_vnni<4, NP>(a, lda, b, k4, corr, c);
    case 3:
      return micro_avx512_vnni<3, NP>(a, lda, b, k4, corr, c);
    case 2:
      return micro_avx512_vnni<2, NP>(a, lda, b, k4, corr, c);
    default:
      return micro_avx512_vnni<1, NP>(a, lda, b, k4, corr, c);
  }
}

// Two panels (32 columns) by 8 rows: 16 accumulators, and 32 KiB of B per panel pair at K = 1024,
// which stays in L1 while every row block of A streams past it.
inline void gemm_s8_avx512_vnni(const std::uint8_t* a, std::size_t m, std::size_t k4, const std::int8_t* bp,
                                std::size_t n, const std::int32_t* corr, auto&& epilogue) {
  constexpr std::size_t mr = 8;
  const std::size_t panels = round_up(n, panel_width) / panel_width, lda = k4 * 4;
  alignas(64) std::int32_t tile[mr * 32];
  const std::size_t mc = a_block_rows(lda, mr);
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t i1 = std::min(m, i0 + mc);
    for (std::size_t p = 0; p < panels; p += 2) {
      const bool two = p + 1 < panels;
      const std::size_t n0 = p * panel_width, ncols = std::min<std::size_t>(two ? 32 : 16, n - n0);
      const std::int8_t* b = bp + p * k4 * 64;
      for (std::size_t i = i0; i < i1; i += mr) {
        const int rows = static_cast<int>(std::min(mr, i1 - i));
        if (two)
          micro_avx512_vnni_rows<2>(rows, a + i * lda, lda, b, k4, corr + n0, tile);
        else
          micro_avx512_vnni_rows<1>(rows, a + i * lda, lda, b, k4, corr + n0, tile);
        epilogue(acc_tile{i, static_cast<std::size_t>(rows), n0, ncols, tile,
                          two ? std::size_t{32} : std::size_t{16}});
      }
    }
  }
}

// AMX: eight tile registers of up to 16 rows x 64 bytes, and TDPBSSD, which adds a 16 x 64 signed-byte
// tile times a 64 x 16 signed-byte tile (held as 16 rows of 16 channels x 4 bytes: exactly 16 rows of
// the panels above) into a 16 x 16 int32 tile, with no saturation and no offset: A is used as it is.
// Tiles 0-3 are a 32 x 32 block of C, 4-5 two row tiles of A, 6-7 two panels of B. The configuration
// is fixed at 16 rows x 64 bytes, so A is packed with K rounded up to 64 and rows to a multiple of 32,
// zero-padded, and a K that is not a multiple of 64 takes its last 16 panel rows from a zero-padded copy.

struct alignas(64) amx_config {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// A copied into rows of lda = K rounded up to 64 bytes, zero-padded; rows m .. m_padded - 1 are zero.
inline void pack_amx(const std::int8_t* a, std::size_t m, std::size_t m_padded, std::size_t k,
                     std::int8_t* out, std::size_t lda) noexcept {
  if (lda == 0) return;  // K = 0: nothing to copy, and A's data may be null
  for (std::size_t i = 0; i < m; ++i) {
    std::memcpy(out + i * lda, a + i * k, k);
    std::memset(out + i * lda + k, 0, lda - k);
  }
  std::memset(out + m * lda, 0, (m_padded - m) * lda);
}

// C for rows [0, m) of packed A (lda = K rounded up to 64; rows readable up to m rounded up to 32) and
// panels of bp for n channels. `tails` holds, when k4 % 16 != 0, each panel's last k4 % 16 rows in a
// zeroed block of 16 x 64 bytes.
FRUGAL_QUANT_TARGET_AMX inline void gemm_s8_amx(const std::int8_t* a, std::size_t m, std::size_t lda,
                                                std::size_t k4, const std::int8_t* bp, std::size_t n,
                                                const std::int8_t* tails, auto&& epilogue) {
  const std::size_t panels = round_up(n, panel_width) / panel_width;
  const std::size_t chunks = lda / amx_k_bytes, full = k4 / 16;  // full: chunks read straight from bp
  amx_config cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) std::int32_t tile[amx_rows * 32];
  const std::size_t mc = amx_block_rows;
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t i1 = std::min(m, i0 + mc);
    for (std::size_t p = 0; p < panels; p += 2) {
      const std::size_t p1 = std::min(p + 1, panels - 1);  // an odd last panel is computed twice
      const std::size_t n0 = p * panel_width, ncols = std::min<std::size_t>(p1 > p ? 32 : 16, n - n0);
      const std::int8_t* b0 = bp + p * k4 * 64;
      const std::int8_t* b1 = bp + p1 * k4 * 64;
      for (std::size_t i = i0; i < i1; i += amx_rows) {
        const std::int8_t* ai = a + i * lda;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (std::size_t c = 0; c < chunks; ++c) {
          _tile_loadd(4, ai + c * amx_k_bytes, static_cast<long>(lda));
          _tile_loadd(5, ai + 16 * lda + c * amx_k_bytes, static_cast<long>(lda));
          if (c < full) {
            _tile_loadd(6, b0 + c * 16 * 64, 64);
            _tile_loadd(7, b1 + c * 16 * 64, 64);
          } else {
            _tile_loadd(6, tails + p * 1024, 64);
            _tile_loadd(7, tails + p1 * 1024, 64);
          }
          _tile_dpbssd(0, 4, 6);
          _tile_dpbssd(1, 4, 7);
          _tile_dpbssd(2, 5, 6);
          _tile_dpbssd(3, 5, 7);
        }
        _tile_stored(0, tile, 128);
        _tile_stored(1, tile + 16, 128);
        _tile_stored(2, tile + 16 * 32, 128);
        _tile_stored(3, tile + 16 * 32 + 16, 128);
        epilogue(acc_tile{i, std::min(amx_rows, i1 - i), n0, ncols, tile, 32});
      }
    }
  }
  _tile_release();
}

// The last k4 % 16 rows of each panel, each in a zeroed 16 x 64-byte block (empty when k4 % 16 == 0).
inline aligned_bytes amx_tails(const std::int8_t* bp, std::size_t panels, std::size_t k4) {
  const std::size_t rest = k4 % 16;
  if (rest == 0) return {};
  aligned_bytes t(panels * 1024, 0);
  for (std::size_t p = 0; p < panels; ++p)
    std::memcpy(&t[p * 1024], bp + (p * k4 + k4 - rest) * 64, rest * 64);
  return t;
}

template <int MR>
FRUGAL_QUANT_TARGET_AVXVNNI inline void micro_avx_vnni(const std::uint8_t* a, std::size_t lda,
                                                       const std::int8_t* b, std::size_t k4,
                                                       const std::int32_t* corr, std::int32_t* c) noexcept {
  __m256i acc[MR][2];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  for (std::size_t q = 0; q < k4; ++q) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 64));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 64 + 32));
    FRUGAL_QUANT_UNROLL(4)
    for (int i = 0; i < MR; ++i) {
      std::int32_t a4;
      std::memcpy(&a4, a + static_cast<std::size_t>(i) * lda + q * 4, 4);
      const __m256i av = _mm256_set1_epi32(a4);
      acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], av, b0);
      acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], av, b1);
    }
  }
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + 8));
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * 16), _mm256_sub_epi32(acc[i][0], c0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * 16 + 8), _mm256_sub_epi32(acc[i][1], c1));
  }
}

// A + 64 in [0, 127] against the same panels (see the top of this file): vpmaddubsw, then vpmaddwd by
// ones sums each channel's four products into an int32, which is vpdpbusd in two instructions. The
// correction is 64 * colsum(B[n]), half of packed_corr. It mirrors micro_avx_vnni line for line on purpose:
// each kernel needs its own target attribute, and GCC cannot give two instantiations of one template body
// different targets.
template <int MR>
FRUGAL_QUANT_TARGET_AVX2 inline void micro_avx2_u7(const std::uint8_t* a, std::size_t lda,
                                                   const std::int8_t* b, std::size_t k4,
                                                   const std::int32_t* corr, std::int32_t* c) noexcept {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[MR][2];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  for (std::size_t q = 0; q < k4; ++q) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 64));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 64 + 32));
    FRUGAL_QUANT_UNROLL(4)
    for (int i = 0; i < MR; ++i) {
      std::int32_t a4;
      std::memcpy(&a4, a + static_cast<std::size_t>(i) * lda + q * 4, 4);
      const __m256i av = _mm256_set1_epi32(a4);
      acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones));
      acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones));
    }
  }
  const __m256i c0 = _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr)), 1);
  const __m256i c1 = _mm256_srai_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + 8)), 1);
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * 16), _mm256_sub_epi32(acc[i][0], c0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * 16 + 8), _mm256_sub_epi32(acc[i][1], c1));
  }
}

// Calls f(std::integral_constant<int, rows>{}) for a run-time rows in [1, R], so that a micro-kernel's row
// count is a template argument.
template <int R, class F>
inline void with_rows(std::size_t rows, F&& f) {
  if constexpr (R > 1)
    if (rows != static_cast<std::size_t>(R)) return with_rows<R - 1>(rows, f);
  f(std::integral_constant<int, R>{});
}

// One panel of 16 channels by up to MR rows at a time, for the 256-bit kernels: `micro(rows, a, b, corr,
// tile)` with rows a compile-time constant (std::integral_constant) in [1, MR].
template <int MR>
inline void gemm_s8_panels(const std::uint8_t* a, std::size_t m, std::size_t k4, const std::int8_t* bp,
                           std::size_t n, const std::int32_t* corr, auto&& micro, auto&& epilogue) {
  constexpr auto mr = static_cast<std::size_t>(MR);
  const std::size_t panels = round_up(n, panel_width) / panel_width, lda = k4 * 4;
  alignas(64) std::int32_t tile[mr * 16];
  const std::size_t mc = a_block_rows(lda, mr);  // as in gemm_s8_avx512_vnni
  for (std::size_t i0 = 0; i0 < m; i0 += mc)
    for (std::size_t p = 0; p < panels; ++p) {
      const std::size_t n0 = p * panel_width, ncols = std::min<std::size_t>(16, n - n0);
      const std::int8_t* b = bp + p * k4 * 64;
      const std::size_t i1 = std::min(m, i0 + mc);
      for (std::size_t i = i0; i < i1; i += mr) {
        const std::size_t rows = std::min(mr, i1 - i);
        with_rows<MR>(rows, [&](auto r) { micro(r, a + i * lda, b, corr + n0, tile); });
        epilogue(acc_tile{i, rows, n0, ncols, tile, 16});
      }
    }
}

inline void gemm_s8_avx_vnni(const std::uint8_t* a, std::size_t m, std::size_t k4, const std::int8_t* bp,
                             std::size_t n, const std::int32_t* corr, auto&& epilogue) {
  const std::size_t lda = k4 * 4;
  gemm_s8_panels<4>(
      a, m, k4, bp, n, corr,
      [=](auto rows, const std::uint8_t* ai, const std::int8_t* b, const std::int32_t* cr,
          std::int32_t* tile) { micro_avx_vnni<decltype(rows)::value>(ai, lda, b, k4, cr, tile); },
      epilogue);
}

// Rows per vpmaddubsw micro-kernel. The kernel is bound by the two multiply pipes (vpmaddubsw and vpmaddwd
// share them on Zen 3), not by loads, so fewer rows cost nothing there; what matters is that the
// accumulators, the ones, two B rows and the temporaries stay in the 16 ymm registers. With 4 rows GCC 12
// spilled an accumulator whenever the kernel was compiled out of line, and the store-to-load round trip in
// the loop made it 27% slower (1024^3 on Zen 3: 16.0 against 12.6 ms with 2 rows; RESULTS.md, Zen 3).
inline constexpr int u7_rows = 2;

// `a` holds A + 64, every byte in [0, 127] (pack_u7 checked it).
inline void gemm_u7_avx2(const std::uint8_t* a, std::size_t m, std::size_t k4, const std::int8_t* bp,
                         std::size_t n, const std::int32_t* corr, auto&& epilogue) {
  const std::size_t lda = k4 * 4;
  gemm_s8_panels<u7_rows>(
      a, m, k4, bp, n, corr,
      [=](auto rows, const std::uint8_t* ai, const std::int8_t* b, const std::int32_t* cr,
          std::int32_t* tile) { micro_avx2_u7<decltype(rows)::value>(ai, lda, b, k4, cr, tile); },
      epilogue);
}

// Plain AVX2 has no byte dot product that is exact (vpmaddubsw saturates), so A and B are widened to
// int16 and multiplied with vpmaddwd: each int32 lane gets two products, summed pairwise at the end.
// Each quarter of the panel row is widened, used by every row and dropped before the next, so that only
// one widened B is live: 8 accumulators, the rows' broadcasts and one B stay well inside the 16 ymm
// registers. With all four quarters live (14 registers before any temporary), GCC 12 spilled an
// accumulator wherever the kernel was inlined into a different caller, a store-to-load round trip per
// iteration: MiniLM int8 on Zen 3 fell from 67 to 45 sentences/s with an unrelated change to the caller
// (benchmarks/RESULTS.md, Zen 3).
template <int MR>
FRUGAL_QUANT_TARGET_AVX2 inline void micro_avx2(const std::int16_t* a, std::size_t lda, const std::int8_t* b,
                                                std::size_t k4, std::int32_t* c) noexcept {
  __m256i acc[MR][4];
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_si256();
  for (std::size_t q = 0; q < k4; ++q) {
    __m256i av[MR];
    FRUGAL_QUANT_UNROLL(4)
    for (int i = 0; i < MR; ++i) {
      long long a4;
      std::memcpy(&a4, a + static_cast<std::size_t>(i) * lda + q * 4, 8);
      av[i] = _mm256_set1_epi64x(a4);
    }
    FRUGAL_QUANT_UNROLL(4)
    for (int h = 0; h < 4; ++h) {
      const __m256i bv =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + q * 64 + h * 16)));
      FRUGAL_QUANT_UNROLL(4)
      for (int i = 0; i < MR; ++i) acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(av[i], bv));
    }
  }
  FRUGAL_QUANT_UNROLL(4)
  for (int i = 0; i < MR; ++i) FRUGAL_QUANT_UNROLL(2)
  for (int h = 0; h < 2; ++h) {
    const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][2 * h], acc[i][2 * h + 1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * 16 + h * 8), s);
  }
}

inline void gemm_s8_avx2(const std::int16_t* a, std::size_t m, std::size_t k4, const std::int8_t* bp,
                         std::size_t n, auto&& epilogue) {
  constexpr std::size_t mr = 2;
  const std::size_t panels = round_up(n, panel_width) / panel_width, lda = k4 * 4;
  alignas(64) std::int32_t tile[mr * 16];
  const std::size_t mc = a_block_rows(lda * sizeof(std::int16_t), mr);
  for (std::size_t i0 = 0; i0 < m; i0 += mc)
    for (std::size_t p = 0; p < panels; ++p) {
      const std::size_t n0 = p * panel_width, ncols = std::min<std::size_t>(16, n - n0);
      const std::int8_t* b = bp + p * k4 * 64;
      const std::size_t i1 = std::min(m, i0 + mc);
      for (std::size_t i = i0; i < i1; i += mr) {
        const std::size_t rows = std::min(mr, i1 - i);
        if (rows == 2)
          micro_avx2<2>(a + i * lda, lda, b, k4, tile);
        else
          micro_avx2<1>(a + i * lda, lda, b, k4, tile);
        epilogue(acc_tile{i, rows, n0, ncols, tile, 16});
      }
    }
}
#endif

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
