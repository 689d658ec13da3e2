// Overload: 10x the batcher's capacity. With overflow::reject (simulated on a manual clock, so the ratio
// is exact) the queue stays at max_queued, every rejection is told inside submit, and admitted requests
// wait at most the queue's worth of batches. With overflow::block (real threads: blocking needs someone
// to make room) producers are held back to the worker's pace, nothing queues past max_queued, and a
// submit that times out is told when it returns, after block_timeout.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "frugal/batcher.hpp"
#include "frugal/clock.hpp"

using namespace std::chrono_literals;

TEST_CASE("overload: at 10x capacity a rejecting batcher sheds at once and keeps admitted latency bounded") {
  frugal::manual_clock clock;
  constexpr std::size_t max_batch = 8, max_queued = 64;
  constexpr auto batch_time = 1ms;  // the model: one batch of up to 8 per ms, 8000 requests/s
  constexpr auto gap = 12500ns;     // one arrival every 12.5 us: 80 000 requests/s, 10x
  using batcher_t = frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock>;
  batcher_t b({.window = 1ms, .max_batch = max_batch, .max_queued = max_queued}, clock);

  struct req_state {
    std::chrono::steady_clock::time_point arrival;
    int resolutions = 0;
    bool ok = false;
    std::optional<frugal::batch_errc> code;
  };
  std::vector<req_state> reqs;
  reqs.reserve(200'000);
  std::optional<batcher_t::batch> running;
  std::chrono::steady_clock::time_point busy_until{};
  std::chrono::nanoseconds worst_admitted{0};
  std::size_t worst_depth = 0, rejected_late = 0, admitted = 0, rejected = 0;

  const auto end = clock.now() + 2s;
  while (clock.now() < end) {
    const auto i = static_cast<int>(reqs.size());
    reqs.push_back({clock.now(), 0, false, std::nullopt});
    b.submit(i, [&reqs, i](frugal::result<int> o) {
      auto& r = reqs[static_cast<std::size_t>(i)];
      ++r.resolutions;
      r.ok = o.has_value();
      r.code = o.code();
    });
    // A rejection is told before submit returns; an admitted request is not resolved yet.
    if (reqs.back().resolutions == 1) {
      ++rejected;
      if (reqs.back().code != frugal::batch_errc::queue_full) ++rejected_late;
    } else {
      ++admitted;
    }
    worst_depth = std::max(worst_depth, b.queue_depth());
    if (running && clock.now() >= busy_until) {
      std::vector<int> out(running->requests().begin(), running->requests().end());
      for (int r : out)
        worst_admitted =
            std::max(worst_admitted, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         clock.now() - reqs[static_cast<std::size_t>(r)].arrival));
      running->fulfill(std::move(out));
      running.reset();
    }
    if (!running) {
      running = b.try_next_batch();
      if (running) busy_until = clock.now() + batch_time;
    }
    clock.advance(gap);
  }
  if (running) running->fulfill(std::vector<int>(running->requests().begin(), running->requests().end()));
  b.close(frugal::drain::no);

  const frugal::batcher_stats s = b.stats();
  CHECK(worst_depth <= max_queued);
  CHECK(rejected_late == 0);
  // About 9 in 10 arrivals are shed; the worker runs at its capacity.
  const double shed = static_cast<double>(rejected) / static_cast<double>(reqs.size());
  CHECK(shed > 0.85);
  CHECK(shed < 0.95);
  CHECK(s.completed >= 2000 * max_batch * 9 / 10);
  // Admitted requests wait for at most a full queue's worth of batches, plus their own.
  CHECK(worst_admitted <= batch_time * (max_queued / max_batch + 1) + 2 * gap);
  CHECK(s.batch_sizes.size() <= max_batch + 1);
  for (const auto& r : reqs)
    CHECK_MESSAGE(r.resolutions == 1, "a request resolved ", r.resolutions, " times");
  CHECK(s.submitted == s.completed + s.failed.total());
  CHECK(s.failed.queue_full == rejected);
  CHECK(admitted == s.completed + s.failed.closed);
}

TEST_CASE("overload: at 10x capacity a blocking batcher holds producers back and bounds the queue") {
  constexpr std::size_t max_batch = 8, max_queued = 64;
  constexpr int producers = 4;
  std::chrono::nanoseconds block_timeout = 200ms;
  SUBCASE("with a block_timeout longer than the wait for room nothing times out") { block_timeout = 200ms; }
  SUBCASE("with a block_timeout shorter than a batch some submits time out") { block_timeout = 300us; }
  CAPTURE(block_timeout.count());
  frugal::batcher<int, int> b({.window = 1ms,
                               .max_batch = max_batch,
                               .max_queued = max_queued,
                               .on_overflow = frugal::overflow::block,
                               .block_timeout = block_timeout});
  std::atomic<std::uint64_t> ok{0}, timeouts{0}, other{0}, late_told{0}, resolutions{0};
  std::atomic<std::int64_t> worst_submit_ns{0};
  std::atomic<std::size_t> worst_depth{0};
  std::jthread worker([&b] {
    while (auto batch = b.next_batch()) {
      std::this_thread::sleep_for(1ms);  // the model's time: capacity about 8000 requests/s
      batch->fulfill(std::vector<int>(batch->requests().begin(), batch->requests().end()));
    }
  });
  const auto end = std::chrono::steady_clock::now() + 400ms;
  std::vector<std::thread> prod;
  for (int p = 0; p < producers; ++p)
    prod.emplace_back([&] {
      while (std::chrono::steady_clock::now() < end) {
        const auto t0 = std::chrono::steady_clock::now();
        b.submit(1, [&, me = std::this_thread::get_id()](frugal::result<int> o) {
          resolutions.fetch_add(1);
          if (o) {
            ok.fetch_add(1);
          } else if (o.code() == frugal::batch_errc::timeout) {
            timeouts.fetch_add(1);
            // Told inside submit, on the producer's own thread.
            if (std::this_thread::get_id() != me) late_told.fetch_add(1);
          } else {
            other.fetch_add(1);
          }
        });
        const std::int64_t w =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                .count();
        std::int64_t cur = worst_submit_ns.load();
        while (w > cur && !worst_submit_ns.compare_exchange_weak(cur, w)) {
        }
        std::size_t d = b.queue_depth(), dc = worst_depth.load();
        while (d > dc && !worst_depth.compare_exchange_weak(dc, d)) {
        }
      }
    });
  for (auto& t : prod) t.join();
  b.close();
  worker.join();
  const frugal::batcher_stats s = b.stats();
  CHECK(worst_depth.load() <= max_queued);
  CHECK(other.load() == 0);
  CHECK(late_told.load() == 0);
  CHECK(s.failed.queue_full == 0);
  CHECK(s.submitted == s.completed + s.failed.total());
  CHECK(resolutions.load() == s.submitted);
  // A blocked submit returns within block_timeout (plus scheduling slack on a shared machine) and is then
  // told at once; admitted requests came at about the worker's pace, not the producers'.
  CHECK(worst_submit_ns.load() <=
        std::chrono::duration_cast<std::chrono::nanoseconds>(block_timeout + 100ms).count());
  CHECK(s.completed <= 400 * max_batch * 3 / 2 + max_queued);
  if (block_timeout < 1ms) CHECK(timeouts.load() > 0);
  CHECK(s.end_to_end.p99 <= std::chrono::nanoseconds(1ms * (max_queued / max_batch + 1) + 100ms));
}
