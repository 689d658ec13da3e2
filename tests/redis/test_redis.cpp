#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <frugal/clock.hpp>
#include <frugal/cost.hpp>
#include <frugal/redis.hpp>

#include "redis_server.hpp"

using namespace std::chrono_literals;
using frugal_test::redis_server;

namespace {

using vec = std::vector<float>;
using tier = frugal::redis_tier<vec>;
using manual_tier = frugal::redis_tier<vec, frugal::redis_codec<vec>, frugal::manual_clock>;

frugal::redis_options at(const redis_server& s, std::string version = "1") {
  return {.port = s.port(), .model = "test-model", .version = std::move(version)};
}

vec value_of(std::uint64_t id) { return {static_cast<float>(id), 2.5f}; }
frugal::key128 key_of(std::uint64_t id) { return {id, 77}; }

std::map<std::string, long> parse_counts(const std::string& line) {
  std::map<std::string, long> m;
  std::istringstream in(line);
  std::string kv;
  while (in >> kv) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = std::stol(kv.substr(eq + 1));
  }
  return m;
}

frugal::cost::ledger_options ledger_opts() {
  using namespace frugal::cost;
  return {.prices = {{.gpu_class = "L4", .on_demand = rate::per_hour(money::parse("$0.80"))}},
          .devices = {{.gpu_class = "L4"}}};
}

}  // namespace

TEST_CASE("redis_tier: options that cannot work are refused, naming the field") {
  auto bad = [](frugal::redis_options r) { return tier(tier::options_type{.redis = std::move(r)}); };
  CHECK_THROWS_WITH_AS(bad({.model = "", .version = "1"}), doctest::Contains("options.model"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m:x", .version = "1"}), doctest::Contains("options.model"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m", .version = ""}), doctest::Contains("options.version"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m", .version = "1", .ttl = 0ms}), doctest::Contains("options.ttl"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m", .version = "1", .command_timeout = 0ms}),
                       doctest::Contains("options.command_timeout"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m", .version = "1", .connections = 0}),
                       doctest::Contains("options.connections"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.model = "m", .version = "1", .breaker_jitter = 1.5}),
                       doctest::Contains("options.breaker_jitter"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(bad({.port = 0, .model = "m", .version = "1"}), doctest::Contains("options.port"),
                       std::invalid_argument);
}

TEST_CASE("redis errors: each redis_errc has a short name, none meaning no fault") {
  CHECK(std::string(frugal::to_string(frugal::redis_errc::none)) == "none");
  CHECK(std::string(frugal::to_string(frugal::redis_errc::skipped)) == "skipped");
  CHECK(std::string(frugal::to_string(frugal::redis_errc::timeout)) == "timeout");
  CHECK(std::string(frugal::to_string(frugal::redis_errc::connection)) == "connection");
  CHECK(std::string(frugal::to_string(frugal::redis_errc::auth)) == "auth");
  CHECK(std::string(frugal::to_string(static_cast<frugal::redis_errc>(99))) == "unknown");
}

TEST_CASE("redis codec: the header carries format, type and codec version, and any mismatch is refused") {
  struct pod {
    int a;
    float b;
  };
  const std::string blob = frugal::detail::redis_encode<pod, frugal::redis_codec<pod>>(pod{3, 4.5f});
  REQUIRE(blob.size() == frugal::detail::redis_header_size + sizeof(pod));
  CHECK(blob.substr(0, 4) == "FRGV");
  std::optional<pod> out;
  REQUIRE(frugal::detail::redis_decode<pod, frugal::redis_codec<pod>>(blob, out) ==
          frugal::detail::decode_result::ok);
  CHECK(out->a == 3);
  CHECK(out->b == 4.5f);
  // The same bytes read as another type of the same size: a header mismatch, not a reinterpretation.
  std::optional<std::int64_t> other;
  CHECK(frugal::detail::redis_decode<std::int64_t, frugal::redis_codec<std::int64_t>>(blob, other) ==
        frugal::detail::decode_result::header_mismatch);
  std::string truncated = blob.substr(0, blob.size() - 1);
  CHECK(frugal::detail::redis_decode<pod, frugal::redis_codec<pod>>(truncated, out) ==
        frugal::detail::decode_result::header_mismatch);
  std::string bumped = blob;
  bumped[16] = static_cast<char>(bumped[16] + 1);  // the codec version
  CHECK(frugal::detail::redis_decode<pod, frugal::redis_codec<pod>>(bumped, out) ==
        frugal::detail::decode_result::header_mismatch);
  const std::string v = frugal::detail::redis_encode<vec, frugal::redis_codec<vec>>(vec{1, 2, 3});
  std::optional<vec> vo;
  REQUIRE(frugal::detail::redis_decode<vec, frugal::redis_codec<vec>>(v, vo) ==
          frugal::detail::decode_result::ok);
  CHECK(*vo == vec{1, 2, 3});
}

TEST_CASE("redis_tier: a value written by one tier is read by another, under its namespace only") {
  redis_server srv;
  tier a(tier::options_type{.redis = at(srv)});
  tier b(tier::options_type{.redis = at(srv)});
  tier other_version(tier::options_type{.redis = at(srv, "2")});
  CHECK(a.put(key_of(1), value_of(1)));
  auto got = b.get(key_of(1));
  REQUIRE(got);
  CHECK(*got == value_of(1));
  CHECK(b.stats().redis_hits == 1);
  CHECK_FALSE(other_version.get(key_of(1)));
  // The second read is the LRU's, with no round trip.
  const auto before = b.stats().redis.round_trips;
  CHECK(b.get(key_of(1)));
  CHECK(b.stats().local_hits == 1);
  CHECK(b.stats().redis.round_trips == before);
  // The key is binary: the namespace, then the 16 bytes of the key128.
  const std::string k = a.redis_key(key_of(1));
  CHECK(k.substr(0, 21) == "frugal:test-model:1:v");
  CHECK(k.size() == 21 + 16);
  auto exists = srv.command({"EXISTS", k});
  CHECK(exists->integer == 1);
}

TEST_CASE("redis_tier: two replica processes share results; the second makes no model call") {
  redis_server srv;
  auto run = [&](std::uint64_t first, std::uint64_t count) {
    auto c = frugal_test::child::spawn({FRUGAL_REDIS_REPLICA, std::to_string(srv.port()),
                                        std::to_string(first), std::to_string(count), "0", "0"});
    REQUIRE(c.read_line() == "ready");
    c.write_line("go");
    auto counts = parse_counts(c.read_line());
    CHECK(c.wait() == 0);
    return counts;
  };
  auto first = run(0, 40);
  CHECK(first["model_calls"] == 40);
  CHECK(first["redis_hits"] == 0);
  CHECK(first["values_ok"] == 1);
  auto second = run(0, 40);
  CHECK(second["model_calls"] == 0);
  CHECK(second["redis_hits"] == 40);
  CHECK(second["values_ok"] == 1);
}

TEST_CASE("redis_tier: replicas asking for one key at once compute it once (cross-replica single flight)") {
  redis_server srv;
  constexpr int n = 4;
  std::vector<frugal_test::child> cs;
  for (int i = 0; i < n; ++i)
    cs.push_back(frugal_test::child::spawn(
        {FRUGAL_REDIS_REPLICA, std::to_string(srv.port()), "1000", "1", "300", "1"}));
  for (auto& c : cs) REQUIRE(c.read_line() == "ready");
  for (auto& c : cs) c.write_line("go");
  long calls = 0, waits = 0, hits = 0, ok = 0;
  for (auto& c : cs) {
    auto m = parse_counts(c.read_line());
    calls += m["model_calls"];
    waits += m["lock_waits"];
    hits += m["redis_hits"];
    ok += m["values_ok"];
    CHECK(c.wait() == 0);
  }
  CHECK(calls == 1);
  CHECK(hits == n - 1);
  CHECK(waits >= 1);
  CHECK(ok == n);
}

TEST_CASE("redis_tier: concurrent misses on one key in a process run the model once") {
  redis_server srv;
  tier t(tier::options_type{.redis = at(srv)});
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  std::vector<tier::pointer> got(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      got[i] = t.get_or_compute(key_of(5), [&] {
        calls.fetch_add(1);
        std::this_thread::sleep_for(50ms);
        return value_of(5);
      });
    });
  for (auto& th : threads) th.join();
  CHECK(calls.load() == 1);
  for (auto& g : got) CHECK((g && *g == value_of(5)));
  CHECK(t.stats().model_calls == 1);
}

TEST_CASE("redis_tier: values expire from Redis after their TTL") {
  redis_server srv;
  auto opts = at(srv);
  opts.ttl = 150ms;
  tier writer(tier::options_type{.redis = opts, .local = {}});
  tier reader(tier::options_type{.redis = opts, .local = {}});
  REQUIRE(writer.put(key_of(9), value_of(9)));
  auto pttl = srv.command({"PTTL", writer.redis_key(key_of(9))});
  CHECK(pttl->integer > 0);
  CHECK(pttl->integer <= 150);
  CHECK(reader.get(key_of(9)));
  std::this_thread::sleep_for(250ms);
  CHECK_FALSE(reader.get(key_of(9)));
  CHECK(reader.stats().misses == 1);
}

TEST_CASE("redis_tier: a value with a wrong header is a counted miss, recomputed and overwritten") {
  redis_server srv;
  tier t(tier::options_type{.redis = at(srv), .local = {}});
  const std::string k = t.redis_key(key_of(3));
  srv.command({"SET", k, std::string("FRGV\x01\x00garbage-from-an-older-format", 34)});
  CHECK_FALSE(t.get(key_of(3)));
  CHECK(t.stats().header_mismatches == 1);
  int calls = 0;
  auto v = t.get_or_compute(key_of(3), [&] {
    ++calls;
    return value_of(3);
  });
  CHECK(calls == 1);
  CHECK(*v == value_of(3));
  CHECK(t.stats().header_mismatches == 2);
  auto again = t.get(key_of(3));
  REQUIRE(again);
  CHECK(*again == value_of(3));
  CHECK(t.stats().header_mismatches == 2);
}

TEST_CASE("redis_tier: a batch's lookups and writes are one round trip each") {
  redis_server srv;
  tier t(tier::options_type{.redis = at(srv), .local = {}});
  std::vector<frugal::key128> keys;
  std::vector<vec> values;
  for (std::uint64_t i = 0; i < 32; ++i) {
    keys.push_back(key_of(100 + i));
    values.push_back(value_of(100 + i));
  }
  const std::vector<frugal::key128> half(keys.begin(), keys.begin() + 16);
  const std::vector<vec> half_values(values.begin(), values.begin() + 16);
  auto rt = [&] { return t.stats().redis.round_trips; };
  auto r0 = rt();
  CHECK(t.put_batch(half, half_values) == 16);
  CHECK(rt() == r0 + 1);
  r0 = rt();
  std::vector<std::size_t> asked;
  auto got = t.get_or_compute_batch(keys, [&](std::span<const std::size_t> missing) {
    asked.assign(missing.begin(), missing.end());
    std::vector<vec> out;
    for (std::size_t i : missing) out.push_back(value_of(100 + i));
    return out;
  });
  CHECK(rt() == r0 + 2);  // one MGET, one pipeline of 16 SETs
  REQUIRE(asked.size() == 16);
  CHECK(asked.front() == 16);
  for (std::size_t i = 0; i < 32; ++i) CHECK((got[i] && *got[i] == values[i]));
  r0 = rt();
  auto all = t.get_batch(keys);
  CHECK(rt() == r0 + 1);
  for (std::size_t i = 0; i < 32; ++i) CHECK((all[i] && *all[i] == values[i]));
  CHECK(t.stats().redis_hits == 16 + 32);
  CHECK_THROWS_AS(
      t.get_or_compute_batch(keys.begin() == keys.end() ? keys : std::vector<frugal::key128>{key_of(999)},
                             [](std::span<const std::size_t>) { return std::vector<vec>{}; }),
      std::logic_error);
}

TEST_CASE(
    "redis_tier: redis-server killed mid-run falls back to the model, opens the breaker, then recovers") {
  redis_server srv;
  frugal::manual_clock clock;
  frugal::cost::ledger<> ledger(ledger_opts());
  const auto feature = ledger.feature("chat");
  auto opts = at(srv);
  opts.breaker_failures = 2;
  opts.breaker_backoff = 100ms;
  opts.breaker_jitter = 0;
  manual_tier t(manual_tier::options_type{.redis = opts, .local = {}, .ledger = &ledger, .feature = feature},
                clock);
  int calls = 0;
  auto compute = [&](std::uint64_t id) {
    return t.get_or_compute(key_of(id), [&] {
      ++calls;
      return value_of(id);
    });
  };
  REQUIRE(*compute(1) == value_of(1));
  REQUIRE(*compute(1) == value_of(1));
  CHECK(calls == 1);
  CHECK(t.stats().redis_hits == 1);

  srv.kill();
  for (std::uint64_t id = 1; id <= 5; ++id) CHECK(*compute(id) == value_of(id));  // no caller error
  CHECK(calls == 6);
  auto st = t.stats();
  CHECK(st.fallbacks == 5);
  CHECK(st.redis.breaker == frugal::breaker_state::open);
  CHECK(st.redis.breaker_opens == 1);
  CHECK(st.redis.connection_errors >= 2);
  CHECK(st.redis.breaker_skips == 3);  // after two faults, the breaker stopped trying
  CHECK(ledger.snapshot().find("chat")->remote_faults == 5);

  REQUIRE(srv.start());
  clock.advance(50ms);
  compute(6);  // still backing off
  CHECK(t.breaker() == frugal::breaker_state::open);
  clock.advance(60ms);
  compute(7);  // the probe reconnects: a miss (the restarted Redis is empty), computed and written
  CHECK(t.breaker() == frugal::breaker_state::closed);
  const int before = calls;
  CHECK(*compute(7) == value_of(7));
  CHECK(calls == before);
  CHECK(t.stats().redis_hits == 2);
  CHECK(t.stats().redis.connects >= 2);
  const auto snap = ledger.snapshot();
  CHECK(snap.find("chat")->remote_hits == 2);
  CHECK(snap.find("chat")->remote_latency.count() > 0);
  CHECK(snap.find("chat")->cache_hits == 2);
}

TEST_CASE(
    "redis_tier: a redis-server paused by SIGSTOP costs each call at most its timeout, and opens the "
    "breaker") {
  redis_server srv;
  frugal::manual_clock clock;
  auto opts = at(srv);
  opts.command_timeout = 5ms;
  opts.breaker_failures = 3;
  opts.breaker_jitter = 0;
  manual_tier t(manual_tier::options_type{.redis = opts, .local = {}}, clock);
  REQUIRE(t.put(key_of(1), value_of(1)));
  srv.pause();
  int calls = 0;
  std::chrono::nanoseconds worst{0};
  for (std::uint64_t id = 1; id <= 10; ++id) {
    const auto t0 = std::chrono::steady_clock::now();
    auto v = t.get_or_compute(key_of(id), [&] {
      ++calls;
      return value_of(id);
    });
    worst = std::max<std::chrono::nanoseconds>(worst, std::chrono::steady_clock::now() - t0);
    CHECK(*v == value_of(id));
  }
  CHECK(calls == 10);
  auto st = t.stats();
  CHECK(st.redis.timeouts == 3);
  CHECK(st.redis.breaker == frugal::breaker_state::open);
  CHECK(st.redis.breaker_skips == 7);
  CHECK(st.fallbacks == 10);
  // A timeout is 5 ms; the bound leaves room for a loaded, sanitized machine, far below a hang.
  CHECK(worst < 500ms);
  srv.resume();
  clock.advance(200ms);
  CHECK(t.get(key_of(1)));
  CHECK(t.breaker() == frugal::breaker_state::closed);
}

TEST_CASE("redis_tier: with maxmemory and noeviction full, writes fail and are counted while reads go on") {
  redis_server srv;
  tier t(tier::options_type{.redis = at(srv), .local = {}});
  REQUIRE(t.put(key_of(1), value_of(1)));
  srv.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  auto r = srv.command({"CONFIG", "SET", "maxmemory", "1"});
  REQUIRE(r->type == REDIS_REPLY_STATUS);
  CHECK_FALSE(t.put(key_of(2), value_of(2)));
  int calls = 0;
  auto v = t.get_or_compute(key_of(3), [&] {
    ++calls;
    return value_of(3);
  });
  CHECK(*v == value_of(3));
  auto st = t.stats();
  CHECK(st.write_errors == 2);
  CHECK(st.redis.reply_errors == 2);
  CHECK(st.redis.breaker == frugal::breaker_state::closed);
  auto old = t.get(key_of(1));
  REQUIRE(old);
  CHECK(*old == value_of(1));
  CHECK_FALSE(t.get(key_of(2)));
}

TEST_CASE(
    "redis_tier: AUTH with a password or an ACL user; a refusal is a counted fault that names no secret") {
  const std::string secret = "s3cret-pw-never-logged";
  redis_server srv({"--requirepass", secret});
  auto opts = at(srv);
  opts.auth = {.password = secret};
  tier ok(tier::options_type{.redis = opts, .local = {}});
  CHECK(ok.put(key_of(1), value_of(1)));
  CHECK(ok.get(key_of(1)));

  srv.command({"ACL", "SETUSER", "frugal", "on", ">user-pw-also-secret", "~*", "+@all"}, secret);
  opts.auth = {.user = "frugal", .password = "user-pw-also-secret"};
  tier user(tier::options_type{.redis = opts, .local = {}});
  CHECK(user.get(key_of(1)));

  opts.auth = {.password = "wrong-" + secret};
  tier wrong(tier::options_type{.redis = opts, .local = {}});
  CHECK_FALSE(wrong.get(key_of(1)));
  const auto st = wrong.stats();
  CHECK(st.redis.auth_failures == 1);
  CHECK(st.fallbacks == 1);
  CHECK(st.redis.last_error.find("AUTH refused") != std::string::npos);
  CHECK(st.redis.last_error.find(secret) == std::string::npos);

  const std::string path = std::filesystem::temp_directory_path() / "frugal-redis-auth-test";
  std::ofstream(path) << "frugal user-pw-also-secret\n";
  const auto from_file = frugal::redis_auth::from_file(path);
  CHECK(from_file.user == "frugal");
  CHECK(from_file.password == "user-pw-also-secret");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(frugal::redis_auth::from_file("/nonexistent/frugal-auth"),
                       doctest::Contains("/nonexistent/frugal-auth"), std::invalid_argument);
  ::setenv("FRUGAL_TEST_REDIS_PW", "env-pw", 1);
  CHECK(frugal::redis_auth::from_env("FRUGAL_TEST_REDIS_PW", "FRUGAL_TEST_REDIS_NO_USER").password ==
        "env-pw");
  ::unsetenv("FRUGAL_TEST_REDIS_PW");
  CHECK_THROWS_WITH_AS(frugal::redis_auth::from_env("FRUGAL_TEST_REDIS_PW"),
                       doctest::Contains("FRUGAL_TEST_REDIS_PW"), std::invalid_argument);
}
