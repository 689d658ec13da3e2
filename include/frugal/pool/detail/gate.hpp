#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <type_traits>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// A loaded model's lease gates: words that acquire and release change with one compare-exchange each,
// without the pool's mutex, while the model is ready (its gates open). Each gate counts the leases taken
// through it (see pool_stripes below); all of a model's gates carry the same flags and generation.
//   bit 63      open: the current version is ready and takes leases without the lock
//   bit 62      waiters: an acquire or reload waits under the lock for a lease to end, so a release
//               that would end one takes the lock to wake it
//   bits 40-61  the version's generation, new with each load or reload (a lease of an older version,
//               now retired, fails the compare and is released under the lock)
//   bits 20-39  acquires since the count was last folded into the slot's total (under the lock)
//   bits 0-19   leases held on the current version through this gate
// The pool's mutex still orders everything else: a gate is opened, closed and re-generated only under
// it, and closed (with no lease held, for an unload) before a model is unloaded or replaced.
namespace pool_gate {
inline constexpr std::uint64_t open = std::uint64_t{1} << 63;
inline constexpr std::uint64_t waiters = std::uint64_t{1} << 62;
inline constexpr unsigned gen_shift = 40;
inline constexpr std::uint64_t gen_mask = ((std::uint64_t{1} << 22) - 1) << gen_shift;
inline constexpr std::uint64_t acquire_one = std::uint64_t{1} << 20;
inline constexpr std::uint64_t acquire_mask = ((std::uint64_t{1} << 20) - 1) << 20;
inline constexpr std::uint64_t users_mask = (std::uint64_t{1} << 20) - 1;
inline constexpr std::uint64_t max_users = users_mask;  // leases on one gate at once
inline constexpr std::uint32_t gen(std::uint64_t g) noexcept {
  return static_cast<std::uint32_t>((g & gen_mask) >> gen_shift);
}
inline constexpr std::size_t users(std::uint64_t g) noexcept {
  return static_cast<std::size_t>(g & users_mask);
}
inline constexpr std::uint64_t acquires(std::uint64_t g) noexcept { return (g & acquire_mask) >> 20; }
}  // namespace pool_gate

// A model's leases are counted on a few gates, each on its own cache line, so that threads leasing one
// model do not pass a single line between their cores (a std::shared_ptr's count does): a thread takes
// its leases on the stripe of its own (threads past the stripe count share). A model with max_users
// counts every lease on stripe 0, where the limit can be checked in one word.
inline constexpr std::size_t pool_stripes = 4;

// A thread's stripe: the lowest index no live thread holds (taken at its first lease, given back when it
// exits), modulo the stripe count, so that up to pool_stripes threads alive at once never share one.
class pool_thread_stripe {
 public:
  static std::size_t mine() noexcept {
    thread_local const pool_thread_stripe t;
    return t.stripe_;
  }
  pool_thread_stripe(const pool_thread_stripe&) = delete;
  pool_thread_stripe& operator=(const pool_thread_stripe&) = delete;

 private:
  static std::atomic<std::uint64_t>& taken() noexcept {
    static std::atomic<std::uint64_t> bits{0};
    return bits;
  }
  pool_thread_stripe() noexcept {
    std::uint64_t bits = taken().load(std::memory_order_relaxed);
    do {
      if (bits == ~std::uint64_t{0}) {  // 64 threads hold an index: share by a counter
        static std::atomic<std::size_t> next{0};
        stripe_ = next.fetch_add(1, std::memory_order_relaxed) % pool_stripes;
        return;
      }
      id_ = static_cast<unsigned>(std::countr_one(bits));
    } while (
        !taken().compare_exchange_weak(bits, bits | (std::uint64_t{1} << id_), std::memory_order_relaxed));
    stripe_ = id_ % pool_stripes;
  }
  ~pool_thread_stripe() {
    if (id_ < 64) taken().fetch_and(~(std::uint64_t{1} << id_), std::memory_order_relaxed);
  }
  unsigned id_ = 64;
  std::size_t stripe_ = 0;
};

inline std::size_t pool_stripe_of_this_thread() noexcept { return pool_thread_stripe::mine(); }

// The release stamp: the time a model's last lease ended, for idle unload and for LRU. A release must
// not pay for a precise clock read (steady_clock::now() costs 20-30 ns on a KVM guest, more than the rest
// of a lease), so for steady_clock on Linux it reads CLOCK_MONOTONIC_COARSE, the same clock at the
// kernel tick (1-4 ms): idle unload may come up to one tick early, and models released within one tick
// are equally recent. Any other Clock (frugal::manual_clock in tests) is read as it is.
template <class Clock>
typename Clock::rep release_stamp(const Clock& clock) noexcept {
#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
  if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
    timespec ts{};
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0)
      return std::chrono::duration_cast<typename Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                  std::chrono::nanoseconds(ts.tv_nsec))
          .count();
  }
#endif
  return clock.now().time_since_epoch().count();
}

}  // namespace detail
FRUGAL_END_NAMESPACE
