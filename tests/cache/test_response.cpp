#include <doctest/doctest.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/prometheus.hpp"
#include "frugal/cache.hpp"
#include "frugal/clock.hpp"
#include "frugal/cost.hpp"

using namespace std::chrono_literals;
using frugal::completion;
using frugal::completion_codec;
using frugal::finish_reason;
using frugal::kv_token;
using frugal::response_request;

namespace {

const std::vector<kv_token> prompt{1, 9690, 198, 2683, 28, 2};
const std::vector<kv_token> eos{2};

response_request greedy() {
  return {.model = "SmolLM2-135M-Instruct.Q4_1.gguf:native", .prompt = prompt, .max_tokens = 64, .stop = eos};
}

completion answer() {
  return {.tokens = {504, 3458, 314}, .reason = finish_reason::stop, .stop_token = 2, .prompt_tokens = 6};
}

std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

}  // namespace

TEST_CASE(
    "response key: a greedy request ignores top_p and the seed, stop ids are a set, and every other "
    "part changes the key") {
  const frugal::key128 k = *frugal::response_key(greedy());
  response_request r = greedy();
  r.top_p = 0.5f;
  r.seed = 7;
  CHECK(*frugal::response_key(r) == k);
  r = greedy();
  r.temperature = -0.0f;
  CHECK(*frugal::response_key(r) == k);
  const std::vector<kv_token> stops{2, 0, 2};
  const std::vector<kv_token> stops_sorted{0, 2};
  r = greedy();
  r.stop = stops;
  response_request r2 = greedy();
  r2.stop = stops_sorted;
  CHECK(*frugal::response_key(r) == *frugal::response_key(r2));
  CHECK(*frugal::response_key(r) != k);

  const std::vector<kv_token> other_prompt{1, 9690, 198, 2683, 28, 3};
  auto differs = [&](response_request x) { return *frugal::response_key(x) != k; };
  r = greedy();
  r.model = "SmolLM2-135M-Instruct.Q4_1.gguf:fp32";
  CHECK(differs(r));
  r = greedy();
  r.prompt = other_prompt;
  CHECK(differs(r));
  r = greedy();
  r.max_tokens = 65;
  CHECK(differs(r));
  r = greedy();
  r.stop = {};
  CHECK(differs(r));

  response_request s = greedy();
  s.temperature = 0.7f;
  s.seed = 42;
  const frugal::key128 ks = *frugal::response_key(s);
  CHECK(ks != k);
  response_request s2 = s;
  s2.seed = 43;
  CHECK(*frugal::response_key(s2) != ks);
  s2 = s;
  s2.top_p = 0.9f;
  CHECK(*frugal::response_key(s2) != ks);
  s2 = s;
  s2.temperature = 0.8f;
  CHECK(*frugal::response_key(s2) != ks);
  // A seed of 0 chosen by the caller is a seed.
  s2 = s;
  s2.seed = 0;
  CHECK(frugal::response_key(s2).has_value());
}

TEST_CASE(
    "response key: a sampled request without a seed is not cacheable, and impossible requests are "
    "refused naming the field") {
  response_request r = greedy();
  r.temperature = 0.7f;
  CHECK_FALSE(frugal::response_cacheable(r));
  CHECK_FALSE(frugal::response_key(r).has_value());
  CHECK(frugal::response_cacheable(greedy()));

  auto refused = [](response_request x, const char* field) {
    CHECK_THROWS_WITH_AS(frugal::response_key(x), doctest::Contains(field), std::invalid_argument);
  };
  r = greedy();
  r.model = "";
  refused(r, "request.model");
  r = greedy();
  r.temperature = -1;
  refused(r, "request.temperature");
  r = greedy();
  r.temperature = std::numeric_limits<float>::quiet_NaN();
  refused(r, "request.temperature");
  r = greedy();
  r.top_p = 0;
  refused(r, "request.top_p");
  r = greedy();
  r.max_tokens = 0;
  refused(r, "request.max_tokens");
}

TEST_CASE("response key: the format is stable: XXH3-128 of its tagged parts, versioned") {
  CHECK(frugal::response_key_version == 1);
  CHECK(frugal::response_namespace_version() == "r1k2");
  const std::vector<std::byte> b = frugal::response_key_bytes(greedy());
  const XXH128_hash_t h = XXH3_128bits(b.data(), b.size());
  const frugal::key128 k = *frugal::response_key(greedy());
  CHECK(k.lo == h.low64);
  CHECK(k.hi == h.high64);
  // The parts as key_bytes frames them: text "frugal.response", u32 version 1, the model, the prompt as
  // an i32 array, the mode, temperature, top_p, seed, max_tokens and the stop ids.
  const std::vector<kv_token> stop{2};
  CHECK(b == frugal::key_bytes(std::string_view("frugal.response"), std::uint32_t{1},
                               std::string_view("SmolLM2-135M-Instruct.Q4_1.gguf:native"), prompt,
                               std::uint8_t{0}, 0.0f, 1.0f, std::uint64_t{0}, std::uint64_t{64}, stop));
  // A fixed value (on a little-endian machine): a change here is a change of format, which must bump
  // response_key_version.
  CHECK(k.lo == 16717823306166149055ull);
  CHECK(k.hi == 14974699485580612632ull);
}

TEST_CASE("completion codec: a completion round-trips, with a stop token or cut at its length") {
  const completion a = answer();
  const std::string enc = completion_codec::encode(a);
  CHECK(enc.size() == completion_codec::header_size + 4 * 3);
  CHECK(enc.substr(0, 4) == "FRCC");
  CHECK(completion_codec::parse(enc) == a);
  CHECK(completion_codec::parse(enc).completion_tokens() == 4);
  const completion b{.tokens = {}, .reason = finish_reason::length, .prompt_tokens = 0};
  CHECK(completion_codec::parse(completion_codec::encode(b)) == b);
  completion big{.tokens = std::vector<kv_token>(1000, 49151),
                 .reason = finish_reason::length,
                 .prompt_tokens = 1u << 20};
  CHECK(completion_codec::parse(completion_codec::encode(big)) == big);
  CHECK(completion_codec::decode(enc) == a);

  completion bad = answer();
  bad.stop_token.reset();
  CHECK_THROWS_WITH_AS(completion_codec::encode(bad), doctest::Contains("stop token exactly when"),
                       std::invalid_argument);
}

TEST_CASE("completion codec: corrupt bytes are refused with what is wrong and where") {
  const std::string good = completion_codec::encode(answer());
  auto refused = [](const std::string& bytes, const char* what) {
    CHECK_THROWS_WITH_AS(completion_codec::parse(bytes), doctest::Contains(what), std::invalid_argument);
    CHECK_FALSE(completion_codec::decode(bytes).has_value());
  };
  refused("", "truncated header: 0 bytes, need 32 at byte 0");
  refused(good.substr(0, 31), "truncated header");
  std::string x = good;
  x[0] = 'G';
  refused(x, "bad magic");
  x = good;
  x[4] = 2;
  refused(x, "unknown format 2 at byte 4");
  x = good;
  x[6] = 5;
  refused(x, "unknown finish reason 5 at byte 6");
  x = good;
  x[7] = 3;
  refused(x, "unknown flags 3 at byte 7");
  x = good;
  x[6] = 1;  // length, but a stop token
  refused(x, "stop token must come with reason stop");
  x = good;
  x[8] = x[9] = x[10] = x[11] = static_cast<char>(0xff);
  refused(x, "bad stop token -1 at byte 8");
  refused(good + "z", "3 tokens need 44 bytes, not 45");
  refused(good.substr(0, good.size() - 1), "3 tokens need 44 bytes, not 43");
  x = good;
  x[20] = 9;
  refused(x, "completion tokens 9 do not match 3 tokens and a stop token at byte 20");
  x = good;
  x[28] = static_cast<char>(0xff);
  x[29] = x[30] = x[31] = static_cast<char>(0xff);
  refused(x, "4294967295 tokens need");
  x = good;
  x[32 + 4 + 3] = static_cast<char>(0x80);
  refused(x, "negative token id");
  CHECK_THROWS_WITH_AS(completion_codec::parse(x), doctest::Contains("at byte 36"), std::invalid_argument);
  (void)bytes_of;
}

TEST_CASE(
    "response cache: a deterministic request's second call is a hit that runs no model step and is "
    "recorded in the ledger in tokens") {
  namespace fc = frugal::cost;
  fc::ledger led({.prices = {{.gpu_class = "L4", .on_demand = fc::rate::per_hour(fc::money::parse("$3600"))}},
                  .devices = {{.gpu_class = "L4"}}});
  const auto chat = led.feature("chat");
  frugal::tinylfu_cache<completion> store({.max_entries = 1000});
  frugal::response_cache cache(store, {.ledger = &led});
  int model_runs = 0;
  auto generate = [&] {
    ++model_runs;
    return answer();
  };
  const auto first = cache.get_or_generate(greedy(), generate, chat);
  CHECK(model_runs == 1);
  CHECK_FALSE(first.hit);
  CHECK(first.cacheable);
  CHECK(*first.value == answer());
  const auto second = cache.get_or_generate(greedy(), generate, chat);
  CHECK(model_runs == 1);
  CHECK(second.hit);
  CHECK(*second.value == answer());
  CHECK(cache.get(greedy(), chat) != nullptr);

  // Sampled without a seed: the model runs every time and the store is not touched.
  response_request sampled = greedy();
  sampled.temperature = 0.8f;
  const auto s1 = cache.get_or_generate(sampled, generate, chat);
  cache.get_or_generate(sampled, generate, chat);
  CHECK(model_runs == 3);
  CHECK_FALSE(s1.cacheable);
  CHECK_FALSE(s1.hit);
  CHECK(cache.get(sampled) == nullptr);
  CHECK_FALSE(cache.put(sampled, answer()));
  CHECK(store.stats().entries == 1);

  const auto st = cache.stats();
  CHECK(st.lookups == 3);
  CHECK(st.hits == 2);
  CHECK(st.misses == 1);
  CHECK(st.uncacheable == 3);
  const std::string text = frugal::to_prometheus(st);
  CHECK(frugal_test::prom_value(text, "frugal_response_cache_lookups_total") == "3");
  CHECK(frugal_test::prom_value(text, "frugal_response_cache_hits_total") == "2");
  CHECK(frugal_test::prom_value(text, "frugal_response_cache_misses_total") == "1");
  CHECK(frugal_test::prom_value(text, "frugal_response_cache_uncacheable_total") == "3");
  FRUGAL_CHECK_PROMTOOL(text);

  // Steps of t = 100·p + 1000·d ns; two hits, each of 6 prompt tokens and 4 completion tokens (3 and the
  // stop token).
  led.record_step_cost(6, 0, 600ns);
  led.record_step_cost(0, 1, 1000ns);
  led.record_step_cost(12, 2, 3200ns);
  const auto snap = led.snapshot();
  CHECK(snap.find("chat")->response_hits == 2);
  CHECK(snap.find("chat")->response_saved_time == std::chrono::nanoseconds(2 * (6 * 100 + 4 * 1000)));
}

TEST_CASE(
    "response cache: a failed generation stores nothing, and concurrent callers of one key generate "
    "once") {
  frugal::lru_cache<completion> store({.max_entries = 100, .shards = 1});
  frugal::response_cache cache(store);
  CHECK_THROWS_AS(cache.get_or_generate(greedy(), []() -> completion { throw std::runtime_error("model"); }),
                  std::runtime_error);
  CHECK(store.stats().entries == 0);

  std::atomic<int> runs{0};
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  constexpr int callers = 6;
  std::vector<std::thread> threads;
  std::atomic<int> hits{0};
  for (int i = 0; i < callers; ++i)
    threads.emplace_back([&] {
      auto r = cache.get_or_generate(greedy(), [&] {
        ++runs;
        go.wait();
        return answer();
      });
      if (r.hit) ++hits;
      CHECK(*r.value == answer());
    });
  while (store.stats().load_waits < callers - 1) std::this_thread::yield();
  release.set_value();
  for (auto& t : threads) t.join();
  CHECK(runs == 1);
  CHECK(hits == callers - 1);
}

TEST_CASE(
    "response cache: a scheduler's request and generation convert, its seed counting only when chosen") {
  frugal::generation_request g{.prompt = prompt,
                               .sampling = {.temperature = 0.5f, .top_p = 0.9f, .seed = 11},
                               .max_tokens = 64,
                               .stop = eos};
  const response_request chosen = response_request::of("m", g, true);
  CHECK(chosen.seed == 11u);
  CHECK(frugal::response_cacheable(chosen));
  CHECK_FALSE(frugal::response_cacheable(response_request::of("m", g, false)));
  frugal::generation gen{.tokens = {5, 6},
                         .reason = finish_reason::stop,
                         .stop_token = 2,
                         .prompt_tokens = 6,
                         .cached_tokens = 4};
  const completion c = completion::of(gen);
  CHECK(c.tokens == std::vector<kv_token>{5, 6});
  CHECK(c.stop_token == 2);
  CHECK(c.prompt_tokens == 6);
  CHECK(c.completion_tokens() == 3);
}
