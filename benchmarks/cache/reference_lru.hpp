#pragma once

// The baseline every popular C++ LRU header shares: std::unordered_map into a std::list, behind one
// std::mutex. Values are shared_ptr<const V>, as frugal hands out, so both do the same work per hit.

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "frugal/cache/key.hpp"

namespace cache_bench {

template <class V>
class reference_lru {
 public:
  using pointer = std::shared_ptr<const V>;
  explicit reference_lru(std::size_t capacity) : capacity_(capacity) { map_.reserve(capacity + 1); }

  pointer get(const frugal::key128& key) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return {};
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  void put(const frugal::key128& key, V value) {
    pointer p = std::make_shared<const V>(std::move(value));
    std::lock_guard lock(mutex_);
    if (auto it = map_.find(key); it != map_.end()) {
      it->second->second = std::move(p);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(p));
    map_.emplace(key, order_.begin());
    if (map_.size() > capacity_) {
      map_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return map_.size();
  }

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<frugal::key128, pointer>> order_;
  std::unordered_map<frugal::key128, typename std::list<std::pair<frugal::key128, pointer>>::iterator> map_;
};

}  // namespace cache_bench
