// The 1M-entry hit loop of bench_cache's hit/frugal_lru/1000000, alone in a small binary, so that a
// change to the cache's headers can be timed without the rest of bench_cache's code and heap around it
// (layouts.sh runs it and bench_cache under several environment sizes). One source builds against any
// version of the headers: it takes the options type by either of its names.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "frugal/cache.hpp"

namespace {

using cache = frugal::lru_cache<std::uint64_t>;

template <class C>
auto make(std::size_t capacity) {
  if constexpr (requires { typename C::options_type; }) {
    return std::make_unique<C>(typename C::options_type{.max_entries = capacity});
  } else {
    return std::make_unique<C>(typename C::options{.max_entries = capacity});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n == 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: cache_hit_alone [entries > 0] [rounds > 0]\n");
    return 2;
  }
  auto c = make<cache>(n);
  std::vector<frugal::key128> keys;
  keys.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) keys.push_back(frugal::hash_key(i));
  for (std::size_t i = 0; i < n; ++i) c->put(keys[i], i);
  // The same draw as bench_cache: 2^20 uniform lookups, drawn before timing.
  std::mt19937_64 rng(11);
  std::vector<std::uint32_t> order(std::size_t{1} << 20);
  for (auto& i : order) i = static_cast<std::uint32_t>(rng() % n);
  const std::size_t per_round = 4 * order.size();
  std::vector<double> ns;
  std::uint64_t found = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < per_round; ++i) {
      const auto v = c->get(keys[order[i & (order.size() - 1)]]);
      found += v != nullptr;
    }
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(per_round));
  }
  std::sort(ns.begin(), ns.end());
  // Shards fill unevenly, so a few keys were evicted while filling: the hit count is printed, not assumed.
  std::printf("median_ns_per_get %.1f hits %.4f\n", ns[ns.size() / 2],
              static_cast<double>(found) / static_cast<double>(per_round * rounds));
  return 0;
}
