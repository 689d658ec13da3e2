#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/detail/quantize_kernels.hpp"
#include "frugal/quant/scheme.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Scales and zero points of a scheme applied to one tensor, indexed as `param_index` says.
struct quant_params {
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;
};

/// @brief A quantized tensor: its integers, scales, zero points, scheme and shape.
///
/// i8 elements are stored as two's-complement bytes, u8 as bytes, one per element, row-major. i4 rows
/// are packed two per byte, ceil(cols/2) bytes per row: element 2j in the low nibble of byte j, 2j+1 in
/// the high nibble; symmetric i4 nibbles are two's complement (-8..7), asymmetric ones unsigned (0..15).
struct quantized_tensor {
  quant::scheme scheme;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;

  /// @brief Bytes per stored row.
  std::size_t row_bytes() const noexcept {
    return scheme.type == element_type::i4 ? detail::half_up(cols) : cols;
  }
  /// @brief The integer at (r, c).
  std::int32_t value(std::size_t r, std::size_t c) const noexcept {
    const std::uint8_t* row = data.data() + r * row_bytes();
    switch (scheme.type) {
      case element_type::i8:
        return static_cast<std::int8_t>(row[c]);
      case element_type::i4: {
        const std::int32_t nib = (c & 1) ? row[c / 2] >> 4 : row[c / 2] & 0xf;
        return scheme.symmetric ? (nib ^ 8) - 8 : nib;
      }
      default:
        return row[c];
    }
  }
  /// @brief The real value ONNX DequantizeLinear gives for (r, c).
  float dequantized(std::size_t r, std::size_t c) const noexcept {
    const std::size_t p = param_index(scheme, cols, r, c);
    return static_cast<float>(value(r, c) - zero_points[p]) * scales[p];
  }
  /// @brief Memory of the integers, the fp32 scales and (asymmetric only) the int32 zero points.
  std::size_t memory_bytes() const noexcept {
    return data.size() + scales.size() * sizeof(float) +
           (scheme.symmetric ? 0 : zero_points.size() * sizeof(std::int32_t));
  }
};

namespace detail {
// params_from_range over the integer range [qlo, qhi] instead of the scheme's own (quantize_rows'
// reduce_range asks for 7 bits of an i8 scheme).
inline std::pair<float, std::int32_t> params_for_levels(float lo, float hi, const scheme& s, std::int32_t qlo,
                                                        std::int32_t qhi) {
  if (std::isnan(lo) || std::isnan(hi) || lo == -std::numeric_limits<float>::infinity() ||
      hi == std::numeric_limits<float>::infinity())
    throw std::invalid_argument("frugal::quant::params_from_range: the range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "] is NaN or infinite; no finite scale covers it");
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  const float levels = static_cast<float>(qhi - qlo);
  if (s.symmetric) {
    float scale = std::max(-lo, hi) / (levels / 2.0f);
    if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
    return {scale, symmetric_zero_point(s)};
  }
  float scale = hi / levels - lo / levels;
  if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
  const float zp = static_cast<float>(qlo) - std::nearbyint(lo / scale);
  return {scale, static_cast<std::int32_t>(std::clamp(zp, static_cast<float>(qlo), static_cast<float>(qhi)))};
}
}  // namespace detail

/// @brief The scale and zero point for the real range [lo, hi], widened to include 0 (gemmlowp).
/// Symmetric: scale = max(|lo|, |hi|) / ((qmax - qmin) / 2) (absmax/127 for narrow i8), fixed zero point.
/// Asymmetric: scale = (hi - lo) / (qmax - qmin), zero_point = qmin - round(lo / scale), clamped.
/// A range of zero width gets scale 1 so that zero stays exact; so does the empty range lo = +Inf,
/// hi = -Inf (what a min-max over no finite value holds), which widens to [0, 0].
/// NaN in either bound, lo = -Inf or hi = +Inf (a range no finite scale covers) is std::invalid_argument:
/// such a range used to give scale 1 silently, and a zero point cast from an infinite value.
inline std::pair<float, std::int32_t> params_from_range(float lo, float hi, const scheme& s) {
  return detail::params_for_levels(lo, hi, s, qmin(s), qmax(s));
}

/// @brief Min-max quantization parameters of a rows x cols row-major tensor under scheme `s`.
inline quant_params choose_params(std::span<const float> data, std::size_t rows, std::size_t cols,
                                  const scheme& s, simd_path path = simd_path::automatic) {
  constexpr const char* who = "frugal::quant::choose_params";
  validate(s, rows, cols, who);
  detail::check_data_size(data.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  const std::size_t np = param_count(s, rows, cols);
  std::vector<float> lo(np, std::numeric_limits<float>::infinity()),
      hi(np, -std::numeric_limits<float>::infinity());
  if (s.granularity == granularity::per_channel && s.axis == 1) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      const float v = data[i];
      if (!std::isfinite(v)) {
        if (s.nonfinite == nonfinite_policy::error) detail::throw_nonfinite(who, i, v);
        continue;
      }
      lo[i % cols] = std::min(lo[i % cols], v);
      hi[i % cols] = std::max(hi[i % cols], v);
    }
  } else {
    detail::for_each_run(s, rows, cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
      const float* x = data.data() + r * cols + c;
      const detail::run_range rr = detail::range_run(lv, s, x, n);
      if (rr.first_nonfinite != n && s.nonfinite == nonfinite_policy::error)
        detail::throw_nonfinite(who, r * cols + c + rr.first_nonfinite, x[rr.first_nonfinite]);
      lo[p] = std::min(lo[p], rr.lo);
      hi[p] = std::max(hi[p], rr.hi);
    });
  }
  quant_params out;
  out.scales.resize(np);
  out.zero_points.resize(np);
  for (std::size_t p = 0; p < np; ++p)
    std::tie(out.scales[p], out.zero_points[p]) = params_from_range(lo[p], hi[p], s);
  return out;
}

/// @brief Throws std::invalid_argument naming the first bad scale or zero point.
inline void validate_params(const quant_params& p, const scheme& s, std::size_t rows, std::size_t cols,
                            const char* who) {
  const std::string w(who);
  const std::size_t np = param_count(s, rows, cols);
  if (p.scales.size() != np)
    throw std::invalid_argument(w + ": params.scales has " + std::to_string(p.scales.size()) +
                                " entries, the scheme needs " + std::to_string(np));
  if (p.zero_points.size() != np)
    throw std::invalid_argument(w + ": params.zero_points has " + std::to_string(p.zero_points.size()) +
                                " entries, the scheme needs " + std::to_string(np));
  for (std::size_t i = 0; i < np; ++i)
    if (!(p.scales[i] > 0.0f) || !std::isfinite(p.scales[i]))
      throw std::invalid_argument(w + ": params.scales[" + std::to_string(i) +
                                  "] = " + std::to_string(p.scales[i]) + " must be finite and > 0");
  for (std::size_t i = 0; i < np; ++i)
    if (p.zero_points[i] < qmin(s) || p.zero_points[i] > qmax(s))
      throw std::invalid_argument(w + ": params.zero_points[" + std::to_string(i) +
                                  "] = " + std::to_string(p.zero_points[i]) + " is outside [" +
                                  std::to_string(qmin(s)) + ", " + std::to_string(qmax(s)) + "]");
}

namespace detail {
// One row of a per-column scheme: element c with params.scales[c] and params.zero_points[c].
// validate_params checked that there are cols of each; bounding the loop by their size as well lets
// GCC see it (else -Warray-bounds misfires once this is inlined next to a short params vector).
// Returns the index of the first non-finite value (cols if none).
inline std::size_t quantize_columns(const float* x, std::size_t cols, const quant_params& params,
                                    std::int32_t lo, std::int32_t hi, rounding_mode m,
                                    std::int8_t* out) noexcept {
  const std::size_t n = std::min({cols, params.scales.size(), params.zero_points.size()});
  const float* scales = params.scales.data();
  const std::int32_t* zps = params.zero_points.data();
  std::size_t bad = cols;
  for (std::size_t c = 0; c < n; ++c) {
    if (bad == cols && !is_finite_bits(x[c])) bad = c;
    out[c] = static_cast<std::int8_t>(
        static_cast<std::uint8_t>(quantize_value(x[c], scales[c], zps[c], lo, hi, m)));
  }
  return bad;
}

// quantize with parameters; known_finite: the caller has checked that the data holds no NaN or Inf.
inline quantized_tensor quantize_with_params(std::span<const float> data, std::size_t rows, std::size_t cols,
                                             const scheme& s, quant_params params, simd_path path,
                                             bool known_finite) {
  constexpr const char* who = "frugal::quant::quantize";
  validate(s, rows, cols, who);
  check_data_size(data.size(), rows, cols, who);
  validate_params(params, s, rows, cols, who);
  const auto lv = resolve_float_level(path, who);
  quantized_tensor q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(rows * q.row_bytes());
  const auto lo = qmin(s), hi = qmax(s);
  const bool packed = s.type == element_type::i4;
  std::vector<std::int8_t> row_tmp(packed ? cols : 0);
  if (s.granularity == granularity::per_channel && s.axis == 1) {
    for (std::size_t r = 0; r < rows; ++r) {
      auto* out = packed ? row_tmp.data() : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols);
      const std::size_t bad = quantize_columns(data.data() + r * cols, cols, params, lo, hi, s.rounding, out);
      if (bad != cols && s.nonfinite == nonfinite_policy::error)
        throw_nonfinite(who, r * cols + bad, data[r * cols + bad]);
      if (packed) pack_nibbles_run(lv, row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
    }
  } else {
    // Row by row, run k of row r with parameter r * runs + k (per-tensor: parameter 0 for every run).
    const std::size_t n =
        s.granularity == granularity::per_group ? static_cast<std::size_t>(s.group_size) : cols;
    const std::size_t runs = n == 0 ? 1 : cols / n;
    const bool shared = s.granularity == granularity::per_tensor;
    const std::vector<run_range> finite(known_finite ? runs : 0, run_range{0.0f, 0.0f, n});
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = data.data() + r * cols;
      auto* out = packed ? row_tmp.data() : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols);
      const std::size_t p = shared ? 0 : r * runs;
      const std::size_t bad = quantize_runs(lv, row, n, shared ? 1 : runs, params.scales.data() + p,
                                            params.zero_points.data() + p, lo, hi, s.rounding, out,
                                            known_finite ? finite.data() : nullptr, nullptr);
      if (bad != (shared ? n : n * runs) && s.nonfinite == nonfinite_policy::error)
        throw_nonfinite(who, r * cols + bad, row[bad]);
      if (packed) pack_nibbles_run(lv, row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
    }
  }
  q.scales = std::move(params.scales);
  q.zero_points = std::move(params.zero_points);
  return q;
}
}  // namespace detail

/// @brief Quantizes a rows x cols row-major tensor with the given parameters (ONNX QuantizeLinear:
/// saturate(round(x / scale) + zero_point)).
inline quantized_tensor quantize(std::span<const float> data, std::size_t rows, std::size_t cols,
                                 const scheme& s, quant_params params,
                                 simd_path path = simd_path::automatic) {
  return detail::quantize_with_params(data, rows, cols, s, std::move(params), path, false);
}

/// @brief Quantizes with min-max parameters (choose_params), the dynamic quantization of PyTorch/ONNX.
/// Per-row and per-group parameters are computed run by run, while the run is still in cache, so the
/// data is read from memory once; per-tensor and per-column ones need the whole range first. Symmetric
/// 8-bit groups with an output of 4 MiB or more are written with non-temporal stores (x86 SIMD paths):
/// faster to write, and not left in cache for the next reader.
inline quantized_tensor quantize(std::span<const float> data, std::size_t rows, std::size_t cols,
                                 const scheme& s, simd_path path = simd_path::automatic) {
  const bool fused =
      s.granularity == granularity::per_group || (s.granularity == granularity::per_channel && s.axis == 0);
  // choose_params has thrown on NaN or Inf unless the policy lets them through.
  if (!fused)
    return detail::quantize_with_params(data, rows, cols, s, choose_params(data, rows, cols, s, path), path,
                                        s.nonfinite == nonfinite_policy::error);
  constexpr const char* who = "frugal::quant::quantize";
  validate(s, rows, cols, who);
  detail::check_data_size(data.size(), rows, cols, who);
  const auto lv = detail::resolve_float_level(path, who);
  quantized_tensor q;
  q.scheme = s;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(rows * q.row_bytes());
  const std::size_t np = param_count(s, rows, cols);
  q.scales.resize(np);
  q.zero_points.resize(np);
  const auto lo = qmin(s), hi = qmax(s);
  const bool packed = s.type == element_type::i4;
  std::vector<std::int8_t> row_tmp(packed ? cols : 0);
  // Row by row: the min-max of every run of the row streams it from memory, then the row is quantized
  // from L1. Parameter p of run k of row r is r * runs + k (one run per row for per-channel).
  const std::size_t n =
      s.granularity == granularity::per_group ? static_cast<std::size_t>(s.group_size) : cols;
  const std::size_t runs = n == 0 ? 1 : cols / n;
  std::vector<detail::run_range> ranges(runs);
  // Symmetric groups go group by group, each read from memory once and quantized from L1.
  const bool by_group = s.symmetric && s.granularity == granularity::per_group;
  const float half_levels = static_cast<float>(hi - lo) / 2.0f;
  const std::int32_t szp = symmetric_zero_point(s);
  const bool stream = !packed && q.data.size() >= detail::stream_bytes;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = data.data() + r * cols;
    auto* out = packed ? row_tmp.data() : reinterpret_cast<std::int8_t*>(q.data.data() + r * cols);
    if (by_group && detail::quantize_groups_symmetric(lv, row, n, runs, half_levels, szp, lo, hi, s.rounding,
                                                      out, q.scales.data() + r * runs, nullptr, stream)) {
      std::fill_n(q.zero_points.data() + r * runs, runs, szp);
      if (packed) detail::pack_nibbles_run(lv, row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
      continue;
    }
    detail::range_runs(lv, s, row, n, runs, ranges.data());
    for (std::size_t k = 0; k < runs; ++k) {
      const detail::run_range& rr = ranges[k];
      if (rr.first_nonfinite != n && s.nonfinite == nonfinite_policy::error)
        detail::throw_nonfinite(who, r * cols + k * n + rr.first_nonfinite, row[k * n + rr.first_nonfinite]);
      std::tie(q.scales[r * runs + k], q.zero_points[r * runs + k]) = params_from_range(rr.lo, rr.hi, s);
    }
    // While this row is quantized from L1, the next one is fetched for its min-max.
    detail::quantize_runs(lv, row, n, runs, q.scales.data() + r * runs, q.zero_points.data() + r * runs, lo,
                          hi, s.rounding, out, ranges.data(), r + 1 < rows ? row + cols : nullptr);
    if (packed) detail::pack_nibbles_run(lv, row_tmp.data(), cols, q.data.data() + r * q.row_bytes());
  }
  return q;
}

namespace detail {
// A quantized_tensor is a plain aggregate (it may come from disk): check it against its own shape.
inline void validate(const quantized_tensor& q, const char* who) {
  validate(q.scheme, q.rows, q.cols, who);
  checked_mul(q.rows, q.cols, who, "rows * cols");
  const std::size_t need = checked_mul(q.rows, q.row_bytes(), who, "rows * row_bytes()");
  if (q.data.size() != need)
    throw std::invalid_argument(std::string(who) + ": data has " + std::to_string(q.data.size()) +
                                " bytes, the shape needs rows * row_bytes() = " + std::to_string(need));
  validate_params(quant_params{q.scales, q.zero_points}, q.scheme, q.rows, q.cols, who);
}
}  // namespace detail

/// @brief Dequantizes into `out` (rows * cols floats): ONNX DequantizeLinear, (q - zero_point) * scale.
/// Every field of `q` is checked against its shape first (std::invalid_argument naming the field).
inline void dequantize(const quantized_tensor& q, std::span<float> out,
                       simd_path path = simd_path::automatic) {
  constexpr const char* who = "frugal::quant::dequantize";
  detail::validate(q, who);
  detail::check_data_size(out.size(), q.rows, q.cols, who);
  const scheme& s = q.scheme;
  const auto lv = detail::resolve_float_level(path, who);
  if (s.type == element_type::i4 || (s.granularity == granularity::per_channel && s.axis == 1)) {
    for (std::size_t r = 0; r < q.rows; ++r)
      for (std::size_t c = 0; c < q.cols; ++c) out[r * q.cols + c] = q.dequantized(r, c);
    return;
  }
  const bool is_unsigned = s.type == element_type::u8;
  detail::for_each_run(s, q.rows, q.cols, [&](std::size_t r, std::size_t c, std::size_t n, std::size_t p) {
    const auto* src = reinterpret_cast<const std::int8_t*>(q.data.data() + r * q.cols + c);
    detail::dequantize_run(lv, src, is_unsigned, n, q.scales[p], q.zero_points[p],
                           out.data() + r * q.cols + c);
  });
}

/// @brief Dequantizes into a new rows x cols matrix.
inline row_matrix dequantize(const quantized_tensor& q) {
  detail::validate(q, "frugal::quant::dequantize");  // before the shape sizes an allocation
  detail::check_index_shape(q.rows, q.cols, "frugal::quant::dequantize");
  row_matrix out(static_cast<Eigen::Index>(q.rows), static_cast<Eigen::Index>(q.cols));
  dequantize(q, std::span<float>(out.data(), q.rows * q.cols));
  return out;
}

namespace detail {
// A Ref may have an outer stride; the toolkit works on contiguous rows.
template <class F>
decltype(auto) with_contiguous(const Eigen::Ref<const row_matrix>& x, F&& f) {
  if (x.outerStride() == x.cols() || x.rows() <= 1)
    return f(std::span<const float>(x.data(), static_cast<std::size_t>(x.size())));
  const row_matrix copy = x;
  return f(std::span<const float>(copy.data(), static_cast<std::size_t>(copy.size())));
}
}  // namespace detail

/// @brief Quantizes an Eigen matrix (any storage order; a column-major one is copied to row-major).
inline quantized_tensor quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s) {
  return detail::with_contiguous(x, [&](std::span<const float> d) {
    return quantize(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()), s);
  });
}

/// @brief Quantizes an Eigen matrix with the given parameters.
inline quantized_tensor quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s,
                                 quant_params params) {
  return detail::with_contiguous(x, [&](std::span<const float> d) {
    return quantize(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()), s,
                    std::move(params));
  });
}

/// @brief Quantizes then dequantizes (for accuracy studies): the values the scheme can represent.
inline row_matrix fake_quantize(const Eigen::Ref<const row_matrix>& x, const scheme& s) {
  return dequantize(quantize(x, s));
}

/// @brief fake_quantize on a span, writing rows * cols floats to `out`.
inline void fake_quantize(std::span<const float> data, std::size_t rows, std::size_t cols, const scheme& s,
                          std::span<float> out) {
  dequantize(quantize(data, rows, cols, s), out);
}

}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#include "frugal/detail/macro_unscope.hpp"
