#pragma once

// Host-side checks shared by frugal's GEMMs and the cuBLASLt baselines, so that both judge an output the same
// way.
#include <cstddef>
#include <cstdint>
#include <string>

#include "frugal/config.hpp"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/status.cuh"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::detail {

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

inline status fail(status_code c, const char* op, const std::string& what) {
  return make_status(c, std::string("frugal::cuda::") + op + ": " + what);
}

/// @brief C non-null, ldc >= N, and C aligned to its element type.
inline status check_output(const char* op, const void* c, int ldc, int n, dtype t) {
  if (c == nullptr) return fail(status_code::invalid_pointer, op, "c is null");
  if (ldc < n)
    return fail(status_code::invalid_problem, op,
                "ldc (" + std::to_string(ldc) + ") is smaller than N (" + std::to_string(n) + ")");
  if (!aligned(c, size_of(t)))
    return fail(status_code::misaligned_operand, op,
                std::string("c is not aligned to its element type ") + to_string(t));
  return status::ok();
}

/// @brief Whether the epilogue may store columns n, n+1 (n even) as one two-element vector: every row starts
/// on an even element and C itself is aligned to two elements.
inline bool pair_store_ok(const void* c, int ldc, dtype t) {
  return ldc % 2 == 0 && aligned(c, 2 * size_of(t));
}

}  // namespace cuda::detail
FRUGAL_END_NAMESPACE
