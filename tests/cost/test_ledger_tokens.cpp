#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/prometheus.hpp"
#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
#  include <nlohmann/json.hpp>
#endif

using namespace std::chrono_literals;
namespace fc = frugal::cost;
using fc::money;

namespace {

// $3600 per hour is $1 per second: one nano-dollar per nanosecond, so times and money read alike.
fc::ledger_options one_nano_per_ns() {
  return {.prices = {{.gpu_class = "L4", .on_demand = fc::rate::per_hour(money::parse("$3600"))}},
          .devices = {{.gpu_class = "L4"}}};
}

// Four steps of t = 15750 + 50·p + 2000·d ns, 126000 ns in all: prefill's variable time is 50·300 = 15000
// and decode's 2000·24 = 48000, so the split gives prefill 126000·15000/63000 = 30000 ns (100 ns a
// token) and decode 96000 ns (4000 ns a token).
template <class L>
void record_steps(L& led) {
  const std::pair<int, int> steps[] = {{50, 4}, {50, 8}, {100, 4}, {100, 8}};
  for (auto [p, d] : steps)
    led.record_step_cost(std::uint64_t(p), std::uint64_t(d),
                         std::chrono::nanoseconds(15750 + 50 * p + 2000 * d));
}

}  // namespace

TEST_CASE("ledger: generations' prompt, cached prompt and generated tokens are counted per feature") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  const auto chat = led.feature("chat");
  const auto code = led.feature("code");
  led.record_generation(
      {.feature = chat, .prompt_tokens = 1200, .cached_prompt_tokens = 1000, .generated_tokens = 10});
  led.record_generation({.feature = chat, .prompt_tokens = 100, .generated_tokens = 14});
  led.record_generation(
      {.feature = code, .prompt_tokens = 7, .cached_prompt_tokens = 7, .generated_tokens = 1});
  const auto s = led.snapshot();
  const fc::feature_figures& c = *s.find("chat");
  CHECK(c.generations == 2);
  CHECK(c.prompt_tokens == 1300);
  CHECK(c.cached_prompt_tokens == 1000);
  CHECK(c.generated_tokens == 24);
  CHECK(s.find("code")->prompt_tokens == 7);
  CHECK(s.find("code")->cached_prompt_tokens == 7);
  CHECK(s.total.prompt_tokens == 1307);
  CHECK(s.total.generated_tokens == 25);
  CHECK(s.total.generations == 3);

  CHECK_THROWS_WITH_AS(
      led.record_generation({.feature = chat, .prompt_tokens = 3, .cached_prompt_tokens = 4}),
      doctest::Contains("cached_prompt_tokens = 4 is over prompt_tokens = 3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(led.record_step_cost(0, 0, 1ms), doctest::Contains("at least one token"),
                       std::invalid_argument);
  CHECK_THROWS_AS(led.record_step_cost(1, 0, -1ns), std::invalid_argument);
  CHECK_THROWS_AS(led.record_inter_token_latency(chat, 25h), std::invalid_argument);
  CHECK_THROWS_AS(led.record_time_to_first_token(fc::feature_id{9}, 1ms), std::out_of_range);
  CHECK_THROWS_AS(led.record_response_hit(fc::feature_id{9}, 1, 1), std::out_of_range);
  // Refused records changed nothing.
  CHECK(led.snapshot().total.prompt_tokens == 1307);
  CHECK(led.snapshot().step_costs.steps == 0);
}

TEST_CASE(
    "ledger: the step model fits t = fixed + a·p + b·d and splits the steps' time between prefill and "
    "decode in proportion to a·P and b·D") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  record_steps(led);
  const fc::step_cost_model m = led.snapshot().step_costs;
  CHECK(m.steps == 4);
  CHECK(m.prefill_tokens == 300);
  CHECK(m.decode_tokens == 24);
  CHECK(m.busy == 126000ns);
  REQUIRE(m.fitted);
  CHECK(m.fixed_ns == doctest::Approx(15750));
  CHECK(m.prefill_marginal_ns == doctest::Approx(50));
  CHECK(m.decode_marginal_ns == doctest::Approx(2000));
  CHECK(m.prefill_token_ns == doctest::Approx(100));
  CHECK(m.decode_token_ns == doctest::Approx(4000));
  CHECK(m.prefill_token_ns * 300 + m.decode_token_ns * 24 == doctest::Approx(126000));
}

TEST_CASE("ledger: a step of one kind of token is that kind's time, whole; only mixed steps are split") {
  frugal::manual_clock clock;
  SUBCASE("decode-only steps beside mixed ones") {
    fc::ledger led(one_nano_per_ns(), clock);
    const std::pair<int, int> steps[] = {{0, 4}, {0, 8}, {100, 4}, {200, 8}};
    for (auto [p, d] : steps)
      led.record_step_cost(std::uint64_t(p), std::uint64_t(d),
                           std::chrono::nanoseconds(15750 + 50 * p + 2000 * d));
    const fc::step_cost_model m = led.snapshot().step_costs;
    REQUIRE(m.fitted);
    CHECK(m.prefill_marginal_ns == doctest::Approx(50));
    CHECK(m.decode_marginal_ns == doctest::Approx(2000));
    // The decode-only steps (23750 + 31750 ns) are decode's; the mixed ones (70500 ns, 300 prefill and 12
    // decode tokens) split 50·300 : 2000·12, so prefill gets 70500 · 15000 / 39000 = 27115.4 ns.
    CHECK(m.prefill_token_ns == doctest::Approx(27115.3846 / 300));
    CHECK(m.decode_token_ns == doctest::Approx((55500 + 70500 - 27115.3846) / 24));
    CHECK(m.prefill_token_ns * 300 + m.decode_token_ns * 24 == doctest::Approx(126000));
  }
  SUBCASE("one request at a time: prefill steps and single-token decode steps, never mixed") {
    fc::ledger led(one_nano_per_ns(), clock);
    led.record_step_cost(100, 0, 20750ns);
    led.record_step_cost(200, 0, 25750ns);
    for (int i = 0; i < 3; ++i) led.record_step_cost(0, 1, 17750ns);
    const fc::step_cost_model m = led.snapshot().step_costs;
    // Each decode step reads the weights for one token: its whole time is that token's.
    CHECK(m.prefill_token_ns == doctest::Approx(46500.0 / 300));
    CHECK(m.decode_token_ns == doctest::Approx(17750));
  }
}

TEST_CASE("ledger: without a fit, steps of one kind take all the time and mixed ones split it per token") {
  frugal::manual_clock clock;
  SUBCASE("decode steps only") {
    fc::ledger led(one_nano_per_ns(), clock);
    led.record_step_cost(0, 4, 40000ns);
    led.record_step_cost(0, 6, 50000ns);
    const auto m = led.snapshot().step_costs;
    CHECK_FALSE(m.fitted);
    CHECK(m.prefill_token_ns == 0);
    CHECK(m.decode_token_ns == doctest::Approx(9000));
  }
  SUBCASE("prefill and decode always in the same ratio cannot be told apart") {
    fc::ledger led(one_nano_per_ns(), clock);
    for (int k = 1; k <= 5; ++k)
      led.record_step_cost(std::uint64_t(30 * k), std::uint64_t(k), std::chrono::nanoseconds(1000 * k));
    const auto m = led.snapshot().step_costs;
    CHECK_FALSE(m.fitted);
    // 15000 ns over 450 prefill and 15 decode tokens: each token the same.
    CHECK(m.prefill_token_ns == doctest::Approx(15000.0 / 465));
    CHECK(m.decode_token_ns == doctest::Approx(15000.0 / 465));
  }
}

TEST_CASE(
    "ledger: the prefix and response caches' savings are priced from the measured step costs, and are "
    "zero before any step is measured") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  const auto chat = led.feature("chat");
  led.record_batch({.feature = chat, .busy = 126000ns, .batch_size = 2});
  led.record_generation(
      {.feature = chat, .prompt_tokens = 1200, .cached_prompt_tokens = 1000, .generated_tokens = 10});
  led.record_generation({.feature = chat, .prompt_tokens = 100, .generated_tokens = 14});
  led.record_response_hit(chat, 50, 10);

  const auto before = led.snapshot();
  const fc::feature_figures& b = *before.find("chat");
  CHECK(b.response_hits == 1);
  CHECK(b.cache_hits == 1);
  CHECK(b.prefix_saved_time == 0ns);
  CHECK(b.prefix_saved.nanos() == 0);
  CHECK(b.response_saved.nanos() == 0);
  CHECK(b.cost_per_million_input.nanos() == 0);
  CHECK(b.cost_per_million_output.nanos() == 0);

  record_steps(led);
  const auto s = led.snapshot();
  const fc::feature_figures& c = *s.find("chat");
  // 1000 cached prompt tokens at 100 ns.
  CHECK(c.prefix_saved_time == 100000ns);
  CHECK(c.prefix_saved.nanos() == 100000);
  // 50 prompt tokens at 100 ns and 10 generated at 4000 ns.
  CHECK(c.response_saved_time == 45000ns);
  CHECK(c.response_saved.nanos() == 45000);
  CHECK(c.cache_saved_time == 45000ns);
  CHECK(c.cache_saved.nanos() == 45000);
  // The cost, 126000 nano-dollars, splits into 300 computed prompt tokens at 100 ns (30000) and 24
  // generated at 4000 ns (96000), spread over every token served, the response hit's 50 prompt and 10
  // generated tokens included: per 1M of the 1350 prompt tokens 30000e6 / 1350 = 22222222.2 and per 1M of
  // the 34 generated 96000e6 / 34 = 2823529411.8.
  CHECK(c.response_prompt_tokens == 50);
  CHECK(c.response_generated_tokens == 10);
  CHECK(c.cost.nanos() == 126000);
  CHECK(c.cost_per_million_input.nanos() == 22222222);
  CHECK(c.cost_per_million_output.nanos() == 2'823'529'412);
  CHECK(s.total.prefix_saved.nanos() == 100000);
  CHECK(s.total.response_saved.nanos() == 45000);

  // A window holds only what was recorded in it.
  led.record_step_cost(10, 0, 2000ns);
  led.record_generation(
      {.feature = chat, .prompt_tokens = 20, .cached_prompt_tokens = 16, .generated_tokens = 2});
  const auto w = led.snapshot().since(s);
  CHECK(w.step_costs.steps == 1);
  CHECK(w.step_costs.prefill_token_ns == doctest::Approx(200));
  CHECK(w.find("chat")->prompt_tokens == 20);
  CHECK(w.find("chat")->prefix_saved_time == 3200ns);
  CHECK(w.find("chat")->response_hits == 0);
}

TEST_CASE("ledger: time to first token and inter-token latency land in their histograms, by feature") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  const auto chat = led.feature("chat");
  const auto code = led.feature("code");
  led.record_time_to_first_token(chat, 4ms);
  led.record_generation(
      {.feature = chat, .prompt_tokens = 5, .generated_tokens = 3, .time_to_first_token = 20ms});
  for (int i = 0; i < 9; ++i) led.record_inter_token_latency(chat, 3ms);
  led.record_inter_token_latency(chat, 200ms);
  const auto s = led.snapshot();
  const fc::feature_figures& c = *s.find("chat");
  CHECK(c.time_to_first_token_histogram.count == 2);
  CHECK(c.time_to_first_token_histogram.sum == 24'000'000);
  CHECK(c.inter_token_latency_histogram.count == 10);
  CHECK(c.inter_token_latency_histogram.sum == 227'000'000);
  CHECK(double(c.inter_token_latency.p50.count()) == doctest::Approx(3e6).epsilon(0.001));
  CHECK(double(c.inter_token_latency.p99.count()) == doctest::Approx(200e6).epsilon(0.001));
  CHECK(double(c.time_to_first_token.p50.count()) == doctest::Approx(4e6).epsilon(0.001));
  CHECK(s.find("code")->time_to_first_token_histogram.count == 0);
  CHECK(s.total.inter_token_latency_histogram.count == 10);
  (void)code;

  const std::string text = fc::to_prometheus(s);
  using frugal_test::prom_value;
  CHECK(prom_value(text, "frugal_time_to_first_token_seconds_bucket{feature=\"chat\",le=\"0.0025\"}") == "0");
  CHECK(prom_value(text, "frugal_time_to_first_token_seconds_bucket{feature=\"chat\",le=\"0.005\"}") == "1");
  CHECK(prom_value(text, "frugal_time_to_first_token_seconds_bucket{feature=\"chat\",le=\"0.025\"}") == "2");
  CHECK(prom_value(text, "frugal_time_to_first_token_seconds_count{feature=\"chat\"}") == "2");
  CHECK(prom_value(text, "frugal_inter_token_latency_seconds_bucket{feature=\"chat\",le=\"0.005\"}") == "9");
  CHECK(prom_value(text, "frugal_inter_token_latency_seconds_bucket{feature=\"chat\",le=\"0.25\"}") == "10");
  CHECK(prom_value(text, "frugal_inter_token_latency_seconds_bucket{feature=\"code\",le=\"+Inf\"}") == "0");
  FRUGAL_CHECK_PROMTOOL(text);
}

TEST_CASE("ledger: token figures in the Prometheus text (promtool-checked) and the JSON") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  const auto chat = led.feature("chat");
  led.record_batch({.feature = chat, .busy = 126000ns});
  led.record_generation(
      {.feature = chat, .prompt_tokens = 1200, .cached_prompt_tokens = 1000, .generated_tokens = 10});
  led.record_generation({.feature = chat, .prompt_tokens = 100, .generated_tokens = 14});
  led.record_response_hit(chat, 50, 10);
  record_steps(led);
  const auto s = led.snapshot();
  const std::string text = fc::to_prometheus(s);
  using frugal_test::prom_value;
  CHECK(prom_value(text, "frugal_generations_total{feature=\"chat\"}") == "2");
  CHECK(prom_value(text, "frugal_prompt_tokens_total{feature=\"chat\",source=\"computed\"}") == "300");
  CHECK(prom_value(text, "frugal_prompt_tokens_total{feature=\"chat\",source=\"prefix_cache\"}") == "1000");
  CHECK(prom_value(text, "frugal_generated_tokens_total{feature=\"chat\"}") == "24");
  CHECK(prom_value(text, "frugal_input_cost_per_million_tokens_usd{feature=\"chat\"}") == "0.022222222");
  CHECK(prom_value(text, "frugal_output_cost_per_million_tokens_usd{feature=\"chat\"}") == "2.823529412");
  CHECK(prom_value(text, "frugal_response_cache_generated_tokens_total{feature=\"chat\"}") == "10");
  CHECK(prom_value(text, "frugal_prefix_cache_saved_seconds{feature=\"chat\"}") == "0.0001");
  CHECK(prom_value(text, "frugal_prefix_cache_saved_usd{feature=\"chat\"}") == "0.0001");
  CHECK(prom_value(text, "frugal_response_cache_hits_total{feature=\"chat\"}") == "1");
  CHECK(prom_value(text, "frugal_response_cache_saved_usd{feature=\"chat\"}") == "0.000045");
  CHECK(prom_value(text, "frugal_steps_total") == "4");
  CHECK(prom_value(text, "frugal_step_token_seconds{phase=\"prefill\"}") == "1e-07");
  CHECK(prom_value(text, "frugal_step_token_seconds{phase=\"decode\"}") == "4e-06");
  FRUGAL_CHECK_PROMTOOL(text);

#ifdef FRUGAL_TEST_HAS_NLOHMANN_JSON
  const auto j = nlohmann::json::parse(fc::to_json(s));
  const auto& f = j["features"][0];
  CHECK(f["prompt_tokens"] == 1300);
  CHECK(f["cached_prompt_tokens"] == 1000);
  CHECK(f["generated_tokens"] == 24);
  CHECK(f["cost_per_million_input"] == "0.022222222");
  CHECK(f["cost_per_million_output"] == "2.823529412");
  CHECK(f["response_generated_tokens"] == 10);
  CHECK(f["prefix_saved"] == "0.0001");
  CHECK(f["response_hits"] == 1);
  CHECK(f["response_saved"] == "0.000045");
  CHECK(f["time_to_first_token_seconds"].contains("p99"));
  CHECK(j["step_costs"]["steps"] == 4);
  CHECK(j["step_costs"]["fitted"] == true);
  CHECK(j["step_costs"]["decode_token_seconds"].get<double>() == doctest::Approx(4e-6));
#endif
}

TEST_CASE(
    "ledger: 4 threads recording tokens, latencies and step costs at once add up exactly while "
    "another takes snapshots") {
  frugal::manual_clock clock;
  fc::ledger led(one_nano_per_ns(), clock);
  const auto chat = led.feature("chat");
  const auto code = led.feature("code");
  constexpr int per_thread = 5000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const auto s = led.snapshot();
      CHECK(s.total.generated_tokens <= 4u * per_thread * 3);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      // Every thread's first records race to make the feature's token histograms.
      for (int i = 0; i < per_thread; ++i) {
        const auto f = (i + w) % 2 ? chat : code;
        led.record_inter_token_latency(f, std::chrono::microseconds(100 + i % 50));
        led.record_generation(
            {.feature = f, .prompt_tokens = 10, .cached_prompt_tokens = 4, .generated_tokens = 3});
        if (i % 10 == 0) led.record_time_to_first_token(f, 5ms);
        if (i % 5 == 0) led.record_response_hit(f, 10, 3);
        led.record_step_cost(6, 1, 1us);
      }
    });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  const auto s = led.snapshot();
  CHECK(s.total.generations == 4u * per_thread);
  CHECK(s.total.prompt_tokens == 40u * per_thread);
  CHECK(s.total.cached_prompt_tokens == 16u * per_thread);
  CHECK(s.total.generated_tokens == 12u * per_thread);
  CHECK(s.total.inter_token_latency_histogram.count == 4u * per_thread);
  CHECK(s.total.time_to_first_token_histogram.count == 4u * per_thread / 10);
  CHECK(s.total.response_hits == 4u * per_thread / 5);
  CHECK(s.step_costs.steps == 4u * per_thread);
  CHECK(s.step_costs.prefill_tokens == 24u * per_thread);
  CHECK(s.find("chat")->generations + s.find("code")->generations == 4u * per_thread);
}
