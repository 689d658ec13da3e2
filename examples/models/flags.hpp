#pragma once

// Command-line helpers shared by the examples' binaries (frugal_embed, frugal_server).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace examples {

/// @brief The integer value @p v of flag @p flag, in [lo, hi]; anything else (a sign, trailing text, out of
/// range) throws std::invalid_argument naming the flag, the range and the value.
inline std::uint64_t integer_flag(const std::string& flag, const std::string& v, std::uint64_t lo,
                                  std::uint64_t hi) {
  std::size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (v.empty() || v[0] == '-' || pos != v.size() || n < lo || n > hi)
    throw std::invalid_argument(flag + " must be an integer in " + std::to_string(lo) + " .. " +
                                std::to_string(hi) + ", not \"" + v + "\"");
  return n;
}

/// @brief The number @p v of flag @p flag, in [lo, hi]; anything else (trailing text, NaN, out of range)
/// throws std::invalid_argument naming the flag, the range and the value.
inline double number_flag(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "%g .. %g", lo, hi);
    throw std::invalid_argument(flag + " must be a number in " + range + ", not \"" + v + "\"");
  }
  return x;
}

}  // namespace examples
