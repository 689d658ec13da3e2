#pragma once

#include <string>

#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/prometheus.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A KV cache's stats in Prometheus text: blocks by state, bytes and tokens as gauges; appends,
/// copies, evictions, refused appends and prefix lookups (in tokens) as counters. Names start with the
/// options' prefix, "frugal_kv_cache" by default.
inline void append_prometheus(prometheus_writer& out, const kv_cache_stats& s,
                              const prometheus_options& opts = {}) {
  using T = prometheus_type;
  detail::prom_scope w(out, opts, "frugal_kv_cache");
  w.family(
      "_blocks", T::gauge,
      "Blocks by state: used (referenced by a sequence), cached (unreferenced, keyed, evictable), free.");
  w.sample("_blocks", {{"state", "used"}}, s.blocks_used);
  w.sample("_blocks", {{"state", "cached"}}, s.blocks_cached);
  w.sample("_blocks", {{"state", "free"}}, s.blocks_free);
  w.one("_block_tokens", T::gauge, "Tokens per block.", s.block_tokens);
  w.one("_block_bytes", T::gauge, "Bytes of K and V in one block, all layers.", s.block_bytes);
  w.one("_bytes", T::gauge, "Bytes of K and V storage, all blocks.", s.bytes_total);
  w.one("_used_bytes", T::gauge, "Bytes of the blocks referenced by sequences.", s.bytes_used);
  w.one("_sequences", T::gauge, "Open sequences.", s.sequences);
  w.one("_sequence_tokens", T::gauge, "Tokens of the open sequences, a shared token once per sequence.",
        s.sequence_tokens);
  w.one("_stored_tokens", T::gauge, "Tokens in the used blocks, a shared block once.", s.stored_tokens);
  w.one("_appended_tokens_total", T::counter, "Tokens appended to sequences (computed, not cached).",
        s.appended_tokens);
  w.one("_cow_copies_total", T::counter, "Shared, partly filled blocks copied before an append.",
        s.cow_copies);
  w.one("_evictions_total", T::counter, "Cached blocks evicted for new tokens, least recently used first.",
        s.evictions);
  w.one("_allocation_failures_total", T::counter, "Appends refused for want of blocks.",
        s.allocation_failures);
  w.one("_prefix_query_tokens_total", T::counter, "Prompt tokens looked up in the prefix cache.",
        s.prefix_query_tokens);
  w.one("_prefix_hit_tokens_total", T::counter, "Prompt tokens served from cached blocks.",
        s.prefix_hit_tokens);
}

/// @brief A KV cache's Prometheus text alone (see append_prometheus).
inline std::string to_prometheus(const kv_cache_stats& s, const prometheus_options& opts = {}) {
  prometheus_writer w;
  append_prometheus(w, s, opts);
  return w.str();
}

FRUGAL_END_NAMESPACE
