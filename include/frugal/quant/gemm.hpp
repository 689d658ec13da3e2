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

#include "frugal/namespace.hpp"
#include "frugal/quant/convert.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/gemm_driver.hpp"
#include "frugal/quant/detail/gemm_int4.hpp"
#include "frugal/quant/detail/gemm_int8.hpp"
#include "frugal/quant/detail/gemm_weight_only.hpp"
#include "frugal/quant/detail/vecmath.hpp"
#include "frugal/quant/gemm_types.hpp"
#include "frugal/quant/int4.hpp"
#include "frugal/quant/parallel.hpp"
#include "frugal/quant/quantize.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

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

#include "frugal/detail/macro_unscope.hpp"
