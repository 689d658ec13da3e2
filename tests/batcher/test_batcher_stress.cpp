#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "frugal/batcher.hpp"

using namespace std::chrono_literals;

namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int default_requests = 100'000;
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr int default_requests = 100'000;
#  else
constexpr int default_requests = 200'000;
#  endif
#else
constexpr int default_requests = 200'000;
#endif

// FRUGAL_STRESS_REQUESTS overrides the size, e.g. for a longer soak.
int stress_requests() {
  if (const char* s = std::getenv("FRUGAL_STRESS_REQUESTS")) return std::max(1000, std::atoi(s));
  return default_requests;
}

enum class seen : int { none, value, deadline, cancelled, closed, queue_full, model, other };

seen classify(const frugal::result<int>& o, int request) {
  if (o) return *o == 2 * request ? seen::value : seen::other;
  try {
    std::rethrow_exception(o.error());
  } catch (const frugal::batch_error& e) {
    switch (e.code()) {
      case frugal::batch_errc::deadline_exceeded:
        return seen::deadline;
      case frugal::batch_errc::cancelled:
        return seen::cancelled;
      case frugal::batch_errc::closed:
        return seen::closed;
      case frugal::batch_errc::queue_full:
        return seen::queue_full;
      default:
        return seen::other;
    }
  } catch (const std::runtime_error&) {
    return seen::model;
  }
}

}  // namespace

TEST_CASE(
    "batcher: under 4 producers and 2 workers with deadlines, cancels, model errors and a close midway, "
    "every request resolves exactly once and stats add up") {
  const int total = stress_requests();
  constexpr int producers = 4;
  frugal::batcher<int, int> b{{.window = 200us, .max_batch = 32, .priority_levels = 2, .max_queued = 16384}};

  std::vector<std::atomic<int>> resolutions(static_cast<std::size_t>(total));
  std::vector<std::atomic<int>> outcome_of(static_cast<std::size_t>(total));
  std::atomic<int> submitted{0};
  std::atomic<int> model_failures_expected{0};

  auto record = [&](int request, const frugal::result<int>& o) {
    resolutions[static_cast<std::size_t>(request)].fetch_add(1, std::memory_order_relaxed);
    outcome_of[static_cast<std::size_t>(request)].store(static_cast<int>(classify(o, request)),
                                                        std::memory_order_relaxed);
  };

  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    while (auto batch = b.next_batch()) {
      const auto roll = rng() % 100;
      if (roll == 0) {
        model_failures_expected.fetch_add(static_cast<int>(batch->size()), std::memory_order_relaxed);
        try {
          throw std::runtime_error("the model failed");
        } catch (...) {
          batch->fail(std::current_exception());
        }
        continue;
      }
      std::vector<int> out;
      out.reserve(batch->size());
      for (int x : batch->requests()) out.push_back(2 * x);
      batch->fulfill(std::move(out));
    }
  };

  auto producer = [&](int index) {
    std::mt19937 rng(static_cast<unsigned>(1234 + index));
    std::vector<std::future<int>> futures;
    std::vector<int> future_requests;
    std::vector<std::stop_source> late_cancels;
    for (int request = index; request < total; request += producers) {
      frugal::batcher<int, int>::submit_options o;
      o.priority = rng() % 2;
      const auto roll = rng() % 100;
      if (roll < 20) o.deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 400);
      std::stop_source stop;
      if (roll >= 20 && roll < 25) o.stop = stop.get_token();
      if (request % 4 == 0) {
        futures.push_back(b.submit(request, o));
        future_requests.push_back(request);
      } else {
        const frugal::request_id id = b.submit(
            request, [&record, request](frugal::result<int> r) { record(request, r); }, o);
        if (roll >= 25 && roll < 27) b.cancel(id);
      }
      if (roll >= 20 && roll < 23)
        stop.request_stop();
      else if (roll >= 23 && roll < 25)
        late_cancels.push_back(std::move(stop));
      if (late_cancels.size() > 16) {
        late_cancels.front().request_stop();
        late_cancels.erase(late_cancels.begin());
      }
      if (submitted.fetch_add(1, std::memory_order_relaxed) + 1 == total / 2) b.close();
    }
    for (auto& s : late_cancels) s.request_stop();
    for (std::size_t i = 0; i < futures.size(); ++i) {
      const int request = future_requests[i];
      try {
        record(request, frugal::result<int>(futures[i].get()));
      } catch (...) {
        record(request, frugal::result<int>(std::current_exception()));
      }
    }
  };

  std::vector<std::thread> threads;
  threads.emplace_back(worker, 1u);
  threads.emplace_back(worker, 2u);
  std::vector<std::thread> producer_threads;
  for (int i = 0; i < producers; ++i) producer_threads.emplace_back(producer, i);
  for (auto& t : producer_threads) t.join();
  for (auto& t : threads) t.join();

  int counts[8] = {};
  int never = 0, twice = 0;
  for (int i = 0; i < total; ++i) {
    const int r = resolutions[static_cast<std::size_t>(i)].load();
    never += r == 0;
    twice += r > 1;
    ++counts[outcome_of[static_cast<std::size_t>(i)].load()];
  }
  CHECK(never == 0);
  CHECK(twice == 0);
  CHECK(counts[static_cast<int>(seen::other)] == 0);

  const auto s = b.stats();
  CHECK(s.submitted == static_cast<std::uint64_t>(total));
  CHECK(s.completed == static_cast<std::uint64_t>(counts[static_cast<int>(seen::value)]));
  CHECK(s.failed.deadline_exceeded == static_cast<std::uint64_t>(counts[static_cast<int>(seen::deadline)]));
  CHECK(s.failed.cancelled == static_cast<std::uint64_t>(counts[static_cast<int>(seen::cancelled)]));
  CHECK(s.failed.closed == static_cast<std::uint64_t>(counts[static_cast<int>(seen::closed)]));
  CHECK(s.failed.queue_full == static_cast<std::uint64_t>(counts[static_cast<int>(seen::queue_full)]));
  CHECK(s.failed.model_error == static_cast<std::uint64_t>(counts[static_cast<int>(seen::model)]));
  CHECK(s.failed.model_error == static_cast<std::uint64_t>(model_failures_expected.load()));
  CHECK(s.completed + s.failed.total() == s.submitted);
  CHECK(s.queue_depth == 0);
  CHECK(s.in_flight == 0);
  // The close came midway, so both sides of it happened.
  CHECK(s.completed > 0);
  CHECK(s.failed.closed > 0);
  std::uint64_t in_batches = 0;
  for (std::size_t n = 0; n < s.batch_sizes.size(); ++n) in_batches += n * s.batch_sizes[n];
  CHECK(in_batches == s.completed + s.failed.model_error);
  MESSAGE("stress: ", total, " requests, ", s.batches, " batches, completed ", s.completed, ", deadline ",
          s.failed.deadline_exceeded, ", cancelled ", s.failed.cancelled, ", closed ", s.failed.closed,
          ", queue_full ", s.failed.queue_full, ", model ", s.failed.model_error);
}

TEST_CASE("adaptive: learns and sheds while producers and workers run on real threads") {
  frugal::batcher<int, int, frugal::adaptive> b{
      {.max_batch = 16}, {}, frugal::adaptive{{.latency_target = 5ms}}};
  constexpr int per_producer = 5000;
  std::atomic<int> resolved{0}, wrong{0};
  auto producer = [&](int base) {
    for (int i = 0; i < per_producer; ++i) {
      const int request = base + i;
      b.submit(request,
               [&, request](frugal::result<int> o) {
                 if (o && *o != request + 1) ++wrong;
                 ++resolved;
               },
               // Half carry a tight deadline (shed when hopeless); half none, so that even a starved
               // worker on a loaded machine completes some batches and the fit has data.
               {.deadline = request % 2 ? std::chrono::steady_clock::now() + 2ms
                                        : std::chrono::steady_clock::time_point::max()});
    }
  };
  std::thread worker([&] {
    while (auto batch = b.next_batch()) {
      std::vector<int> out;
      for (int x : batch->requests()) out.push_back(x + 1);
      batch->fulfill(std::move(out));
    }
  });
  std::thread p1(producer, 0), p2(producer, per_producer);
  p1.join();
  p2.join();
  b.close();
  worker.join();
  CHECK(resolved == 2 * per_producer);
  CHECK(wrong == 0);
  CHECK(b.policy().fitted());
  const auto s = b.stats();
  CHECK(s.completed + s.failed.total() == s.submitted);
  CHECK(s.completed > 0);
}
