#pragma once

// Key traces for the hit-ratio simulator and its test: Zipf, scan, loop and temporal shift, as
// sequences of key ids. Deterministic for a given seed.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <queue>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/cache.hpp"

namespace cache_traces {

using trace = std::vector<std::uint64_t>;

// Draws ranks 0..n-1 with P(r) proportional to 1/(r+1)^s, by inverting a precomputed CDF.
class zipf_sampler {
 public:
  zipf_sampler(std::size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::size_t r = 0; r < n; ++r) cdf_[r] = (sum += 1.0 / std::pow(static_cast<double>(r + 1), s));
    for (auto& c : cdf_) c /= sum;
  }
  template <class Rng>
  std::uint64_t operator()(Rng& rng) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<std::uint64_t>(std::min<std::size_t>(it - cdf_.begin(), cdf_.size() - 1));
  }

 private:
  std::vector<double> cdf_;
};

// Popularity by Zipf(s); ranks are scattered over the ids so that id order says nothing.
inline trace zipf(std::size_t keys, std::size_t requests, double s, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  zipf_sampler z(keys, s);
  std::vector<std::uint64_t> id(keys);
  for (std::size_t i = 0; i < keys; ++i) id[i] = i;
  std::shuffle(id.begin(), id.end(), rng);
  trace t(requests);
  for (auto& k : t) k = id[z(rng)];
  return t;
}

// Zipf(1.0) traffic broken by scans: after every `keys` requests, `keys` fresh ids read once each.
inline trace scan(std::size_t keys, std::size_t requests, std::uint64_t seed = 2) {
  const trace base = zipf(keys, requests, 1.0, seed);
  trace t;
  t.reserve(2 * requests);
  std::uint64_t fresh = keys;
  for (std::size_t i = 0; i < base.size(); ++i) {
    t.push_back(base[i]);
    if ((i + 1) % keys == 0)
      for (std::size_t j = 0; j < keys; ++j) t.push_back(fresh++);
  }
  return t;
}

// Every id in turn, over and over: LRU's worst case once the loop exceeds the cache.
inline trace loop(std::size_t keys, std::size_t requests) {
  trace t(requests);
  for (std::size_t i = 0; i < requests; ++i) t[i] = i % keys;
  return t;
}

// Zipf(1.0) whose popular keys change halfway: the second half draws from a disjoint id range.
inline trace shift(std::size_t keys, std::size_t requests, std::uint64_t seed = 3) {
  trace t = zipf(keys, requests, 1.0, seed);
  for (std::size_t i = requests / 2; i < requests; ++i) t[i] += keys;
  return t;
}

// Bélády's optimum: on a miss with a full cache, drop the key used again furthest in the future.
inline double belady_hit_ratio(const trace& t, std::size_t capacity) {
  constexpr std::size_t never = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> next(t.size());
  std::unordered_map<std::uint64_t, std::size_t> last;
  last.reserve(t.size());
  for (std::size_t i = t.size(); i-- > 0;) {
    auto it = last.find(t[i]);
    next[i] = it == last.end() ? never : it->second;
    last[t[i]] = i;
  }
  std::unordered_map<std::uint64_t, std::size_t> cached;               // key -> its next use
  std::priority_queue<std::pair<std::size_t, std::uint64_t>> by_next;  // lazy: stale pairs skipped
  std::size_t hits = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    auto it = cached.find(t[i]);
    if (it != cached.end()) {
      ++hits;
      it->second = next[i];
      by_next.emplace(next[i], t[i]);
      continue;
    }
    if (next[i] == never) continue;  // never used again: caching it cannot help
    if (cached.size() >= capacity) {
      const auto stale = [&](const std::pair<std::size_t, std::uint64_t>& e) {
        const auto c = cached.find(e.second);
        return c == cached.end() || c->second != e.first;
      };
      while (stale(by_next.top())) by_next.pop();
      const auto [furthest, victim] = by_next.top();
      if (furthest <= next[i]) continue;  // every cached key is needed sooner than this one
      by_next.pop();
      cached.erase(victim);
    }
    cached.emplace(t[i], next[i]);
    by_next.emplace(next[i], t[i]);
  }
  return static_cast<double>(hits) / static_cast<double>(t.size());
}

// Replays a trace through a cache as a server would use it: get_or_compute, counting the computes.
template <class Cache>
double replay_hit_ratio(Cache& cache, const trace& t) {
  std::size_t misses = 0;
  for (const std::uint64_t id : t) {
    cache.get_or_compute(frugal::hash_key(id), [&] {
      ++misses;
      return static_cast<std::uint8_t>(id);
    });
  }
  return 1.0 - static_cast<double>(misses) / static_cast<double>(t.size());
}

}  // namespace cache_traces
