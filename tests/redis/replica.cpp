// A replica for the tests: its own process, one redis_tier, a "model" that sleeps and counts its calls.
//   redis_replica PORT FIRST COUNT MODEL_MS CROSS(0|1)
// Prints "ready", waits for a line on stdin, looks up keys FIRST..FIRST+COUNT-1 with get_or_compute,
// checks every value, and prints its counters on one line.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <frugal/redis.hpp>

namespace {
std::vector<float> expected(std::uint64_t id) {
  return {static_cast<float>(id) * 1.5f, 7.0f, static_cast<float>(id % 13)};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: redis_replica PORT FIRST COUNT MODEL_MS CROSS\n";
    return 2;
  }
  const int port = std::stoi(argv[1]);
  const std::uint64_t first = std::stoull(argv[2]), count = std::stoull(argv[3]);
  const int model_ms = std::stoi(argv[4]);
  const bool cross = std::string(argv[5]) == "1";
  using tier = frugal::redis_tier<std::vector<float>>;
  tier t(tier::options_type{.redis = {.port = port,
                                      .model = "replica-test",
                                      .version = "1",
                                      .command_timeout = std::chrono::milliseconds(200),
                                      .cross_replica_single_flight = cross,
                                      .lock_ttl = std::chrono::milliseconds(5000),
                                      .lock_wait = std::chrono::milliseconds(5000)}});
  std::cout << "ready" << std::endl;
  std::string go;
  std::getline(std::cin, go);
  std::atomic<std::uint64_t> calls{0};
  bool ok = true;
  for (std::uint64_t id = first; id < first + count; ++id) {
    auto v = t.get_or_compute(frugal::key128{id, 0x5eed}, [&] {
      calls.fetch_add(1);
      if (model_ms) std::this_thread::sleep_for(std::chrono::milliseconds(model_ms));
      return expected(id);
    });
    ok = ok && v && *v == expected(id);
  }
  const auto s = t.stats();
  std::cout << "model_calls=" << calls.load() << " redis_hits=" << s.redis_hits
            << " lock_waits=" << s.lock_waits << " fallbacks=" << s.fallbacks << " values_ok=" << (ok ? 1 : 0)
            << std::endl;
  return 0;
}
