#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/prometheus.hpp"
#include "frugal/clock.hpp"
#include "frugal/cost/export.hpp"
#include "frugal/cost/ledger.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/pool.hpp"

namespace {

using frugal::cost::money;

// A model whose answers and confidences are known: it is sure of the inputs divisible by `sure_of`
// (confidence 0.9) and unsure of the rest (0.4); a sure_of of 1 is always sure.
struct graded_model {
  std::string name;
  int sure_of = 1;
};

struct answer {
  std::string by;
  double confidence = 0;
};

using pool_t = frugal::model_pool<graded_model, frugal::model_args, frugal::manual_clock>;
using cascade_t = frugal::cascade<pool_t, int, answer>;

struct fixture {
  frugal::manual_clock clock;
  std::map<std::string, int> loads;
  pool_t pool;

  explicit fixture(std::size_t budget = 1000)
      : pool({.budget_bytes = budget,
              .models = {{.name = "small", .args = {{"sure_of", "2"}}, .estimated_bytes = 100},
                         {.name = "medium", .args = {{"sure_of", "3"}}, .estimated_bytes = 300},
                         {.name = "large", .args = {{"sure_of", "1"}}, .estimated_bytes = 900}},
              .load =
                  [this](const frugal::model_spec<>& s) {
                    ++loads[s.name];
                    return frugal::loaded_model<graded_model>{std::make_unique<graded_model>(
                        graded_model{s.name, std::stoi(s.args.at("sure_of"))})};
                  }},
             clock) {}
};

cascade_t::options_type two_tiers() {
  return {.tiers = {{.model = "small", .cost_per_call = money::parse("$0.001")},
                    {.model = "large", .cost_per_call = money::parse("$0.01")}},
          .run =
              [](graded_model& m, const int& x) {
                return answer{m.name, x % m.sure_of == 0 ? 0.9 : 0.4};
              },
          .escalate = [](const answer& a, std::size_t) { return a.confidence < 0.8; }};
}

// A ledger of one L4 at $0.80/h on the fixture's clock.
frugal::cost::ledger<frugal::manual_clock> one_l4(const frugal::manual_clock& clock) {
  return frugal::cost::ledger<frugal::manual_clock>(
      {.prices = {{.gpu_class = "L4", .on_demand = frugal::cost::rate::per_hour(money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}}},
      clock);
}

std::string invalid(fixture& f, cascade_t::options_type o) {
  try {
    cascade_t c(f.pool, std::move(o));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE(
    "cascade: the small tier answers what it is sure of; the rest escalates, and the stats price both") {
  fixture f;
  cascade_t c(f.pool, two_tiers());
  for (int x = 0; x < 10; ++x) {
    const auto r = c(x);
    CHECK(r.tier == (x % 2 == 0 ? 0u : 1u));
    CHECK(r.answer.by == (x % 2 == 0 ? "small" : "large"));
    CHECK(r.answer.confidence == 0.9);
  }
  const auto st = c.stats();
  CHECK(st.requests == 10);
  CHECK(st.tiers[0].calls == 10);
  CHECK(st.tiers[0].answered == 5);
  CHECK(st.tiers[0].escalated == 5);
  CHECK(st.tiers[1].calls == 5);
  CHECK(st.tiers[1].answered == 5);
  CHECK(st.tiers[1].escalated == 0);
  CHECK(st.escalation_rate == doctest::Approx(0.5));
  CHECK(st.tiers[0].cost == money::parse("$0.01"));
  CHECK(st.tiers[1].cost == money::parse("$0.05"));
  CHECK(st.cost == money::parse("$0.06"));
  CHECK(st.cost_largest_only == money::parse("$0.10"));
  CHECK(st.saved == money::parse("$0.04"));
  CHECK(f.loads["small"] == 1);
  CHECK(f.loads["large"] == 1);
}

TEST_CASE("cascade: three tiers stop at the first sure one, and the last tier's answer is final unasked") {
  fixture f;
  auto o = two_tiers();
  o.tiers.insert(o.tiers.begin() + 1, {.model = "medium", .cost_per_call = money::parse("$0.003")});
  std::vector<std::size_t> asked;
  o.escalate = [&](const answer& a, std::size_t tier) {
    asked.push_back(tier);
    return a.confidence < 0.8;
  };
  cascade_t c(f.pool, o);
  CHECK(c(6).tier == 0);  // even: small is sure
  CHECK(c(3).tier == 1);  // odd, divisible by 3: medium is sure
  CHECK(c(5).tier == 2);  // neither: large
  CHECK(asked == std::vector<std::size_t>{0, 0, 1, 0, 1});
  const auto st = c.stats();
  CHECK(st.escalation_rate == doctest::Approx(2.0 / 3.0));
  CHECK(st.tiers[1].escalated == 1);
  // 3 small + 2 medium + 1 large against 3 large.
  CHECK(st.cost == money::parse("$0.019"));
  CHECK(st.saved == money::parse("$0.011"));
}

TEST_CASE("cascade: with room for one model at a time the pool swaps the tiers in and out") {
  fixture f(900);
  cascade_t c(f.pool, two_tiers());
  CHECK(c(1).answer.by == "large");
  CHECK(c(2).answer.by == "small");
  CHECK(c(3).answer.by == "large");
  CHECK(f.loads["small"] == 2);
  CHECK(f.loads["large"] == 2);
  CHECK(f.pool.stats().evictions == 3);
}

TEST_CASE("cascade: an error in a tier reaches the caller and counts as that tier's failure") {
  fixture f;
  auto o = two_tiers();
  o.run = [](graded_model& m, const int& x) -> answer {
    if (m.name == "large") throw std::runtime_error("large tier down");
    return answer{m.name, x % m.sure_of == 0 ? 0.9 : 0.4};
  };
  cascade_t c(f.pool, o);
  CHECK(c(2).tier == 0);
  CHECK_THROWS_WITH_AS(c(1), "large tier down", std::runtime_error);
  const auto st = c.stats();
  CHECK(st.tiers[1].failures == 1);
  CHECK(st.tiers[1].answered == 0);
  CHECK(st.tiers[0].escalated == 1);
  CHECK(f.pool.stats().leases == 0);
}

TEST_CASE("cascade: bad options fail at construction naming the tier") {
  fixture f;
  auto o = two_tiers();
  o.tiers[1].model = "huge";
  CHECK(invalid(f, o).find("tiers[1].model \"huge\" is not a model of the pool") != std::string::npos);
  o = two_tiers();
  o.tiers[1].model = "small";
  CHECK(invalid(f, o).find("tiers[1].model \"small\" repeats tiers[0]") != std::string::npos);
  o = two_tiers();
  o.tiers.clear();
  CHECK(invalid(f, o).find("tiers must not be empty") != std::string::npos);
  o = two_tiers();
  o.escalate = nullptr;
  CHECK(invalid(f, o).find("escalate is required") != std::string::npos);
  o = two_tiers();
  o.tiers[1].cost_per_call = money::parse("0.01 EUR");
  CHECK(invalid(f, o).find("must be in the currency of tiers[0]") != std::string::npos);
}

TEST_CASE("cascade: concurrent requests are all counted") {
  fixture f;
  cascade_t c(f.pool, two_tiers());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int x = 0; x < 100; ++x) c(x);
    });
  for (auto& t : ts) t.join();
  const auto st = c.stats();
  CHECK(st.requests == 400);
  CHECK(st.tiers[0].escalated == 200);
  CHECK(st.tiers[1].answered == 200);
}

TEST_CASE(
    "cascade: with a ledger, each tier is a priced feature with its escalation rate and what the cascade "
    "saved against the last tier alone") {
  fixture f;
  auto ledger = one_l4(f.clock);
  auto o = two_tiers();
  // A small call takes 1 ms and a large one 10 ms, on the ledger's (manual) clock.
  o.run = [&](graded_model& m, const int& x) {
    f.clock.advance(m.name == "small" ? std::chrono::milliseconds(1) : std::chrono::milliseconds(10));
    return answer{m.name, x % m.sure_of == 0 ? 0.9 : 0.4};
  };
  o.ledger = &ledger;
  cascade_t c(f.pool, o);
  for (int x = 0; x < 10; ++x) (void)c(x);  // the evens stop at small (x = 0 before large ever ran)

  const auto snap = ledger.snapshot();
  const auto* small = snap.find("small");
  const auto* large = snap.find("large");
  REQUIRE(small != nullptr);
  REQUIRE(large != nullptr);
  CHECK(small->requests == 10);
  CHECK(small->busy == std::chrono::milliseconds(10));
  CHECK(small->escalations == 5);
  CHECK(small->escalation_rate == doctest::Approx(0.5));
  CHECK(large->requests == 5);
  CHECK(large->busy == std::chrono::milliseconds(50));
  CHECK(large->escalations == 0);
  // Always the large tier: 10 x 10 ms. The cascade: 10 x 1 ms + 5 x 10 ms. Saved: 40 ms, booked on small,
  // x = 0's answer priced once large had run.
  CHECK(small->cascade_saved_time == std::chrono::milliseconds(40));
  CHECK(large->cascade_saved_time == std::chrono::nanoseconds(0));
  CHECK(snap.total.cascade_saved_time == std::chrono::milliseconds(40));
  CHECK(small->cascade_saved == small->busy_cost * 4);
  CHECK(small->busy_cost.nanos() > 0);
  const std::string prom = frugal::cost::to_prometheus(snap);
  CHECK(prom.find("frugal_cascade_escalations_total{feature=\"small\"} 5") != std::string::npos);
  CHECK(prom.find("frugal_cascade_saved_seconds{feature=\"small\"} 0.04") != std::string::npos);
  const std::string json = frugal::cost::to_json(snap);
  CHECK(json.find("\"escalations\":5,\"escalation_rate\":0.5,\"cascade_saved_seconds\":0.04") !=
        std::string::npos);
}

TEST_CASE("cascade: escalations that cost more than they save show as a negative saving") {
  fixture f;
  auto ledger = one_l4(f.clock);
  auto o = two_tiers();
  o.run = [&](graded_model& m, const int&) {
    f.clock.advance(m.name == "small" ? std::chrono::milliseconds(4) : std::chrono::milliseconds(10));
    return answer{m.name, m.name == "small" ? 0.4 : 0.9};  // small is never sure
  };
  o.ledger = &ledger;
  cascade_t c(f.pool, o);
  for (int x = 0; x < 3; ++x) CHECK(c(x).tier == 1);
  const auto snap = ledger.snapshot();
  CHECK(snap.find("small")->escalation_rate == doctest::Approx(1.0));
  CHECK(snap.total.cascade_saved_time == -std::chrono::milliseconds(12));
  CHECK(snap.find("small")->cascade_saved.nanos() < 0);
  o.ledger_device = 1;
  CHECK(invalid(f, o).find("ledger_device 1 is not a device of the ledger (it has 1)") != std::string::npos);
}

TEST_CASE("cascade: stats export as Prometheus text, per tier by model") {
  fixture f;
  cascade_t c(f.pool, two_tiers());
  for (int x = 0; x < 10; ++x) c(x);
  const std::string t = frugal::to_prometheus(c.stats());
  CHECK(frugal_test::prom_value(t, "frugal_cascade_requests_total") == "10");
  CHECK(frugal_test::prom_value(t, R"(frugal_cascade_tier_calls_total{model="small"})") == "10");
  CHECK(frugal_test::prom_value(t, R"(frugal_cascade_tier_answers_total{model="small"})") == "5");
  CHECK(frugal_test::prom_value(t, R"(frugal_cascade_tier_escalated_total{model="small"})") == "5");
  CHECK(frugal_test::prom_value(t, R"(frugal_cascade_tier_calls_total{model="large"})") == "5");
  CHECK(frugal_test::prom_value(t, R"(frugal_cascade_tier_failures_total{model="large"})") == "0");
  CHECK(frugal_test::prom_value(t, "frugal_cascade_escalation_ratio") == "0.5");
  FRUGAL_CHECK_PROMTOOL(t);
}
