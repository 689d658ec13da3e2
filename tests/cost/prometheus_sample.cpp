// Prints a ledger's Prometheus exposition, for `promtool check metrics`; the ledger is fed as the demo does,
// with every kind of record (a decoder's tokens and step costs included), two features (one with a label
// value that needs escaping), two devices and alerts.
#include <chrono>
#include <cstdio>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

int main() {
  using namespace std::chrono_literals;
  namespace fc = frugal::cost;
  frugal::manual_clock clock;
  fc::ledger led({.prices = {{.gpu_class = "A100",
                              .on_demand = fc::rate::per_hour(fc::money::parse("$3.60")),
                              .spot = fc::rate::per_hour(fc::money::parse("$1.20"))}},
                  .devices = {{.gpu_class = "A100"}, {.gpu_class = "A100", .pricing = fc::billing::spot}},
                  .share_idle = fc::idle_sharing::by_busy,
                  .alerts = {.utilization_window = 1s}},
                 clock);
  const fc::feature_id chat = led.feature("chat");
  const fc::feature_id odd = led.feature("say \"hi\"\\now");
  led.record_model_load(1, 2s);
  led.record_preemption(1, 12, 300ms);
  for (int i = 0; i < 200; ++i) {
    const fc::feature_id t = i % 3 ? chat : odd;
    led.record_batch({.feature = t,
                      .device = std::size_t(i % 2),
                      .busy = std::chrono::milliseconds(2 + i % 5),
                      .batch_size = std::uint32_t(1 + i % 8),
                      .capacity = 8,
                      .tokens_in = 64,
                      .tokens_out = 16});
    led.record_request(t, std::chrono::milliseconds(5 + i * 7 % 900),
                       i % 17 ? fc::outcome::ok : fc::outcome::error);
    if (i % 4 == 0) led.record_cache_hit(t);
    clock.advance(50ms);
  }
  for (int i = 0; i < 50; ++i) {
    const fc::feature_id t = i % 3 ? chat : odd;
    led.record_step_cost(std::uint64_t(i % 4 * 64), std::uint64_t(1 + i % 8),
                         std::chrono::microseconds(800 + i % 4 * 900 + (1 + i % 8) * 300));
    led.record_generation({.feature = t,
                           .prompt_tokens = 200,
                           .cached_prompt_tokens = std::uint64_t(i % 4 * 32),
                           .generated_tokens = 40,
                           .time_to_first_token = std::chrono::milliseconds(20 + i)});
    led.record_inter_token_latency(t, std::chrono::milliseconds(15 + i % 5));
    if (i % 5 == 0) led.record_response_hit(t, 200, 40);
  }
  led.record_queue_depth(95, 100);
  const std::string text = fc::to_prometheus(led.snapshot());
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
