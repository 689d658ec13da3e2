#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <stop_token>
#include <utility>
#include <vector>

#include "frugal/batcher/detail/inline_function.hpp"
#include "frugal/batcher/detail/ring.hpp"
#include "frugal/batcher/errors.hpp"
#include "frugal/batcher/options.hpp"
#include "frugal/cost/histogram.hpp"
#include "frugal/detail/spin.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

// Cleared batch buffers kept for reuse, so a steady stream of batches allocates nothing; past this many a
// returned buffer is freed, so a batcher that once had many batches out does not hold them all when idle.
inline constexpr std::size_t max_spare_buffers = 16;

// The most priority levels batcher_options accepts: a cut scans every level, and priorities are a handful
// of classes, not a key.
inline constexpr std::size_t max_priority_levels = 256;

// How often a worker rereads a clock it cannot sleep on (e.g. manual_clock) when nothing wakes it.
inline constexpr std::chrono::milliseconds manual_clock_poll{1};

// The queue lock is held for a few dozen nanoseconds, so a short spin usually wins it without the
// futex sleep and wake that a contended std::mutex costs.
inline void lock_briefly_spinning(std::unique_lock<std::mutex>& lk) {
  for (unsigned i = 0; i < spin_limit; ++i) {
    if (lk.try_lock()) return;
    cpu_pause();
  }
  lk.lock();
}

// The largest allowed size <= max_batch: the most a batch may take.
inline std::size_t effective_cap(const batcher_options& o) {
  if (o.allowed_sizes.empty()) return o.max_batch;
  auto it = std::upper_bound(o.allowed_sizes.begin(), o.allowed_sizes.end(), o.max_batch);
  return *std::prev(it);
}

// Where one request of a handed-out batch stands. Resolving many at once takes two passes (mark, account,
// then deliver), so that a caller who saw every result also sees it counted in stats().
enum class request_state : unsigned char {
  pending,    // not resolved yet
  resolved,   // delivered
  resolving,  // marked by the first pass of a resolution, delivered by its second
  counted,    // resolved alone before the rest of its batch and counted at once; finish() skips it
};

template <class Result>
using batch_callback = inline_function<void(result<Result>)>;

template <class Result>
void deliver(batch_callback<Result>& done, result<Result>&& r) noexcept {
  done(std::move(r));
  done.reset();
}

// One latency (queue wait or end to end): the cost ledger's histogram, so that stats() and a ledger report
// the same percentiles for the same latencies, and the exact maximum, which that histogram does not keep.
struct latency_record {
  cost::log_linear_histogram histogram;
  std::uint64_t max = 0;

  void record(std::int64_t ns) noexcept {
    const std::uint64_t v = ns < 0 ? 0 : static_cast<std::uint64_t>(ns);  // a clock that stepped back
    histogram.count_only(v);
    if (v > max) max = v;
  }

  // The buckets are atomics, so this may run outside the lock that record() runs under; `max_seen` is
  // `max` as read under that lock.
  latency_summary summary(std::uint64_t max_seen) const {
    const cost::histogram_snapshot h = histogram.snapshot();
    auto ns = [](std::uint64_t v) { return std::chrono::nanoseconds(static_cast<std::int64_t>(v)); };
    return {.p50 = ns(h.value_at(0.50)),
            .p90 = ns(h.value_at(0.90)),
            .p99 = ns(h.value_at(0.99)),
            .max = ns(max_seen),
            .count = h.count};
  }
};

// The state a batcher shares with the batches it hands out, so a batch may outlive its batcher.
template <class Request, class Result, class Policy, class Clock>
struct batcher_core {
  using time_point = typename Clock::time_point;
  using callback = batch_callback<Result>;

  struct node {
    Request request;
    callback done;
    time_point arrival;
    time_point deadline;
    std::stop_token stop;
    std::uint64_t weight;
    request_id id;
    bool dead;  // cancelled by id: already resolved and uncounted, popped once it reaches the front
  };

  // A batch's requests and their bookkeeping, recycled through spare.
  struct buffers {
    std::vector<Request> requests;
    std::vector<callback> done;
    std::vector<time_point> arrival;
    std::vector<std::int64_t> latency;  // end-to-end ns of a completed item, -1 otherwise
    std::vector<request_state> state;
    void clear() noexcept {
      requests.clear();
      done.clear();
      arrival.clear();
      latency.clear();
      state.clear();
    }
  };

  batcher_core(batcher_options o, Clock c, Policy p)
      : clock(std::move(c)), opt(std::move(o)), policy(std::move(p)), levels(opt.priority_levels) {
    cap = effective_cap(opt);
  }

  std::unique_ptr<buffers> take_buffers() {
    std::unique_ptr<buffers> b;
    {
      std::lock_guard g(sm);
      if (!spare.empty()) {
        b = std::move(spare.back());
        spare.pop_back();
      }
    }
    if (!b) b = std::make_unique<buffers>();
    return b;
  }

  void return_buffers(std::unique_ptr<buffers> b) {
    if (!b) return;
    b->clear();
    std::lock_guard g(sm);
    if (spare.size() < max_spare_buffers) spare.push_back(std::move(b));
  }

  Clock clock;

  // Queue state, guarded by m.
  std::mutex m;
  std::condition_variable work_cv;
  std::condition_variable space_cv;
  batcher_options opt;
  std::size_t cap = 0;
  Policy policy;
  std::vector<ring<node>> levels;
  std::size_t live = 0;
  std::uint64_t live_cost = 0;
  std::size_t waiting_workers = 0;
  std::vector<time_point> sleepers;  // when each waiting worker will wake by itself
  bool wake_pending = false;         // a worker was signalled and has not woken yet
  std::size_t blocked_producers = 0;
  // Threads inside a blocking call (next_batch, a submit that waited for room); the destructor waits,
  // after close, until they have left, and they signal left_cv on the way out once closed.
  std::size_t inside = 0;
  std::condition_variable left_cv;
  bool closed = false;
  request_id next_id = 1;
  std::uint64_t arrivals = 0, submitted = 0, batch_seq = 0;
  std::uint64_t f_deadline = 0, f_cancelled = 0, f_queue_full = 0, f_closed = 0, f_timeout = 0;
  std::vector<std::uint64_t> sizes;
  double fill_sum = 0;
  // Written under m (hand-out) and under sm (resolution); stats() holds both.
  std::atomic<std::size_t> in_flight{0}, in_flight_batches{0};

  // Resolution statistics and spare batch buffers, guarded by sm.
  std::mutex sm;
  std::uint64_t completed = 0, f_abandoned = 0, f_mismatch = 0, f_model = 0, finished_batches = 0;
  std::int64_t run_time_sum = 0;
  latency_record queue_wait, end_to_end;
  std::vector<std::unique_ptr<buffers>> spare;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
