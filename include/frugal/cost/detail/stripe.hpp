#pragma once

// The ledger's recording machinery: saturating counters, one stripe of them per recording thread, and the
// check that names are printable. Included by frugal/cost/ledger.hpp.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {
namespace detail {

// Counters saturate instead of wrapping: a Prometheus counter must never go down.
inline constexpr std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) noexcept {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}
inline constexpr std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) noexcept {
  return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

// Names become Prometheus label values and JSON strings, which must be valid UTF-8 without control
// characters.
inline bool printable_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n;
    std::uint32_t cp;
    if ((c & 0xe0) == 0xc0)
      n = 1, cp = c & 0x1fu;
    else if ((c & 0xf0) == 0xe0)
      n = 2, cp = c & 0x0fu;
    else if ((c & 0xf8) == 0xf0)
      n = 3, cp = c & 0x07u;
    else
      return false;
    if (i + n >= s.size()) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3fu);
    }
    static constexpr std::uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

struct stripe {
  explicit stripe(std::size_t n) : c(std::make_unique<std::atomic<std::uint64_t>[]>(n + 16)) {}
  // One writer (the owning thread) per stripe: a load and a store, no read-modify-write, keep recording
  // cheap; they are atomic so that snapshot() may read while it runs. The 16 spare slots keep the next
  // stripe's allocation off this one's last cache line.
  void add(std::size_t i, std::uint64_t v) noexcept {
    auto& a = c[i];
    a.store(add_sat(a.load(std::memory_order_relaxed), v), std::memory_order_relaxed);
  }
  std::unique_ptr<std::atomic<std::uint64_t>[]> c;
};

// A thread's stripes for the last few ledgers it recorded into, so that a loop feeding two or three ledgers
// does not take the mutex on every record.
struct stripe_cache {
  static constexpr std::size_t ways = 4;
  std::uint64_t ledger[ways] = {};
  stripe* s[ways] = {};
  std::size_t next = 0;
};
inline thread_local stripe_cache tl_stripe;
inline std::atomic<std::uint64_t> serial_source{1};
// A thread's serial is never reused, unlike std::thread::id, so a stripe never has two writers.
inline thread_local const std::uint64_t thread_serial = serial_source.fetch_add(1, std::memory_order_relaxed);

}  // namespace detail

}  // namespace cost
FRUGAL_END_NAMESPACE
