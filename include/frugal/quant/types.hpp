#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include "frugal/quant/detail/eigen.hpp"

#include "frugal/element_type.hpp"
#include "frugal/namespace.hpp"
#include "frugal/quant/activation.hpp"
#include "frugal/quant/cpu.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

namespace detail {

// IEEE binary32 -> binary16, round to nearest even. NaN stays NaN, quieted, keeping the top payload
// bits (what vcvtps2ph does); overflow goes to Inf; results below 2^-14 are subnormal.
inline constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (x < 0x38800000u) {                                                    // below the smallest normal
    if (x <= 0x33000000u) return sign;                                      // <= 2^-25 rounds to 0
    const std::uint32_t e = x >> 23, mant = (x & 0x7fffffu) | 0x800000u, shift = 126u - e;
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  const std::uint32_t r = x + 0xc8000fffu + ((x >> 13) & 1u);  // rebias by -112 and round
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

// binary16 -> binary32 is exact; a signalling NaN comes back quiet, as vcvtph2ps returns it.
inline constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    int exp = -14;
    while (!(m & 0x400u)) {
      m <<= 1;
      --exp;
    }
    return std::bit_cast<float>(sign | static_cast<std::uint32_t>(exp + 127) << 23 | (m & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(sign | (e + 112u) << 23 | m << 13);
}

// binary32 -> bfloat16, round to nearest even; NaN is quieted and keeps its top payload bits.
inline constexpr std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

/// @brief IEEE binary16, stored as its bits; conversions round to nearest even.
struct half {
  std::uint16_t bits = 0;

  constexpr half() noexcept = default;
  explicit constexpr half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}
  /// @brief From Eigen's half, bit for bit.
  half(Eigen::half h) noexcept : bits(Eigen::numext::bit_cast<std::uint16_t>(h)) {}
  /// @brief The half with these bits.
  static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
  explicit constexpr operator float() const noexcept { return detail::half_bits_to_float(bits); }
  /// @brief To Eigen's half, bit for bit.
  operator Eigen::half() const noexcept { return Eigen::half(Eigen::half_impl::raw_uint16_to_half(bits)); }
  friend constexpr bool operator==(half a, half b) noexcept = default;
};

/// @brief bfloat16 (the top half of a binary32), stored as its bits; conversions round to nearest even.
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() noexcept = default;
  explicit constexpr bfloat16(float f) noexcept : bits(detail::float_to_bf16_bits(f)) {}
  /// @brief From Eigen's bfloat16, bit for bit.
  bfloat16(Eigen::bfloat16 h) noexcept : bits(Eigen::numext::bit_cast<std::uint16_t>(h)) {}
  /// @brief The bfloat16 with these bits.
  static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  explicit constexpr operator float() const noexcept { return detail::bf16_bits_to_float(bits); }
  /// @brief To Eigen's bfloat16, bit for bit.
  operator Eigen::bfloat16() const noexcept {
    return Eigen::bfloat16(Eigen::bfloat16_impl::raw_uint16_to_bfloat16(bits));
  }
  friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept = default;
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

/// @brief A row-major fp32 matrix: the toolkit's 2-D tensor (rows x cols, rows contiguous).
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace quant
FRUGAL_END_NAMESPACE
