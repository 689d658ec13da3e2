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
