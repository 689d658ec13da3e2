#pragma once

// The seam between the host toolkit and the GPU: quant::quantized_weights (W8A8) and quant::int4_weights
// (W4A16) become device buffers and the weight half of ready GEMM arguments. The layout agreement lives in
// two pure host functions, make_w8a8_arguments and make_w4a16_arguments, which check the host struct and
// fill the arguments from given device pointers; they need no device, so tests/cuda checks them everywhere.
// upload() copies and then calls them, so there is one place where the fields are matched.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>

#include "frugal/cuda/errors.cuh"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/gemm/device/checks.cuh"
#include "frugal/cuda/memory.cuh"
#include "frugal/namespace.hpp"

// Eigen 3.4 itself trips nvcc's warning 20012 (__host__ on a defaulted function); it is not ours.
#if defined(__NVCC__)
#  pragma nv_diagnostic push
#  pragma nv_diag_suppress 20012
#endif
#include "frugal/quant/gemm.hpp"
#include "frugal/quant/int4.hpp"
#if defined(__NVCC__)
#  pragma nv_diagnostic pop
#endif

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

/// @brief Device copies of a quantized_weights' fields, as make_w8a8_arguments reads them.
struct w8a8_weight_pointers {
  const std::int8_t* data = nullptr;       ///< N x K int8, row-major (quantized_weights::data)
  const float* scales = nullptr;           ///< [N] (quantized_weights::scales)
  const std::int32_t* col_sums = nullptr;  ///< [N] (quantized_weights::col_sums); null: symmetric A only
  const float* bias = nullptr;             ///< optional [N]
};

/// @brief Device copies of an int4_weights' fields, as make_w4a16_arguments reads them.
struct w4a16_weight_pointers {
  const std::uint8_t* packed = nullptr;       ///< N rows of K/2 bytes (int4_weights::packed)
  const __half* scales = nullptr;             ///< N x K/G fp16 (int4_weights::scales, bit for bit)
  const std::uint8_t* zero_points = nullptr;  ///< N x K/G, asymmetric weights only
  const float* bias = nullptr;                ///< optional [N]
};

namespace detail {
inline status check_dimension(const char* op, const char* name, std::size_t v) {
  if (v == 0 || v > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return fail(cuda_errc::invalid_problem, op,
                std::string(name) + " = " + std::to_string(v) + " is out of range (1 .. INT_MAX)");
  return status::ok();
}

inline status check_count(const char* op, const char* field, std::size_t got, std::size_t want) {
  if (got != want)
    return fail(cuda_errc::invalid_problem, op,
                std::string(field) + " holds " + std::to_string(got) + " elements, the shape needs " +
                    std::to_string(want));
  return status::ok();
}
}  // namespace detail

namespace detail {
inline status check_w8a8_weights(const char* op, const quant::quantized_weights& w) {
  if (auto s = check_dimension(op, "weights.rows (N)", w.rows); !s) return s;
  if (auto s = check_dimension(op, "weights.cols (K)", w.cols); !s) return s;
  if (auto s = check_count(op, "weights.data", w.data.size(), w.rows * w.cols); !s) return s;
  if (auto s = check_count(op, "weights.scales", w.scales.size(), w.rows); !s) return s;
  if (!w.col_sums.empty()) return check_count(op, "weights.col_sums", w.col_sums.size(), w.rows);
  return status::ok();
}
}  // namespace detail

/// @brief Fills the weight half of `out` (n, k, b, ldb, scale_b, colsum_b, bias) from `w`'s shape and the
/// device copies `p` of its fields; the activation half (m, a, lda, scale_a, zero_a) and the output are the
/// caller's. Checks every field's size against the shape and that `p` holds what the shape needs; the GEMM's
/// own can_implement still judges alignment and the device. Touches no device.
inline status make_w8a8_arguments(const quant::quantized_weights& w, const w8a8_weight_pointers& p,
                                  gemm_w8a8_arguments& out) {
  constexpr const char* op = "make_w8a8_arguments";
  if (auto s = detail::check_w8a8_weights(op, w); !s) return s;
  if (p.data == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "data is null");
  if (p.scales == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "scales is null");
  out.n = static_cast<int>(w.rows);
  out.k = static_cast<int>(w.cols);
  out.b = p.data;
  out.ldb = out.k;
  out.scale_b = p.scales;
  out.colsum_b = p.col_sums;
  out.bias = p.bias;
  return status::ok();
}

namespace detail {
inline status check_w4a16_weights(const char* op, const quant::int4_weights& w) {
  if (auto s = check_dimension(op, "weights.rows (N)", w.rows); !s) return s;
  if (auto s = check_dimension(op, "weights.cols (K)", w.cols); !s) return s;
  if (w.group_size <= 0 || w.cols % static_cast<std::size_t>(w.group_size) != 0 || w.cols % 2 != 0)
    return fail(cuda_errc::unsupported_group, op,
                "K (" + std::to_string(w.cols) + ") must be even and a multiple of group_size (" +
                    std::to_string(w.group_size) + ")");
  const std::size_t groups = w.rows * w.groups_per_row();
  if (auto s = check_count(op, "weights.packed", w.packed.size(), w.rows * (w.cols / 2)); !s) return s;
  if (auto s = check_count(op, "weights.scales", w.scales.size(), groups); !s) return s;
  return check_count(op, "weights.zero_points", w.zero_points.size(), w.symmetric ? 0 : groups);
}
}  // namespace detail

/// @brief Fills the weight half of `out` (n, k, w, ldw, group_size, scale, zero_point, bias) from `w` and the
/// device copies `p` of its fields, as make_w8a8_arguments does for int8. Touches no device.
inline status make_w4a16_arguments(const quant::int4_weights& w, const w4a16_weight_pointers& p,
                                   gemm_w4a16_arguments& out) {
  constexpr const char* op = "make_w4a16_arguments";
  if (auto s = detail::check_w4a16_weights(op, w); !s) return s;
  if (p.packed == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "packed is null");
  if (p.scales == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "scales is null");
  if (!w.symmetric && p.zero_points == nullptr)
    return detail::fail(cuda_errc::invalid_pointer, op, "asymmetric weights need zero_points");
  out.n = static_cast<int>(w.rows);
  out.k = static_cast<int>(w.cols);
  out.w = p.packed;
  out.ldw = static_cast<int>(w.cols / 2);
  out.group_size = w.group_size;
  out.scale = p.scales;
  out.zero_point = w.symmetric ? nullptr : p.zero_points;
  out.bias = p.bias;
  return status::ok();
}

/// @brief A quantized_weights on the device, and the W8A8 arguments that read it.
struct device_w8a8_weights {
  device_buffer<std::int8_t> data;
  device_buffer<float> scales;
  device_buffer<std::int32_t> col_sums;
  device_buffer<float> bias;
  gemm_w8a8_arguments arguments;  ///< weight half filled by make_w8a8_arguments; set m, a, scale_a, c
  /// @brief Bytes held on the device.
  std::size_t bytes() const noexcept {
    return data.size() + (scales.size() + bias.size()) * sizeof(float) +
           col_sums.size() * sizeof(std::int32_t);
  }
};

/// @brief An int4_weights on the device, and the W4A16 arguments that read it.
struct device_w4a16_weights {
  device_buffer<std::uint8_t> packed;
  device_buffer<__half> scales;
  device_buffer<std::uint8_t> zero_points;
  device_buffer<float> bias;
  gemm_w4a16_arguments arguments;  ///< weight half filled by make_w4a16_arguments; set m, x, c
  /// @brief Bytes held on the device.
  std::size_t bytes() const noexcept {
    return packed.size() + scales.size() * sizeof(__half) + zero_points.size() + bias.size() * sizeof(float);
  }
};

namespace detail {
template <class T, class U = T>
inline status upload_field(std::span<const U> host, device_buffer<T>& out, const char* what) {
  static_assert(sizeof(T) == sizeof(U));
  if (host.empty()) return status::ok();
  if (auto s = device_buffer<T>::create(host.size(), out); !s) return s;
  return cuda_status(cudaMemcpy(out.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice), what);
}
}  // namespace detail

/// @brief Uploads `w` (and `bias`, N floats or empty) to the current device into `out`, whose arguments
/// make_w8a8_arguments then fills. Synchronous; on failure `out` holds no usable arguments.
inline status upload(const quant::quantized_weights& w, std::span<const float> bias,
                     device_w8a8_weights& out) {
  out = {};
  if (!bias.empty() && bias.size() != w.rows)
    return detail::fail(
        cuda_errc::invalid_problem, "upload",
        "bias has " + std::to_string(bias.size()) + " entries for N = " + std::to_string(w.rows));
  if (auto s = detail::check_w8a8_weights("upload", w); !s) return s;  // before anything is allocated
  if (auto s = detail::upload_field<std::int8_t>(std::span(w.data), out.data, "cudaMemcpy(weights)"); !s)
    return s;
  if (auto s = detail::upload_field<float>(std::span(w.scales), out.scales, "cudaMemcpy(scales)"); !s)
    return s;
  if (auto s =
          detail::upload_field<std::int32_t>(std::span(w.col_sums), out.col_sums, "cudaMemcpy(col_sums)");
      !s)
    return s;
  if (auto s = detail::upload_field<float>(bias, out.bias, "cudaMemcpy(bias)"); !s) return s;
  return make_w8a8_arguments(w,
                             {.data = out.data.data(),
                              .scales = out.scales.data(),
                              .col_sums = out.col_sums.size() ? out.col_sums.data() : nullptr,
                              .bias = out.bias.size() ? out.bias.data() : nullptr},
                             out.arguments);
}

/// @brief Uploads `w` (and `bias`) to the current device into `out`, as the W8A8 upload does.
inline status upload(const quant::int4_weights& w, std::span<const float> bias, device_w4a16_weights& out) {
  out = {};
  if (!bias.empty() && bias.size() != w.rows)
    return detail::fail(
        cuda_errc::invalid_problem, "upload",
        "bias has " + std::to_string(bias.size()) + " entries for N = " + std::to_string(w.rows));
  static_assert(sizeof(quant::half) == sizeof(__half), "fp16 scales are copied bit for bit");
  if (auto s = detail::check_w4a16_weights("upload", w); !s) return s;
  if (auto s = detail::upload_field<std::uint8_t>(std::span(w.packed), out.packed, "cudaMemcpy(packed)"); !s)
    return s;
  if (auto s =
          detail::upload_field<__half, quant::half>(std::span(w.scales), out.scales, "cudaMemcpy(scales)");
      !s)
    return s;
  if (auto s = detail::upload_field<std::uint8_t>(std::span(w.zero_points), out.zero_points,
                                                  "cudaMemcpy(zero_points)");
      !s)
    return s;
  if (auto s = detail::upload_field<float>(bias, out.bias, "cudaMemcpy(bias)"); !s) return s;
  return make_w4a16_arguments(w,
                              {.packed = out.packed.data(),
                               .scales = out.scales.data(),
                               .zero_points = out.zero_points.size() ? out.zero_points.data() : nullptr,
                               .bias = out.bias.size() ? out.bias.data() : nullptr},
                              out.arguments);
}

}  // namespace cuda
FRUGAL_END_NAMESPACE
