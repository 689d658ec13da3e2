#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "frugal/cost/ledger.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/namespace.hpp"
#include "frugal/pool/errors.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief One tier of a cascade: a model of the pool, and what one call of it costs.
struct cascade_tier {
  std::string model;
  cost::money cost_per_call{};
};

/// @brief A cascade's settings; a plain aggregate for designated initializers.
template <class Model, class Input, class Answer, class Clock = std::chrono::steady_clock>
struct cascade_options {
  /// Cheapest first; at least one, each a model of the pool, no model twice.
  std::vector<cascade_tier> tiers{};
  /// Runs one tier's model on the input. Required.
  std::function<Answer(Model&, const Input&)> run{};
  /// Given a tier's answer and the tier's index, true sends the input on to the next tier. It is never
  /// called for the last tier, whose answer is final. Required.
  std::function<bool(const Answer&, std::size_t)> escalate{};
  /// Optional: a ledger to book each tier's calls in, under a feature named after the tier's model: every
  /// call's model time as a batch of one on ledger_device and as a request (so the ledger prices each
  /// tier), every escalation, and for every answer below the last tier the last tier's mean call time
  /// it avoided (the ledger's escalation_rate and cascade_saved by tier). Must outlive the cascade.
  cost::ledger<Clock>* ledger = nullptr;
  std::size_t ledger_device = 0;
};

/// @brief What a cascade returns: the final answer and the tier (index) that gave it.
template <class Answer>
struct cascade_result {
  Answer answer;
  std::size_t tier = 0;
};

/// @brief One tier in a cascade_stats snapshot.
struct cascade_tier_stats {
  std::string model;
  /// Inputs this tier ran on, answers it gave as final, and inputs it passed on.
  std::uint64_t calls = 0;
  std::uint64_t answered = 0;
  std::uint64_t escalated = 0;
  /// Calls that threw (the pool's errors or the model's); the input went no further.
  std::uint64_t failures = 0;
  /// calls · cost_per_call.
  cost::money cost{};
};

/// @brief A snapshot of a cascade.
struct cascade_stats {
  std::uint64_t requests = 0;
  std::vector<cascade_tier_stats> tiers{};
  /// Requests that went past the first tier, over all requests (0 before any).
  double escalation_rate = 0;
  /// What the calls cost, what sending every request to the last tier alone would have cost, and the
  /// difference (negative when escalating often makes the cascade dearer than the large tier alone).
  cost::money cost{};
  cost::money cost_largest_only{};
  cost::money saved{};
};

/// @brief Answers with the cheapest tier whose answer the escalate predicate accepts: a small model first,
/// the large one only for the hard cases. Each tier is leased from a model_pool for its call alone, so a
/// pool with room for one model at a time swaps them as needed. Thread-safe when run is.
template <class Pool, class Input, class Answer>
class cascade {
 public:
  using model_type = typename Pool::model_type;
  using options_type = cascade_options<model_type, Input, Answer, typename Pool::clock_type>;
  using result = cascade_result<Answer>;

  /// @brief Throws std::invalid_argument naming the field when a tier is not a model of the pool, a model
  /// repeats, or run or escalate is missing. The pool must outlive the cascade.
  cascade(Pool& pool, options_type opts) : pool_(&pool), opts_(std::move(opts)) {
    const std::string who = "frugal::cascade: options.";
    if (opts_.tiers.empty()) throw std::invalid_argument(who + "tiers must not be empty");
    if (!opts_.run) throw std::invalid_argument(who + "run is required");
    if (!opts_.escalate) throw std::invalid_argument(who + "escalate is required");
    for (std::size_t i = 0; i < opts_.tiers.size(); ++i) {
      const std::string at = who + "tiers[" + std::to_string(i) + "].model \"" + opts_.tiers[i].model + "\"";
      try {
        (void)pool.state(opts_.tiers[i].model);
      } catch (const unknown_model&) {
        throw std::invalid_argument(at + " is not a model of the pool");
      }
      for (std::size_t j = 0; j < i; ++j)
        if (opts_.tiers[j].model == opts_.tiers[i].model)
          throw std::invalid_argument(at + " repeats tiers[" + std::to_string(j) + "]");
      if (opts_.tiers[i].cost_per_call.nanos() < 0)
        throw std::invalid_argument(at + ": cost_per_call must not be negative");
      if (!(opts_.tiers[i].cost_per_call.cur() == opts_.tiers[0].cost_per_call.cur()))
        throw std::invalid_argument(at + ": cost_per_call must be in the currency of tiers[0]");
    }
    tiers_.resize(opts_.tiers.size());
    for (const auto& t : opts_.tiers) handles_.push_back(pool.find(t.model));
    if (opts_.ledger != nullptr) {
      if (opts_.ledger_device >= opts_.ledger->options().devices.size())
        throw std::invalid_argument(who + "ledger_device " + std::to_string(opts_.ledger_device) +
                                    " is not a device of the ledger (it has " +
                                    std::to_string(opts_.ledger->options().devices.size()) + ")");
      for (const auto& t : opts_.tiers) features_.push_back(opts_.ledger->feature(t.model));
    }
  }

  /// @brief Runs the tiers in order until one's answer is not escalated (or the last). An exception from
  /// the pool, run or escalate propagates and ends the request.
  result operator()(const Input& input) {
    {
      std::lock_guard lock(mutex_);
      ++requests_;
    }
    for (std::size_t i = 0;; ++i) {
      bool last = i + 1 == opts_.tiers.size();
      std::chrono::nanoseconds took{0};
      try {
        Answer a = run_tier(i, input, took);
        last = last || !opts_.escalate(a, i);
        count(i, last ? &counts::answered : &counts::escalated);
        book(i, last, took);
        if (last) return {std::move(a), i};
      } catch (...) {
        count(i, &counts::failures);
        throw;
      }
    }
  }

  cascade_stats stats() const {
    cascade_stats st;
    std::lock_guard lock(mutex_);
    st.requests = requests_;
    const cost::money zero = cost::money::from_nanos(0, opts_.tiers[0].cost_per_call.cur());
    st.cost = zero;
    for (std::size_t i = 0; i < tiers_.size(); ++i) {
      cascade_tier_stats t;
      t.model = opts_.tiers[i].model;
      t.calls = tiers_[i].calls;
      t.answered = tiers_[i].answered;
      t.escalated = tiers_[i].escalated;
      t.failures = tiers_[i].failures;
      t.cost = opts_.tiers[i].cost_per_call * static_cast<std::int64_t>(t.calls);
      st.cost += t.cost;
      st.tiers.push_back(std::move(t));
    }
    st.cost_largest_only = opts_.tiers.back().cost_per_call * static_cast<std::int64_t>(requests_);
    st.saved = st.cost_largest_only - st.cost;
    st.escalation_rate =
        requests_ == 0 ? 0.0 : static_cast<double>(tiers_[0].escalated) / static_cast<double>(requests_);
    return st;
  }

  const options_type& options() const noexcept { return opts_; }

 private:
  struct counts {
    std::uint64_t calls = 0, answered = 0, escalated = 0, failures = 0;
  };

  // Runs tier i. With a ledger, `took` is the model call's time on the ledger's clock (the lease's wait
  // and any cold start excluded), booked as the tier's batch and request, also when the call throws.
  Answer run_tier(std::size_t i, const Input& input, std::chrono::nanoseconds& took) {
    auto lease = pool_->acquire(handles_[i]);
    count(i, &counts::calls);
    if (opts_.ledger == nullptr) return opts_.run(*lease, input);
    struct booked {
      cascade& c;
      std::size_t i;
      std::chrono::nanoseconds& took;
      typename Pool::clock_type::time_point t0 = c.opts_.ledger->clock().now();
      int unwinding = std::uncaught_exceptions();
      ~booked() {
        took = std::chrono::duration_cast<std::chrono::nanoseconds>(c.opts_.ledger->clock().now() - t0);
        try {
          const auto o = std::uncaught_exceptions() > unwinding ? cost::outcome::error : cost::outcome::ok;
          c.opts_.ledger->record_batch(
              {.feature = c.features_[i], .device = c.opts_.ledger_device, .busy = took});
          c.opts_.ledger->record_request(c.features_[i], took, o);
        } catch (...) {  // a call the ledger refuses (past its range) is not booked
        }
      }
    } b{*this, i, took};
    return opts_.run(*lease, input);
  }

  // After tier i answered (final) or passed the request on: the escalation, or the last tier's time that
  // an answer below it avoided, at the last tier's mean call time so far. Answers given before the last
  // tier has run once wait for its first call to be priced.
  void book(std::size_t i, bool final, std::chrono::nanoseconds took) {
    if (opts_.ledger == nullptr) return;
    const std::size_t last = opts_.tiers.size() - 1;
    try {
      if (!final) {
        opts_.ledger->record_escalation(features_[i], took);
        return;
      }
      std::vector<std::pair<std::size_t, unpriced>> flush;
      std::chrono::nanoseconds mean{0};
      {
        std::lock_guard lock(mutex_);
        if (i == last) {
          last_calls_ += 1;
          last_time_ += took;
          if (last_calls_ == 1) {
            for (std::size_t k = 0; k < last; ++k)
              if (pending_[k].answers != 0) flush.emplace_back(k, std::exchange(pending_[k], unpriced{}));
          }
        } else if (last_calls_ == 0) {
          pending_[i].answers += 1;
          pending_[i].spent += took;
        } else {
          flush.emplace_back(i, unpriced{1, took});
        }
        if (last_calls_ != 0) mean = last_time_ / static_cast<std::int64_t>(last_calls_);
      }
      for (const auto& [k, u] : flush)
        opts_.ledger->record_cascade_answer(features_[k], mean * static_cast<std::int64_t>(u.answers),
                                            u.spent);
    } catch (...) {  // as above: not booked
    }
  }

  void count(std::size_t i, std::uint64_t counts::*field) {
    std::lock_guard lock(mutex_);
    ++(tiers_[i].*field);
  }

  // Answers below the last tier not yet priced (the last tier has not run).
  struct unpriced {
    std::uint64_t answers = 0;
    std::chrono::nanoseconds spent{0};
  };

  Pool* pool_;
  std::vector<typename Pool::handle> handles_;  // the tiers' models, found once
  const options_type opts_;
  std::vector<cost::feature_id> features_;  // the tiers' features in the ledger, if any
  mutable std::mutex mutex_;
  std::uint64_t requests_ = 0;
  std::vector<counts> tiers_;
  std::vector<unpriced> pending_ = std::vector<unpriced>(opts_.tiers.size());
  std::uint64_t last_calls_ = 0;
  std::chrono::nanoseconds last_time_{0};
};

FRUGAL_END_NAMESPACE
