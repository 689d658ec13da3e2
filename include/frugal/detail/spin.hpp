#pragma once
/// @file
/// @brief The one spin-wait helper that frugal's short waits share (the batcher's queue lock, the cache's
/// read protocol and shard lock, the quantization thread pool's workers).
///
/// A wait that is expected to last a few dozen nanoseconds spins with the CPU's pause hint, which saves
/// the sleep and wake of a futex; after `spin_limit` pauses it yields, so that a holder preempted on a busy
/// machine gets its CPU back instead of losing it to the spinner.
#include <thread>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

/// Pauses a spinning wait makes before it starts to yield (or, for a lock, to sleep on it).
inline constexpr unsigned spin_limit = 64;

/// One pause hint: tells the core that this is a spin loop (x86 `pause`, Arm `yield`), or nothing.
inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// One step of a spinning wait, given how many steps came before it: a pause for the first spin_limit,
/// then a yield of the thread.
inline void spin_wait(unsigned spins) noexcept {
  if (spins < spin_limit)
    cpu_pause();
  else
    std::this_thread::yield();
}

}  // namespace detail

FRUGAL_END_NAMESPACE
