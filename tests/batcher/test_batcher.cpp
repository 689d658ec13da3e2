#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "frugal/batcher.hpp"
#include "frugal/cost.hpp"

using namespace std::chrono_literals;
using frugal::batch_errc;

namespace {

using manual_batcher = frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock>;

// What a percentile that falls on d reads: the middle of d's bucket in the cost ledger's histogram.
std::chrono::nanoseconds bucketed(std::chrono::nanoseconds d) {
  using h = frugal::cost::histogram_snapshot;
  const std::uint32_t i = h::bucket_of(static_cast<std::uint64_t>(d.count()));
  return std::chrono::nanoseconds(static_cast<std::int64_t>(h::bucket_lowest(i) + h::bucket_width(i) / 2));
}

// std::future or frugal::light_future: both read the same way.
template <class F>
bool ready(F& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

template <class F>
std::optional<batch_errc> error_of(F& f) {
  try {
    f.get();
  } catch (const frugal::batch_error& e) {
    return e.code();
  }
  return std::nullopt;
}

template <class Batch>
std::vector<int> requests_of(Batch& b) {
  return {b.requests().begin(), b.requests().end()};
}

template <class Batch>
void fulfill_doubled(Batch& b) {
  std::vector<int> out;
  for (int x : b.requests()) out.push_back(2 * x);
  b.fulfill(std::move(out));
}

std::string invalid_message(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("batcher: options that make no sense are rejected with the field named") {
  frugal::manual_clock clk;
  auto make = [&](frugal::batcher_options o) { return [&clk, o] { manual_batcher b{o, clk}; }; };
  CHECK(contains(invalid_message(make({.max_batch = 0})), "options.max_batch must be > 0"));
  CHECK(contains(invalid_message(make({.window = -1ms})), "options.window"));
  CHECK(contains(invalid_message(make({.allowed_sizes = {0, 4}})), "options.allowed_sizes"));
  CHECK(contains(invalid_message(make({.max_batch = 4, .allowed_sizes = {8, 16}})), "options.allowed_sizes"));
  CHECK(contains(invalid_message(make({.priority_levels = 0})), "options.priority_levels"));
  CHECK(contains(invalid_message(make({.max_batch_cost = 100, .max_queued_cost = 50})),
                 "options.max_queued_cost"));
  CHECK(contains(invalid_message(make({.block_timeout = -1ms})), "options.block_timeout"));
  CHECK(contains(invalid_message([] { (void)frugal::adaptive{{.latency_target = 0ms}}; }), "latency_target"));

  SUBCASE("at submit, a bad priority or a request heavier than a cost limit") {
    manual_batcher b{{.max_batch_cost = 10, .priority_levels = 2}, clk};
    CHECK(contains(invalid_message([&] { b.submit(1, {.priority = 2}); }), "options.priority (2)"));
    CHECK(contains(invalid_message([&] { b.submit(1, {.weight = 11}); }),
                   "exceeds options.max_batch_cost (10)"));
    CHECK(b.stats().submitted == 0);
    CHECK(b.queue_depth() == 0);
  }
  SUBCASE("set_options validates too, and priority_levels cannot change") {
    manual_batcher b{{}, clk};
    CHECK(contains(invalid_message([&] { b.set_options({.max_batch = 0}); }),
                   "set_options: options.max_batch"));
    CHECK(contains(invalid_message([&] { b.set_options({.priority_levels = 3}); }),
                   "priority_levels cannot change"));
  }
}

TEST_CASE(
    "batcher: the window starts at the oldest request's arrival, not at the end of the previous batch") {
  frugal::manual_clock clk;
  const auto t0 = clk.now();
  manual_batcher b{{.window = 5ms, .max_batch = 8}, clk};
  auto f1 = b.submit(1);
  clk.advance(3ms);
  auto f2 = b.submit(2);
  CHECK_FALSE(b.try_next_batch());
  CHECK(b.next_due() == t0 + 5ms);
  clk.advance(2ms);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(requests_of(*batch) == std::vector{1, 2});
  CHECK(batch->queue_wait() == 5ms);
  fulfill_doubled(*batch);
  CHECK(f1.get() == 2);
  CHECK(f2.get() == 4);

  clk.advance(4ms);
  auto f3 = b.submit(3);
  clk.advance(4ms);
  CHECK_FALSE(b.try_next_batch());
  clk.advance(1ms);
  auto next = b.try_next_batch();
  REQUIRE(next);
  CHECK(next->size() == 1);
  CHECK(next->queue_wait() == 5ms);
}

TEST_CASE("batcher: a batch is due at max_batch requests, holds no more, and the rest stays queued") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 1s, .max_batch = 3}, clk};
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 4; ++i) fs.push_back(b.submit(i));
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(requests_of(*batch) == std::vector{0, 1, 2});
  CHECK(batch->bucket() == 3);
  CHECK(b.queue_depth() == 1);
  CHECK_FALSE(b.try_next_batch());
  fulfill_doubled(*batch);
  clk.advance(1s);
  auto rest = b.try_next_batch();
  REQUIRE(rest);
  CHECK(requests_of(*rest) == std::vector{3});
}

TEST_CASE("batcher: with window 0 a worker gets whatever is queued") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
  CHECK_FALSE(b.try_next_batch());
  auto f1 = b.submit(1);
  auto f2 = b.submit(2);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(batch->size() == 2);
  CHECK(batch->queue_wait() == 0ns);
}

TEST_CASE("batcher: batches are sized by cost so one large request does not ride with the others") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 10ms, .max_batch = 32, .max_batch_cost = 100}, clk};
  auto small1 = b.submit(1, {.weight = 10});
  auto small2 = b.submit(2, {.weight = 10});
  CHECK_FALSE(b.try_next_batch());
  auto large = b.submit(3, {.weight = 90});
  auto small3 = b.submit(4, {.weight = 10});
  // 120 queued >= 100: due at once, cut before the large one would exceed the limit.
  auto first = b.try_next_batch();
  REQUIRE(first);
  CHECK(requests_of(*first) == std::vector{1, 2});
  CHECK(first->cost() == 20);
  auto second = b.try_next_batch();
  REQUIRE(second);
  CHECK(requests_of(*second) == std::vector{3, 4});
  CHECK(second->cost() == 100);
  CHECK(b.stats().queued_cost == 0);
}

TEST_CASE("batcher: batches are cut to the largest allowed size and tell the worker their bucket") {
  frugal::manual_clock clk;
  SUBCASE("13 queued with sizes {1,2,4,8,16,32} go as 8, 4 and 1") {
    manual_batcher b{{.window = 1ms, .max_batch = 32, .allowed_sizes = {32, 16, 8, 4, 2, 1}}, clk};
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 13; ++i) fs.push_back(b.submit(i));
    clk.advance(1ms);
    std::vector<std::size_t> sizes;
    while (auto batch = b.try_next_batch()) {
      CHECK(batch->bucket() == batch->size());
      sizes.push_back(batch->size());
      fulfill_doubled(*batch);
    }
    CHECK(sizes == std::vector<std::size_t>{8, 4, 1});
    for (int i = 0; i < 13; ++i) CHECK(fs[i].get() == 2 * i);
  }
  SUBCASE("fewer than the smallest allowed size go unpadded, in the smallest bucket") {
    manual_batcher b{{.window = 1ms, .max_batch = 16, .allowed_sizes = {4, 8}}, clk};
    auto f1 = b.submit(1);
    auto f2 = b.submit(2);
    clk.advance(1ms);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(batch->size() == 2);
    CHECK(batch->bucket() == 4);
  }
  SUBCASE("a batch is full at the largest allowed size <= max_batch") {
    manual_batcher b{{.window = 1s, .max_batch = 20, .allowed_sizes = {8, 16, 32}}, clk};
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 15; ++i) fs.push_back(b.submit(i));
    CHECK_FALSE(b.try_next_batch());
    fs.push_back(b.submit(15));
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(batch->size() == 16);
  }
}

TEST_CASE("batcher: higher priorities go first and each level is FIFO") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 1ms, .max_batch = 4, .priority_levels = 3}, clk};
  std::vector<std::future<int>> fs;
  fs.push_back(b.submit(10, {.priority = 0}));
  fs.push_back(b.submit(20, {.priority = 2}));
  fs.push_back(b.submit(11, {.priority = 0}));
  fs.push_back(b.submit(12, {.priority = 0}));
  fs.push_back(b.submit(15, {.priority = 1}));
  fs.push_back(b.submit(21, {.priority = 2}));
  auto first = b.try_next_batch();
  REQUIRE(first);
  CHECK(requests_of(*first) == std::vector{20, 21, 15, 10});
  clk.advance(1ms);
  auto second = b.try_next_batch();
  REQUIRE(second);
  CHECK(requests_of(*second) == std::vector{11, 12});
}

TEST_CASE("batcher: a request that misses its deadline fails with deadline_exceeded and is never run") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 10ms, .max_batch = 8}, clk};
  auto late = b.submit(1, {.deadline = clk.now() + 4ms});
  auto fine = b.submit(2, {.deadline = clk.now() + 50ms});
  auto none = b.submit(3);
  // The worker wakes for the expiring head, before the window.
  CHECK(b.next_due() == clk.now() + 4ms);
  clk.advance(4ms);
  CHECK_FALSE(b.try_next_batch());
  REQUIRE(ready(late));
  CHECK(error_of(late) == batch_errc::deadline_exceeded);
  clk.advance(6ms);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(requests_of(*batch) == std::vector{2, 3});

  SUBCASE("an expired request in the middle of the queue is dropped when its batch is cut") {
    auto a = b.submit(4);
    auto mid = b.submit(5, {.deadline = clk.now() + 1ms});
    auto c = b.submit(6);
    clk.advance(10ms);
    auto next = b.try_next_batch();
    REQUIRE(next);
    CHECK(requests_of(*next) == std::vector{4, 6});
    CHECK(error_of(mid) == batch_errc::deadline_exceeded);
  }
  SUBCASE("sweep fails every expired request at once") {
    auto a = b.submit(4);
    auto mid = b.submit(5, {.deadline = clk.now() + 1ms});
    clk.advance(1ms);
    CHECK(b.sweep() == 1);
    CHECK(ready(mid));
    CHECK(b.queue_depth() == 1);
  }
  SUBCASE("a deadline already past at submit fails at once") {
    auto past = b.submit(7, {.deadline = clk.now()});
    CHECK(error_of(past) == batch_errc::deadline_exceeded);
  }
  const auto s = b.stats();
  CHECK(s.failed.deadline_exceeded == 2);
  CHECK(s.completed + s.failed.total() + s.queue_depth + s.in_flight == s.submitted);
}

TEST_CASE("batcher: a cancelled request is never run and fails with cancelled") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 1ms, .max_batch = 8}, clk};
  SUBCASE("through a stop_token") {
    std::stop_source stop;
    auto a = b.submit(1);
    auto cancelled = b.submit(2, {.stop = stop.get_token()});
    auto c = b.submit(3);
    stop.request_stop();
    clk.advance(1ms);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(requests_of(*batch) == std::vector{1, 3});
    CHECK(error_of(cancelled) == batch_errc::cancelled);
    std::stop_source already;
    already.request_stop();
    auto never = b.submit(4, {.stop = already.get_token()});
    CHECK(error_of(never) == batch_errc::cancelled);
    CHECK(b.stats().failed.cancelled == 2);
  }
  SUBCASE("through its id, at once") {
    auto a = b.submit_ticket(1);
    auto t = b.submit_ticket(2);
    CHECK(b.cancel(t.id));
    CHECK(ready(t.result));
    CHECK(error_of(t.result) == batch_errc::cancelled);
    CHECK_FALSE(b.cancel(t.id));
    CHECK(b.queue_depth() == 1);
    clk.advance(1ms);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(requests_of(*batch) == std::vector{1});
    CHECK_FALSE(b.cancel(a.id));  // already handed out
    fulfill_doubled(*batch);
    CHECK(a.result.get() == 2);
  }
}

TEST_CASE("batcher: a full queue rejects at once with queue_full and enqueues nothing") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 1ms, .max_batch = 8, .max_queued = 2}, clk};
  auto a = b.submit(1);
  auto c = b.submit(2);
  auto rejected = b.submit(3);
  CHECK(error_of(rejected) == batch_errc::queue_full);
  CHECK(b.queue_depth() == 2);
  SUBCASE("by cost too") {
    b.set_options({.window = 1ms, .max_batch = 8, .max_queued_cost = 5});
    auto heavy = b.submit(4, {.weight = 4});
    CHECK(error_of(heavy) == batch_errc::queue_full);
    auto light = b.submit(5, {.weight = 3});
    CHECK_FALSE(ready(light));
    CHECK(b.stats().queued_cost == 5);
  }
  CHECK(b.stats().failed.queue_full >= 1);
}

TEST_CASE("batcher: with overflow::block a submit waits for room, or fails with timeout") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms,
                    .max_batch = 8,
                    .max_queued = 2,
                    .on_overflow = frugal::overflow::block,
                    .block_timeout = 5ms},
                   clk};
  auto a = b.submit(1);
  auto c = b.submit(2);
  std::future<int> blocked;
  std::thread producer([&] { blocked = b.submit(3); });
  while (b.stats().blocked_submits == 0) std::this_thread::yield();
  SUBCASE("room appears when a batch is cut") {
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    producer.join();
    CHECK(b.queue_depth() == 1);
    CHECK_FALSE(ready(blocked));
  }
  SUBCASE("the timeout passes") {
    clk.advance(5ms);
    b.wake();
    producer.join();
    CHECK(error_of(blocked) == batch_errc::timeout);
    CHECK(b.stats().failed.timeout == 1);
  }
  SUBCASE("close wakes it with closed") {
    b.close();
    producer.join();
    CHECK(error_of(blocked) == batch_errc::closed);
  }
}

TEST_CASE("batcher: fulfill checks the result count and fails the whole batch on a mismatch") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
  auto f1 = b.submit(1);
  auto f2 = b.submit(2);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK_THROWS_AS(batch->fulfill({7}), frugal::batch_error);
  CHECK(error_of(f1) == batch_errc::result_count_mismatch);
  CHECK(error_of(f2) == batch_errc::result_count_mismatch);
  CHECK(b.stats().failed.result_count_mismatch == 2);
  CHECK_THROWS_AS(batch->fulfill({1, 2}), std::logic_error);
}

TEST_CASE("batcher: fail fails every request, fail(i) just one, and a dropped batch is abandoned") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
  SUBCASE("fail") {
    auto f1 = b.submit(1);
    auto f2 = b.submit(2);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    batch->fail(std::make_exception_ptr(std::runtime_error("model exploded")));
    CHECK_THROWS_WITH_AS(f1.get(), "model exploded", std::runtime_error);
    CHECK_THROWS_WITH_AS(f2.get(), "model exploded", std::runtime_error);
    CHECK(b.stats().failed.model_error == 2);
  }
  SUBCASE("fail(i) then fulfill the rest") {
    auto f1 = b.submit(1);
    auto f2 = b.submit(2);
    auto f3 = b.submit(3);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    batch->fail(1, std::make_exception_ptr(std::out_of_range("bad input")));
    CHECK(ready(f2));
    CHECK(batch->pending() == 2);
    batch->fulfill({10, -1, 30});
    CHECK(f1.get() == 10);
    CHECK_THROWS_AS(f2.get(), std::out_of_range);
    CHECK(f3.get() == 30);
    CHECK_THROWS_AS(batch->fail(7, nullptr), std::logic_error);
    const auto s = b.stats();
    CHECK(s.completed == 2);
    CHECK(s.failed.model_error == 1);
  }
  SUBCASE("item by item") {
    auto f1 = b.submit(1);
    auto f2 = b.submit(2);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    batch->fulfill(1, 20);
    CHECK(f2.get() == 20);
    CHECK_THROWS_AS(batch->fulfill(5, 1), std::out_of_range);
    CHECK_THROWS_AS(batch->fulfill(1, 1), std::logic_error);
    batch->fulfill(0, 10);
    CHECK(f1.get() == 10);
    CHECK(b.stats().in_flight == 0);
  }
  SUBCASE("abandoned") {
    auto f1 = b.submit(1);
    { auto batch = b.try_next_batch(); }
    CHECK(error_of(f1) == batch_errc::abandoned);
    CHECK(b.stats().failed.abandoned == 1);
  }
}

TEST_CASE("batcher: close stops submits, lets workers drain, or fails what is queued") {
  frugal::manual_clock clk;
  SUBCASE("drain::yes makes everything due at once, then next_batch ends") {
    manual_batcher b{{.window = 1h, .max_batch = 2}, clk};
    std::vector<std::future<int>> fs;
    for (int i = 0; i < 3; ++i) fs.push_back(b.submit(i));
    auto first = b.try_next_batch();
    REQUIRE(first);
    b.close();
    CHECK(b.closed());
    auto after = b.submit(9);
    CHECK(error_of(after) == batch_errc::closed);
    auto last = b.next_batch();
    REQUIRE(last);
    CHECK(requests_of(*last) == std::vector{2});
    CHECK_FALSE(b.next_batch());
    fulfill_doubled(*first);
    fulfill_doubled(*last);
    for (int i = 0; i < 3; ++i) CHECK(fs[i].get() == 2 * i);
  }
  SUBCASE("drain::no fails the queue with closed, while batches already out still complete") {
    manual_batcher b{{.window = 1h, .max_batch = 1}, clk};
    auto out = b.submit(1);
    auto queued = b.submit(2);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    b.close(frugal::drain::no);
    CHECK(error_of(queued) == batch_errc::closed);
    fulfill_doubled(*batch);
    CHECK(out.get() == 2);
  }
  SUBCASE("the destructor closes, and a batch may outlive its batcher") {
    std::future<int> queued, out;
    std::optional<manual_batcher::batch> batch;
    {
      manual_batcher b{{.window = 1h, .max_batch = 1}, clk};
      out = b.submit(1);
      queued = b.submit(2);
      batch = b.try_next_batch();
    }
    CHECK(error_of(queued) == batch_errc::closed);
    REQUIRE(batch);
    fulfill_doubled(*batch);
    CHECK(out.get() == 2);
  }
  SUBCASE("a worker blocked in next_batch returns when the batcher closes") {
    manual_batcher b{{.window = 1h}, clk};
    std::thread worker([&] { CHECK_FALSE(b.next_batch()); });
    while (b.stats().waiting_workers == 0) std::this_thread::yield();
    b.close();
    worker.join();
  }
}

TEST_CASE("batcher: next_batch blocks until a batch is due, and returns empty when its stop_token stops") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 5ms, .max_batch = 8}, clk};
  std::promise<std::size_t> got;
  std::thread worker([&] {
    auto batch = b.next_batch();
    got.set_value(batch ? batch->size() : 0);
    if (batch) fulfill_doubled(*batch);
  });
  auto f = b.submit(21);
  while (b.stats().waiting_workers == 0) std::this_thread::yield();
  clk.advance(5ms);
  b.wake();
  CHECK(got.get_future().get() == 1);
  CHECK(f.get() == 42);
  worker.join();

  std::stop_source stop;
  std::thread idle([&] { CHECK_FALSE(b.next_batch(stop.get_token())); });
  while (b.stats().waiting_workers == 0) std::this_thread::yield();
  stop.request_stop();
  idle.join();
}

TEST_CASE("batcher: several workers share one batcher and each batch goes to exactly one of them") {
  frugal::batcher<int, int> b{{.window = 0ms, .max_batch = 8}};
  constexpr int n = 2000;
  std::atomic<int> handled{0};
  std::mutex ids_mutex;
  std::set<std::uint64_t> ids;
  auto work = [&] {
    while (auto batch = b.next_batch()) {
      {
        std::lock_guard g(ids_mutex);
        CHECK(ids.insert(batch->id()).second);
      }
      handled += static_cast<int>(batch->size());
      fulfill_doubled(*batch);
    }
  };
  std::thread w1(work), w2(work), w3(work);
  std::vector<std::future<int>> fs;
  for (int i = 0; i < n; ++i) fs.push_back(b.submit(i));
  for (int i = 0; i < n; ++i) CHECK(fs[i].get() == 2 * i);
  b.close();
  w1.join();
  w2.join();
  w3.join();
  CHECK(handled == n);
  CHECK(b.stats().batches == ids.size());
}

TEST_CASE("batcher: window, max_batch and queue limits change at run time for the next batch") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 10ms, .max_batch = 8}, clk};
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 3; ++i) fs.push_back(b.submit(i));
  clk.advance(2ms);
  CHECK_FALSE(b.try_next_batch());
  b.set_options({.window = 2ms, .max_batch = 2, .max_queued = 1});
  CHECK(b.options().max_batch == 2);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(batch->size() == 2);
  CHECK(batch->max_batch() == 2);
  const frugal::batch_info info = batch->info();
  CHECK(info.size == 2);
  CHECK(info.bucket == 2);
  CHECK(info.cost == 2);
  CHECK(info.max_batch == 2);
  CHECK(info.queue_wait == 2ms);
  CHECK(info.id == 1);
  CHECK(error_of(fs.emplace_back(b.submit(3))) == batch_errc::queue_full);
}

TEST_CASE("batcher: stats count every request by outcome and summarise batches and latencies") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 2ms, .max_batch = 4}, clk};
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 3; ++i) fs.push_back(b.submit(i));
  clk.advance(2ms);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  fs.push_back(b.submit(3));
  auto s = b.stats();
  CHECK(s.in_flight == 3);
  CHECK(s.in_flight_batches == 1);
  CHECK(s.queue_depth == 1);
  clk.advance(1ms);
  fulfill_doubled(*batch);
  b.close(frugal::drain::no);
  s = b.stats();
  CHECK(s.submitted == 4);
  CHECK(s.completed == 3);
  CHECK(s.failed.closed == 1);
  CHECK(s.failed.total() == 1);
  CHECK(s.completed + s.failed.total() + s.queue_depth + s.in_flight == s.submitted);
  CHECK(s.batches == 1);
  REQUIRE(s.batch_sizes.size() == 4);
  CHECK(s.batch_sizes[3] == 1);
  CHECK(s.mean_batch_size == doctest::Approx(3));
  CHECK(s.mean_fill_ratio == doctest::Approx(0.75));
  CHECK(s.queue_wait.count == 3);
  CHECK(s.queue_wait.p50 == bucketed(2ms));
  CHECK(s.queue_wait.p99 == bucketed(2ms));
  CHECK(s.end_to_end.p90 == bucketed(3ms));
  CHECK(s.end_to_end.max == 3ms);
  CHECK(s.mean_batch_run_time == 1ms);
}

TEST_CASE("batcher: latency percentiles equal the cost ledger's for the same latencies, within 1/2048") {
  constexpr std::size_t n = 300;
  std::vector<std::chrono::nanoseconds> latencies;  // ascending, from exact buckets (< 2048 ns) to 190 ms
  for (std::int64_t i = 1; i <= static_cast<std::int64_t>(n); ++i)
    latencies.emplace_back(7 * i * i * i + 13 * i);

  frugal::manual_clock clk;
  manual_batcher b{{.window = 1h, .max_batch = n}, clk};
  for (std::size_t i = 0; i < n; ++i) b.submit(static_cast<int>(i), [](frugal::result<int>) {});
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  REQUIRE(batch->size() == n);
  std::chrono::nanoseconds elapsed{0};
  for (std::size_t i = 0; i < n; ++i) {
    clk.advance(latencies[i] - elapsed);
    elapsed = latencies[i];
    batch->fulfill(i, 0);
  }

  namespace fc = frugal::cost;
  frugal::manual_clock ledger_clock;
  fc::ledger<frugal::manual_clock> ledger(
      {.prices = {{.gpu_class = "L4", .on_demand = fc::rate::per_hour(fc::money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}}},
      ledger_clock);
  const fc::feature_id feature = ledger.feature("batched");
  for (const auto latency : latencies) ledger.record_request(feature, latency);

  const frugal::latency_summary mine = b.stats().end_to_end;
  const fc::latency_percentiles theirs = ledger.snapshot().features.at(0).latency;
  CHECK(mine.count == n);
  CHECK(mine.p50 == theirs.p50);
  CHECK(mine.p90 == theirs.p90);
  CHECK(mine.p99 == theirs.p99);
  CHECK(mine.max == latencies.back());
  // Within the histogram's resolution of the exact nearest-rank percentile.
  auto near_exact = [&latencies](std::chrono::nanoseconds got, double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(latencies.size())));
    const auto exact = static_cast<double>(latencies[rank - 1].count());
    return std::abs(static_cast<double>(got.count()) - exact) <= exact / 2048;
  };
  CHECK(near_exact(mine.p50, 0.50));
  CHECK(near_exact(mine.p90, 0.90));
  CHECK(near_exact(mine.p99, 0.99));
}

TEST_CASE("batcher: the callback form delivers results and errors to the callback") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 4, .max_queued = 1}, clk};
  std::vector<std::string> log;
  b.submit(5, [&](frugal::result<int> o) { log.push_back(o ? std::to_string(*o) : "error"); });
  b.submit(6, [&](frugal::result<int> o) { log.push_back(frugal::to_string(*o.code())); });
  CHECK(log == std::vector<std::string>{"queue_full"});
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  fulfill_doubled(*batch);
  CHECK(log == std::vector<std::string>{"queue_full", "10"});
}

TEST_CASE("adaptive: learns batch time a*n + b from the durations it measures on the clock") {
  frugal::manual_clock clk;
  frugal::batcher<int, int, frugal::adaptive, frugal::manual_clock> b{
      {.max_batch = 4}, clk, frugal::adaptive{{.latency_target = 100ms}}};
  CHECK_FALSE(b.policy().fitted());
  auto f = b.submit(1);
  auto one = b.try_next_batch();  // greedy until it has seen a batch
  REQUIRE(one);
  clk.advance(7ms);
  fulfill_doubled(*one);
  CHECK(b.policy().fitted());
  CHECK(b.policy().intercept_ns() == doctest::Approx(7e6));

  std::vector<std::future<int>> fs;
  for (int i = 0; i < 4; ++i) fs.push_back(b.submit(i));
  auto four = b.try_next_batch();
  REQUIRE(four);
  CHECK(four->size() == 4);
  clk.advance(10ms);
  fulfill_doubled(*four);
  CHECK(b.policy().slope_ns() == doctest::Approx(1e6));
  CHECK(b.policy().intercept_ns() == doctest::Approx(6e6));

  SUBCASE("a duration the worker reports replaces the measured one") {
    for (int i = 0; i < 4; ++i) fs.push_back(b.submit(i));
    auto again = b.try_next_batch();
    REQUIRE(again);
    again->report_duration(10ms);
    clk.advance(50ms);
    fulfill_doubled(*again);
    CHECK(b.policy().slope_ns() == doctest::Approx(1e6));
    CHECK(b.policy().intercept_ns() == doctest::Approx(6e6));
  }
}

TEST_CASE(
    "adaptive: dispatches at once under light load and waits for a batch that keeps up under heavy load") {
  frugal::adaptive p{{.latency_target = 100ms}};
  for (int i = 0; i < 50; ++i) {
    const std::size_t n = 1 + static_cast<std::size_t>(i % 8);
    p.on_batch_done({n, n, std::chrono::nanoseconds(100'000 * static_cast<std::int64_t>(n) + 5'000'000)});
  }
  CHECK(p.slope_ns() == doctest::Approx(1e5));
  CHECK(p.intercept_ns() == doctest::Approx(5e6));
  auto feed = [&](double rate_per_s) {
    frugal::policy_view v{.queued = 1, .max_batch = 64};
    double arrivals = 0;
    for (int ms = 0; ms <= 2000; ++ms) {
      v.now = std::chrono::milliseconds(ms);
      v.arrivals = static_cast<std::uint64_t>(arrivals);
      (void)p.wait_for(v);
      arrivals += rate_per_s / 1000;
    }
    return v;
  };
  SUBCASE("light load: one request already keeps up") {
    auto v = feed(100);
    CHECK(p.arrival_rate() == doctest::Approx(100).epsilon(0.05));
    CHECK(p.wait_for(v) == 0ns);
  }
  SUBCASE("medium load: waits for the break-even size, but not past the latency target") {
    auto v = feed(2000);
    CHECK(p.arrival_rate() == doctest::Approx(2000).epsilon(0.05));
    v.queued = 4;
    const auto w = p.wait_for(v);
    CHECK(w > 50ms);
    CHECK(w < 70ms);
    v.queued = 16;  // 2000/s * 5 ms / (1 - 0.2) * 1.25 = 15.6
    CHECK(p.wait_for(v) == 0ns);
    v.queued = 4;
    v.oldest_wait = 69ms;
    CHECK(p.wait_for(v) == 0ns);
  }
  SUBCASE("saturating load: waits for a full batch") {
    auto v = feed(20000);
    v.queued = 63;
    CHECK(p.wait_for(v) > 0ns);
    v.queued = 64;
    CHECK(p.wait_for(v) == 0ns);
  }
}

namespace {
// A user-written policy: a batch goes once three requests are queued, whatever the window.
struct three_at_a_time {
  std::vector<frugal::batch_report>* reports;
  std::chrono::nanoseconds wait_for(const frugal::policy_view& v) const {
    return v.queued >= 3 ? 0ns : std::chrono::nanoseconds(1h);
  }
  void on_batch_done(const frugal::batch_report& r) { reports->push_back(r); }
};
}  // namespace

TEST_CASE("batcher: a user-written policy decides when a partial batch goes and hears how batches ran") {
  static_assert(frugal::learning_policy<three_at_a_time>);
  std::vector<frugal::batch_report> reports;
  frugal::manual_clock clk;
  frugal::batcher<int, int, three_at_a_time, frugal::manual_clock> b{
      {.window = 0ms, .max_batch = 8}, clk, three_at_a_time{&reports}};
  auto f1 = b.submit(1);
  auto f2 = b.submit(2);
  clk.advance(1min);
  CHECK_FALSE(b.try_next_batch());
  auto f3 = b.submit(3, {.weight = 5});
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  clk.advance(3ms);
  fulfill_doubled(*batch);
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].size == 3);
  CHECK(reports[0].cost == 7);
  CHECK(reports[0].run_time == 3ms);
}

TEST_CASE("adaptive: a request that could no longer finish by its deadline fails with deadline_exceeded") {
  frugal::manual_clock clk;
  frugal::batcher<int, int, frugal::adaptive, frugal::manual_clock> b{
      {.max_batch = 2}, clk, frugal::adaptive{{.latency_target = 100ms}}};
  auto warmup = b.submit(0);
  auto first = b.try_next_batch();
  REQUIRE(first);
  clk.advance(10ms);
  fulfill_doubled(*first);
  CHECK(b.policy().expected_run_time(2) == 10ms);

  auto hopeless = b.submit(1, {.deadline = clk.now() + 5ms});
  auto fine = b.submit(2, {.deadline = clk.now() + 50ms});
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(requests_of(*batch) == std::vector{2});
  CHECK(error_of(hopeless) == batch_errc::deadline_exceeded);

  SUBCASE("and is kept when shedding is off") {
    frugal::batcher<int, int, frugal::adaptive, frugal::manual_clock> keep{
        {.max_batch = 2}, clk, frugal::adaptive{{.latency_target = 100ms, .shed_hopeless = false}}};
    auto w = keep.submit(0);
    auto one = keep.try_next_batch();
    REQUIRE(one);
    clk.advance(10ms);
    fulfill_doubled(*one);
    auto late = keep.submit(1, {.deadline = clk.now() + 5ms});
    auto other = keep.submit(2);
    auto both = keep.try_next_batch();
    REQUIRE(both);
    CHECK(both->size() == 2);
  }
}

TEST_CASE("batcher: submit_light's future delivers results and errors like std::future") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 4, .max_queued = 2}, clk};
  auto a = b.submit_light(1);
  auto c = b.submit_light(2);
  auto rejected = b.submit_light(3);
  CHECK(rejected.ready());
  CHECK_THROWS_AS(rejected.get(), frugal::batch_error);
  CHECK_FALSE(rejected.valid());
  CHECK_FALSE(a.ready());
  CHECK_THROWS_AS(b.submit_light(4, {.priority = 9}), std::invalid_argument);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  std::thread waiter([&] { CHECK(c.get() == 4); });
  fulfill_doubled(*batch);
  waiter.join();
  CHECK(a.get() == 2);
  auto failing = b.submit_light(5);
  auto again = b.try_next_batch();
  REQUIRE(again);
  again->fail(std::make_exception_ptr(std::runtime_error("model")));
  CHECK_THROWS_WITH_AS(failing.get(), "model", std::runtime_error);
  { auto dropped = b.submit_light(6); }  // destroyed before it resolves: no leak, no crash
  b.close(frugal::drain::no);
}

// Issue 25: submit returns a light_future, which must stand in for std::future wherever code used one.
TEST_CASE("batcher: submit's light_future reads like std::future and converts to one") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
  SUBCASE("wait_for and wait_until time out, then see the result; a sleeping reader is woken") {
    auto f = b.submit(1);
    CHECK(f.wait_for(0s) == std::future_status::timeout);
    CHECK(f.wait_for(2ms) == std::future_status::timeout);
    CHECK(f.wait_until(std::chrono::system_clock::now() + 1ms) == std::future_status::timeout);
    std::atomic<bool> woke{false};
    std::thread reader([&] {
      CHECK(f.wait_for(60s) == std::future_status::ready);
      woke = true;
    });
    std::this_thread::sleep_for(20ms);  // let the reader sleep on the futex first (not needed to pass)
    CHECK_FALSE(woke.load());
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    fulfill_doubled(*batch);
    reader.join();
    CHECK(woke.load());
    CHECK(f.ready());
    CHECK(f.wait_until(std::chrono::steady_clock::now() - 1s) == std::future_status::ready);
    CHECK(f.get() == 2);
    CHECK_FALSE(f.valid());
    CHECK_THROWS_AS(f.wait_for(0s), std::logic_error);
  }
  SUBCASE("converted before and after the result, for values and errors") {
    std::future<int> early = b.submit(3);  // the implicit conversion: code written for std::future
    auto late = b.submit(4);
    auto shared = b.submit(5).share();
    std::future<int> failing_early = b.submit(6);
    auto failing_late = b.submit(7);
    CHECK(early.wait_for(0s) == std::future_status::timeout);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(batch->size() == 5);
    const std::vector<int> reqs = requests_of(*batch);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] >= 6)
        batch->fail(i, std::make_exception_ptr(std::runtime_error("model " + std::to_string(i))));
      else
        batch->fulfill(i, reqs[i] * 10);
    }
    std::future<int> late_std = std::move(late);
    CHECK_FALSE(late.valid());
    CHECK(early.get() == 30);
    CHECK(late_std.get() == 40);
    CHECK(shared.get() == 50);
    CHECK(shared.get() == 50);
    CHECK_THROWS_WITH_AS(failing_early.get(), "model 3", std::runtime_error);
    std::future<int> failing_late_std = std::move(failing_late);
    CHECK_THROWS_WITH_AS(failing_late_std.get(), "model 4", std::runtime_error);
  }
  SUBCASE("a rejected submit is ready at once, converted or not") {
    b.close(frugal::drain::no);
    std::future<int> closed = b.submit(1);
    CHECK(closed.wait_for(0s) == std::future_status::ready);
    CHECK(error_of(closed) == batch_errc::closed);
    auto light = b.submit(2);
    CHECK(error_of(light) == batch_errc::closed);
  }
  b.close(frugal::drain::no);
}

// The conversion races the worker's result: whichever comes second fulfils the std::promise (TSan).
TEST_CASE("batcher: converting to std::future while the result arrives loses nothing") {
  frugal::batcher<int, int> b{{.window = 0ms, .max_batch = 16}};
  std::thread worker([&] {
    while (auto batch = b.next_batch()) {
      std::vector<int> out;
      for (int r : batch->requests()) out.push_back(r + 1);
      batch->fulfill(std::move(out));
    }
  });
  constexpr int n = 4000;
  std::vector<std::future<int>> fs;
  fs.reserve(n);
  std::vector<frugal::light_future<int>> timed;
  for (int i = 0; i < n; ++i) {
    if (i % 4 == 3)
      timed.push_back(b.submit(i));
    else
      fs.push_back(b.submit(i));  // converted at once, mostly before the worker answers
  }
  long long sum = 0, want = 0;
  for (auto& f : fs) sum += f.get();
  for (auto& f : timed) {
    CHECK(f.wait_for(10s) == std::future_status::ready);
    sum += f.get();
  }
  for (int i = 0; i < n; ++i) want += i + 1;
  CHECK(sum == want);
  b.close();
  worker.join();
}

TEST_CASE("batcher: cancel by id finds a request at any priority level") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 1ms, .max_batch = 8, .priority_levels = 3}, clk};
  std::vector<frugal::ticket<int>> ts;
  for (int i = 0; i < 9; ++i) ts.push_back(b.submit_ticket(i, {.priority = static_cast<std::size_t>(i % 3)}));
  CHECK(b.cancel(ts[4].id));
  CHECK(b.cancel(ts[8].id));
  CHECK(b.cancel(ts[0].id));
  CHECK_FALSE(b.cancel(12345));
  CHECK(b.queue_depth() == 6);
  clk.advance(1ms);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(requests_of(*batch) == std::vector{2, 5, 1, 7, 3, 6});
}

// Issue 19, class 1: the queued-cost and run-time sums neither wrap nor overflow a signed type.
TEST_CASE("batcher: the queued-cost and run-time sums never wrap, and learned times saturate") {
  constexpr std::uint64_t umax = std::numeric_limits<std::uint64_t>::max();
  frugal::manual_clock clk;
  SUBCASE("a weight that would wrap the queued cost has no room, even without max_queued_cost") {
    manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
    auto big = b.submit(1, {.weight = umax - 5});
    auto fits = b.submit(2, {.weight = 5});
    auto wraps = b.submit(3, {.weight = 1});  // umax + 1 would be 0: queued_cost went down
    CHECK(ready(wraps));
    CHECK(error_of(wraps) == batch_errc::queue_full);
    CHECK(b.stats().queued_cost == umax);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    CHECK(requests_of(*batch) == std::vector{1, 2});
    CHECK(batch->cost() == umax);
    fulfill_doubled(*batch);
    CHECK(big.get() == 2);
    CHECK(fits.get() == 4);
    CHECK(b.stats().queued_cost == 0);
    auto later = b.submit(4, {.weight = umax});  // room again once the queue is empty
    CHECK_FALSE(ready(later));
    CHECK(b.stats().queued_cost == umax);
  }
  SUBCASE("a request over max_batch_cost (options lowered) goes alone; huge weights stay exact") {
    manual_batcher b{{.window = 0ms, .max_batch = 8}, clk};
    auto a = b.submit(1, {.weight = umax / 2 + 1});
    auto c = b.submit(2, {.weight = umax / 2 - 1});
    auto o = b.options();
    o.max_batch_cost = 10;  // the first now exceeds it: it goes alone
    b.set_options(o);
    auto first = b.try_next_batch();
    REQUIRE(first);
    CHECK(requests_of(*first) == std::vector{1});
    fulfill_doubled(*first);
    auto second = b.try_next_batch();
    REQUIRE(second);
    CHECK(requests_of(*second) == std::vector{2});
    fulfill_doubled(*second);
  }
  SUBCASE("run-time sums saturate instead of overflowing int64 (UB), and stay positive") {
    manual_batcher b{{.window = 0ms, .max_batch = 1}, clk};
    for (auto d : {std::chrono::nanoseconds::max(), std::chrono::nanoseconds(1'000'000)}) {
      auto f = b.submit(1);
      auto batch = b.try_next_batch();
      REQUIRE(batch);
      batch->report_duration(d);
      fulfill_doubled(*batch);
    }
    CHECK(b.stats().mean_batch_run_time == std::chrono::nanoseconds::max() / 2);
  }
  SUBCASE("adaptive: a learned a*n + b beyond int64 saturates rather than casting out of range (UB)") {
    frugal::adaptive p{{.latency_target = 100ms}};
    p.on_batch_done({1, 0, std::chrono::nanoseconds::max()});
    p.on_batch_done({2, 0, std::chrono::nanoseconds::max()});
    CHECK(p.expected_run_time(std::size_t{1} << 40) == std::chrono::nanoseconds::max());
    CHECK(p.expected_run_time(1) > std::chrono::nanoseconds::zero());
  }
}

TEST_CASE("batcher: a moved-from batch has no requests and refuses to be resolved") {
  frugal::manual_clock clk;
  manual_batcher b{{.window = 0ms, .max_batch = 4}, clk};
  auto f = b.submit(5);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  auto taken = std::move(*batch);
  CHECK(batch->size() == 0);  // dereferenced null before
  CHECK(batch->requests().empty());
  CHECK(std::as_const(*batch).requests().empty());
  CHECK(batch->pending() == 0);
  CHECK(batch->info().size == 0);
  CHECK_THROWS_WITH_AS(batch->fulfill({10}), doctest::Contains("moved-from batch"), std::logic_error);
  CHECK(taken.size() == 1);
  fulfill_doubled(taken);
  CHECK(f.get() == 10);
}

TEST_CASE("batcher: destroying it while a worker waits in next_batch and a producer waits for room is safe") {
  // Before, the destructor freed the queue under the waiting threads (a use-after-free under ASan).
  auto b = std::make_unique<frugal::batcher<int, int>>(
      frugal::batcher_options{.window = 1h,
                              .max_batch = 8,
                              .max_queued = 1,
                              .on_overflow = frugal::overflow::block,
                              .block_timeout = 1h});
  auto queued = b->submit(1);
  std::atomic<int> worker_got = -1;
  std::thread worker([&] {
    auto batch = b->next_batch();
    worker_got = batch ? static_cast<int>(batch->size()) : 0;
  });
  std::future<int> blocked;
  std::thread producer([&] { blocked = b->submit(2); });
  for (;;) {
    const auto st = b->stats();
    if (st.waiting_workers == 1 && st.blocked_submits == 1) break;
    std::this_thread::yield();
  }
  b.reset();  // closes with drain::no and waits for both threads to leave
  worker.join();
  producer.join();
  CHECK(worker_got == 0);
  CHECK(error_of(queued) == batch_errc::closed);
  CHECK(error_of(blocked) == batch_errc::closed);
}
