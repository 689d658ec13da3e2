#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "frugal/detail/saturating.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief What a policy sees when the batcher asks whether a partial batch should go now. The batcher
/// itself dispatches a full batch (max_batch or max_batch_cost reached) and everything after close().
struct policy_view {
  /// The batcher clock's time since its epoch.
  std::chrono::nanoseconds now{0};
  /// How long the oldest queued request has waited.
  std::chrono::nanoseconds oldest_wait{0};
  std::size_t queued = 0;
  std::uint64_t queued_cost = 0;
  /// The largest batch that may be cut now (max_batch, lowered to an allowed size).
  std::size_t max_batch = 0;
  std::uint64_t max_batch_cost = 0;
  std::chrono::nanoseconds window{0};
  std::size_t in_flight_batches = 0;
  /// Requests enqueued since construction; differences over `now` give the arrival rate.
  std::uint64_t arrivals = 0;
};

/// @brief What the batcher tells a learning policy when a batch resolves.
struct batch_report {
  std::size_t size = 0;
  std::uint64_t cost = 0;
  /// From hand-out to resolution, or the duration the worker passed to batch::report_duration.
  std::chrono::nanoseconds run_time{0};
};

/// @brief A policy decides how much longer a partial batch waits. wait_for() is called under the
/// batcher's lock, so it must be quick and must not call back into the batcher. A zero or negative
/// answer means dispatch now.
template <class P>
concept batch_policy = requires(P& p, const policy_view& v) {
  { p.wait_for(v) } -> std::convertible_to<std::chrono::nanoseconds>;
};

/// @brief A policy that also learns from finished batches.
template <class P>
concept learning_policy = batch_policy<P> && requires(P& p, const batch_report& r) {
  p.on_batch_done(r);
};

/// @brief A policy that predicts a batch's run time. The batcher then also fails, with deadline_exceeded,
/// queued requests whose deadline would pass before a batch cut now could finish, instead of running them
/// late: under overload this keeps the model busy with requests that can still make it.
template <class P>
concept predicting_policy = batch_policy<P> && requires(const P& p, std::size_t n) {
  { p.expected_run_time(n) } -> std::convertible_to<std::chrono::nanoseconds>;
};

/// @brief A batch goes when it is full or its oldest request has waited options.window.
struct fixed_window {
  std::chrono::nanoseconds wait_for(const policy_view& v) const noexcept {
    return detail::saturating_sub(v.window, v.oldest_wait);
  }
};

/// @brief Settings of the adaptive policy. Only latency_target is meant to be set.
struct adaptive_options {
  /// The end-to-end latency (queue wait plus batch run time) the policy plans for.
  std::chrono::nanoseconds latency_target = std::chrono::milliseconds(50);
  /// Fraction of the target the policy plans to use, leaving the rest for noise in run times.
  double safety = 0.7;
  /// How far above the break-even size (the batch that just keeps up with arrivals) it aims.
  double headroom = 1.25;
  /// Weight of the newest batch in the a*n + b fit.
  double learning_rate = 0.05;
  /// Time constant of the arrival-rate estimate; 0 means twice latency_target.
  std::chrono::nanoseconds rate_horizon{0};
  /// Fail (deadline_exceeded) a request whose deadline would pass before its batch could finish, rather
  /// than spend model time on a result that comes too late. See predicting_policy.
  bool shed_hopeless = true;
};

/// @brief Learns the model's batch time as a*n + b from finished batches and the arrival rate from the
/// queue, then waits only while waiting pays. A partial batch goes at once when it already keeps up with
/// arrivals (n/(a*n+b) >= rate, with headroom), so light load is served greedily; otherwise it waits
/// for the break-even size but never so long that the oldest request would miss latency_target.
/// Ignores options.window. Until it has seen a batch it is greedy. With shed_hopeless it also drops
/// requests that could no longer meet their deadline.
class adaptive {
 public:
  adaptive() = default;
  explicit adaptive(adaptive_options o) : o_(o) {
    if (o_.latency_target <= std::chrono::nanoseconds::zero())
      throw std::invalid_argument("frugal::adaptive: options.latency_target must be > 0");
    if (!(o_.safety > 0 && o_.safety <= 1))
      throw std::invalid_argument("frugal::adaptive: options.safety must be in (0, 1]");
    if (!(o_.headroom >= 1) || !std::isfinite(o_.headroom))
      throw std::invalid_argument("frugal::adaptive: options.headroom must be finite and >= 1");
    if (!(o_.learning_rate > 0 && o_.learning_rate <= 1))
      throw std::invalid_argument("frugal::adaptive: options.learning_rate must be in (0, 1]");
    if (o_.rate_horizon < std::chrono::nanoseconds::zero())
      throw std::invalid_argument("frugal::adaptive: options.rate_horizon must be >= 0");
  }

  std::chrono::nanoseconds wait_for(const policy_view& v) noexcept {
    observe_arrivals(v);
    if (!fitted_ || v.queued >= v.max_batch) return std::chrono::nanoseconds::zero();
    const double cap = static_cast<double>(v.max_batch);
    double need = cap;
    if (rate_ * a_ < 1) need = std::min(cap, std::ceil(rate_ * b_ / (1 - rate_ * a_) * o_.headroom));
    need = std::max(need, 1.0);
    if (static_cast<double>(v.queued) >= need) return std::chrono::nanoseconds::zero();
    const double budget = static_cast<double>(o_.latency_target.count()) * o_.safety -
                          static_cast<double>(v.oldest_wait.count()) - (a_ * need + b_);
    return detail::clamp_ns(budget);
  }

  void on_batch_done(const batch_report& r) noexcept {
    // A negative run time (a clock that stepped back during the batch) counts as 0: a negative fit would
    // predict batches that finish before they start.
    const double n = static_cast<double>(r.size),
                 t = static_cast<double>(std::max<std::int64_t>(0, r.run_time.count()));
    const double keep = samples_ == 0 ? 0.0 : 1 - o_.learning_rate;
    sw_ = sw_ * keep + 1;
    sn_ = sn_ * keep + n;
    snn_ = snn_ * keep + n * n;
    st_ = st_ * keep + t;
    snt_ = snt_ * keep + n * t;
    ++samples_;
    const double det = sw_ * snn_ - sn_ * sn_;
    if (det > 1e-9 * sw_ * snn_) {
      a_ = (sw_ * snt_ - sn_ * st_) / det;
      b_ = (st_ - a_ * sn_) / sw_;
    } else {
      // One batch size seen so far: the split between a and b is unknown, so assume batching is free.
      a_ = 0;
      b_ = st_ / sw_;
    }
    if (a_ < 0) {
      a_ = 0;
      b_ = st_ / sw_;
    }
    if (b_ < 0) {
      b_ = 0;
      a_ = snn_ > 0 ? snt_ / snn_ : 0;
    }
    fitted_ = true;
  }

  /// @brief a*n + b once fitted (0 before, or without shed_hopeless).
  std::chrono::nanoseconds expected_run_time(std::size_t n) const noexcept {
    if (!fitted_ || !o_.shed_hopeless) return std::chrono::nanoseconds::zero();
    return detail::clamp_ns(a_ * static_cast<double>(n) + b_);
  }

  /// @brief The learned per-request time a, in nanoseconds.
  double slope_ns() const noexcept { return a_; }
  /// @brief The learned fixed time per batch b, in nanoseconds.
  double intercept_ns() const noexcept { return b_; }
  /// @brief The estimated arrival rate, in requests per second.
  double arrival_rate() const noexcept { return rate_ * 1e9; }
  bool fitted() const noexcept { return fitted_; }
  const adaptive_options& options() const noexcept { return o_; }

 private:
  void observe_arrivals(const policy_view& v) noexcept {
    // A clock that stepped back, or an arrival count that went down, restarts the measurement from here:
    // the difference means nothing, and waiting for the clock to pass the old time would freeze the rate.
    if (!rate_started_ || v.now < last_now_ || v.arrivals < last_arrivals_) {
      rate_started_ = true;
      last_now_ = v.now;
      last_arrivals_ = v.arrivals;
      return;
    }
    const double dt = static_cast<double>(detail::saturating_sub(v.now, last_now_).count());
    if (dt <= 0) return;
    const std::chrono::nanoseconds h = o_.rate_horizon.count() > 0
                                           ? o_.rate_horizon
                                           : detail::saturating_add(o_.latency_target, o_.latency_target);
    const double horizon = static_cast<double>(h.count());
    // An exponential kernel over arrivals: each arrival adds 1/horizon, old ones fade with e^(-dt/horizon).
    const double fade = std::exp(-dt / horizon);
    rate_ = rate_ * fade + static_cast<double>(v.arrivals - last_arrivals_) / horizon;
    last_now_ = v.now;
    last_arrivals_ = v.arrivals;
  }

  adaptive_options o_{};
  double sw_ = 0, sn_ = 0, snn_ = 0, st_ = 0, snt_ = 0;
  std::size_t samples_ = 0;
  double a_ = 0, b_ = 0;
  bool fitted_ = false;
  bool rate_started_ = false;
  std::chrono::nanoseconds last_now_{0};
  std::uint64_t last_arrivals_ = 0;
  double rate_ = 0;  // requests per nanosecond
};

FRUGAL_END_NAMESPACE
