#pragma once
/// @file
/// @brief Single flight for the cache's get_or_compute: one compute per missing key at a time, its
/// future shared by every caller that misses the same key meanwhile, and the guard that turns a fn
/// asking for the key it computes (which would wait for itself) into an exception.
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

// The keys whose get_or_compute fn this thread is running, innermost first: a fn that asks for a key
// it is computing (its own, or an outer one's) would wait for itself, and throws instead.
struct compute_frame {
  const void* cache;
  const void* key;
  const compute_frame* outer;
};
inline thread_local const compute_frame* computing = nullptr;

// Runs fn() as the compute of key in cache, with its frame pushed for the duration.
template <class F>
decltype(auto) run_compute(const void* cache, const void* key, F& fn) {
  const compute_frame frame{cache, key, computing};
  computing = &frame;
  struct pop {
    const compute_frame* outer;
    ~pop() { computing = outer; }
  } restore{frame.outer};
  return std::invoke(fn);
}

// Throws if this thread is inside the fn computing key of cache (directly or through other keys' fns).
template <class Key>
void check_not_computing(const void* cache, const Key& key, const char* what) {
  if (computing == nullptr) [[likely]]
    return;
  for (const compute_frame* f = computing; f != nullptr; f = f->outer) {
    if (f->cache == cache && *static_cast<const Key*>(f->key) == key)
      throw std::logic_error(std::string("frugal::basic_cache::") + what +
                             ": fn asked for the key it is computing, which would wait for itself; "
                             "compute the value without the cache");
  }
}

// The computes running in one shard, keyed by what they compute; used under the shard's writers' lock.
template <class Key, class Pointer>
class flights {
 public:
  using future = std::shared_future<Pointer>;

  // Registers the promise's future as key's flight and returns true: the caller computes. If a compute
  // of key is already running, sets `other` to its future and returns false: the caller waits on it.
  bool begin(const Key& key, std::promise<Pointer>& promise, future& other) {
    auto it = map_.find(key);
    if (it != map_.end()) {
      other = it->second;
      return false;
    }
    map_.emplace(key, promise.get_future().share());
    return true;
  }

  const future& at(const Key& key) const { return map_.at(key); }

  // The compute of key has finished, stored or thrown: the next miss starts a new one.
  void end(const Key& key) { map_.erase(key); }

 private:
  std::unordered_map<Key, future> map_;
};

}  // namespace detail

FRUGAL_END_NAMESPACE
