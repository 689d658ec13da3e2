#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "frugal/cost/export.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"
#include "frugal/scheduler/options.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A scheduler's stats in Prometheus text: sequences running and waiting (gauges); submitted,
/// finished by `reason` and failed by `cause` sequences, steps, tokens (prefill, decode, generated, prefix
/// hits, recomputed) and preemptions (counters); time to first token and inter-token latency as histograms
/// in seconds. Names start with the options' prefix, "frugal_scheduler" by default.
inline void append_prometheus(prometheus_writer& out, const scheduler_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_scheduler");
  w.one("_running", T::gauge, "Sequences admitted and holding KV blocks.", s.running);
  w.one("_waiting", T::gauge, "Sequences waiting for admission, preempted ones included.", s.waiting);
  w.one("_submitted_total", T::counter, "Submit calls that did not throw, those rejected at once included.",
        s.submitted);
  w.family("_finished_total", T::counter, "Sequences finished, by reason (stop token, or length).");
  w.sample("_finished_total", {{"reason", "stop"}}, s.finished_stop);
  w.sample("_finished_total", {{"reason", "length"}}, s.finished_length);
  w.family("_failed_total", T::counter, "Sequences ended without finishing, by cause.");
  const std::pair<const char*, std::uint64_t> causes[] = {{"deadline_exceeded", s.failed.deadline_exceeded},
                                                          {"cancelled", s.failed.cancelled},
                                                          {"queue_full", s.failed.queue_full},
                                                          {"too_long", s.failed.too_long},
                                                          {"closed", s.failed.closed},
                                                          {"bad_logits", s.failed.bad_logits},
                                                          {"model_error", s.failed.model_error}};
  for (const auto& [cause, n] : causes) w.sample("_failed_total", {{"cause", cause}}, n);
  w.one("_steps_total", T::counter, "Steps completed or failed.", s.steps);
  w.family("_tokens_total", T::counter,
           "Tokens by kind: run in prefill chunks, run as decode tokens, sampled, found in the prefix cache "
           "at admission, computed again after a preemption.");
  w.sample("_tokens_total", {{"kind", "prefill"}}, s.prefill_tokens);
  w.sample("_tokens_total", {{"kind", "decode"}}, s.decode_tokens);
  w.sample("_tokens_total", {{"kind", "generated"}}, s.generated_tokens);
  w.sample("_tokens_total", {{"kind", "prefix_hit"}}, s.prefix_hit_tokens);
  w.sample("_tokens_total", {{"kind", "recomputed"}}, s.recomputed_tokens);
  w.one("_preemptions_total", T::counter, "Sequences whose KV blocks were taken back for another's.",
        s.preemptions);
  w.family("_time_to_first_token_seconds", T::histogram,
           "From submit to a sequence's first generated token.");
  cost::detail::prom_latency_histogram(w, "_time_to_first_token_seconds", {}, s.time_to_first_token);
  w.family("_inter_token_latency_seconds", T::histogram, "Between two generated tokens of one sequence.");
  cost::detail::prom_latency_histogram(w, "_inter_token_latency_seconds", {}, s.inter_token_latency);
}

/// @brief A scheduler's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const scheduler_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
