#pragma once

// The batcher's queue operations, on a batcher_core under its mutex: option checks, room and deadlines,
// dropping ineligible requests, deciding when a batch is due, and waking workers and producers.
// frugal::batcher calls them; they hold no state of their own.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/batcher/batch.hpp"
#include "frugal/batcher/detail/core.hpp"
#include "frugal/batcher/errors.hpp"
#include "frugal/batcher/light_future.hpp"
#include "frugal/batcher/options.hpp"
#include "frugal/batcher/policy.hpp"
#include "frugal/detail/saturating.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

template <class Request, class Result, class Policy, class Clock>
struct batcher_ops {
  using core = batcher_core<Request, Result, Policy, Clock>;
  using node = typename core::node;
  using time_point = typename Clock::time_point;
  using duration = typename Clock::duration;
  using submit_options = basic_submit_options<time_point>;
  using callback = batch_callback<Result>;

  struct dropped_request {
    callback done;
    batch_errc code;
  };
  using dropped_list = std::vector<dropped_request>;

  struct due_info {
    bool due;
    time_point when;
  };

  static constexpr bool real_time_clock =
      std::is_same_v<Clock, std::chrono::steady_clock> || std::is_same_v<Clock, std::chrono::system_clock>;

  static batcher_options validated(batcher_options o, const char* who) {
    auto bad = [who](const std::string& what) {
      throw std::invalid_argument(std::string(who) + ": " + what);
    };
    if (o.max_batch == 0) bad("options.max_batch must be > 0");
    if (o.window < std::chrono::nanoseconds::zero()) bad("options.window must be >= 0");
    if (o.block_timeout < std::chrono::nanoseconds::zero()) bad("options.block_timeout must be >= 0");
    if (o.priority_levels == 0 || o.priority_levels > detail::max_priority_levels)
      bad("options.priority_levels must be in [1, " + std::to_string(detail::max_priority_levels) + "]");
    std::sort(o.allowed_sizes.begin(), o.allowed_sizes.end());
    o.allowed_sizes.erase(std::unique(o.allowed_sizes.begin(), o.allowed_sizes.end()), o.allowed_sizes.end());
    if (!o.allowed_sizes.empty() && o.allowed_sizes.front() == 0)
      bad("options.allowed_sizes must not hold 0");
    if (!o.allowed_sizes.empty() && o.allowed_sizes.front() > o.max_batch)
      bad("options.allowed_sizes holds no size <= options.max_batch");
    if (o.max_queued_cost != 0 && o.max_batch_cost != 0 && o.max_queued_cost < o.max_batch_cost)
      bad("options.max_queued_cost must be >= options.max_batch_cost, or a full batch could never queue");
    return o;
  }

  static void check_submit(const core& c, const submit_options& o) {
    if (o.priority >= c.opt.priority_levels)
      throw std::invalid_argument("frugal::batcher::submit: options.priority (" + std::to_string(o.priority) +
                                  ") must be < options.priority_levels (" +
                                  std::to_string(c.opt.priority_levels) + ")");
    if (c.opt.max_batch_cost != 0 && o.weight > c.opt.max_batch_cost)
      throw std::invalid_argument("frugal::batcher::submit: options.weight (" + std::to_string(o.weight) +
                                  ") exceeds options.max_batch_cost (" +
                                  std::to_string(c.opt.max_batch_cost) + ")");
    if (c.opt.max_queued_cost != 0 && o.weight > c.opt.max_queued_cost)
      throw std::invalid_argument("frugal::batcher::submit: options.weight (" + std::to_string(o.weight) +
                                  ") exceeds options.max_queued_cost (" +
                                  std::to_string(c.opt.max_queued_cost) + ")");
  }

  // The queued cost must fit std::uint64_t even without max_queued_cost: a request whose weight would
  // wrap it has no room (queue_full, or a wait). Every batch's cost, a sum of queued weights, fits too.
  static bool has_room(const core& c, std::uint64_t weight) {
    if (weight > std::numeric_limits<std::uint64_t>::max() - c.live_cost) return false;
    return (c.opt.max_queued == 0 || c.live < c.opt.max_queued) &&
           (c.opt.max_queued_cost == 0 || c.live_cost + weight <= c.opt.max_queued_cost);
  }

  static void count_failure(core& c, batch_errc e) {
    switch (e) {
      case batch_errc::deadline_exceeded:
        ++c.f_deadline;
        break;
      case batch_errc::cancelled:
        ++c.f_cancelled;
        break;
      case batch_errc::queue_full:
        ++c.f_queue_full;
        break;
      case batch_errc::closed:
        ++c.f_closed;
        break;
      case batch_errc::timeout:
        ++c.f_timeout;
        break;
      default:
        break;
    }
  }

  static time_point later(time_point now, std::chrono::nanoseconds d) {
    return frugal::detail::saturating_add(now, d);
  }

  // time_point::max() is the deadline of a request without one: it never expires, even when the clock
  // reads max() or a predicted finish saturates there.
  static bool expired(time_point deadline, time_point t) {
    return deadline != time_point::max() && deadline <= t;
  }

  // Counts a thread into a blocking call (enter, under c.m) and out of it at the end of its scope,
  // after every other use of the core: declared before the call's lock, so it runs after it is released.
  struct exit_guard {
    core* c = nullptr;
    void enter(core& to) noexcept {
      ++to.inside;
      c = &to;
    }
    exit_guard() = default;
    exit_guard(const exit_guard&) = delete;
    exit_guard& operator=(const exit_guard&) = delete;
    ~exit_guard() {
      if (c == nullptr) return;
      std::lock_guard g(c->m);
      --c->inside;
      if (c->closed && c->inside == 0) c->left_cv.notify_all();
    }
  };

  static void wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lk, time_point until) {
    if (until == time_point::max()) {
      cv.wait(lk);
    } else if constexpr (real_time_clock) {
      cv.wait_until(lk, until);
    } else {
      cv.wait_for(lk, detail::manual_clock_poll);
    }
  }

  static std::optional<batch_errc> ineligible(const node& x, time_point now) {
    if (expired(x.deadline, now)) return batch_errc::deadline_exceeded;
    if (x.stop.stop_requested()) return batch_errc::cancelled;
    return std::nullopt;
  }

  static void drop(core& c, node& x, batch_errc why, dropped_list& dropped) {
    --c.live;
    c.live_cost -= x.weight;
    count_failure(c, why);
    dropped.push_back(dropped_request{std::move(x.done), why});
  }

  static void purge_fronts(core& c, time_point now, dropped_list& dropped) {
    for (auto& level : c.levels) {
      while (!level.empty()) {
        node& x = level.front();
        if (!x.dead) {
          const std::optional<batch_errc> why = ineligible(x, now);
          if (!why) break;
          drop(c, x, *why, dropped);
        }
        level.pop_front();
      }
    }
  }

  static policy_view view(core& c, time_point now) {
    time_point oldest = time_point::max();
    for (auto& level : c.levels)
      if (!level.empty() && level.front().arrival < oldest) oldest = level.front().arrival;
    policy_view v;
    v.now = frugal::detail::saturating_cast<std::chrono::nanoseconds>(now.time_since_epoch());
    v.oldest_wait = oldest == time_point::max() ? std::chrono::nanoseconds::zero()
                                                : frugal::detail::elapsed_ns(oldest, now);
    v.queued = c.live;
    v.queued_cost = c.live_cost;
    v.max_batch = c.cap;
    v.max_batch_cost = c.opt.max_batch_cost;
    v.window = c.opt.window;
    v.in_flight_batches = c.in_flight_batches.load(std::memory_order_relaxed);
    v.arrivals = c.arrivals;
    return v;
  }

  static bool full(const core& c) {
    return c.live >= c.cap || (c.opt.max_batch_cost != 0 && c.live_cost >= c.opt.max_batch_cost);
  }

  // After an arrival: does a waiting worker need waking, or will one wake by itself in time?
  static bool worker_must_wake(core& c, time_point now) {
    if (full(c)) return true;
    const std::chrono::nanoseconds w = c.policy.wait_for(view(c, now));
    if (w <= std::chrono::nanoseconds::zero()) return true;
    const time_point due = later(now, w);
    for (const time_point t : c.sleepers)
      if (t <= due) return false;
    return true;
  }

  static due_info evaluate(core& c, time_point now, dropped_list& dropped) {
    purge_fronts(c, now, dropped);
    if (c.live == 0) return {false, time_point::max()};
    if (c.closed || full(c)) return {true, now};
    const std::chrono::nanoseconds w = c.policy.wait_for(view(c, now));
    if (w <= std::chrono::nanoseconds::zero()) return {true, now};
    time_point when = later(now, w);
    // Wake for an expiring head as well, so it fails close to its deadline.
    for (auto& level : c.levels)
      if (!level.empty() && level.front().deadline < when) when = level.front().deadline;
    return {false, when};
  }

  static void notify_after_cut(core& c, std::unique_lock<std::mutex>& lk) {
    const bool worker = c.waiting_workers > 0 && c.live > 0 && !c.wake_pending;
    if (worker) c.wake_pending = true;
    const bool producer = c.blocked_producers > 0;
    lk.unlock();
    if (worker) c.work_cv.notify_one();
    if (producer) c.space_cv.notify_all();
  }

  static void notify_after_removal(core& c, std::unique_lock<std::mutex>& lk) {
    const bool producer = c.blocked_producers > 0;
    lk.unlock();
    if (producer) c.space_cv.notify_all();
  }

  static void deliver_all(dropped_list& dropped) noexcept {
    for (auto& d : dropped) detail::deliver(d.done, result<Result>(detail::batch_error_ptr(d.code)));
    dropped.clear();
  }
};

}  // namespace detail
FRUGAL_END_NAMESPACE
