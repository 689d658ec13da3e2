#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "frugal/cost/export.hpp"
#include "frugal/namespace.hpp"
#include "frugal/pool/cascade.hpp"
#include "frugal/pool/options.hpp"
#include "frugal/prometheus.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A model pool's stats in Prometheus text: per model (label `model`) its state, bytes, leases and
/// load, unload and reload counters; for the pool its budget, use, acquires, refusals by `reason`
/// (exhausted, busy, too_large, backoff) and a histogram of cold starts. Names start with the options'
/// prefix, "frugal_pool" by default (frugal_pool_loads_total{model="..."}, ...).
inline void append_prometheus(prometheus_writer& out, const pool_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_pool");
  const auto per_model = [&](const char* suffix, T type, const char* help, auto field) {
    w.family(suffix, type, help);
    for (const model_status& m : s.models) w.sample(suffix, {{"model", m.name}}, field(m));
  };
  per_model("_model_ready", T::gauge, "1 when the model is loaded and warm.",
            [](const model_status& m) { return m.state == model_state::ready; });
  w.family("_model_state", T::gauge,
           "1 for the model's state now (unloaded, loading, warming, ready, failed).");
  for (const model_status& m : s.models)
    for (model_state st : {model_state::unloaded, model_state::loading, model_state::warming,
                           model_state::ready, model_state::failed})
      w.sample("_model_state", {{"model", m.name}, {"state", to_string(st)}}, m.state == st);
  per_model("_model_pinned", T::gauge, "1 when the model is pinned (never unloaded).",
            [](const model_status& m) { return m.pinned; });
  per_model("_model_users", T::gauge, "Leases held now on the model's current version.",
            [](const model_status& m) { return m.users; });
  per_model("_model_bytes", T::gauge, "Bytes the model takes in the pool's budget now.",
            [](const model_status& m) { return m.bytes; });
  per_model("_model_retired_bytes", T::gauge, "Bytes of replaced versions still held by leases.",
            [](const model_status& m) { return m.retired_bytes; });
  per_model("_loads_total", T::counter, "Good loads of the model (cold starts and reloads).",
            [](const model_status& m) { return m.loads; });
  per_model("_load_failures_total", T::counter, "Cold starts of the model that failed.",
            [](const model_status& m) { return m.load_failures; });
  per_model("_unloads_total", T::counter, "Unloads of the model (evicted, idle, or at the end).",
            [](const model_status& m) { return m.unloads; });
  per_model("_idle_unloads_total", T::counter, "Unloads after idle_unload_s without requests.",
            [](const model_status& m) { return m.idle_unloads; });
  per_model("_evictions_total", T::counter, "Unloads to make room for another model.",
            [](const model_status& m) { return m.evictions; });
  per_model("_reloads_total", T::counter, "New versions of the model swapped in.",
            [](const model_status& m) { return m.reloads; });
  per_model("_reload_failures_total", T::counter, "Reloads whose new version failed to load.",
            [](const model_status& m) { return m.reload_failures; });
  per_model("_consecutive_failures", T::gauge, "Load failures in a row; 0 after a good load.",
            [](const model_status& m) { return m.consecutive_failures; });
  per_model("_load_seconds_total", T::counter, "Time spent loading and warming up the model.",
            [](const model_status& m) { return m.load_time_total; });
  per_model("_last_load_seconds", T::gauge, "The last good load's time, warm-up included.",
            [](const model_status& m) { return m.last_load_time; });
  per_model("_byte_seconds_total", T::counter, "Bytes times seconds the model was loaded.",
            [](const model_status& m) { return m.byte_seconds; });

  w.one("_budget_bytes", T::gauge, "The pool's memory budget.", s.budget_bytes);
  w.one("_used_bytes", T::gauge, "Bytes charged now by loaded and loading models.", s.used_bytes);
  w.one("_acquires_total", T::counter, "Acquire calls.", s.acquires);
  w.one("_load_starts_total", T::counter, "Loads started (cold starts and reloads), failed ones included.",
        s.loads);
  w.one("_load_waits_total", T::counter, "Acquires that waited for another caller's load.", s.load_waits);
  w.family("_acquire_failures_total", T::counter,
           "Acquires refused, by reason: exhausted (no room), busy (max_users), too_large, backoff.");
  const std::pair<const char*, std::uint64_t> reasons[] = {{"exhausted", s.exhausted},
                                                           {"busy", s.busy},
                                                           {"too_large", s.too_large},
                                                           {"backoff", s.backoff_refusals}};
  for (const auto& [reason, n] : reasons) w.sample("_acquire_failures_total", {{"reason", reason}}, n);
  w.one("_over_budget_loads_total", T::counter,
        "Loads whose measured bytes put the pool over budget with nothing left to evict.",
        s.over_budget_loads);
  w.one("_leases", T::gauge, "Leases held now, over all models.", s.leases);
  w.one("_waiting", T::gauge, "Acquires blocked now, waiting for room or a lease.", s.waiting);
  w.family("_cold_start_seconds", T::histogram, "Good cold starts: the loader plus warm-up.");
  cost::detail::prom_latency_histogram(w, "_cold_start_seconds", {}, s.cold_start);
}

/// @brief A pool's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const pool_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

/// @brief A cascade's stats in Prometheus text: requests, and per tier (label `model`) its calls, final
/// answers, escalations and failures, with the escalation rate. What the tiers cost is in the ledger the
/// cascade books into (frugal_cascade_saved_*). Names start with the options' prefix, "frugal_cascade" by
/// default.
inline void append_prometheus(prometheus_writer& out, const cascade_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_cascade");
  w.one("_requests_total", T::counter, "Requests the cascade ran.", s.requests);
  const auto per_tier = [&](const char* suffix, const char* help, auto field) {
    w.family(suffix, T::counter, help);
    for (const cascade_tier_stats& t : s.tiers) w.sample(suffix, {{"model", t.model}}, field(t));
  };
  per_tier("_tier_calls_total", "Inputs the tier ran on.",
           [](const cascade_tier_stats& t) { return t.calls; });
  per_tier("_tier_answers_total", "Answers the tier gave as final.",
           [](const cascade_tier_stats& t) { return t.answered; });
  per_tier("_tier_escalated_total", "Inputs the tier passed on to the next.",
           [](const cascade_tier_stats& t) { return t.escalated; });
  per_tier("_tier_failures_total", "Calls of the tier that threw.",
           [](const cascade_tier_stats& t) { return t.failures; });
  w.one("_escalation_ratio", T::gauge, "Requests that went past the first tier, over all requests.",
        s.escalation_rate);
}

/// @brief A cascade's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const cascade_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
