// Soak and fault injection: the batcher and the cache under 4 producers and 2 workers for a time budget.
//   soak [--seconds N] [--fault-rate P] [--seed S] [--latency-slack-ms MS] [--rss-slack-mib MIB]
// The model throws, sleeps for a random time, returns the wrong number of results, fails single items or
// drops its batch, each at rate P; workers are stopped and restarted; close() comes at a random moment of
// each epoch (an epoch is one batcher's life, 0.2 to 1 s). Checks, failing with exit code 1:
//  - every request resolves exactly once (a flag per request), with a cause that the stats count;
//  - the stats add up: submitted == completed + failed, per cause, once the batcher is drained;
//  - RSS stays flat after warm-up (sampled from /proc/self/statm after each epoch);
//  - the p99 of end-to-end latency stays within the window plus the model time (and the queueing the
//    producers' bounded backlog implies), plus scheduling slack (50 ms by default) for a shared machine;
//  - cache hits return the right value and the cache's counters and limits hold.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "frugal/batcher.hpp"
#include "frugal/cache.hpp"

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct model_fault : std::runtime_error {
  model_fault() : std::runtime_error("injected model fault") {}
};

struct settings {
  double seconds = 10;
  double fault_rate = 0.02;
  std::uint64_t seed = 1;
  // Scheduling slack on the p99 bound and allowed RSS growth after warm-up; raise both under sanitizers,
  // which slow threads down and keep shadow memory.
  std::chrono::milliseconds latency_slack{50};
  std::size_t rss_slack_mib = 8;
};

constexpr int producers = 4;
constexpr int workers = 2;
constexpr std::size_t max_outstanding = 64;  // per producer
constexpr auto window = 2ms;
constexpr auto max_model_time = 1ms;
constexpr std::size_t max_batch = 16;
constexpr std::size_t max_queued = 128;
constexpr std::size_t max_requests_per_epoch = std::size_t{1} << 21;

std::size_t rss_kib() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

std::uint64_t result_of(std::uint64_t key) { return key * 2654435761u + 7; }

struct totals {
  std::uint64_t requests = 0, cache_ops = 0, epochs = 0, completed = 0;
  std::uint64_t faults_throw = 0, faults_mismatch = 0, faults_item = 0, faults_abandon = 0, faults_sleep = 0;
  std::uint64_t restarts = 0, closes = 0, cancels = 0, deadlines = 0;
  std::uint64_t lost = 0, duplicated = 0, violations = 0;
  std::int64_t worst_p99_ns = 0, worst_model_ns = 0;
  std::uint64_t faults() const {
    return faults_throw + faults_mismatch + faults_item + faults_abandon + restarts + closes + cancels +
           deadlines;
  }
};

#define SOAK_CHECK(cond, ...)                                  \
  do {                                                         \
    if (!(cond)) {                                             \
      std::fprintf(stderr, "soak: check failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                       \
      std::fprintf(stderr, "\n");                              \
      ++t.violations;                                          \
    }                                                          \
  } while (0)

// Set by a rejection, which is delivered on the submitting thread.
thread_local bool shed_here = false;

struct request {
  std::uint64_t key;
  std::uint32_t slot;
};
using batcher_t = frugal::batcher<request, std::uint64_t>;
using cache_t = frugal::lru_cache<std::uint64_t>;

// Faults are counted where they are injected, under the worker's own counters.
struct worker_counts {
  std::atomic<std::uint64_t> throws{0}, mismatches{0}, items{0}, abandons{0}, sleeps{0};
  // The longest model call as it really took, sleep overshoot and preemption included.
  std::atomic<std::int64_t> max_model_ns{0};
};

void worker_loop(std::stop_token stop, batcher_t& b, cache_t& cache, double fault_rate, std::uint64_t seed,
                 worker_counts& wc) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> sleep_us(
      0, static_cast<int>(std::chrono::microseconds(max_model_time).count()));
  while (auto batch = b.next_batch(stop)) {
    const auto t0 = steady::now();
    if (u(rng) < 0.5) {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us(rng)));
      wc.sleeps.fetch_add(1, std::memory_order_relaxed);
    }
    const std::int64_t took =
        std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t0).count();
    for (std::int64_t cur = wc.max_model_ns.load();
         took > cur && !wc.max_model_ns.compare_exchange_weak(cur, took);) {
    }
    const double r = u(rng);
    const auto reqs = batch->requests();
    std::vector<std::uint64_t> out;
    out.reserve(reqs.size() + 1);
    for (const request& q : reqs) out.push_back(result_of(q.key));
    try {
      if (r < fault_rate) {
        wc.throws.fetch_add(1, std::memory_order_relaxed);
        throw model_fault();
      }
      if (r < 2 * fault_rate) {
        wc.mismatches.fetch_add(1, std::memory_order_relaxed);
        out.push_back(0);
        batch->fulfill(std::move(out));  // throws result_count_mismatch after failing the batch
        continue;
      }
      if (r < 3 * fault_rate) {
        wc.abandons.fetch_add(1, std::memory_order_relaxed);
        continue;  // the batch is destroyed unresolved
      }
      if (r < 4 * fault_rate && !reqs.empty()) {
        wc.items.fetch_add(1, std::memory_order_relaxed);
        batch->fail(0, std::make_exception_ptr(model_fault()));
      }
      for (std::size_t i = 0; i < reqs.size(); ++i) cache.put(frugal::key128{reqs[i].key, 0}, out[i]);
      if (batch->pending() != 0) batch->fulfill(std::move(out));
    } catch (const model_fault&) {
      batch->fail(std::current_exception());
    } catch (const frugal::batch_error&) {
    }
  }
}

void run_epoch(const settings& cfg, std::uint64_t epoch, steady::time_point end, cache_t& cache,
               std::vector<std::atomic<std::uint8_t>>& flags, totals& t) {
  std::mt19937_64 rng(cfg.seed * 1000003 + epoch);
  const bool block = epoch % 2 == 1;
  batcher_t b({.window = window,
               .max_batch = max_batch,
               .max_queued = max_queued,
               .on_overflow = block ? frugal::overflow::block : frugal::overflow::reject,
               .block_timeout = 5ms});
  const auto epoch_len = std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 1000)(rng));
  const auto epoch_end = std::min(end, steady::now() + epoch_len);
  const auto close_at =
      steady::now() + (epoch_end - steady::now()) * std::uniform_real_distribution<double>(0.3, 1.0)(rng);

  std::atomic<std::uint32_t> next_slot{0};
  std::atomic<std::uint64_t> cancels{0}, deadlines_set{0}, hits{0}, misses{0};
  // What the callbacks touch, behind one pointer so that a callback stays within inline storage.
  struct shared_state {
    std::vector<std::atomic<std::uint8_t>>* flags;
    std::atomic<std::uint64_t> by_cause[9] = {};  // 0 value, 1..7 batch_errc, 8 model fault
    std::atomic<std::uint64_t> duplicates{0}, wrong_values{0};
    std::atomic<std::size_t> outstanding[producers] = {};
  } sh{&flags};
  auto& by_cause = sh.by_cause;
  auto& duplicates = sh.duplicates;
  auto& wrong_values = sh.wrong_values;
  auto& outstanding = sh.outstanding;

  worker_counts wc;
  std::vector<std::jthread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back(worker_loop, std::ref(b), std::ref(cache), cfg.fault_rate, rng(), std::ref(wc));

  std::vector<std::thread> prod;
  for (int p = 0; p < producers; ++p)
    prod.emplace_back([&, p, seed = rng()] {
      std::mt19937_64 r(seed);
      std::uniform_real_distribution<double> u(0, 1);
      std::uniform_int_distribution<std::uint64_t> key(0, 4095);
      std::vector<std::stop_source> stops(8);
      while (steady::now() < epoch_end) {
        // After close() a few more submits are told closed; then the producer stops.
        if (b.closed() && u(r) < 0.01) break;
        const std::uint64_t k = key(r);
        if (u(r) < 0.3) {
          const auto v = cache.get(frugal::key128{k, 0});
          (v ? hits : misses).fetch_add(1, std::memory_order_relaxed);
          if (v && *v != result_of(k)) wrong_values.fetch_add(1);
          if (v) continue;
        }
        // Producers back off when their backlog is full or they were just shed, so that on a 2-core
        // machine they do not starve the workers they are measuring.
        if (outstanding[p].load(std::memory_order_acquire) >= max_outstanding || shed_here) {
          shed_here = false;
          std::this_thread::sleep_for(50us);
          continue;
        }
        const std::uint32_t slot = next_slot.fetch_add(1, std::memory_order_relaxed);
        if (slot >= flags.size()) break;
        batcher_t::submit_options so;
        const double d = u(r);
        if (d < cfg.fault_rate) {
          so.deadline = steady::now() + std::chrono::microseconds(static_cast<int>(u(r) * 3000));
          deadlines_set.fetch_add(1, std::memory_order_relaxed);
        } else if (d < 2 * cfg.fault_rate) {
          std::stop_source& s = stops[slot % stops.size()];
          if (s.stop_requested()) s = std::stop_source();
          so.stop = s.get_token();
        }
        outstanding[p].fetch_add(1, std::memory_order_acq_rel);
        const frugal::request_id id = b.submit(
            request{k, slot},
            [st = &sh, p, slot, k](frugal::result<std::uint64_t> o) {
              if ((*st->flags)[slot].fetch_add(1, std::memory_order_acq_rel) != 0)
                st->duplicates.fetch_add(1);
              if (o) {
                st->by_cause[0].fetch_add(1, std::memory_order_relaxed);
                if (*o != result_of(k)) st->wrong_values.fetch_add(1);
              } else if (auto c = o.code()) {
                st->by_cause[static_cast<int>(*c)].fetch_add(1, std::memory_order_relaxed);
                if (*c == frugal::batch_errc::queue_full || *c == frugal::batch_errc::timeout)
                  shed_here = true;
              } else {
                st->by_cause[8].fetch_add(1, std::memory_order_relaxed);
              }
              st->outstanding[p].fetch_sub(1, std::memory_order_acq_rel);
            },
            std::move(so));
        if (d >= cfg.fault_rate && d < 2 * cfg.fault_rate && u(r) < 0.5) {
          stops[slot % stops.size()].request_stop();
          cancels.fetch_add(1, std::memory_order_relaxed);
        } else if (u(r) < cfg.fault_rate) {
          b.cancel(id);
          cancels.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });

  // The controller: restarts a worker now and then, and closes the batcher at close_at.
  std::uint64_t restarts = 0;
  bool drain_yes = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  while (steady::now() < close_at) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 80)(rng)));
    const std::size_t w = std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng);
    pool[w].request_stop();
    pool[w].join();
    pool[w] = std::jthread(worker_loop, std::ref(b), std::ref(cache), cfg.fault_rate, rng(), std::ref(wc));
    ++restarts;
  }
  b.close(drain_yes ? frugal::drain::yes : frugal::drain::no);
  for (auto& th : prod) th.join();
  for (auto& th : pool) th.join();  // workers drain what is left, then next_batch returns empty
  pool.clear();

  const frugal::batcher_stats s = b.stats();
  const std::uint32_t submitted =
      std::min<std::uint32_t>(next_slot.load(), static_cast<std::uint32_t>(flags.size()));
  std::uint64_t resolved_once = 0, never = 0;
  for (std::uint32_t i = 0; i < submitted; ++i) {
    const auto f = flags[i].load();
    resolved_once += f == 1;
    never += f == 0;
    flags[i].store(0, std::memory_order_relaxed);
  }
  SOAK_CHECK(never == 0, "epoch %llu: %llu requests never resolved", (unsigned long long)epoch,
             (unsigned long long)never);
  SOAK_CHECK(duplicates.load() == 0, "epoch %llu: %llu requests resolved twice", (unsigned long long)epoch,
             (unsigned long long)duplicates.load());
  SOAK_CHECK(wrong_values.load() == 0, "epoch %llu: %llu wrong results", (unsigned long long)epoch,
             (unsigned long long)wrong_values.load());
  SOAK_CHECK(s.submitted == submitted, "stats.submitted %llu, submitted %u", (unsigned long long)s.submitted,
             submitted);
  SOAK_CHECK(s.queue_depth == 0 && s.in_flight == 0, "queue %zu in flight %zu after drain", s.queue_depth,
             s.in_flight);
  SOAK_CHECK(s.submitted == s.completed + s.failed.total(), "stats do not add up");
  SOAK_CHECK(s.completed == by_cause[0].load(), "completed %llu, delivered %llu",
             (unsigned long long)s.completed, (unsigned long long)by_cause[0].load());
  SOAK_CHECK(s.failed.deadline_exceeded == by_cause[1].load(), "deadline_exceeded");
  SOAK_CHECK(s.failed.cancelled == by_cause[2].load(), "cancelled");
  SOAK_CHECK(s.failed.queue_full == by_cause[3].load(), "queue_full");
  SOAK_CHECK(s.failed.closed == by_cause[4].load(), "closed");
  SOAK_CHECK(s.failed.abandoned == by_cause[5].load(), "abandoned");
  SOAK_CHECK(s.failed.result_count_mismatch == by_cause[6].load(), "result_count_mismatch");
  SOAK_CHECK(s.failed.timeout == by_cause[7].load(), "timeout");
  SOAK_CHECK(s.failed.model_error == by_cause[8].load(), "model_error");
  SOAK_CHECK(block || s.failed.timeout == 0, "a rejecting batcher timed out");
  SOAK_CHECK(!block || s.failed.queue_full == 0, "a blocking batcher rejected");
  // Queue wait is bounded by the window plus the backlog the producers can build (producers x
  // max_outstanding requests, served max_batch at a time by the workers), then one model run.
  const auto backlog_runs = (producers * max_outstanding + max_batch * workers - 1) / (max_batch * workers);
  // The model time is what the model calls really took: on a shared machine a 1 ms sleep can take 50.
  const auto model_time =
      std::max<std::chrono::nanoseconds>(max_model_time, std::chrono::nanoseconds(wc.max_model_ns.load()));
  const auto bound = window + model_time * static_cast<long>(backlog_runs + 1) + cfg.latency_slack;
  t.worst_model_ns = std::max<std::int64_t>(t.worst_model_ns, model_time.count());
  if (s.end_to_end.count > 100) {
    SOAK_CHECK(s.end_to_end.p99 <= bound, "p99 %lld us over the bound %lld us",
               (long long)(s.end_to_end.p99.count() / 1000),
               (long long)std::chrono::duration_cast<std::chrono::microseconds>(bound).count());
    t.worst_p99_ns = std::max<std::int64_t>(t.worst_p99_ns, s.end_to_end.p99.count());
  }
  t.lost += never;
  t.duplicated += duplicates.load();
  t.requests += submitted;
  t.completed += s.completed;
  t.cache_ops += hits.load() + misses.load() + s.completed;
  t.faults_throw += wc.throws.load();
  t.faults_mismatch += wc.mismatches.load();
  t.faults_item += wc.items.load();
  t.faults_abandon += wc.abandons.load();
  t.faults_sleep += wc.sleeps.load();
  t.restarts += restarts;
  t.closes += 1;
  t.cancels += cancels.load();
  t.deadlines += deadlines_set.load();
  ++t.epochs;
}

}  // namespace

int main(int argc, char** argv) {
  settings cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds")
      cfg.seconds = std::stod(value());
    else if (a == "--fault-rate")
      cfg.fault_rate = std::stod(value());
    else if (a == "--seed")
      cfg.seed = std::stoull(value());
    else if (a == "--latency-slack-ms")
      cfg.latency_slack = std::chrono::milliseconds(std::stoll(value()));
    else if (a == "--rss-slack-mib")
      cfg.rss_slack_mib = std::stoull(value());
    else {
      std::fprintf(stderr,
                   "usage: soak [--seconds N] [--fault-rate P] [--seed S] [--latency-slack-ms MS] "
                   "[--rss-slack-mib MIB]\n");
      return 2;
    }
  }
  if (!(cfg.seconds > 0) || !(cfg.fault_rate >= 0 && cfg.fault_rate <= 0.25)) {
    std::fprintf(stderr, "soak: --seconds must be > 0 and --fault-rate in [0, 0.25]\n");
    return 2;
  }

  totals t;
  cache_t cache({.max_entries = 2048, .ttl = 50ms, .shards = 4});
  std::vector<std::atomic<std::uint8_t>> flags(max_requests_per_epoch);
  const auto start = steady::now();
  const auto end =
      start + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(cfg.seconds));
  const auto warm_end = start + (end - start) / 5;
  std::size_t rss_warm = 0, rss_max = 0;
  const std::size_t rss_start = rss_kib();
  for (std::uint64_t epoch = 0; steady::now() < end; ++epoch) {
    run_epoch(cfg, epoch, end, cache, flags, t);
    const std::size_t rss = rss_kib();
    if (steady::now() < warm_end || rss_warm == 0) rss_warm = rss;
    rss_max = std::max(rss_max, rss);
  }
  const std::size_t rss_end = rss_kib();
  // After warm-up RSS may move by allocator noise, not grow with the number of requests.
  const std::size_t growth = rss_max > rss_warm ? rss_max - rss_warm : 0;
  if (growth > cfg.rss_slack_mib * 1024) {
    std::fprintf(stderr, "soak: check failed: RSS grew %zu KiB after warm-up\n", growth);
    ++t.violations;
  }
  const frugal::cache_stats cs = cache.stats();
  if (cs.entries > 2048) {
    std::fprintf(stderr, "soak: check failed: the cache holds %zu entries\n", cs.entries);
    ++t.violations;
  }
  const double secs = std::chrono::duration<double>(steady::now() - start).count();
  std::printf(
      "soak: %.1f s, %llu epochs, %llu requests (%llu completed), %llu cache ops, faults injected %llu "
      "(throw %llu, wrong count %llu, item fail %llu, abandoned %llu, worker restarts %llu, closes %llu, "
      "cancels %llu, deadlines %llu; %llu random sleeps), lost %llu, duplicated %llu, worst p99 %.2f ms, "
      "longest model call %.2f ms, "
      "RSS KiB start %zu warm %zu max %zu end %zu, cache hit ratio %.3f, violations %llu\n",
      secs, (unsigned long long)t.epochs, (unsigned long long)t.requests, (unsigned long long)t.completed,
      (unsigned long long)t.cache_ops, (unsigned long long)t.faults(), (unsigned long long)t.faults_throw,
      (unsigned long long)t.faults_mismatch, (unsigned long long)t.faults_item,
      (unsigned long long)t.faults_abandon, (unsigned long long)t.restarts, (unsigned long long)t.closes,
      (unsigned long long)t.cancels, (unsigned long long)t.deadlines, (unsigned long long)t.faults_sleep,
      (unsigned long long)t.lost, (unsigned long long)t.duplicated, t.worst_p99_ns / 1e6,
      t.worst_model_ns / 1e6, rss_start, rss_warm, rss_max, rss_end, cs.hit_ratio,
      (unsigned long long)t.violations);
  return t.violations == 0 ? 0 : 1;
}
