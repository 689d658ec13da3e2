// The batch policies and the batch's own time keeping at the ends of the time range: maximal windows and
// latency targets, reported durations of either sign and any size, and clocks that jump to either end.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <future>
#include <limits>
#include <vector>

#include "frugal/batcher.hpp"
#include "frugal/detail/saturating.hpp"

using namespace std::chrono_literals;

namespace {

using ns = std::chrono::nanoseconds;
constexpr ns ns_max = ns::max();
constexpr ns ns_min = ns::min();

void check_sane(const frugal::adaptive& p) {
  CHECK(std::isfinite(p.arrival_rate()));
  CHECK(p.arrival_rate() >= 0);
  CHECK(std::isfinite(p.slope_ns()));
  CHECK(p.slope_ns() >= 0);
  CHECK(std::isfinite(p.intercept_ns()));
  CHECK(p.intercept_ns() >= 0);
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{64}, std::numeric_limits<std::size_t>::max()})
    CHECK(p.expected_run_time(n) >= 0ns);
}

}  // namespace

TEST_CASE("saturating: durations and time points stop at the ends of their range instead of overflowing") {
  using frugal::detail::saturating_add;
  using frugal::detail::saturating_cast;
  using frugal::detail::saturating_sub;
  CHECK(saturating_add(ns_max, 1ns) == ns_max);
  CHECK(saturating_add(ns_min, -1ns) == ns_min);
  CHECK(saturating_add(ns_max, ns_min) == -1ns);
  CHECK(saturating_sub(ns_max, -1ns) == ns_max);
  CHECK(saturating_sub(ns_min, 1ns) == ns_min);
  CHECK(saturating_sub(0ns, ns_min) == ns_max);
  CHECK(saturating_sub(5ns, 7ns) == -2ns);
  CHECK(saturating_cast<ns>(std::chrono::seconds::max()) == ns_max);
  CHECK(saturating_cast<ns>(std::chrono::seconds::min()) == ns_min);
  CHECK(saturating_cast<ns>(std::chrono::seconds(3)) == 3s);
  CHECK(saturating_cast<std::chrono::seconds>(ns_max) ==
        std::chrono::seconds(ns_max.count() / 1'000'000'000));
  CHECK(saturating_cast<ns>(std::chrono::duration<double>(std::nan(""))) == 0ns);
  CHECK(saturating_cast<ns>(std::chrono::duration<double>(1e300)) == ns_max);
  CHECK(saturating_cast<ns>(std::chrono::duration<double>(-1e300)) == ns_min);
  using tp = std::chrono::steady_clock::time_point;
  CHECK(saturating_add(tp::max(), 1ns) == tp::max());
  CHECK(saturating_add(tp::min(), ns_min) == tp::min());
  CHECK(saturating_add(tp::min(), ns_max) == tp(tp::duration(-1)));
  CHECK(saturating_add(tp::max(), std::chrono::hours::max()) == tp::max());
  CHECK(saturating_sub(tp::max(), tp::min()) == tp::duration::max());
  CHECK(saturating_sub(tp::min(), tp::max()) == tp::duration::min());
  CHECK(frugal::detail::elapsed_ns(tp::max(), tp::min()) == ns_min);
}

TEST_CASE(
    "policy: fixed_window with a maximal window and a clock that moves backwards saturates instead of "
    "overflowing") {
  const frugal::fixed_window p;
  // The oldest request arrived "after" now: the clock stepped back, so its wait is negative.
  CHECK(p.wait_for({.oldest_wait = -1ns, .window = ns_max}) == ns_max);
  CHECK(p.wait_for({.oldest_wait = ns_min, .window = ns_max}) == ns_max);
  CHECK(p.wait_for({.oldest_wait = ns_min, .window = 0ns}) == ns_max);
  CHECK(p.wait_for({.oldest_wait = ns_max, .window = ns_min}) == ns_min);
  CHECK(p.wait_for({.oldest_wait = ns_max, .window = ns_max}) == 0ns);
  CHECK(p.wait_for({.oldest_wait = 3ms, .window = 5ms}) == 2ms);
  CHECK(p.wait_for({.oldest_wait = 7ms, .window = 5ms}) == -2ms);
}

TEST_CASE("policy: adaptive with a maximal latency target derives its rate horizon without overflowing") {
  frugal::adaptive p{{.latency_target = ns_max}};
  frugal::policy_view v{.queued = 1, .max_batch = 8};
  for (int i = 0; i <= 4; ++i) {
    v.now = std::chrono::seconds(i);
    v.arrivals = static_cast<std::uint64_t>(i) * 1000;
    CHECK(p.wait_for(v) == 0ns);  // not fitted yet: greedy
  }
  check_sane(p);
  CHECK(p.arrival_rate() > 0);
}

TEST_CASE("policy: adaptive's arrival rate survives a clock that jumps to either end of its range") {
  frugal::adaptive p{{.latency_target = 100ms}};
  frugal::policy_view v{.queued = 1, .max_batch = 8};
  for (ns t : {ns_min, ns_max, ns_min, 0ns, ns_max, -1ns}) {
    v.now = t;
    v.arrivals += 10;
    (void)p.wait_for(v);
    check_sane(p);
  }
  // After the clock came back from the far end, arrivals at 1000/s are measured as such again: a clock that
  // stepped back restarts the measurement instead of freezing it until the clock passes the old time.
  v.now = ns_max;
  (void)p.wait_for(v);
  double arrivals = 0;
  for (int ms = 0; ms <= 2000; ++ms) {
    v.now = std::chrono::milliseconds(ms);
    v.arrivals = static_cast<std::uint64_t>(arrivals);
    (void)p.wait_for(v);
    arrivals += 1;
  }
  CHECK(p.arrival_rate() == doctest::Approx(1000).epsilon(0.05));
}

TEST_CASE("policy: adaptive ignores a request count that goes down instead of reading it as 2^64 arrivals") {
  frugal::adaptive p{{.latency_target = 100ms}};
  frugal::policy_view v{.now = 1s, .queued = 1, .max_batch = 8, .arrivals = 1000};
  (void)p.wait_for(v);
  v.now = 2s;
  v.arrivals = 0;
  (void)p.wait_for(v);
  check_sane(p);
  CHECK(p.arrival_rate() < 1);
  v.now = 3s;
  v.arrivals = std::numeric_limits<std::uint64_t>::max();
  (void)p.wait_for(v);
  check_sane(p);
}

TEST_CASE("policy: adaptive learns no negative batch time from a run time reported below zero") {
  frugal::adaptive p{{.latency_target = 100ms}};
  p.on_batch_done({.size = 1, .cost = 1, .run_time = -5ms});
  p.on_batch_done({.size = 4, .cost = 4, .run_time = ns_min});
  check_sane(p);
  CHECK(p.expected_run_time(4) == 0ns);
}

TEST_CASE(
    "policy: adaptive fed maximal run times and batch sizes predicts the longest run time and still "
    "dispatches") {
  frugal::adaptive p{{.latency_target = 100ms}};
  p.on_batch_done({.size = 4, .cost = 4, .run_time = ns_max});
  p.on_batch_done({.size = std::numeric_limits<std::size_t>::max(), .cost = 1, .run_time = ns_max});
  p.on_batch_done({.size = 0, .cost = 0, .run_time = 0ns});
  check_sane(p);
  CHECK(p.expected_run_time(4) > 1h);
  // Nothing it waits for could meet the latency target any more: a partial batch goes now.
  CHECK(p.wait_for({.now = 1s, .oldest_wait = 0ns, .queued = 1, .max_batch = 8, .arrivals = 1}) <= 0ns);
  (void)p.wait_for({.now = ns_max, .oldest_wait = ns_min, .queued = 1, .max_batch = 8, .arrivals = 2});
  (void)p.wait_for({.now = ns_min, .oldest_wait = ns_max, .queued = 8, .max_batch = 8, .arrivals = 3});
  check_sane(p);
}

TEST_CASE(
    "batcher: a batch's queue wait, latencies and run time saturate when the clock jumps across its "
    "whole range") {
  using clock_t = frugal::manual_clock;
  clock_t clk{clock_t::time_point::max() - 1h};
  frugal::batcher<int, int, frugal::adaptive, clock_t> b{{.max_batch = 2}, clk, frugal::adaptive{}};
  auto f = b.submit(1);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(batch->queue_wait() == 0ns);
  clk.set(clock_t::time_point::min());  // the clock jumps back across its whole range
  batch->fulfill({2});
  CHECK(f.get() == 2);
  const auto s = b.stats();
  CHECK(s.completed == 1);
  CHECK(s.end_to_end.max == 0ns);  // a negative latency counts as 0
  CHECK(s.queue_wait.max == 0ns);
  CHECK(s.mean_batch_run_time == 0ns);
  // The run time went negative, which the policy learns as 0.
  CHECK(b.policy().fitted());
  CHECK(b.policy().intercept_ns() == 0);
}

namespace {
// A steady clock that ticks in whole seconds, so the batcher converts its durations to nanoseconds.
struct seconds_clock {
  using duration = std::chrono::seconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<seconds_clock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept { return time_point(duration(0)); }
};
}  // namespace

TEST_CASE("batcher: a reported duration beyond the nanosecond range reaches the policy saturated") {
  std::vector<frugal::batch_report> reports;
  struct recorder {
    std::vector<frugal::batch_report>* out;
    ns wait_for(const frugal::policy_view&) const { return 0ns; }
    void on_batch_done(const frugal::batch_report& r) { out->push_back(r); }
  };
  frugal::batcher<int, int, recorder, seconds_clock> b{{.max_batch = 2}, {}, recorder{&reports}};
  for (auto d : {std::chrono::seconds::max(), std::chrono::seconds::min(), std::chrono::seconds(2)}) {
    auto f = b.submit(1);
    auto batch = b.try_next_batch();
    REQUIRE(batch);
    batch->report_duration(d);
    batch->fulfill({2});
    CHECK(f.get() == 2);
  }
  REQUIRE(reports.size() == 3);
  CHECK(reports[0].run_time == ns_max);
  CHECK(reports[1].run_time == ns_min);
  CHECK(reports[2].run_time == 2s);
}

TEST_CASE("policy: adaptive refuses non-finite options, naming them") {
  const double inf = std::numeric_limits<double>::infinity(), qnan = std::nan("");
  CHECK_THROWS_WITH_AS(frugal::adaptive({.headroom = inf}), doctest::Contains("options.headroom"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(frugal::adaptive({.headroom = qnan}), doctest::Contains("options.headroom"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(frugal::adaptive({.safety = qnan}), doctest::Contains("options.safety"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(frugal::adaptive({.learning_rate = inf}), doctest::Contains("options.learning_rate"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(frugal::adaptive({.latency_target = ns_min}),
                       doctest::Contains("options.latency_target"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(frugal::adaptive({.rate_horizon = ns_min}), doctest::Contains("options.rate_horizon"),
                       std::invalid_argument);
  frugal::adaptive p{{.latency_target = ns_max, .rate_horizon = ns_max}};
  (void)p.wait_for({.now = 0ns, .queued = 1, .max_batch = 2, .arrivals = 0});
  (void)p.wait_for({.now = ns_max, .queued = 1, .max_batch = 2, .arrivals = 1});
  CHECK(p.arrival_rate() >= 0);
}

TEST_CASE(
    "batcher: adaptive fed a maximal reported duration still batches requests without a deadline and "
    "sheds only those with one") {
  frugal::manual_clock clk;
  frugal::batcher<int, int, frugal::adaptive, frugal::manual_clock> b{
      {.max_batch = 4}, clk, frugal::adaptive{{.latency_target = 100ms}}};
  auto warmup = b.submit(0);
  auto first = b.try_next_batch();
  REQUIRE(first);
  first->report_duration(ns_max);
  first->fulfill({0});
  CHECK(b.policy().expected_run_time(1) == ns_max);
  auto hopeless = b.submit(2, {.deadline = clk.now() + 1h});
  auto no_deadline = b.submit(1);
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  REQUIRE(batch->size() == 1);
  CHECK(batch->requests()[0] == 1);
  REQUIRE(hopeless.wait_for(0s) == std::future_status::ready);
  try {
    hopeless.get();
    FAIL("a hopeless request ran");
  } catch (const frugal::batch_error& e) {
    CHECK(e.code() == frugal::batch_errc::deadline_exceeded);
  }
  batch->fulfill({10});
  CHECK(no_deadline.get() == 10);
}

TEST_CASE(
    "batcher: a clock that jumps between the ends of its range neither overflows nor expires a request "
    "without a deadline") {
  using tp = frugal::manual_clock::time_point;
  frugal::manual_clock clk{tp::max() - 1ns};
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> b{{.window = 1h, .max_batch = 4},
                                                                          clk};
  auto early = b.submit(1);
  clk.set(tp::min());  // the oldest request now arrived "after" now, by the whole range
  CHECK_FALSE(b.try_next_batch());
  REQUIRE(b.next_due());
  CHECK(*b.next_due() > tp::min());  // not due: the window has not passed
  clk.set(tp::max());                // the time every request without a deadline has as its deadline
  CHECK(b.sweep() == 0);
  CHECK_FALSE(b.try_next_batch());
  auto late = b.submit(2);
  CHECK(late.wait_for(0s) != std::future_status::ready);
  CHECK(b.stats().failed.deadline_exceeded == 0);
  b.close();
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  CHECK(batch->size() == 2);
  batch->fulfill({10, 20});
  CHECK(early.get() == 10);
  CHECK(late.get() == 20);
}
