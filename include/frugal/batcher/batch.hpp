#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "frugal/batcher/detail/core.hpp"
#include "frugal/batcher/errors.hpp"
#include "frugal/batcher/options.hpp"
#include "frugal/batcher/policy.hpp"
#include "frugal/detail/saturating.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

template <class Request, class Result, class Policy, class Clock>
requires batch_policy<Policy>
class batcher;

namespace detail {

/// @brief A batch handed to one worker, as batcher<...>::batch. Resolve it with fulfill() or fail();
/// destroying it unresolved fails what is left with abandoned. It measures its run time (hand-out to
/// resolution) on the batcher's clock for learning policies, unless the worker reports one with
/// report_duration().
template <class Request, class Result, class Policy, class Clock>
class basic_batch {
  using core_type = batcher_core<Request, Result, Policy, Clock>;
  using buffers = typename core_type::buffers;
  using time_point = typename Clock::time_point;
  using duration = typename Clock::duration;

 public:
  basic_batch(basic_batch&&) noexcept = default;
  basic_batch& operator=(basic_batch&& o) noexcept {
    if (this != &o) {
      release();
      f_ = std::move(o.f_);
    }
    return *this;
  }
  basic_batch(const basic_batch&) = delete;
  basic_batch& operator=(const basic_batch&) = delete;
  ~basic_batch() { release(); }

  /// @brief The requests, highest priority first, FIFO within a priority. The worker may move from them.
  /// A moved-from batch has no requests: size() 0, requests() empty, pending() 0.
  std::span<Request> requests() noexcept {
    return f_.buf ? std::span<Request>(f_.buf->requests) : std::span<Request>();
  }
  std::span<const Request> requests() const noexcept {
    return f_.buf ? std::span<const Request>(f_.buf->requests) : std::span<const Request>();
  }
  std::size_t size() const noexcept { return f_.buf ? f_.buf->requests.size() : 0; }
  /// @brief The allowed size this batch belongs to (>= size(); pad to it for a static engine). Without
  /// allowed_sizes it equals size().
  std::size_t bucket() const noexcept { return f_.bucket; }
  /// @brief The summed weight of its requests.
  std::uint64_t cost() const noexcept { return f_.cost; }
  /// @brief 1, 2, ... in hand-out order.
  std::uint64_t id() const noexcept { return f_.id; }
  /// @brief max_batch when it was cut; size() / max_batch() is its fill ratio.
  std::size_t max_batch() const noexcept { return f_.max_batch; }
  /// @brief When a worker got it, on the batcher's clock.
  time_point handed_out() const noexcept { return f_.handed_out; }
  /// @brief How long its oldest request waited in the queue.
  std::chrono::nanoseconds queue_wait() const noexcept { return elapsed_ns(f_.oldest, f_.handed_out); }
  /// @brief Its id, size, bucket, cost, max_batch and queue wait, e.g. for a cost ledger.
  batch_info info() const noexcept { return {f_.id, size(), f_.bucket, f_.cost, f_.max_batch, queue_wait()}; }
  /// @brief Requests not yet resolved.
  std::size_t pending() const noexcept { return f_.buf ? f_.pending : 0; }

  /// @brief Replaces the measured run time that learning policies see (e.g. the GPU time alone).
  void report_duration(duration d) noexcept { f_.reported = d; }

  /// @brief Delivers results[i] to request i, skipping items already failed with fail(i, e). If the
  /// count is not size(), every pending request fails with result_count_mismatch and this throws it.
  void fulfill(std::vector<Result>&& results) {
    require_pending("fulfill");
    if (results.size() != size()) {
      const std::string what = "frugal::batcher::batch::fulfill: got " + std::to_string(results.size()) +
                               " results for a batch of " + std::to_string(size()) + " requests";
      fail_pending(std::make_exception_ptr(batch_error(batch_errc::result_count_mismatch, what)),
                   f_.counts.mismatch);
      throw batch_error(batch_errc::result_count_mismatch, what);
    }
    resolve_pending(f_.counts.completed, true,
                    [&results](std::size_t i) { return result<Result>(std::move(results[i])); });
  }

  /// @brief Delivers one result.
  void fulfill(std::size_t i, Result value) {
    require_item(i, "fulfill");
    buffers& b = *f_.buf;
    const time_point now = f_.core->clock.now();
    b.state[i] = request_state::resolved;
    b.latency[i] = elapsed_ns(b.arrival[i], now).count();
    if (f_.pending > 1)
      account_item_now(i, &core_type::completed);
    else
      ++f_.counts.completed;
    deliver(b.done[i], result<Result>(std::move(value)));
    if (--f_.pending == 0) finish(now);
  }

  /// @brief Fails every pending request with e (e.g. std::current_exception() from the model).
  void fail(std::exception_ptr e) {
    require_pending("fail");
    fail_pending(std::move(e), f_.counts.model);
  }

  /// @brief Fails request i alone, for a model that rejects one input; fulfill() then skips it.
  void fail(std::size_t i, std::exception_ptr e) {
    require_item(i, "fail");
    buffers& b = *f_.buf;
    b.state[i] = request_state::resolved;
    if (f_.pending > 1)
      account_item_now(i, &core_type::f_model);
    else
      ++f_.counts.model;
    deliver(b.done[i], result<Result>(std::move(e)));
    if (--f_.pending == 0) finish(f_.core->clock.now());
  }

 private:
  friend class batcher<Request, Result, Policy, Clock>;

  struct resolution_counts {
    std::uint64_t completed = 0, model = 0, abandoned = 0, mismatch = 0;
  };

  // Everything a move hands over, in one member, so that the move operations cannot leave a field behind.
  // A moved-from batch has no buffers, which is what size(), requests() and pending() test.
  struct fields {
    std::shared_ptr<core_type> core;
    std::unique_ptr<buffers> buf;
    std::size_t pending = 0;
    std::size_t bucket = 0;
    std::uint64_t cost = 0;
    std::uint64_t id = 0;
    std::size_t max_batch = 0;
    time_point handed_out{};
    time_point oldest{};
    std::optional<duration> reported{};
    resolution_counts counts{};
    std::size_t accounted = 0;  // requests counted by account_item_now
  };

  basic_batch(std::shared_ptr<core_type> c, std::unique_ptr<buffers> b, std::size_t bucket,
              std::uint64_t cost, std::uint64_t id, std::size_t max_batch, time_point handed_out,
              time_point oldest) {
    f_.core = std::move(c);
    f_.buf = std::move(b);
    f_.bucket = bucket;
    f_.cost = cost;
    f_.id = id;
    f_.max_batch = max_batch;
    f_.handed_out = handed_out;
    f_.oldest = oldest;
    f_.pending = f_.buf->requests.size();
    f_.buf->latency.assign(f_.pending, -1);
    f_.buf->state.assign(f_.pending, request_state::pending);
  }

  void require_pending(const char* what) const {
    if (!f_.buf)
      throw std::logic_error(std::string("frugal::batcher::batch::") + what + ": moved-from batch");
    if (f_.pending == 0)
      throw std::logic_error(std::string("frugal::batcher::batch::") + what +
                             ": the batch is already resolved");
  }
  void require_item(std::size_t i, const char* what) const {
    require_pending(what);
    if (i >= size())
      throw std::out_of_range(std::string("frugal::batcher::batch::") + what + ": index " +
                              std::to_string(i) + " is out of range for a batch of " +
                              std::to_string(size()));
    if (f_.buf->state[i] != request_state::pending)
      throw std::logic_error(std::string("frugal::batcher::batch::") + what + ": request " +
                             std::to_string(i) + " is already resolved");
  }

  // A request resolved alone, before the rest of its batch, shows in stats() at once: it is counted
  // here, and finish() leaves it out.
  void account_item_now(std::size_t i, std::uint64_t core_type::*counter) {
    core_type& c = *f_.core;
    buffers& b = *f_.buf;
    std::lock_guard g(c.sm);
    ++(c.*counter);
    if (b.latency[i] >= 0) c.end_to_end.record(b.latency[i]);
    c.in_flight.fetch_sub(1, std::memory_order_relaxed);
    b.state[i] = request_state::counted;
    ++f_.accounted;
  }

  // Resolves every pending request with make(i), counting each in counter (and, if completed, its latency).
  // Statistics go in before the deliveries, so a caller that saw every result sees them counted.
  template <class Make>
  void resolve_pending(std::uint64_t& counter, bool completed, Make make) {
    buffers& b = *f_.buf;
    const time_point now = f_.core->clock.now();
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) {
      if (b.state[i] != request_state::pending) continue;
      b.state[i] = request_state::resolving;
      if (completed) b.latency[i] = elapsed_ns(b.arrival[i], now).count();
      ++counter;
    }
    f_.pending = 0;
    finish(now);
    for (std::size_t i = 0; i < n; ++i) {
      if (b.state[i] != request_state::resolving) continue;
      b.state[i] = request_state::resolved;
      deliver(b.done[i], make(i));
    }
  }

  void fail_pending(std::exception_ptr e, std::uint64_t& counter) {
    resolve_pending(counter, false, [&e](std::size_t) { return result<Result>(e); });
  }

  void finish(time_point now) {
    core_type& c = *f_.core;
    buffers& b = *f_.buf;
    const std::chrono::nanoseconds run_time = f_.reported
                                                  ? saturating_cast<std::chrono::nanoseconds>(*f_.reported)
                                                  : elapsed_ns(f_.handed_out, now);
    {
      std::lock_guard g(c.sm);
      c.completed += f_.counts.completed;
      c.f_model += f_.counts.model;
      c.f_abandoned += f_.counts.abandoned;
      c.f_mismatch += f_.counts.mismatch;
      ++c.finished_batches;
      c.run_time_sum =
          frugal::detail::saturating_add(c.run_time_sum, std::max<std::int64_t>(run_time.count(), 0));
      for (std::size_t i = 0; i < b.arrival.size(); ++i) {
        c.queue_wait.record(elapsed_ns(b.arrival[i], f_.handed_out).count());
        if (b.latency[i] >= 0 && b.state[i] != request_state::counted) c.end_to_end.record(b.latency[i]);
      }
      c.in_flight.fetch_sub(b.arrival.size() - f_.accounted, std::memory_order_relaxed);
      c.in_flight_batches.fetch_sub(1, std::memory_order_relaxed);
    }
    if constexpr (learning_policy<Policy>) {
      std::lock_guard g(c.m);
      c.policy.on_batch_done(batch_report{size(), f_.cost, run_time});
    }
  }

  void release() noexcept {
    if (!f_.buf) return;
    if (f_.pending != 0) fail_pending(batch_error_ptr(batch_errc::abandoned), f_.counts.abandoned);
    f_.core->return_buffers(std::move(f_.buf));
  }

  fields f_;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
