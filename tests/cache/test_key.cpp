#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "frugal/cache.hpp"

namespace user {
struct request {
  std::string model;
  std::vector<int> tokens;
  double temperature = 0;  // with the padding-free members hashed one by one, padding never matters
};
void hash_append(frugal::key_hasher& h, const request& r) { h.append(r.model, r.tokens, r.temperature); }
}  // namespace user

namespace {

// The framing hash_key documents, written out by hand.
struct framed {
  std::vector<unsigned char> bytes;
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void length(std::uint64_t n) { raw(&n, sizeof n); }
  void text(std::string_view s) {
    length(s.size());
    raw(s.data(), s.size());
  }
  frugal::key128 hash(std::uint64_t seed = 0) const {
    const XXH128_hash_t h = XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed);
    return {h.low64, h.high64};
  }
};

}  // namespace

TEST_CASE("cache keys: hash_key is XXH3-128 over length-prefixed parts, in order") {
  framed f;
  f.text("model-a");
  const std::int32_t n = 42;
  f.raw(&n, sizeof n);
  const std::vector<float> v{1.5f, -2.0f, 3.25f};
  f.length(v.size());
  f.raw(v.data(), v.size() * sizeof(float));
  CHECK(frugal::hash_key(std::string_view("model-a"), n, v) == f.hash());
  CHECK(frugal::hash_key_seeded(7, std::string_view("model-a"), n, v) == f.hash(7));
}

TEST_CASE("cache keys: variable-size parts cannot run into each other") {
  using namespace std::string_view_literals;
  CHECK(frugal::hash_key("ab"sv, "c"sv) != frugal::hash_key("a"sv, "bc"sv));
  CHECK(frugal::hash_key("abc"sv, ""sv) != frugal::hash_key(""sv, "abc"sv));
  CHECK(frugal::hash_key(std::vector<int>{1, 2}, std::vector<int>{3}) !=
        frugal::hash_key(std::vector<int>{1}, std::vector<int>{2, 3}));
  CHECK(frugal::hash_key(1, 2) != frugal::hash_key(2, 1));
}

TEST_CASE("cache keys: equal content in different containers gives one key") {
  const std::string s = "a prompt that is longer than the small-string buffer";
  const char* c = s.c_str();
  CHECK(frugal::hash_key(s) == frugal::hash_key(std::string_view(s)));
  CHECK(frugal::hash_key(s) == frugal::hash_key(c));
  CHECK(frugal::hash_key("lit") == frugal::hash_key(std::string("lit")));
  const std::vector<float> v{1, 2, 3};
  const std::array<float, 3> a{1, 2, 3};
  CHECK(frugal::hash_key(v) == frugal::hash_key(std::span<const float>(v)));
  CHECK(frugal::hash_key(v) == frugal::hash_key(std::span<const float>(a)));
}

TEST_CASE("cache keys: a seed scopes keys") {
  CHECK(frugal::hash_key_seeded(1, 5) != frugal::hash_key_seeded(2, 5));
  CHECK(frugal::hash_key_seeded(0, 5) == frugal::hash_key(5));
  CHECK(frugal::hash_key64_seeded(1, 5) != frugal::hash_key64_seeded(2, 5));
}

TEST_CASE("cache keys: large inputs stream and hash the same as one shot") {
  std::vector<unsigned char> big(100'000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>(i * 131 + 7);

  SUBCASE("one part larger than the buffer") {
    framed f;
    f.length(big.size());
    f.raw(big.data(), big.size());
    CHECK(frugal::hash_key(big) == f.hash());
    CHECK(frugal::hash_key_seeded(99, big) == f.hash(99));
  }
  SUBCASE("raw updates in uneven chunks") {
    frugal::key_hasher h(3);
    for (std::size_t off = 0; off < big.size();) {
      const std::size_t n = std::min<std::size_t>(big.size() - off, 1 + off % 997);
      h.update(big.data() + off, n);
      off += n;
    }
    const XXH128_hash_t ref = XXH3_128bits_withSeed(big.data(), big.size(), 3);
    CHECK(h.finish() == frugal::key128{ref.low64, ref.high64});
    CHECK(h.finish64().value == XXH3_64bits_withSeed(big.data(), big.size(), 3));
  }
  SUBCASE("every size around the buffer's edge") {
    for (std::size_t n = 500; n < 530; ++n) {
      frugal::key_hasher h;
      h.update(big.data(), n / 2);
      h.update(big.data() + n / 2, n - n / 2);
      CHECK(h.finish64().value == XXH3_64bits(big.data(), n));
    }
  }
}

TEST_CASE("cache keys: key64 is XXH3-64 over the same framing") {
  framed f;
  f.text("m");
  const std::uint64_t x = 9;
  f.raw(&x, sizeof x);
  CHECK(frugal::hash_key64(std::string_view("m"), x).value == XXH3_64bits(f.bytes.data(), f.bytes.size()));
}

TEST_CASE("cache keys: user types hash through hash_append found by ADL") {
  const user::request a{"m", {1, 2, 3}, 0.5};
  user::request b = a;
  CHECK(frugal::hash_key(a) == frugal::hash_key(b));
  CHECK(frugal::hash_key(a) == frugal::hash_key(std::string_view("m"), std::vector<int>{1, 2, 3}, 0.5));
  b.temperature = 0.7;
  CHECK(frugal::hash_key(a) != frugal::hash_key(b));
  const std::vector<user::request> batch{a, b};
  CHECK(frugal::hash_key(batch) != frugal::hash_key(std::vector<user::request>{b, a}));
}

TEST_CASE("cache keys: non-contiguous ranges and tuples hash element by element") {
  const std::list<std::string> l{"ab", "c"};
  const std::vector<std::string> v{"ab", "c"};
  CHECK(frugal::hash_key(l) == frugal::hash_key(v));
  CHECK(frugal::hash_key(v) != frugal::hash_key(std::vector<std::string>{"a", "bc"}));
  CHECK(frugal::hash_key(std::pair{1, std::string("x")}) == frugal::hash_key(1, std::string("x")));
  CHECK(frugal::hash_key(std::tuple{1, 2.0, 'c'}) == frugal::hash_key(1, 2.0, 'c'));
}

TEST_CASE("cache keys: distinct inputs give distinct keys") {
  std::unordered_set<frugal::key128> keys;
  for (int i = 0; i < 10'000; ++i) keys.insert(frugal::hash_key(i));
  CHECK(keys.size() == 10'000);
}

TEST_CASE("cache weigher: the default weighs strings, vectors and plain values by their bytes") {
  frugal::default_weigher<std::string> ws;
  const std::string small = "hi";
  CHECK(ws(small) == sizeof(std::string));
  const std::string large(1000, 'x');
  CHECK(ws(large) == sizeof(std::string) + large.capacity() + 1);
  std::vector<float> v(100);
  CHECK(frugal::default_weigher<std::vector<float>>{}(v) == sizeof(v) + v.capacity() * sizeof(float));
  const std::vector<std::string> vs{large, small};
  CHECK(frugal::default_weigher<std::vector<std::string>>{}(vs) == sizeof(vs) + ws(large) + ws(small));
  CHECK(frugal::default_weigher<double>{}(1.0) == sizeof(double));
  static_assert(!frugal::detail::has_default_weigher<std::list<int>>);
}
