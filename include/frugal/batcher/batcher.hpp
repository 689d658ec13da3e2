#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/batcher/batch.hpp"
#include "frugal/batcher/detail/core.hpp"
#include "frugal/batcher/detail/queue_ops.hpp"
#include "frugal/batcher/errors.hpp"
#include "frugal/batcher/light_future.hpp"
#include "frugal/batcher/options.hpp"
#include "frugal/batcher/policy.hpp"
#include "frugal/clock.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A future together with the id that cancels its request.
template <class Result>
struct ticket {
  light_future<Result> result;
  request_id id = 0;
};

/// @brief Groups requests into batches for a model loop the user owns. Producers call submit() from any
/// thread; worker threads pull batches with next_batch() (blocking) or try_next_batch() and hand the
/// results back with batch::fulfill(). Every submitted request resolves exactly once: with its result, a
/// batch_error naming the cause, or the exception the worker failed it with.
///
/// A batch is due when max_batch requests (or max_batch_cost weight) are queued, when the policy says so
/// (fixed_window: the oldest request has waited options.window since its submit), or at once after close().
template <class Request, class Result, class Policy = fixed_window, class Clock = std::chrono::steady_clock>
requires batch_policy<Policy>
class batcher {
 public:
  using request_type = Request;
  using result_type = Result;
  using policy_type = Policy;
  using clock_type = Clock;
  using time_point = typename Clock::time_point;
  using duration = typename Clock::duration;
  using submit_options = basic_submit_options<time_point>;
  /// @brief The callback form's completion; it runs on the thread that resolves the request (usually a
  /// worker inside fulfill) and must not throw.
  using callback = detail::batch_callback<Result>;
  /// @brief A batch handed to one worker. Resolve it with fulfill() or fail(); destroying it unresolved
  /// fails what is left with abandoned.
  using batch = detail::basic_batch<Request, Result, Policy, Clock>;

 private:
  using core = detail::batcher_core<Request, Result, Policy, Clock>;
  using node = typename core::node;
  using buffers = typename core::buffers;

  using ops = detail::batcher_ops<Request, Result, Policy, Clock>;
  using dropped_list = typename ops::dropped_list;
  using due_info = typename ops::due_info;
  using exit_guard = typename ops::exit_guard;

 public:
  /// @brief Validates the options (std::invalid_argument naming the field) and starts empty.
  explicit batcher(batcher_options options = {}, Clock clock = {}, Policy policy = {})
      : core_(std::make_shared<core>(ops::validated(std::move(options), "frugal::batcher"), std::move(clock),
                                     std::move(policy))) {}
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;
  /// @brief Closes with drain::no (what is still queued fails with closed), then waits for the threads
  /// inside next_batch, and the submits waiting for room, to return: they see the close and return
  /// empty (or fail with closed), as a std::jthread joins. A worker loop `while (auto b =
  /// q.next_batch())` therefore ends by itself; it must not call the batcher again afterwards, and no
  /// other call may start once destruction has begun. Batches already handed out stay valid. Destroying
  /// the batcher from inside one of its own callbacks on a thread inside next_batch would wait forever.
  ~batcher() {
    close(drain::no);
    core& c = *core_;
    std::unique_lock lk(c.m);
    c.left_cv.wait(lk, [&c] { return c.inside == 0; });
  }

  /// @brief The fast path: enqueues the request and calls done once, with its result or its error. A
  /// rejected request (closed, queue_full, timeout, already cancelled or expired) gets done called on this
  /// thread before submit returns. Throws std::invalid_argument for a bad priority or weight.
  request_id submit(Request request, callback done, submit_options o = {}) {
    core& c = *core_;
    const time_point now = c.clock.now();
    exit_guard out;
    std::unique_lock lk(c.m, std::defer_lock);
    detail::lock_briefly_spinning(lk);
    ops::check_submit(c, o);
    ++c.submitted;
    std::optional<batch_errc> err;
    if (c.closed) {
      err = batch_errc::closed;
    } else if (o.stop.stop_requested()) {
      err = batch_errc::cancelled;
    } else if (ops::expired(o.deadline, now)) {
      err = batch_errc::deadline_exceeded;
    } else if (!ops::has_room(c, o.weight)) {
      if (c.opt.on_overflow == overflow::reject) {
        err = batch_errc::queue_full;
      } else {
        out.enter(c);
        err = wait_for_room(c, lk, o, now);
      }
    }
    // Ids are taken in queue order (after any wait for room) so each level stays sorted by id for cancel().
    const request_id id = c.next_id++;
    if (err) {
      ops::count_failure(c, *err);
      lk.unlock();
      detail::deliver(done, result<Result>(detail::batch_error_ptr(*err)));
      return id;
    }
    const std::uint64_t weight = o.weight;
    c.levels[o.priority].push_back(
        node{std::move(request), std::move(done), now, o.deadline, std::move(o.stop), weight, id, false});
    ++c.live;
    c.live_cost += weight;
    ++c.arrivals;
    // Until the signalled worker takes the lock, further signals would only cost system calls.
    const bool wake = c.waiting_workers > 0 && !c.wake_pending && ops::worker_must_wake(c, now);
    if (wake) c.wake_pending = true;
    lk.unlock();
    if (wake) c.work_cv.notify_one();
    return id;
  }

  /// @brief The simple form: the future holds the result, a batch_error, or the model's exception. It is a
  /// light_future, which reads like std::future (get, wait, wait_for, wait_until, valid, share) and
  /// converts to one, so `std::future<Result> f = b.submit(x);` compiles as it did when this returned
  /// std::future; keeping the light_future (`auto f = ...`) skips std::promise's cost, a futex system call
  /// and two allocations per request (benchmarks/RESULTS.md, request batcher).
  light_future<Result> submit(Request request, submit_options o = {}) {
    return submit_ticket(std::move(request), std::move(o)).result;
  }

  /// @brief The same as submit(request, options); the name of the light_future form before it became the
  /// default.
  light_future<Result> submit_light(Request request, submit_options o = {}) {
    return submit(std::move(request), std::move(o));
  }

  /// @brief Like submit, and also returns the id for cancel().
  ticket<Result> submit_ticket(Request request, submit_options o = {}) {
    auto* state = new detail::light_state<Result>();
    ticket<Result> t{light_future<Result>(state), 0};
    try {
      t.id = submit(
          std::move(request), [state](result<Result> r) { state->set(std::move(r)); }, std::move(o));
    } catch (...) {
      state->release();  // the callback never ran
      throw;
    }
    return t;
  }

  /// @brief Fails a still-queued request with cancelled at once; false if it already left the queue.
  bool cancel(request_id id) {
    core& c = *core_;
    callback done;
    {
      std::unique_lock lk(c.m);
      for (auto& level : c.levels) {
        // Ids grow in submit order, and each level is FIFO, so each level is sorted by id.
        std::size_t lo = 0, hi = level.size();
        while (lo < hi) {
          const std::size_t mid = lo + (hi - lo) / 2;
          if (level[mid].id < id)
            lo = mid + 1;
          else
            hi = mid;
        }
        if (lo == level.size() || level[lo].id != id || level[lo].dead) continue;
        node& x = level[lo];
        x.dead = true;
        done = std::move(x.done);
        --c.live;
        c.live_cost -= x.weight;
        ++c.f_cancelled;
        while (!level.empty() && level.front().dead) level.pop_front();
        break;
      }
      if (!done) return false;
      ops::notify_after_removal(c, lk);
    }
    detail::deliver(done, result<Result>(detail::batch_error_ptr(batch_errc::cancelled)));
    return true;
  }

  /// @brief Blocks until a batch is due and returns it; empty once the batcher is closed and drained, or
  /// when stop is requested. On a clock other than steady_clock or system_clock (e.g. manual_clock) it
  /// cannot sleep until a time point, so it rechecks the clock every millisecond and on wake().
  std::optional<batch> next_batch(std::stop_token stop = {}) {
    core& c = *core_;
    std::unique_ptr<buffers> buf = c.take_buffers();
    auto on_stop_fn = [&c] {
      std::lock_guard g(c.m);
      c.work_cv.notify_all();
    };
    std::optional<std::stop_callback<decltype(on_stop_fn)>> on_stop;
    if (stop.stop_possible()) on_stop.emplace(stop, on_stop_fn);
    dropped_list dropped;
    exit_guard out;
    std::unique_lock lk(c.m, std::defer_lock);
    detail::lock_briefly_spinning(lk);
    out.enter(c);
    bool idle_armed = true;
    for (;;) {
      if (stop.stop_requested()) break;
      const time_point now = c.clock.now();
      const due_info d = ops::evaluate(c, now, dropped);
      if (d.due) {
        std::optional<batch> b = cut(c, now, buf, dropped);
        if (b) {
          ops::notify_after_cut(c, lk);
          ops::deliver_all(dropped);
          return b;
        }
      }
      if (!dropped.empty()) {
        ops::notify_after_removal(c, lk);
        ops::deliver_all(dropped);
        lk.lock();
        continue;
      }
      if (c.closed && c.live == 0) break;
      time_point until = d.when;
      if (c.live == 0 && idle_armed) {
        // In a busy stream the queue is empty only briefly. Sleeping just until a request arriving now
        // would be due lets submit skip the wake-up for the first request of every batch.
        idle_armed = false;
        policy_view v = ops::view(c, now);
        v.queued = 1;
        v.queued_cost = 1;
        const std::chrono::nanoseconds w = c.policy.wait_for(v);
        if (w > std::chrono::nanoseconds::zero()) until = ops::later(now, w);
      }
      ++c.waiting_workers;
      c.sleepers.push_back(until);
      ops::wait(c.work_cv, lk, until);
      c.wake_pending = false;
      auto mine = std::find(c.sleepers.begin(), c.sleepers.end(), until);
      *mine = c.sleepers.back();
      c.sleepers.pop_back();
      --c.waiting_workers;
    }
    lk.unlock();
    ops::deliver_all(dropped);
    c.return_buffers(std::move(buf));
    return std::nullopt;
  }

  /// @brief Returns a batch only if one is due now; never blocks. For tests, simulations and event loops.
  std::optional<batch> try_next_batch() {
    core& c = *core_;
    std::unique_ptr<buffers> buf = c.take_buffers();
    dropped_list dropped;
    std::unique_lock lk(c.m, std::defer_lock);
    detail::lock_briefly_spinning(lk);
    const time_point now = c.clock.now();
    std::optional<batch> b;
    if (ops::evaluate(c, now, dropped).due) b = cut(c, now, buf, dropped);
    if (b)
      ops::notify_after_cut(c, lk);
    else
      ops::notify_after_removal(c, lk);
    ops::deliver_all(dropped);
    c.return_buffers(std::move(buf));
    return b;
  }

  /// @brief When the next batch will be due if nothing else arrives: now if it is due, empty if the queue is
  /// empty. Lets a single-threaded driver on a manual clock jump straight to the next event.
  std::optional<time_point> next_due() {
    core& c = *core_;
    dropped_list dropped;
    std::unique_lock lk(c.m);
    const time_point now = c.clock.now();
    const due_info d = ops::evaluate(c, now, dropped);
    std::optional<time_point> r;
    if (c.live != 0) r = d.due ? now : d.when;
    ops::notify_after_removal(c, lk);
    ops::deliver_all(dropped);
    return r;
  }

  /// @brief Fails every queued request that has expired or been cancelled through its stop_token now, instead
  /// of when a worker reaches it. Returns how many it failed.
  std::size_t sweep() {
    core& c = *core_;
    dropped_list dropped;
    std::unique_lock lk(c.m);
    const time_point now = c.clock.now();
    for (auto& level : c.levels) {
      for (std::size_t i = 0; i < level.size(); ++i) {
        node& x = level[i];
        if (x.dead) continue;
        const std::optional<batch_errc> why = ops::ineligible(x, now);
        if (!why) continue;
        x.dead = true;
        ops::drop(c, x, *why, dropped);
      }
      while (!level.empty() && level.front().dead) level.pop_front();
    }
    const std::size_t n = dropped.size();
    ops::notify_after_removal(c, lk);
    ops::deliver_all(dropped);
    return n;
  }

  /// @brief Stops new submits (they fail with closed) and wakes everyone. With drain::yes everything queued
  /// is due at once and workers get it; with drain::no it fails with closed. next_batch returns empty once
  /// the queue is empty.
  void close(drain d = drain::yes) {
    core& c = *core_;
    dropped_list dropped;
    {
      std::lock_guard lk(c.m);
      c.closed = true;
      if (d == drain::no) {
        for (auto& level : c.levels) {
          while (!level.empty()) {
            node& x = level.front();
            if (!x.dead) ops::drop(c, x, batch_errc::closed, dropped);
            level.pop_front();
          }
        }
      }
    }
    c.work_cv.notify_all();
    c.space_cv.notify_all();
    ops::deliver_all(dropped);
  }

  /// @brief True once close() (or the destructor) has run.
  bool closed() const {
    std::lock_guard lk(core_->m);
    return core_->closed;
  }

  /// @brief Replaces the settings; they apply from the next batch. priority_levels cannot change.
  void set_options(batcher_options options) {
    batcher_options o = ops::validated(std::move(options), "frugal::batcher::set_options");
    core& c = *core_;
    {
      std::lock_guard lk(c.m);
      if (o.priority_levels != c.opt.priority_levels)
        throw std::invalid_argument(
            "frugal::batcher::set_options: options.priority_levels cannot change at run time");
      c.opt = std::move(o);
      c.cap = detail::effective_cap(c.opt);
    }
    c.work_cv.notify_all();
    c.space_cv.notify_all();
  }

  /// @brief The settings in force (allowed_sizes sorted and deduplicated).
  batcher_options options() const {
    std::lock_guard lk(core_->m);
    return core_->opt;
  }

  /// @brief A copy of the policy, e.g. to read what the adaptive policy has learned.
  Policy policy() const {
    std::lock_guard lk(core_->m);
    return core_->policy;
  }

  const Clock& clock() const noexcept { return core_->clock; }

  /// @brief Requests queued now.
  std::size_t queue_depth() const {
    std::lock_guard lk(core_->m);
    return core_->live;
  }

  /// @brief Wakes blocked workers and producers so they reread the clock; call it after moving a manual
  /// clock.
  void wake() {
    { std::lock_guard lk(core_->m); }
    core_->work_cv.notify_all();
    core_->space_cv.notify_all();
  }

  /// @brief A consistent snapshot of the counters, histograms and queue state.
  batcher_stats stats() const {
    core& c = *core_;
    batcher_stats s;
    std::uint64_t queue_wait_max = 0, end_to_end_max = 0;
    {
      std::scoped_lock lk(c.m, c.sm);
      s.submitted = c.submitted;
      s.completed = c.completed;
      s.failed.deadline_exceeded = c.f_deadline;
      s.failed.cancelled = c.f_cancelled;
      s.failed.queue_full = c.f_queue_full;
      s.failed.closed = c.f_closed;
      s.failed.timeout = c.f_timeout;
      s.failed.abandoned = c.f_abandoned;
      s.failed.result_count_mismatch = c.f_mismatch;
      s.failed.model_error = c.f_model;
      s.batches = c.batch_seq;
      s.batch_sizes = c.sizes;
      queue_wait_max = c.queue_wait.max;
      end_to_end_max = c.end_to_end.max;
      s.queue_depth = c.live;
      s.queued_cost = c.live_cost;
      s.in_flight = c.in_flight.load(std::memory_order_relaxed);
      s.in_flight_batches = c.in_flight_batches.load(std::memory_order_relaxed);
      s.waiting_workers = c.waiting_workers;
      s.blocked_submits = c.blocked_producers;
      if (c.batch_seq != 0) {
        std::uint64_t handed = 0;
        for (std::size_t n = 0; n < c.sizes.size(); ++n) handed += n * c.sizes[n];
        s.mean_batch_size = static_cast<double>(handed) / static_cast<double>(c.batch_seq);
        s.mean_fill_ratio = c.fill_sum / static_cast<double>(c.batch_seq);
      }
      if (c.finished_batches != 0)
        s.mean_batch_run_time =
            std::chrono::nanoseconds(c.run_time_sum / static_cast<std::int64_t>(c.finished_batches));
    }
    // Reading ~34k atomic buckets takes tens of microseconds: not under the locks that submit takes.
    s.queue_wait = c.queue_wait.summary(queue_wait_max);
    s.end_to_end = c.end_to_end.summary(end_to_end_max);
    return s;
  }

 private:
  std::optional<batch_errc> wait_for_room(core& c, std::unique_lock<std::mutex>& lk, const submit_options& o,
                                          time_point start) {
    const time_point until = ops::later(start, c.opt.block_timeout);
    ++c.blocked_producers;
    std::optional<batch_errc> err;
    for (;;) {
      if (c.closed) {
        err = batch_errc::closed;
        break;
      }
      if (ops::has_room(c, o.weight)) break;
      if (o.stop.stop_requested()) {
        err = batch_errc::cancelled;
        break;
      }
      if (until != time_point::max() && c.clock.now() >= until) {
        err = batch_errc::timeout;
        break;
      }
      ops::wait(c.space_cv, lk, until);
    }
    --c.blocked_producers;
    return err;
  }

  std::optional<batch> cut(core& c, time_point now, std::unique_ptr<buffers>& buf, dropped_list& dropped) {
    const std::size_t cap = c.cap;
    const std::uint64_t max_cost = c.opt.max_batch_cost;
    // A request whose deadline falls before shed_before would finish too late to be of use.
    time_point shed_before = now;
    if constexpr (predicting_policy<Policy>) {
      const std::chrono::nanoseconds h = c.policy.expected_run_time(std::min(c.live, cap));
      if (h > std::chrono::nanoseconds::zero()) shed_before = ops::later(now, h);
    }
    std::size_t n = 0;
    std::uint64_t cost = 0;
    bool stop = false;
    for (std::size_t l = c.levels.size(); l-- > 0 && !stop;) {
      auto& level = c.levels[l];
      for (std::size_t i = 0; i < level.size(); ++i) {
        const node& x = level[i];
        if (x.dead || ops::ineligible(x, shed_before)) continue;
        // A request over max_batch_cost (possible after set_options lowered it) still goes, alone.
        if (n == cap || (max_cost != 0 && n != 0 && cost + x.weight > max_cost)) {
          stop = true;
          break;
        }
        ++n;
        cost += x.weight;
      }
    }
    if (n == 0) {
      ops::purge_fronts(c, shed_before, dropped);  // nothing is eligible, so this empties the queue
      return std::nullopt;
    }
    std::size_t take = n, bucket = n;
    const auto& allowed = c.opt.allowed_sizes;
    if (!allowed.empty()) {
      auto it = std::upper_bound(allowed.begin(), allowed.end(), n);
      if (it == allowed.begin())
        bucket = allowed.front();
      else
        take = bucket = *std::prev(it);
    }
    buffers& b = *buf;
    std::uint64_t taken_cost = 0;
    time_point oldest = time_point::max();
    for (std::size_t l = c.levels.size(); l-- > 0 && b.requests.size() < take;) {
      auto& level = c.levels[l];
      while (b.requests.size() < take && !level.empty()) {
        node& x = level.front();
        if (!x.dead) {
          if (const std::optional<batch_errc> why = ops::ineligible(x, shed_before)) {
            ops::drop(c, x, *why, dropped);
          } else {
            b.requests.push_back(std::move(x.request));
            b.done.push_back(std::move(x.done));
            b.arrival.push_back(x.arrival);
            if (x.arrival < oldest) oldest = x.arrival;
            taken_cost += x.weight;
            --c.live;
            c.live_cost -= x.weight;
          }
        }
        level.pop_front();
      }
    }
    ops::purge_fronts(c, now, dropped);
    const std::size_t size = b.requests.size();
    if (c.sizes.size() <= size) c.sizes.resize(size + 1);
    ++c.sizes[size];
    c.fill_sum += static_cast<double>(size) / static_cast<double>(c.opt.max_batch);
    c.in_flight.fetch_add(size, std::memory_order_relaxed);
    c.in_flight_batches.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t id = ++c.batch_seq;
    return batch(core_, std::move(buf), bucket, taken_cost, id, c.opt.max_batch, now, oldest);
  }

  // Another worker may find the rest due; a blocked producer may find room. Unlocks lk.
  std::shared_ptr<core> core_;
};

FRUGAL_END_NAMESPACE
