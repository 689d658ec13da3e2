#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

#include "frugal/batcher/errors.hpp"
#include "frugal/config.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {
// One allocation, no once-flag and no futex call unless someone is actually waiting: std::promise
// costs a pthread_once (and its futex wake) per set_value, which dominates a batcher's per-request cost.
template <class T>
struct light_state {
  std::atomic<std::uint32_t> status{0};  // 0 pending, 1 ready
  std::atomic<std::uint32_t> refs{2};    // the future and the setter
  std::optional<T> value;
  std::exception_ptr error;

  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  void set(result<T>&& o) noexcept {
    if (o)
      value.emplace(std::move(*o));
    else
      error = o.error();
    status.store(1, std::memory_order_release);
    status.notify_one();
    release();
  }
};
}  // namespace detail

/// @brief A move-only, single-consumer future for batcher::submit_light: the same role as std::future at a
/// fraction of its cost. get() blocks until the request resolves, then returns its result or rethrows.
template <class T>
class light_future {
 public:
  light_future() noexcept = default;
  /// @brief Takes one reference to a state; used by batcher::submit_light.
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
  bool ready() const noexcept { return s_ && s_->status.load(std::memory_order_acquire) != 0; }
  void wait() const {
    require_valid();
    while (s_->status.load(std::memory_order_acquire) == 0) s_->status.wait(0, std::memory_order_acquire);
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

 private:
  void require_valid() const {
    if (!s_) throw std::logic_error("frugal::light_future: no state (moved from, or get() already called)");
  }

  detail::light_state<T>* s_ = nullptr;
};

FRUGAL_END_NAMESPACE
