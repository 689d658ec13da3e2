#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A token id, as the tokenizers give them.
using kv_token = std::int32_t;

/// @brief What scopes prefix keys: blocks are shared only between sequences with equal salts. Build it
/// from the model (its file, its weights' precision), the adapter, and the tenant where tenants must not
/// share (a shared prefix's hit is visible in its latency). The default salt is empty: every sequence
/// of the cache shares with every other.
struct kv_salt {
  key128 key{};

  /// @brief The salt of a model, an adapter and a tenant; the three are framed, so ("ab", "c") and
  /// ("a", "bc") differ.
  static kv_salt of(std::string_view model, std::string_view adapter = {}, std::string_view tenant = {}) {
    return {hash_key(std::string_view("frugal.kv.salt"), model, adapter, tenant)};
  }
  friend constexpr bool operator==(const kv_salt&, const kv_salt&) noexcept = default;
};

/// @brief A full block's prefix key: XXH3-128 of its parent's key (zero for a sequence's first block),
/// the salt and the block's token ids, so equal keys mean equal tokens from position 0 under one salt.
inline key128 kv_block_key(const key128& parent, const kv_salt& salt, std::span<const kv_token> tokens) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const std::uint64_t head[4] = {parent.lo, parent.hi, salt.key.lo, salt.key.hi};
  XXH3_128bits_update(&state, head, sizeof head);
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return {h.low64, h.high64};
}

FRUGAL_END_NAMESPACE
