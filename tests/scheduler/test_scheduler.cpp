#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <vector>

#include "../support/errors.hpp"
#include "frugal/clock.hpp"
#include "sched_support.hpp"

using namespace std::chrono_literals;
using sched_test::fake_model;
using sched_test::reference;
using sched = frugal::scheduler<frugal::manual_clock>;
using tokens = std::vector<frugal::kv_token>;

namespace {

constexpr std::size_t vocab = 16;

tokens iota(std::size_t n, frugal::kv_token first = 100) {
  tokens v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Runs steps until nothing is left; returns how many ran.
std::size_t drain(sched& s, fake_model& m, frugal::manual_clock* clock = nullptr) {
  std::size_t n = 0;
  while (auto st = s.try_next_step()) {
    REQUIRE(st->tokens() <= s.options().step_tokens);
    s.complete(*st, m.run(*st));
    if (clock) clock->advance(1ms);
    REQUIRE(++n < 100000);
  }
  return n;
}

std::optional<frugal::scheduler_errc> code(frugal::light_future<frugal::generation>& f) {
  try {
    f.get();
  } catch (const frugal::scheduler_error& e) {
    return e.code();
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("scheduler: a greedy sequence generates what the model gives it alone, and frees its blocks") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  frugal::manual_clock clock;
  sched s(kv, {.max_running = 4, .step_tokens = 8, .vocab_size = vocab}, clock);
  fake_model m(kv, vocab);
  const tokens prompt = iota(11);
  auto t = s.submit({.prompt = prompt, .max_tokens = 9});
  CHECK(t.id != 0);
  CHECK(drain(s, m, &clock) == 2 + 8);  // 11 prompt tokens in chunks of 8 and 3, then 8 decode steps
  const frugal::generation g = t.result.get();
  const auto want = reference(prompt, 9, {}, {}, vocab);
  CHECK(g.tokens == want.tokens);
  CHECK(g.reason == frugal::finish_reason::length);
  CHECK(g.prompt_tokens == 11);
  CHECK(g.time_to_first_token == 1ms);  // the second chunk completes 1 ms after the first
  CHECK(kv.stats().blocks_used == 0);
  CHECK(kv.stats().sequences == 0);
  const auto st = s.stats();
  CHECK(st.submitted == 1);
  CHECK(st.finished_length == 1);
  CHECK(st.prefill_tokens == 11);
  CHECK(st.decode_tokens == 8);
  CHECK(st.generated_tokens == 9);
  CHECK(st.time_to_first_token.count == 1);
  CHECK(st.inter_token_latency.count == 8);
  CHECK(st.inter_token_latency.value_at(0.5) / 1000 == 1000);  // within the histogram's 1/2048
  CHECK(s.idle());
}

TEST_CASE("scheduler: a stop token ends the sequence, is not streamed and not in the result") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.vocab_size = vocab});
  fake_model m(kv, vocab);
  const tokens prompt = iota(5);
  const auto free_run = reference(prompt, 12, {}, {}, vocab);
  const frugal::kv_token stop = free_run.tokens[3];
  const auto want = reference(prompt, 12, {stop}, {}, vocab);
  REQUIRE(want.stop == stop);
  tokens streamed;
  auto t = s.submit({.prompt = prompt, .max_tokens = 12, .stop = {stop}, .on_token = [&](frugal::kv_token x) {
                       streamed.push_back(x);
                     }});
  drain(s, m);
  const auto g = t.result.get();
  CHECK(g.reason == frugal::finish_reason::stop);
  CHECK(g.stop_token == stop);
  CHECK(g.tokens == want.tokens);
  CHECK(streamed == want.tokens);
  CHECK(s.stats().finished_stop == 1);
}

TEST_CASE("scheduler: decode tokens come first and a long prompt is chunked into what the budget leaves") {
  frugal::kv_cache kv(sched_test::kv_options(64));
  frugal::manual_clock clock;
  sched s(kv, {.max_running = 4, .step_tokens = 8, .vocab_size = vocab}, clock);
  fake_model m(kv, vocab);
  auto a = s.submit({.prompt = iota(3), .max_tokens = 30});
  auto b = s.submit({.prompt = iota(3, 7), .max_tokens = 30});
  {
    auto st = s.try_next_step();  // both prompts in one step
    REQUIRE(st);
    CHECK(st->size() == 2);
    CHECK(st->logits_rows() == 2);
    s.complete(*st, m.run(*st));
  }
  auto c = s.submit({.prompt = iota(60, 300), .max_tokens = 2});
  std::size_t chunks = 0;
  for (int i = 0; i < 10; ++i) {
    auto st = s.try_next_step();
    REQUIRE(st);
    CHECK(st->tokens() <= 8);
    REQUIRE(st->size() >= 2);
    CHECK(((*st)[0].decode && (*st)[1].decode));
    CHECK((*st)[0].sequence == a.id);
    CHECK((*st)[1].sequence == b.id);
    CHECK(st->decode_tokens() == 2);
    if (st->size() == 3) {
      const auto& e = (*st)[2];
      CHECK(e.sequence == c.id);
      CHECK_FALSE(e.decode);
      CHECK(e.first_position == chunks * 6);
      CHECK(e.tokens.size() == std::min<std::size_t>(6, 60 - chunks * 6));
      CHECK(e.logits == (e.first_position + e.tokens.size() == 60));
      ++chunks;
    }
    s.complete(*st, m.run(*st));
  }
  CHECK(chunks == 10);
  drain(s, m);
  CHECK(a.result.get().tokens == reference(iota(3), 30, {}, {}, vocab).tokens);
  CHECK(c.result.get().tokens == reference(iota(60, 300), 2, {}, {}, vocab).tokens);
  CHECK(kv.stats().blocks_used == 0);
}

TEST_CASE(
    "scheduler: a second sequence with the same prompt prefix is served its full blocks from the cache") {
  frugal::kv_cache kv(sched_test::kv_options(32));
  sched s(kv, {.vocab_size = vocab});
  fake_model m(kv, vocab);
  const tokens prompt = iota(18);
  auto a = s.submit({.prompt = prompt, .max_tokens = 3});
  drain(s, m);
  tokens longer = prompt;
  longer.push_back(5);
  auto b = s.submit({.prompt = longer, .max_tokens = 3});
  auto c = s.submit({.prompt = prompt, .max_tokens = 3, .salt = frugal::kv_salt::of("other")});
  drain(s, m);
  CHECK(a.result.get().cached_tokens == 0);
  const auto gb = b.result.get();
  CHECK(gb.cached_tokens == 16);
  CHECK(gb.tokens == reference(longer, 3, {}, {}, vocab).tokens);
  CHECK(c.result.get().cached_tokens == 0);
  CHECK(s.stats().prefix_hit_tokens == 16);
}

TEST_CASE(
    "scheduler: when blocks run out the lowest-ranked sequence is preempted and recomputed, outputs "
    "unchanged") {
  // 6 blocks of 4 tokens: each sequence peaks at 5 + 12 - 1 = 16 tokens (4 blocks), so two cannot both
  // finish.
  frugal::kv_cache kv(sched_test::kv_options(6));
  sched s(kv, {.max_running = 4, .step_tokens = 8, .priority_levels = 2, .vocab_size = vocab});
  fake_model m(kv, vocab);
  auto low = s.submit({.prompt = iota(5, 10), .max_tokens = 12, .priority = 0});
  auto high = s.submit({.prompt = iota(5, 50), .max_tokens = 12, .priority = 1});
  auto later = s.submit({.prompt = iota(5, 80), .max_tokens = 12, .priority = 1});
  drain(s, m);
  const auto gl = low.result.get(), gh = high.result.get(), gt = later.result.get();
  CHECK(gl.tokens == reference(iota(5, 10), 12, {}, {}, vocab).tokens);
  CHECK(gh.tokens == reference(iota(5, 50), 12, {}, {}, vocab).tokens);
  CHECK(gt.tokens == reference(iota(5, 80), 12, {}, {}, vocab).tokens);
  CHECK(gh.preemptions == 0);
  CHECK(gl.preemptions + gt.preemptions > 0);
  const auto st = s.stats();
  CHECK(st.preemptions == gl.preemptions + gt.preemptions);
  CHECK(st.recomputed_tokens > 0);
  CHECK(kv.stats().blocks_used == 0);
}

TEST_CASE("scheduler: a sequence that can never fit is rejected at submit with too_long") {
  frugal::kv_cache kv(sched_test::kv_options(4));  // 16 tokens
  sched s(kv, {.max_context = 32, .vocab_size = vocab});
  auto fits = s.submit({.prompt = iota(10), .max_tokens = 7});  // peak 16 tokens
  auto kv_over = s.submit({.prompt = iota(10), .max_tokens = 8});
  auto ctx_over = s.submit({.prompt = iota(33), .max_tokens = 1});
  CHECK(code(kv_over.result) == frugal::scheduler_errc::too_long);
  CHECK(code(ctx_over.result) == frugal::scheduler_errc::too_long);
  CHECK_FALSE(fits.result.ready());
  CHECK(s.stats().failed.too_long == 2);
  CHECK(s.stats().failed.rejected() == 2);
}

TEST_CASE("scheduler: the model's context ends a sequence with length") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.max_context = 12, .vocab_size = vocab});
  fake_model m(kv, vocab);
  auto t = s.submit({.prompt = iota(10), .max_tokens = 100});
  drain(s, m);
  const auto g = t.result.get();
  CHECK(g.reason == frugal::finish_reason::length);
  CHECK(g.tokens.size() == 3);  // positions 10 and 11 computed; the third token would need position 12
  CHECK(g.tokens == reference(iota(10), 100, {}, {}, vocab, 12).tokens);
}

TEST_CASE("scheduler: a full waiting queue rejects at once with queue_full; close rejects with closed") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.max_running = 1, .max_waiting = 2, .step_tokens = 4, .vocab_size = vocab});
  auto a = s.submit({.prompt = iota(2)});
  auto b = s.submit({.prompt = iota(2)});
  auto c = s.submit({.prompt = iota(2)});
  CHECK(code(c.result) == frugal::scheduler_errc::queue_full);
  s.close();
  auto d = s.submit({.prompt = iota(2)});
  CHECK(code(d.result) == frugal::scheduler_errc::closed);
  fake_model m(kv, vocab);
  drain(s, m);  // what was queued still runs
  CHECK(a.result.get().tokens.size() == 256);
  CHECK(b.result.get().tokens.size() == 256);
  CHECK_FALSE(s.next_step(0ns));
  const auto st = s.stats();
  CHECK(st.failed.queue_full == 1);
  CHECK(st.failed.closed == 1);
}

TEST_CASE(
    "scheduler: cancel resolves a waiting sequence at once and frees a running one's blocks at the next "
    "step boundary") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.max_running = 1, .step_tokens = 8, .vocab_size = vocab});
  fake_model m(kv, vocab);
  auto run = s.submit({.prompt = iota(9)});
  auto wait = s.submit({.prompt = iota(9)});
  auto st = s.try_next_step();
  REQUIRE(st);
  CHECK(s.cancel(wait.id));
  CHECK(code(wait.result) == frugal::scheduler_errc::cancelled);
  CHECK_FALSE(s.cancel(wait.id));
  CHECK(s.cancel(run.id));
  CHECK_FALSE(run.result.ready());  // in the outstanding step
  CHECK(kv.stats().blocks_used == 2);
  s.complete(*st, m.run(*st));
  CHECK(code(run.result) == frugal::scheduler_errc::cancelled);
  CHECK(kv.stats().blocks_used == 0);
  CHECK_FALSE(s.cancel(run.id));
  CHECK_FALSE(s.try_next_step());
  CHECK(s.stats().failed.cancelled == 2);
}

TEST_CASE("scheduler: a stop_token cancels too, and a sequence stopped before submit is rejected") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.vocab_size = vocab});
  fake_model m(kv, vocab);
  std::stop_source src;
  auto t = s.submit({.prompt = iota(4), .stop_when = src.get_token()});
  auto st = s.try_next_step();
  s.complete(*st, m.run(*st));
  src.request_stop();
  CHECK_FALSE(s.try_next_step());
  CHECK(code(t.result) == frugal::scheduler_errc::cancelled);
  auto u = s.submit({.prompt = iota(4), .stop_when = src.get_token()});
  CHECK(code(u.result) == frugal::scheduler_errc::cancelled);
  CHECK(kv.stats().blocks_used == 0);
}

TEST_CASE("scheduler: deadlines expire waiting and running sequences with deadline_exceeded") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  frugal::manual_clock clock;
  sched s(kv, {.max_running = 1, .step_tokens = 8, .vocab_size = vocab}, clock);
  fake_model m(kv, vocab);
  auto past = s.submit({.prompt = iota(3), .deadline = clock.now()});
  CHECK(code(past.result) == frugal::scheduler_errc::deadline_exceeded);
  auto run = s.submit({.prompt = iota(3), .deadline = clock.now() + 5ms});
  auto wait = s.submit({.prompt = iota(3), .deadline = clock.now() + 3ms});
  auto st = s.try_next_step();
  s.complete(*st, m.run(*st));
  clock.advance(3ms);
  st = s.try_next_step();  // the waiting one expires here
  REQUIRE(st);
  CHECK(code(wait.result) == frugal::scheduler_errc::deadline_exceeded);
  s.complete(*st, m.run(*st));
  clock.advance(2ms);
  CHECK_FALSE(s.try_next_step());
  CHECK(code(run.result) == frugal::scheduler_errc::deadline_exceeded);
  CHECK(kv.stats().blocks_used == 0);
  CHECK(s.stats().failed.deadline_exceeded == 3);
}

TEST_CASE(
    "scheduler: the same seed gives the same tokens alone or beside others; greedy ties pick the lowest id") {
  const frugal::sampling_params p{.temperature = 0.8f, .top_p = 0.9f, .seed = 42};
  const auto want = reference(iota(6), 20, {}, p, vocab);
  frugal::kv_cache kv(sched_test::kv_options(64));
  sched s(kv, {.max_running = 8, .step_tokens = 16, .vocab_size = vocab});
  fake_model m(kv, vocab);
  std::vector<frugal::generation_ticket> others;
  for (int i = 0; i < 5; ++i)
    others.push_back(s.submit({.prompt = iota(3 + i, 40 * i), .sampling = {.temperature = 1, .seed = 7}}));
  auto t = s.submit({.prompt = iota(6), .sampling = p, .max_tokens = 20});
  drain(s, m);
  CHECK(t.result.get().tokens == want.tokens);
  const auto other_seed = reference(iota(6), 20, {}, {.temperature = 0.8f, .top_p = 0.9f, .seed = 43}, vocab);
  CHECK(other_seed.tokens != want.tokens);

  const float tie[] = {1, 3, std::numeric_limits<float>::quiet_NaN(), 3, 2};
  CHECK(frugal::sample_token(tie, {}, 0.5) == 1);
  CHECK(frugal::sample_token(tie, {.temperature = 1, .top_p = 1e-6f}, 0.99) == 1);
  const float none[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  CHECK_FALSE(frugal::sample_token(none, {}, 0.5));
}

TEST_CASE("scheduler: fail() resolves every sequence of the step with the model's exception") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.vocab_size = vocab});
  auto a = s.submit({.prompt = iota(3)});
  auto b = s.submit({.prompt = iota(3)});
  auto st = s.try_next_step();
  REQUIRE(st);
  s.fail(*st, std::make_exception_ptr(std::runtime_error("device lost")));
  CHECK_THROWS_WITH_AS(a.result.get(), "device lost", std::runtime_error);
  CHECK_THROWS_WITH_AS(b.result.get(), "device lost", std::runtime_error);
  CHECK(kv.stats().blocks_used == 0);
  CHECK(s.stats().failed.model_error == 2);
  CHECK(s.idle());
}

TEST_CASE("scheduler: complete_sampled takes the model's own tokens; bad logits fail only their sequence") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.vocab_size = 4});
  auto a = s.submit({.prompt = iota(3), .max_tokens = 2});
  auto b = s.submit({.prompt = iota(3), .max_tokens = 2});
  auto st = s.try_next_step();
  const frugal::kv_token mine[] = {9, 8};
  s.complete_sampled(*st, mine);
  st = s.try_next_step();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> rows = {0, 1, 5, 2, nan, nan, nan, nan};
  CHECK_THROWS_AS(s.complete(*st, std::span(rows).first(4)), std::invalid_argument);
  s.complete(*st, rows);  // the step was still outstanding
  CHECK(a.result.get().tokens == tokens{9, 2});
  CHECK(code(b.result) == frugal::scheduler_errc::bad_logits);
}

TEST_CASE("scheduler: an exception from on_token fails that sequence alone") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  sched s(kv, {.vocab_size = vocab});
  fake_model m(kv, vocab);
  auto a = s.submit({.prompt = iota(3), .max_tokens = 4, .on_token = [](frugal::kv_token) {
                       throw std::runtime_error("client gone");
                     }});
  auto b = s.submit({.prompt = iota(3), .max_tokens = 4});
  drain(s, m);
  CHECK_THROWS_WITH_AS(a.result.get(), "client gone", std::runtime_error);
  CHECK(b.result.get().tokens.size() == 4);
  CHECK(kv.stats().blocks_used == 0);
}

TEST_CASE("scheduler: misuse throws, naming what was wrong") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  CHECK_THROWS_WITH_AS(sched(kv, {.max_running = 8, .step_tokens = 4}),
                       "frugal::scheduler: options.step_tokens 4 is below max_running 8: every running "
                       "sequence's decode token must fit a step",
                       std::invalid_argument);
  CHECK_THROWS_AS(sched(kv, {.max_waiting = 0}), std::invalid_argument);
  sched s(kv, {.priority_levels = 2, .vocab_size = vocab});
  CHECK_THROWS_WITH_AS(s.submit({.prompt = {}}), "frugal::scheduler::submit: the prompt is empty",
                       std::invalid_argument);
  CHECK_THROWS_AS(s.submit({.prompt = iota(2), .priority = 2}), std::invalid_argument);
  CHECK_THROWS_AS(s.submit({.prompt = iota(2), .max_tokens = 0}), std::invalid_argument);
  CHECK_THROWS_AS(s.submit({.prompt = iota(2), .sampling = {.top_p = 0}}), std::invalid_argument);
  CHECK_THROWS_AS(s.submit({.prompt = iota(2), .sampling = {.temperature = -1}}), std::invalid_argument);
  CHECK(s.stats().submitted == 0);
  auto t = s.submit({.prompt = iota(2)});
  auto st = s.try_next_step();
  REQUIRE(st);
  CHECK_THROWS_AS(s.try_next_step(), std::logic_error);
  frugal::step other;
  CHECK_THROWS_AS(s.complete(other, {}), std::logic_error);
  s.fail(*st, std::make_exception_ptr(std::runtime_error("x")));
  CHECK_THROWS_AS(s.fail(*st, std::make_exception_ptr(std::runtime_error("x"))), std::logic_error);
}

TEST_CASE("scheduler: destruction resolves what is left with closed and releases its blocks") {
  frugal::kv_cache kv(sched_test::kv_options(80));
  frugal::generation_ticket a, b;
  {
    sched s(kv, {.max_running = 1, .step_tokens = 4, .vocab_size = vocab});
    a = s.submit({.prompt = iota(3)});
    b = s.submit({.prompt = iota(3)});
    fake_model m(kv, vocab);
    auto st = s.try_next_step();
    s.complete(*st, m.run(*st));
    CHECK(kv.stats().blocks_used == 1);
  }
  CHECK(code(a.result) == frugal::scheduler_errc::closed);
  CHECK(code(b.result) == frugal::scheduler_errc::closed);
  CHECK(kv.stats().blocks_used == 0);
}

TEST_CASE("scheduler: top-p sampling picks as a sort-based nucleus does") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> logit(-4, 4);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> row(1 + rng() % 40);
    for (auto& x : row) x = trial % 3 == 0 ? std::round(logit(rng)) : logit(rng);  // ties too
    const frugal::sampling_params p{.temperature = 0.5f + static_cast<float>(trial % 4) * 0.3f,
                                    .top_p = 0.05f + static_cast<float>(trial % 19) * 0.05f};
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    // The reference: sort by weight (lower id first among equals), keep the shortest run reaching top_p,
    // draw over it in id order.
    const double top = *std::max_element(row.begin(), row.end());
    std::vector<double> w(row.size());
    double total = 0;
    for (std::size_t i = 0; i < row.size(); ++i) total += w[i] = std::exp((row[i] - top) / p.temperature);
    std::vector<std::size_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return w[a] > w[b]; });
    std::vector<bool> in(row.size());
    double mass = 0;
    for (std::size_t k = 0; k < order.size() && mass < p.top_p * total; ++k) {
      in[order[k]] = true;
      mass += w[order[k]];
    }
    double run = 0;
    std::size_t want = 0;
    for (std::size_t i = 0; i < row.size(); ++i)
      if (in[i]) {
        run += w[i];
        want = i;
        if (run > u * mass) break;
      }
    CAPTURE(trial);
    CHECK(frugal::sample_token(row, p, u) == static_cast<frugal::kv_token>(want));
  }
}

TEST_CASE(
    "scheduler: greedy picks the scalar scan's token: the first of equal maxima, never a non-finite one") {
  const auto scan = [](const std::vector<float>& row) -> std::optional<frugal::kv_token> {
    std::size_t best = row.size();
    for (std::size_t i = 0; i < row.size(); ++i)
      if (std::isfinite(row[i]) && (best == row.size() || row[i] > row[best])) best = i;
    if (best == row.size()) return std::nullopt;
    return static_cast<frugal::kv_token>(best);
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(-4, 4);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> row(1 + rng() % 100);
    for (auto& x : row) {
      x = trial % 2 == 0 ? std::round(logit(rng)) : logit(rng);  // many ties in half the trials
      const auto r = rng() % 40;
      if (r == 0) x = inf;
      if (r == 1) x = -inf;
      if (r == 2) x = nan;
    }
    if (trial % 50 == 0) std::fill(row.begin(), row.end(), trial % 100 == 0 ? nan : -inf);
    CAPTURE(trial);
    CHECK(frugal::sample_token(row, {}, 0.0) == scan(row));
  }
  std::vector<float> big(49152, 1.0f);
  big[49151] = big[40000] = 2.0f;
  CHECK(frugal::sample_token(big, {}, 0.0) == 40000);
  big[17] = 2.0f;
  CHECK(frugal::sample_token(big, {}, 0.0) == 17);
}
