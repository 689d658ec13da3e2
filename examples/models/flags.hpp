#pragma once

// Command-line helpers shared by the examples' binaries (frugal_embed, frugal_server).
#include <cstdint>
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

}  // namespace examples
