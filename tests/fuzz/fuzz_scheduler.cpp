// Random submits (prompts from a tiny alphabet, so prefixes repeat), cancels, steps completed with a fake
// model's logits or sampled tokens or failed, clock moves and a close, on a scheduler over a small KV cache,
// against invariants: a step never exceeds its token budget or runs a decode token after a prefill chunk;
// stats add up after every operation; every sequence resolves exactly once; when all are done no block is
// referenced and no KV sequence is open.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <vector>

#include "frugal/clock.hpp"
#include "frugal/kv.hpp"
#include "frugal/scheduler.hpp"

namespace {

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_scheduler: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

constexpr std::size_t vocab = 8;

void logits_for(const frugal::step& st, std::vector<float>& out) {
  out.assign(st.logits_rows() * vocab, 0);
  std::size_t row = 0;
  for (const auto& e : st.entries()) {
    if (!e.logits) continue;
    std::uint64_t h = e.first_position * 1315423911u;
    for (auto t : e.tokens) h = (h ^ static_cast<std::uint64_t>(t)) * 0x100000001b3ull;
    for (std::size_t v = 0; v < vocab; ++v) out[row * vocab + v] = static_cast<float>((h >> (v * 3)) & 7);
    ++row;
  }
}

void check_stats(const frugal::scheduler_stats& s) {
  const auto resolved = s.finished_stop + s.finished_length + s.failed.total();
  if (resolved + s.running + s.waiting != s.submitted)
    fail("stats do not add up", static_cast<long long>(resolved + s.running + s.waiting),
         static_cast<long long>(s.submitted));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::size_t B = in.ConsumeIntegralInRange<std::size_t>(1, 6);
  const std::size_t blocks = in.ConsumeIntegralInRange<std::size_t>(1, 24);
  frugal::kv_cache_options ko{.block_tokens = B, .layers = 1, .kv_heads = 1, .head_dim = 1};
  ko.budget_bytes = blocks * 2 * sizeof(float) * B;
  ko.prefix_caching = in.ConsumeBool();
  frugal::kv_cache kv(ko);
  const std::size_t max_running = in.ConsumeIntegralInRange<std::size_t>(1, 6);
  const frugal::scheduler_options so{
      .max_running = max_running,
      .max_waiting = in.ConsumeIntegralInRange<std::size_t>(1, 8),
      .step_tokens = max_running + in.ConsumeIntegralInRange<std::size_t>(0, 10),
      .max_context = in.ConsumeIntegralInRange<std::size_t>(0, 40),
      .priority_levels = 3,
      .vocab_size = vocab};
  frugal::manual_clock clock;
  std::vector<int> resolutions;
  {
    frugal::scheduler<frugal::manual_clock> s(kv, so, clock);
    std::vector<frugal::sequence_id> ids;
    std::vector<float> logits;
    std::size_t ops = 0;
    while (in.remaining_bytes() > 0 && ops++ < 400) {
      switch (in.ConsumeIntegralInRange<int>(0, 5)) {
        case 0:
        case 1: {
          std::vector<frugal::kv_token> prompt(in.ConsumeIntegralInRange<std::size_t>(1, 30));
          for (auto& t : prompt) t = in.ConsumeIntegralInRange<int>(0, 2);
          frugal::scheduler<frugal::manual_clock>::request r{
              .prompt = std::move(prompt),
              .sampling = {.temperature = in.ConsumeBool() ? 0.5f : 0.0f, .top_p = 0.7f, .seed = 1},
              .max_tokens = in.ConsumeIntegralInRange<std::size_t>(1, 20),
              .stop = {in.ConsumeIntegralInRange<int>(0, 9)},
              .priority = in.ConsumeIntegralInRange<std::size_t>(0, 2)};
          if (in.ConsumeBool())
            r.deadline = clock.now() + std::chrono::milliseconds(in.ConsumeIntegral<std::uint8_t>());
          const std::size_t slot = resolutions.size();
          resolutions.push_back(0);
          ids.push_back(s.submit(std::move(r), [&resolutions, slot](frugal::result<frugal::generation>) {
            ++resolutions[slot];
          }));
          break;
        }
        case 2:
          if (!ids.empty()) s.cancel(ids[in.ConsumeIntegralInRange<std::size_t>(0, ids.size() - 1)]);
          break;
        case 3:
          clock.advance(std::chrono::milliseconds(in.ConsumeIntegralInRange<int>(0, 20)));
          break;
        case 4:
          if (in.ConsumeIntegralInRange<int>(0, 15) == 0) s.close();
          break;
        default: {
          auto st = s.try_next_step();
          if (!st) break;
          if (st->tokens() > so.step_tokens) fail("step over budget", static_cast<long long>(st->tokens()));
          bool prefill = false;
          for (const auto& e : st->entries()) {
            if (e.decode && prefill) fail("a decode token after a prefill chunk");
            prefill = prefill || !e.decode;
          }
          const int how = in.ConsumeIntegralInRange<int>(0, 9);
          if (how == 0) {
            s.fail(*st, std::make_exception_ptr(std::runtime_error("model")));
          } else if (how == 1) {
            std::vector<frugal::kv_token> toks(st->logits_rows(), 3);
            s.complete_sampled(*st, toks);
          } else {
            logits_for(*st, logits);
            s.complete(*st, logits);
          }
        }
      }
      if (ops % 16 == 0) check_stats(s.stats());  // a snapshot copies two histograms: not after every op
    }
    check_stats(s.stats());
    s.close();
    for (int n = 0; !s.idle(); ++n) {
      if (n > 100000) fail("the scheduler does not drain");
      auto st = s.try_next_step();
      if (!st) {  // the sweep may have ended the last ones (cancelled, expired)
        if (!s.idle()) fail("not idle, yet no step");
        break;
      }
      logits_for(*st, logits);
      s.complete(*st, logits);
    }
    check_stats(s.stats());
    if (kv.stats().blocks_used != 0) fail("blocks leaked", static_cast<long long>(kv.stats().blocks_used));
  }
  for (std::size_t i = 0; i < resolutions.size(); ++i)
    if (resolutions[i] != 1)
      fail("a sequence resolved other than once", static_cast<long long>(i), resolutions[i]);
  if (kv.stats().sequences != 0) fail("KV sequences left open", static_cast<long long>(kv.stats().sequences));
  return 0;
}
