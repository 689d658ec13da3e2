#pragma once

// When to leave spot for on-demand. It returns advice; it calls no cloud.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "frugal/cost/advisors.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/detail/saturating.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

/// @brief When to recommend on-demand.
struct failover_policy {
  /// This many preemptions within `window` recommend on-demand: the job is losing more time to restarts
  /// than the discount pays for. Raise it for jobs with cheap, frequent checkpoints.
  int max_preemptions = 3;
  std::chrono::nanoseconds window = std::chrono::hours(1);
  /// Hourly spot price above which on-demand is cheaper; empty: no price rule. spot_price_ceiling() derives
  /// it from the measured preemption rate and checkpoint costs.
  std::optional<cost::money> price_ceiling{};
};

struct failover_advice {
  bool use_on_demand = false;
  int preemptions_in_window = 0;
  std::string reason;
};

/// @brief On-demand when at least policy.max_preemptions of `preemptions` fall in (now − window, now], or
/// when the hourly `spot_price` is above policy.price_ceiling; otherwise stay on spot. Preemptions after
/// `now` are ignored.
template <class TimePoint>
failover_advice advise_failover(std::span<const TimePoint> preemptions, TimePoint now, cost::money spot_price,
                                const failover_policy& p) {
  const char* who = "frugal::job::advise_failover: ";
  if (p.max_preemptions < 1)
    throw std::invalid_argument(std::string(who) + "policy.max_preemptions must be >= 1");
  if (p.window.count() <= 0) throw std::invalid_argument(std::string(who) + "policy.window must be > 0");
  if (p.price_ceiling && !(p.price_ceiling->cur() == spot_price.cur()))
    throw std::invalid_argument(std::string(who) +
                                "spot_price and policy.price_ceiling are in different currencies");
  failover_advice a;
  for (const TimePoint& t : preemptions)
    if (t <= now && frugal::detail::elapsed_ns(t, now) < p.window) ++a.preemptions_in_window;
  if (a.preemptions_in_window >= p.max_preemptions) {
    a.use_on_demand = true;
    a.reason = std::to_string(a.preemptions_in_window) + " preemptions within the window (limit " +
               std::to_string(p.max_preemptions) + ")";
  } else if (p.price_ceiling && spot_price > *p.price_ceiling) {
    a.use_on_demand = true;
    a.reason = "spot price " + spot_price.to_string() + "/h is above the ceiling " +
               p.price_ceiling->to_string() + "/h";
  } else {
    a.reason = "stay on spot: " + std::to_string(a.preemptions_in_window) + " preemptions within the window" +
               (p.price_ceiling ? ", price " + spot_price.to_string() + "/h within the ceiling " +
                                      p.price_ceiling->to_string() + "/h"
                                : std::string());
  }
  return a;
}

/// @brief The hourly spot price above which on-demand is cheaper for `j`: advise_spot's price_ceiling,
/// on-demand × length / E, E its expected time on spot (which does not depend on the spot rate, but the
/// rate must be valid for advise_spot). Give `j.redo_per_preemption` from a job's ledger (redone time over
/// preemptions) to price the measured loss rather than the modelled one.
inline cost::money spot_price_ceiling(const cost::spot_job& j) { return cost::advise_spot(j).price_ceiling; }

}  // namespace job
FRUGAL_END_NAMESPACE
