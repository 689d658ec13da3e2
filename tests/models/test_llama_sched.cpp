// The iteration-level scheduler (frugal::scheduler over the model's paged KV cache) driving SmolLM2: batch
// invariance bit for bit, and greedy answers under continuous batching equal to each prompt run alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../support/requires.hpp"
#include "llama.hpp"

namespace {

using frugal_test::gguf_model;
using frugal_test::gguf_model_path;
using frugal_test::needs;

#if FRUGAL_LLAMA_SCHED_QUICK
constexpr std::size_t batch = 16, decode_steps = 2;  // under the sanitizers
#else
constexpr std::size_t batch = 64, decode_steps = 3;
#endif

frugal::quant::thread_pool& two_threads() {
  static frugal::quant::thread_pool pool(2);
  return pool;
}

// One model per configuration for the suite; prefix caching is off unless a test is about it, so that a
// sequence run twice computes its prompt twice.
llama::model& smollm2(llama::precision p, bool invariant = false, bool prefix_caching = false) {
  static std::map<std::tuple<llama::precision, bool, bool>, std::unique_ptr<llama::model>> models;
  auto& m = models[{p, invariant, prefix_caching}];
  if (!m)
    m = llama::model::load(gguf_model_path(),
                           {.weights = p, .prefix_caching = prefix_caching, .batch_invariant = invariant});
  return *m;
}

struct job {
  std::vector<std::int32_t> prompt;
  std::size_t max_tokens = decode_steps;
  std::size_t submit_after_step = 0;  ///< submitted once this many steps have completed
};

struct outcome {
  std::vector<std::vector<float>> logits;  ///< every logits row complete() received for the job, in order
  std::optional<frugal::generation> gen;
  int resolutions = 0;
};

struct run_result {
  std::vector<outcome> jobs;
  std::size_t steps = 0, widest_step = 0;  ///< steps run; most entries in one step
  frugal::scheduler_stats stats;
};

// The user's loop: the scheduler hands out steps, the model runs them, complete() samples. It records the
// logits rows each sequence receives, checks that every sequence resolves once, and that the KV cache holds
// no block afterwards.
// `transform`, when set, changes a step's logits before they are recorded and sampled (the negative control).
using logits_transform = std::function<void(const frugal::step&, std::vector<float>&)>;

run_result drive(llama::model& m, const std::vector<job>& jobs, frugal::scheduler_options o,
                 frugal::quant::executor* threads = &two_threads(), const logits_transform& transform = {}) {
  o.vocab_size = m.cfg().vocab;
  o.max_context = m.cfg().context;
  run_result r;
  r.jobs.resize(jobs.size());
  std::map<frugal::sequence_id, std::size_t> job_of;
  {
    frugal::scheduler<> s(m.kv(), o);
    std::vector<bool> submitted(jobs.size());
    const auto submit_due = [&] {
      for (std::size_t i = 0; i < jobs.size(); ++i)
        if (!submitted[i] && jobs[i].submit_after_step <= r.steps) {
          submitted[i] = true;
          const frugal::sequence_id id =
              s.submit({.prompt = jobs[i].prompt, .max_tokens = jobs[i].max_tokens},
                       [&r, i](frugal::result<frugal::generation> g) {
                         ++r.jobs[i].resolutions;
                         if (g) r.jobs[i].gen = std::move(g).value();
                       });
          job_of[id] = i;
        }
    };
    const std::size_t v = m.cfg().vocab;
    for (submit_due();; submit_due()) {
      std::optional<frugal::step> st = s.try_next_step();
      if (!st) {
        bool all = true;
        for (std::size_t i = 0; i < jobs.size(); ++i) all = all && submitted[i];
        if (all) break;
        ++r.steps;  // nothing to run: let time pass for the late arrivals
        continue;
      }
      std::vector<float> logits = m.run_step(*st, threads);
      REQUIRE(logits.size() == st->logits_rows() * v);
      if (transform) transform(*st, logits);
      std::size_t row = 0;
      for (const frugal::step_entry& e : st->entries())
        if (e.logits) {
          r.jobs[job_of.at(e.sequence)].logits.emplace_back(
              logits.begin() + static_cast<std::ptrdiff_t>(row * v),
              logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * v));
          ++row;
        }
      r.widest_step = std::max(r.widest_step, st->size());
      s.complete(*st, logits);
      ++r.steps;
    }
    r.stats = s.stats();
  }
  for (const outcome& o2 : r.jobs) {
    CHECK(o2.resolutions == 1);
    CHECK(o2.gen.has_value());
  }
  const frugal::kv_cache_stats ks = m.kv().stats();
  CHECK(ks.blocks_used == 0);
  CHECK(ks.sequences == 0);
  return r;
}

// Distinct prompts of 6 to 20 tokens.
std::vector<std::vector<std::int32_t>> prompts(const llama::model& m, std::size_t n) {
  static const char* subjects[] = {
      "The cat",       "A river",      "My neighbour", "The old computer", "Every morning the sun",
      "The committee", "A small boat", "The library"};
  static const char* verbs[] = {"walked across", "remembered", "painted", "argued about",
                                "counted",       "sang to",    "forgot",  "measured"};
  std::vector<std::vector<std::int32_t>> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::string s = std::string(subjects[i % 8]) + " " + verbs[(i / 8) % 8] + " the " +
                    std::to_string(i * 37 + 11) +
                    (i % 3 == 0   ? " green hills near the sea, and then"
                     : i % 3 == 1 ? " stars"
                                  : " of them because");
    out.push_back(m.tokenizer().encode(s));
  }
  return out;
}

void check_alone_vs_batched(llama::model& m, std::size_t n) {
  const auto ps = prompts(m, n);
  std::vector<job> all;
  for (const auto& p : ps) all.push_back({.prompt = p});
  const run_result together = drive(m, all, {.max_running = n, .step_tokens = 1024});
  // The first step prefilled every prompt at once.
  CHECK(together.widest_step == n);
  for (const std::size_t i : {std::size_t{0}, n / 5, n / 3, n / 2, n - 2, n - 1}) {
    CAPTURE(i);
    const run_result alone = drive(m, {all[i]}, {.max_running = 1, .step_tokens = 1024});
    REQUIRE(alone.jobs[0].logits.size() == decode_steps);
    CHECK(alone.jobs[0].logits == together.jobs[i].logits);
    CHECK(alone.jobs[0].gen->tokens == together.jobs[i].gen->tokens);
  }
}

void check_chunking(llama::model& m) {
  // A prompt of about 60 tokens: prefilled in one step, or in chunks of 7 tokens beside another sequence.
  std::vector<std::int32_t> prompt;
  for (const auto& p : prompts(m, 4)) prompt.insert(prompt.end(), p.begin(), p.end());
  const job j{.prompt = prompt};
  const run_result whole = drive(m, {j}, {.max_running = 2, .step_tokens = 1024});
  const run_result chunked =
      drive(m, {j, {.prompt = prompts(m, 5)[4], .max_tokens = 24}}, {.max_running = 2, .step_tokens = 8});
  CHECK(whole.steps == decode_steps);
  CHECK(chunked.steps > prompt.size() / 8);
  CHECK(whole.jobs[0].logits == chunked.jobs[0].logits);
  CHECK(whole.jobs[0].gen->tokens == chunked.jobs[0].gen->tokens);
}

void check_prefix_cache(llama::model& m) {
  // A 40-token shared head: its first two blocks come from the cache the second time.
  std::vector<std::int32_t> prompt;
  for (const auto& p : prompts(m, 3)) prompt.insert(prompt.end(), p.begin(), p.end());
  prompt.resize(40);
  const job j{.prompt = prompt};
  const run_result computed = drive(m, {j}, {.max_running = 1});
  const run_result cached = drive(m, {j}, {.max_running = 1});
  CHECK(computed.jobs[0].gen->cached_tokens == 0);
  CHECK(cached.jobs[0].gen->cached_tokens == 32);
  CHECK(cached.stats.prefix_hit_tokens == 32);
  CHECK(computed.jobs[0].logits == cached.jobs[0].logits);
  m.kv().drop_cached();
}

}  // namespace

TEST_CASE("llama scheduler: native logits are the same bits alone or in a step with 63 others" *
          needs(gguf_model())) {
  check_alone_vs_batched(smollm2(llama::precision::native), batch);
}

TEST_CASE("llama scheduler: native logits are the same bits prefilled at once or in chunks" *
          needs(gguf_model())) {
  check_chunking(smollm2(llama::precision::native));
}

TEST_CASE("llama scheduler: native logits are the same bits from the prefix cache or computed" *
          needs(gguf_model())) {
  check_prefix_cache(smollm2(llama::precision::native, false, true));
}

TEST_CASE(
    "llama scheduler: fp32 with batch_invariant: the same bits alone or batched, chunked or not, cached "
    "or not" *
    needs(gguf_model())) {
  check_alone_vs_batched(smollm2(llama::precision::fp32, true), batch);
  check_chunking(smollm2(llama::precision::fp32, true));
  check_prefix_cache(smollm2(llama::precision::fp32, true, true));
}

TEST_CASE("llama scheduler: int8 and int4 logits are the same bits alone or batched" * needs(gguf_model())) {
  check_alone_vs_batched(smollm2(llama::precision::int8), batch / 4);
  check_alone_vs_batched(smollm2(llama::precision::int4), batch / 4);
}

TEST_CASE(
    "llama scheduler: the negative control: a reduction over the step's rows changes the bits batched, and "
    "the comparison the invariance cases use finds it" *
    needs(gguf_model())) {
  // Each row's first logit goes through a sum over the step's other rows, in step order: x + 1024 - 1024 for
  // each of them. Alone there is none and x is unchanged; batched, x is rounded to a multiple of 2^-13 (the
  // spacing of floats at 1024), which changes every logit with bits below that. So a batch-dependent result
  // is there by construction, and the check above must see it, or it proves nothing.
  const logits_transform order_dependent = [](const frugal::step& st, std::vector<float>& logits) {
    const std::size_t rows = st.logits_rows(), v = logits.size() / std::max<std::size_t>(rows, 1);
    for (std::size_t r = 0; r < rows; ++r) {
      volatile float acc = logits[r * v];
      for (std::size_t other = 0; other + 1 < rows; ++other) {
        acc = acc + 1024.0f;
        acc = acc - 1024.0f;
      }
      logits[r * v] = acc;
    }
  };
  llama::model& m = smollm2(llama::precision::native);
  const auto ps = prompts(m, 8);
  std::vector<job> all;
  for (const auto& p : ps) all.push_back({.prompt = p, .max_tokens = 1});
  const run_result together =
      drive(m, all, {.max_running = 8, .step_tokens = 1024}, &two_threads(), order_dependent);
  REQUIRE(together.widest_step == 8);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const run_result alone = drive(m, {all[i]}, {.max_running = 1}, &two_threads(), order_dependent);
    const float x = alone.jobs[0].logits.at(0).at(0);
    CAPTURE(i);
    CAPTURE(x);
    // The construction's premise: this logit has bits below 2^-13.
    REQUIRE(std::ldexp(x, 13) != std::nearbyint(std::ldexp(x, 13)));
    differ += alone.jobs[0].logits != together.jobs[i].logits;
  }
  CHECK(differ == all.size());
}

TEST_CASE("llama scheduler: greedy answers under continuous batching equal each prompt run alone" *
          needs(gguf_model())) {
  llama::model& m = smollm2(llama::precision::native);
  const auto ps = prompts(m, 8);
  std::vector<job> jobs;
  // Different answer lengths and arrivals: sequences join and leave between steps, and a long prompt is
  // chunked beside the decodes.
  for (std::size_t i = 0; i < ps.size(); ++i)
    jobs.push_back({.prompt = ps[i], .max_tokens = 3 + (i * 5) % 9, .submit_after_step = (i * 3) % 7});
  const run_result batched = drive(m, jobs, {.max_running = 5, .step_tokens = 16});
  CHECK(batched.widest_step > 1);
  CHECK(batched.stats.finished_length + batched.stats.finished_stop == jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(i);
    job alone = jobs[i];
    alone.submit_after_step = 0;
    const run_result one = drive(m, {alone}, {.max_running = 1});
    CHECK(one.jobs[0].gen->tokens == batched.jobs[i].gen->tokens);
    CHECK(batched.jobs[i].gen->tokens.size() == jobs[i].max_tokens);
  }
}
