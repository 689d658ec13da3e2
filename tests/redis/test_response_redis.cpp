#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <frugal/cache.hpp>
#include <frugal/cost.hpp>
#include <frugal/redis.hpp>

#include "redis_server.hpp"

using frugal::completion;
using frugal::completion_codec;
using frugal_test::redis_server;

namespace {

using store = frugal::redis_tier<completion, completion_codec>;

const std::vector<frugal::kv_token> prompt{1, 28, 1034, 2};

frugal::response_request greedy() { return {.model = "smollm2:native", .prompt = prompt, .max_tokens = 16}; }

completion answer() {
  return {.tokens = {7, 8, 9, 10}, .reason = frugal::finish_reason::length, .prompt_tokens = 4};
}

store::options_type replica(const redis_server& srv) {
  // No local tier: every lookup asks Redis, as a second replica's first lookup does.
  return {.redis = {.port = srv.port(), .model = "smollm2", .version = frugal::response_namespace_version()},
          .local = {}};
}

}  // namespace

TEST_CASE(
    "response cache over Redis: a completion generated on one replica is a hit on another, which runs "
    "no model step") {
  redis_server srv;
  store a_store(replica(srv)), b_store(replica(srv));
  namespace fc = frugal::cost;
  fc::ledger led({.prices = {{.gpu_class = "L4", .on_demand = fc::rate::per_hour(fc::money::parse("$1"))}},
                  .devices = {{.gpu_class = "L4"}}});
  const auto chat = led.feature("chat");
  frugal::response_cache a(a_store, {.ledger = &led}), b(b_store, {.ledger = &led});
  int runs = 0;
  auto generate = [&] {
    ++runs;
    return answer();
  };
  CHECK_FALSE(a.get_or_generate(greedy(), generate, chat).hit);
  CHECK(a_store.stats().writes == 1);
  const auto r = b.get_or_generate(greedy(), generate, chat);
  CHECK(runs == 1);
  CHECK(r.hit);
  CHECK(*r.value == answer());
  CHECK(b_store.stats().redis_hits == 1);
  CHECK(b_store.stats().model_calls == 0);
  CHECK(led.snapshot().find("chat")->response_hits == 1);

  // The value in Redis is the codec's bytes behind redis_tier's header, under the response key.
  const frugal::key128 k = *frugal::response_key(greedy());
  const auto raw = srv.command({"GET", a_store.redis_key(k)});
  REQUIRE(raw->type == REDIS_REPLY_STRING);
  const std::string value(raw->str, raw->len);
  CHECK(value.substr(frugal::detail::redis_header_size) == completion_codec::encode(answer()));
}

TEST_CASE("response cache over Redis: corrupt completion bytes are a decode error and a miss, never served") {
  redis_server srv;
  store a_store(replica(srv));
  frugal::response_cache a(a_store);
  const frugal::key128 k = *frugal::response_key(greedy());
  // A correct header with a payload whose usage does not match its tokens.
  std::string bad = frugal::detail::redis_encode<completion, completion_codec>(answer());
  bad[frugal::detail::redis_header_size + 20] = 9;
  srv.command({"SET", a_store.redis_key(k), bad});
  int runs = 0;
  const auto r = a.get_or_generate(greedy(), [&] {
    ++runs;
    return answer();
  });
  CHECK(runs == 1);
  CHECK_FALSE(r.hit);
  CHECK(a_store.stats().decode_errors == 1);
  // The regenerated completion replaced the corrupt one.
  store b_store(replica(srv));
  frugal::response_cache b(b_store);
  CHECK(b.get(greedy()) != nullptr);
  CHECK(b_store.stats().decode_errors == 0);
}
