#pragma once

// Checked size arithmetic for the public boundaries of the quantization toolkit: a product of sizes
// that wraps would turn a size check into an out-of-bounds access.

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

/// a * b, or std::invalid_argument "who: what = a * b overflows size_t".
inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* who, const char* what) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b)
    throw std::invalid_argument(std::string(who) + ": " + what + " = " + std::to_string(a) + " * " +
                                std::to_string(b) + " overflows size_t");
  return a * b;
}

/// Throws std::invalid_argument unless rows and cols fit Eigen::Index (ptrdiff_t): an empty tensor
/// of 0 x 2^63 passes every size check, and its cast to a negative Eigen dimension is undefined.
inline void check_index_shape(std::size_t rows, std::size_t cols, const char* who) {
  constexpr auto max = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  if (rows > max || cols > max)
    throw std::invalid_argument(std::string(who) + ": a " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " matrix does not fit Eigen::Index");
}

/// ceil(x / 2) without the overflow of (x + 1) / 2.
inline constexpr std::size_t half_up(std::size_t x) noexcept { return x / 2 + (x & 1); }

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
