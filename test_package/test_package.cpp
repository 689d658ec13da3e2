// The Conan test package: frugal's version, one batcher round trip and one cache put/get, built
// from the package alone (CMakeDeps), so Eigen, xxHash and the headers all come through Conan.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <frugal/batcher.hpp>
#include <frugal/cache.hpp>
#include <frugal/clock.hpp>
#include <frugal/frugal.hpp>

namespace {

bool batcher_round_trip() {
  using namespace std::chrono_literals;
  frugal::manual_clock clock;
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> batcher(
      {.window = 5ms, .max_batch = 2}, clock);
  auto first = batcher.submit(20);
  auto second = batcher.submit(21);
  auto batch = batcher.try_next_batch();
  if (!batch || batch->size() != 2) return false;
  std::vector<int> results;
  for (int request : batch->requests()) results.push_back(request * 2);
  batch->fulfill(std::move(results));
  return first.get() == 40 && second.get() == 42;
}

bool cache_put_get() {
  frugal::lru_cache<std::string> cache({.max_entries = 16});
  const frugal::key128 key = frugal::hash_key(std::string("prompt"), 7);
  cache.put(key, std::string("completion"));
  const auto hit = cache.get(key);
  return hit && *hit == "completion" && !cache.get(frugal::hash_key(std::string("other"), 7));
}

}  // namespace

int main() {
  if (std::strcmp(frugal::version_string(), FRUGAL_VERSION_STRING) != 0) return 1;
  if (!batcher_round_trip()) {
    std::puts("batcher round trip failed");
    return 1;
  }
  if (!cache_put_get()) {
    std::puts("cache put/get failed");
    return 1;
  }
  std::printf("frugal %s conan test_package ok (batcher, cache)\n", frugal::version_string());
  return 0;
}
