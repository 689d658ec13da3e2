#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"
#include "frugal/pool.hpp"

#include "../support/errors.hpp"
#include "../support/requires.hpp"

using namespace std::chrono_literals;

namespace {

// Counts live instances, so a test sees that an unloaded model's memory was really given back.
struct fake_model {
  fake_model(std::string n, std::atomic<int>& alive) : name(std::move(n)), alive_(&alive) {
    alive_->fetch_add(1);
  }
  fake_model(const fake_model&) = delete;
  fake_model& operator=(const fake_model&) = delete;
  ~fake_model() { alive_->fetch_sub(1); }
  std::string name;
  std::string warmed_with;
  std::string version;
  std::atomic<int>* alive_;
};

using pool_t = frugal::model_pool<fake_model, frugal::model_args, frugal::manual_clock>;
using spec = frugal::model_spec<>;

// A loader that counts its calls per model, can be made to block or throw (before_load), and reports the
// measured bytes set in `measured`; an unload hook that logs the order of unloads.
struct harness {
  frugal::manual_clock clock;
  std::atomic<int> alive{0};
  std::function<void(const spec&)> before_load;
  std::map<std::string, std::size_t> measured;

  pool_t::options_type options(std::size_t budget, std::vector<spec> models) {
    return {
        .budget_bytes = budget,
        .models = std::move(models),
        .load =
            [this](const spec& s) {
              {
                std::lock_guard lock(mutex_);
                ++calls_[s.name];
              }
              if (before_load) before_load(s);
              const auto it = measured.find(s.name);
              auto m = std::make_unique<fake_model>(s.name, alive);
              if (const auto v = s.args.find("version"); v != s.args.end()) m->version = v->second;
              return frugal::loaded_model<fake_model>{std::move(m), it == measured.end() ? 0 : it->second};
            },
        .unload =
            [this](std::unique_ptr<fake_model> m, const spec& s) {
              std::lock_guard lock(mutex_);
              unloads_.push_back(s.name);
              m.reset();
            },
        .acquire_timeout = 10s};
  }

  int calls(const std::string& name) {
    std::lock_guard lock(mutex_);
    return calls_[name];
  }
  std::vector<std::string> unloads() {
    std::lock_guard lock(mutex_);
    return unloads_;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, int> calls_;
  std::vector<std::string> unloads_;
};

using frugal_test::what_of;

std::string invalid_options(pool_t::options_type o) {
  try {
    pool_t p(std::move(o));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

// Waits, without any bound on speed, until cond() holds; fails the test after a generous real-time limit.
template <class F>
bool eventually(F&& cond) {
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

const frugal::model_status& status_of(const frugal::pool_stats& st, const std::string& name) {
  for (const auto& m : st.models)
    if (m.name == name) return m;
  throw std::logic_error("no model " + name);
}

}  // namespace

TEST_CASE("pool: bad options fail at construction with a message naming the field or model") {
  harness h;
  const std::vector<spec> one = {{.name = "a", .estimated_bytes = 10}};
  auto o = h.options(0, one);
  CHECK(invalid_options(o).find("budget_bytes must be > 0") != std::string::npos);
  o = h.options(100, {});
  CHECK(invalid_options(o).find("models must not be empty") != std::string::npos);
  o = h.options(100, one);
  o.load = nullptr;
  CHECK(invalid_options(o).find("load (the loader) is required") != std::string::npos);
  o = h.options(100, {{.name = "", .estimated_bytes = 10}});
  CHECK(invalid_options(o).find("models[0].name must not be empty") != std::string::npos);
  o = h.options(100, {{.name = "a", .estimated_bytes = 10},
                      {.name = "b", .estimated_bytes = 10},
                      {.name = "a", .estimated_bytes = 5}});
  CHECK(invalid_options(o).find("models[2] (\"a\").name is a duplicate of models[0]") != std::string::npos);
  o = h.options(100, {{.name = "a"}});
  CHECK(invalid_options(o).find("models[0] (\"a\").estimated_bytes must be > 0") != std::string::npos);
  o = h.options(100, {{.name = "a", .estimated_bytes = 10, .idle_unload_after = -1s}});
  CHECK(invalid_options(o).find("(\"a\").idle_unload_after must not be negative") != std::string::npos);
  o = h.options(100, {{.name = "p", .estimated_bytes = 60, .pinned = true},
                      {.name = "q", .estimated_bytes = 60, .pinned = true}});
  CHECK(invalid_options(o).find("pinned models' estimated_bytes sum to 120, more than budget_bytes = 100") !=
        std::string::npos);
  o = h.options(100, one);
  o.acquire_timeout = -1s;
  CHECK(invalid_options(o).find("acquire_timeout must not be negative") != std::string::npos);
  o = h.options(100, one);
  o.max_retry_backoff = o.retry_backoff / 2;
  CHECK(invalid_options(o).find("max_retry_backoff must be >= retry_backoff") != std::string::npos);

  frugal::cost::ledger<frugal::manual_clock> ledger(
      {.prices = {{.gpu_class = "L4",
                   .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}}},
      h.clock);
  o = h.options(100, one);
  o.ledger = &ledger;
  o.ledger_device = 1;
  CHECK(invalid_options(o).find("ledger_device 1 is not a device of the ledger (it has 1)") !=
        std::string::npos);
}

TEST_CASE("pool: acquire of a name not in the config throws unknown_model naming it") {
  harness h;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 10}}), h.clock);
  CHECK_THROWS_AS(pool.acquire("b"), frugal::unknown_model);
  CHECK(what_of([&] { pool.acquire("minilm-int8"); }).find("unknown model \"minilm-int8\"") !=
        std::string::npos);
  CHECK_THROWS_AS(pool.state("nope"), frugal::unknown_model);
  CHECK(h.calls("a") == 0);
}

TEST_CASE("pool: a lease hands out the loaded model and a second acquire reuses it without loading") {
  harness h;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 10}}), h.clock);
  CHECK(pool.state("a") == frugal::model_state::unloaded);
  {
    auto l = pool.acquire("a");
    REQUIRE(l);
    CHECK(l->name == "a");
    CHECK(l.name() == "a");
    CHECK(pool.ready("a"));
    auto l2 = pool.acquire("a");
    CHECK(l2.get() == l.get());
    CHECK(pool.stats().leases == 2);
    pool_t::lease moved = std::move(l2);
    CHECK_FALSE(l2);
    CHECK(moved.get() == l.get());
  }
  CHECK(pool.stats().leases == 0);
  CHECK(h.calls("a") == 1);
  CHECK(h.alive == 1);  // idle, still loaded
  const auto st = pool.stats();
  CHECK(st.acquires == 2);
  CHECK(st.loads == 1);
  CHECK(st.used_bytes == 10);
}

TEST_CASE("pool: many concurrent acquires of an unloaded model run the loader once (single flight)") {
  harness h;
  constexpr int threads = 8;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 10}}), h.clock);
  // The loader holds on until every other caller is waiting for its load.
  h.before_load = [&](const spec&) {
    CHECK(eventually([&] { return pool.stats().load_waits == threads - 1; }));
  };
  std::barrier start(threads);
  std::vector<fake_model*> seen(threads, nullptr);
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      start.arrive_and_wait();
      auto l = pool.acquire("a");
      seen[i] = l.get();
    });
  for (auto& t : ts) t.join();
  CHECK(h.calls("a") == 1);
  CHECK(h.alive == 1);
  for (auto* p : seen) CHECK(p == seen[0]);
  CHECK(seen[0] != nullptr);
  const auto st = pool.stats();
  CHECK(st.loads == 1);
  CHECK(st.load_waits == threads - 1);
  CHECK(st.acquires == threads);
}

TEST_CASE("pool: a failed load reaches every waiter, is not remembered as loaded, and retries with backoff") {
  harness h;
  constexpr int threads = 6;
  auto o = h.options(100, {{.name = "a", .estimated_bytes = 10}});
  o.retry_backoff = 1s;
  o.max_retry_backoff = 3s;
  pool_t pool(o, h.clock);
  std::atomic<int> fail_next{2};
  h.before_load = [&](const spec&) {
    if (fail_next.load() > 0) {
      if (fail_next.load() == 2) CHECK(eventually([&] { return pool.stats().load_waits == threads - 1; }));
      fail_next.fetch_sub(1);
      throw std::runtime_error("disk on fire");
    }
  };
  std::barrier start(threads);
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&] {
      start.arrive_and_wait();
      try {
        auto l = pool.acquire("a");
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "disk on fire") failed.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(failed == threads);
  CHECK(h.calls("a") == 1);
  CHECK(h.alive == 0);
  CHECK(pool.state("a") == frugal::model_state::failed);
  CHECK(pool.stats().used_bytes == 0);

  // Within the backoff an acquire fails at once, without calling the loader, and says why.
  h.clock.advance(500ms);
  try {
    pool.acquire("a");
    FAIL("expected load_backoff");
  } catch (const frugal::load_backoff& e) {
    CHECK(e.model() == "a");
    CHECK(e.failures() == 1);
    CHECK(e.retry_in() == 500ms);
    CHECK(std::string(e.what()).find("last error: disk on fire") != std::string::npos);
  }
  CHECK(h.calls("a") == 1);

  // After it, the next acquire loads again; a second failure doubles the backoff.
  h.clock.advance(500ms);
  CHECK(what_of([&] { pool.acquire("a"); }) == "disk on fire");
  CHECK(h.calls("a") == 2);
  h.clock.advance(1s);
  CHECK_THROWS_AS(pool.acquire("a"), frugal::load_backoff);
  auto st = pool.stats();
  CHECK(status_of(st, "a").consecutive_failures == 2);
  CHECK(status_of(st, "a").last_error == "disk on fire");
  CHECK(st.load_failures == 2);
  CHECK(st.backoff_refusals == 2);
  h.clock.advance(1s);
  {
    auto l = pool.acquire("a");
    CHECK(l->name == "a");
  }
  CHECK(h.calls("a") == 3);
  st = pool.stats();
  CHECK(status_of(st, "a").consecutive_failures == 0);
  CHECK(status_of(st, "a").last_error.empty());
  CHECK(status_of(st, "a").loads == 1);
}

TEST_CASE("pool: with retry_backoff 0 a failed load is retried by the very next acquire") {
  harness h;
  auto o = h.options(100, {{.name = "a", .estimated_bytes = 10}});
  o.retry_backoff = 0s;
  pool_t pool(o, h.clock);
  bool fail = true;
  h.before_load = [&](const spec&) {
    if (fail) throw std::runtime_error("once");
  };
  CHECK_THROWS_AS(pool.acquire("a"), std::runtime_error);
  CHECK(pool.state("a") == frugal::model_state::unloaded);
  fail = false;
  CHECK(pool.acquire("a"));
  CHECK(h.calls("a") == 2);
}

TEST_CASE(
    "pool: a warm-up gets the model and its input, and a warm-up that throws fails the load and frees the "
    "model") {
  harness h;
  auto o = h.options(100, {{.name = "a", .estimated_bytes = 10, .warm_up_input = "hello"},
                           {.name = "bad", .estimated_bytes = 10, .warm_up_input = "boom"}});
  pool_t* self = nullptr;
  std::optional<frugal::model_state> during;
  o.warm_up = [&](fake_model& m, const spec& s) {
    during = self->state(s.name);
    if (s.warm_up_input == "boom") throw std::runtime_error("warm-up failed");
    m.warmed_with = s.warm_up_input;
  };
  pool_t pool(o, h.clock);
  self = &pool;
  CHECK(pool.acquire("a")->warmed_with == "hello");
  CHECK(during == frugal::model_state::warming);
  CHECK(what_of([&] { pool.acquire("bad"); }) == "warm-up failed");
  CHECK(pool.state("bad") == frugal::model_state::failed);
  CHECK(h.alive == 1);  // "bad" was built and destroyed again
  CHECK(h.unloads() == std::vector<std::string>{"bad"});
}

TEST_CASE("pool: a load that does not fit evicts idle models, least recently used first") {
  harness h;
  pool_t pool(h.options(300, {{.name = "a", .estimated_bytes = 100},
                              {.name = "b", .estimated_bytes = 100},
                              {.name = "c", .estimated_bytes = 100},
                              {.name = "d", .estimated_bytes = 100}}),
              h.clock);
  // Recency is the time of a model's last release on the pool's clock: each use a tick later.
  pool.preload("a");
  h.clock.advance(1ms);
  pool.preload("b");
  h.clock.advance(1ms);
  pool.preload("c");
  h.clock.advance(1ms);
  pool.acquire("a").reset();  // a is now the most recently used: b, c, a
  h.clock.advance(1ms);
  CHECK(h.alive == 3);
  CHECK(pool.stats().used_bytes == 300);

  pool.preload("d");
  CHECK(h.unloads() == std::vector<std::string>{"b"});
  CHECK(pool.state("b") == frugal::model_state::unloaded);
  CHECK(pool.ready("a"));
  CHECK(pool.ready("c"));
  h.clock.advance(1ms);
  pool.preload("b");
  CHECK(h.unloads() == std::vector<std::string>{"b", "c"});
  CHECK(h.alive == 3);
  CHECK(pool.stats().used_bytes == 300);
  const auto st = pool.stats();
  CHECK(st.evictions == 2);
  CHECK(status_of(st, "b").evictions == 1);
  CHECK(status_of(st, "b").loads == 2);
  CHECK(h.calls("b") == 2);
}

TEST_CASE(
    "pool: a leased model is never evicted; when leases leave no room, acquire throws pool_exhausted naming "
    "model and bytes") {
  harness h;
  pool_t pool(h.options(200, {{.name = "a", .estimated_bytes = 100},
                              {.name = "b", .estimated_bytes = 100},
                              {.name = "c", .estimated_bytes = 150}}),
              h.clock);
  auto held = pool.acquire("a");
  pool.preload("b");
  try {
    pool.acquire("c", 20ms);
    FAIL("expected pool_exhausted");
  } catch (const frugal::pool_exhausted& e) {
    CHECK(e.model() == "c");
    CHECK(e.bytes() == 150);
    CHECK(e.used() == 200);
    CHECK(e.held() == 100);
    CHECK(e.budget() == 200);
    const std::string what = e.what();
    CHECK(what.find("model \"c\" needs 150 bytes") != std::string::npos);
    CHECK(what.find("200 of the 200 byte budget are in use, 100 of them by leased or loading models") !=
          std::string::npos);
  }
  // Evicting b alone would not have made room, so it was left loaded.
  CHECK(h.unloads().empty());
  CHECK(pool.ready("a"));
  CHECK(pool.ready("b"));
  CHECK(h.calls("c") == 0);
  CHECK(pool.stats().exhausted == 1);
  h.clock.advance(1ms);
  held.reset();  // a is now the most recently used
  pool.preload("c");
  CHECK(h.unloads() == std::vector<std::string>{"b", "a"});
}

TEST_CASE("pool: models released within one clock tick are equally recent, and go in config order") {
  harness h;
  pool_t pool(h.options(200, {{.name = "a", .estimated_bytes = 100},
                              {.name = "b", .estimated_bytes = 100},
                              {.name = "c", .estimated_bytes = 100}}),
              h.clock);
  pool.preload("b");
  pool.preload("a");  // released after b, but on the same tick of the manual clock
  pool.preload("c");
  CHECK(h.unloads() == std::vector<std::string>{"a"});
}

TEST_CASE("pool: an acquire waiting for room gets it when another thread's lease ends") {
  harness h;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 100}, {.name = "b", .estimated_bytes = 100}}),
              h.clock);
  auto held = pool.acquire("a");
  std::thread releaser([&] {
    CHECK(eventually([&] { return pool.stats().waiting == 1; }));
    held.reset();
  });
  auto l = pool.acquire("b", std::chrono::nanoseconds::max());
  releaser.join();
  CHECK(l->name == "b");
  CHECK(h.unloads() == std::vector<std::string>{"a"});
  CHECK(h.alive == 1);
}

TEST_CASE("pool: a model larger than the whole budget is refused at once, by estimate or by measurement") {
  harness h;
  auto o = h.options(300, {{.name = "huge", .estimated_bytes = 500},
                           {.name = "liar", .estimated_bytes = 100},
                           {.name = "small", .estimated_bytes = 100}});
  o.acquire_timeout = std::chrono::nanoseconds::max();  // refusal must not wait
  h.measured["liar"] = 400;
  pool_t pool(o, h.clock);
  pool.preload("small");
  try {
    pool.acquire("huge");
    FAIL("expected model_too_large");
  } catch (const frugal::model_too_large& e) {
    CHECK(e.model() == "huge");
    CHECK(e.bytes() == 500);
    CHECK(e.budget() == 300);
    CHECK(std::string(e.what()).find("\"huge\" needs 500 bytes, more than the whole budget of 300") !=
          std::string::npos);
  }
  CHECK(h.calls("huge") == 0);
  CHECK(pool.ready("small"));  // nothing evicted for a hopeless load

  CHECK(what_of([&] { pool.acquire("liar"); }).find("\"liar\" needs 400 bytes") != std::string::npos);
  CHECK(h.calls("liar") == 1);
  CHECK(h.alive == 1);  // the oversize model was destroyed
  CHECK(pool.state("liar") == frugal::model_state::failed);
  CHECK(pool.stats().used_bytes == 100);
  CHECK(pool.stats().too_large == 2);
}

TEST_CASE(
    "pool: the loader's measured bytes replace the estimate in the budget, for this load and the next") {
  harness h;
  h.measured["a"] = 150;
  pool_t pool(h.options(300, {{.name = "a", .estimated_bytes = 100, .idle_unload_after = 1s},
                              {.name = "b", .estimated_bytes = 100},
                              {.name = "c", .estimated_bytes = 100}}),
              h.clock);
  pool.preload("a");
  CHECK(pool.stats().used_bytes == 150);
  CHECK(status_of(pool.stats(), "a").bytes == 150);
  h.clock.advance(1s);
  CHECK(pool.collect_idle() == 1);
  CHECK(pool.stats().used_bytes == 0);
  pool.preload("b");
  pool.preload("c");
  // Charged at its estimate, a would fit beside b and c; charged at the 150 bytes it measured, b must go.
  pool.preload("a");
  CHECK(h.unloads() == std::vector<std::string>{"a", "b"});
  CHECK(pool.stats().used_bytes == 250);
}

TEST_CASE("pool: a measured size over the remaining room evicts idle models after the load") {
  harness h;
  h.measured["b"] = 250;
  pool_t pool(h.options(300, {{.name = "a", .estimated_bytes = 100}, {.name = "b", .estimated_bytes = 100}}),
              h.clock);
  pool.preload("a");
  pool.preload("b");
  CHECK(h.unloads() == std::vector<std::string>{"a"});
  CHECK(pool.stats().used_bytes == 250);
  CHECK(pool.stats().over_budget_loads == 0);
}

TEST_CASE("pool: collect_idle unloads a model after idle_unload_after on the injected clock, and frees it") {
  harness h;
  pool_t pool(
      h.options(1000, {{.name = "a", .estimated_bytes = 100, .idle_unload_after = 10min},
                       {.name = "forever", .estimated_bytes = 100},
                       {.name = "pinned", .estimated_bytes = 100, .pinned = true, .idle_unload_after = 1s}}),
      h.clock);
  pool.load_pinned();
  pool.preload("forever");
  {
    auto l = pool.acquire("a");
    h.clock.advance(1h);  // time under a lease is not idle time
    CHECK(pool.collect_idle() == 0);
  }
  CHECK(h.alive == 3);
  h.clock.advance(9min);
  CHECK(pool.collect_idle() == 0);
  CHECK(pool.ready("a"));
  h.clock.advance(1min);
  CHECK(pool.collect_idle() == 1);
  CHECK(pool.state("a") == frugal::model_state::unloaded);
  CHECK(h.alive == 2);
  CHECK(h.unloads() == std::vector<std::string>{"a"});
  h.clock.advance(24h);
  CHECK(pool.collect_idle() == 0);  // neither the pinned model nor one with no idle_unload_after
  const auto st = pool.stats();
  CHECK(st.idle_unloads == 1);
  CHECK(st.used_bytes == 200);
  // Loaded for 1h 10min at 100 bytes.
  CHECK(status_of(st, "a").byte_seconds == doctest::Approx(100.0 * 4200));
  // The next acquire loads it again.
  CHECK(pool.acquire("a"));
  CHECK(h.calls("a") == 2);
}

TEST_CASE("pool: the background collector unloads idle models without a collect_idle call") {
  harness h;
  auto o = h.options(100, {{.name = "a", .estimated_bytes = 100, .idle_unload_after = 1min}});
  o.collect_interval = 1ms;
  pool_t pool(o, h.clock);
  pool.preload("a");
  h.clock.advance(2min);
  CHECK(eventually([&] { return pool.state("a") == frugal::model_state::unloaded; }));
  // The collector marks the model unloaded, then destroys it outside the pool's lock.
  CHECK(eventually([&] { return h.alive == 0; }));
}

TEST_CASE("pool: pinned models load with load_pinned, make readyz true and are never evicted") {
  harness h;
  pool_t pool(h.options(200, {{.name = "p", .estimated_bytes = 100, .pinned = true},
                              {.name = "a", .estimated_bytes = 100},
                              {.name = "b", .estimated_bytes = 100}}),
              h.clock);
  CHECK_FALSE(pool.ready());
  pool.load_pinned();
  CHECK(pool.ready());
  CHECK(h.calls("p") == 1);
  pool.preload("a");
  pool.preload("b");  // p is the least recently used, but pinned: a goes
  CHECK(h.unloads() == std::vector<std::string>{"a"});
  CHECK(pool.ready("p"));
}

TEST_CASE("pool: max_users bounds the leases of one model; one more waits, then throws model_busy") {
  harness h;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 10, .max_users = 2}}), h.clock);
  auto l1 = pool.acquire("a");
  auto l2 = pool.acquire("a");
  try {
    pool.acquire("a", 10ms);
    FAIL("expected model_busy");
  } catch (const frugal::model_busy& e) {
    CHECK(e.model() == "a");
    CHECK(e.max_users() == 2);
  }
  std::thread releaser([&] {
    CHECK(eventually([&] { return pool.stats().waiting == 1; }));
    l1.reset();
  });
  auto l3 = pool.acquire("a", std::chrono::nanoseconds::max());
  releaser.join();
  CHECK(l3.get() == l2.get());
  CHECK(pool.stats().busy == 1);
}

TEST_CASE(
    "pool: destroying the pool unloads idle models; a lease that outlives it frees its model at the end") {
  harness h;
  std::optional<pool_t::lease> kept;
  {
    pool_t pool(
        h.options(300, {{.name = "a", .estimated_bytes = 100}, {.name = "b", .estimated_bytes = 100}}),
        h.clock);
    pool.preload("a");
    kept = pool.acquire("b");
    CHECK(h.alive == 2);
  }
  CHECK(h.alive == 1);
  CHECK((*kept)->name == "b");
  kept.reset();
  CHECK(h.alive == 0);
  CHECK(h.unloads() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("pool: without an unload hook the model's destructor releases it") {
  std::atomic<int> alive{0};
  frugal::manual_clock clock;
  pool_t pool({.budget_bytes = 100,
               .models = {{.name = "a", .estimated_bytes = 100, .idle_unload_after = 1s},
                          {.name = "b", .estimated_bytes = 100}},
               .load =
                   [&](const spec& s) {
                     return frugal::loaded_model<fake_model>{std::make_unique<fake_model>(s.name, alive)};
                   }},
              clock);
  pool.preload("a");
  CHECK(alive == 1);
  pool.preload("b");
  CHECK(alive == 1);
  CHECK(pool.ready("b"));
  CHECK(pool.state("a") == frugal::model_state::unloaded);
}

TEST_CASE("pool: a loader that returns no model fails the load with a message naming it") {
  frugal::manual_clock clock;
  pool_t pool({.budget_bytes = 100,
               .models = {{.name = "empty", .estimated_bytes = 10}},
               .load = [](const spec&) { return frugal::loaded_model<fake_model>{}; }},
              clock);
  CHECK(what_of([&] { pool.acquire("empty"); }).find("loader returned no model for \"empty\"") !=
        std::string::npos);
  CHECK(pool.stats().used_bytes == 0);
}

TEST_CASE("pool: load times go to the stats and the ledger; unloads to the ledger") {
  harness h;
  frugal::cost::ledger<frugal::manual_clock> ledger(
      {.prices = {{.gpu_class = "L4",
                   .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}, {.gpu_class = "L4"}}},
      h.clock);
  auto o = h.options(100, {{.name = "a", .estimated_bytes = 100}, {.name = "b", .estimated_bytes = 100}});
  o.ledger = &ledger;
  o.ledger_device = 1;
  pool_t pool(o, h.clock);
  h.before_load = [&](const spec& s) { h.clock.advance(s.name == "a" ? 2s : 3s); };
  pool.preload("a");
  pool.preload("b");
  const auto st = pool.stats();
  CHECK(status_of(st, "a").last_load_time == 2s);
  CHECK(status_of(st, "b").load_time_total == 3s);
  CHECK(st.cold_start.count == 2);
  CHECK(st.cold_start.sum == static_cast<std::uint64_t>(std::chrono::nanoseconds(5s).count()));
  const auto snap = ledger.snapshot();
  CHECK(snap.devices[1].model_loads == 2);
  CHECK(snap.devices[1].model_unloads == 1);
  CHECK(snap.devices[1].load == 5s);
  CHECK(snap.devices[0].model_loads == 0);
}

TEST_CASE("pool: threads acquiring models at random under a tight budget keep the budget and leak nothing") {
  harness h;
  auto o = h.options(200, {{.name = "m0", .estimated_bytes = 100, .idle_unload_after = 1ms},
                           {.name = "m1", .estimated_bytes = 100, .idle_unload_after = 1ms},
                           {.name = "m2", .estimated_bytes = 100, .idle_unload_after = 1ms},
                           {.name = "m3", .estimated_bytes = 100, .idle_unload_after = 1ms}});
  o.acquire_timeout = std::chrono::nanoseconds::max();
  o.retry_backoff = 0s;
  std::atomic<int> attempts{0};
  h.before_load = [&](const spec&) {
    if (attempts.fetch_add(1) % 7 == 3) throw std::runtime_error("flaky");
  };
  std::atomic<int> over_budget{0}, wrong_model{0}, flaky{0};
  {
    pool_t pool(o, h.clock);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int i = 0; i < 150; ++i) {
          const std::string name = std::string("m").append(std::to_string(rng() % 4));
          try {
            auto l = pool.acquire(name);
            if (l->name != name) wrong_model.fetch_add(1);
            if (pool.stats().used_bytes > 200) over_budget.fetch_add(1);
          } catch (const std::runtime_error& e) {
            if (std::string(e.what()) == "flaky") flaky.fetch_add(1);
          }
          if (t == 0 && i % 10 == 0) {
            h.clock.advance(1ms);
            pool.collect_idle();
          }
        }
      });
    for (auto& t : ts) t.join();
    const auto st = pool.stats();
    CHECK(st.leases == 0);
    CHECK(st.used_bytes <= 200);
    CHECK(h.alive == static_cast<int>(st.used_bytes / 100));
    CHECK(st.loads - st.load_failures - st.unloads == st.used_bytes / 100);
  }
  CHECK(over_budget == 0);
  CHECK(wrong_model == 0);
  CHECK(flaky > 0);
  CHECK(h.alive == 0);
}

TEST_CASE(
    "pool: leases taken and ended without the lock race idle unloads and evictions; every acquire is counted "
    "and every lease holds a live model") {
  harness h;
  auto o = h.options(200, {{.name = "m0", .estimated_bytes = 100, .idle_unload_after = 1ms, .max_users = 2},
                           {.name = "m1", .estimated_bytes = 100, .idle_unload_after = 1ms},
                           {.name = "m2", .estimated_bytes = 100, .idle_unload_after = 1ms}});
  o.acquire_timeout = std::chrono::nanoseconds::max();
  std::atomic<int> wrong{0};
  std::atomic<std::uint64_t> calls{0};
  {
    pool_t pool(o, h.clock);
    const std::vector<pool_t::handle> handles{pool.find("m0"), pool.find("m1"), pool.find("m2")};
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(t) + 7);
        for (int i = 0; i < 3000; ++i) {
          // Mostly the same model again (the lock-free path), sometimes another (a load, an eviction).
          const std::size_t k = rng() % 8 == 0 ? rng() % 3 : static_cast<std::size_t>(t);
          calls.fetch_add(1);
          auto l = i % 2 == 0 ? pool.acquire(handles[k]) : pool.acquire(handles[k].name());
          // ASan reports a model used after its unload; the name shows it is the model asked for. (Live
          // instances may exceed the budget's two for a moment: an unloaded model is destroyed outside
          // the pool's lock, while another may already load in its bytes.)
          if (l->name != handles[k].name()) wrong.fetch_add(1);
          if (t == 0 && i % 64 == 0) {
            h.clock.advance(1ms);
            pool.collect_idle();
          }
        }
      });
    for (auto& t : ts) t.join();
    const auto st = pool.stats();
    CHECK(st.acquires == calls.load());
    CHECK(st.leases == 0);
    CHECK(st.waiting == 0);
    CHECK(st.used_bytes <= 200);
    CHECK(h.alive == static_cast<int>(st.used_bytes / 100));
    CHECK(st.loads - st.unloads == st.used_bytes / 100);
    CHECK(st.evictions + st.idle_unloads > 0);
  }
  CHECK(wrong == 0);
  CHECK(h.alive == 0);
}

TEST_CASE("pool: the acquire count stays exact past the gate's own count (2^20 acquires without the lock)") {
  harness h;
  pool_t pool(h.options(100, {{.name = "a", .estimated_bytes = 10}}), h.clock);
  const auto a = pool.find("a");
  CHECK(a.name() == "a");
  constexpr std::uint64_t n = (std::uint64_t{1} << 20) + 5;
  for (std::uint64_t i = 0; i < n; ++i) pool.acquire(a).reset();
  const auto st = pool.stats();
  CHECK(st.acquires == n);
  CHECK(st.loads == 1);
  CHECK(st.leases == 0);
  CHECK_THROWS_AS(pool.find("nope"), frugal::unknown_model);
}

spec version(const std::string& v, std::size_t bytes = 100) {
  return {.name = "m", .args = {{"version", v}}, .estimated_bytes = bytes};
}

TEST_CASE(
    "pool: reload swaps in a new version without failing a request; the old one stays until its last lease "
    "ends") {
  harness h;
  std::optional<pool_t::lease> kept;
  {
    pool_t pool(h.options(1000, {version("1")}), h.clock);
    auto old = pool.acquire("m");
    CHECK(old->version == "1");
    // While version 2 loads, acquires are served at once by version 1.
    std::optional<std::string> served_during;
    h.before_load = [&](const spec& s) {
      if (s.args.at("version") == "2") served_during = pool.acquire("m")->version;
    };
    pool.reload(version("2"));
    CHECK(served_during == "1");
    CHECK(pool.acquire("m")->version == "2");
    CHECK(old->version == "1");
    CHECK(h.alive == 2);
    auto st = pool.stats();
    CHECK(st.used_bytes == 200);
    CHECK(status_of(st, "m").retired_users == 1);
    CHECK(status_of(st, "m").retired_bytes == 100);
    CHECK(status_of(st, "m").reloads == 1);
    old.reset();
    CHECK(h.alive == 1);
    CHECK(h.unloads() == std::vector<std::string>{"m"});
    st = pool.stats();
    CHECK(st.used_bytes == 100);
    CHECK(status_of(st, "m").retired_users == 0);
    // A replaced version may outlive the pool too.
    kept = pool.acquire("m");
    pool.reload(version("3"));
    CHECK(pool.acquire("m")->version == "3");
  }
  CHECK(h.alive == 1);
  CHECK((*kept)->version == "2");
  kept.reset();
  CHECK(h.alive == 0);
}

TEST_CASE("pool: a reload whose new version fails to load leaves the current one serving") {
  harness h;
  pool_t pool(h.options(1000, {version("1")}), h.clock);
  pool.preload("m");
  h.before_load = [](const spec& s) {
    if (s.args.at("version") == "2") throw std::runtime_error("bad checkpoint");
  };
  CHECK(what_of([&] { pool.reload(version("2")); }) == "bad checkpoint");
  CHECK(pool.ready("m"));
  CHECK(pool.acquire("m")->version == "1");
  CHECK(h.alive == 1);
  const auto st = pool.stats();
  CHECK(st.used_bytes == 100);
  CHECK(status_of(st, "m").reload_failures == 1);
  CHECK(status_of(st, "m").load_failures == 0);
}

TEST_CASE(
    "pool: a reload without room for both versions swaps an idle model cold, and waits for a leased one") {
  harness h;
  pool_t pool(h.options(150, {version("1")}), h.clock);
  pool.preload("m");
  pool.reload(version("2"));
  CHECK(h.unloads() == std::vector<std::string>{"m"});
  CHECK(h.calls("m") == 2);
  CHECK(h.alive == 1);
  auto held = pool.acquire("m");
  CHECK(held->version == "2");
  try {
    pool.reload(version("3"), 10ms);
    FAIL("expected pool_exhausted");
  } catch (const frugal::pool_exhausted& e) {
    CHECK(e.model() == "m");
    CHECK(e.bytes() == 100);
    CHECK(e.held() == 100);
  }
  CHECK(pool.ready("m"));
  CHECK(pool.acquire("m")->version == "2");
  CHECK_THROWS_AS(pool.reload(version("4", 500)), frugal::model_too_large);
  CHECK_THROWS_AS(pool.reload({.name = "other", .estimated_bytes = 1}), frugal::unknown_model);
  CHECK(what_of([&] { pool.reload(version("5", 0)); }).find("(\"m\").estimated_bytes must be > 0") !=
        std::string::npos);
}

TEST_CASE("pool: a reload of a model not loaded takes the new spec for its next load") {
  harness h;
  pool_t pool(h.options(1000, {version("1")}), h.clock);
  pool.reload(version("2"));
  CHECK(h.calls("m") == 0);
  CHECK(pool.acquire("m")->version == "2");
  CHECK(h.calls("m") == 1);
}

TEST_CASE("pool: requests racing repeated reloads are all served, and every replaced version is freed") {
  harness h;
  auto o = h.options(1000, {version("0")});
  o.acquire_timeout = std::chrono::nanoseconds::max();
  std::atomic<int> failures{0}, served{0};
  std::atomic<bool> stop{false};
  {
    pool_t pool(o, h.clock);
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t)
      ts.emplace_back([&] {
        while (!stop.load()) {
          try {
            auto l = pool.acquire("m");
            if (l->version.empty()) failures.fetch_add(1);
            served.fetch_add(1);
          } catch (...) {
            failures.fetch_add(1);
          }
        }
      });
    for (int v = 1; v <= 20; ++v) {
      const int before = served.load();
      CHECK(eventually([&] { return served.load() > before + 2; }));
      pool.reload(version(std::to_string(v)));
    }
    stop = true;
    for (auto& t : ts) t.join();
    CHECK(pool.acquire("m")->version == "20");
    const auto st = pool.stats();
    CHECK(status_of(st, "m").reloads == 20);
    CHECK(status_of(st, "m").retired_users == 0);
    CHECK(st.used_bytes == 100);
    CHECK(h.alive == 1);
  }
  CHECK(failures == 0);
  CHECK(served > 0);
  CHECK(h.alive == 0);
}

namespace {
struct encoder {
  explicit encoder(std::string p) : path(std::move(p)) {}
  std::size_t bytes() const { return path.size() << 20; }
  std::vector<float> embed(const std::vector<std::string>& texts) const {
    return std::vector<float>(texts.size());
  }
  std::string path;
};
}  // namespace

TEST_CASE("pool: the README example compiles and serves from a lease") {
  frugal::model_pool<encoder> pool({.budget_bytes = 8ull << 30,
                                    .models = {{.name = "minilm-int8",
                                                .args = {{"path", "minilm.safetensors"}, {"dtype", "int8"}},
                                                .estimated_bytes = 30 << 20,
                                                .pinned = true},
                                               {.name = "bge-large",
                                                .args = {{"path", "bge.safetensors"}},
                                                .estimated_bytes = 1400 << 20,
                                                .idle_unload_after = std::chrono::minutes(10)}},
                                    .load =
                                        [](const frugal::model_spec<>& s) {
                                          auto m = std::make_unique<encoder>(s.args.at("path"));
                                          const std::size_t bytes = m->bytes();
                                          return frugal::loaded_model<encoder>{std::move(m), bytes};
                                        },
                                    .collect_interval = std::chrono::seconds(30)});
  pool.load_pinned();
  CHECK(pool.ready());
  auto lease = pool.acquire("bge-large");
  CHECK(lease->embed({"a", "b"}).size() == 2);
  CHECK(status_of(pool.stats(), "bge-large").bytes == std::string("bge.safetensors").size() << 20);
}

// The sanitizers' allocators keep freed memory in quarantine, so RSS says nothing under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#  define FRUGAL_TEST_RSS 0
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#    define FRUGAL_TEST_RSS 0
#  endif
#endif
#ifndef FRUGAL_TEST_RSS
#  define FRUGAL_TEST_RSS 1
#endif

#if FRUGAL_TEST_RSS
namespace {
std::size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// 64 MiB, above glibc's largest mmap threshold (32 MiB), so malloc maps it and free unmaps it at once.
struct weights {
  static constexpr std::size_t size = std::size_t{64} << 20;
  weights() : data(new char[size]) { std::memset(data.get(), 1, size); }
  std::unique_ptr<char[]> data;
};
}  // namespace

TEST_CASE("pool: an idle unload gives the model's memory back to the OS (RSS)" *
          frugal_test::needs(frugal_test::file("procfs", "/proc/self/statm"))) {
  frugal::manual_clock clock;
  frugal::model_pool<weights, frugal::model_args, frugal::manual_clock> pool(
      {.budget_bytes = 1ull << 30,
       .models = {{.name = "w", .estimated_bytes = weights::size, .idle_unload_after = 1s}},
       .load =
           [](const frugal::model_spec<>&) {
             return frugal::loaded_model<weights>{std::make_unique<weights>()};
           }},
      clock);
  const std::size_t before = rss_bytes();
  pool.preload("w");
  const std::size_t loaded = rss_bytes();
  CHECK(loaded >= before + weights::size * 3 / 4);
  clock.advance(1s);
  CHECK(pool.collect_idle() == 1);
  const std::size_t after = rss_bytes();
  CHECK(after + weights::size * 3 / 4 <= loaded);
  MESSAGE("RSS before ", before >> 20, " MiB, loaded ", loaded >> 20, " MiB, after unload ", after >> 20,
          " MiB");
}
#endif
