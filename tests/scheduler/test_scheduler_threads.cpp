#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "sched_support.hpp"

using namespace std::chrono_literals;

TEST_CASE(
    "scheduler: producers and cancellers on several threads against one loop: each sequence resolves "
    "once, greedy outputs equal running alone, no block leaks") {
  constexpr std::size_t vocab = 16, producers = 3, per_producer = 150;
  frugal::kv_cache kv(sched_test::kv_options(24));
  frugal::scheduler<> s(kv, {.max_running = 6, .max_waiting = 64, .step_tokens = 16, .vocab_size = vocab});
  std::vector<std::atomic<int>> resolutions(producers * per_producer);
  std::vector<std::atomic<int>> correct(producers * per_producer);
  std::atomic<std::uint64_t> last_id{0};
  std::atomic<int> done_producers{0};

  std::thread loop([&] {
    sched_test::fake_model model(kv, vocab);
    for (;;) {
      auto st = s.next_step(50ms);
      if (!st) {
        if (done_producers.load() == static_cast<int>(producers) && s.idle()) break;
        continue;
      }
      s.complete(*st, model.run(*st));
    }
  });
  std::vector<std::thread> threads;
  for (std::size_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(static_cast<unsigned>(p) + 1);
      for (std::size_t i = 0; i < per_producer; ++i) {
        const std::size_t slot = p * per_producer + i;
        std::vector<frugal::kv_token> prompt(1 + rng() % 12);
        for (auto& t : prompt) t = static_cast<frugal::kv_token>(rng() % 4);  // shared prefixes
        const std::size_t max_tokens = 1 + rng() % 10;
        const auto want = sched_test::reference(prompt, max_tokens, {}, {}, vocab);
        const auto id = s.submit({.prompt = prompt, .max_tokens = max_tokens},
                                 [&, slot, want](frugal::result<frugal::generation> g) {
                                   resolutions[slot].fetch_add(1);
                                   if (g) correct[slot].store((*g).tokens == want.tokens ? 1 : 2);
                                 });
        last_id.store(id);
        if (rng() % 5 == 0) s.cancel(id - rng() % 3);
        if (rng() % 7 == 0) (void)s.stats();
      }
      done_producers.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  s.close();
  loop.join();
  int finished = 0;
  for (std::size_t i = 0; i < resolutions.size(); ++i) {
    REQUIRE(resolutions[i].load() == 1);
    CHECK(correct[i].load() != 2);
    finished += correct[i].load() == 1;
  }
  CHECK(finished > 0);
  const auto st = s.stats();
  CHECK(st.submitted == producers * per_producer);
  CHECK(st.finished_stop + st.finished_length + st.failed.total() == st.submitted);
  CHECK(kv.stats().blocks_used == 0);
  CHECK(kv.stats().sequences == 0);
}

TEST_CASE(
    "scheduler: complete with an executor samples each row on it and gives every sequence what it gives "
    "alone") {
  constexpr std::size_t vocab = 64;
  frugal::kv_cache kv(sched_test::kv_options(400));
  frugal::scheduler<> s(kv, {.max_running = 12, .step_tokens = 32, .vocab_size = vocab});
  sched_test::fake_model m(kv, vocab);
  frugal::quant::thread_pool pool(3);
  struct job {
    std::vector<frugal::kv_token> prompt;
    frugal::sampling_params p;
    frugal::light_future<frugal::generation> result;
  };
  std::vector<job> jobs;
  for (std::size_t i = 0; i < 12; ++i) {
    job j;
    for (std::size_t t = 0; t < 3 + i % 5; ++t) j.prompt.push_back(static_cast<frugal::kv_token>(7 * i + t));
    // Greedy, and seeded temperature and top-p, so that a row given another row's logits or seed shows.
    j.p = i % 3 == 0 ? frugal::sampling_params{}
                     : frugal::sampling_params{.temperature = 0.9f, .top_p = 0.8f, .seed = 100 + i};
    j.result = s.submit({.prompt = j.prompt, .sampling = j.p, .max_tokens = 6 + i % 4}).result;
    jobs.push_back(std::move(j));
  }
  std::size_t widest = 0;
  while (auto st = s.try_next_step()) {
    widest = std::max(widest, st->logits_rows());
    s.complete(*st, m.run(*st), &pool);
  }
  CHECK(widest >= 4);  // rows were split over the pool's threads
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(i);
    const frugal::generation g = jobs[i].result.get();
    CHECK(g.tokens == sched_test::reference(jobs[i].prompt, 6 + i % 4, {}, jobs[i].p, vocab).tokens);
  }
  CHECK(kv.stats().blocks_used == 0);
}
