#pragma once

/// @file
/// @brief frugal's result cache: request keys hashed with XXH3 (key128, hash_key) and a sharded,
/// thread-safe LRU cache with byte limits, TTLs, single-flight loads and optional W-TinyLFU admission.

#include "frugal/cache/key.hpp"
#include "frugal/cache/lru_cache.hpp"
#include "frugal/cache/tinylfu.hpp"
#include "frugal/cache/weigher.hpp"
