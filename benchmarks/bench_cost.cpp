// Recording cost per event at 1 and 2 threads, against two baselines in the same binary: a ledger whose
// counters are shared atomics (fetch_add), and one behind a mutex. Snapshot cost at 10k events.
#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "frugal/cost.hpp"

using namespace std::chrono_literals;
namespace fc = frugal::cost;

namespace {

fc::ledger_options options() {
  return {.prices = {{.gpu_class = "H100", .on_demand = fc::rate::per_hour(fc::money::parse("$4.00"))}},
          .devices = {{.gpu_class = "H100"}, {.gpu_class = "H100"}}};
}

struct fixture {
  fc::ledger<> ledger{options()};
  fc::feature_id chat = ledger.feature("chat");
  fc::feature_id search = ledger.feature("search");
};
fixture& shared() {
  static fixture f;
  return f;
}

// The counters a first version would keep: one set of shared atomics, every thread adding into them.
struct atomic_ledger {
  struct alignas(64) feature_counters {
    std::array<std::atomic<std::uint64_t>, 9> c{};
  };
  std::array<feature_counters, 2> features;
  void record_batch(std::size_t feature, std::size_t device, std::chrono::nanoseconds busy, std::uint64_t n) {
    auto& c = features[feature].c;
    const auto t = static_cast<std::uint64_t>(busy.count());
    c[0].fetch_add(1, std::memory_order_relaxed);
    c[1].fetch_add(n, std::memory_order_relaxed);
    c[2].fetch_add(n * n, std::memory_order_relaxed);
    c[3].fetch_add(n * t, std::memory_order_relaxed);
    c[4].fetch_add(t, std::memory_order_relaxed);
    c[5 + device].fetch_add(t, std::memory_order_relaxed);
  }
};
atomic_ledger& shared_atomic() {
  static atomic_ledger l;
  return l;
}

struct mutex_ledger {
  std::mutex m;
  std::array<std::array<std::uint64_t, 9>, 2> features{};
  void record_batch(std::size_t feature, std::size_t device, std::chrono::nanoseconds busy, std::uint64_t n) {
    std::lock_guard lock(m);
    auto& c = features[feature];
    const auto t = static_cast<std::uint64_t>(busy.count());
    c[0] += 1, c[1] += n, c[2] += n * n, c[3] += n * t, c[4] += t, c[5 + device] += t;
  }
};
mutex_ledger& shared_mutex() {
  static mutex_ledger l;
  return l;
}

void BM_record_batch_frugal(benchmark::State& state) {
  fixture& f = shared();
  std::uint32_t i = 0;
  for (auto _ : state) {
    f.ledger.record_batch({.feature = f.chat, .device = i & 1, .busy = 3ms, .batch_size = 1 + (i & 15)});
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_record_batch_shared_atomics(benchmark::State& state) {
  atomic_ledger& l = shared_atomic();
  std::uint32_t i = 0;
  for (auto _ : state) {
    l.record_batch(0, i & 1, 3ms, 1 + (i & 15));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_record_batch_mutex(benchmark::State& state) {
  mutex_ledger& l = shared_mutex();
  std::uint32_t i = 0;
  for (auto _ : state) {
    l.record_batch(0, i & 1, 3ms, 1 + (i & 15));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_record_request_frugal(benchmark::State& state) {
  fixture& f = shared();
  std::uint32_t i = 0;
  for (auto _ : state) {
    f.ledger.record_request(f.search, std::chrono::microseconds(800 + (i & 1023)), fc::outcome::ok);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_record_cache_hit_frugal(benchmark::State& state) {
  fixture& f = shared();
  for (auto _ : state) f.ledger.record_cache_hit(f.chat, 2ms);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_record_batch_frugal)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_record_batch_shared_atomics)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_record_batch_mutex)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_record_request_frugal)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_record_cache_hit_frugal)->Threads(1)->Threads(2)->UseRealTime();

// 10k events: 2,500 batches, 6,000 requests, 1,500 cache hits over two features and two devices.
void fill_10k(fc::ledger<>& l) {
  const fc::feature_id t[] = {l.feature("chat"), l.feature("search")};
  for (std::uint32_t i = 0; i < 2500; ++i)
    l.record_batch({.feature = t[i & 1],
                    .device = i & 1,
                    .busy = std::chrono::microseconds(500 + i % 3000),
                    .batch_size = 1 + i % 32});
  for (std::uint32_t i = 0; i < 6000; ++i)
    l.record_request(t[i & 1], std::chrono::microseconds(1000 + i * 37 % 400000));
  for (std::uint32_t i = 0; i < 1500; ++i) l.record_cache_hit(t[i & 1]);
}

void BM_snapshot_10k_events(benchmark::State& state) {
  fc::ledger<> l(options());
  fill_10k(l);
  for (auto _ : state) benchmark::DoNotOptimize(l.snapshot());
}
void BM_snapshot_and_exports_10k_events(benchmark::State& state) {
  fc::ledger<> l(options());
  fill_10k(l);
  for (auto _ : state) {
    const auto s = l.snapshot();
    benchmark::DoNotOptimize(fc::to_prometheus(s));
    benchmark::DoNotOptimize(fc::to_json(s));
    benchmark::DoNotOptimize(fc::to_table(s));
  }
}
BENCHMARK(BM_snapshot_10k_events)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_snapshot_and_exports_10k_events)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
