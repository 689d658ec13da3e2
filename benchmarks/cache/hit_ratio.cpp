// Replays key traces through frugal's LRU, its W-TinyLFU admission and Bélády's optimum, and prints a
// Markdown table of hit ratios at cache sizes of 0.5%, 1%, 5% and 10% of the keys.
//
//   cache_hit_ratio [keys=100000] [requests=1000000]

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "frugal/cache.hpp"
#include "traces.hpp"

int main(int argc, char** argv) {
  const std::size_t keys = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100'000;
  const std::size_t requests = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1'000'000;
  const std::vector<std::pair<std::string, cache_traces::trace>> traces = {
      {"Zipf(0.8)", cache_traces::zipf(keys, requests, 0.8)},
      {"Zipf(1.0)", cache_traces::zipf(keys, requests, 1.0)},
      {"Zipf(1.2)", cache_traces::zipf(keys, requests, 1.2)},
      {"scan (Zipf(1.0) + one-pass scans)", cache_traces::scan(keys, requests)},
      {"loop", cache_traces::loop(keys, requests)},
      {"temporal shift", cache_traces::shift(keys, requests)},
  };
  const double fractions[] = {0.005, 0.01, 0.05, 0.10};

  std::printf("%zu keys, %zu requests per trace (scan: plus the scanned keys); hit ratio in %%\n\n", keys,
              requests);
  std::printf("| trace | policy | 0.5%% | 1%% | 5%% | 10%% |\n|---|---|---:|---:|---:|---:|\n");
  for (const auto& [trace_name, t] : traces) {
    const std::string& name = trace_name;  // a lambda below needs a variable, not a binding
    double lru[4], lfu[4], opt[4];
    for (int i = 0; i < 4; ++i) {
      const auto capacity = static_cast<std::size_t>(fractions[i] * static_cast<double>(keys));
      frugal::lru_cache<std::uint8_t> a({.max_entries = capacity, .shards = 1});
      frugal::tinylfu_cache<std::uint8_t> b({.max_entries = capacity, .shards = 1});
      lru[i] = 100 * cache_traces::replay_hit_ratio(a, t);
      lfu[i] = 100 * cache_traces::replay_hit_ratio(b, t);
      opt[i] = 100 * cache_traces::belady_hit_ratio(t, capacity);
    }
    const auto row = [&](const char* policy, const double* h) {
      std::printf("| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", name.c_str(), policy, h[0], h[1], h[2], h[3]);
    };
    row("LRU", lru);
    row("W-TinyLFU", lfu);
    row("Bélády (optimum)", opt);
    std::printf("| %s | W-TinyLFU − LRU | %+.1f | %+.1f | %+.1f | %+.1f |\n", name.c_str(), lfu[0] - lru[0],
                lfu[1] - lru[1], lfu[2] - lru[2], lfu[3] - lru[3]);
    std::fflush(stdout);
  }
}
