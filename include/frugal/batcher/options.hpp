#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief What submit does when the queue is at max_queued or max_queued_cost.
enum class overflow {
  reject,  ///< fail at once with queue_full; nothing is enqueued (load shedding)
  block,   ///< wait for room up to block_timeout, then fail with timeout (backpressure)
};

/// @brief Whether close() lets workers drain what is queued or fails it with closed.
enum class drain { yes, no };

/// @brief A batcher's settings. Everything but priority_levels may be changed at run time with
/// set_options(); a change takes effect for the next batch.
struct batcher_options {
  /// How long the oldest queued request may wait for company. The clock starts when that request
  /// arrives (submit), not when the previous batch left. 0 is greedy: a worker takes whatever is queued.
  std::chrono::nanoseconds window{0};
  /// A batch is due as soon as this many requests are queued, and never holds more.
  std::size_t max_batch = 32;
  /// If non-zero, a batch's total weight (see submit_options::weight) never exceeds this, and a batch
  /// is due once the queued weight reaches it. Use it when requests differ in cost (tokens, pixels).
  std::uint64_t max_batch_cost = 0;
  /// If non-empty, batches are cut to the largest listed size that is available (e.g. {1,2,4,8,16,32}
  /// for CUDA graphs or static engines); the rest stays queued. Nothing is padded: batch::bucket() says
  /// which size the batch belongs to.
  std::vector<std::size_t> allowed_sizes{};
  /// Priority levels; submit_options::priority is in [0, priority_levels), higher first, FIFO within one.
  std::size_t priority_levels = 1;
  /// If non-zero, at most this many requests are queued (not counting batches handed out).
  std::size_t max_queued = 0;
  /// If non-zero, the queued weight never exceeds this.
  std::uint64_t max_queued_cost = 0;
  /// What submit does when a queue limit is hit.
  overflow on_overflow = overflow::reject;
  /// With overflow::block, how long submit waits for room before failing with timeout. A single-threaded
  /// driver (a simulation or fuzz harness on a manual clock) should use overflow::reject: nothing else could
  /// make room while its only thread waits.
  std::chrono::nanoseconds block_timeout = std::chrono::nanoseconds::max();
};

/// @brief Identifies a submitted request, for cancel().
using request_id = std::uint64_t;

/// @brief Per-request settings for submit.
template <class TimePoint>
struct basic_submit_options {
  /// In [0, priority_levels); higher is served first.
  std::size_t priority = 0;
  /// The request's cost against max_batch_cost and max_queued_cost (e.g. its token count).
  std::uint64_t weight = 1;
  /// If the request is still queued at this time it fails with deadline_exceeded and never runs.
  /// TimePoint::max(), the default, means no deadline: such a request never fails for its deadline.
  TimePoint deadline = TimePoint::max();
  /// Stopping it cancels the request while it is queued (it fails with cancelled and never runs). The
  /// batcher notices at its next look at the queue: when a worker asks for or cuts a batch, or on sweep().
  std::stop_token stop{};
};

/// @brief What a worker (or a cost ledger) wants to know about one batch, in one plain struct.
struct batch_info {
  std::uint64_t id = 0;
  std::size_t size = 0;
  /// The allowed size it was cut to (>= size); size when allowed_sizes is empty.
  std::size_t bucket = 0;
  std::uint64_t cost = 0;
  /// max_batch when it was cut, so size / max_batch is its fill ratio.
  std::size_t max_batch = 0;
  /// How long its oldest request waited in the queue.
  std::chrono::nanoseconds queue_wait{0};
};

/// @brief p50/p90/p99 and max of a latency. The percentiles come from the cost ledger's histogram
/// (cost::log_linear_histogram; nearest rank, within value/2048), so they equal a ledger's for the same
/// latencies; max is exact.
struct latency_summary {
  std::chrono::nanoseconds p50{0};
  std::chrono::nanoseconds p90{0};
  std::chrono::nanoseconds p99{0};
  std::chrono::nanoseconds max{0};
  std::uint64_t count = 0;
};

/// @brief Requests failed, by cause.
struct failure_counts {
  std::uint64_t deadline_exceeded = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t queue_full = 0;
  std::uint64_t closed = 0;
  std::uint64_t abandoned = 0;
  std::uint64_t result_count_mismatch = 0;
  std::uint64_t timeout = 0;
  /// Failed by the worker through batch::fail (the model's own errors).
  std::uint64_t model_error = 0;

  std::uint64_t total() const noexcept {
    return deadline_exceeded + cancelled + queue_full + closed + abandoned + result_count_mismatch + timeout +
           model_error;
  }
};

/// @brief A snapshot of a batcher. submitted == completed + failed.total() + queue_depth + in_flight holds
/// in every snapshot.
struct batcher_stats {
  /// Every submit call that did not throw, including the ones rejected at once.
  std::uint64_t submitted = 0;
  /// Requests whose result was delivered.
  std::uint64_t completed = 0;
  failure_counts failed{};
  /// Batches handed to workers.
  std::uint64_t batches = 0;
  /// batch_sizes[n] is how many batches held n requests.
  std::vector<std::uint64_t> batch_sizes{};
  /// From arrival to the moment its batch was handed out, over every request handed out.
  latency_summary queue_wait{};
  /// From arrival to result delivery, over completed requests.
  latency_summary end_to_end{};
  std::size_t queue_depth = 0;
  std::uint64_t queued_cost = 0;
  /// Requests in batches handed out and not yet resolved.
  std::size_t in_flight = 0;
  std::size_t in_flight_batches = 0;
  /// Workers blocked in next_batch and producers blocked in submit (overflow::block) right now.
  std::size_t waiting_workers = 0;
  std::size_t blocked_submits = 0;
  double mean_batch_size = 0;
  /// Mean over batches of size / max_batch (max_batch as it was when the batch was cut).
  double mean_fill_ratio = 0;
  /// Mean time from hand-out to resolution (or the duration the worker reported).
  std::chrono::nanoseconds mean_batch_run_time{0};
};

FRUGAL_END_NAMESPACE
