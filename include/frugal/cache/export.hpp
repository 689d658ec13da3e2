#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "frugal/cache/basic_cache.hpp"
#include "frugal/cache/response.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A cache's stats (lru_cache or tinylfu_cache) in Prometheus text: lookups, stores, evictions by
/// `cause` (size, expired, explicit) and single-flight loads as counters, and entries, bytes, hit ratio and
/// shard figures as gauges. Names start with the options' prefix, "frugal_result_cache" by default
/// (frugal_result_cache_hits_total, ...): the ledger's frugal_cache_* families are per feature.
inline void append_prometheus(prometheus_writer& out, const cache_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_result_cache");
  w.one("_hits_total", T::counter, "Lookups that found a value.", s.hits);
  w.one("_misses_total", T::counter, "Lookups that found none.", s.misses);
  w.one("_puts_total", T::counter, "Values stored by put and get_or_compute.", s.puts);
  w.one("_replacements_total", T::counter, "Values replaced by a put on the same key.", s.replacements);
  w.one("_rejected_oversize_total", T::counter, "Values too large to cache.", s.rejected_oversize);
  w.family("_evictions_total", T::counter,
           "Entries that left the cache, by cause: size (a limit), expired (TTL), explicit (erase, clear).");
  const std::pair<const char*, std::uint64_t> causes[] = {
      {"size", s.evictions_size}, {"expired", s.evictions_expired}, {"explicit", s.evictions_explicit}};
  for (const auto& [cause, n] : causes) w.sample("_evictions_total", {{"cause", cause}}, n);
  w.one("_loads_total", T::counter, "Compute functions started by get_or_compute.", s.loads);
  w.one("_load_waits_total", T::counter, "Callers that waited on another caller's compute.", s.load_waits);
  w.one("_load_failures_total", T::counter, "Computes that threw (never cached).", s.load_failures);
  w.one("_entries", T::gauge, "Entries in the cache.", s.entries);
  w.one("_bytes", T::gauge, "Sum of the weights of the live values.", s.bytes);
  w.one("_metadata_bytes", T::gauge, "The cache's own structures: slots, index, sketch, shards.",
        s.metadata_bytes);
  w.one("_hit_ratio", T::gauge, "Hits over lookups, 0 before any lookup.", s.hit_ratio);
  w.one("_shards", T::gauge, "Shards of the cache.", s.shards);
  w.one("_shard_max_entries", T::gauge, "The largest shard's share of max_entries (0: no such limit).",
        s.shard_max_entries);
  w.one("_shard_max_bytes", T::gauge, "The largest shard's share of max_bytes (0: no such limit).",
        s.shard_max_bytes);
  w.one("_full_shards", T::gauge, "Shards at their entry or byte limit now.", s.full_shards);
}

/// @brief A cache's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const cache_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

/// @brief A response cache's stats in Prometheus text: lookups, hits, misses and uncacheable requests as
/// counters, under the prefix "frugal_response_cache" by default (its store exports its own figures).
inline void append_prometheus(prometheus_writer& out, const response_cache_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_response_cache");
  w.one("_lookups_total", T::counter, "Cacheable requests looked up.", s.lookups);
  w.one("_hits_total", T::counter, "Completions served from the store: no model step.", s.hits);
  w.one("_misses_total", T::counter, "Cacheable requests the store did not have.", s.misses);
  w.one("_uncacheable_total", T::counter, "Requests sampled without a seed, sent to the model uncached.",
        s.uncacheable);
}

/// @brief A response cache's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const response_cache_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
