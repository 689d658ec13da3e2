#pragma once

// A small KV cache and deterministic K/V for the kv tests: a token's K/V depend only on its id, its
// position, the layer and the head, as a real model's do, so two sequences with the same prompt write
// the same bits.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "frugal/kv.hpp"

namespace kv_test {

inline frugal::kv_cache_options small(std::size_t blocks, std::size_t block_tokens = 4) {
  frugal::kv_cache_options o{.block_tokens = block_tokens, .layers = 2, .kv_heads = 2, .head_dim = 4};
  o.budget_bytes = blocks * 2 * sizeof(float) * o.layers * o.kv_heads * o.head_dim * o.block_tokens;
  return o;
}

inline std::vector<frugal::kv_token> iota(std::size_t n, frugal::kv_token first = 100) {
  std::vector<frugal::kv_token> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline float value(frugal::kv_token tok, std::size_t pos, std::size_t layer, std::size_t i, int which) {
  return std::sin(0.37f * static_cast<float>(tok) + 0.11f * static_cast<float>(pos) +
                  0.7f * static_cast<float>(layer) + 0.013f * static_cast<float>(i) +
                  1.3f * static_cast<float>(which));
}

// Writes K and V of every layer for the sequence's tokens [first, first + n).
inline void write_kv(frugal::kv_cache& c, frugal::kv_sequence_id id, std::size_t first, std::size_t n) {
  const auto& o = c.options();
  const std::size_t row = o.kv_heads * o.head_dim;
  const auto toks = c.tokens(id);
  for (std::size_t l = 0; l < o.layers; ++l) {
    std::vector<float> k(n * row), v(n * row);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < row; ++i) {
        k[t * row + i] = value(toks[first + t], first + t, l, i, 0);
        v[t * row + i] = value(toks[first + t], first + t, l, i, 1);
      }
    c.write(id, l, first, k, v);
  }
}

// Whether the sequence's stored K and V are still what write_kv wrote for its tokens: a block evicted,
// reused or written while shared would show here.
inline bool stored_kv_matches(const frugal::kv_cache& c, frugal::kv_sequence_id id) {
  const auto& o = c.options();
  const auto table = c.block_table(id);
  const auto toks = c.tokens(id);
  for (std::size_t pos = 0; pos < toks.size(); ++pos)
    for (std::size_t l = 0; l < o.layers; ++l)
      for (std::size_t i = 0; i < o.kv_heads * o.head_dim; ++i) {
        const std::size_t g = i / o.head_dim,
                          at = (g * o.block_tokens + pos % o.block_tokens) * o.head_dim + i % o.head_dim;
        if (c.keys(l, table[pos / o.block_tokens])[at] != value(toks[pos], pos, l, i, 0) ||
            c.values(l, table[pos / o.block_tokens])[at] != value(toks[pos], pos, l, i, 1))
          return false;
      }
  return true;
}

// Every block's state, counted: referenced, cached and free add up to the total.
inline bool all_blocks_unreferenced(const frugal::kv_cache& c) {
  for (std::uint32_t b = 0; b < c.blocks_total(); ++b)
    if (c.block_refs(b) != 0) return false;
  const auto s = c.stats();
  return s.blocks_used == 0 && s.blocks_free + s.blocks_cached == s.blocks_total && s.stored_tokens == 0;
}

}  // namespace kv_test
