#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>
#include "frugal/quant/detail/eigen.hpp"

#include "frugal/config.hpp"
#include "frugal/quant/convert.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/gemm_int4.hpp"
#include "frugal/quant/detail/gemm_int8.hpp"
#include "frugal/quant/detail/gemm_weight_only.hpp"
#include "frugal/quant/detail/vecmath.hpp"
#include "frugal/quant/int4.hpp"
#include "frugal/quant/parallel.hpp"
#include "frugal/quant/quantize.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Activations A (M x K int8 row-major) with one scale per row (per token) and, if
/// asymmetric, one int32 zero point per row: real = (q - za[m]) * sa[m].
struct quantized_activations {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::int8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;  ///< empty when symmetric
};

/// @brief Options of dynamic per-token activation quantization.
struct quantize_rows_options {
  /// symmetric: absmax / 127, q in -127..127; else min-max with a zero point, -128..127
  bool symmetric = true;
  /// Static quantization: when > 0, every row uses this calibrated symmetric scale (e.g. SmoothQuant's
  /// act_scale) instead of its own absmax; values beyond it saturate.
  float static_scale = 0.0f;
  /// Seven-bit activations, FBGEMM's and onnxruntime's "reduce range": symmetric in -63..63 (absmax / 63),
  /// asymmetric in -64..63. On a CPU with AVX2 but no VNNI the int8 GEMM then takes a vpmaddubsw kernel
  /// (1.3-1.5x the int16 one on the shapes in benchmarks/RESULTS.md) instead of widening to int16; both give
  /// the exact integer sum. The price is one bit of activation precision, measured in the precision benchmark
  /// (benchmarks/RESULTS.md). With static_scale, the calibrated range stays covered: the scale used is
  /// static_scale * 127 / 63.
  bool reduce_range = false;
  simd_path path = simd_path::automatic;
};

/// @brief Weights B (N x K int8 row-major: each output channel's K weights contiguous) with one
/// symmetric fp32 scale per output channel, their int32 column sums sum_k B[n][k], and a CPU-only
/// re-packed copy for the SIMD kernels (see detail/gemm_int8.hpp). Every GEMM checks the fields it
/// reads against rows and cols first (std::invalid_argument naming the field); col_sums, packed and
/// packed_corr are needed by the int8 GEMM only, and make_quantized_weights leaves them empty for
/// K > max_gemm_k.
struct quantized_weights {
  std::size_t rows = 0;  ///< N, output channels
  std::size_t cols = 0;  ///< K, the reduction
  std::vector<std::int8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> col_sums;
  aligned_bytes packed;                   ///< panels of 16 channels x K/4 x 64 bytes, on a cache line
  std::vector<std::int32_t> packed_corr;  ///< 128 * col_sums, padded to the panels
  /// @brief Bytes a deployment stores: int8 weights and fp32 scales (not the packed CPU copy).
  std::size_t memory_bytes() const noexcept { return data.size() + scales.size() * sizeof(float); }
};

/// @brief The output epilogue: C = (acc - za[m] * colsum[n]) * sa[m] * sb[n] + bias[n], then the activation.
struct gemm_options {
  std::span<const float> bias = {};  ///< N floats, or empty
  activation_kind activation = activation_kind::none;
  simd_path path = simd_path::automatic;  ///< forces a kernel (tests, benchmarks)
  /// Threads to split the GEMM over (along N, or M when it has more blocks); null: the calling thread
  /// only. Any split gives the bits of one thread.
  executor* threads = nullptr;
};

/// @brief Requantization to int8 with gemmlowp's fixed-point arithmetic.
struct requantize_options {
  float output_scale = 1.0f;
  std::int32_t output_zero_point = 0;
  std::span<const float> bias = {};  ///< N floats in real units, rounded to int32 at scale sa * sb
  activation_kind activation = activation_kind::none;  ///< none or relu
  simd_path path = simd_path::automatic;
  executor* threads = nullptr;  ///< as gemm_options::threads (the int32 GEMM; the requantization is O(M N))
};

/// @brief A real multiplier in (0, 1) or above as gemmlowp keeps it: real = multiplier * 2^(shift - 31).
struct fixed_point_multiplier {
  std::int32_t multiplier = 0;
  int shift = 0;
};

/// @brief The largest shift multiply_by_quantized_multiplier applies: x * 2^31 saturates int32 for any x !=
/// 0.
inline constexpr int max_multiplier_shift = 31;

/// @brief gemmlowp's QuantizeMultiplier: frexp, then a Q31 mantissa rounded to nearest. A multiplier
/// below 2^-32 becomes {0, 0} (every product rounds to 0); one of 2^31 or more, whose shift would exceed
/// max_multiplier_shift, is std::invalid_argument.
inline fixed_point_multiplier quantize_multiplier(double real) {
  if (!(real > 0.0) || !std::isfinite(real))
    throw std::invalid_argument("frugal::quant::quantize_multiplier: the multiplier must be finite and > 0");
  int shift = 0;
  const double q = std::frexp(real, &shift);
  auto m = static_cast<std::int64_t>(std::llround(q * 2147483648.0));
  if (m == (std::int64_t{1} << 31)) {
    m /= 2;
    ++shift;
  }
  if (shift < -31) return {0, 0};
  if (shift > max_multiplier_shift)
    throw std::invalid_argument("frugal::quant::quantize_multiplier: the multiplier " + std::to_string(real) +
                                " needs a shift of " + std::to_string(shift) + ", more than " +
                                std::to_string(max_multiplier_shift));
  return {static_cast<std::int32_t>(m), shift};
}

/// @brief gemmlowp's SaturatingRoundingDoublingHighMul: round(a * b / 2^31), saturating the one overflow.
inline constexpr std::int32_t saturating_rounding_doubling_high_mul(std::int32_t a, std::int32_t b) noexcept {
  if (a == b && a == INT32_MIN) return INT32_MAX;
  const std::int64_t ab = static_cast<std::int64_t>(a) * b;
  const std::int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
  return static_cast<std::int32_t>((ab + nudge) / (std::int64_t{1} << 31));
}

/// @brief gemmlowp's RoundingDivideByPOT: x / 2^exponent rounded to nearest, ties away from zero.
inline constexpr std::int32_t rounding_divide_by_pot(std::int32_t x, int exponent) noexcept {
  const std::int32_t mask = static_cast<std::int32_t>((std::int64_t{1} << exponent) - 1);
  const std::int32_t remainder = x & mask;
  const std::int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/// @brief x * real for the multiplier from quantize_multiplier (TFLite's MultiplyByQuantizedMultiplier).
/// A hand-made shift above 31 acts as 31 (x * 2^31 already saturates int32 for x != 0); one below -31
/// gives 0, as |x * multiplier / 2^31| / 2^32 < 1/2 rounds.
inline constexpr std::int32_t multiply_by_quantized_multiplier(std::int32_t x,
                                                               fixed_point_multiplier m) noexcept {
  // A larger left shift would change nothing but make 1 << shift UB; x >> 32 and beyond is UB too.
  if (m.shift < -31) return 0;
  const int left = m.shift > 0 ? std::min(m.shift, max_multiplier_shift) : 0,
            right = m.shift > 0 ? 0 : -m.shift;
  const std::int64_t shifted = static_cast<std::int64_t>(x) * (std::int64_t{1} << left);
  const auto sat = static_cast<std::int32_t>(std::clamp<std::int64_t>(shifted, INT32_MIN, INT32_MAX));
  return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(sat, m.multiplier), right);
}

/// @brief Dynamic per-token quantization of a rows x cols row-major matrix. NaN or Inf in `x` is
/// std::invalid_argument naming the first index; rows * cols is checked for overflow.
inline quantized_activations quantize_rows(std::span<const float> x, std::size_t rows, std::size_t cols,
                                           const quantize_rows_options& opt = {}) {
  constexpr const char* who = "frugal::quant::quantize_rows";
  detail::check_data_size(x.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(opt.path, who);
  if (!(opt.static_scale >= 0.0f) || !std::isfinite(opt.static_scale) ||
      (opt.static_scale > 0.0f && !opt.symmetric))
    throw std::invalid_argument(std::string(who) +
                                ": options.static_scale must be finite, >= 0, and only with symmetric");
  const scheme s{
      .type = element_type::i8, .granularity = granularity::per_channel, .symmetric = opt.symmetric};
  const std::int32_t lo_q = opt.reduce_range ? (opt.symmetric ? -63 : -64) : qmin(s),
                     hi_q = opt.reduce_range ? 63 : qmax(s);
  const float static_scale = opt.reduce_range ? opt.static_scale * (127.0f / 63.0f) : opt.static_scale;
  if (!std::isfinite(static_scale))
    throw std::invalid_argument(std::string(who) + ": options.static_scale " +
                                std::to_string(opt.static_scale) +
                                " times 127 / 63 (reduce_range) is not finite");
  quantized_activations q;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(rows * cols);
  q.scales.resize(rows);
  if (!opt.symmetric) q.zero_points.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const detail::run_range rr = detail::minmax_run(lv, xr, cols);
    if (rr.first_nonfinite != cols)
      detail::throw_nonfinite(who, r * cols + rr.first_nonfinite, xr[rr.first_nonfinite]);
    auto [scale, zp] = detail::params_for_levels(rr.lo, rr.hi, s, lo_q, hi_q);
    if (static_scale > 0.0f) {
      scale = static_scale;
      zp = 0;
    }
    q.scales[r] = scale;
    if (!opt.symmetric) q.zero_points[r] = zp;
    detail::quantize_run(lv, xr, cols, scale, zp, lo_q, hi_q, s.rounding, q.data.data() + r * cols);
  }
  return q;
}

/// @brief quantize_rows on an Eigen matrix (a column-major one is copied to row-major first).
inline quantized_activations quantize_rows(const Eigen::Ref<const row_matrix>& x,
                                           const quantize_rows_options& opt = {}) {
  return detail::with_contiguous(x, [&](std::span<const float> d) {
    return quantize_rows(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()), opt);
  });
}

/// @brief Wraps int8 weights quantized elsewhere (N x K row-major, one scale per channel). The column
/// sums and the packed CPU copy are built only for K <= max_gemm_k, the int8 GEMM's limit; beyond it
/// they are left empty (128 * col_sums would overflow int32) and the weights serve gemm_weight_only.
inline quantized_weights make_quantized_weights(std::span<const std::int8_t> data, std::size_t rows,
                                                std::size_t cols, std::span<const float> scales) {
  constexpr const char* who = "frugal::quant::make_quantized_weights";
  if (data.size() != detail::checked_mul(rows, cols, who, "N * K"))
    throw std::invalid_argument(std::string(who) + ": data has " + std::to_string(data.size()) +
                                " elements, not N * K = " + std::to_string(rows) + " * " +
                                std::to_string(cols));
  if (scales.size() != rows)
    throw std::invalid_argument(std::string(who) + ": scales has " + std::to_string(scales.size()) +
                                " entries, not N = " + std::to_string(rows));
  for (std::size_t i = 0; i < rows; ++i)
    if (!(scales[i] > 0.0f) || !std::isfinite(scales[i]))
      throw std::invalid_argument(std::string(who) + ": scales[" + std::to_string(i) +
                                  "] must be finite and > 0");
  quantized_weights w;
  w.rows = rows;
  w.cols = cols;
  w.data.assign(data.begin(), data.end());
  w.scales.assign(scales.begin(), scales.end());
  if (cols > detail::max_gemm_k) return w;
  // |col_sums| <= 128 * K <= 2^23 and |128 * col_sums| <= 2^30: both fit int32 below max_gemm_k.
  w.col_sums.assign(rows, 0);
  for (std::size_t n = 0; n < rows; ++n)
    for (std::size_t k = 0; k < cols; ++k) w.col_sums[n] += data[n * cols + k];
  w.packed = detail::pack_b_panels(w.data.data(), rows, cols);
  w.packed_corr.assign(detail::round_up(rows, detail::panel_width), 0);
  for (std::size_t n = 0; n < rows; ++n) w.packed_corr[n] = 128 * w.col_sums[n];
  return w;
}

/// @brief Symmetric per-channel int8 weights (absmax / 127, -127..127) of an N x K row-major matrix.
inline quantized_weights quantize_weights_per_channel(std::span<const float> w, std::size_t rows,
                                                      std::size_t cols) {
  const scheme s{.type = element_type::i8, .granularity = granularity::per_channel, .axis = 0};
  const quantized_tensor q = quantize(w, rows, cols, s);
  return make_quantized_weights(
      std::span<const std::int8_t>(reinterpret_cast<const std::int8_t*>(q.data.data()), q.data.size()), rows,
      cols, q.scales);
}

/// @brief quantize_weights_per_channel on an Eigen matrix (N x K: output channels x inputs).
inline quantized_weights quantize_weights_per_channel(const Eigen::Ref<const row_matrix>& w) {
  return detail::with_contiguous(w, [&](std::span<const float> d) {
    return quantize_weights_per_channel(d, static_cast<std::size_t>(w.rows()),
                                        static_cast<std::size_t>(w.cols()));
  });
}

namespace detail {

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

}  // namespace detail

/// @brief The exact int32 accumulators sum_k A[m][k] * B[n][k] (M x N row-major), before any
/// epilogue; every kernel path gives the same bits, on any number of `threads` (null: this one).
inline void gemm_w8a8_s32(const quantized_activations& a, const quantized_weights& w,
                          std::span<std::int32_t> out, simd_path path = simd_path::automatic,
                          executor* threads = nullptr) {
  detail::gemm_w8a8_impl(a, w, out.data(), out.size(), detail::out_kind::s32,
                         {.path = path, .threads = threads});
}

/// @brief W8A8 GEMM with the fused epilogue, fp32 output (M x N row-major).
inline void gemm_w8a8(const quantized_activations& a, const quantized_weights& w, std::span<float> out,
                      const gemm_options& opt = {}) {
  detail::gemm_w8a8_impl(a, w, out.data(), out.size(), detail::out_kind::f32, opt);
}

/// @brief W8A8 GEMM with fp16 output (round to nearest even).
inline void gemm_w8a8(const quantized_activations& a, const quantized_weights& w, std::span<half> out,
                      const gemm_options& opt = {}) {
  detail::gemm_w8a8_impl(a, w, out.data(), out.size(), detail::out_kind::f16, opt);
}

/// @brief W8A8 GEMM with bf16 output (round to nearest even).
inline void gemm_w8a8(const quantized_activations& a, const quantized_weights& w, std::span<bfloat16> out,
                      const gemm_options& opt = {}) {
  detail::gemm_w8a8_impl(a, w, out.data(), out.size(), detail::out_kind::bf16, opt);
}

/// @brief W8A8 GEMM into an Eigen matrix, resized to M x N.
inline void gemm_w8a8(const quantized_activations& a, const quantized_weights& w, row_matrix& out,
                      const gemm_options& opt = {}) {
  detail::check_gemm_shapes(a, w, a.rows * w.rows, opt.bias, "frugal::quant::gemm_w8a8");  // before resize
  out.resize(static_cast<Eigen::Index>(a.rows), static_cast<Eigen::Index>(w.rows));
  gemm_w8a8(a, w, std::span<float>(out.data(), static_cast<std::size_t>(out.size())), opt);
}

/// @brief W8A8 GEMM requantized to int8 (gemmlowp): q = clamp(zp_out + (acc + bias_q) * M, -128, 127)
/// with M = sa[m] * sb[n] / output_scale as a fixed-point multiplier and bias_q = round(bias / (sa * sb)).
inline void gemm_w8a8(const quantized_activations& a, const quantized_weights& w, std::span<std::int8_t> out,
                      const requantize_options& opt) {
  constexpr const char* who = "frugal::quant::gemm_w8a8";
  if (!(opt.output_scale > 0.0f) || !std::isfinite(opt.output_scale))
    throw std::invalid_argument(std::string(who) + ": options.output_scale must be finite and > 0");
  if (opt.output_zero_point < -128 || opt.output_zero_point > 127)
    throw std::invalid_argument(std::string(who) + ": options.output_zero_point must be in [-128, 127]");
  detail::check_activation(opt.activation, false, who);
  detail::check_gemm_shapes(a, w, out.size(), opt.bias, who);
  for (std::size_t n = 0; n < opt.bias.size(); ++n)
    if (!std::isfinite(opt.bias[n]))
      throw std::invalid_argument(std::string(who) + ": options.bias[" + std::to_string(n) +
                                  "] = " + std::to_string(opt.bias[n]) + " must be finite");
  // Every multiplier sa[m] * sb[n] / output_scale is at most this one, and quantize_multiplier's shift
  // grows with its argument: if this one's fits, all do.
  if (a.rows > 0 && w.rows > 0) {
    const double biggest = static_cast<double>(*std::max_element(a.scales.begin(), a.scales.end())) *
                           *std::max_element(w.scales.begin(), w.scales.end()) / opt.output_scale;
    try {
      (void)quantize_multiplier(biggest);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(
          std::string(who) + ": options.output_scale = " + std::to_string(opt.output_scale) +
          " makes the multiplier sa * sb / output_scale = " + std::to_string(biggest) +
          ", whose shift exceeds " + std::to_string(max_multiplier_shift));
    }
  }
  std::vector<std::int32_t> acc(a.rows * w.rows);
  gemm_w8a8_s32(a, w, acc, opt.path, opt.threads);
  const bool uniform =
      std::all_of(a.scales.begin(), a.scales.end(), [&](float s) { return s == a.scales[0]; });
  std::vector<fixed_point_multiplier> per_col;
  if (uniform && a.rows > 0) {
    per_col.resize(w.rows);
    for (std::size_t n = 0; n < w.rows; ++n)
      per_col[n] = quantize_multiplier(static_cast<double>(a.scales[0]) * w.scales[n] / opt.output_scale);
  }
  const std::int32_t lo = opt.activation == activation_kind::relu ? opt.output_zero_point : -128;
  for (std::size_t m = 0; m < a.rows; ++m)
    for (std::size_t n = 0; n < w.rows; ++n) {
      const double sasb = static_cast<double>(a.scales[m]) * w.scales[n];
      std::int64_t v = acc[m * w.rows + n];
      if (!a.zero_points.empty()) v -= static_cast<std::int64_t>(a.zero_points[m]) * w.col_sums[n];
      // Beyond +-2^40 the sum saturates int32 below either way; the clamp keeps llround defined.
      if (!opt.bias.empty()) v += std::llround(std::clamp(opt.bias[n] / sasb, -0x1p40, 0x1p40));
      const auto v32 = static_cast<std::int32_t>(std::clamp<std::int64_t>(v, INT32_MIN, INT32_MAX));
      const fixed_point_multiplier fm = uniform ? per_col[n] : quantize_multiplier(sasb / opt.output_scale);
      const std::int64_t q =
          static_cast<std::int64_t>(multiply_by_quantized_multiplier(v32, fm)) + opt.output_zero_point;
      out[m * w.rows + n] = static_cast<std::int8_t>(std::clamp<std::int64_t>(q, lo, 127));
    }
}

/// @brief Options of the weight-only GEMM: C = X * dequant(W)^T + bias, then the activation.
struct weight_only_options {
  std::span<const float> bias = {};
  activation_kind activation = activation_kind::none;
  simd_path path = simd_path::automatic;
  executor* threads = nullptr;  ///< as gemm_options::threads
};

namespace detail {

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

}  // namespace detail

/// @brief Weight-only int8 GEMM (W8A16 on the CPU): C[m][n] = sum_k X[m][k] * W[n][k] * s[n] (+ bias).
/// X is M x K fp32 row-major, C is M x N fp32 row-major.
inline void gemm_weight_only(std::span<const float> x, std::size_t m, const quantized_weights& w,
                             std::span<float> out, const weight_only_options& opt = {}) {
  constexpr const char* who = "frugal::quant::gemm_weight_only";
  const std::size_t k = w.cols, n = w.rows;
  detail::validate(w, who, false);
  detail::check_weight_only(x.size(), m, k, n, out.size(), opt.bias, who);
  detail::check_activation(opt.activation, true, who);
  const auto lv = detail::resolve_float_level(opt.path, who);
  if (m == 0 || n == 0) return;
  const auto rows4 = [&](std::size_t j, const std::int8_t** p) {
    for (std::size_t b = 0; b < 4; ++b) p[b] = w.data.data() + std::min(j + b, n - 1) * k;
  };
  detail::split_gemm(
      opt.threads, m, n, k, 4, 4, [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
#if FRUGAL_QUANT_X86
        if (lv == detail::float_level::avx512) {
          detail::weight_only_driver(m0, m1, n0, n1, n, 4, x.data(), k, out.data(),
                                     [&](const float* xb, std::size_t mi, std::size_t j, float* s) {
                                       const std::int8_t* p[4];
                                       rows4(j, p);
                                       switch (mi) {
                                         case 4:
                                           return detail::wo8_block_avx512<4>(xb, k, p, s);
                                         case 3:
                                           return detail::wo8_block_avx512<3>(xb, k, p, s);
                                         case 2:
                                           return detail::wo8_block_avx512<2>(xb, k, p, s);
                                         default:
                                           return detail::wo8_block_avx512<1>(xb, k, p, s);
                                       }
                                     });
        } else if (lv == detail::float_level::avx2) {
          detail::weight_only_driver(m0, m1, n0, n1, n, 2, x.data(), k, out.data(),
                                     [&](const float* xb, std::size_t mi, std::size_t j, float* s) {
                                       const std::int8_t* p[4];
                                       rows4(j, p);
                                       if (mi == 2) return detail::wo8_block_avx2<2>(xb, k, p, s);
                                       detail::wo8_block_avx2<1>(xb, k, p, s);
                                     });
        } else
#endif
        {
          (void)rows4;
          detail::wo8_portable(x.data(), m0, m1, k, w.data.data(), n0, n1, n, out.data());
        }
      });
  detail::finish_weight_only(lv, out.data(), m, n, w.scales.data(), opt);
}

/// @brief Weight-only groupwise int4 GEMM (W4A16 on the CPU): C[m][n] = sum_k X[m][k] * real(W[n][k]) (+
/// bias).
inline void gemm_weight_only(std::span<const float> x, std::size_t m, const int4_weights& w,
                             std::span<float> out, const weight_only_options& opt = {}) {
  constexpr const char* who = "frugal::quant::gemm_weight_only";
  // validate first: g % 32 with a group_size of 0 passed, and k % g then divided by zero.
  detail::validate(w, who);
  const std::size_t k = w.cols, n = w.rows, g = static_cast<std::size_t>(w.group_size);
  if (g % 32 != 0)
    throw std::invalid_argument(std::string(who) + ": weights.group_size must be a multiple of 32, not " +
                                std::to_string(g));
  detail::check_weight_only(x.size(), m, k, n, out.size(), opt.bias, who);
  detail::check_activation(opt.activation, true, who);
  const auto lv = detail::resolve_float_level(opt.path, who);
  if (m == 0 || n == 0) return;
  const std::uint8_t* zps = w.symmetric ? nullptr : w.zero_points.data();
#if FRUGAL_QUANT_X86
  if (lv != detail::float_level::portable) {
    const bool avx512 = lv == detail::float_level::avx512;
    std::vector<float> xp(m * k), xsum(m * (k / g));
    detail::pack_x_int4(avx512, x.data(), m, k, g, xp.data(), xsum.data());
    const detail::int4_operands o{xp.data(), xsum.data(), k, g, w.packed.data(), w.scales.data(), zps};
    detail::split_gemm(opt.threads, m, n, k, 4, 4,
                       [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                         if (w.symmetric)
                           detail::w4_columns<true>(avx512, o, m0, m1, n, n0, n1, out.data());
                         else
                           detail::w4_columns<false>(avx512, o, m0, m1, n, n0, n1, out.data());
                       });
  } else
#endif
  {
    detail::split_gemm(opt.threads, m, n, k, 4, 4,
                       [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
                         detail::wo4_portable(x.data(), m0, m1, k, w.packed.data(), w.scales.data(), zps, g,
                                              n0, n1, n, out.data());
                       });
  }
  detail::finish_weight_only(lv, out.data(), m, n, nullptr, opt);
}

/// @brief Weight-only GEMM with fp16 activations: they are widened to fp32 (exact), then as above.
template <class Weights>
void gemm_weight_only(std::span<const half> x, std::size_t m, const Weights& w, std::span<float> out,
                      const weight_only_options& opt = {}) {
  std::vector<float> xf(x.size());
  convert(x, std::span<float>(xf), opt.path);
  gemm_weight_only(std::span<const float>(xf), m, w, out, opt);
}

/// @brief Weight-only GEMM on Eigen matrices: out (resized to M x N) = X * dequant(W)^T.
template <class Weights>
void gemm_weight_only(const Eigen::Ref<const row_matrix>& x, const Weights& w, row_matrix& out,
                      const weight_only_options& opt = {}) {
  constexpr const char* who = "frugal::quant::gemm_weight_only";
  if constexpr (std::is_same_v<Weights, quantized_weights>)
    detail::validate(w, who, false);
  else
    detail::validate(w, who);
  detail::checked_mul(static_cast<std::size_t>(x.rows()), w.rows, who, "M * N");  // before resize
  out.resize(x.rows(), static_cast<Eigen::Index>(w.rows));
  detail::with_contiguous(x, [&](std::span<const float> d) {
    gemm_weight_only(d, static_cast<std::size_t>(x.rows()), w,
                     std::span<float>(out.data(), static_cast<std::size_t>(out.size())), opt);
    return 0;
  });
}

/// @brief Applies @p a to every element of @p x in place, on the widest path the CPU has (or @p path), with
/// the same code as the GEMM epilogues: for an fp32 layer whose GEMM is not frugal's (e.g. Eigen's).
inline void apply_activation(std::span<float> x, activation_kind a, simd_path path = simd_path::automatic) {
  detail::activate_span(detail::resolve_float_level(path, "frugal::quant::apply_activation"), x.data(),
                        x.size(), a);
}

/// @brief The Eigen fp32 reference: X (M x K) * W^T (W is N x K), + bias, then the activation.
inline row_matrix reference_gemm(const Eigen::Ref<const row_matrix>& x, const Eigen::Ref<const row_matrix>& w,
                                 std::span<const float> bias = {},
                                 activation_kind act = activation_kind::none) {
  row_matrix out = x * w.transpose();
  for (Eigen::Index i = 0; i < out.rows(); ++i)
    for (Eigen::Index j = 0; j < out.cols(); ++j) {
      float v = out(i, j) + (bias.empty() ? 0.0f : bias[static_cast<std::size_t>(j)]);
      out(i, j) = detail::activate(v, act);
    }
  return out;
}

}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END
