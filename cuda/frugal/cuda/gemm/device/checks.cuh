#pragma once

// Host-side checks shared by frugal's GEMMs and the cuBLASLt baselines, so that both judge an output the same
// way.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frugal/cuda/errors.cuh"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/gemm/kernel/epilogue.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::detail {

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

inline status fail(cuda_errc c, const char* op, const std::string& what) {
  return make_status(c, std::string("frugal::cuda::") + op + ": " + what);
}

inline std::size_t bytes_of(element_type t) { return static_cast<std::size_t>(element_bits(t)) / 8; }

/// @brief C non-null, ldc >= N, and C aligned to its element type, which is a whole number of bytes.
inline status check_output(const char* op, const void* c, int ldc, int n, element_type t) {
  if (c == nullptr) return fail(cuda_errc::invalid_pointer, op, "c is null");
  if (bytes_of(t) == 0)
    return fail(cuda_errc::unsupported_type, op,
                std::string("output type ") + to_string(t) + " is not supported");
  if (ldc < n)
    return fail(cuda_errc::invalid_problem, op,
                "ldc (" + std::to_string(ldc) + ") is smaller than N (" + std::to_string(n) + ")");
  if (!aligned(c, bytes_of(t)))
    return fail(cuda_errc::misaligned_operand, op,
                std::string("c is not aligned to its element type ") + to_string(t));
  return status::ok();
}

/// @brief Whether the epilogue may store columns n, n+1 (n even) as one two-element vector: every row starts
/// on an even element and C itself is aligned to two elements.
inline bool pair_store_ok(const void* c, int ldc, element_type t) {
  return ldc % 2 == 0 && aligned(c, 2 * bytes_of(t));
}

/// @brief The device epilogue implements none, relu and gelu (tanh); the host toolkit's gelu_erf is refused
/// here, by name, instead of running as the identity.
inline status check_activation(const char* op, quant::activation_kind act) {
  switch (act) {
    case quant::activation_kind::none:
    case quant::activation_kind::relu:
    case quant::activation_kind::gelu:
      return status::ok();
    case quant::activation_kind::gelu_erf:
      break;
  }
  return fail(cuda_errc::unsupported_activation, op,
              std::string("activation ") + quant::to_string(act) +
                  " is not implemented on the GPU (none, relu and gelu, the tanh form, are)");
}

// The W8A8 dequant epilogue of `a`, one for frugal's kernels and the cuBLASLt baseline, so both store alike.
inline kernel::epilogue_params w8a8_epilogue(const gemm_w8a8_arguments& a) {
  return {.scale_a = a.scale_a,
          .scale_b = a.scale_b,
          .zero_a = a.zero_a,
          .colsum_b = a.colsum_b,
          .bias = a.bias,
          .alpha = 1.0f,
          .act = a.act,
          .c = a.c,
          .ldc = a.ldc,
          .c_type = a.c_type,
          .pair_store = pair_store_ok(a.c, a.ldc, a.c_type)};
}
}  // namespace cuda::detail
FRUGAL_END_NAMESPACE
