#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/aligned.hpp"
#include "frugal/quant/cpu.hpp"
#include "frugal/quant/detail/checked.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/gemm_ggml.hpp"
#include "frugal/quant/parallel.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

/// @file
/// @brief GEMMs on GGUF's Q4_1 and Q8_0 weights kept in their blocks (llama.cpp's "native" precision).
///
/// gemm_ggml computes out (M x N) = x (M x K, fp32) times W^T (W: N x K in blocks of 32 along K) as follows,
/// and every SIMD path, every M, every split over threads gives the same bits for a row of x:
/// 1. Each row of x is quantized to int8 in blocks of 32: amax = the largest |x| of the block,
///    dx = amax / 127 (0 when that is below the smallest normal float), qx = x * (1 / dx) rounded to nearest
///    even (the default rounding mode, which every path follows; 0 when dx = 0): qx in [-127, 127]. A NaN or
///    an infinity in x is std::invalid_argument.
/// 2. For each output, blocks are taken in ascending order with acc = 0 and isum = sum qw * qx, exact in
/// int32:
///    - Q8_0 (real = qw * dw): acc = fma(float(isum), dw * dx, acc);
///    - Q4_1 (real = qw * dw + mw, qw in 0..15): acc = fma(float(isum), dw * dx, acc), then
///      acc = fma(mw, dx * float(sum qx), acc),
///    with float products and fma's rounded once (std::fma). The output is acc.
/// llama.cpp's CPU backend quantizes its activations to blocks of 32 the same way (Q8_0 / Q8_1), but keeps dx
/// in fp16 and sums in another order: the error is of the same size, the bits are not llama.cpp's.
///
/// The kernels (detail/gemm_ggml.hpp): portable, AVX2 (vpmaddubsw), AVX-VNNI, AVX-512 (vpmaddubsw),
/// AVX-512 VNNI (vpdpbusd on panels of 16 channels, up to 8 rows of x per pass), and AMX (TDPBSUD on 16 rows
/// of x times one block of a panel, the rest of the rows on AVX-512 VNNI); options.path picks one, automatic
/// the best the CPU has (FRUGAL_MAX_CPU_ISA caps it). The quantized activations stay in a buffer of the
/// calling thread between calls (M * K bytes and 12 bytes per block): a decode step allocates nothing.

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief The GGUF block formats gemm_ggml takes.
enum class ggml_format { q4_1, q8_0 };

/// @brief ggml's name of a format ("Q4_1", "Q8_0").
inline constexpr const char* to_string(ggml_format f) noexcept {
  switch (f) {
    case ggml_format::q4_1:
      return "Q4_1";
    case ggml_format::q8_0:
      return "Q8_0";
  }
  return "?";
}

/// @brief N x K weights in a GGUF block format, repacked losslessly for gemm_ggml's kernels: panels of 16
/// output channels whose blocks interleave the channels 4 elements at a time (detail/gemm_ggml.hpp), the
/// fp16 scales apart. Build with make_ggml_weights.
struct ggml_weights {
  ggml_format format = ggml_format::q8_0;
  std::size_t rows = 0;  ///< N, output channels
  std::size_t cols = 0;  ///< K, a multiple of 32
  aligned_bytes quants;  ///< ceil(N / 16) * K / 32 panel blocks of 512 (Q8_0) or 256 (Q4_1) bytes
  std::vector<std::uint16_t, cache_aligned_allocator<std::uint16_t>> scales;  ///< fp16 bits, 16 or 32 each
  /// @brief Bytes the kernels read: the quants and the scales (padding of the last panel included).
  std::size_t bytes() const noexcept { return quants.size() + scales.size() * sizeof(std::uint16_t); }
};

/// @brief Options of gemm_ggml.
struct ggml_gemm_options {
  simd_path path = simd_path::automatic;  ///< forces a kernel (tests, benchmarks)
  /// Threads to split the GEMM over (along N, or M when it has more blocks); null: the calling thread only.
  /// Any split gives the bits of one thread.
  executor* threads = nullptr;
};

namespace detail {

inline std::size_t ggml_block_bytes(ggml_format f) noexcept { return f == ggml_format::q4_1 ? 20 : 34; }

inline void check_ggml_weights(const ggml_weights& w, const char* who) {
  if (w.format != ggml_format::q4_1 && w.format != ggml_format::q8_0)
    throw std::invalid_argument(std::string(who) + ": weights.format is not Q4_1 or Q8_0");
  if (w.cols % ggml_block != 0)
    throw std::invalid_argument(std::string(who) + ": weights.cols = " + std::to_string(w.cols) +
                                " is not a multiple of 32");
  const bool q41 = w.format == ggml_format::q4_1;
  const std::size_t blocks = checked_mul(ggml_panels(w.rows), w.cols / ggml_block, who, "panel blocks");
  if (w.quants.size() != checked_mul(blocks, ggml_quant_bytes(q41), who, "quant bytes"))
    throw std::invalid_argument(std::string(who) + ": weights.quants has " + std::to_string(w.quants.size()) +
                                " bytes, not the " + std::to_string(blocks * ggml_quant_bytes(q41)) +
                                " of its rows and cols");
  if (w.scales.size() != blocks * ggml_scale_count(q41))
    throw std::invalid_argument(std::string(who) + ": weights.scales has " + std::to_string(w.scales.size()) +
                                " entries, not the " + std::to_string(blocks * ggml_scale_count(q41)) +
                                " of its rows and cols");
}

// Which kernel a path takes.
enum class ggml_level { portable, avx2, avx_vnni, avx512, avx512_vnni, amx };

inline ggml_level resolve_ggml_level(simd_path p, const char* who) {
  require_supported(p, who);
  const cpu_features& f = host_cpu_features();
  switch (p) {
    case simd_path::automatic:
      return f.amx           ? ggml_level::amx
             : f.avx512_vnni ? ggml_level::avx512_vnni
             : f.avx512      ? ggml_level::avx512
             : f.avx_vnni    ? ggml_level::avx_vnni
             : f.avx2        ? ggml_level::avx2
                             : ggml_level::portable;
    case simd_path::portable:
      return ggml_level::portable;
    case simd_path::avx2:
      return ggml_level::avx2;
    case simd_path::avx_vnni:
      return ggml_level::avx_vnni;
    case simd_path::avx512:
      return ggml_level::avx512;
    case simd_path::avx512_vnni:
      return ggml_level::avx512_vnni;
    case simd_path::amx:
      return ggml_level::amx;
  }
  return ggml_level::portable;
}

// The quantized activations, kept per thread between calls: a decode step makes hundreds of small calls.
struct ggml_scratch {
  std::unique_ptr<std::int8_t[], aligned_delete> q;
  std::unique_ptr<ggml_xblock[], aligned_delete> meta;
  std::size_t q_size = 0, meta_size = 0;
  void reserve(std::size_t qn, std::size_t mn) {
    if (qn > q_size) {
      q = aligned_scratch<std::int8_t>(qn);
      q_size = qn;
    }
    if (mn > meta_size) {
      meta = aligned_scratch<ggml_xblock>(mn);
      meta_size = mn;
    }
  }
};

// Quantizes the M rows of x, split over the threads when there are enough of them; the index of the first
// non-finite value or SIZE_MAX.
inline std::size_t ggml_quantize_x(ggml_level lv, executor* threads, const float* x, std::size_t m,
                                   std::size_t kb, std::int8_t* q, ggml_xblock* meta) {
  const auto rows = [&](std::size_t r0, std::size_t r1) {
    const float* xr = x + r0 * kb * ggml_block;
    std::int8_t* qr = q + r0 * kb * ggml_block;
    ggml_xblock* mr = meta + r0 * kb;
    std::size_t bad = SIZE_MAX;
#if FRUGAL_QUANT_X86
    if (lv == ggml_level::avx512 || lv == ggml_level::avx512_vnni || lv == ggml_level::amx)
      bad = ggml_quantize_x_avx512(xr, r1 - r0, kb, qr, mr);
    else if (lv != ggml_level::portable)
      bad = ggml_quantize_x_avx2(xr, r1 - r0, kb, qr, mr);
    else
#endif
      bad = ggml_quantize_x_portable(xr, r1 - r0, kb, qr, mr);
    return bad == SIZE_MAX ? bad : bad + r0 * kb * ggml_block;
  };
  const std::size_t parts = threads ? std::min(threads->concurrency(), m) : 1;
  if (parts <= 1 || m * kb < 1024) return rows(0, m);
  std::vector<std::size_t> bad(parts);
  threads->parallel_for(parts, [&](std::size_t p) { bad[p] = rows(m * p / parts, m * (p + 1) / parts); });
  return *std::min_element(bad.begin(), bad.end());
}

// The AMX path's unpacked Q4_1 panel, per thread.
inline std::uint8_t* ggml_amx_panel(std::size_t kb) {
  thread_local std::unique_ptr<std::uint8_t[], aligned_delete> buf;
  thread_local std::size_t size = 0;
  if (kb * ggml_amx_block_bytes > size) {
    buf = aligned_scratch<std::uint8_t>(kb * ggml_amx_block_bytes);
    size = kb * ggml_amx_block_bytes;
  }
  return buf.get();
}

template <bool Q41>
inline void ggml_run(ggml_level lv, const ggml_operands& o, std::size_t m0, std::size_t m1, std::size_t n0,
                     std::size_t n1, float* out) {
#if FRUGAL_QUANT_X86
  const auto none = [](std::size_t, std::size_t m0_, std::size_t, float*) { return m0_; };
  const auto vnni_tile = [&](auto mr, auto... a) {
    ggml_tile_avx512_vnni<ggml_avx512_vnni, Q41, decltype(mr)::value>(o, a...);
  };
  switch (lv) {
    case ggml_level::amx: {
      if (m1 - m0 < ggml_amx_rows) break;
      std::uint8_t* panel = Q41 ? ggml_amx_panel(o.kb) : nullptr;
      ggml_amx_start();
      ggml_columns<ggml_avx512_vnni, Q41, 8>(
          o, m0, m1, n0, n1, out, vnni_tile, [&](std::size_t p, std::size_t i, std::size_t i1, float* c) {
            const std::uint8_t* wb = o.wq + p * o.kb * ggml_quant_bytes(Q41);
            if (Q41) {
              ggml_amx_unpack_q41(wb, o.kb, panel);
              wb = panel;
            }
            const std::size_t c0 = p * ggml_panel, cols = std::min(ggml_panel, n1 - c0);
            for (; i + ggml_amx_rows <= i1; i += ggml_amx_rows)
              ggml_tile_amx<Q41>(o, i, p, wb, c + i * o.n + c0, cols);
            return i;
          });
      ggml_amx_stop();
      return;
    }
    case ggml_level::avx512_vnni:
      break;
    case ggml_level::avx512:
      return ggml_columns<ggml_avx512, Q41, 8>(
          o, m0, m1, n0, n1, out,
          [&](auto mr, auto... a) { ggml_tile_avx512<ggml_avx512, Q41, decltype(mr)::value>(o, a...); },
          none);
    case ggml_level::avx_vnni:
      return ggml_columns<ggml_avx_vnni, Q41, 4>(
          o, m0, m1, n0, n1, out,
          [&](auto mr, auto... a) { ggml_tile_avx_vnni<ggml_avx_vnni, Q41, decltype(mr)::value>(o, a...); },
          none);
    case ggml_level::avx2:
      return ggml_columns<ggml_avx2, Q41, 4>(
          o, m0, m1, n0, n1, out,
          [&](auto mr, auto... a) { ggml_tile_avx2<ggml_avx2, Q41, decltype(mr)::value>(o, a...); }, none);
    case ggml_level::portable:
      return ggml_portable<Q41>(o, m0, m1, n0, n1, out);
  }
  // AVX-512 VNNI, and AMX's calls of fewer than 16 rows.
  ggml_columns<ggml_avx512_vnni, Q41, 8>(o, m0, m1, n0, n1, out, vnni_tile, none);
#else
  (void)lv;
  ggml_portable<Q41>(o, m0, m1, n0, n1, out);
#endif
}

}  // namespace detail

/// @brief Repacks @p raw, N = @p rows rows of K = @p cols / 32 blocks each in GGUF's byte layout (Q4_1: fp16
/// d, fp16 m, 16 bytes whose low nibble j is element j and high nibble element j + 16, real = q * d + m;
/// Q8_0: fp16 d, 32 int8, real = q * d), into ggml_weights. Rows of several tensors may be concatenated. A
/// size that does not match, K not a multiple of 32, or a scale that is not finite is std::invalid_argument.
inline ggml_weights make_ggml_weights(ggml_format f, std::span<const std::byte> raw, std::size_t rows,
                                      std::size_t cols) {
  constexpr const char* who = "frugal::quant::make_ggml_weights";
  if (f != ggml_format::q4_1 && f != ggml_format::q8_0)
    throw std::invalid_argument(std::string(who) + ": format is not Q4_1 or Q8_0");
  if (cols % detail::ggml_block != 0)
    throw std::invalid_argument(std::string(who) + ": cols = " + std::to_string(cols) +
                                " is not a multiple of the block, 32");
  const bool q41 = f == ggml_format::q4_1;
  const std::size_t kb = cols / detail::ggml_block, bb = detail::ggml_block_bytes(f);
  const std::size_t want =
      detail::checked_mul(detail::checked_mul(rows, kb, who, "rows * blocks"), bb, who, "raw bytes");
  if (raw.size() != want)
    throw std::invalid_argument(std::string(who) + ": raw has " + std::to_string(raw.size()) +
                                " bytes, not the " + std::to_string(want) + " of " + std::to_string(rows) +
                                " rows of " + std::to_string(kb) + " " + to_string(f) + " blocks");
  ggml_weights w;
  w.format = f;
  w.rows = rows;
  w.cols = cols;
  const std::size_t np = detail::ggml_panels(rows);
  const std::size_t qb = detail::ggml_quant_bytes(q41), sb = detail::ggml_scale_count(q41);
  w.quants.assign(detail::checked_mul(np * kb, qb, who, "packed bytes"), 0);
  w.scales.assign(np * kb * sb, 0);
  const auto* src = reinterpret_cast<const std::uint8_t*>(raw.data());
  for (std::size_t n = 0; n < rows; ++n) {
    const std::size_t p = n / detail::ggml_panel, c = n % detail::ggml_panel;
    for (std::size_t b = 0; b < kb; ++b) {
      const std::uint8_t* blk = src + (n * kb + b) * bb;
      std::uint16_t d, m = 0;
      std::memcpy(&d, blk, 2);
      if (q41) std::memcpy(&m, blk + 2, 2);
      if ((d & 0x7c00u) == 0x7c00u || (m & 0x7c00u) == 0x7c00u)
        throw std::invalid_argument(std::string(who) + ": row " + std::to_string(n) + " block " +
                                    std::to_string(b) + " has a scale (" +
                                    ((d & 0x7c00u) == 0x7c00u ? "d" : "m") + ") that is not finite");
      std::uint8_t* dst = reinterpret_cast<std::uint8_t*>(w.quants.data()) + (p * kb + b) * qb + c * 4;
      std::uint16_t* s = w.scales.data() + (p * kb + b) * sb + c;
      s[0] = d;
      if (q41) {
        s[16] = m;
        for (std::size_t j = 0; j < 16; ++j) dst[j / 4 * 64 + j % 4] = blk[4 + j];
      } else {
        for (std::size_t j = 0; j < 32; ++j)
          dst[j / 4 * 64 + j % 4] = static_cast<std::uint8_t>(blk[2 + j] ^ 0x80u);
      }
    }
  }
  return w;
}

/// @brief The N x K floats the weights stand for, bit for bit those of gguf::dequantize on the raw tensor.
inline std::vector<float> dequantize(const ggml_weights& w) {
  constexpr const char* who = "frugal::quant::dequantize";
  detail::check_ggml_weights(w, who);
  const bool q41 = w.format == ggml_format::q4_1;
  const std::size_t kb = w.cols / detail::ggml_block, qb = detail::ggml_quant_bytes(q41),
                    sb = detail::ggml_scale_count(q41);
  std::vector<float> out(detail::checked_mul(w.rows, w.cols, who, "N * K"));
  const auto* quants = reinterpret_cast<const std::uint8_t*>(w.quants.data());
  for (std::size_t n = 0; n < w.rows; ++n) {
    const std::size_t p = n / detail::ggml_panel, c = n % detail::ggml_panel;
    for (std::size_t b = 0; b < kb; ++b) {
      const std::uint8_t* q = quants + (p * kb + b) * qb + c * 4;
      const std::uint16_t* s = w.scales.data() + (p * kb + b) * sb + c;
      float* y = out.data() + n * w.cols + b * detail::ggml_block;
      const float d = detail::half_bits_to_float(s[0]);
      if (q41) {
        const float m = detail::half_bits_to_float(s[16]);
        for (std::size_t j = 0; j < 16; ++j) {
          const std::uint8_t byte = q[j / 4 * 64 + j % 4];
          y[j] = static_cast<float>(byte & 0xF) * d + m;
          y[j + 16] = static_cast<float>(byte >> 4) * d + m;
        }
      } else {
        for (std::size_t j = 0; j < 32; ++j)
          y[j] = static_cast<float>(static_cast<std::int8_t>(q[j / 4 * 64 + j % 4] ^ 0x80u)) * d;
      }
    }
  }
  return out;
}

/// @brief out (M x N, row-major) = x (M x K, row-major) times the weights transposed, as the file's comment
/// defines it. @p out must hold M * N floats.
inline void gemm_ggml(std::span<const float> x, std::size_t m, const ggml_weights& w, std::span<float> out,
                      const ggml_gemm_options& opt = {}) {
  constexpr const char* who = "frugal::quant::gemm_ggml";
  detail::check_ggml_weights(w, who);
  const std::size_t k = w.cols, n = w.rows, kb = k / detail::ggml_block;
  if (x.size() != detail::checked_mul(m, k, who, "M * K"))
    throw std::invalid_argument(std::string(who) + ": x has " + std::to_string(x.size()) +
                                " floats, not M * K = " + std::to_string(m) + " * " + std::to_string(k));
  if (out.size() != detail::checked_mul(m, n, who, "M * N"))
    throw std::invalid_argument(std::string(who) + ": out has " + std::to_string(out.size()) +
                                " floats, not M * N = " + std::to_string(m) + " * " + std::to_string(n));
  const detail::ggml_level lv = detail::resolve_ggml_level(opt.path, who);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  thread_local detail::ggml_scratch scratch;
  scratch.reserve(m * k, m * kb);
  const std::size_t bad =
      detail::ggml_quantize_x(lv, opt.threads, x.data(), m, kb, scratch.q.get(), scratch.meta.get());
  if (bad != SIZE_MAX)
    throw std::invalid_argument(std::string(who) + ": x[" + std::to_string(bad) +
                                "] = " + std::to_string(x[bad]) + " is not finite");
  const detail::ggml_operands o{reinterpret_cast<const std::uint8_t*>(w.quants.data()),
                                w.scales.data(),
                                n,
                                kb,
                                scratch.q.get(),
                                scratch.meta.get()};
  const bool q41 = w.format == ggml_format::q4_1;
  detail::split_gemm(opt.threads, m, n, k, detail::ggml_amx_rows, detail::ggml_panel,
                     [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                       if (q41)
                         detail::ggml_run<true>(lv, o, m0, m1, n0, n1, out.data());
                       else
                         detail::ggml_run<false>(lv, o, m0, m1, n0, n1, out.data());
                     });
}

}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
