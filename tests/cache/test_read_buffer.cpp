// The cache's read protocol (frugal/cache/detail/read_buffer.hpp) on its own, without a cache around
// it. It runs in every build of test_cache: in a plain build it checks the production ordering (relaxed
// flag stores behind one fence), which ThreadSanitizer builds replace with seq_cst stores.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "frugal/cache/detail/read_buffer.hpp"

namespace {

namespace detail = frugal::detail;

// A buffered read: which test thread made it, and its place in that thread's sequence.
struct record {
  std::uint32_t thread;
  std::uint32_t seq;
};

// What the protocol guards: pairs that writers rewrite in two steps with readers excluded, so that a
// reader let in while a writer is inside would see the two halves differ.
struct guarded_pair {
  std::uint64_t first = 0;
  std::uint64_t second = 0;
};

constexpr unsigned reader_threads = 4;
constexpr unsigned writer_threads = 2;
constexpr unsigned pairs = 4;

struct harness {
  detail::spin_lock writers;
  detail::read_buffers<record> reads;
  guarded_pair data[pairs];
  // Under `writers`: the next sequence number expected from each thread, and how many were applied.
  std::uint32_t next[reader_threads] = {};
  std::uint64_t out_of_order = 0;

  void apply(const record& r) {
    if (r.seq != next[r.thread]) ++out_of_order;
    next[r.thread] = r.seq + 1;
  }
  auto applier() {
    return [this](const record& r) { apply(r); };
  }

  // Rewrites one pair as the cache rewrites entries: writers' lock held, readers kept out. `replay`:
  // replay every buffer first, as an insert or eviction does.
  void write(unsigned i, std::uint64_t v, bool replay = false) {
    reads.exclude();
    if (replay) reads.replay_all(applier());
    data[i].first = v;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the two halves apart in time
    for (int spin = 0; spin < 8; ++spin) detail::cpu_pause();
    data[i].second = v;
    reads.admit();
  }
};

}  // namespace

TEST_CASE(
    "read buffer: readers never see a write in progress, and every buffered read is replayed once, "
    "in its thread's order") {
  harness h;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> torn{0}, reads_done{0}, writes_done{0};
  std::uint32_t recorded[reader_threads] = {};
  constexpr std::uint32_t max_ops = 200'000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < reader_threads; ++t) {
    threads.emplace_back([&, t] {
      const unsigned slot = detail::reader_slot::mine();
      std::mt19937 rng(t);
      std::uint32_t seq = 0;
      std::uint64_t my_torn = 0, my_reads = 0;
      const bool lock_free = slot < detail::reader_slots;
      if (lock_free) h.reads.join(h.writers, slot, 0);
      for (std::uint32_t op = 0;
           op < max_ops && (op % 1024 != 0 || std::chrono::steady_clock::now() < deadline); ++op) {
        const unsigned i = rng() % pairs;
        if (!lock_free) {
          // Without a slot the thread reads under the lock, as a ninth cache reader would.
          std::lock_guard lock(h.writers);
          if (h.data[i].first != h.data[i].second) ++my_torn;
          ++my_reads;
          continue;
        }
        if (op % 64 == 63) {
          // A write by a reading thread, like a put that replaces a value: its record is buffered
          // behind the thread's own reads.
          std::lock_guard lock(h.writers);
          h.write(i, (std::uint64_t{t} << 32) | op);
          if (!h.reads.buffer_own(slot, record{t, seq}, h.applier())) FAIL_CHECK("no joined stripe");
          ++seq;
          continue;
        }
        for (;;) {
          detail::read_state state;
          {
            detail::read_section<record> section(h.reads.stripes[slot]);
            state = section.state();
            if (state == detail::read_state::open) {
              // Reads the halves apart in time too, so that a writer let in meanwhile would show.
              const std::uint64_t first = h.data[i].first;
              std::atomic_signal_fence(std::memory_order_seq_cst);
              for (int spin = 0; spin < 8; ++spin) detail::cpu_pause();
              if (first != h.data[i].second) ++my_torn;
              section.record(record{t, seq++});
            }
          }
          if (state == detail::read_state::open) break;
          if (state == detail::read_state::full) {
            std::lock_guard lock(h.writers);
            h.reads.hand_off(slot, h.applier());
          } else {
            h.reads.wait_for_writer(slot);
          }
        }
        ++my_reads;
      }
      recorded[t] = seq;
      torn += my_torn;
      reads_done += my_reads;
    });
  }
  for (unsigned w = 0; w < writer_threads; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(100 + w);
      std::uint64_t v = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        std::lock_guard lock(h.writers);
        ++v;
        h.write(rng() % pairs, (std::uint64_t{w + 1} << 48) | v, v % 2 == 0);
        ++writes_done;
      }
    });
  }
  for (unsigned t = 0; t < reader_threads; ++t) threads[t].join();
  stop = true;
  for (unsigned t = reader_threads; t < threads.size(); ++t) threads[t].join();

  {
    std::lock_guard lock(h.writers);
    h.reads.exclude();
    h.reads.replay_all(h.applier());
    h.reads.admit();
  }
  CHECK(torn.load() == 0);
  CHECK(h.out_of_order == 0);
  for (unsigned t = 0; t < reader_threads; ++t) CHECK(h.next[t] == recorded[t]);
  CHECK(reads_done.load() > 0);
  CHECK(writes_done.load() > 0);
}

TEST_CASE(
    "read buffer: a full stripe is handed to the owner's pending buffer, and replayed before the "
    "owner's own reads") {
  detail::spin_lock writers;
  detail::read_buffers<record> reads;
  // Two joined slots; with shard index 0 the first joined slot owns the shard.
  reads.stripes[1].joined = true;
  reads.join(writers, 2, 0);
  REQUIRE(reads.owner == 1);
  const auto fill = [&](unsigned slot, std::uint32_t thread) {
    for (std::uint32_t j = 0; j < detail::read_buffer_size; ++j) {
      detail::read_section<record> section(reads.stripes[slot]);
      REQUIRE(section.state() == detail::read_state::open);
      section.record(record{thread, j});
    }
    detail::read_section<record> section(reads.stripes[slot]);
    CHECK(section.state() == detail::read_state::full);
  };
  std::vector<record> applied;
  const auto apply = [&](const record& r) { applied.push_back(r); };

  fill(2, 2);
  reads.hand_off(2, apply);
  CHECK(applied.empty());  // copied to pending, not relinked by a thread that is not the owner
  CHECK(reads.pending_n == detail::read_buffer_size);
  CHECK(reads.stripes[2].count.load() == 0);

  fill(1, 1);
  reads.hand_off(1, apply);  // the owner replays the pending reads, then its own
  REQUIRE(applied.size() == 2 * detail::read_buffer_size);
  for (std::uint32_t j = 0; j < detail::read_buffer_size; ++j) {
    CHECK(applied[j].thread == 2);
    CHECK(applied[j].seq == j);
    CHECK(applied[detail::read_buffer_size + j].thread == 1);
    CHECK(applied[detail::read_buffer_size + j].seq == j);
  }
  CHECK(reads.pending_n == 0);

  // A writer excludes the joined stripes until it lets readers in again.
  reads.exclude();
  {
    detail::read_section<record> section(reads.stripes[1]);
    CHECK(section.state() == detail::read_state::excluded);
  }
  reads.admit();
  detail::read_section<record> section(reads.stripes[1]);
  CHECK(section.state() == detail::read_state::open);
}
