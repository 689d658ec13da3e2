#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/cost/snapshot.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {
namespace detail {

using ::frugal::detail::num;
using ::frugal::detail::seconds;
// JSON has no infinity or NaN: a non-finite figure is written as null rather than as an unparseable token.
inline std::string json_num(double v) { return std::isfinite(v) ? num(v) : "null"; }

inline std::string json_escape(std::string_view v) {
  std::string out = "\"";
  for (unsigned char ch : v) {
    if (ch == '"')
      out += "\\\"";
    else if (ch == '\\')
      out += "\\\\";
    else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// Prometheus' default buckets, in seconds, widened down to 1 ms and up to 60 s for inference latencies.
inline constexpr double prom_buckets_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                            0.5,   1,      2.5,   5,    10,    30,   60};

// A histogram of nanosecond durations as a Prometheus histogram in seconds, on prom_buckets_s.
inline void prom_latency_histogram(::frugal::detail::prom_scope& w, std::string_view suffix,
                                   const prometheus_labels& labels, const histogram_snapshot& h) {
  std::vector<std::pair<double, std::uint64_t>> cumulative;
  for (double le : prom_buckets_s)
    cumulative.emplace_back(le, h.count_at_or_below(static_cast<std::uint64_t>(le * 1e9)));
  ::frugal::detail::prom_histogram(w, suffix, labels, cumulative, h.count, double(h.sum) / 1e9);
}

inline std::string pad(std::string s, std::size_t w, bool left = false) {
  if (s.size() >= w) return s;
  return left ? s + std::string(w - s.size(), ' ') : std::string(w - s.size(), ' ') + s;
}
inline std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
inline std::string ms(std::chrono::nanoseconds d) { return fixed(double(d.count()) / 1e6, 2); }

}  // namespace detail

/// @brief The snapshot in Prometheus text exposition format 0.0.4: base units (seconds, the currency in the
/// metric name as `_usd`), `_total` on counters, ratios 0..1, and a cumulative `le` histogram of request
/// latency. A bucket counts the fine histogram's buckets that lie wholly at or below its bound, so a value
/// within 0.1% under a bound may be counted in the next one. Labels: feature, device, outcome, after the
/// options' labels. The prefix defaults to "frugal" (frugal_requests_total, ...).
inline void append_prometheus(prometheus_writer& out, const ledger_snapshot& s,
                              const prometheus_options& opts = {}) {
  using detail::num;
  using detail::seconds;
  ::frugal::detail::prom_scope w(out, opts, "frugal");
  std::string cur(s.cur.code());
  std::transform(cur.begin(), cur.end(), cur.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const std::string cost_total = "_cost_" + cur + "_total";
  auto feature = [](const feature_figures& t) { return prometheus_labels{{"feature", t.name}}; };
  auto device = [](const device_figures& d) {
    return prometheus_labels{{"device", d.name}, {"gpu_class", d.gpu_class}};
  };

  w.family("_requests_total", prometheus_type::counter, "Requests recorded, by feature and outcome.");
  for (const auto& t : s.features)
    for (std::size_t o = 0; o < outcome_count; ++o)
      w.sample("_requests_total", {{"feature", t.name}, {"outcome", std::string(to_string(outcome(o)))}},
               std::to_string(t.by_outcome[o]));
  w.family("_gpu_busy_seconds_total", prometheus_type::counter, "GPU-busy time of batch runs, by feature.");
  for (const auto& t : s.features) w.sample("_gpu_busy_seconds_total", feature(t), seconds(t.busy));
  w.family(cost_total, prometheus_type::counter,
           "Busy cost plus shared idle cost, by feature, in " + cur + ".");
  for (const auto& t : s.features) w.sample(cost_total, feature(t), t.cost.to_decimal());
  w.family("_cost_per_request_" + cur, prometheus_type::gauge,
           "Cost per request over the window, by feature.");
  for (const auto& t : s.features)
    w.sample("_cost_per_request_" + cur, feature(t), t.cost_per_request.to_decimal());
  w.family("_batches_total", prometheus_type::counter, "Batch runs, by feature.");
  for (const auto& t : s.features) w.sample("_batches_total", feature(t), std::to_string(t.batches));
  w.family("_batch_items_total", prometheus_type::counter,
           "Requests run in batches (sum of batch sizes), by feature.");
  for (const auto& t : s.features)
    w.sample("_batch_items_total", feature(t), std::to_string(t.batched_items));
  w.family("_batch_fill_ratio", prometheus_type::gauge, "Batched items over batch capacity, by feature.");
  for (const auto& t : s.features) w.sample("_batch_fill_ratio", feature(t), num(t.fill));
  w.family("_tokens_total", prometheus_type::counter, "Tokens processed, by feature and direction.");
  for (const auto& t : s.features) {
    w.sample("_tokens_total", {{"feature", t.name}, {"direction", "in"}}, std::to_string(t.tokens_in));
    w.sample("_tokens_total", {{"feature", t.name}, {"direction", "out"}}, std::to_string(t.tokens_out));
  }
  w.family("_cache_hits_total", prometheus_type::counter, "Cache hits, by feature.");
  for (const auto& t : s.features) w.sample("_cache_hits_total", feature(t), std::to_string(t.cache_hits));
  w.family("_cache_hit_ratio", prometheus_type::gauge, "Cache hits over requests, by feature.");
  for (const auto& t : s.features) w.sample("_cache_hit_ratio", feature(t), num(t.cache_hit_ratio));
  w.family("_remote_hits_total", prometheus_type::counter,
           "Of the cache hits, those a shared tier (Redis) served, by feature.");
  for (const auto& t : s.features) w.sample("_remote_hits_total", feature(t), std::to_string(t.remote_hits));
  w.family("_remote_hit_seconds_total", prometheus_type::counter,
           "Summed latency of the shared tier's hits, by feature.");
  for (const auto& t : s.features)
    w.sample("_remote_hit_seconds_total", feature(t), seconds(t.remote_latency));
  w.family("_remote_faults_total", prometheus_type::counter,
           "Shared-tier faults that fell back to the model, by feature.");
  for (const auto& t : s.features)
    w.sample("_remote_faults_total", feature(t), std::to_string(t.remote_faults));
  w.family("_semantic_hits_total", prometheus_type::counter,
           "Of the cache hits, those a semantic cache answered from a similar input, by feature.");
  for (const auto& t : s.features)
    w.sample("_semantic_hits_total", feature(t), std::to_string(t.semantic_hits));
  w.family("_semantic_saved_seconds", prometheus_type::gauge,
           "Of the GPU time the cache saved, what semantic hits saved (estimated), by feature.");
  for (const auto& t : s.features)
    w.sample("_semantic_saved_seconds", feature(t), seconds(t.semantic_saved_time));
  w.family("_semantic_saved_" + cur, prometheus_type::gauge,
           "Of the money the cache saved, what semantic hits saved (estimated), by feature.");
  for (const auto& t : s.features)
    w.sample("_semantic_saved_" + cur, feature(t), t.semantic_saved.to_decimal());
  w.family("_cascade_escalations_total", prometheus_type::counter,
           "Requests a cascade's tier passed on to the next tier, by feature (each tier is one).");
  for (const auto& t : s.features)
    w.sample("_cascade_escalations_total", feature(t), std::to_string(t.escalations));
  w.family("_cascade_saved_seconds", prometheus_type::gauge,
           "GPU time a cascade's tier saved against sending every request to the last tier (negative when "
           "escalations cost more), by feature.");
  for (const auto& t : s.features)
    w.sample("_cascade_saved_seconds", feature(t), seconds(t.cascade_saved_time));
  w.family("_cascade_saved_" + cur, prometheus_type::gauge,
           "Money a cascade's tier saved against sending every request to the last tier, by feature.");
  for (const auto& t : s.features)
    w.sample("_cascade_saved_" + cur, feature(t), t.cascade_saved.to_decimal());
  w.family("_cache_saved_seconds", prometheus_type::gauge,
           "GPU time the cache saved (estimated), by feature.");
  for (const auto& t : s.features) w.sample("_cache_saved_seconds", feature(t), seconds(t.cache_saved_time));
  w.family("_cache_saved_" + cur, prometheus_type::gauge, "Money the cache saved (estimated), by feature.");
  for (const auto& t : s.features) w.sample("_cache_saved_" + cur, feature(t), t.cache_saved.to_decimal());
  w.family(
      "_batching_saved_" + cur, prometheus_type::gauge,
      "Money batching saved against running each request alone, from the fitted a*n+b model, by feature.");
  for (const auto& t : s.features)
    w.sample("_batching_saved_" + cur, feature(t), t.batching_saved.to_decimal());

  w.family("_request_duration_seconds", prometheus_type::histogram,
           "End-to-end request latency, by feature.");
  for (const auto& t : s.features)
    detail::prom_latency_histogram(w, "_request_duration_seconds", feature(t), t.latency_histogram);

  w.family("_generations_total", prometheus_type::counter,
           "Generations that reached the model (decoder requests), by feature.");
  for (const auto& t : s.features) w.sample("_generations_total", feature(t), std::to_string(t.generations));
  w.family("_prompt_tokens_total", prometheus_type::counter,
           "Prompt tokens of the generations, by feature and by where they came from: computed (prefill) or "
           "the prefix cache.");
  for (const auto& t : s.features) {
    w.sample("_prompt_tokens_total", {{"feature", t.name}, {"source", "computed"}},
             std::to_string(t.prompt_tokens - std::min(t.prompt_tokens, t.cached_prompt_tokens)));
    w.sample("_prompt_tokens_total", {{"feature", t.name}, {"source", "prefix_cache"}},
             std::to_string(t.cached_prompt_tokens));
  }
  w.family("_generated_tokens_total", prometheus_type::counter, "Generated tokens, by feature.");
  for (const auto& t : s.features)
    w.sample("_generated_tokens_total", feature(t), std::to_string(t.generated_tokens));
  w.family("_input_cost_per_million_tokens_" + cur, prometheus_type::gauge,
           "The feature's cost's prefill share per 1M prompt tokens, by feature.");
  for (const auto& t : s.features)
    w.sample("_input_cost_per_million_tokens_" + cur, feature(t), t.cost_per_million_input.to_decimal());
  w.family("_output_cost_per_million_tokens_" + cur, prometheus_type::gauge,
           "The feature's cost's decode share per 1M generated tokens, by feature.");
  for (const auto& t : s.features)
    w.sample("_output_cost_per_million_tokens_" + cur, feature(t), t.cost_per_million_output.to_decimal());
  w.family("_prefix_cache_saved_seconds", prometheus_type::gauge,
           "Prefill time the prefix cache saved, at the measured cost of a prefill token, by feature.");
  for (const auto& t : s.features)
    w.sample("_prefix_cache_saved_seconds", feature(t), seconds(t.prefix_saved_time));
  w.family("_prefix_cache_saved_" + cur, prometheus_type::gauge, "Money the prefix cache saved, by feature.");
  for (const auto& t : s.features)
    w.sample("_prefix_cache_saved_" + cur, feature(t), t.prefix_saved.to_decimal());
  w.family("_response_cache_hits_total", prometheus_type::counter,
           "Completions served whole by the response cache, by feature.");
  for (const auto& t : s.features)
    w.sample("_response_cache_hits_total", feature(t), std::to_string(t.response_hits));
  w.family("_response_cache_generated_tokens_total", prometheus_type::counter,
           "Generated tokens the response cache served without a model step, by feature.");
  for (const auto& t : s.features)
    w.sample("_response_cache_generated_tokens_total", feature(t),
             std::to_string(t.response_generated_tokens));
  w.family("_response_cache_saved_seconds", prometheus_type::gauge,
           "Model time the response cache saved, at the measured cost of its tokens, by feature.");
  for (const auto& t : s.features)
    w.sample("_response_cache_saved_seconds", feature(t), seconds(t.response_saved_time));
  w.family("_response_cache_saved_" + cur, prometheus_type::gauge,
           "Money the response cache saved, by feature.");
  for (const auto& t : s.features)
    w.sample("_response_cache_saved_" + cur, feature(t), t.response_saved.to_decimal());
  w.family("_time_to_first_token_seconds", prometheus_type::histogram,
           "Time to first token (TTFT), by feature.");
  for (const auto& t : s.features)
    detail::prom_latency_histogram(w, "_time_to_first_token_seconds", feature(t),
                                   t.time_to_first_token_histogram);
  w.family("_inter_token_latency_seconds", prometheus_type::histogram,
           "Time between two tokens of one sequence, by feature.");
  for (const auto& t : s.features)
    detail::prom_latency_histogram(w, "_inter_token_latency_seconds", feature(t),
                                   t.inter_token_latency_histogram);
  w.family("_steps_total", prometheus_type::counter, "Model steps measured with record_step_cost.");
  w.sample("_steps_total", {}, std::to_string(s.step_costs.steps));
  w.family("_step_token_seconds", prometheus_type::gauge,
           "The measured busy time of one token, by phase (prefill, decode).");
  w.sample("_step_token_seconds", {{"phase", "prefill"}}, num(s.step_costs.prefill_token_ns / 1e9));
  w.sample("_step_token_seconds", {{"phase", "decode"}}, num(s.step_costs.decode_token_ns / 1e9));

  w.family("_gpu_hourly_cost_" + cur, prometheus_type::gauge,
           "Price of one GPU-hour, by device (as node_gpu_hourly_cost).");
  for (const auto& d : s.devices) {
    auto ls = device(d);
    ls.emplace_back("billing", std::string(to_string(d.pricing)));
    money hourly = d.price.unit() == rate_unit::hour ? d.price.price() : d.price.price() * 3600;
    w.sample("_gpu_hourly_cost_" + cur, ls, hourly.to_decimal());
  }
  w.family("_gpu_utilization_ratio", prometheus_type::gauge,
           "GPU-busy time over wall time in the window, by device.");
  for (const auto& d : s.devices) w.sample("_gpu_utilization_ratio", device(d), num(d.utilization));
  w.family("_device_busy_seconds_total", prometheus_type::counter, "GPU-busy time, by device.");
  for (const auto& d : s.devices) w.sample("_device_busy_seconds_total", device(d), seconds(d.busy));
  w.family("_gpu_paid_" + cur + "_total", prometheus_type::counter, "GPU-hours paid for, priced, by device.");
  for (const auto& d : s.devices) w.sample("_gpu_paid_" + cur + "_total", device(d), d.paid.to_decimal());
  w.family("_idle_cost_" + cur + "_total", prometheus_type::counter,
           "Paid but idle GPU time, priced, by device.");
  for (const auto& d : s.devices)
    w.sample("_idle_cost_" + cur + "_total", device(d), d.idle_cost.to_decimal());
  w.family("_overhead_cost_" + cur + "_total", prometheus_type::counter,
           "Model load time, priced, by device.");
  for (const auto& d : s.devices)
    w.sample("_overhead_cost_" + cur + "_total", device(d), d.overhead_cost.to_decimal());
  w.family("_model_loads_total", prometheus_type::counter, "Model loads, by device.");
  for (const auto& d : s.devices) w.sample("_model_loads_total", device(d), std::to_string(d.model_loads));
  w.family("_model_unloads_total", prometheus_type::counter, "Model unloads, by device.");
  for (const auto& d : s.devices)
    w.sample("_model_unloads_total", device(d), std::to_string(d.model_unloads));
  w.family("_preemptions_total", prometheus_type::counter,
           "Job preemptions (resumes after an interruption), by device.");
  for (const auto& d : s.devices) w.sample("_preemptions_total", device(d), std::to_string(d.preemptions));
  w.family("_redone_records_total", prometheus_type::counter,
           "Records computed again after a resume, by device.");
  for (const auto& d : s.devices)
    w.sample("_redone_records_total", device(d), std::to_string(d.redone_records));
  w.family("_redone_seconds_total", prometheus_type::counter,
           "Busy time spent redoing work after a resume, by device.");
  for (const auto& d : s.devices) w.sample("_redone_seconds_total", device(d), seconds(d.redone));
  w.family("_redone_cost_" + cur + "_total", prometheus_type::counter,
           "Redone work after a resume, priced, by device.");
  for (const auto& d : s.devices)
    w.sample("_redone_cost_" + cur + "_total", device(d), d.redone_cost.to_decimal());

  w.family("_total_cost_" + cur + "_total", prometheus_type::counter,
           "Everything paid: busy, overhead and idle.");
  w.sample("_total_cost_" + cur + "_total", {}, s.total_cost.to_decimal());
  w.family("_unallocated_idle_cost_" + cur + "_total", prometheus_type::counter,
           "Idle cost not shared out to a feature.");
  w.sample("_unallocated_idle_cost_" + cur + "_total", {}, s.unallocated_idle.to_decimal());
  w.family("_window_seconds", prometheus_type::gauge, "Wall time the snapshot covers.");
  w.sample("_window_seconds", {}, seconds(s.wall));
  w.family("_alert_firing", prometheus_type::gauge, "1 for each threshold that fires.");
  for (const auto& a : s.alerts) w.sample("_alert_firing", {{"check", a.check}, {"subject", a.subject}}, "1");
}

/// @brief The snapshot's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const ledger_snapshot& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

/// @brief The snapshot as one JSON object. Money is a decimal string in the currency unit (exact), durations
/// are numbers of seconds, ratios are 0..1. Keys: currency, window_seconds, at_seconds, total_cost,
/// busy_cost, overhead_cost, idle_cost, unallocated_idle, utilization, idle_sharing, features[] and total
/// (each: name, requests, outcomes{}, batches, batched_items, tokens_in, tokens_out, busy_seconds, busy_cost,
/// idle_share, cost, cost_per_request, mean_batch_size, fill, cache_hits, cache_hit_ratio,
/// cache_saved_seconds, cache_saved, semantic_hits, semantic_saved_seconds, semantic_saved, escalations,
/// escalation_rate, cascade_saved_seconds, cascade_saved,
/// batch_model{valid,a_seconds,b_seconds}, batching_saved_seconds,
/// batching_saved, latency_seconds{p50,p90,p99, p999}, generations, prompt_tokens, cached_prompt_tokens,
/// generated_tokens, cost_per_million_input, cost_per_million_output, prefix_saved_seconds, prefix_saved,
/// response_hits, response_prompt_tokens, response_generated_tokens, response_saved_seconds, response_saved,
/// time_to_first_token_seconds{...},
/// inter_token_latency_seconds{...}), step_costs{steps, prefill_tokens, decode_tokens, busy_seconds,
/// fitted, fixed_seconds, prefill_marginal_seconds, decode_marginal_seconds, prefill_token_seconds,
/// decode_token_seconds}, devices[] (name, gpu_class, billing, hourly_price,
/// busy_seconds, load_seconds, idle_seconds, utilization, paid, busy_cost, overhead_cost, idle_cost,
/// model_loads, model_unloads, preemptions, redone_records, redone_seconds,
/// redone_cost, memory_fraction), queue{depth,limit} or null, alerts[] (check, subject, value,
/// threshold, message).
inline std::string to_json(const ledger_snapshot& s) {
  using detail::json_escape;
  using detail::num;
  auto m = [](money v) { return json_escape(v.to_decimal()); };
  auto sec = [](std::chrono::nanoseconds d) { return detail::seconds(d); };
  auto pct = [&](const latency_percentiles& p) {
    return "{\"p50\":" + sec(p.p50) + ",\"p90\":" + sec(p.p90) + ",\"p99\":" + sec(p.p99) +
           ",\"p999\":" + sec(p.p999) + "}";
  };
  auto feature = [&](const feature_figures& t) {
    std::string o = "{\"name\":" + json_escape(t.name) + ",\"requests\":" + std::to_string(t.requests) +
                    ",\"outcomes\":{";
    for (std::size_t i = 0; i < outcome_count; ++i) {
      // Appended piece by piece: `"," + std::string&&` trips GCC 12's -Wrestrict at -O3 (bug 105329).
      if (i) o += ',';
      o += json_escape(to_string(outcome(i)));
      o += ':';
      o += std::to_string(t.by_outcome[i]);
    }
    o += "},\"batches\":" + std::to_string(t.batches) +
         ",\"batched_items\":" + std::to_string(t.batched_items) +
         ",\"tokens_in\":" + std::to_string(t.tokens_in) + ",\"tokens_out\":" + std::to_string(t.tokens_out) +
         ",\"busy_seconds\":" + sec(t.busy) + ",\"busy_cost\":" + m(t.busy_cost) +
         ",\"idle_share\":" + m(t.idle_share) + ",\"cost\":" + m(t.cost) +
         ",\"cost_per_request\":" + m(t.cost_per_request) +
         ",\"mean_batch_size\":" + detail::json_num(t.mean_batch_size) +
         ",\"fill\":" + detail::json_num(t.fill) + ",\"cache_hits\":" + std::to_string(t.cache_hits) +
         ",\"cache_hit_ratio\":" + detail::json_num(t.cache_hit_ratio) +
         ",\"remote_hits\":" + std::to_string(t.remote_hits) + ",\"remote_hit_seconds\":" +
         detail::json_num(std::chrono::duration<double>(t.remote_latency).count()) +
         ",\"remote_faults\":" + std::to_string(t.remote_faults) +
         ",\"cache_saved_seconds\":" + sec(t.cache_saved_time) + ",\"cache_saved\":" + m(t.cache_saved) +
         ",\"semantic_hits\":" + std::to_string(t.semantic_hits) +
         ",\"semantic_saved_seconds\":" + sec(t.semantic_saved_time) +
         ",\"semantic_saved\":" + m(t.semantic_saved) + ",\"escalations\":" + std::to_string(t.escalations) +
         ",\"escalation_rate\":" + detail::json_num(t.escalation_rate) +
         ",\"cascade_saved_seconds\":" + sec(t.cascade_saved_time) +
         ",\"cascade_saved\":" + m(t.cascade_saved) +
         ",\"batch_model\":{\"valid\":" + (t.model.valid ? "true" : "false") +
         ",\"a_seconds\":" + detail::json_num(t.model.a_ns / 1e9) +
         ",\"b_seconds\":" + detail::json_num(t.model.b_ns / 1e9) +
         "},\"batching_saved_seconds\":" + sec(t.batching_saved_time) +
         ",\"batching_saved\":" + m(t.batching_saved) + ",\"latency_seconds\":" + pct(t.latency) +
         ",\"generations\":" + std::to_string(t.generations) +
         ",\"prompt_tokens\":" + std::to_string(t.prompt_tokens) +
         ",\"cached_prompt_tokens\":" + std::to_string(t.cached_prompt_tokens) +
         ",\"generated_tokens\":" + std::to_string(t.generated_tokens) +
         ",\"cost_per_million_input\":" + m(t.cost_per_million_input) +
         ",\"cost_per_million_output\":" + m(t.cost_per_million_output) +
         ",\"prefix_saved_seconds\":" + sec(t.prefix_saved_time) + ",\"prefix_saved\":" + m(t.prefix_saved) +
         ",\"response_hits\":" + std::to_string(t.response_hits) +
         ",\"response_prompt_tokens\":" + std::to_string(t.response_prompt_tokens) +
         ",\"response_generated_tokens\":" + std::to_string(t.response_generated_tokens) +
         ",\"response_saved_seconds\":" + sec(t.response_saved_time) +
         ",\"response_saved\":" + m(t.response_saved) +
         ",\"time_to_first_token_seconds\":" + pct(t.time_to_first_token) +
         ",\"inter_token_latency_seconds\":" + pct(t.inter_token_latency) + "}";
    return o;
  };
  static constexpr const char* sharing[] = {"none", "by_busy", "uniform"};
  std::string o = "{\"currency\":" + json_escape(s.cur.code()) + ",\"window_seconds\":" + sec(s.wall) +
                  ",\"at_seconds\":" + sec(s.at) + ",\"total_cost\":" + m(s.total_cost) +
                  ",\"busy_cost\":" + m(s.busy_cost) + ",\"overhead_cost\":" + m(s.overhead_cost) +
                  ",\"idle_cost\":" + m(s.idle_cost) + ",\"unallocated_idle\":" + m(s.unallocated_idle) +
                  ",\"utilization\":" + detail::json_num(s.utilization) +
                  ",\"idle_sharing\":" + json_escape(sharing[static_cast<int>(s.share)]) + ",\"features\":[";
  for (std::size_t i = 0; i < s.features.size(); ++i) {
    if (i) o += ',';
    o += feature(s.features[i]);
  }
  o += "],\"total\":" + feature(s.total) + ",\"devices\":[";
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    const device_figures& d = s.devices[i];
    o += std::string(i ? "," : "") + "{\"name\":" + json_escape(d.name) +
         ",\"gpu_class\":" + json_escape(d.gpu_class) + ",\"billing\":" + json_escape(to_string(d.pricing)) +
         ",\"hourly_price\":" +
         m(d.price.unit() == rate_unit::hour ? d.price.price() : d.price.price() * 3600) +
         ",\"busy_seconds\":" + sec(d.busy) + ",\"load_seconds\":" + sec(d.load) +
         ",\"idle_seconds\":" + sec(d.idle) + ",\"utilization\":" + detail::json_num(d.utilization) +
         ",\"paid\":" + m(d.paid) + ",\"busy_cost\":" + m(d.busy_cost) +
         ",\"overhead_cost\":" + m(d.overhead_cost) + ",\"idle_cost\":" + m(d.idle_cost) +
         ",\"model_loads\":" + std::to_string(d.model_loads) +
         ",\"model_unloads\":" + std::to_string(d.model_unloads) +
         ",\"preemptions\":" + std::to_string(d.preemptions) +
         ",\"redone_records\":" + std::to_string(d.redone_records) + ",\"redone_seconds\":" + sec(d.redone) +
         ",\"redone_cost\":" + m(d.redone_cost) +
         ",\"memory_fraction\":" + (d.memory_fraction ? detail::json_num(*d.memory_fraction) : "null") + "}";
  }
  o += "],\"queue\":";
  o += s.queue ? "{\"depth\":" + std::to_string(s.queue->first) +
                     ",\"limit\":" + std::to_string(s.queue->second) + "}"
               : std::string("null");
  const step_cost_model& sc = s.step_costs;
  o += ",\"step_costs\":{\"steps\":" + std::to_string(sc.steps) +
       ",\"prefill_tokens\":" + std::to_string(sc.prefill_tokens) +
       ",\"decode_tokens\":" + std::to_string(sc.decode_tokens) + ",\"busy_seconds\":" + sec(sc.busy) +
       ",\"fitted\":" + (sc.fitted ? "true" : "false") +
       ",\"fixed_seconds\":" + detail::json_num(sc.fixed_ns / 1e9) +
       ",\"prefill_marginal_seconds\":" + detail::json_num(sc.prefill_marginal_ns / 1e9) +
       ",\"decode_marginal_seconds\":" + detail::json_num(sc.decode_marginal_ns / 1e9) +
       ",\"prefill_token_seconds\":" + detail::json_num(sc.prefill_token_ns / 1e9) +
       ",\"decode_token_seconds\":" + detail::json_num(sc.decode_token_ns / 1e9) + "}";
  o += ",\"alerts\":[";
  for (std::size_t i = 0; i < s.alerts.size(); ++i) {
    const alert& a = s.alerts[i];
    o += std::string(i ? "," : "") + "{\"check\":" + json_escape(a.check) +
         ",\"subject\":" + json_escape(a.subject) + ",\"value\":" + detail::json_num(a.value) +
         ",\"threshold\":" + detail::json_num(a.threshold) + ",\"message\":" + json_escape(a.message) + "}";
  }
  return o + "]}";
}

/// @brief The snapshot as a fixed-width table for logs: one row per feature and a total, one per device, then
/// the cost breakdown and the alerts.
inline std::string to_table(const ledger_snapshot& s) {
  using detail::fixed;
  using detail::ms;
  using detail::pad;
  std::string o = "frugal cost over " + fixed(double(s.wall.count()) / 1e9, 3) + " s (" +
                  std::string(s.cur.code()) + ")\n";
  const std::vector<std::pair<std::string, std::size_t>> cols = {
      {"feature", 12},     {"requests", 9},     {"cost", 14},  {"cost/req", 14},
      {"busy s", 10},      {"batch", 7},        {"fill", 6},   {"hit", 6},
      {"cache saved", 13}, {"batch saved", 13}, {"p50 ms", 9}, {"p99 ms", 9}};
  for (std::size_t i = 0; i < cols.size(); ++i)
    o += pad(cols[i].first, cols[i].second, i == 0) + (i + 1 < cols.size() ? " " : "\n");
  auto row = [&](const feature_figures& t) {
    const std::string cells[] = {t.name,
                                 std::to_string(t.requests),
                                 t.cost.to_string(),
                                 t.cost_per_request.to_string(),
                                 fixed(double(t.busy.count()) / 1e9, 3),
                                 fixed(t.mean_batch_size, 1),
                                 fixed(t.fill * 100, 0) + "%",
                                 fixed(t.cache_hit_ratio * 100, 0) + "%",
                                 t.cache_saved.to_string(),
                                 t.batching_saved.to_string(),
                                 ms(t.latency.p50),
                                 ms(t.latency.p99)};
    for (std::size_t i = 0; i < cols.size(); ++i)
      o += pad(cells[i], cols[i].second, i == 0) + (i + 1 < cols.size() ? " " : "\n");
  };
  for (const auto& t : s.features) row(t);
  row(s.total);
  o += "\n" + pad("device", 12, true) + " " + pad("class", 10) + " " + pad("billing", 9) + " " +
       pad("util", 7) + " " + pad("paid", 14) + " " + pad("busy", 14) + " " + pad("overhead", 14) + " " +
       pad("idle", 14) + "\n";
  for (const auto& d : s.devices)
    o += pad(d.name, 12, true) + " " + pad(d.gpu_class, 10) + " " +
         pad(std::string(to_string(d.pricing)), 9) + " " + pad(fixed(d.utilization * 100, 1) + "%", 7) + " " +
         pad(d.paid.to_string(), 14) + " " + pad(d.busy_cost.to_string(), 14) + " " +
         pad(d.overhead_cost.to_string(), 14) + " " + pad(d.idle_cost.to_string(), 14) + "\n";
  o += "\ntotal " + s.total_cost.to_string() + " = busy " + s.busy_cost.to_string() + " + overhead " +
       s.overhead_cost.to_string() + " + idle " + s.idle_cost.to_string() + " (unallocated idle " +
       s.unallocated_idle.to_string() + "), utilization " + fixed(s.utilization * 100, 1) + "%\n";
  if (s.alerts.empty()) o += "alerts: none\n";
  for (const auto& a : s.alerts) o += "ALERT " + a.check + " [" + a.subject + "]: " + a.message + "\n";
  return o;
}

}  // namespace cost
FRUGAL_END_NAMESPACE
