#pragma once

// The part of the demo to copy: cache -> batcher -> worker -> ledger around a model. Callers call
// answer() from their own threads; one worker thread pulls batches, runs one model call per batch, books
// it in the ledger, and hands every caller its own row. Everything else in examples/demo is the load
// generator (load.hpp) and the report (report.hpp).
#include <chrono>
#include <cstdint>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <frugal/frugal.hpp>

#include "served_model.hpp"

namespace demo {

using clock = std::chrono::steady_clock;
using output = std::shared_ptr<const std::vector<float>>;

struct loop_options {
  frugal::batcher_options batcher{};
  std::optional<frugal::cache_options<frugal::key128, std::vector<float>>>
      cache;  // none: every request reaches the model
  std::string gpu_class = "A10G";
  frugal::cost::rate price{};
  std::string feature = "embed";
  /// Called by the worker after each model call (the load generator tallies saturated batches with it).
  std::function<void(std::size_t batch, clock::duration busy, double cpu_seconds)> on_batch{};
};

/// CPU time of the calling thread, in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <class Policy = frugal::fixed_window>
class serving_loop {
 public:
  struct answer_type {
    output value;      // null when the model call failed
    bool hit = false;  // the cache answered: no model call for this request
  };

  serving_loop(const served_model& model, loop_options o, Policy policy = {})
      : model_(model),
        opts_(std::move(o)),
        batcher_(opts_.batcher, {}, std::move(policy)),
        ledger_({.prices = {{.gpu_class = opts_.gpu_class, .on_demand = opts_.price}},
                 .devices = {{.gpu_class = opts_.gpu_class, .name = "cpu0"}}}),
        feature_(ledger_.feature(opts_.feature)) {
    if (opts_.cache) cache_.emplace(*opts_.cache);
    worker_ = std::jthread([this](std::stop_token stop) { work(stop); });
  }
  ~serving_loop() { close(); }

  /// One request, from the caller's thread: a hit never reaches the model, and identical misses at the
  /// same time make one model call (get_or_compute runs the batcher's call once, the others wait for it).
  /// `start` is when the request was meant to start, for its latency in the ledger.
  answer_type answer(int input, clock::time_point start = clock::now()) {
    answer_type a;
    try {
      if (cache_) {
        const frugal::key128 key = model_.key(opts_.feature, input);
        bool computed = false;
        a.value = cache_->get_or_compute(key, [&] {
          computed = true;
          return std::vector<float>(*submit(input).get());
        });
        a.hit = !computed;
      } else {
        a.value = submit(input).get();
      }
    } catch (const std::exception&) {
      a.value = nullptr;
    }
    if (a.hit) ledger_.record_cache_hit(feature_);
    ledger_.record_request(feature_,
                           std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start),
                           a.value ? frugal::cost::outcome::ok : frugal::cost::outcome::error);
    return a;
  }

  /// Stops taking requests and joins the worker once the queue is drained.
  void close() {
    batcher_.close();
    if (worker_.joinable()) {
      worker_.request_stop();
      worker_.join();
    }
  }

  frugal::cost::ledger<>& ledger() noexcept { return ledger_; }

 private:
  // The batcher's light_future, kept as it is: converting it to a std::future would add std::promise's
  // futex system call and two allocations to every request.
  frugal::light_future<output> submit(int input) {
    return batcher_.submit(input, {.weight = model_.cost(input)});
  }

  void work(std::stop_token stop) {
    std::vector<int> inputs;
    while (auto b = batcher_.next_batch(stop)) {
      inputs.assign(b->requests().begin(), b->requests().end());
      try {
        const auto t0 = clock::now();
        const double cpu0 = thread_cpu_seconds();
        const matrix y = model_.forward(inputs);  // the model call: one per batch
        const auto busy = clock::now() - t0;
        const double cpu = thread_cpu_seconds() - cpu0;
        std::vector<output> rows;
        rows.reserve(inputs.size());
        const auto dim = static_cast<std::size_t>(model_.output_dim());
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          const float* r = y.row(static_cast<Eigen::Index>(i)).data();
          rows.push_back(std::make_shared<const std::vector<float>>(r, r + dim));
        }
        ledger_.record_batch({.feature = feature_,
                              .busy = std::chrono::duration_cast<std::chrono::nanoseconds>(busy),
                              .batch_size = static_cast<std::uint32_t>(inputs.size()),
                              .capacity = static_cast<std::uint32_t>(b->max_batch())});
        b->report_duration(busy);
        if (opts_.on_batch) opts_.on_batch(inputs.size(), busy, cpu);
        b->fulfill(std::move(rows));
      } catch (...) {
        b->fail(std::current_exception());
      }
    }
  }

  const served_model& model_;
  loop_options opts_;
  frugal::batcher<int, output, Policy> batcher_;
  frugal::cost::ledger<> ledger_;
  frugal::cost::feature_id feature_;
  std::optional<frugal::lru_cache<std::vector<float>>> cache_;
  std::jthread worker_;
};

}  // namespace demo
