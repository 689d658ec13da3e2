#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
#  include <nlohmann/json.hpp>
#endif

using namespace std::chrono_literals;
namespace fc = frugal::cost;

namespace {

// One A100 at $3.60/h: 1e6 nano-dollars per busy second.
fc::ledger_options a100() {
  return {.prices = {{.gpu_class = "A100", .on_demand = fc::rate::per_hour(fc::money::parse("$3.60"))}},
          .devices = {{.gpu_class = "A100"}}};
}

}  // namespace

TEST_CASE("ledger: semantic hits are cache hits whose count and saving are also reported apart") {
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger(a100(), clock);
  const auto faq = ledger.feature("faq");
  const auto chat = ledger.feature("chat");
  // faq: 400 ms busy for 4 items, so an average miss is 100 ms.
  ledger.record_batch({.feature = faq, .busy = 400ms, .batch_size = 4});
  ledger.record_batch({.feature = chat, .busy = 200ms, .batch_size = 2});
  for (int i = 0; i < 3; ++i) ledger.record_cache_hit(faq);
  ledger.record_semantic_hit(faq);
  ledger.record_semantic_hit(faq);
  ledger.record_semantic_hit(faq, 50ms);
  ledger.record_cache_hit(chat);
  clock.advance(10s);
  const auto s = ledger.snapshot();
  const fc::feature_figures& f = *s.find("faq");
  CHECK(f.cache_hits == 6);
  CHECK(f.semantic_hits == 3);
  CHECK(f.cache_saved_time == 550ms);     // 5 average misses and 50 ms
  CHECK(f.semantic_saved_time == 250ms);  // 2 average misses and 50 ms
  CHECK(f.busy_cost.nanos() == 400'000);
  CHECK(f.cache_saved.nanos() == 550'000);
  CHECK(f.semantic_saved.nanos() == 250'000);
  const fc::feature_figures& c = *s.find("chat");
  CHECK(c.cache_hits == 1);
  CHECK(c.semantic_hits == 0);
  CHECK(c.semantic_saved.nanos() == 0);
  CHECK(c.cache_saved.nanos() == 100'000);
  CHECK(s.total.semantic_hits == 3);
  CHECK(s.total.cache_hits == 7);
  CHECK(s.total.semantic_saved_time == 250ms);
  CHECK(s.total.semantic_saved.nanos() == 250'000);
  CHECK(s.total.cache_saved.nanos() == 650'000);

  SUBCASE("a window counts only the semantic hits inside it") {
    ledger.record_semantic_hit(faq, 30ms);
    ledger.record_cache_hit(faq, 30ms);
    clock.advance(1s);
    const auto w = ledger.snapshot().since(s);
    const fc::feature_figures& fw = *w.find("faq");
    CHECK(fw.cache_hits == 2);
    CHECK(fw.semantic_hits == 1);
    CHECK(fw.semantic_saved_time == 30ms);
    CHECK(fw.cache_saved_time == 60ms);
    // No busy time in the window: saved time is priced at the fleet's paid rate, half of it semantic.
    CHECK(fw.semantic_saved.nanos() * 2 == fw.cache_saved.nanos());
    CHECK(fw.semantic_saved.nanos() > 0);
  }

  SUBCASE("exports carry them in Prometheus text and JSON") {
    const std::string p = fc::to_prometheus(s);
    CHECK(p.find("# TYPE frugal_semantic_hits_total counter") != std::string::npos);
    CHECK(p.find("frugal_semantic_hits_total{feature=\"faq\"} 3\n") != std::string::npos);
    CHECK(p.find("frugal_semantic_hits_total{feature=\"chat\"} 0\n") != std::string::npos);
    CHECK(p.find("frugal_semantic_saved_seconds{feature=\"faq\"} 0.25\n") != std::string::npos);
    CHECK(p.find("frugal_semantic_saved_usd{feature=\"faq\"} 0.00025\n") != std::string::npos);
    CHECK(p.find("frugal_cache_hits_total{feature=\"faq\"} 6\n") != std::string::npos);
    const std::string j = fc::to_json(s);
    CHECK(j.find("\"semantic_hits\":3,") != std::string::npos);
#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
    const auto doc = nlohmann::json::parse(j);
    CHECK(doc["features"][0]["name"] == "faq");
    CHECK(doc["features"][0]["semantic_hits"] == 3);
    CHECK(doc["features"][0]["semantic_saved_seconds"].get<double>() == doctest::Approx(0.25));
    CHECK(doc["features"][0]["semantic_saved"] == "0.00025");
    CHECK(doc["total"]["semantic_hits"] == 3);
    CHECK(doc["total"]["semantic_saved"] == "0.00025");
#endif
  }
}

TEST_CASE("ledger: record_semantic_hit refuses an unknown feature and a bad duration, naming them") {
  fc::ledger<> ledger(a100());
  const auto t = ledger.feature("faq");
  CHECK_THROWS_WITH_AS(ledger.record_semantic_hit(fc::feature_id{7}),
                       doctest::Contains("record_semantic_hit: feature id 7"), std::out_of_range);
  CHECK_THROWS_WITH_AS(ledger.record_semantic_hit(t, -1ms),
                       doctest::Contains("record_semantic_hit: saved must not be negative"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ledger.record_semantic_hit(t, 25h), doctest::Contains("max_record_duration"),
                       std::invalid_argument);
  const auto s = ledger.snapshot();
  CHECK(s.find("faq")->semantic_hits == 0);
  CHECK(s.find("faq")->cache_hits == 0);
}
