#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A clock that tests move by hand. Copies share one time, so a test keeps a copy and hands
/// another to the component. Its time_point is steady_clock's, so components on a manual clock and on
/// the real one exchange time points freely. Thread-safe.
class manual_clock {
 public:
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  manual_clock() : now_(std::make_shared<std::atomic<rep>>(0)) {}
  explicit manual_clock(time_point start) : manual_clock() { set(start); }

  time_point now() const noexcept { return time_point(duration(now_->load(std::memory_order_acquire))); }
  void advance(duration d) noexcept { now_->fetch_add(d.count(), std::memory_order_acq_rel); }
  void set(time_point t) noexcept { now_->store(t.time_since_epoch().count(), std::memory_order_release); }

 private:
  std::shared_ptr<std::atomic<rep>> now_;
};

FRUGAL_END_NAMESPACE
