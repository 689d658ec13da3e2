// The adaptive policy against every hand-tuned fixed window, on a simulated model whose batch takes
// a*n + b. The simulation is discrete-event on frugal::manual_clock: one worker (one GPU stream), Poisson
// arrivals, every request carrying the latency target as its deadline (so overload is shed, not queued
// forever). It is deterministic, so the figures do not depend on how busy this machine is.
//
// For each model shape and load it reports the goodput (requests completed within the target, per second)
// and p99 end-to-end latency of the adaptive policy and of the best fixed window whose p99 meets the target,
// and their ratio. The full sweep is printed to stderr.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "frugal/batcher.hpp"

namespace {

using namespace std::chrono_literals;
using ns = std::chrono::nanoseconds;

struct model_shape {
  const char* name;
  double a_ms;  // per request
  double b_ms;  // per batch
};

constexpr model_shape models[] = {{"gpu-like a=0.25ms b=4ms", 0.25, 4.0}, {"linear a=1ms b=2ms", 1.0, 2.0}};
constexpr double loads[] = {0.05, 0.40, 1.10};  // offered load as a fraction of capacity at max_batch
constexpr const char* load_names[] = {"light", "medium", "saturating"};
constexpr std::size_t max_batch = 32;
constexpr double seconds = 30;

struct sim_result {
  double goodput = 0;  // completed within target, per second
  double p99_ms = 0;
  double shed = 0;  // fraction failed with deadline_exceeded
  double mean_batch = 0;
  double gpu_ms_per_1k = 0;  // model time per 1000 completed requests: the cost side
};

// The strongest hand-tuned rival: a fixed window that is also told the true a*n + b, so it sheds
// hopeless requests exactly as the adaptive policy does once it has learned them.
struct fixed_window_oracle {
  model_shape m;
  std::chrono::nanoseconds wait_for(const frugal::policy_view& v) const noexcept {
    return v.window - v.oldest_wait;
  }
  std::chrono::nanoseconds expected_run_time(std::size_t n) const noexcept {
    return std::chrono::duration_cast<ns>(
        std::chrono::duration<double, std::milli>(m.a_ms * static_cast<double>(n) + m.b_ms));
  }
};

double capacity(const model_shape& m) { return max_batch / ((m.a_ms * max_batch + m.b_ms) * 1e-3); }

template <class Policy>
sim_result simulate(Policy policy, ns window, const model_shape& m, double rate, ns target, unsigned seed) {
  frugal::manual_clock clk;
  using time_point = frugal::manual_clock::time_point;
  frugal::batcher<int, int, Policy, frugal::manual_clock> b{
      {.window = window, .max_batch = max_batch}, clk, std::move(policy)};
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  auto after = [](time_point t, double s) {
    return t + std::chrono::duration_cast<ns>(std::chrono::duration<double>(s));
  };
  const time_point start = clk.now(), end = after(start, seconds);
  time_point next_arrival = after(start, gap(rng));
  std::optional<typename decltype(b)::batch> running;
  time_point busy_until{};
  std::vector<std::int64_t> latencies;
  std::uint64_t good = 0, arrived = 0;
  double busy_ms = 0;
  for (;;) {
    time_point t = time_point::max();
    if (next_arrival < end) t = next_arrival;
    if (running)
      t = std::min(t, busy_until);
    else if (auto due = b.next_due())
      t = std::min(t, std::max(*due, clk.now()));
    if (t == time_point::max()) break;
    clk.set(t);
    if (running && t >= busy_until) {
      auto r = running->requests();
      running->fulfill(std::vector<int>(r.begin(), r.end()));
      running.reset();
    }
    if (next_arrival < end && t == next_arrival) {
      b.submit(static_cast<int>(arrived++),
               [&latencies, &good, &clk, target, arrival = t](frugal::result<int> o) {
                 if (!o) return;
                 const auto l = std::chrono::duration_cast<ns>(clk.now() - arrival);
                 latencies.push_back(l.count());
                 good += l <= target;
               },
               {.deadline = t + target});
      next_arrival = after(next_arrival, gap(rng));
    }
    if (!running) {
      running = b.try_next_batch();
      if (running) {
        const double ms = m.a_ms * static_cast<double>(running->size()) + m.b_ms;
        busy_ms += ms;
        busy_until = after(t, ms * 1e-3);
      }
    }
  }
  sim_result r;
  const auto s = b.stats();
  r.goodput = static_cast<double>(good) / seconds;
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    r.p99_ms = static_cast<double>(latencies[(latencies.size() - 1) * 99 / 100]) * 1e-6;
  }
  r.shed = static_cast<double>(s.failed.deadline_exceeded) /
           static_cast<double>(std::max<std::uint64_t>(arrived, 1));
  r.mean_batch = s.mean_batch_size;
  r.gpu_ms_per_1k = s.completed ? busy_ms * 1000 / static_cast<double>(s.completed) : 0;
  return r;
}

void print(const char* model, const char* load, ns target, const char* policy, const sim_result& r) {
  std::fprintf(stderr,
               "%-24s %-10s target %2d ms %-20s goodput %8.1f/s  p99 %6.2f ms  shed %5.1f%%  batch %5.1f  "
               "gpu %7.1f ms/1k\n",
               model, load, static_cast<int>(target.count() / 1000000), policy, r.goodput, r.p99_ms,
               100 * r.shed, r.mean_batch, r.gpu_ms_per_1k);
}

void BM_adaptive_vs_best_fixed_window(benchmark::State& state) {
  const model_shape& m = models[state.range(0)];
  const auto load = static_cast<std::size_t>(state.range(1));
  const double rate = loads[load] * capacity(m);
  const ns target = std::chrono::milliseconds(state.range(2));
  const unsigned seed = 42;
  sim_result adaptive, best;
  double best_window_ms = -1;
  bool best_oracle = false;
  for (auto _ : state) {
    adaptive = simulate(frugal::adaptive{{.latency_target = target}}, 0ms, m, rate, target, seed);
    print(m.name, load_names[load], target, "adaptive", adaptive);
    best = {};
    best_window_ms = -1;
    for (bool oracle : {false, true}) {
      for (double w_ms : {0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0}) {
        const auto window = std::chrono::duration_cast<ns>(std::chrono::duration<double, std::milli>(w_ms));
        const sim_result r = oracle ? simulate(fixed_window_oracle{m}, window, m, rate, target, seed)
                                    : simulate(frugal::fixed_window{}, window, m, rate, target, seed);
        char name[40];
        std::snprintf(name, sizeof name, "%s %.1f ms", oracle ? "fixed+oracle" : "fixed", w_ms);
        print(m.name, load_names[load], target, name, r);
        if (r.p99_ms <= std::chrono::duration<double, std::milli>(target).count() &&
            r.goodput > best.goodput) {
          best = r;
          best_window_ms = w_ms;
          best_oracle = oracle;
        }
      }
    }
  }
  state.SetLabel(std::string(m.name) + ", " + load_names[load] + ", p99 target " +
                 std::to_string(state.range(2)) + " ms");
  state.counters["offered_per_s"] = rate;
  state.counters["adaptive_goodput"] = adaptive.goodput;
  state.counters["adaptive_p99_ms"] = adaptive.p99_ms;
  state.counters["best_fixed_goodput"] = best.goodput;
  state.counters["best_fixed_p99_ms"] = best.p99_ms;
  state.counters["best_window_ms"] = best_window_ms;
  state.counters["best_is_oracle"] = best_oracle;
  state.counters["ratio"] = best.goodput > 0 ? adaptive.goodput / best.goodput : 0;
  state.counters["adaptive_gpu_ms_per_1k"] = adaptive.gpu_ms_per_1k;
  state.counters["best_gpu_ms_per_1k"] = best.gpu_ms_per_1k;
}

}  // namespace

BENCHMARK(BM_adaptive_vs_best_fixed_window)
    ->ArgNames({"model", "load", "target_ms"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {20, 50}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
