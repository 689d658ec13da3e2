#pragma once

#include <cstdint>
#include <string>

#include "frugal/cache/export.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"
#include "frugal/redis/client.hpp"
#include "frugal/redis/tier.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A Redis tier's stats in Prometheus text: where lookups were answered, writes, faults, the
/// cross-replica locks, the connection's round trips and errors, the circuit breaker's state, the round-trip
/// latency as a summary (p50, p99) with its mean and maximum, and the in-process LRU as the cache exporter
/// writes it under the prefix plus "_local_cache". Names start with the options' prefix, "frugal_redis" by
/// default (frugal_redis_hits_total counts Redis' hits, frugal_redis_local_hits_total the LRU's).
inline void append_prometheus(prometheus_writer& out, const redis_tier_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_redis");
  w.one("_lookups_total", T::counter, "Keys the shared tier was asked for.", s.lookups);
  w.one("_local_hits_total", T::counter, "Lookups the shared tier's LRU answered.", s.local_hits);
  w.one("_hits_total", T::counter, "Lookups the shared tier answered from Redis.", s.redis_hits);
  w.one("_misses_total", T::counter, "Lookups neither tier answered.", s.misses);
  w.one("_model_calls_total", T::counter, "Values computed by the caller's function.", s.model_calls);
  w.one("_header_mismatches_total", T::counter, "Values in Redis with another codec's header (misses).",
        s.header_mismatches);
  w.one("_decode_errors_total", T::counter, "Values the codec refused (misses).", s.decode_errors);
  w.one("_fallbacks_total", T::counter, "Lookups that could not ask Redis (a fault, the breaker open).",
        s.fallbacks);
  w.one("_writes_total", T::counter, "Values Redis acknowledged.", s.writes);
  w.one("_write_errors_total", T::counter, "Writes refused or lost to a fault.", s.write_errors);
  w.one("_oversize_skips_total", T::counter, "Values over max_value_bytes, not written.", s.oversize_skips);
  w.one("_flight_waits_total", T::counter, "Callers that waited for a compute in this process.",
        s.flight_waits);
  w.one("_locks_taken_total", T::counter, "Cross-replica locks taken before computing.", s.locks_taken);
  w.one("_lock_waits_total", T::counter, "Misses that found another replica's lock and waited.",
        s.lock_waits);
  w.one("_lock_wait_hits_total", T::counter, "Lock waits that got the other replica's value.",
        s.lock_wait_hits);
  w.one("_lock_wait_timeouts_total", T::counter, "Lock waits that gave up after lock_wait and computed.",
        s.lock_wait_timeouts);

  const redis_client_stats& r = s.redis;
  w.one("_round_trips_total", T::counter, "Redis round trips (pipelines answered in full).", r.round_trips);
  w.one("_commands_total", T::counter, "Commands in those round trips.", r.commands);
  w.one("_timeouts_total", T::counter, "Replies that did not come within command_timeout.", r.timeouts);
  w.one("_connection_errors_total", T::counter, "Failed connects and lost connections.", r.connection_errors);
  w.one("_auth_failures_total", T::counter, "AUTH refused.", r.auth_failures);
  w.one("_reply_errors_total", T::counter, "Error replies (e.g. OOM under noeviction).", r.reply_errors);
  w.one("_connects_total", T::counter, "Successful connects, the first ones and the reconnects.", r.connects);
  w.one("_breaker_skips_total", T::counter, "Calls not sent because the breaker was open.", r.breaker_skips);
  w.one("_breaker_opens_total", T::counter, "Times the circuit breaker opened.", r.breaker_opens);
  w.one("_breaker_open", T::gauge, "1 while the circuit breaker skips Redis (open or half open).",
        r.breaker != breaker_state::closed);
  w.family("_breaker_state", T::gauge, "1 for the circuit breaker's state now (closed, open, half_open).");
  for (breaker_state b : {breaker_state::closed, breaker_state::open, breaker_state::half_open})
    w.sample("_breaker_state", {{"state", to_string(b)}}, r.breaker == b);
  w.one("_breaker_backoff_seconds", T::gauge, "The wait before the next probe, while the breaker is open.",
        r.breaker_backoff);
  w.family("_round_trip_seconds", T::summary, "Latency of a Redis round trip.");
  detail::prom_summary(w, "_round_trip_seconds", {}, {{0.5, r.latency_p50}, {0.99, r.latency_p99}}, nullptr);
  w.one("_round_trip_mean_seconds", T::gauge, "Mean latency of a Redis round trip.", r.latency_mean);
  w.one("_round_trip_max_seconds", T::gauge, "The longest Redis round trip.", r.latency_max);

  append_prometheus(out, s.local, {.prefix = w.prefix() + "_local_cache", .labels = w.labels()});
}

/// @brief A Redis tier's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const redis_tier_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
