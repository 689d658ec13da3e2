#pragma once

// The demo's report: one row per step of the ladder, from the step's ledger and the load generator's
// own measurements, and why each step costs less than the one before.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <frugal/frugal.hpp>

#include "config.hpp"
#include "load.hpp"

namespace demo {

struct step_result {
  std::string name, why, precision, policy, backend;
  std::uint64_t requests = 0, answered = 0, failed = 0, model_calls = 0, cache_hits = 0;
  double throughput = 0;  // requests per second over the closed-loop (saturating) phases
  std::uint64_t closed_requests = 0, closed_calls = 0, closed_batched = 0;  // in the closed-loop phases
  double closed_seconds = 0, closed_busy_s = 0;
  double closed_cpu_s = 0;  // the worker thread's CPU time in model calls while saturated (no time preempted)
  double closed_mean_batch = 0;  // requests per model call while saturated
  double open_p50_ms =
      0;  // p50 latency of the requests a model call answered in the open-loop (Poisson) phases: light load
  double p50_ms = 0, p99_ms = 0;
  double busy_s = 0, wall_s = 0, utilization = 0;
  double mean_batch = 0;
  frugal::cost::money cost{}, cost_per_1k{};
  double savings = 0;  // against the first step
  double hit_ratio = 0;
  double ledger_cache_saved_fraction = 0;  // the ledger's cache savings over (busy cost + cache savings)
  double cosine_mean = 1, max_rel_error = 0;
  std::size_t weight_bytes = 0;
  std::string prometheus, json_export, table;
  frugal::cost::ledger_snapshot snapshot;
};

/// The step's row: the ledger's figures, the load's, and the worker's tally of saturated batches.
struct saturated_tally {
  std::uint64_t calls = 0, batched = 0;
  clock::duration busy{0};
  double cpu = 0;
};

inline step_result make_step_result(const step_config& st, const served_model& model,
                                    const frugal::cost::ledger_snapshot& snapshot, const load_result& load,
                                    const saturated_tally& sat, const accuracy_tally& acc) {
  step_result r;
  r.name = st.name;
  r.why = st.why;
  r.precision = model.precision_name();
  r.policy = st.batching ? st.policy : "none";
  r.backend = model.backend();
  r.weight_bytes = model.weight_bytes();
  r.snapshot = snapshot;
  const auto& s = r.snapshot;
  r.requests = s.total.requests;
  r.answered = load.answered;
  r.failed = load.failed;
  r.model_calls = s.total.batches;
  r.cache_hits = s.total.cache_hits;
  r.throughput =
      load.closed_seconds > 0 ? static_cast<double>(load.closed_requests) / load.closed_seconds : 0;
  r.closed_requests = load.closed_requests;
  r.closed_seconds = load.closed_seconds;
  r.closed_calls = sat.calls;
  r.closed_busy_s = std::chrono::duration<double>(sat.busy).count();
  r.closed_cpu_s = sat.cpu;
  r.closed_batched = sat.batched;
  r.closed_mean_batch = sat.calls ? static_cast<double>(sat.batched) / static_cast<double>(sat.calls) : 0;
  if (!load.open_latency_ms.empty()) {
    std::vector<double> ms = load.open_latency_ms;
    const auto mid = ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2);
    std::nth_element(ms.begin(), mid, ms.end());
    r.open_p50_ms = *mid;
  }
  r.p50_ms = std::chrono::duration<double, std::milli>(s.total.latency.p50).count();
  r.p99_ms = std::chrono::duration<double, std::milli>(s.total.latency.p99).count();
  r.busy_s = std::chrono::duration<double>(s.total.busy).count();
  r.wall_s = std::chrono::duration<double>(s.wall).count();
  r.utilization = s.utilization;
  r.mean_batch = s.total.mean_batch_size;
  r.cost = s.total_cost;
  r.cost_per_1k =
      r.requests ? s.total_cost.mul_div(1000, static_cast<std::int64_t>(r.requests)) : s.total_cost;
  r.hit_ratio = s.total.cache_hit_ratio;
  const double saved = static_cast<double>(s.total.cache_saved.nanos()),
               busy = static_cast<double>(s.busy_cost.nanos());
  r.ledger_cache_saved_fraction = saved + busy > 0 ? saved / (saved + busy) : 0;
  if (acc.count) {
    r.cosine_mean = acc.cosine_sum / static_cast<double>(acc.count);
    r.max_rel_error = acc.max_rel;
  }
  r.prometheus = frugal::cost::to_prometheus(s);
  r.json_export = frugal::cost::to_json(s);
  r.table = frugal::cost::to_table(s);
  return r;
}

/// The traffic of one step, in words.
inline std::string describe_traffic(const config& cfg) {
  std::ostringstream o;
  char buf[160];
  for (std::size_t i = 0; i < cfg.phases.size(); ++i) {
    const auto& p = cfg.phases[i];
    if (p.kind == "closed" && p.seconds > 0)
      std::snprintf(buf, sizeof buf, "%d closed-loop clients for %g s", p.clients, p.seconds);
    else if (p.kind == "closed")
      std::snprintf(buf, sizeof buf, "%d closed-loop clients for %d requests", p.clients, p.requests);
    else if (p.kind == "poisson")
      std::snprintf(buf, sizeof buf, "%d Poisson arrivals at %g/s", p.requests, p.rate);
    else
      std::snprintf(buf, sizeof buf, "%g ms idle", p.ms);
    o << (i ? ", then " : "") << buf;
  }
  return o.str();
}

inline std::string format_report(const config& cfg, const std::vector<step_result>& rs) {
  std::ostringstream o;
  char line[640];
  o << "frugal demo: " << cfg.model_name << " (" << rs.front().weight_bytes / (1 << 20)
    << " MiB fp32 weights), "
    << "priced as " << cfg.gpu_name << " at $" << cfg.gpu_hourly_usd << "/h (paid while idle too)\n"
    << "each step serves " << describe_traffic(cfg) << "; throughput is over the closed-loop time\n\n";
  o << "| step | requests | model calls | throughput req/s | p50 ms | p99 ms | light-load p50 ms, model "
       "calls | compute s | util "
       "| batch, saturated | $ per 1k req | saving | hit ratio | cosine | max rel err |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    std::snprintf(line, sizeof line,
                  "| %zu. %s | %llu | %llu | %.0f | %.1f | %.1f | %.1f | %.2f | %.0f%% | %.1f | %s | %.0f%% "
                  "| %.0f%% | %.5f | %.4f |\n",
                  i + 1, r.name.c_str(), static_cast<unsigned long long>(r.requests),
                  static_cast<unsigned long long>(r.model_calls), r.throughput, r.p50_ms, r.p99_ms,
                  r.open_p50_ms, r.busy_s, 100 * r.utilization, r.closed_mean_batch,
                  r.cost_per_1k.to_string().c_str(), 100 * r.savings, 100 * r.hit_ratio, r.cosine_mean,
                  r.max_rel_error);
    o << line;
  }
  o << "\nWhere each step ran:";
  for (std::size_t i = 0; i < rs.size(); ++i) o << (i ? "; " : " ") << i + 1 << ". " << rs[i].backend;
  o << "\n\nWhy each step costs less (the same paid seconds serve more requests when throughput rises):\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    o << "  " << i + 1 << ". " << r.name << ": " << r.why;
    if (i > 0 && rs[i - 1].throughput > 0) {
      const auto& q = rs[i - 1];
      std::snprintf(line, sizeof line,
                    " [throughput x%.2f vs step %zu, cost per 1k x%.2f; batch when saturated %.1f vs %.1f; "
                    "light-load p50 %.1f vs %.1f ms",
                    r.throughput / q.throughput, i,
                    static_cast<double>(r.cost_per_1k.nanos()) /
                        static_cast<double>(std::max<std::int64_t>(1, q.cost_per_1k.nanos())),
                    r.closed_mean_batch, q.closed_mean_batch, r.open_p50_ms, q.open_p50_ms);
      o << line;
      if (r.cache_hits && !q.cache_hits && r.closed_requests && q.closed_requests && q.closed_cpu_s > 0) {
        // Compute per request while saturated, against the step before (same precision and batching, no
        // cache), in the worker's CPU time: on a shared machine, wall time also counts time preempted.
        const double per_req = r.closed_cpu_s / static_cast<double>(r.closed_requests),
                     per_req_before = q.closed_cpu_s / static_cast<double>(q.closed_requests);
        std::snprintf(line, sizeof line,
                      "; cache hit ratio %.1f%%, ledger's cache saving %.1f%% of compute, measured compute "
                      "per request fell %.1f%%",
                      100 * r.hit_ratio, 100 * r.ledger_cache_saved_fraction,
                      100 * (1 - per_req / per_req_before));
        o << line;
      }
      o << "]";
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace demo
