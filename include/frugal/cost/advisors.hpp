#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/cost/catalog.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/cost/snapshot.hpp"
#include "frugal/detail/saturating.hpp"
#include "frugal/element_type.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {
namespace detail {

// Guards ceil/floor against a product such as 50 * 0.9 / 0.75 landing a hair above or below an integer.
inline constexpr double advisor_eps = 1e-9;

// A time computed in double, rounded to nanoseconds and saturated at the int64 range (llround is
// unspecified beyond it). Callers never pass NaN.
inline std::chrono::nanoseconds ns_of(double ns) noexcept {
  if (ns >= 0x1p63) return std::chrono::nanoseconds::max();
  if (ns <= -0x1p63) return std::chrono::nanoseconds::min();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

// A count computed in double (>= 0, possibly +Inf) as an int, saturated at INT_MAX: beyond it the cast is
// undefined.
inline int count_of(double n) noexcept {
  if (!(n < static_cast<double>(INT_MAX))) return INT_MAX;
  return n > 0 ? static_cast<int>(n) : 0;
}

// A money amount in nano-units computed in double (>= 0), saturated at the largest amount money holds.
inline money nanos_of(double nanos, currency c) noexcept {
  if (!(nanos < 0x1p63)) return money::from_nanos(std::numeric_limits<std::int64_t>::max(), c);
  return money::from_nanos(nanos > 0 ? static_cast<std::int64_t>(std::llround(nanos)) : 0, c);
}
inline money hourly_price(const rate& r) {
  return r.unit() == rate_unit::second ? r.price() * 3600 : r.price();
}

}  // namespace detail

/// @brief Replica policy; the defaults follow the Kubernetes HPA.
struct replica_policy {
  double target_utilization = 0.70;
  double tolerance = 0.10;  ///< no change while |utilization / target − 1| <= tolerance
  int min_replicas = 0;
  int max_replicas = 6;
  /// With min_replicas == 0, no traffic for this long scales to zero.
  std::chrono::nanoseconds scale_to_zero_after = std::chrono::minutes(15);
};

struct replica_advice {
  int current = 0;
  int desired = 0;
  double ratio = 0;  ///< utilization / target
  std::string reason;
};

/// @brief The HPA rule: desired = ceil(current × utilization / target), unchanged within the tolerance,
/// clamped to [min, max]; zero after `idle_for` >= scale_to_zero_after when min is 0. From zero replicas, any
/// utilization above zero (pending work) asks for max(1, min).
inline replica_advice advise_replicas(int current, double utilization, const replica_policy& p = {},
                                      std::chrono::nanoseconds idle_for = std::chrono::nanoseconds(0)) {
  const char* who = "frugal::cost::advise_replicas: ";
  if (!(p.target_utilization > 0 && p.target_utilization <= 1))
    throw std::invalid_argument(std::string(who) + "policy.target_utilization must be in (0, 1]");
  if (!(p.tolerance >= 0)) throw std::invalid_argument(std::string(who) + "policy.tolerance must be >= 0");
  if (p.scale_to_zero_after.count() < 0)
    throw std::invalid_argument(std::string(who) + "policy.scale_to_zero_after must not be negative");
  if (p.min_replicas < 0 || p.max_replicas < std::max(1, p.min_replicas))
    throw std::invalid_argument(std::string(who) +
                                "policy needs 0 <= min_replicas <= max_replicas, max_replicas >= 1");
  if (current < 0) throw std::invalid_argument(std::string(who) + "current must be >= 0");
  if (!(utilization >= 0) || !std::isfinite(utilization))
    throw std::invalid_argument(std::string(who) + "utilization must be finite and >= 0, not " +
                                std::to_string(utilization));
  if (idle_for.count() < 0) throw std::invalid_argument(std::string(who) + "idle_for must not be negative");
  replica_advice a;
  a.current = current;
  a.ratio = utilization / p.target_utilization;
  if (p.min_replicas == 0 && idle_for >= p.scale_to_zero_after) {
    a.desired = 0;
    a.reason = "no traffic for the scale-to-zero period";
    return a;
  }
  if (current == 0) {
    a.desired = utilization > 0 ? std::max(1, p.min_replicas) : p.min_replicas;
    a.reason = utilization > 0 ? "work is pending with no replica" : "at zero with no work";
    return a;
  }
  int desired = current;
  if (std::abs(a.ratio - 1) <= p.tolerance + detail::advisor_eps) {
    a.reason = "within tolerance of the target";
  } else {
    desired = detail::count_of(std::ceil(double(current) * a.ratio - detail::advisor_eps));
    a.reason = "ceil(" + std::to_string(current) + " x " + std::to_string(utilization) + " / " +
               std::to_string(p.target_utilization) + ")";
  }
  if (desired < p.min_replicas) desired = p.min_replicas, a.reason += ", raised to min_replicas";
  if (desired > p.max_replicas) desired = p.max_replicas, a.reason += ", capped at max_replicas";
  a.desired = desired;
  return a;
}

/// @brief The HPA rule on a snapshot: current = its devices, utilization = fleet utilization, and a window
/// with no request and no busy time counts as idle for the whole window.
inline replica_advice advise_replicas(const ledger_snapshot& s, const replica_policy& p = {}) {
  const bool idle = s.total.requests == 0 && s.total.busy.count() == 0;
  return advise_replicas(static_cast<int>(s.devices.size()), s.utilization, p,
                         idle ? s.wall : std::chrono::nanoseconds(0));
}

struct right_size_request {
  double parameters_billions = 0;
  element_type weights = element_type::f16;  ///< its bits per parameter size the model's memory
  double headroom = 0.20;                    ///< extra memory over the weights, for KV cache and activations
  double required_throughput = 1.0;          ///< in the catalog's relative units (A100 40GB = 1)
  int max_gpus = 8;                          ///< most GPUs of one type in a deployment (tensor parallel)
  bool spot = false;                         ///< price at spot where the catalog has a spot price
};

struct right_size_candidate {
  std::string name;
  int gpus = 0;
  money hourly_cost{};
  bool fits = false;
  std::string reason;
};

struct right_size_advice {
  bool found = false;
  right_size_candidate best;
  std::vector<right_size_candidate> candidates;  ///< feasible first, cheapest first
  std::uint64_t memory_needed_bytes = 0;
};

/// @brief The cheapest deployment that fits: memory = parameters × bits / 8 × (1 + headroom); for each type,
/// gpus = max(ceil(memory / type memory), ceil(throughput / type throughput)) (throughput assumed to scale
/// linearly), feasible when gpus <= max_gpus; cost = gpus × hourly price. Ties go to fewer GPUs.
inline right_size_advice advise_right_size(const right_size_request& r,
                                           const std::vector<gpu_type>& catalog = default_catalog()) {
  const char* who = "frugal::cost::advise_right_size: ";
  if (!(r.parameters_billions > 0) || !std::isfinite(r.parameters_billions))
    throw std::invalid_argument(std::string(who) + "request.parameters_billions must be finite and > 0");
  if (!(r.headroom >= 0) || !std::isfinite(r.headroom))
    throw std::invalid_argument(std::string(who) + "request.headroom must be finite and >= 0");
  if (!(r.required_throughput > 0) || !std::isfinite(r.required_throughput))
    throw std::invalid_argument(std::string(who) + "request.required_throughput must be finite and > 0");
  if (element_bits(r.weights) == 0)
    throw std::invalid_argument(std::string(who) + "request.weights " +
                                std::to_string(static_cast<int>(r.weights)) + " is not an element_type");
  if (r.max_gpus < 1) throw std::invalid_argument(std::string(who) + "request.max_gpus must be >= 1");
  if (catalog.empty()) throw std::invalid_argument(std::string(who) + "the catalog is empty");
  right_size_advice a;
  // Finite inputs can still overflow to +Inf here (1e300 billion parameters): the counts below saturate.
  const double bytes = r.parameters_billions * 1e9 * element_bits(r.weights) / 8.0 * (1 + r.headroom);
  a.memory_needed_bytes = std::ceil(bytes) < 0x1p64 ? static_cast<std::uint64_t>(std::ceil(bytes))
                                                    : std::numeric_limits<std::uint64_t>::max();
  for (const gpu_type& g : catalog) {
    if (g.memory_bytes == 0 || !(g.relative_throughput > 0) || !std::isfinite(g.relative_throughput))
      throw std::invalid_argument(std::string(who) + "catalog entry \"" + g.name +
                                  "\" needs memory_bytes > 0 and a finite relative_throughput > 0");
    const rate& price = r.spot && g.spot.price().nanos() > 0 ? g.spot : g.on_demand;
    if (price.price().nanos() <= 0)
      throw std::invalid_argument(std::string(who) + "catalog entry \"" + g.name + "\" has no price");
    right_size_candidate c;
    c.name = g.name;
    const int for_memory = detail::count_of(std::ceil(bytes / double(g.memory_bytes) - detail::advisor_eps));
    const int for_throughput =
        detail::count_of(std::ceil(r.required_throughput / g.relative_throughput - detail::advisor_eps));
    c.gpus = std::max({1, for_memory, for_throughput});
    c.fits = c.gpus <= r.max_gpus;
    const money hourly = detail::hourly_price(price);
    std::int64_t nanos = 0;
    if (c.fits || !__builtin_mul_overflow(hourly.nanos(), std::int64_t{c.gpus}, &nanos))
      c.hourly_cost = hourly * c.gpus;
    else  // a deployment far past max_gpus: its cost saturates, and it sorts last either way
      c.hourly_cost = money::from_nanos(std::numeric_limits<std::int64_t>::max(), hourly.cur());
    c.reason = std::to_string(c.gpus) + " GPU(s): " + std::to_string(for_memory) + " for memory, " +
               std::to_string(for_throughput) + " for throughput" + (c.fits ? "" : ", more than max_gpus");
    a.candidates.push_back(std::move(c));
  }
  std::stable_sort(a.candidates.begin(), a.candidates.end(), [](const auto& x, const auto& y) {
    if (x.fits != y.fits) return x.fits;
    if (x.hourly_cost != y.hourly_cost) return x.hourly_cost < y.hourly_cost;
    return x.gpus < y.gpus;
  });
  a.found = a.candidates.front().fits;
  if (a.found) a.best = a.candidates.front();
  return a;
}

struct spot_job {
  std::chrono::nanoseconds length{0};  ///< compute time the job needs without interruption
  rate on_demand{};
  rate spot{};
  double preemptions_per_hour = 0;  ///< Poisson rate λ
  std::chrono::nanoseconds checkpoint_interval{0};
  std::chrono::nanoseconds checkpoint_cost{0};   ///< time to write one checkpoint
  std::chrono::nanoseconds restart_overhead{0};  ///< time from a preemption to work resuming
  /// Measured work redone per preemption (a job ledger's redone time over its preemptions). When set, it
  /// replaces the modelled loss: E = (length + checkpoints × checkpoint_cost) / (1 − λ(redo + R)), the
  /// checkpoint interval then only counting the checkpoints.
  std::optional<std::chrono::nanoseconds> redo_per_preemption{};
};

struct spot_advice {
  std::chrono::nanoseconds expected_spot_time{0};
  money expected_spot_cost{};
  money on_demand_cost{};
  double expected_preemptions = 0;
  double discount = 0;             ///< 1 − spot / on-demand
  double break_even_discount = 0;  ///< spot is cheaper when its discount is above this
  bool use_spot = false;
  std::string reason;
  /// Hourly spot price above which on-demand is cheaper: on-demand × length / E (E does not depend on the
  /// spot price).
  money price_ceiling{};
};

/// @brief Expected cost of a job on spot against on-demand. The job runs in segments of the checkpoint
/// interval τ plus the checkpoint cost C (the last one is the remainder, without a checkpoint). With
/// preemptions at rate λ and restart overhead R, a segment of length s takes E(s) = (e^{λs} − 1)(1/λ + R) in
/// expectation (s when λ = 0), with e^{λs} − 1 expected preemptions. Spot costs spot × ΣE, on-demand costs
/// on-demand × length, and the break-even discount is 1 − length / ΣE. Where ΣE is past the nanosecond range
/// (at a high preemption rate it is infinite), expected_spot_time is nanoseconds::max() and the spot cost,
/// priced from ΣE itself, saturates at the largest amount money holds.
inline spot_advice advise_spot(const spot_job& j) {
  const char* who = "frugal::cost::advise_spot: ";
  if (j.length.count() <= 0) throw std::invalid_argument(std::string(who) + "job.length must be > 0");
  if (j.checkpoint_interval.count() <= 0)
    throw std::invalid_argument(std::string(who) + "job.checkpoint_interval must be > 0");
  if (j.checkpoint_cost.count() < 0 || j.restart_overhead.count() < 0)
    throw std::invalid_argument(std::string(who) +
                                "job.checkpoint_cost and job.restart_overhead must not be negative");
  if (!(j.preemptions_per_hour >= 0) || !std::isfinite(j.preemptions_per_hour))
    throw std::invalid_argument(std::string(who) + "job.preemptions_per_hour must be finite and >= 0, not " +
                                std::to_string(j.preemptions_per_hour));
  if (!j.on_demand.is_time() || j.on_demand.price().nanos() <= 0)
    throw std::invalid_argument(std::string(who) + "job.on_demand must be a time rate > 0");
  if (!j.spot.is_time() || j.spot.price().nanos() <= 0)
    throw std::invalid_argument(std::string(who) + "job.spot must be a time rate > 0");
  if (!(j.spot.price().cur() == j.on_demand.price().cur()))
    throw std::invalid_argument(std::string(who) + "job.spot and job.on_demand are in different currencies");
  const double hour_ns = 3.6e12;
  const double lambda = j.preemptions_per_hour / hour_ns;  // per ns
  const double R = double(j.restart_overhead.count());
  constexpr double unbounded = std::numeric_limits<double>::infinity();
  // In double throughout: tau + C alone can pass the int64 range. At a high enough rate e^{λs} is +Inf, the
  // job is expected never to finish, and every product with it must stay +Inf rather than become NaN.
  auto expected = [&](double s) {
    if (s <= 0) return 0.0;
    if (lambda == 0) return s;
    const double m = std::expm1(lambda * s);
    if (!std::isfinite(m)) return unbounded;
    return m / lambda + m * R;  // not m * (1/λ + R): 1/λ overflows for a subnormal λ
  };
  auto times = [](std::int64_t n, double x) { return n == 0 ? 0.0 : double(n) * x; };
  const auto T = j.length.count();
  const auto tau = j.checkpoint_interval.count();
  const auto full = T / tau;
  const auto rest = T - full * tau;
  const double segment = double(tau) + double(j.checkpoint_cost.count());
  double total = 0, preemptions = 0;
  if (j.redo_per_preemption) {
    if (j.redo_per_preemption->count() < 0)
      throw std::invalid_argument(std::string(who) + "job.redo_per_preemption must not be negative");
    const double loss = lambda * (double(j.redo_per_preemption->count()) + R);
    if (loss >= 1)
      throw std::invalid_argument(std::string(who) + "preemptions_per_hour x (redo_per_preemption + " +
                                  "restart_overhead) = " + std::to_string(loss) +
                                  " >= 1: on spot the job is expected never to finish");
    total = (double(T) + times(full, double(j.checkpoint_cost.count()))) / (1 - loss);
    preemptions = lambda * total;
  } else {
    total = times(full, expected(segment)) + expected(double(rest));
    preemptions = times(full, std::expm1(lambda * segment)) + std::expm1(lambda * double(rest));
  }
  spot_advice a;
  a.on_demand_cost = j.on_demand.for_duration(j.length);
  a.expected_spot_time = detail::ns_of(total);
  // Past the nanosecond range the time saturates, so the spot cost is priced from E itself, saturating
  // at the largest amount money holds.
  const bool beyond = !(total < 0x1p63);
  a.expected_spot_cost =
      beyond ? detail::nanos_of(double(detail::hourly_price(j.spot).nanos()) * (total / hour_ns),
                                j.spot.price().cur())
             : j.spot.for_duration(a.expected_spot_time);
  a.expected_preemptions = preemptions;
  a.discount = 1 - detail::hourly_price(j.spot).to_double() / detail::hourly_price(j.on_demand).to_double();
  a.break_even_discount = 1 - double(T) / total;
  a.use_spot = a.expected_spot_cost < a.on_demand_cost;
  a.price_ceiling =
      detail::nanos_of(double(a.on_demand_cost.nanos()) * hour_ns / total, a.on_demand_cost.cur());
  a.reason = std::string(a.use_spot ? "spot" : "on-demand") + ": expected " +
             (total == unbounded ? std::string("never to finish") : a.expected_spot_cost.to_string()) +
             " on spot against " + a.on_demand_cost.to_string() + " on demand";
  return a;
}

struct batch_window_request {
  double arrival_rate_per_s = 0;  ///< λ, measured
  batch_model model{};            ///< t(n) = a·n + b, fitted by the ledger
  std::chrono::nanoseconds latency_target{0};
  std::uint32_t max_batch_limit = 256;  ///< the largest batch the model or memory allows
};

struct batch_window_advice {
  bool feasible = false;
  std::chrono::nanoseconds window{0};
  std::uint32_t max_batch = 1;
  std::chrono::nanoseconds batch_time{0};     ///< a·n + b
  std::chrono::nanoseconds worst_latency{0};  ///< window + batch time
  double utilization = 0;                     ///< λ·(a + b/n)
  std::uint32_t min_stable_batch = 1;
  std::string reason;
};

/// @brief A batch of n fills in (n − 1)/λ and runs in a·n + b, so the first request in it waits
/// (n − 1)/λ + a·n + b <= target: n_max = floor((target − b + 1/λ) / (1/λ + a)). The GPU keeps up only if a
/// batch runs no longer than it takes to fill: n >= λb / (1 − λa) (and λa < 1). The advice is the largest n
/// up to max_batch_limit, with window = (n − 1)/λ; infeasible when that n is below the stable minimum.
inline batch_window_advice advise_batch_window(const batch_window_request& r) {
  const char* who = "frugal::cost::advise_batch_window: ";
  if (!(r.arrival_rate_per_s > 0) || !std::isfinite(r.arrival_rate_per_s))
    throw std::invalid_argument(std::string(who) + "request.arrival_rate_per_s must be finite and > 0, not " +
                                std::to_string(r.arrival_rate_per_s));
  if (!r.model.valid)
    throw std::invalid_argument(std::string(who) +
                                "request.model is not fitted (needs batches of two sizes)");
  if (!std::isfinite(r.model.a_ns))
    throw std::invalid_argument(std::string(who) + "request.model.a_ns must be finite");
  if (!std::isfinite(r.model.b_ns))
    throw std::invalid_argument(std::string(who) + "request.model.b_ns must be finite");
  if (r.latency_target.count() <= 0)
    throw std::invalid_argument(std::string(who) + "request.latency_target must be > 0");
  if (r.max_batch_limit == 0)
    throw std::invalid_argument(std::string(who) + "request.max_batch_limit must be > 0");
  // ns between arrivals; +Inf at a rate below about 1e-299/s, where only batches of one ever form.
  const double gap = 1e9 / r.arrival_rate_per_s;
  const double a = std::max(0.0, r.model.a_ns);
  const double b = std::max(0.0, r.model.b_ns);
  const double L = double(r.latency_target.count());
  batch_window_advice adv;
  const double lam_a = a / gap;
  const double n_max = std::isfinite(gap) ? std::floor((L - b + gap) / (gap + a) + detail::advisor_eps)
                                          : (a + b <= L ? 1.0 : 0.0);
  const double n_min =
      lam_a < 1 ? std::max(1.0, std::ceil((b / gap) / (1 - lam_a) - detail::advisor_eps)) : INFINITY;
  adv.min_stable_batch = std::isfinite(n_min) ? static_cast<std::uint32_t>(std::min(n_min, 4e9)) : UINT32_MAX;
  const double n = std::min(n_max, double(r.max_batch_limit));
  if (n < 1) {
    adv.reason = "even a batch of one misses the latency target (a + b > target)";
    return adv;
  }
  adv.max_batch = static_cast<std::uint32_t>(n);
  adv.window = n == 1 ? std::chrono::nanoseconds(0) : detail::ns_of((n - 1) * gap);
  adv.batch_time = detail::ns_of(a * n + b);
  adv.worst_latency = frugal::detail::saturating_add(adv.window, adv.batch_time);
  adv.utilization = (a + b / n) / gap;
  adv.feasible = n >= n_min;
  adv.reason = adv.feasible ? "largest batch within the latency target that the GPU keeps up with"
                            : "the GPU cannot keep up at this arrival rate within the target: add a replica";
  return adv;
}

/// @brief The batch-window advice for one feature of a snapshot: λ = its requests over the window, and its
/// fitted model. Throws std::invalid_argument when the feature is unknown.
inline batch_window_advice advise_batch_window(const ledger_snapshot& s, std::string_view feature,
                                               std::chrono::nanoseconds latency_target,
                                               std::uint32_t max_batch_limit = 256) {
  const feature_figures* t = s.find(feature);
  if (!t)
    throw std::invalid_argument("frugal::cost::advise_batch_window: no feature \"" + std::string(feature) +
                                "\"");
  if (s.wall.count() <= 0)
    throw std::invalid_argument("frugal::cost::advise_batch_window: the snapshot's window is empty");
  return advise_batch_window({.arrival_rate_per_s = double(t->requests) / (double(s.wall.count()) / 1e9),
                              .model = t->model,
                              .latency_target = latency_target,
                              .max_batch_limit = max_batch_limit});
}

}  // namespace cost
FRUGAL_END_NAMESPACE
