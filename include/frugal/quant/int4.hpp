#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/convert.hpp"
#include "frugal/quant/quantize.hpp"
#include "frugal/quant/scheme.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Packs int4 values two per byte. `values` is rows x cols row-major, each in -8..7 (signed)
/// or 0..15 (unsigned); a row becomes ceil(cols/2) bytes: element 2j in the LOW nibble (bits 0-3)
/// of byte j, element 2j+1 in the HIGH nibble (bits 4-7). An odd last element leaves a zero high nibble.
inline std::vector<std::uint8_t> pack_int4(std::span<const std::int8_t> values, std::size_t rows,
                                           std::size_t cols, bool is_signed = true) {
  constexpr const char* who = "frugal::quant::pack_int4";
  detail::check_data_size(values.size(), rows, cols, who);
  const int lo = is_signed ? -8 : 0, hi = is_signed ? 7 : 15;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] < lo || values[i] > hi)
      throw std::invalid_argument(std::string(who) + ": values[" + std::to_string(i) +
                                  "] = " + std::to_string(values[i]) + " is outside [" + std::to_string(lo) +
                                  ", " + std::to_string(hi) + "]");
  const std::size_t stride = detail::half_up(cols);  // rows * stride <= rows * cols, checked above
  std::vector<std::uint8_t> out(rows * stride);
  for (std::size_t r = 0; r < rows; ++r)
    detail::pack_nibbles(values.data() + r * cols, cols, out.data() + r * stride);
  return out;
}

/// @brief The inverse of pack_int4: signed nibbles are sign-extended, unsigned ones zero-extended.
inline std::vector<std::int8_t> unpack_int4(std::span<const std::uint8_t> packed, std::size_t rows,
                                            std::size_t cols, bool is_signed = true) {
  constexpr const char* who = "frugal::quant::unpack_int4";
  const std::size_t stride = detail::half_up(cols);
  // Both products are checked: a wrapped rows * stride let an empty span pass for a huge shape.
  const std::size_t need = detail::checked_mul(rows, stride, who, "rows * ceil(cols / 2)");
  const std::size_t count = detail::checked_mul(rows, cols, who, "rows * cols");
  if (packed.size() != need)
    throw std::invalid_argument(std::string(who) + ": packed has " + std::to_string(packed.size()) +
                                " bytes, not rows * ceil(cols / 2) = " + std::to_string(need));
  std::vector<std::int8_t> out(count);
  // Through pointers: with vector indexing GCC 12 at -O3 proved a (never reached) 2^32-iteration UB
  // for the constant shapes of a test that expects the size error above.
  std::int8_t* o = out.data();
  const std::uint8_t* p = packed.data();
  for (std::size_t r = 0; r < rows; ++r, p += stride)
    for (std::size_t c = 0; c < cols; ++c) {
      const int nib = (c & 1) ? p[c / 2] >> 4 : p[c / 2] & 0xf;
      *o++ = static_cast<std::int8_t>(is_signed ? (nib ^ 8) - 8 : nib);
    }
  return out;
}

/// @brief Options of groupwise int4 weight quantization.
struct int4_options {
  int group_size = 128;  ///< G in {32, 64, 128}; K must be a multiple
  bool symmetric =
      true;  ///< symmetric: q in -8..7, real = q * scale; else q in 0..15 with a uint8 zero point
  bool narrow_range = true;  ///< symmetric only: scale = absmax / 7 (q in -7..7) or absmax / 7.5 (-8..7)
  quant::rounding_mode rounding = quant::rounding_mode::half_to_even;
};

/// @brief Groupwise int4 weights in the layout the CUDA weight-only kernel reads (W4A16).
///
/// The matrix is N x K (output channels x reduction), K a multiple of the group size G.
/// - `packed`: N rows of K/2 bytes; byte j of row n holds k = 2j in its low nibble (bits 0-3) and
///   k = 2j+1 in its high nibble (bits 4-7). Symmetric nibbles are two's complement -8..7; asymmetric
///   ones are unsigned 0..15.
/// - `scales`: fp16, N x (K/G) row-major, `scales[n * (K/G) + g]`.
/// - `zero_points`: uint8, same shape, asymmetric only (empty when symmetric); real = (q - zp) * scale.
struct int4_weights {
  std::size_t rows = 0;
  std::size_t cols = 0;
  int group_size = 128;
  bool symmetric = true;
  std::vector<std::uint8_t> packed;
  std::vector<half> scales;
  std::vector<std::uint8_t> zero_points;

  std::size_t groups_per_row() const noexcept { return cols / static_cast<std::size_t>(group_size); }
  /// @brief The integer at (n, k), as stored (signed for symmetric, unsigned for asymmetric).
  std::int32_t value(std::size_t n, std::size_t k) const noexcept {
    const std::uint8_t b = packed[n * (cols / 2) + k / 2];
    const std::int32_t nib = (k & 1) ? b >> 4 : b & 0xf;
    return symmetric ? (nib ^ 8) - 8 : nib;
  }
  /// @brief The real weight at (n, k).
  float dequantized(std::size_t n, std::size_t k) const noexcept {
    const std::size_t g = n * groups_per_row() + k / static_cast<std::size_t>(group_size);
    const std::int32_t zp = symmetric ? 0 : zero_points[g];
    return static_cast<float>(value(n, k) - zp) * static_cast<float>(scales[g]);
  }
  /// @brief Bytes of packed weights, fp16 scales and zero points.
  std::size_t memory_bytes() const noexcept {
    return packed.size() + scales.size() * sizeof(half) + zero_points.size();
  }
};

namespace detail {

/// Checks every field of an int4_weights against its shape (O(1): sizes only, not the values of the
/// scales or zero points): std::invalid_argument "who: weights.<field> ...".
inline void validate(const int4_weights& w, const char* who) {
  // The message is built only on error: these checks run on every GEMM call.
  const auto s = [who] { return std::string(who) + ": weights."; };
  if (w.group_size <= 0)
    throw std::invalid_argument(s() + "group_size must be > 0, not " + std::to_string(w.group_size));
  const auto g = static_cast<std::size_t>(w.group_size);
  if (w.cols % g != 0 || w.cols % 2 != 0)
    throw std::invalid_argument(s() + "cols (" + std::to_string(w.cols) +
                                ") must be even and a multiple of weights.group_size (" + std::to_string(g) +
                                ")");
  const std::size_t packed = checked_mul(w.rows, w.cols / 2, who, "weights.rows * weights.cols / 2");
  if (w.packed.size() != packed)
    throw std::invalid_argument(s() + "packed has " + std::to_string(w.packed.size()) +
                                " bytes, not N * K / 2 = " + std::to_string(packed));
  const std::size_t groups = w.rows * (w.cols / g);  // <= the product above
  if (w.scales.size() != groups)
    throw std::invalid_argument(s() + "scales has " + std::to_string(w.scales.size()) +
                                " entries, not N * K / group_size = " + std::to_string(groups));
  if (w.symmetric ? !w.zero_points.empty() : w.zero_points.size() != groups)
    throw std::invalid_argument(s() + "zero_points has " + std::to_string(w.zero_points.size()) +
                                " entries, not " + std::to_string(w.symmetric ? 0 : groups) +
                                (w.symmetric ? " (symmetric)" : " (one per group)"));
  checked_mul(w.rows, w.cols, who, "weights.rows * weights.cols");
}

}  // namespace detail

/// @brief Quantizes an N x K row-major weight matrix to groupwise int4 (torchao-style). Scales are
/// rounded to fp16 first, and the integers are computed with the rounded scale, so that dequantizing
/// with the stored fp16 scale is what the quantizer meant.
inline int4_weights quantize_int4(std::span<const float> w, std::size_t rows, std::size_t cols,
                                  const int4_options& opt = {}) {
  constexpr const char* who = "frugal::quant::quantize_int4";
  if (opt.group_size != 32 && opt.group_size != 64 && opt.group_size != 128)
    throw std::invalid_argument(std::string(who) + ": options.group_size must be 32, 64 or 128, not " +
                                std::to_string(opt.group_size));
  const scheme s{.type = element_type::i4,
                 .granularity = granularity::per_group,
                 .group_size = opt.group_size,
                 .symmetric = opt.symmetric,
                 .narrow_range = opt.narrow_range,
                 .rounding = opt.rounding};
  validate(s, rows, cols, who);
  detail::check_data_size(w.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(simd_path::automatic, who);
  const auto G = static_cast<std::size_t>(opt.group_size);
  const std::size_t runs = cols / G, ngroups = rows * runs;
  const std::int32_t lo = qmin(s), hi = qmax(s);
  int4_weights out;
  out.rows = rows;
  out.cols = cols;
  out.group_size = opt.group_size;
  out.symmetric = opt.symmetric;
  out.scales.resize(ngroups);
  if (!opt.symmetric) out.zero_points.resize(ngroups);
  out.packed.resize(rows * (cols / 2));
  std::vector<float> scale(runs);
  std::vector<std::int32_t> zp(runs);
  std::vector<detail::run_range> ranges(runs);
  std::vector<std::int8_t> row(cols);
  // Row by row, so the data is read from memory once: the ranges of the row's groups stream it in,
  // then it is quantized from L1 while the next row is prefetched.
  const float half_levels = static_cast<float>(hi - lo) / 2.0f;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = w.data() + r * cols;
    // Symmetric groups go one at a time from L1; a row with NaN, Inf or a scale fp16 cannot hold is
    // redone below, which reports it.
    if (opt.symmetric && detail::quantize_groups_symmetric(
                             lv, xr, G, runs, half_levels, 0, lo, hi, opt.rounding, row.data(), scale.data(),
                             reinterpret_cast<std::uint16_t*>(out.scales.data() + r * runs))) {
      detail::pack_nibbles_run(lv, row.data(), cols, out.packed.data() + r * (cols / 2));
      continue;
    }
    detail::range_runs(lv, s, xr, G, runs, ranges.data());
    for (std::size_t k = 0; k < runs; ++k) {
      const detail::run_range& rr = ranges[k];
      if (rr.first_nonfinite != G)
        detail::throw_nonfinite(who, (r * runs + k) * G + rr.first_nonfinite, xr[k * G + rr.first_nonfinite]);
      scale[k] = params_from_range(rr.lo, rr.hi, s).first;
    }
    // The scales of a row are rounded to fp16 and back in one vector pass: one at a time, the
    // software conversions cost as much as quantizing the group.
    const std::span<half> hs(out.scales.data() + r * runs, runs);
    convert(std::span<const float>(scale), hs);
    convert(std::span<const half>(hs), std::span<float>(scale));
    for (std::size_t k = 0; k < runs; ++k) {
      const std::size_t g = r * runs + k;
      if (!(scale[k] > 0.0f) || !std::isfinite(scale[k]))
        throw std::invalid_argument(std::string(who) + ": group " + std::to_string(g) +
                                    " needs a scale that fp16 cannot hold");
      zp[k] = 0;
      if (!opt.symmetric) {
        // The zero point is recomputed for the rounded scale: zp = qmin - round(min / scale).
        const float z = static_cast<float>(lo) - std::nearbyint(std::min(ranges[k].lo, 0.0f) / scale[k]);
        zp[k] = static_cast<std::int32_t>(std::clamp(z, static_cast<float>(lo), static_cast<float>(hi)));
        out.zero_points[g] = static_cast<std::uint8_t>(zp[k]);
      }
    }
    // The data is finite (checked above); every path gives quantize_value's integers.
    detail::quantize_runs(lv, xr, G, runs, scale.data(), zp.data(), lo, hi, opt.rounding, row.data(),
                          ranges.data(), r + 1 < rows ? xr + cols : nullptr);
    detail::pack_nibbles_run(lv, row.data(), cols, out.packed.data() + r * (cols / 2));
  }
  return out;
}

/// @brief quantize_int4 on an Eigen matrix (N x K).
inline int4_weights quantize_int4(const Eigen::Ref<const row_matrix>& w, const int4_options& opt = {}) {
  return detail::with_contiguous(w, [&](std::span<const float> d) {
    return quantize_int4(d, static_cast<std::size_t>(w.rows()), static_cast<std::size_t>(w.cols()), opt);
  });
}

/// @brief The real N x K weights of groupwise int4. Every field of `w` is checked first
/// (std::invalid_argument naming it): a group_size of 0 used to divide by zero.
inline row_matrix dequantize(const int4_weights& w) {
  detail::validate(w, "frugal::quant::dequantize");
  detail::check_index_shape(w.rows, w.cols, "frugal::quant::dequantize");
  row_matrix out(static_cast<Eigen::Index>(w.rows), static_cast<Eigen::Index>(w.cols));
  for (std::size_t n = 0; n < w.rows; ++n)
    for (std::size_t k = 0; k < w.cols; ++k)
      out(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k)) = w.dequantized(n, k);
  return out;
}

}  // namespace quant
FRUGAL_END_NAMESPACE
