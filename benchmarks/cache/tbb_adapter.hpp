#pragma once

// oneTBB's concurrent_lru_cache behind the benchmark's get/put shape. It has no put: a miss runs its
// value function, so a put is a lookup whose function returns the value being put, and a get that
// misses inserts a default value (TBB's model is get-or-compute). It holds
// `capacity` unused items; items in use by a handle are never evicted.

#define TBB_PREVIEW_CONCURRENT_LRU_CACHE 1
#include <tbb/concurrent_lru_cache.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "frugal/cache/key.hpp"

namespace cache_bench {

template <class V>
class tbb_lru {
  // The value function cannot see the value of a put, so a thread-local slot passes it in.
  static inline thread_local const V* pending_ = nullptr;
  static std::shared_ptr<const V> make(frugal::key128) {
    return std::make_shared<const V>(pending_ ? *pending_ : V{});
  }
  using cache_type = tbb::concurrent_lru_cache<frugal::key128, std::shared_ptr<const V>,
                                               std::shared_ptr<const V> (*)(frugal::key128)>;

 public:
  using pointer = std::shared_ptr<const V>;
  explicit tbb_lru(std::size_t capacity) : cache_(&make, capacity) {}

  pointer get(const frugal::key128& key) {
    auto h = cache_[key];
    return h.value();
  }
  void put(const frugal::key128& key, V value) {
    pending_ = &value;
    auto h = cache_[key];
    pending_ = nullptr;
  }

 private:
  cache_type cache_;
};

}  // namespace cache_bench
