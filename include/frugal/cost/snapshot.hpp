#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/cost/histogram.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {

/// @brief How a request ended. cancelled: its caller gave up on it (a client that left), which is
/// neither a failure of the service nor a success.
enum class outcome : std::uint8_t { ok, error, deadline_exceeded, rejected, cancelled };
inline constexpr std::size_t outcome_count = 5;
/// @brief "ok", "error", "deadline_exceeded", "rejected" or "cancelled".
inline constexpr std::string_view to_string(outcome o) noexcept {
  constexpr std::string_view names[] = {"ok", "error", "deadline_exceeded", "rejected", "cancelled"};
  return names[static_cast<std::size_t>(o)];
}

/// @brief How a device is paid for.
enum class billing : std::uint8_t { on_demand, spot };
inline constexpr std::string_view to_string(billing b) noexcept {
  return b == billing::spot ? "spot" : "on_demand";
}

/// @brief What happens to idle cost (GPU-hours paid but not busy), as OpenCost offers.
enum class idle_sharing : std::uint8_t {
  none,     ///< reported apart, not charged to any feature
  by_busy,  ///< each device's idle cost shared out to features in proportion to their busy time on it
  uniform,  ///< each device's idle cost split evenly between the features active in the window
};

/// @brief The price of one GPU class: on-demand, and spot where a device is billed as spot.
struct gpu_price {
  std::string gpu_class;
  rate on_demand{};
  rate spot{};
};

/// @brief One GPU (or replica) that the ledger pays for; its id is its index in ledger_options::devices.
struct device_spec {
  std::string gpu_class;  ///< must name an entry of ledger_options::prices
  billing pricing = billing::on_demand;
  std::string name{};  ///< label in exports; defaults to the index
};

/// @brief Alert thresholds; the defaults are the ones cost guides recommend.
struct thresholds {
  bool enabled = true;
  /// Utilization (busy over wall time, per device) under this, over a window of at least
  /// `utilization_window`.
  double utilization_low = 0.30;
  /// Utilization over this, over a window of at least `utilization_window`: the fleet is saturated.
  double utilization_high = 0.90;
  std::chrono::nanoseconds utilization_window = std::chrono::minutes(10);
  /// Memory use over this fraction for at least `memory_window`, from record_memory().
  double memory_high = 0.80;
  std::chrono::nanoseconds memory_window = std::chrono::minutes(10);
  /// p99 latency over this, per feature and in total.
  std::chrono::nanoseconds p99_max = std::chrono::milliseconds(500);
  /// Queue depth over this fraction of its limit, from record_queue_depth().
  double queue_high = 0.80;
};

/// @brief A threshold that fires: which check, on what, the value against its threshold, and why in words.
struct alert {
  std::string check;    ///< utilization_low, utilization_high, memory_high, p99_latency or queue_depth
  std::string subject;  ///< "device 0", "feature chat", "total" or "queue"
  double value = 0;
  double threshold = 0;
  std::string message;
};

/// @brief A fitted batch-time model t(n) = a·n + b, by least squares over the recorded batches.
struct batch_model {
  bool valid = false;  ///< needs at least two batches of different sizes
  double a_ns = 0;     ///< marginal time per item
  double b_ns = 0;     ///< fixed time per batch
  /// @brief The predicted time of a batch of n.
  double predict_ns(double n) const noexcept { return a_ns * n + b_ns; }
};

/// @brief Latency percentiles, from the log-linear histogram (3 significant digits).
struct latency_percentiles {
  std::chrono::nanoseconds p50{0}, p90{0}, p99{0}, p999{0};
};

/// @brief The figures for one feature, or for all of them together.
struct feature_figures {
  std::string name;
  std::uint64_t requests = 0;  ///< record_request() calls
  std::array<std::uint64_t, outcome_count> by_outcome{};
  std::uint64_t batches = 0;
  std::uint64_t batched_items = 0;  ///< sum of batch sizes
  std::uint64_t tokens_in = 0, tokens_out = 0;
  std::chrono::nanoseconds busy{0};  ///< GPU-busy time
  std::vector<std::chrono::nanoseconds> busy_by_device;
  money busy_cost{};   ///< busy time priced at each device's rate
  money idle_share{};  ///< idle cost charged to this feature (idle_sharing other than none)
  money cost{};        ///< busy_cost + idle_share; for the total: everything paid
  money cost_per_request{};
  double mean_batch_size = 0;
  double fill = 0;  ///< batched items over batch capacity, where capacity was given
  std::uint64_t cache_hits = 0;
  double cache_hit_ratio = 0;  ///< cache hits over requests
  std::chrono::nanoseconds cache_saved_time{0};
  money cache_saved{};
  std::uint64_t remote_hits = 0;               ///< of cache_hits, those served by a shared tier (Redis)
  std::chrono::nanoseconds remote_latency{0};  ///< summed latency of those remote hits
  std::uint64_t remote_faults = 0;             ///< shared-tier faults that fell back to the model
  /// Of cache_hits, those a semantic cache answered from a similar, not identical, input; exact hits are
  /// cache_hits − semantic_hits. Their saving is part of cache_saved, priced at the same rate.
  std::uint64_t semantic_hits = 0;
  std::chrono::nanoseconds semantic_saved_time{0};
  money semantic_saved{};
  /// A cascade's tier (frugal::cascade with a ledger): requests this tier passed on to the next, over its
  /// requests; and what the cascade saved on this tier against sending every request to the last tier:
  /// the last tier's time avoided by this tier's answers, less this tier's own time on the requests it
  /// answered or passed on. Negative when escalating costs more than it saves.
  std::uint64_t escalations = 0;
  double escalation_rate = 0;
  std::chrono::nanoseconds cascade_saved_time{0};
  money cascade_saved{};
  batch_model model{};
  std::chrono::nanoseconds batching_saved_time{0};  ///< b·(items − batches): fixed costs not paid per request
  money batching_saved{};
  latency_percentiles latency{};
  histogram_snapshot latency_histogram{};  ///< in nanoseconds
  // Generation (a decoder's requests), from record_generation, record_response_hit and the token latencies.
  std::uint64_t generations = 0;           ///< record_generation() calls: requests that reached the model
  std::uint64_t prompt_tokens = 0;         ///< of those requests
  std::uint64_t cached_prompt_tokens = 0;  ///< of prompt_tokens, served from the prefix cache
  std::uint64_t generated_tokens = 0;
  /// Tokens of the requests the response cache answered (record_response_hit): served, not computed.
  std::uint64_t response_prompt_tokens = 0;
  std::uint64_t response_generated_tokens = 0;
  /// The feature's cost split between prefill and decode by the measured cost of their tokens (see
  /// step_cost_model), per 1M prompt tokens and per 1M generated tokens served, as providers price them:
  /// the tokens served from the prefix cache and those of response cache hits count, so both caches lower
  /// it. Zero until record_step_cost() has measured the tokens.
  money cost_per_million_input{};
  money cost_per_million_output{};
  /// What the prefix cache saved: its cached prompt tokens at the measured cost of a prefill token.
  std::chrono::nanoseconds prefix_saved_time{0};
  money prefix_saved{};
  /// Response cache hits (also counted in cache_hits), and what they saved: the hits' prompt tokens at
  /// the cost of a prefill token plus their generated tokens at the cost of a decode token (part of
  /// cache_saved).
  std::uint64_t response_hits = 0;
  std::chrono::nanoseconds response_saved_time{0};
  money response_saved{};
  latency_percentiles time_to_first_token{};
  histogram_snapshot time_to_first_token_histogram{};  ///< in nanoseconds
  latency_percentiles inter_token_latency{};
  histogram_snapshot inter_token_latency_histogram{};  ///< in nanoseconds
};

/// @brief The measured cost of a prefill token and of a decode token (one sequence's decode step), from
/// record_step_cost(). A step that ran tokens of one kind only is that kind's time, whole. The time of the
/// mixed steps is split between prefill and decode in proportion to their variable costs prefill·P and
/// decode·D, from a least-squares fit over every step of t = fixed + prefill·p + decode·d (p prefill and d
/// decode tokens in the step), so that a mixed step's fixed cost (e.g. reading the weights once) is shared
/// between the tokens that ran in it; without a fit (fewer than 3 steps, p and d that do not vary
/// independently, or a fitted marginal cost <= 0) every token of the mixed steps costs the same. The two
/// parts add up to the busy time measured.
struct step_cost_model {
  std::uint64_t steps = 0;
  std::uint64_t prefill_tokens = 0;
  std::uint64_t decode_tokens = 0;
  std::chrono::nanoseconds busy{0};
  bool fitted = false;
  double fixed_ns = 0;             ///< the fitted time of a step, apart from its tokens
  double prefill_marginal_ns = 0;  ///< the fitted time of one more prefill token
  double decode_marginal_ns = 0;   ///< the fitted time of one more decode token
  double prefill_token_ns = 0;     ///< busy time per prefill token, after the split
  double decode_token_ns = 0;      ///< busy time per decode token, after the split
};

/// @brief The figures for one device.
struct device_figures {
  std::string name;
  std::string gpu_class;
  billing pricing = billing::on_demand;
  rate price{};
  std::chrono::nanoseconds busy{0};
  std::chrono::nanoseconds load{0};  ///< model load time (overhead)
  std::chrono::nanoseconds idle{0};
  double utilization = 0;  ///< busy over wall time, at most 1
  money paid{};            ///< wall time priced (the GPU-hours paid), or busy + load when that is more
  money busy_cost{};
  money overhead_cost{};  ///< load time priced
  money idle_cost{};      ///< paid − busy − overhead
  std::uint64_t model_loads = 0, model_unloads = 0;
  std::optional<double> memory_fraction;  ///< the last record_memory() figure
  // Preemptions (frugal::job), from record_preemption().
  std::uint64_t preemptions = 0;
  std::uint64_t redone_records = 0;    ///< records computed again after a resume (past the last checkpoint)
  std::chrono::nanoseconds redone{0};  ///< the time those records took again
  money redone_cost{};                 ///< that time priced at the device's rate (part of busy_cost)
};

namespace detail {

enum field : std::size_t {
  f_batches,
  f_items,
  f_capacity,
  f_capacity_items,
  f_tokens_in,
  f_tokens_out,
  f_sum_n2,
  f_sum_nt,
  f_busy,
  f_outcome0,
  f_latency_sum = f_outcome0 + outcome_count,
  f_hits_explicit,
  f_saved_explicit,
  f_hits_implicit,
  f_remote_hits,
  f_remote_latency_sum,
  f_remote_faults,
  f_semantic_hits_explicit,
  f_semantic_saved_explicit,
  f_semantic_hits_implicit,
  f_escalations,
  f_cascade_avoided,
  f_cascade_spent,
  f_generations,
  f_prompt_tokens,
  f_cached_prompt_tokens,
  f_generated_tokens,
  f_response_hits,
  f_response_prompt_tokens,
  f_response_generated_tokens,
  f_fixed_count,
};
// Ledger-wide sums of record_step_cost(), for the least-squares fit of the step's time.
// s_p1 and s_t1: the prefill tokens and time of steps that ran no decode token; s_d1 and s_t1d: the decode
// tokens and time of steps that ran no prefill token.
enum step_field : std::size_t {
  s_steps,
  s_p,
  s_d,
  s_t,
  s_pp,
  s_dd,
  s_pd,
  s_pt,
  s_dt,
  s_p1,
  s_t1,
  s_d1,
  s_t1d,
  s_field_count
};
enum device_field : std::size_t {
  d_load,
  d_loads,
  d_unloads,
  d_preemptions,
  d_redone_records,
  d_redone,
  d_field_count
};

// Cumulative counters since the ledger started; a snapshot keeps them so that a later one can be cut to the
// window in between.
struct raw_feature {
  std::string name;
  std::array<std::uint64_t, f_fixed_count> c{};
  std::vector<std::uint64_t> busy_by_device;
  histogram_snapshot hist;
  histogram_snapshot ttft, itl;
};
struct raw_device {
  std::array<std::uint64_t, d_field_count> c{};
  std::optional<double> memory_fraction;
  std::optional<std::int64_t> memory_high_since_ns;
};
struct raw_state {
  std::int64_t at_ns = 0;  // since the ledger started
  std::vector<raw_feature> features;
  std::vector<raw_device> devices;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> queue;  // depth, limit
  std::array<std::uint64_t, s_field_count> steps{};
};

struct ledger_config {
  std::vector<device_spec> devices;
  std::vector<rate> device_rates;
  currency cur;
  idle_sharing share = idle_sharing::none;
  thresholds alerts;
};

}  // namespace detail

struct ledger_snapshot;
namespace detail {
inline ledger_snapshot derive(std::shared_ptr<const ledger_config> cfg, raw_state now, const raw_state* base);
}  // namespace detail

/// @brief What the ledger says at one moment, over a window: since the ledger started, or since an earlier
/// snapshot (see since()). Money is exact (nano-units); ratios are 0..1.
struct ledger_snapshot {
  std::chrono::nanoseconds window_start{0};  ///< since the ledger started
  std::chrono::nanoseconds at{0};            ///< since the ledger started
  std::chrono::nanoseconds wall{0};          ///< at − window_start
  currency cur{};
  std::vector<feature_figures> features;
  feature_figures total;
  std::vector<device_figures> devices;
  money total_cost{};        ///< everything paid: busy + overhead + idle
  money busy_cost{};         ///< workload cost
  money overhead_cost{};     ///< model loads
  money idle_cost{};         ///< paid but not busy
  money unallocated_idle{};  ///< idle cost not shared out to a feature
  idle_sharing share = idle_sharing::none;
  double utilization = 0;                                        ///< fleet busy over fleet wall time
  std::optional<std::pair<std::uint64_t, std::uint64_t>> queue;  ///< last (depth, limit)
  std::vector<alert> alerts;
  step_cost_model step_costs{};  ///< the measured cost of a prefill token and of a decode token

  /// @brief The figures for the feature named `name`, or nullptr.
  const feature_figures* find(std::string_view name) const noexcept {
    for (const auto& t : features)
      if (t.name == name) return &t;
    return nullptr;
  }

  /// @brief The same figures over the window from `earlier` (a snapshot of the same ledger) to this one.
  ledger_snapshot since(const ledger_snapshot& earlier) const;

 private:
  friend ledger_snapshot detail::derive(std::shared_ptr<const detail::ledger_config>, detail::raw_state,
                                        const detail::raw_state*);
  // The ledger's cumulative counters at `at`, kept so that a later snapshot can be cut to the window between.
  std::shared_ptr<const detail::ledger_config> config_;
  detail::raw_state raw_;
};

inline ledger_snapshot ledger_snapshot::since(const ledger_snapshot& earlier) const {
  if (!config_ || config_ != earlier.config_)
    throw std::invalid_argument(
        "frugal::cost::ledger_snapshot::since: the earlier snapshot is of another ledger");
  if (earlier.raw_.at_ns > raw_.at_ns)
    throw std::invalid_argument(
        "frugal::cost::ledger_snapshot::since: the earlier snapshot is later than this one");
  return detail::derive(config_, raw_, &earlier.raw_);
}

}  // namespace cost
FRUGAL_END_NAMESPACE

// The definition of detail::derive, which needs ledger_snapshot complete.
#include "frugal/cost/detail/derive.hpp"
