// The ledger's record functions driven by the fuzzer's bytes, with extreme durations, counts and clock
// jumps. Property: a duration outside [0, max_record_duration] or any other bad value is
// std::invalid_argument, an unknown device std::out_of_range, both from "frugal::cost::ledger::", and
// changes nothing; every accepted record is counted; snapshot() never throws; the counters Prometheus
// reads as counters never go down from one snapshot to the next (the cache's saved time is a gauge: a
// hit recorded without a figure is priced at the current mean busy time per item, which may fall; it
// equals the figures recorded while every hit had one, and is never below them); the JSON export parses (no
// NaN or infinity token) and the Prometheus export has no NaN. Each input's work is bounded, the
// coordinated-omission correction included.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

namespace fc = frugal::cost;
using namespace std::chrono_literals;

namespace {

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_ledger: %s (%lld, %lld)\n", what, a, b);
  std::abort();
}

std::chrono::nanoseconds duration(FuzzedDataProvider& fdp) {
  constexpr std::int64_t max = fc::max_record_duration.count();
  constexpr std::int64_t edge[] = {0,
                                   1,
                                   -1,
                                   max,
                                   max + 1,
                                   std::numeric_limits<std::int64_t>::max(),
                                   std::numeric_limits<std::int64_t>::min(),
                                   1'000'000,
                                   3'600'000'000'000};
  if (fdp.ConsumeBool()) return std::chrono::nanoseconds(edge[fdp.ConsumeIntegralInRange<int>(0, 8)]);
  return std::chrono::nanoseconds(fdp.ConsumeIntegral<std::int64_t>());
}

bool in_range(std::chrono::nanoseconds d) { return d >= 0ns && d <= fc::max_record_duration; }

// Calls f, which must throw from the ledger exactly when `bad`: std::invalid_argument for a bad value,
// std::out_of_range for an unknown device or feature (both std::logic_error).
template <class F>
void expect(bool bad, const char* what, F&& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    if (std::string(e.what()).rfind("frugal::cost::ledger::", 0) != 0)
      fail("an error that does not say where");
    if (!bad) {
      std::fprintf(stderr, "unexpected error: %s\n", e.what());
      fail(what);
    }
    return;
  }
  if (bad) fail(what);
}

// Counters that must never go down between snapshots.
struct counters {
  std::uint64_t requests = 0, batches = 0, items = 0, hits = 0, remote_hits = 0, loads = 0, preemptions = 0;
  std::uint64_t generations = 0, prompt_tokens = 0, generated_tokens = 0, steps = 0, response_hits = 0;
  std::uint64_t latency_sum = 0;  // saturates at UINT64_MAX (corrected series of long latencies)
  std::int64_t busy = 0, saved = 0, load = 0;
};

counters read(const fc::ledger_snapshot& s) {
  counters c;
  c.requests = s.total.requests;
  c.batches = s.total.batches;
  c.items = s.total.batched_items;
  c.hits = s.total.cache_hits;
  c.remote_hits = s.total.remote_hits;
  c.generations = s.total.generations;
  c.prompt_tokens = s.total.prompt_tokens;
  c.generated_tokens = s.total.generated_tokens;
  c.steps = s.step_costs.steps;
  c.response_hits = s.total.response_hits;
  c.busy = s.total.busy.count();
  c.latency_sum = s.total.latency_histogram.sum;
  c.saved = s.total.cache_saved_time.count();
  for (const auto& d : s.devices) {
    c.loads += d.model_loads;
    c.preemptions += d.preemptions;
    c.load += d.load.count();
  }
  return c;
}

void check_monotone(const counters& a, const counters& b) {
  const auto le = [](auto x, auto y, const char* what) {
    if (y < x) fail(what, static_cast<long long>(x), static_cast<long long>(y));
  };
  le(a.requests, b.requests, "requests went down");
  le(a.batches, b.batches, "batches went down");
  le(a.items, b.items, "batched items went down");
  le(a.hits, b.hits, "cache hits went down");
  le(a.remote_hits, b.remote_hits, "remote hits went down");
  le(a.generations, b.generations, "generations went down");
  le(a.prompt_tokens, b.prompt_tokens, "prompt tokens went down");
  le(a.generated_tokens, b.generated_tokens, "generated tokens went down");
  le(a.steps, b.steps, "steps went down");
  le(a.response_hits, b.response_hits, "response hits went down");
  le(a.loads, b.loads, "model loads went down");
  le(a.preemptions, b.preemptions, "preemptions went down");
  le(a.busy, b.busy, "busy time went down");
  le(a.latency_sum, b.latency_sum, "latency sum went down");
  le(a.load, b.load, "load time went down");
  if (b.busy < 0 || b.saved < 0 || b.load < 0) fail("a negative time");
}

// The cache's saved time is the figures of the hits recorded with one, plus an estimate for the hits
// recorded without (the mean busy time per batched item, which may fall): exactly the figures while
// every hit had one, never less than them.
struct saved_figures {
  std::int64_t sum = 0;
  bool estimated = false;
};

void check_saved(const counters& c, const saved_figures& f) {
  if (c.saved < f.sum) fail("saved time below the recorded figures", c.saved, f.sum);
  if (!f.estimated && c.saved != f.sum) fail("saved time is not the recorded figures", c.saved, f.sum);
}

void check_exports(const fc::ledger_snapshot& s) {
  const std::string json = fc::to_json(s);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const std::exception&) {
    fail("to_json is not JSON");
  }
  const std::string prom = fc::to_prometheus(s);
  for (const char* bad : {"nan", "NaN"})
    if (prom.find(bad) != std::string::npos) fail("NaN in the Prometheus export");
  (void)fc::to_table(s);
}

// snapshot() must never throw on accepted records.
fc::ledger_snapshot checked_snapshot(const fc::ledger<frugal::manual_clock>& ledger) {
  try {
    return ledger.snapshot();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "snapshot threw: %s\n", e.what());
    fail("snapshot() threw");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  frugal::manual_clock clock;
  fc::ledger_options o{
      .prices = {{.gpu_class = "A100",
                  .on_demand = fc::rate::per_hour(fc::money::parse("$3.60")),
                  .spot = fc::rate::per_hour(fc::money::parse("$1.10"))}},
      .devices = {{.gpu_class = "A100"}, {.gpu_class = "A100", .pricing = fc::billing::spot}},
      .share_idle = static_cast<fc::idle_sharing>(fdp.ConsumeIntegralInRange<int>(0, 2)),
      .expected_interval = fdp.ConsumeBool() ? std::chrono::nanoseconds(
                                                   fdp.ConsumeIntegralInRange<std::int64_t>(1, 1'000'000'000))
                                             : 0ns,
      // Mostly small histograms (fast runs), sometimes the default hour.
      .latency_highest =
          fdp.ConsumeBool()
              ? std::chrono::nanoseconds(std::chrono::hours(1))
              : std::chrono::nanoseconds(fdp.ConsumeIntegralInRange<std::int64_t>(1'000'000, 60'000'000'000)),
  };
  fc::ledger<frugal::manual_clock> ledger(std::move(o), clock);
  const fc::feature_id features[] = {ledger.feature("chat"), ledger.feature("search")};
  std::uint64_t want_requests = 0, want_batches = 0, want_loads = 0, want_escalations = 0,
                want_generations = 0, want_steps = 0;
  saved_figures saved;
  counters last = read(ledger.snapshot());

  for (int step = 0; step < 64 && fdp.remaining_bytes() > 0; ++step) {
    const fc::feature_id feature = features[fdp.ConsumeIntegralInRange<int>(0, 1)];
    const std::size_t device = fdp.ConsumeIntegralInRange<std::size_t>(0, 2);  // 2 is no device
    const bool bad_device = device >= 2;
    switch (fdp.ConsumeIntegralInRange<int>(0, 10)) {
      case 0: {
        const fc::batch_record b{.feature = feature,
                                 .device = device,
                                 .busy = duration(fdp),
                                 .batch_size = fdp.ConsumeIntegral<std::uint32_t>(),
                                 .capacity = fdp.ConsumeIntegral<std::uint32_t>(),
                                 .tokens_in = fdp.ConsumeIntegral<std::uint64_t>(),
                                 .tokens_out = fdp.ConsumeIntegral<std::uint64_t>()};
        const bool bad = bad_device || !in_range(b.busy) || b.batch_size == 0 ||
                         (b.capacity != 0 && b.capacity < b.batch_size);
        expect(bad, "record_batch", [&] { ledger.record_batch(b); });
        want_batches += !bad;
        break;
      }
      case 1: {
        const auto d = duration(fdp);
        const auto outcome = static_cast<fc::outcome>(fdp.ConsumeIntegralInRange<int>(0, fc::outcome_count));
        const bool bad = !in_range(d) || static_cast<std::size_t>(outcome) >= fc::outcome_count;
        expect(bad, "record_request", [&] { ledger.record_request(feature, d, outcome); });
        want_requests += !bad;
        break;
      }
      case 2: {
        const auto d = duration(fdp);
        expect(!in_range(d), "record_cache_hit", [&] { ledger.record_cache_hit(feature, d); });
        if (in_range(d)) saved.sum += d.count();
        break;
      }
      case 3:
        ledger.record_cache_hit(feature);
        saved.estimated = true;
        break;
      case 4: {
        const auto d = duration(fdp);
        if (fdp.ConsumeBool()) {
          expect(!in_range(d), "record_semantic_hit", [&] { ledger.record_semantic_hit(feature, d); });
          if (in_range(d)) saved.sum += d.count();
        } else {
          expect(!in_range(d), "record_remote_hit", [&] { ledger.record_remote_hit(feature, d); });
          saved.estimated |= in_range(d);
        }
        break;
      }
      case 5: {
        const auto d = duration(fdp);
        const bool bad = bad_device || !in_range(d);
        expect(bad, "record_model_load", [&] { ledger.record_model_load(device, d); });
        want_loads += !bad;
        break;
      }
      case 6: {
        const auto d = duration(fdp);
        switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
          case 0: {
            const std::uint64_t redone = fdp.ConsumeIntegral<std::uint64_t>();
            expect(bad_device || !in_range(d), "record_preemption",
                   [&] { ledger.record_preemption(device, redone, d); });
            break;
          }
          case 1:
            expect(!in_range(d), "record_escalation", [&] { ledger.record_escalation(feature, d); });
            want_escalations += in_range(d);
            break;
          default: {
            const auto spent = duration(fdp);
            expect(!in_range(d) || !in_range(spent), "record_cascade_answer",
                   [&] { ledger.record_cascade_answer(feature, d, spent); });
          }
        }
        break;
      }
      case 7: {
        const std::uint64_t cap = fdp.ConsumeIntegral<std::uint64_t>(),
                            used = fdp.ConsumeIntegral<std::uint64_t>();
        expect(bad_device || cap == 0 || used > cap, "record_memory",
               [&] { ledger.record_memory(device, used, cap); });
        break;
      }
      case 8: {
        // The clock jumps, up to years at once: wall-time sums must saturate, not wrap. The clock itself
        // stops short of its own range (a time_point past it is the clock's bug, not the ledger's).
        const std::int64_t jump = fdp.ConsumeIntegralInRange<std::int64_t>(0, std::int64_t{1} << 62);
        const std::int64_t room =
            std::numeric_limits<std::int64_t>::max() - clock.now().time_since_epoch().count();
        clock.advance(std::chrono::nanoseconds(std::min(jump, room)));
        break;
      }
      case 9: {
        // A decoder's records: tokens, token latencies, response hits and step costs.
        const auto d = duration(fdp);
        switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
          case 0: {
            const fc::generation_record g{
                .feature = feature,
                .prompt_tokens = fdp.ConsumeIntegral<std::uint64_t>(),
                .cached_prompt_tokens = fdp.ConsumeIntegral<std::uint64_t>(),
                .generated_tokens = fdp.ConsumeIntegral<std::uint64_t>(),
                .time_to_first_token =
                    fdp.ConsumeBool() ? std::optional<std::chrono::nanoseconds>(d) : std::nullopt};
            const bool bad =
                g.cached_prompt_tokens > g.prompt_tokens || (g.time_to_first_token && !in_range(d));
            expect(bad, "record_generation", [&] { ledger.record_generation(g); });
            want_generations += !bad;
            break;
          }
          case 1: {
            const std::uint64_t p = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<std::uint64_t>(0, 4096)
                                                      : fdp.ConsumeIntegral<std::uint64_t>();
            const std::uint64_t n = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<std::uint64_t>(0, 256)
                                                      : fdp.ConsumeIntegral<std::uint64_t>();
            const bool bad = (p == 0 && n == 0) || !in_range(d);
            expect(bad, "record_step_cost", [&] { ledger.record_step_cost(p, n, d); });
            want_steps += !bad;
            break;
          }
          case 2:
            expect(!in_range(d), "record_time_to_first_token",
                   [&] { ledger.record_time_to_first_token(feature, d); });
            break;
          case 3:
            expect(!in_range(d), "record_inter_token_latency",
                   [&] { ledger.record_inter_token_latency(feature, d); });
            break;
          default:
            ledger.record_response_hit(feature, fdp.ConsumeIntegral<std::uint64_t>(),
                                       fdp.ConsumeIntegral<std::uint64_t>());
            // Priced at the step costs, which the next steps may change.
            saved.estimated = true;
        }
        break;
      }
      default: {
        const fc::ledger_snapshot s = checked_snapshot(ledger);
        const counters now = read(s);
        check_monotone(last, now);
        check_saved(now, saved);
        last = now;
        check_exports(s);
      }
    }
  }
  const fc::ledger_snapshot s = checked_snapshot(ledger);
  const counters now = read(s);
  check_monotone(last, now);
  check_saved(now, saved);
  if (now.requests != want_requests)
    fail("requests counted", static_cast<long long>(now.requests), static_cast<long long>(want_requests));
  if (now.batches != want_batches)
    fail("batches counted", static_cast<long long>(now.batches), static_cast<long long>(want_batches));
  if (now.loads != want_loads)
    fail("model loads counted", static_cast<long long>(now.loads), static_cast<long long>(want_loads));
  if (s.total.escalations != want_escalations)
    fail("escalations counted", static_cast<long long>(s.total.escalations),
         static_cast<long long>(want_escalations));
  if (now.generations != want_generations)
    fail("generations counted", static_cast<long long>(now.generations),
         static_cast<long long>(want_generations));
  if (now.steps != want_steps)
    fail("steps counted", static_cast<long long>(now.steps), static_cast<long long>(want_steps));
  check_exports(s);
  return 0;
}
