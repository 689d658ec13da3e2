#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#if defined(__linux__)
#  include <linux/futex.h>
#  include <sys/syscall.h>
#  include <unistd.h>

#  include <climits>
#  include <ctime>
#endif

#include "frugal/batcher/errors.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

// Where the time of std::promise goes: libstdc++'s set_value runs std::call_once, whose glibc
// pthread_once ends in a futex wake system call on every first call, i.e. on every promise; add two
// allocations (state and result) and a mutex-free but fenced handshake. A light_state is one allocation,
// and the setter makes a system call only when a reader is asleep on it.
//
// status bits: ready once the result is in; forwarded once a std::future was taken from the light one (the
// setter, or the converter if it came second, then fulfils `forward`); sleeper while a timed waiter may
// sleep on the futex (Linux). Untimed waits use std::atomic::wait, which notify_all wakes.
inline constexpr std::uint32_t light_ready = 1, light_forwarded = 2, light_sleeper = 4;

template <class T>
void fulfil(std::promise<T>& p, std::optional<T>& value, std::exception_ptr error) noexcept {
  try {
    if (error)
      p.set_exception(std::move(error));
    else
      p.set_value(std::move(*value));
  } catch (...) {  // T's move threw: the promise carries that instead
    p.set_exception(std::current_exception());
  }
}

#if defined(__linux__)
// Sleeps while *word == expected, up to `ns` nanoseconds (capped at about 68 years); spurious returns are
// fine, the callers loop.
inline void futex_wait_ns(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                          std::int64_t ns) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{static_cast<std::time_t>(std::min<std::int64_t>(ns / 1'000'000'000, INT_MAX)),
              static_cast<long>(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}
inline void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
          0);
}
#endif

template <class T>
struct light_state {
  std::atomic<std::uint32_t> status{0};
  std::atomic<std::uint32_t> refs{2};  // the future and the setter
  std::optional<T> value;
  std::exception_ptr error;
  std::unique_ptr<std::promise<T>> forward;  // written before `forwarded` is published

  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  void set(result<T>&& o) noexcept {
    if (o)
      value.emplace(std::move(*o));
    else
      error = o.error();
    const std::uint32_t before = status.fetch_or(light_ready, std::memory_order_acq_rel);
    if (before & light_forwarded) fulfil(*forward, value, error);
#if defined(__linux__)
    if (before & light_sleeper) futex_wake_all(&status);
#endif
    status.notify_all();  // no system call unless a thread waits in std::atomic::wait
    release();
  }
};
}  // namespace detail

/// @brief What batcher::submit returns: a move-only, single-consumer future with std::future's reading
/// interface (get, wait, wait_for, wait_until, valid, share) at a fraction of its cost: one allocation and
/// no system call unless the reader has to sleep, where std::promise makes a futex call on every result.
/// It converts to std::future<T> (implicitly, from an rvalue), so code written against std::future keeps
/// compiling: `std::future<T> f = b.submit(x);` works, and pays std::promise's cost once more.
template <class T>
class light_future {
 public:
  light_future() noexcept = default;
  /// @brief Takes one reference to a state; used by batcher::submit.
  explicit light_future(detail::light_state<T>* s) noexcept : s_(s) {}
  light_future(light_future&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  light_future& operator=(light_future&& o) noexcept {
    if (this != &o) {
      if (s_) s_->release();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  light_future(const light_future&) = delete;
  light_future& operator=(const light_future&) = delete;
  ~light_future() {
    if (s_) s_->release();
  }

  bool valid() const noexcept { return s_ != nullptr; }
  /// @brief True once the result or error is in; never blocks.
  bool ready() const noexcept {
    return s_ && (s_->status.load(std::memory_order_acquire) & detail::light_ready);
  }
  void wait() const {
    require_valid();
    for (std::uint32_t s; !((s = s_->status.load(std::memory_order_acquire)) & detail::light_ready);)
      s_->status.wait(s, std::memory_order_acquire);
  }
  /// @brief Waits up to `d`: std::future_status::ready or timeout (never deferred).
  template <class Rep, class Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period>& d) const {
    return wait_until(std::chrono::steady_clock::now() + d);
  }
  /// @brief Waits until `t` on `Clock`: std::future_status::ready or timeout. On Linux the wait sleeps on
  /// a futex that the result wakes; elsewhere it polls with a backoff of at most 1 ms.
  template <class Clock, class Duration>
  std::future_status wait_until(const std::chrono::time_point<Clock, Duration>& t) const {
    require_valid();
    auto& st = s_->status;
    for (unsigned spins = 0;; ++spins) {
      std::uint32_t s = st.load(std::memory_order_acquire);
      if (s & detail::light_ready) return std::future_status::ready;
      const auto left = t - Clock::now();
      if (left <= decltype(left)::zero()) return std::future_status::timeout;
      const std::int64_t ns = std::chrono::ceil<std::chrono::nanoseconds>(left).count();
#if defined(__linux__)
      if (!(s & detail::light_sleeper)) {
        if (!st.compare_exchange_weak(s, s | detail::light_sleeper, std::memory_order_acq_rel)) continue;
        s |= detail::light_sleeper;
      }
      // Clock may not be steady: wake at least every 50 ms to read it again.
      detail::futex_wait_ns(&st, s, std::min<std::int64_t>(ns, 50'000'000));
      (void)spins;
#else
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(
          ns, std::min<std::int64_t>(1'000'000, std::int64_t{1000} << std::min(spins, 10u)))));
#endif
    }
  }
  /// @brief Waits, then returns the result or rethrows the error; the future is empty afterwards.
  T get() {
    wait();
    detail::light_state<T>* s = std::exchange(s_, nullptr);
    struct releaser {
      detail::light_state<T>* s;
      ~releaser() { s->release(); }
    } r{s};
    if (s->error) std::rethrow_exception(s->error);
    return std::move(*s->value);
  }
  /// @brief The same result as a std::future (this one is empty afterwards). Costs one std::promise.
  std::future<T> to_std() && {
    require_valid();
    detail::light_state<T>* s = std::exchange(s_, nullptr);
    s->forward = std::make_unique<std::promise<T>>();
    std::future<T> f = s->forward->get_future();
    // If the result is already in, the setter did not see `forwarded`: the promise is ours to fulfil.
    if (s->status.fetch_or(detail::light_forwarded, std::memory_order_acq_rel) & detail::light_ready)
      detail::fulfil(*s->forward, s->value, s->error);
    s->release();
    return f;
  }
  /// @brief std::future interop: `std::future<T> f = batcher.submit(x);` keeps compiling.
  operator std::future<T>() && { return std::move(*this).to_std(); }  // NOLINT(google-explicit-constructor)
  /// @brief As std::future::share.
  std::shared_future<T> share() && { return std::move(*this).to_std().share(); }

 private:
  void require_valid() const {
    if (!s_) throw std::logic_error("frugal::light_future: no state (moved from, or get() already called)");
  }

  detail::light_state<T>* s_ = nullptr;
};

FRUGAL_END_NAMESPACE
