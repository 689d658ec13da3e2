// The Redis tier's latencies against the other two ways to answer a lookup, all in one binary against one
// real redis-server (started on 127.0.0.1 with a free port, stopped at exit):
//   hit/lru          a hit in the in-process LRU in front of Redis;
//   hit/redis        a hit in Redis (no LRU in front): one GET round trip and the decode;
//   miss/model       the model call that a hit saves: the demo's default MLP (1024-4096-1024-4096-1024, fp32,
//                    examples/demo/model.hpp), one row;
//   batch32/per_key  32 lookups, one round trip each;
//   batch32/pipelined the same 32 lookups as one MGET.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <frugal/cache.hpp>
#include <frugal/redis.hpp>

#include "../../examples/demo/model.hpp"
#include "../../tests/redis/redis_server.hpp"

namespace {

using vec = std::vector<float>;
using tier = frugal::redis_tier<vec>;
constexpr std::size_t keys = 1024;
constexpr std::size_t dim = 384;  // a MiniLM-sized embedding

frugal_test::redis_server& server() {
  static frugal_test::redis_server s;
  return s;
}

std::unique_ptr<tier> make_tier(bool local) {
  tier::options_type o{.redis = {.port = server().port(), .model = "bench", .version = "1"}};
  if (!local) o.local = {.max_entries = 0, .max_bytes = 0};
  return std::make_unique<tier>(std::move(o));
}

std::vector<frugal::key128> filled_keys() {
  static const std::vector<frugal::key128> ks = [] {
    std::vector<frugal::key128> v;
    auto writer = make_tier(false);
    for (std::uint64_t i = 0; i < keys; ++i) {
      v.push_back(frugal::hash_key("bench-redis", i));  // hashed, as users' keys are
      if (!writer->put(v.back(), vec(dim, static_cast<float>(i))))
        throw std::runtime_error("bench_redis: a put to the benchmark's redis-server failed");
    }
    return v;
  }();
  return ks;
}

void hit_lru(benchmark::State& st) {
  const auto ks = filled_keys();
  auto t = make_tier(true);
  for (const auto& k : ks) t->get(k);  // the first get of each key is a Redis hit that fills the LRU
  std::size_t i = 0;
  for (auto _ : st) {
    auto p = t->get(ks[i++ % keys]);
    if (!p) st.SkipWithError("an LRU lookup missed");
    benchmark::DoNotOptimize(p);
  }
  st.counters["lru_hits_per_op"] =
      benchmark::Counter(static_cast<double>(t->stats().local_hits), benchmark::Counter::kAvgIterations);
}

void hit_redis(benchmark::State& st) {
  const auto ks = filled_keys();
  auto t = make_tier(false);
  std::size_t i = 0;
  for (auto _ : st) {
    auto p = t->get(ks[i++ % keys]);
    if (!p) st.SkipWithError("a Redis lookup missed");
    benchmark::DoNotOptimize(p);
  }
  st.counters["round_trips_per_op"] = benchmark::Counter(static_cast<double>(t->stats().redis.round_trips),
                                                         benchmark::Counter::kAvgIterations);
}

void miss_model(benchmark::State& st) {
  const demo::mlp model(demo::model_config{}, demo::recipe::fp32);
  demo::matrix x = demo::matrix::Random(1, model.input_dim());
  for (auto _ : st) benchmark::DoNotOptimize(model.forward(x));
}

void batch32(benchmark::State& st) {
  const bool pipelined = st.range(0) != 0;
  const auto ks = filled_keys();
  auto t = make_tier(false);
  std::size_t i = 0;
  for (auto _ : st) {
    const std::span<const frugal::key128> b(ks.data() + (i++ * 32) % keys, 32);
    std::size_t hits = 0;
    if (pipelined) {
      for (const auto& p : t->get_batch(b)) hits += p != nullptr;
    } else {
      for (const auto& k : b) hits += t->get(k) != nullptr;
    }
    if (hits != 32) st.SkipWithError("a batch lookup missed");
  }
  st.counters["round_trips_per_batch"] = benchmark::Counter(static_cast<double>(t->stats().redis.round_trips),
                                                            benchmark::Counter::kAvgIterations);
}

}  // namespace

BENCHMARK(hit_lru)->Name("hit/lru");
BENCHMARK(hit_redis)->Name("hit/redis");
BENCHMARK(miss_model)->Name("miss/model")->Unit(benchmark::kMicrosecond);
BENCHMARK(batch32)->Name("batch32/per_key")->Arg(0)->Unit(benchmark::kMicrosecond);
BENCHMARK(batch32)->Name("batch32/pipelined")->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
