#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/checked.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief How many tensor elements share one scale (and zero point).
enum class granularity {
  per_tensor,   ///< one scale for the whole tensor
  per_channel,  ///< one scale per row (axis 0) or per column (axis 1)
  per_group,    ///< one scale per `group_size` consecutive elements of a row (the reduction axis)
};

/// @brief How x / scale is rounded to an integer.
enum class rounding_mode {
  half_to_even,         ///< ONNX, numpy.rint, FBGEMM's nearbyint: 2.5 -> 2, -2.5 -> -2
  half_away_from_zero,  ///< std::round: 2.5 -> 3, -2.5 -> -3
};

/// @brief What to do with NaN or Inf in the data.
enum class nonfinite_policy {
  error,     ///< std::invalid_argument naming the first bad index
  saturate,  ///< +-Inf saturate to the ends of the range, NaN becomes 0 (the zero point)
};

/// @brief A quantization scheme. Tensors are 2-D row-major (rows x cols); a vector is 1 x n. For a
/// weight matrix N x K (output channels x reduction), per-channel is axis 0 and groups run along K.
struct scheme {
  element_type type = element_type::i8;  ///< i8, u8 or i4
  quant::granularity granularity = quant::granularity::per_tensor;
  int axis = 0;              ///< per_channel: 0 = one scale per row, 1 = one per column
  int group_size = 0;        ///< per_group: elements per group along a row; cols must be a multiple
  bool symmetric = true;     ///< symmetric: zero point fixed (0, or 128 for u8); else from the range
  bool narrow_range = true;  ///< symmetric i8: -127..127 if true, -128..127 if false (i4: -7..7 / -8..7)
  quant::rounding_mode rounding = quant::rounding_mode::half_to_even;
  nonfinite_policy nonfinite = nonfinite_policy::error;
};

/// @brief The smallest integer the scheme produces. Asymmetric i4 is unsigned 0..15, as the int4
/// weight layout stores it.
inline constexpr std::int32_t qmin(const scheme& s) noexcept {
  switch (s.type) {
    case element_type::i8:
      return s.symmetric && s.narrow_range ? -127 : -128;
    case element_type::u8:
      return s.symmetric && s.narrow_range ? 1 : 0;
    case element_type::i4:
      return !s.symmetric ? 0 : s.narrow_range ? -7 : -8;
    default:
      return 0;
  }
}

/// @brief The largest integer the scheme produces.
inline constexpr std::int32_t qmax(const scheme& s) noexcept {
  switch (s.type) {
    case element_type::i8:
      return 127;
    case element_type::u8:
      return 255;
    case element_type::i4:
      return s.symmetric ? 7 : 15;
    default:
      return 0;
  }
}

/// @brief The zero point of a symmetric scheme.
inline constexpr std::int32_t symmetric_zero_point(const scheme& s) noexcept {
  return s.type == element_type::u8 ? 128 : 0;
}

/// @brief Throws std::invalid_argument, naming the field, if the scheme cannot quantize a rows x cols
/// tensor: an enum outside its values, an axis other than 0 or 1, a group size <= 0 or not dividing cols.
inline void validate(const scheme& s, std::size_t rows, std::size_t cols, const char* who) {
  const std::string w(who);
  if (s.type != element_type::i8 && s.type != element_type::u8 && s.type != element_type::i4)
    throw std::invalid_argument(w + ": scheme.type must be i8, u8 or i4, not " + to_string(s.type));
  if (s.granularity != granularity::per_tensor && s.granularity != granularity::per_channel &&
      s.granularity != granularity::per_group)
    throw std::invalid_argument(w + ": scheme.granularity " +
                                std::to_string(static_cast<int>(s.granularity)) + " is not a granularity");
  if (s.rounding != rounding_mode::half_to_even && s.rounding != rounding_mode::half_away_from_zero)
    throw std::invalid_argument(w + ": scheme.rounding " + std::to_string(static_cast<int>(s.rounding)) +
                                " is not a rounding_mode");
  if (s.nonfinite != nonfinite_policy::error && s.nonfinite != nonfinite_policy::saturate)
    throw std::invalid_argument(w + ": scheme.nonfinite " + std::to_string(static_cast<int>(s.nonfinite)) +
                                " is not a nonfinite_policy");
  if (s.granularity == granularity::per_channel && s.axis != 0 && s.axis != 1)
    throw std::invalid_argument(w + ": scheme.axis must be 0 or 1, not " + std::to_string(s.axis));
  if (s.granularity == granularity::per_group) {
    if (s.group_size <= 0) throw std::invalid_argument(w + ": scheme.group_size must be > 0 for per_group");
    if (cols % static_cast<std::size_t>(s.group_size) != 0)
      throw std::invalid_argument(w + ": cols (" + std::to_string(cols) +
                                  ") is not a multiple of scheme.group_size (" +
                                  std::to_string(s.group_size) + ")");
  }
  (void)rows;
}

/// @brief How many scales (and zero points) the scheme has for a rows x cols tensor.
inline constexpr std::size_t param_count(const scheme& s, std::size_t rows, std::size_t cols) noexcept {
  switch (s.granularity) {
    case granularity::per_tensor:
      return 1;
    case granularity::per_channel:
      return s.axis == 0 ? rows : cols;
    case granularity::per_group:
      return s.group_size > 0 ? rows * (cols / static_cast<std::size_t>(s.group_size)) : 0;
  }
  return 0;
}

/// @brief The index of the scale that element (r, c) uses: per-group scales are rows x (cols/G) row-major.
inline constexpr std::size_t param_index(const scheme& s, std::size_t cols, std::size_t r,
                                         std::size_t c) noexcept {
  switch (s.granularity) {
    case granularity::per_tensor:
      return 0;
    case granularity::per_channel:
      return s.axis == 0 ? r : c;
    case granularity::per_group: {
      const auto g = static_cast<std::size_t>(s.group_size);
      return r * (cols / g) + c / g;
    }
  }
  return 0;
}

}  // namespace quant
FRUGAL_END_NAMESPACE
