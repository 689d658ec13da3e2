#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "frugal/batcher/options.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A batcher's stats in Prometheus text: counters of requests (failures by `cause`) and batches, a
/// batch-size histogram (bounds 1, 2, 4, ... up to the largest batch), the queue wait and the request
/// duration as summaries (p50, p90, p99 over the batcher's life) with their maxima, and the queue's gauges.
/// Names start with the options' prefix, "frugal_batcher" by default (frugal_batcher_submitted_total, ...).
inline void append_prometheus(prometheus_writer& out, const batcher_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_batcher");
  w.one("_submitted_total", T::counter, "Submit calls that did not throw, those rejected at once included.",
        s.submitted);
  w.one("_completed_total", T::counter, "Requests whose result was delivered.", s.completed);
  w.family("_failed_total", T::counter, "Requests failed, by cause.");
  const std::pair<const char*, std::uint64_t> causes[] = {
      {"deadline_exceeded", s.failed.deadline_exceeded},
      {"cancelled", s.failed.cancelled},
      {"queue_full", s.failed.queue_full},
      {"closed", s.failed.closed},
      {"abandoned", s.failed.abandoned},
      {"result_count_mismatch", s.failed.result_count_mismatch},
      {"timeout", s.failed.timeout},
      {"model_error", s.failed.model_error}};
  for (const auto& [cause, n] : causes) w.sample("_failed_total", {{"cause", cause}}, n);
  w.one("_batches_total", T::counter, "Batches handed to workers.", s.batches);

  w.family("_batch_size", T::histogram, "Requests per batch handed to a worker.");
  std::vector<std::pair<double, std::uint64_t>> cumulative;
  std::uint64_t count = 0, sum = 0;
  std::size_t bound = 1;
  for (std::size_t n = 0; n < s.batch_sizes.size(); ++n) {
    while (n > bound) {
      cumulative.emplace_back(static_cast<double>(bound), count);
      bound *= 2;
    }
    count += s.batch_sizes[n];
    sum += n * s.batch_sizes[n];
  }
  cumulative.emplace_back(static_cast<double>(bound), count);
  detail::prom_histogram(w, "_batch_size", {}, cumulative, count, static_cast<double>(sum));

  w.family("_queue_wait_seconds", T::summary,
           "From arrival to the hand-out of the request's batch, over every request handed out.");
  detail::prom_summary(w, "_queue_wait_seconds", {},
                       {{0.5, s.queue_wait.p50}, {0.9, s.queue_wait.p90}, {0.99, s.queue_wait.p99}},
                       &s.queue_wait.count);
  w.one("_queue_wait_max_seconds", T::gauge, "The longest queue wait.", s.queue_wait.max);
  w.family("_request_duration_seconds", T::summary,
           "From arrival to result delivery, over completed requests.");
  detail::prom_summary(w, "_request_duration_seconds", {},
                       {{0.5, s.end_to_end.p50}, {0.9, s.end_to_end.p90}, {0.99, s.end_to_end.p99}},
                       &s.end_to_end.count);
  w.one("_request_duration_max_seconds", T::gauge, "The longest time from arrival to result delivery.",
        s.end_to_end.max);

  w.one("_queue_depth", T::gauge, "Requests queued now.", s.queue_depth);
  w.one("_queued_cost", T::gauge, "The summed weight (submit_options::weight) of the queued requests.",
        s.queued_cost);
  w.one("_in_flight", T::gauge, "Requests in batches handed out and not yet resolved.", s.in_flight);
  w.one("_in_flight_batches", T::gauge, "Batches handed out and not yet resolved.", s.in_flight_batches);
  w.one("_waiting_workers", T::gauge, "Workers blocked in next_batch now.", s.waiting_workers);
  w.one("_blocked_submits", T::gauge, "Producers blocked in submit (overflow::block) now.",
        s.blocked_submits);
  w.one("_mean_batch_size", T::gauge, "Mean requests per batch.", s.mean_batch_size);
  w.one("_fill_ratio", T::gauge, "Mean over batches of size over max_batch.", s.mean_fill_ratio);
  w.one("_batch_run_mean_seconds", T::gauge, "Mean time from a batch's hand-out to its resolution.",
        s.mean_batch_run_time);
}

/// @brief A batcher's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const batcher_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
