#pragma once

/// @file
/// @brief frugal's result cache: request keys hashed with XXH3 (key128, hash_key) and a sharded,
/// thread-safe cache with byte limits, TTLs and single-flight loads, evicting by LRU (lru_cache) or
/// W-TinyLFU (tinylfu_cache), both basic_cache with the policy as a parameter; their stats as Prometheus
/// text; and the response cache of a decoder's deterministic completions (response_cache).

#include "frugal/cache/basic_cache.hpp"
#include "frugal/cache/export.hpp"
#include "frugal/cache/key.hpp"
#include "frugal/cache/response.hpp"
#include "frugal/cache/tinylfu.hpp"
#include "frugal/cache/weigher.hpp"
