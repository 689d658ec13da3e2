#pragma once

// The int8 GEMM's driver behind frugal/quant/gemm.hpp: operand validation, the choice of kernel, the
// fused epilogues (portable, AVX2, AVX-512), and the weight-only GEMM's checks and block walker.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/aligned.hpp"
#include "frugal/quant/convert.hpp"
#include "frugal/quant/detail/checked.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/gemm_int8.hpp"
#include "frugal/quant/detail/vecmath.hpp"
#include "frugal/quant/gemm_types.hpp"
#include "frugal/quant/parallel.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant::detail {

enum class out_kind { s32, f32, f16, bf16 };

struct epilogue_args {
  const float* sa;
  const std::int32_t* za;  // null when symmetric
  const float* sb;
  const std::int32_t* colsum;
  const float* bias;  // null when none
  activation_kind act;
  out_kind kind;
  void* out;
  std::size_t ldo;
};

inline void epilogue_portable(const epilogue_args& e, const acc_tile& t) noexcept {
  for (std::size_t i = 0; i < t.rows; ++i) {
    const std::size_t m = t.m0 + i;
    for (std::size_t j = 0; j < t.cols; ++j) {
      const std::size_t n = t.n0 + j;
      std::int32_t acc = t.data[i * t.ldt + j];
      if (e.kind == out_kind::s32) {
        static_cast<std::int32_t*>(e.out)[m * e.ldo + n] = acc;
        continue;
      }
      if (e.za) acc -= e.za[m] * e.colsum[n];
      float v = static_cast<float>(acc) * e.sa[m] * e.sb[n];
      if (e.bias) v += e.bias[n];
      v = activate(v, e.act);
      if (e.kind == out_kind::f32)
        static_cast<float*>(e.out)[m * e.ldo + n] = v;
      else if (e.kind == out_kind::f16)
        static_cast<std::uint16_t*>(e.out)[m * e.ldo + n] = float_to_half_bits(v);
      else
        static_cast<std::uint16_t*>(e.out)[m * e.ldo + n] = float_to_bf16_bits(v);
    }
  }
}

#if FRUGAL_QUANT_X86
FRUGAL_QUANT_TARGET_AVX512 inline void epilogue_avx512(const epilogue_args& e, const acc_tile& t) noexcept {
  for (std::size_t i = 0; i < t.rows; ++i) {
    const std::size_t m = t.m0 + i;
    const __m512 sa = _mm512_set1_ps(e.sa[m]);
    const __m512i za = _mm512_set1_epi32(e.za ? e.za[m] : 0);
    for (std::size_t j = 0; j < t.cols; j += 16) {
      const std::size_t n = t.n0 + j, left = t.cols - j;
      const __mmask16 msk = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
      __m512i acc = _mm512_maskz_loadu_epi32(msk, t.data + i * t.ldt + j);
      if (e.kind == out_kind::s32) {
        _mm512_mask_storeu_epi32(static_cast<std::int32_t*>(e.out) + m * e.ldo + n, msk, acc);
        continue;
      }
      if (e.za)
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(za, _mm512_maskz_loadu_epi32(msk, e.colsum + n)));
      __m512 v =
          _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), sa), _mm512_maskz_loadu_ps(msk, e.sb + n));
      if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(msk, e.bias + n));
      v = activate_avx512(v, e.act);
      if (e.kind == out_kind::f32) {
        _mm512_mask_storeu_ps(static_cast<float*>(e.out) + m * e.ldo + n, msk, v);
      } else {
        const __m256i h = e.kind == out_kind::f16
                              ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                              : f32x16_to_bf16(v);
        _mm256_mask_storeu_epi16(static_cast<std::uint16_t*>(e.out) + m * e.ldo + n, msk, h);
      }
    }
  }
}

FRUGAL_QUANT_TARGET_AVX2 inline void epilogue_avx2(const epilogue_args& e, const acc_tile& t) noexcept {
  if (e.kind == out_kind::s32 || t.cols % 8 != 0) return epilogue_portable(e, t);
  for (std::size_t i = 0; i < t.rows; ++i) {
    const std::size_t m = t.m0 + i;
    const __m256 sa = _mm256_set1_ps(e.sa[m]);
    const __m256i za = _mm256_set1_epi32(e.za ? e.za[m] : 0);
    for (std::size_t j = 0; j < t.cols; j += 8) {
      const std::size_t n = t.n0 + j;
      __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.data + i * t.ldt + j));
      if (e.za)
        acc = _mm256_sub_epi32(
            acc, _mm256_mullo_epi32(za, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e.colsum + n))));
      __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), sa), _mm256_loadu_ps(e.sb + n));
      if (e.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(e.bias + n));
      v = activate_avx2(v, e.act);
      if (e.kind == out_kind::f32)
        _mm256_storeu_ps(static_cast<float*>(e.out) + m * e.ldo + n, v);
      else
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(e.out) + m * e.ldo + n),
                         e.kind == out_kind::f16
                             ? _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                             : f32x8_to_bf16(v));
    }
  }
}
#endif

enum class int8_level { portable, avx2, avx_vnni, avx512_vnni, amx };

// Under `automatic`, M below this takes AVX-512 VNNI even where AMX runs: a 16-row tile of A is mostly
// padding there, and the tile loads of B cost more than the VNNI kernel's (benchmarks/RESULTS.md, AMX).
inline constexpr std::size_t amx_min_rows = 16;

inline int8_level resolve_int8_level(simd_path p, std::size_t m, const char* who) {
  require_supported(p, who);
  const cpu_features& f = host_cpu_features();
  switch (p) {
    case simd_path::automatic:
      return f.amx && m >= amx_min_rows ? int8_level::amx
             : f.avx512_vnni            ? int8_level::avx512_vnni
             : f.avx_vnni               ? int8_level::avx_vnni
             : f.avx2                   ? int8_level::avx2
                                        : int8_level::portable;
    case simd_path::portable:
      return int8_level::portable;
    case simd_path::avx2:
    case simd_path::avx512:
      return int8_level::avx2;
    case simd_path::avx_vnni:
      return int8_level::avx_vnni;
    case simd_path::avx512_vnni:
      return int8_level::avx512_vnni;
    case simd_path::amx:
      return int8_level::amx;
  }
  return int8_level::portable;
}

inline void check_activation(activation_kind a, bool allow_gelu, const char* who) {
  const bool gelu = a == activation_kind::gelu || a == activation_kind::gelu_erf;
  if (a != activation_kind::none && a != activation_kind::relu && (!gelu || !allow_gelu))
    throw std::invalid_argument(
        std::string(who) + ": options.activation " + std::to_string(static_cast<int>(a)) +
        (a == activation_kind::gelu       ? " (gelu) is not supported with int8 output"
         : a == activation_kind::gelu_erf ? " (gelu_erf) is not supported with int8 output"
                                          : " is not an activation_kind"));
}

/// Checks every field of quantized_activations against its shape in O(M): data vs rows * cols, one
/// finite scale > 0 per row, and no or one zero point in [-128, 127] per row. std::invalid_argument
/// "who: activations.<field> ...".
inline void validate(const quantized_activations& a, const char* who) {
  // The message is built only on error: these checks run on every GEMM call.
  const auto s = [who] { return std::string(who) + ": activations."; };
  const std::size_t need = checked_mul(a.rows, a.cols, who, "activations.rows * activations.cols");
  if (a.data.size() != need)
    throw std::invalid_argument(s() + "data has " + std::to_string(a.data.size()) +
                                " elements, not M * K = " + std::to_string(a.rows) + " * " +
                                std::to_string(a.cols));
  if (a.scales.size() != a.rows)
    throw std::invalid_argument(s() + "scales has " + std::to_string(a.scales.size()) +
                                " entries, not M = " + std::to_string(a.rows));
  for (std::size_t i = 0; i < a.rows; ++i)
    if (!(a.scales[i] > 0.0f) || !std::isfinite(a.scales[i]))
      throw std::invalid_argument(s() + "scales[" + std::to_string(i) + "] = " + std::to_string(a.scales[i]) +
                                  " must be finite and > 0");
  if (!a.zero_points.empty() && a.zero_points.size() != a.rows)
    throw std::invalid_argument(s() + "zero_points has " + std::to_string(a.zero_points.size()) +
                                " entries, not 0 or M = " + std::to_string(a.rows));
  for (std::size_t i = 0; i < a.zero_points.size(); ++i)
    if (a.zero_points[i] < -128 || a.zero_points[i] > 127)
      throw std::invalid_argument(s() + "zero_points[" + std::to_string(i) +
                                  "] = " + std::to_string(a.zero_points[i]) + " is outside [-128, 127]");
}

/// Checks every field of quantized_weights against its shape in O(N): data vs rows * cols, one finite
/// scale > 0 per channel and, for the int8 GEMM (`int8_gemm`), K <= max_gemm_k, the column sums
/// (|col_sums[n]| <= 128 K), the packed panels and packed_corr = 128 * col_sums. std::invalid_argument
/// "who: weights.<field> ...". The values of data, packed and col_sums are not compared (O(N K)).
inline void validate(const quantized_weights& w, const char* who, bool int8_gemm) {
  // The message is built only on error: these checks run on every GEMM call.
  const auto s = [who] { return std::string(who) + ": weights."; };
  const std::size_t need = checked_mul(w.rows, w.cols, who, "weights.rows * weights.cols");
  if (w.data.size() != need)
    throw std::invalid_argument(s() + "data has " + std::to_string(w.data.size()) +
                                " elements, not N * K = " + std::to_string(w.rows) + " * " +
                                std::to_string(w.cols));
  if (w.scales.size() != w.rows)
    throw std::invalid_argument(s() + "scales has " + std::to_string(w.scales.size()) +
                                " entries, not N = " + std::to_string(w.rows));
  for (std::size_t i = 0; i < w.rows; ++i)
    if (!(w.scales[i] > 0.0f) || !std::isfinite(w.scales[i]))
      throw std::invalid_argument(s() + "scales[" + std::to_string(i) + "] = " + std::to_string(w.scales[i]) +
                                  " must be finite and > 0");
  if (!int8_gemm) return;
  if (w.cols > max_gemm_k)
    throw std::invalid_argument(std::string(who) + ": K = " + std::to_string(w.cols) + " exceeds " +
                                std::to_string(max_gemm_k) +
                                ", beyond which int32 accumulation could overflow");
  if (w.col_sums.size() != w.rows)
    throw std::invalid_argument(s() + "col_sums has " + std::to_string(w.col_sums.size()) +
                                " entries, not N = " + std::to_string(w.rows));
  // rows <= data.size() and cols <= max_gemm_k: none of these products can wrap.
  const std::size_t panels = round_up(w.rows, panel_width) / panel_width, k4 = round_up(w.cols, 4) / 4;
  if (w.packed.size() != panels * k4 * 64)
    throw std::invalid_argument(s() + "packed has " + std::to_string(w.packed.size()) + " bytes, not the " +
                                std::to_string(panels * k4 * 64) +
                                " of the CPU panels (build the weights with make_quantized_weights)");
  if (w.packed_corr.size() != panels * panel_width)
    throw std::invalid_argument(s() + "packed_corr has " + std::to_string(w.packed_corr.size()) +
                                " entries, not N rounded up to 16 = " + std::to_string(panels * panel_width));
  const auto bound = static_cast<std::int64_t>(128 * w.cols);
  for (std::size_t n = 0; n < w.rows; ++n) {
    const std::int64_t cs = w.col_sums[n];
    if (cs < -bound || cs > bound)
      throw std::invalid_argument(s() + "col_sums[" + std::to_string(n) + "] = " + std::to_string(cs) +
                                  " is beyond 128 * K = " + std::to_string(bound));
    if (w.packed_corr[n] != 128 * cs)
      throw std::invalid_argument(s() + "packed_corr[" + std::to_string(n) +
                                  "] = " + std::to_string(w.packed_corr[n]) + ", not 128 * col_sums[" +
                                  std::to_string(n) + "] = " + std::to_string(128 * cs));
  }
}

inline void check_gemm_shapes(const quantized_activations& a, const quantized_weights& w,
                              std::size_t out_size, std::span<const float> bias, const char* who) {
  const std::string s(who);
  validate(a, who);
  validate(w, who, true);
  if (a.cols != w.cols)
    throw std::invalid_argument(s + ": activations have K = " + std::to_string(a.cols) +
                                " but weights have K = " + std::to_string(w.cols));
  if (out_size != checked_mul(a.rows, w.rows, who, "M * N"))
    throw std::invalid_argument(s + ": out has " + std::to_string(out_size) + " elements, not M * N = " +
                                std::to_string(a.rows) + " * " + std::to_string(w.rows));
  if (!bias.empty() && bias.size() != w.rows)
    throw std::invalid_argument(s + ": options.bias has " + std::to_string(bias.size()) +
                                " entries, not N = " + std::to_string(w.rows));
}

// Runs the int8 kernel of `lv` and hands every int32 tile (exact sum_k A * B) to `epilogue`, split on
// `threads` along whole blocks: 8 rows of A (the widest kernel's) or 32 channels (two panels).
inline void run_int8_gemm(int8_level lv, const quantized_activations& a, const quantized_weights& w,
                          executor* threads, auto&& epilogue) {
  const std::size_t m = a.rows, n = w.rows, k = a.cols;
  if (m == 0 || n == 0) return;
  // Each part runs the kernel on rows [m0, m1) and channels [n0, n1) through offset pointers, and its
  // tiles are moved back to where they belong.
  const auto in_place = [&](std::size_t m0, std::size_t n0) {
    return [&epilogue, m0, n0](acc_tile t) {
      t.m0 += m0;
      t.n0 += n0;
      epilogue(t);
    };
  };
#if FRUGAL_QUANT_X86
  const std::size_t k4 = round_up(k, 4) / 4, lda = k4 * 4;
  if (lv == int8_level::amx) {
    // Parts of whole 32-row blocks, so that every part's last block reads padded rows of this buffer.
    const std::size_t lda64 = round_up(k, amx_k_bytes), mp = round_up(m, amx_rows);
    const auto buf = aligned_scratch<std::int8_t>(mp * lda64);
    std::int8_t* const ap = buf.get();
    pack_amx(a.data.data(), m, mp, k, ap, lda64);
    const aligned_bytes tails = amx_tails(w.packed.data(), round_up(n, panel_width) / panel_width, k4);
    split_gemm(threads, m, n, k, amx_rows, 2 * panel_width,
               [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                 const std::size_t p0 = n0 / panel_width;
                 gemm_s8_amx(ap + m0 * lda64, m1 - m0, lda64, k4, w.packed.data() + p0 * k4 * 64, n1 - n0,
                             tails.empty() ? nullptr : tails.data() + p0 * 1024, in_place(m0, n0));
               });
    return;
  }
  if (lv == int8_level::avx512_vnni || lv == int8_level::avx_vnni) {
    // Not value-initialised: the packer writes every byte, padding included.
    const auto buf = aligned_scratch<std::uint8_t>(m * lda);
    std::uint8_t* const ap = buf.get();
    pack_xor80(a.data.data(), m, k, ap, lda);
    split_gemm(threads, m, n, k, 8, 2 * panel_width,
               [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                 const std::int8_t* bp = w.packed.data() + n0 / panel_width * k4 * 64;
                 if (lv == int8_level::avx512_vnni)
                   gemm_s8_avx512_vnni(ap + m0 * lda, m1 - m0, k4, bp, n1 - n0, w.packed_corr.data() + n0,
                                       in_place(m0, n0));
                 else
                   gemm_s8_avx_vnni(ap + m0 * lda, m1 - m0, k4, bp, n1 - n0, w.packed_corr.data() + n0,
                                    in_place(m0, n0));
               });
    return;
  }
  if (lv == int8_level::avx2) {
    // Activations in [-64, 63] (reduce_range) take the vpmaddubsw kernel; both give the exact sum.
    const auto u7 = aligned_scratch<std::uint8_t>(m * lda);
    std::uint8_t* const au = u7.get();
    if (pack_u7(a.data.data(), m, k, au, lda)) {
      split_gemm(threads, m, n, k, 8, 2 * panel_width,
                 [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                   gemm_u7_avx2(au + m0 * lda, m1 - m0, k4, w.packed.data() + n0 / panel_width * k4 * 64,
                                n1 - n0, w.packed_corr.data() + n0, in_place(m0, n0));
                 });
      return;
    }
    const auto buf = aligned_scratch<std::int16_t>(m * lda);
    std::int16_t* const ap = buf.get();
    pack_s16(a.data.data(), m, k, ap, lda);
    split_gemm(threads, m, n, k, 8, 2 * panel_width,
               [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                 gemm_s8_avx2(ap + m0 * lda, m1 - m0, k4, w.packed.data() + n0 / panel_width * k4 * 64,
                              n1 - n0, in_place(m0, n0));
               });
    return;
  }
#endif
  (void)lv;
  split_gemm(threads, m, n, k, 8, 2 * panel_width,
             [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
               std::vector<std::int32_t> row;
               gemm_s8_portable(a.data.data() + m0 * k, m1 - m0, k, w.data.data() + n0 * k, n1 - n0, row,
                                in_place(m0, n0));
             });
}

inline void gemm_w8a8_impl(const quantized_activations& a, const quantized_weights& w, void* out,
                           std::size_t out_size, out_kind kind, const gemm_options& opt) {
  constexpr const char* who = "frugal::quant::gemm_w8a8";
  check_gemm_shapes(a, w, out_size, opt.bias, who);
  check_activation(opt.activation, true, who);
  const int8_level lv = resolve_int8_level(opt.path, a.rows, who);
  const epilogue_args e{a.scales.data(),
                        a.zero_points.empty() ? nullptr : a.zero_points.data(),
                        w.scales.data(),
                        w.col_sums.data(),
                        opt.bias.empty() ? nullptr : opt.bias.data(),
                        opt.activation,
                        kind,
                        out,
                        w.rows};
#if FRUGAL_QUANT_X86
  if (lv == int8_level::avx512_vnni || lv == int8_level::amx)
    return run_int8_gemm(lv, a, w, opt.threads, [&](const acc_tile& t) { epilogue_avx512(e, t); });
  if (lv != int8_level::portable)
    return run_int8_gemm(lv, a, w, opt.threads, [&](const acc_tile& t) { epilogue_avx2(e, t); });
#endif
  run_int8_gemm(lv, a, w, opt.threads, [&](const acc_tile& t) { epilogue_portable(e, t); });
}

inline void check_weight_only(std::size_t xsize, std::size_t m, std::size_t k, std::size_t n,
                              std::size_t out_size, std::span<const float> bias, const char* who) {
  const std::string s(who);
  if (xsize != checked_mul(m, k, who, "M * K"))
    throw std::invalid_argument(s + ": x has " + std::to_string(xsize) +
                                " elements, not M * K = " + std::to_string(m) + " * " + std::to_string(k));
  if (out_size != checked_mul(m, n, who, "M * N"))
    throw std::invalid_argument(s + ": out has " + std::to_string(out_size) +
                                " elements, not M * N = " + std::to_string(m) + " * " + std::to_string(n));
  if (!bias.empty() && bias.size() != n)
    throw std::invalid_argument(s + ": options.bias has " + std::to_string(bias.size()) +
                                " entries, not N = " + std::to_string(n));
}

// Walks columns [n0, n1) in blocks of 4 rows of W (the last block repeats row N-1 and drops it) and
// rows [m0, m1) in blocks of `mr`, so each block of W is converted once per block of X and stays in L1.
template <class Block>
void weight_only_driver(std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1, std::size_t n,
                        std::size_t mr, const float* x, std::size_t k, float* out, Block&& block) {
  float sums[4 * 4];
  for (std::size_t j = n0; j < n1; j += 4) {
    const std::size_t nj = std::min<std::size_t>(4, n1 - j);
    for (std::size_t i = m0; i < m1; i += mr) {
      const std::size_t mi = std::min(mr, m1 - i);
      block(x + i * k, mi, j, sums);
      for (std::size_t a = 0; a < mi; ++a)
        for (std::size_t b = 0; b < nj; ++b) out[(i + a) * n + j + b] = sums[a * 4 + b];
    }
  }
}

inline void finish_weight_only(float_level lv, float* out, std::size_t m, std::size_t n, const float* scales,
                               const weight_only_options& opt) {
  for (std::size_t i = 0; i < m; ++i) {
    float* row = out + i * n;
    if (scales)
      for (std::size_t j = 0; j < n; ++j) row[j] *= scales[j];
    if (!opt.bias.empty())
      for (std::size_t j = 0; j < n; ++j) row[j] += opt.bias[j];
  }
  activate_span(lv, out, m * n, opt.activation);
}

}  // namespace quant::detail
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
