#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
#  include <nlohmann/json.hpp>
#endif

using namespace std::chrono_literals;
namespace fc = frugal::cost;
using fc::money;

namespace {

std::int64_t nanos(const money& m) { return m.nanos(); }

// Device 0: A100 on demand at $3.60/h = $0.001/s = 1e6 nano-dollars per second.
// Device 1: H100 on spot at $7.20/h = $0.002/s (its on-demand price is not used).
fc::ledger_options scenario_options() {
  return {.prices = {{.gpu_class = "A100", .on_demand = fc::rate::per_hour(money::parse("$3.60"))},
                     {.gpu_class = "H100",
                      .on_demand = fc::rate::per_hour(money::parse("$10.00")),
                      .spot = fc::rate::per_hour(money::parse("$7.20"))}},
          .devices = {{.gpu_class = "A100"},
                      {.gpu_class = "H100", .pricing = fc::billing::spot, .name = "h100-spot"}},
          .alerts = {.utilization_window = 60s, .memory_window = 60s}};
}

// The scripted scenario: 100 s of wall time with idle gaps; "chat" runs on device 0 with t(n) = 10 ms·n + 20
// ms, "search" runs batches of 2 (30 ms) mostly on device 1, device 1 loads a model for 5 s.
struct scenario {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger;
  fc::feature_id chat, search;
  fc::ledger_snapshot half;  // at 50 s

  explicit scenario(fc::ledger_options o = scenario_options()) : ledger(std::move(o), clock) {
    chat = ledger.feature("chat");
    search = ledger.feature("search");
    ledger.record_model_load(1, 5s);
    clock.advance(10s);
    ledger.record_memory(0, 70, 80);  // 87.5%, stays high
    ledger.record_memory(1, 70, 80);
    ledger.record_batch({.feature = chat, .device = 0, .busy = 60ms, .batch_size = 4, .capacity = 8});
    ledger.record_batch({.feature = search,
                         .device = 1,
                         .busy = 30ms,
                         .batch_size = 2,
                         .capacity = 4,
                         .tokens_in = 100,
                         .tokens_out = 50});
    clock.advance(10s);
    ledger.record_memory(1, 40, 80);  // back under 80%: device 1 never alerts
    ledger.record_batch({.feature = chat, .device = 0, .busy = 100ms, .batch_size = 8, .capacity = 8});
    clock.advance(30s);
    half = ledger.snapshot();
    ledger.record_batch({.feature = chat, .device = 0, .busy = 100ms, .batch_size = 8, .capacity = 8});
    ledger.record_batch({.feature = search,
                         .device = 1,
                         .busy = 30ms,
                         .batch_size = 2,
                         .capacity = 4,
                         .tokens_in = 100,
                         .tokens_out = 50});
    ledger.record_batch({.feature = search,
                         .device = 0,
                         .busy = 30ms,
                         .batch_size = 2,
                         .capacity = 4,
                         .tokens_in = 100,
                         .tokens_out = 50});
    for (int i = 0; i < 18; ++i) ledger.record_request(chat, 50ms, fc::outcome::ok);
    ledger.record_request(chat, 200ms, fc::outcome::error);
    ledger.record_request(chat, 900ms, fc::outcome::deadline_exceeded);
    for (int i = 0; i < 4; ++i) ledger.record_request(search, 10ms);
    ledger.record_cache_hit(chat, 30ms);
    ledger.record_cache_hit(chat, 30ms);
    ledger.record_cache_hit(chat);  // an average chat miss: 260 ms busy / 20 items = 13 ms
    ledger.record_queue_depth(90, 100);
    clock.advance(50s);
  }
};

bool has_alert(const fc::ledger_snapshot& s, const std::string& check, const std::string& subject) {
  for (const auto& a : s.alerts)
    if (a.check == check && a.subject == subject) return true;
  return false;
}

}  // namespace

TEST_CASE("ledger: a scripted scenario on a manual clock gives the figures worked out by hand") {
  scenario sc;
  const auto s = sc.ledger.snapshot();
  REQUIRE(s.features.size() == 2);
  REQUIRE(s.devices.size() == 2);
  const auto& chat = s.features[0];
  const auto& search = s.features[1];
  CHECK(s.wall == 100s);
  CHECK(s.cur == fc::currency{});

  SUBCASE("devices: paid wall time, busy, overhead and idle") {
    const auto& d0 = s.devices[0];
    const auto& d1 = s.devices[1];
    CHECK(d0.name == "0");
    CHECK(d1.name == "h100-spot");
    CHECK(d0.busy == 290ms);  // chat 260 + search 30
    CHECK(d1.busy == 60ms);
    CHECK(d1.load == 5s);
    CHECK(d1.model_loads == 1);
    CHECK(nanos(d0.paid) == 100'000'000);  // 100 s at $0.001/s
    CHECK(nanos(d1.paid) == 200'000'000);  // 100 s at $0.002/s (spot)
    CHECK(nanos(d0.busy_cost) == 290'000);
    CHECK(nanos(d1.busy_cost) == 120'000);
    CHECK(nanos(d1.overhead_cost) == 10'000'000);  // 5 s load
    CHECK(nanos(d0.idle_cost) == 99'710'000);
    CHECK(nanos(d1.idle_cost) == 189'880'000);
    CHECK(d0.idle == 100s - 290ms);
    CHECK(d1.idle == 100s - 60ms - 5s);
    CHECK(d0.utilization == doctest::Approx(0.0029));
    CHECK(d1.utilization == doctest::Approx(0.0006));
    CHECK(d0.memory_fraction.value() == doctest::Approx(0.875));
  }
  SUBCASE("totals: workload + overhead + idle adds up to what was paid") {
    CHECK(nanos(s.total_cost) == 300'000'000);
    CHECK(nanos(s.busy_cost) == 410'000);
    CHECK(nanos(s.overhead_cost) == 10'000'000);
    CHECK(nanos(s.idle_cost) == 289'590'000);
    CHECK(nanos(s.unallocated_idle) == 289'590'000);  // idle_sharing::none
    CHECK(s.utilization == doctest::Approx(0.35 / 200));
    CHECK(s.total.requests == 24);
    CHECK(nanos(s.total.cost_per_request) == 12'500'000);  // $0.30 / 24
    CHECK(s.total.batches == 6);
    CHECK(s.total.batched_items == 26);
    CHECK(nanos(s.total.batching_saved) == nanos(chat.batching_saved) + nanos(search.batching_saved));
  }
  SUBCASE("per feature: requests, busy, cost per request, batches and fill") {
    CHECK(chat.name == "chat");
    CHECK(chat.requests == 20);
    CHECK(chat.by_outcome[0] == 18);
    CHECK(chat.by_outcome[1] == 1);
    CHECK(chat.by_outcome[2] == 1);
    CHECK(chat.by_outcome[3] == 0);
    CHECK(chat.busy == 260ms);
    CHECK(chat.busy_by_device[0] == 260ms);
    CHECK(chat.busy_by_device[1] == 0ms);
    CHECK(nanos(chat.busy_cost) == 260'000);
    CHECK(nanos(chat.cost) == 260'000);
    CHECK(nanos(chat.cost_per_request) == 13'000);
    CHECK(chat.batches == 3);
    CHECK(chat.mean_batch_size == doctest::Approx(20.0 / 3));
    CHECK(chat.fill == doctest::Approx(20.0 / 24));
    CHECK(search.requests == 4);
    CHECK(search.busy == 90ms);
    CHECK(nanos(search.busy_cost) == 150'000);  // 30 ms on device 0, 60 ms on device 1
    CHECK(nanos(search.cost_per_request) == 37'500);
    CHECK(search.fill == doctest::Approx(0.5));
    CHECK(search.tokens_in == 300);
    CHECK(search.tokens_out == 150);
  }
  SUBCASE("batching savings come from the fitted a*n + b model") {
    REQUIRE(chat.model.valid);
    CHECK(chat.model.a_ns == doctest::Approx(10e6));
    CHECK(chat.model.b_ns == doctest::Approx(20e6));
    // Alone: 20 requests x 30 ms = 600 ms; paid 260 ms; saved b x (20 - 3) = 340 ms, at $0.001/s.
    CHECK(chat.batching_saved_time == 340ms);
    CHECK(nanos(chat.batching_saved) == 340'000);
    CHECK_FALSE(search.model.valid);  // every search batch had size 2
    CHECK(nanos(search.batching_saved) == 0);
  }
  SUBCASE("cache hits: given savings, and the average miss when none is given") {
    CHECK(chat.cache_hits == 3);
    CHECK(chat.cache_hit_ratio == doctest::Approx(0.15));
    CHECK(chat.cache_saved_time == 73ms);  // 30 + 30 + 13
    CHECK(nanos(chat.cache_saved) == 73'000);
    CHECK(search.cache_hits == 0);
    CHECK(search.cache_hit_ratio == 0);
  }
  SUBCASE("latency percentiles") {
    auto near = [](std::chrono::nanoseconds got, std::chrono::nanoseconds want) {
      return std::abs(double(got.count() - want.count())) <= double(want.count()) / 2048;
    };
    CHECK(near(chat.latency.p50, 50ms));
    CHECK(near(chat.latency.p90, 50ms));   // rank 18 of 20
    CHECK(near(chat.latency.p99, 900ms));  // rank 20
    CHECK(near(search.latency.p99, 10ms));
    CHECK(near(s.total.latency.p50, 50ms));
    CHECK(s.total.latency_histogram.count == 24);
    CHECK(chat.latency_histogram.sum ==
          std::uint64_t(std::chrono::nanoseconds(18 * 50ms + 200ms + 900ms).count()));
  }
  SUBCASE("alerts fire with their reasons") {
    CHECK(has_alert(s, "utilization_low", "device 0"));
    CHECK(has_alert(s, "utilization_low", "device h100-spot"));
    CHECK_FALSE(has_alert(s, "utilization_high", "device 0"));
    CHECK(has_alert(s, "memory_high", "device 0"));  // over 80% since 10 s, for 90 s >= 60 s
    CHECK_FALSE(has_alert(s, "memory_high", "device h100-spot"));
    CHECK(has_alert(s, "p99_latency", "feature chat"));
    CHECK_FALSE(has_alert(s, "p99_latency", "feature search"));
    CHECK(has_alert(s, "p99_latency", "total"));
    CHECK(has_alert(s, "queue_depth", "queue"));
    CHECK(s.alerts.size() == 6);
    for (const auto& a : s.alerts) CHECK_FALSE(a.message.empty());
  }
  SUBCASE("a window cut from two snapshots") {
    const auto w = s.since(sc.half);
    CHECK(w.wall == 50s);
    CHECK(w.window_start == 50s);
    CHECK(nanos(w.devices[0].paid) == 50'000'000);
    CHECK(nanos(w.devices[1].paid) == 100'000'000);
    CHECK(w.devices[1].load == 0s);  // the load was before the window
    CHECK(w.features[0].batches == 1);
    CHECK(w.features[0].busy == 100ms);
    CHECK(w.features[1].busy == 60ms);
    CHECK(w.features[0].requests == 20);
    CHECK(w.features[0].latency_histogram.count == 20);
    CHECK(nanos(w.total_cost) == 150'000'000);
    CHECK(nanos(w.busy_cost) == 100'000 + 60'000 + 30'000);
    CHECK_FALSE(w.features[0].model.valid);  // one batch in the window
    CHECK(sc.half.features[0].batches == 2);
    CHECK(sc.half.wall == 50s);
    CHECK_THROWS_AS(sc.half.since(s), std::invalid_argument);
    scenario other;
    CHECK_THROWS_AS(s.since(other.half), std::invalid_argument);
  }
}

TEST_CASE("ledger: idle cost shared out by busy time or uniformly adds up to the idle cost") {
  SUBCASE("by busy time, per device, remainder to the busiest feature") {
    auto o = scenario_options();
    o.share_idle = fc::idle_sharing::by_busy;
    scenario sc(o);
    const auto s = sc.ledger.snapshot();
    // Device 0's idle 99,710,000 splits 260:30 -> 89,395,172.4 and 10,314,827.6, floored, remainder 1 to
    // chat. Device 1's idle 189,880,000 all goes to search, its only feature.
    CHECK(nanos(s.features[0].idle_share) == 89'395'173);
    CHECK(nanos(s.features[1].idle_share) == 10'314'827 + 189'880'000);
    CHECK(nanos(s.unallocated_idle) == 0);
    CHECK(nanos(s.features[0].cost) == 260'000 + 89'395'173);
    CHECK(nanos(s.features[0].idle_share) + nanos(s.features[1].idle_share) == nanos(s.idle_cost));
    CHECK(nanos(s.features[0].cost_per_request) == 4'482'759);  // 89,655,173 / 20 = 4,482,758.65
  }
  SUBCASE("uniformly between the active features") {
    auto o = scenario_options();
    o.share_idle = fc::idle_sharing::uniform;
    scenario sc(o);
    const auto s = sc.ledger.snapshot();
    CHECK(nanos(s.features[0].idle_share) == 99'710'000 / 2 + 189'880'000 / 2);
    CHECK(nanos(s.features[1].idle_share) == 99'710'000 / 2 + 189'880'000 / 2);
    CHECK(nanos(s.unallocated_idle) == 0);
  }
}

TEST_CASE("ledger: bad input gets a clear error naming what was wrong") {
  auto good = scenario_options();
  SUBCASE("options") {
    auto o = good;
    o.devices.clear();
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("options.devices"), std::invalid_argument);
    o = good;
    o.devices[0].gpu_class = "TPU";
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("devices[0].gpu_class \"TPU\""),
                         std::invalid_argument);
    o = good;
    o.prices[1].spot = {};
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("prices[H100].spot must be > 0"),
                         std::invalid_argument);
    o = good;
    o.prices[0].on_demand = fc::rate::per_hour(money::parse("3.60 EUR"));
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("EUR"), std::invalid_argument);
    o = good;
    o.prices[0].on_demand = fc::rate::per_request(money::parse("$1"));
    CHECK_THROWS_AS(fc::ledger<>{o}, std::invalid_argument);
    o = good;
    o.max_features = 0;
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("max_features"), std::invalid_argument);
    o = good;
    o.expected_interval = -1ms;
    CHECK_THROWS_AS(fc::ledger<>{o}, std::invalid_argument);
  }
  SUBCASE("records") {
    auto o = good;
    o.max_features = 2;
    fc::ledger<> l(o);
    auto a = l.feature("a");
    CHECK(l.feature("a") == a);
    l.feature("b");
    CHECK(l.find_feature("b").has_value());
    CHECK_FALSE(l.find_feature("c").has_value());
    CHECK_THROWS_WITH_AS(l.feature("c"), doctest::Contains("max_features = 2"), std::length_error);
    CHECK_THROWS_AS(l.feature(""), std::invalid_argument);
    CHECK_THROWS_AS(l.record_batch({.feature = fc::feature_id{}, .busy = 1ms}), std::out_of_range);
    CHECK_THROWS_WITH_AS(l.record_batch({.feature = a, .device = 2, .busy = 1ms}),
                         doctest::Contains("device 2"), std::out_of_range);
    CHECK_THROWS_WITH_AS(l.record_batch({.feature = a, .busy = -1ms}),
                         doctest::Contains("busy must not be negative"), std::invalid_argument);
    CHECK_THROWS_AS(l.record_batch({.feature = a, .busy = 1ms, .batch_size = 0}), std::invalid_argument);
    CHECK_THROWS_AS(l.record_batch({.feature = a, .busy = 1ms, .batch_size = 8, .capacity = 4}),
                    std::invalid_argument);
    CHECK_THROWS_AS(l.record_request(a, -1ms), std::invalid_argument);
    CHECK_THROWS_AS(l.record_cache_hit(a, -1ms), std::invalid_argument);
    CHECK_THROWS_AS(l.record_model_load(0, -1s), std::invalid_argument);
    CHECK_THROWS_AS(l.record_memory(0, 2, 1), std::invalid_argument);
    CHECK_THROWS_AS(l.record_queue_depth(1, 0), std::invalid_argument);
    const auto s = l.snapshot();  // nothing was recorded by the failed calls
    CHECK(s.total.batches == 0);
    CHECK(s.total.requests == 0);
  }
}

TEST_CASE("ledger: 4 threads recording at once add up exactly while another takes snapshots") {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> l(scenario_options(), clock);
  const fc::feature_id features[] = {l.feature("chat"), l.feature("search")};
  constexpr int per_thread = 20000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const auto s = l.snapshot();
      CHECK(s.total.batches <= 4u * per_thread);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < per_thread; ++i) {
        const auto t = features[(w + i) % 2];
        l.record_batch({.feature = t,
                        .device = std::size_t(w % 2),
                        .busy = std::chrono::microseconds(1 + i % 7),
                        .batch_size = std::uint32_t(1 + i % 4)});
        l.record_request(t, std::chrono::microseconds(100 + i % 50),
                         i % 10 == 0 ? fc::outcome::error : fc::outcome::ok);
        if (i % 5 == 0) l.record_cache_hit(t, 1us);
      }
    });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  clock.advance(1h);
  const auto s = l.snapshot();
  std::uint64_t busy_us = 0, items = 0;
  for (int i = 0; i < per_thread; ++i) busy_us += 1 + i % 7, items += 1 + i % 4;
  CHECK(s.total.batches == 4u * per_thread);
  CHECK(s.total.batched_items == 4 * items);
  CHECK(s.total.busy == std::chrono::microseconds(4 * busy_us));
  CHECK(s.devices[0].busy == std::chrono::microseconds(2 * busy_us));
  CHECK(s.devices[1].busy == std::chrono::microseconds(2 * busy_us));
  CHECK(s.total.requests == 4u * per_thread);
  CHECK(s.total.by_outcome[1] == 4u * per_thread / 10);
  CHECK(s.total.latency_histogram.count == 4u * per_thread);
  CHECK(s.total.cache_hits == 4u * per_thread / 5);
  CHECK(s.total.cache_saved_time == std::chrono::microseconds(4 * per_thread / 5));
  CHECK(s.features[0].requests + s.features[1].requests == 4u * per_thread);
  // Device 0 at $0.001/s, device 1 at $0.002/s: busy cost is exact to the nano-dollar per (feature, device).
  CHECK(nanos(s.busy_cost) == std::int64_t(2 * busy_us) * 1 + std::int64_t(2 * busy_us) * 2);
}

TEST_CASE(
    "ledger: one thread feeding more ledgers than its stripe cache holds keeps each one's figures apart") {
  std::vector<std::unique_ptr<fc::ledger<>>> ledgers;
  for (int i = 0; i < 6; ++i) ledgers.push_back(std::make_unique<fc::ledger<>>(scenario_options()));
  std::vector<fc::feature_id> features;
  for (auto& l : ledgers) features.push_back(l->feature("chat"));
  for (int round = 0; round < 50; ++round)
    for (std::size_t i = 0; i < ledgers.size(); ++i)
      ledgers[i]->record_batch(
          {.feature = features[i], .busy = std::chrono::milliseconds(i + 1), .batch_size = 2});
  for (std::size_t i = 0; i < ledgers.size(); ++i) {
    const auto s = ledgers[i]->snapshot();
    CHECK(s.total.batches == 50);
    CHECK(s.total.busy == std::chrono::milliseconds(50 * (i + 1)));
  }
  ledgers.erase(ledgers.begin());  // a new ledger never inherits a destroyed one's cached stripe
  fc::ledger<> fresh(scenario_options());
  fresh.record_batch({.feature = fresh.feature("chat"), .busy = 1ms});
  CHECK(fresh.snapshot().total.batches == 1);
}

TEST_CASE("ledger: with an expected interval a stalled request also records the requests it held back") {
  auto o = scenario_options();
  o.expected_interval = 10ms;
  fc::ledger<> l(o);
  const auto t = l.feature("chat");
  l.record_request(t, 100ms);  // 100, 90, ..., 10 ms
  l.record_request(t, 5ms);    // under the interval: just itself
  const auto s = l.snapshot();
  CHECK(s.features[0].requests == 2);
  CHECK(s.features[0].latency_histogram.count == 11);
  CHECK(s.features[0].latency_histogram.sum == std::uint64_t(std::chrono::nanoseconds(555ms).count()));
  const std::string p = fc::to_prometheus(s);
  CHECK(p.find("frugal_request_duration_seconds_count{feature=\"chat\"} 11") != std::string::npos);
  CHECK(p.find("frugal_request_duration_seconds_sum{feature=\"chat\"} 0.555") != std::string::npos);
}

TEST_CASE("ledger: a cancelled request is counted apart from errors, and exported under outcome cancelled") {
  fc::ledger<> l(scenario_options());
  const auto t = l.feature("chat");
  l.record_request(t, 40ms);
  l.record_request(t, 30ms, fc::outcome::cancelled);
  l.record_request(t, 20ms, fc::outcome::cancelled);
  const auto s = l.snapshot();
  CHECK(s.features[0].requests == 3);
  CHECK(s.features[0].by_outcome[static_cast<std::size_t>(fc::outcome::ok)] == 1);
  CHECK(s.features[0].by_outcome[static_cast<std::size_t>(fc::outcome::cancelled)] == 2);
  CHECK(s.features[0].by_outcome[static_cast<std::size_t>(fc::outcome::error)] == 0);
  CHECK(fc::to_string(fc::outcome::cancelled) == "cancelled");
  const std::string p = fc::to_prometheus(s);
  CHECK(p.find("frugal_requests_total{feature=\"chat\",outcome=\"cancelled\"} 2") != std::string::npos);
  CHECK(p.find("frugal_requests_total{feature=\"chat\",outcome=\"error\"} 0") != std::string::npos);
  CHECK(fc::to_json(s).find("\"cancelled\":2") != std::string::npos);
}

TEST_CASE("exports: Prometheus, JSON and table carry the snapshot's figures") {
  scenario sc;
  const auto s = sc.ledger.snapshot();
  const std::string p = fc::to_prometheus(s);
  CHECK(p.find("# TYPE frugal_gpu_busy_seconds_total counter") != std::string::npos);
  CHECK(p.find("frugal_gpu_busy_seconds_total{feature=\"chat\"} 0.26") != std::string::npos);
  CHECK(p.find("frugal_requests_total{feature=\"chat\",outcome=\"deadline_exceeded\"} 1") !=
        std::string::npos);
  CHECK(p.find("frugal_cost_usd_total{feature=\"chat\"} 0.00026") != std::string::npos);
  CHECK(p.find("frugal_gpu_utilization_ratio{device=\"0\",gpu_class=\"A100\"} 0.0029") != std::string::npos);
  CHECK(p.find("frugal_request_duration_seconds_bucket{feature=\"chat\",le=\"0.1\"} 18") !=
        std::string::npos);
  CHECK(p.find("frugal_request_duration_seconds_bucket{feature=\"chat\",le=\"0.25\"} 19") !=
        std::string::npos);
  CHECK(p.find("frugal_request_duration_seconds_bucket{feature=\"chat\",le=\"+Inf\"} 20") !=
        std::string::npos);
  CHECK(p.find("frugal_request_duration_seconds_count{feature=\"chat\"} 20") != std::string::npos);
  CHECK(p.find("frugal_total_cost_usd_total 0.30") != std::string::npos);
  CHECK(p.find("frugal_alert_firing{check=\"queue_depth\",subject=\"queue\"} 1") != std::string::npos);

  const std::string t = fc::to_table(s);
  CHECK(t.find("chat") != std::string::npos);
  CHECK(t.find("$0.30 = busy $0.00041 + overhead $0.01 + idle $0.28959") != std::string::npos);
  CHECK(t.find("ALERT queue_depth") != std::string::npos);

  const std::string j = fc::to_json(s);
  CHECK(j.front() == '{');
  CHECK(j.back() == '}');
#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
  const auto doc = nlohmann::json::parse(j);
  CHECK(doc["currency"] == "USD");
  CHECK(doc["total_cost"] == "0.30");
  CHECK(doc["features"][0]["name"] == "chat");
  CHECK(doc["features"][0]["requests"] == 20);
  CHECK(doc["features"][0]["cost_per_request"] == "0.000013");
  CHECK(doc["features"][0]["batch_model"]["valid"] == true);
  CHECK(doc["devices"][1]["billing"] == "spot");
  CHECK(doc["devices"][1]["idle_cost"] == "0.18988");
  CHECK(doc["alerts"].size() == 6);
  CHECK(doc["queue"]["depth"] == 90);
#endif
}

TEST_CASE("advisors: replicas follow the HPA rule with tolerance, bounds and scale to zero") {
  CHECK(fc::advise_replicas(50, 0.90, {.target_utilization = 0.75, .max_replicas = 100}).desired == 60);
  CHECK(fc::advise_replicas(4, 0.72).desired == 4);  // 0.72 / 0.70 is within 10%
  CHECK(fc::advise_replicas(4, 0.35).desired == 2);  // ceil(4 x 0.5)
  CHECK(fc::advise_replicas(5, 1.0).desired == 6);   // ceil(7.14) = 8, capped at max 6
  CHECK(fc::advise_replicas(3, 0.05, {.min_replicas = 2}).desired == 2);
  CHECK(fc::advise_replicas(3, 0.0, {}, 20min).desired == 0);
  CHECK(fc::advise_replicas(3, 0.0, {.min_replicas = 1}, 20min).desired == 1);
  CHECK(fc::advise_replicas(0, 0.5).desired == 1);
  CHECK(fc::advise_replicas(0, 0.0).desired == 0);
  CHECK_THROWS_AS(fc::advise_replicas(1, 0.5, {.target_utilization = 0}), std::invalid_argument);
  CHECK_THROWS_AS(fc::advise_replicas(1, 0.5, {.min_replicas = 5, .max_replicas = 2}), std::invalid_argument);
  CHECK_THROWS_AS(fc::advise_replicas(-1, 0.5), std::invalid_argument);
  scenario sc;
  const auto s = sc.ledger.snapshot();
  CHECK(fc::advise_replicas(s).desired == 1);  // 2 devices at 0.175%: ceil(2 x 0.0025) = 1
}

TEST_CASE("advisors: right-size picks the cheapest type that fits the memory and the throughput") {
  constexpr std::uint64_t gb = 1'000'000'000;
  auto hr = [](const char* p) { return fc::rate::per_hour(money::parse(p)); };
  const std::vector<fc::gpu_type> catalog = {
      {"small", 24 * gb, 0.5, hr("$1.00"), hr("$0.40")},
      {"big", 80 * gb, 2.0, hr("$4.00"), hr("$1.50")},
  };
  // 13B at fp16 with 20% headroom: 31.2 GB -> small needs 2 for memory, 2 for throughput 1.0: $2.00/h.
  auto a = fc::advise_right_size({.parameters_billions = 13, .required_throughput = 1.0}, catalog);
  REQUIRE(a.found);
  CHECK(a.memory_needed_bytes == 31'200'000'000);
  CHECK(a.best.name == "small");
  CHECK(a.best.gpus == 2);
  CHECK(a.best.hourly_cost == money::parse("$2.00"));
  // Throughput 3.0: small needs 6 ($6), big needs 2 ($8).
  CHECK(fc::advise_right_size({.parameters_billions = 13, .required_throughput = 3.0}, catalog).best.name ==
        "small");
  // At most 4 GPUs: small (6) no longer fits.
  a = fc::advise_right_size({.parameters_billions = 13, .required_throughput = 3.0, .max_gpus = 4}, catalog);
  CHECK(a.best.name == "big");
  CHECK(a.best.hourly_cost == money::parse("$8.00"));
  CHECK_FALSE(a.candidates.back().fits);
  // 70B at int4: 42 GB -> small 2 for memory; spot prices: small x2 = $0.80.
  a = fc::advise_right_size({.parameters_billions = 70,
                             .weights = frugal::element_type::i4,
                             .required_throughput = 0.5,
                             .spot = true},
                            catalog);
  CHECK(a.memory_needed_bytes == 42'000'000'000);
  CHECK(a.best.name == "small");
  CHECK(a.best.hourly_cost == money::parse("$0.80"));
  // 405B at fp16 fits nowhere within 8 GPUs.
  CHECK_FALSE(fc::advise_right_size({.parameters_billions = 405}, catalog).found);
  CHECK_THROWS_AS(fc::advise_right_size({.parameters_billions = 0}, catalog), std::invalid_argument);
  const auto def = fc::default_catalog();
  CHECK(def.size() >= 6);
  for (const auto& g : def) CHECK(g.on_demand.price().nanos() > 0);
  CHECK(fc::advise_right_size({.parameters_billions = 8}).found);
}

TEST_CASE("advisors: spot against on-demand with preemptions, checkpoints and restarts") {
  const auto od = fc::rate::per_hour(money::parse("$4.00"));
  const auto spot = fc::rate::per_hour(money::parse("$1.60"));
  // 10 h job, checkpoints every hour, 0.1 preemptions/h, 6 min restart:
  // E = 10 x (e^0.1 - 1)(10 h + 0.1 h) = 10.6222627 h.
  auto a = fc::advise_spot({.length = 10h,
                            .on_demand = od,
                            .spot = spot,
                            .preemptions_per_hour = 0.1,
                            .checkpoint_interval = 1h,
                            .restart_overhead = 6min});
  const double hours = 10 * std::expm1(0.1) * 10.1;
  CHECK(double(a.expected_spot_time.count()) / 3.6e12 == doctest::Approx(hours).epsilon(1e-9));
  CHECK(a.expected_spot_cost.to_double() == doctest::Approx(1.6 * hours).epsilon(1e-9));
  CHECK(a.on_demand_cost == money::parse("$40.00"));
  CHECK(a.break_even_discount == doctest::Approx(1 - 10 / hours));
  CHECK(a.discount == doctest::Approx(0.6));
  CHECK(a.expected_preemptions == doctest::Approx(10 * std::expm1(0.1)));
  CHECK(a.use_spot);
  // 2 preemptions/h with a 30 min restart: E(1 h) = (e^2 - 1)(0.5 h + 0.5 h) = 6.39 h per hour of work.
  a = fc::advise_spot({.length = 10h,
                       .on_demand = od,
                       .spot = spot,
                       .preemptions_per_hour = 2,
                       .checkpoint_interval = 1h,
                       .restart_overhead = 30min});
  CHECK(a.break_even_discount == doctest::Approx(1 - 1 / std::expm1(2.0)));
  CHECK_FALSE(a.use_spot);
  // No preemptions: spot time is the job's length, break-even is zero.
  a = fc::advise_spot({.length = 90min, .on_demand = od, .spot = spot, .checkpoint_interval = 1h});
  CHECK(a.expected_spot_time == 90min);
  CHECK(a.break_even_discount == doctest::Approx(0));
  CHECK_THROWS_AS(fc::advise_spot({.length = 1h, .on_demand = od, .spot = {}, .checkpoint_interval = 1h}),
                  std::invalid_argument);
  CHECK_THROWS_AS(fc::advise_spot({.length = 1h, .on_demand = od, .spot = spot}), std::invalid_argument);
}

TEST_CASE("advisors: batch window from arrival rate, fitted model and latency target") {
  // 1000 req/s, t(n) = 0.5 ms n + 4 ms, 50 ms target: n = floor((50 - 4 + 1) / 1.5) = 31, window 30 ms,
  // batch 19.5 ms, stable from n >= 4 / 0.5 = 8.
  fc::batch_model m{.valid = true, .a_ns = 0.5e6, .b_ns = 4e6};
  auto a = fc::advise_batch_window({.arrival_rate_per_s = 1000, .model = m, .latency_target = 50ms});
  CHECK(a.feasible);
  CHECK(a.max_batch == 31);
  CHECK(a.window == 30ms);
  CHECK(a.batch_time == 19500us);
  CHECK(a.worst_latency == 49500us);
  CHECK(a.min_stable_batch == 8);
  CHECK(a.utilization == doctest::Approx(1000 * (0.0005 + 0.004 / 31)));
  CHECK(fc::advise_batch_window(
            {.arrival_rate_per_s = 1000, .model = m, .latency_target = 50ms, .max_batch_limit = 16})
            .max_batch == 16);
  // 5000 req/s at 0.5 ms per item: one GPU cannot keep up.
  CHECK_FALSE(
      fc::advise_batch_window({.arrival_rate_per_s = 5000, .model = m, .latency_target = 50ms}).feasible);
  CHECK_FALSE(
      fc::advise_batch_window({.arrival_rate_per_s = 10, .model = m, .latency_target = 4ms}).feasible);
  CHECK_THROWS_AS(fc::advise_batch_window({.arrival_rate_per_s = 10, .model = {}, .latency_target = 4ms}),
                  std::invalid_argument);
  scenario sc;
  const auto s = sc.ledger.snapshot();
  // chat: 20 requests in 100 s, t(n) = 10 ms n + 20 ms; target 1 s: n = floor((1000 - 20 + 5000) / 5010) = 1.
  a = fc::advise_batch_window(s, "chat", 1s);
  CHECK(a.max_batch == 1);
  CHECK(a.feasible);
  CHECK_THROWS_AS(fc::advise_batch_window(s, "nope", 1s), std::invalid_argument);
}

namespace {
fc::ledger_options one_device() {
  return {.prices = {{.gpu_class = "A100", .on_demand = fc::rate::per_hour(money::parse("$3.60"))}},
          .devices = {{.gpu_class = "A100"}}};
}
}  // namespace

TEST_CASE("ledger hardening: a duration beyond max_record_duration is refused and never poisons snapshot()") {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> l(one_device(), clock);
  const auto t = l.feature("chat");
  const auto huge = std::chrono::nanoseconds(INT64_MAX);
  CHECK_THROWS_WITH_AS(l.record_batch({.feature = t, .busy = huge}), doctest::Contains("busy"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(l.record_request(t, huge), doctest::Contains("latency"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(l.record_cache_hit(t, huge), doctest::Contains("saved"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(l.record_model_load(0, huge), doctest::Contains("duration"), std::invalid_argument);
  // The longest accepted duration, many times over, still gives a snapshot with monotone figures.
  std::uint64_t last = 0;
  for (int i = 0; i < 50; ++i) {
    l.record_batch({.feature = t, .busy = fc::max_record_duration, .batch_size = UINT32_MAX});
    clock.advance(std::chrono::hours(24));
    const auto s = l.snapshot();
    const auto busy = static_cast<std::uint64_t>(s.features[0].busy.count());
    CHECK(busy >= last);
    last = busy;
  }
  CHECK(last == 50 * static_cast<std::uint64_t>(fc::max_record_duration.count()));
}

TEST_CASE(
    "ledger hardening: coordinated-omission correction is bounded by the histogram, not latency/interval") {
  auto o = one_device();
  o.expected_interval = 1ns;
  fc::ledger<> l(o);
  const auto t = l.feature("chat");
  // Once per missed interval this would be 8.64e13 iterations; bucket by bucket it is instant.
  l.record_request(t, fc::max_record_duration);
  const auto s = l.snapshot();
  const std::uint64_t v = static_cast<std::uint64_t>(fc::max_record_duration.count());
  CHECK(s.features[0].latency_histogram.count == v - 1 + 1);  // v itself and v-1 .. 1
  CHECK(s.features[0].latency_histogram.sum == UINT64_MAX);   // v·(v+1)/2 saturates
  frugal::cost::log_linear_histogram h(5000);
  h.record_corrected(10000, 3);  // 10000, 9997, ..., 4: values above 5000 clamp
  std::uint64_t want_sum = 0, want_clamped = 0;
  for (std::uint64_t x = 10000;; x -= 3) {
    want_sum += x;
    if (x > 5000) ++want_clamped;
    if (x < 6) break;
  }
  const auto hs = h.snapshot();
  CHECK(hs.count == 3333);
  CHECK(hs.sum == want_sum);
  CHECK(h.clamped() == want_clamped);
}

TEST_CASE("ledger hardening: NaN and infinite thresholds are refused, naming the field") {
  const double bad[] = {std::nan(""), INFINITY, -INFINITY, -0.5};
  for (double v : bad) {
    auto o = one_device();
    o.alerts.utilization_low = v;
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("alerts.utilization_low"), std::invalid_argument);
    o = one_device();
    o.alerts.utilization_high = v;
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("alerts.utilization_high"),
                         std::invalid_argument);
    o = one_device();
    o.alerts.memory_high = v;
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("alerts.memory_high"), std::invalid_argument);
    o = one_device();
    o.alerts.queue_high = v;
    CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("alerts.queue_high"), std::invalid_argument);
  }
  auto o = one_device();
  o.alerts.p99_max = -1ms;
  CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("alerts.p99_max"), std::invalid_argument);
  CHECK(fc::detail::json_num(INFINITY) == "null");
  CHECK(fc::detail::json_num(std::nan("")) == "null");
}

TEST_CASE("ledger hardening: features and device names that are not printable UTF-8 are refused") {
  fc::ledger<> l(one_device());
  CHECK_THROWS_WITH_AS(l.feature("bad\xff"), doctest::Contains("UTF-8"), std::invalid_argument);
  CHECK_THROWS_AS(l.feature("\xc0\xaf"), std::invalid_argument);      // overlong '/'
  CHECK_THROWS_AS(l.feature("\xed\xa0\x80"), std::invalid_argument);  // a surrogate
  CHECK_THROWS_AS(l.feature("cut\xe2\x82"), std::invalid_argument);   // truncated
  CHECK_THROWS_AS(l.feature("line\nbreak"), std::invalid_argument);
  CHECK(l.feature("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80").value == 0);
  auto o = one_device();
  o.devices[0].name = "gpu\x01";
  CHECK_THROWS_WITH_AS(fc::ledger<>{o}, doctest::Contains("devices[0]"), std::invalid_argument);
  const std::string json = fc::to_json(l.snapshot());
  CHECK(json.find("caf\xc3\xa9") != std::string::npos);
}

TEST_CASE("exports: the shared tier's hits, their latency and its faults reach Prometheus and JSON") {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger(scenario_options(), clock);
  const auto t = ledger.feature("rag");
  ledger.record_remote_hit(t, 2ms);
  ledger.record_remote_hit(t, 3ms);
  ledger.record_remote_fault(t);
  clock.advance(1s);
  const auto s = ledger.snapshot();
  const std::string p = fc::to_prometheus(s);
  CHECK(p.find("# TYPE frugal_remote_hits_total counter") != std::string::npos);
  CHECK(p.find("frugal_remote_hits_total{feature=\"rag\"} 2") != std::string::npos);
  CHECK(p.find("frugal_remote_hit_seconds_total{feature=\"rag\"} 0.005") != std::string::npos);
  CHECK(p.find("frugal_remote_faults_total{feature=\"rag\"} 1") != std::string::npos);
  CHECK(p.find("frugal_cache_hits_total{feature=\"rag\"} 2") !=
        std::string::npos);  // remote hits are cache hits
  const std::string j = fc::to_json(s);
  CHECK(j.find("\"remote_hits\":2,") != std::string::npos);
  CHECK(j.find("\"remote_faults\":1") != std::string::npos);
#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
  const auto doc = nlohmann::json::parse(j);
  CHECK(doc["features"][0]["remote_hit_seconds"].get<double>() == doctest::Approx(0.005));
#endif
}

// Job preemptions (frugal::job): the ledger's counters, their exports, and advise_spot on the measured redo.
TEST_CASE("ledger: preemptions and redone work are counted per device, priced at its billing, and exported") {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger(scenario_options(), clock);
  const auto t = ledger.feature("job");
  ledger.record_batch({.feature = t, .device = 1, .busy = 10s, .batch_size = 100});
  ledger.record_preemption(1, 40, 4s);  // spot H100, $7.20/h: 4 s = $0.008
  clock.advance(20s);
  const auto half = ledger.snapshot();
  ledger.record_preemption(1, 10, 1s);
  ledger.record_preemption(0, 5, 500ms);  // on-demand A100, $3.60/h: 0.5 s = $0.0005
  clock.advance(10s);
  const auto s = ledger.snapshot();
  CHECK(s.devices[1].preemptions == 2);
  CHECK(s.devices[1].redone_records == 50);
  CHECK(s.devices[1].redone == 5s);
  CHECK(s.devices[1].redone_cost == money::parse("$0.01"));
  CHECK(s.devices[1].pricing == fc::billing::spot);
  CHECK(s.devices[0].preemptions == 1);
  CHECK(s.devices[0].redone_cost == money::parse("$0.0005"));
  const auto w = s.since(half);  // the window after the first preemption
  CHECK(w.devices[1].preemptions == 1);
  CHECK(w.devices[1].redone_records == 10);
  CHECK(w.devices[1].redone == 1s);
  const std::string p = fc::to_prometheus(s);
  CHECK(p.find("# TYPE frugal_preemptions_total counter") != std::string::npos);
  CHECK(p.find("frugal_preemptions_total{device=\"h100-spot\",gpu_class=\"H100\"} 2") != std::string::npos);
  CHECK(p.find("frugal_redone_records_total{device=\"h100-spot\",gpu_class=\"H100\"} 50") !=
        std::string::npos);
  CHECK(p.find("frugal_redone_seconds_total{device=\"h100-spot\",gpu_class=\"H100\"} 5.00") !=
        std::string::npos);
  CHECK(p.find("frugal_redone_cost_usd_total{device=\"0\",gpu_class=\"A100\"} 0.0005") != std::string::npos);
  const std::string j = fc::to_json(s);
  CHECK(j.find("\"preemptions\":2,\"redone_records\":50,\"redone_seconds\":5.00,\"redone_cost\":\"0.01\"") !=
        std::string::npos);
  CHECK_THROWS_WITH_AS(ledger.record_preemption(2, 1, 1s), doctest::Contains("device 2"), std::out_of_range);
  CHECK_THROWS_WITH_AS(ledger.record_preemption(0, 1, -1s), doctest::Contains("redone"),
                       std::invalid_argument);
}

TEST_CASE("advisors: advise_spot on a measured redo per preemption, and its price ceiling") {
  const auto od = fc::rate::per_hour(money::parse("$4.00"));
  const auto spot = fc::rate::per_hour(money::parse("$1.60"));
  // 10 h of work, 10 checkpoints of 36 s, 0.5 preemptions/h, 6 min redone and 6 min restart each:
  // E = (10 h + 0.1 h) / (1 - 0.5 x 0.2) = 11.2222 h; ceiling $4.00 x 10 / 11.2222 = $3.5644/h.
  fc::spot_job j{.length = 10h,
                 .on_demand = od,
                 .spot = spot,
                 .preemptions_per_hour = 0.5,
                 .checkpoint_interval = 1h,
                 .checkpoint_cost = 36s,
                 .restart_overhead = 6min,
                 .redo_per_preemption = 6min};
  auto a = fc::advise_spot(j);
  const double hours = 10.1 / 0.9;
  CHECK(double(a.expected_spot_time.count()) / 3.6e12 == doctest::Approx(hours).epsilon(1e-9));
  CHECK(a.expected_preemptions == doctest::Approx(0.5 * hours));
  CHECK(a.price_ceiling.to_double() == doctest::Approx(40 / hours).epsilon(1e-9));
  CHECK(a.use_spot);
  // At the ceiling spot costs what on-demand does; a cent above, more.
  j.spot = fc::rate::per_hour(a.price_ceiling);
  CHECK(fc::advise_spot(j).expected_spot_cost.to_double() == doctest::Approx(40.0).epsilon(1e-6));
  j.spot = fc::rate::per_hour(a.price_ceiling + money::parse("$0.01"));
  CHECK_FALSE(fc::advise_spot(j).use_spot);
  // The modelled loss gives a ceiling too: on-demand x length / E.
  j.redo_per_preemption.reset();
  a = fc::advise_spot(j);
  CHECK(a.price_ceiling.to_double() ==
        doctest::Approx(40 / (double(a.expected_spot_time.count()) / 3.6e12)).epsilon(1e-9));
  // A loss of a whole hour per half-hour preemption never finishes: refused, saying so.
  j.redo_per_preemption = 2h;
  CHECK_THROWS_WITH_AS(fc::advise_spot(j), doctest::Contains("never to finish"), std::invalid_argument);
  j.redo_per_preemption = -1s;
  CHECK_THROWS_WITH_AS(fc::advise_spot(j), doctest::Contains("redo_per_preemption"), std::invalid_argument);
}

TEST_CASE(
    "ledger regression: a saving worth more than money holds saturates instead of making snapshot() throw") {
  // Found by fuzz_ledger: saved time is priced at the feature's busy rate, so 1 us of busy time at $1M/h with
  // 1,000 day-long saved misses is worth about 2.4e19 nanodollars, past INT64_MAX; snapshot() threw
  // "overflow in share".
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> l(
      {.prices = {{.gpu_class = "X", .on_demand = fc::rate::per_hour(money::parse("$1000000.00"))}},
       .devices = {{.gpu_class = "X"}}},
      clock);
  const auto chat = l.feature("chat"), search = l.feature("search");
  for (const auto t : {chat, search}) {
    l.record_batch({.feature = t, .busy = std::chrono::microseconds(1)});
    for (int i = 0; i < 1000; ++i) l.record_cache_hit(t, fc::max_record_duration);
  }
  clock.advance(std::chrono::seconds(1));
  fc::ledger_snapshot s;
  REQUIRE_NOTHROW(s = l.snapshot());
  REQUIRE(s.features.size() == 2);
  for (const auto& t : s.features) {
    CHECK(t.cache_saved_time == 1000 * fc::max_record_duration);
    CHECK(t.cache_saved.nanos() == INT64_MAX);
  }
  CHECK(s.total.cache_saved.nanos() == INT64_MAX);  // the sum of two saturated figures saturates too
  CHECK_NOTHROW((void)fc::to_json(s));
  CHECK_NOTHROW((void)fc::to_prometheus(s));
}
