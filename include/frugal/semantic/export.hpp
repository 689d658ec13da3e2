#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"
#include "frugal/semantic/semantic_cache.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A semantic cache's stats in Prometheus text: lookups by `result` (exact, semantic, miss), stores
/// and evictions by `cause` (size, expired) as counters; the similarity of semantic hits as a histogram
/// whose bounds are semantic_stats' buckets (0.525 to 1 by 0.025; a hit on a bound counts in the next bucket,
/// and there is no _sum: the cache keeps none); entries, bytes and the HNSW indexes as gauges. Names start
/// with the options' prefix, "frugal_semantic_cache" by default (frugal_semantic_cache_lookups_total, ...).
inline void append_prometheus(prometheus_writer& out, const semantic_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_semantic_cache");
  w.family("_lookups_total", T::counter, "Semantic cache lookups, by result.");
  const std::pair<const char*, std::uint64_t> results[] = {
      {"exact", s.exact_hits}, {"semantic", s.semantic_hits}, {"miss", s.misses}};
  for (const auto& [result, n] : results) w.sample("_lookups_total", {{"result", result}}, n);
  w.one("_puts_total", T::counter, "Values stored.", s.puts);
  w.one("_replacements_total", T::counter, "Puts on an exact key already cached.", s.replacements);
  w.one("_rejected_oversize_total", T::counter, "Values heavier than max_bytes.", s.rejected_oversize);
  w.family("_evictions_total", T::counter,
           "Entries that left the cache, by cause: size (max_entries, max_bytes), expired (TTL).");
  w.sample("_evictions_total", {{"cause", "size"}}, s.evictions_size);
  w.sample("_evictions_total", {{"cause", "expired"}}, s.evictions_expired);

  w.family("_similarity", T::histogram, "Cosine similarity of the semantic hits.");
  std::vector<std::pair<double, std::uint64_t>> cumulative;
  std::uint64_t count = 0;
  for (std::size_t i = 0; i < s.similarity_histogram.size(); ++i) {
    count += s.similarity_histogram[i];
    const double bound =
        double(semantic_stats::histogram_low) + double(i + 1) * double(semantic_stats::histogram_width);
    // The float constants' bounds as the decimals they stand for (0.525, not 0.52499997615814209).
    cumulative.emplace_back(std::round(bound * 1e4) / 1e4, count);
  }
  detail::prom_histogram(w, "_similarity", {}, cumulative, count, std::nan(""));

  w.one("_entries", T::gauge, "Entries in the semantic cache.", s.entries);
  w.one("_bytes", T::gauge, "Sum of the weights of the live values.", s.bytes);
  w.one("_namespaces", T::gauge, "Namespaces with an index.", s.namespaces);
  w.one("_index_slots", T::gauge, "HNSW elements over all namespaces, live or deleted for reuse.",
        s.index_slots);
  w.one("_index_deleted", T::gauge, "HNSW elements marked deleted and waiting for reuse.", s.index_deleted);
  w.one("_index_bytes", T::gauge, "HNSW's memory: vectors, links, label map (an estimate).", s.index_bytes);
  w.one("_metadata_bytes", T::gauge, "The cache's own structures: LRU nodes, exact-key maps (an estimate).",
        s.metadata_bytes);
  w.one("_hit_ratio", T::gauge, "Exact and semantic hits over lookups, 0 before any lookup.", s.hit_ratio);
}

/// @brief A semantic cache's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const semantic_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
