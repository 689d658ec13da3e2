#pragma once
/// @file
/// @brief Why an entry left a basic_cache; its own header so that the shards (detail/shard.hpp), which
/// count evictions by cause, and the public class share it.
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why an entry left the cache, as passed to options.on_evict.
enum class eviction_cause {
  size,      ///< pushed out by the entry or byte limit
  expired,   ///< its TTL ran out
  erased,    ///< erase, erase_if or clear
  replaced,  ///< a put on the same key, or a put too large to cache
};

FRUGAL_END_NAMESPACE
