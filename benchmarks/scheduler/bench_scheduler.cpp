// The scheduler's own time per step: try_next_step + complete (sampling included) with a given number of
// running sequences decoding, and logits handed in ready-made, so nothing of a model is timed. Compare it
// with the model's step time at the same batch. A finished sequence is resubmitted at once (inside the
// timing: admission and its prefill step are part of the scheduler's cost). Args: {running sequences,
// vocab size, sampling: 0 greedy, 1 temperature 0.8 and top-p 0.95}.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "frugal/kv.hpp"
#include "frugal/scheduler.hpp"

namespace {

void bench_step(benchmark::State& state) {
  const auto running = static_cast<std::size_t>(state.range(0));
  const auto vocab = static_cast<std::size_t>(state.range(1));
  const bool sampled = state.range(2) != 0;
  constexpr std::size_t prompt_len = 64, max_tokens = 512, B = 16;
  frugal::kv_cache_options ko{.block_tokens = B, .layers = 1, .kv_heads = 1, .head_dim = 2};
  ko.budget_bytes = running * ((prompt_len + max_tokens) / B + 2) * 2 * sizeof(float) * 2 * B;
  frugal::kv_cache kv(ko);
  frugal::scheduler<> s(kv, {.max_running = running, .step_tokens = 512, .vocab_size = vocab});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-8, 8);
  std::vector<float> logits(running * vocab);
  for (auto& x : logits) x = u(rng);
  std::size_t finished = 0, next_prompt = 0;
  auto submit = [&] {
    std::vector<frugal::kv_token> prompt(prompt_len);
    for (std::size_t i = 0; i < prompt_len; ++i)
      prompt[i] = static_cast<frugal::kv_token>((next_prompt * 131 + i) % vocab);
    ++next_prompt;
    frugal::sampling_params p{};
    if (sampled) p = {.temperature = 0.8f, .top_p = 0.95f, .seed = next_prompt};
    s.submit({.prompt = std::move(prompt), .sampling = p, .max_tokens = max_tokens},
             [&finished](frugal::result<frugal::generation>) { ++finished; });
  };
  for (std::size_t i = 0; i < running; ++i) submit();
  for (auto _ : state) {
    auto st = s.try_next_step();
    s.complete(*st, std::span<const float>(logits).first(st->logits_rows() * vocab));
    for (; finished > 0; --finished) submit();
  }
  state.counters["preemptions"] = static_cast<double>(s.stats().preemptions);
}

}  // namespace

BENCHMARK(bench_step)
    ->ArgNames({"running", "vocab", "sampled"})
    ->Args({32, 16, 0})
    ->Args({32, 49152, 0})
    ->Args({32, 49152, 1})
    ->Args({1, 49152, 0})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
