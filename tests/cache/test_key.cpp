#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <list>
#include <span>
#include <stdexcept>
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

// The encoding hash_key documents (format version 2), written out by hand.
struct framed {
  std::vector<unsigned char> bytes;
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void tag(unsigned char t) { bytes.push_back(t); }
  void length(std::uint64_t n) { raw(&n, sizeof n); }
  void text(std::string_view s) {
    tag(0x80);  // text of char
    length(s.size());
    raw(s.data(), s.size());
  }
  frugal::key128 hash(std::uint64_t seed = 0) const {
    const XXH128_hash_t h = XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed);
    return {h.low64, h.high64};
  }
};

std::vector<std::byte> as_bytes(const std::vector<unsigned char>& v) {
  std::vector<std::byte> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

}  // namespace

TEST_CASE("cache keys: hash_key is XXH3-128 over tagged, length-prefixed parts, in order") {
  static_assert(frugal::key_format_version == 2);
  framed f;
  f.text("model-a");
  const std::int32_t n = 42;
  f.tag(0x32);  // signed, 4 bytes
  f.raw(&n, sizeof n);
  const std::vector<float> v{1.5f, -2.0f, 3.25f};
  f.tag(0x90);  // array of
  f.tag(0x52);  // float, 4 bytes
  f.length(v.size());
  f.raw(v.data(), v.size() * sizeof(float));
  CHECK(frugal::key_bytes(std::string_view("model-a"), n, v) == as_bytes(f.bytes));
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
    f.tag(0x90);
    f.tag(0x40);  // unsigned, 1 byte
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
  f.tag(0x43);  // unsigned, 8 bytes
  f.raw(&x, sizeof x);
  CHECK(frugal::hash_key64(std::string_view("m"), x).value == XXH3_64bits(f.bytes.data(), f.bytes.size()));
}

TEST_CASE("cache keys: user types hash through hash_append found by ADL") {
  const user::request a{"m", {1, 2, 3}, 0.5};
  user::request b = a;
  CHECK(frugal::hash_key(a) == frugal::hash_key(b));
  // Enclosed in begin and end tags: a user type is not the bare list of its parts.
  CHECK(frugal::hash_key(a) != frugal::hash_key(std::string_view("m"), std::vector<int>{1, 2, 3}, 0.5));
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
  CHECK(frugal::hash_key(std::pair{1, std::string("x")}) ==
        frugal::hash_key(std::tuple{1, std::string("x")}));
  // A tuple carries its member count: it is not the bare list of its members.
  CHECK(frugal::hash_key(std::tuple{1, 2.0, 'c'}) != frugal::hash_key(1, 2.0, 'c'));
  CHECK(frugal::hash_key(std::pair{1, 2}, 3) != frugal::hash_key(1, std::pair{2, 3}));
  const std::list<float> lf{1, 2};
  CHECK(frugal::hash_key(lf) == frugal::hash_key(std::vector<float>{1, 2}));
}

TEST_CASE("cache keys: type and width are part of the key") {
  // Each pair had equal bytes under format 1.
  CHECK(frugal::hash_key(std::uint64_t{1} << 32 | 7) != frugal::hash_key(std::uint32_t{7}, std::uint32_t{1}));
  CHECK(frugal::hash_key(std::int32_t{1}) != frugal::hash_key(std::uint32_t{1}));
  CHECK(frugal::hash_key(std::int32_t{1}) != frugal::hash_key(std::int64_t{1}));
  CHECK(frugal::hash_key(1.0f) != frugal::hash_key(std::bit_cast<std::int32_t>(1.0f)));
  CHECK(frugal::hash_key(true) != frugal::hash_key(std::uint8_t{1}));
  CHECK(frugal::hash_key('a') != frugal::hash_key(static_cast<signed char>('a')));
  CHECK(frugal::hash_key(std::string_view("ab")) != frugal::hash_key('a', 'b'));
  CHECK(frugal::hash_key(std::string_view("ab")) != frugal::hash_key(std::vector<std::int8_t>{'a', 'b'}));
  CHECK(frugal::hash_key(std::string_view("ab")) != frugal::hash_key(std::u8string_view(u8"ab")));
  CHECK(frugal::hash_key(std::vector<std::string>{"ab"}) != frugal::hash_key(std::string("ab")));
  CHECK(frugal::hash_key(std::vector<std::uint32_t>{}) != frugal::hash_key(std::vector<std::uint64_t>{}));
  CHECK(frugal::hash_key(std::vector<std::uint32_t>{}) != frugal::hash_key(std::vector<std::string>{}));
}

TEST_CASE("cache keys: a char array is text of its extent, never a C string") {
  const char no_nul[3] = {'a', 'b', 'c'};  // no terminator: format 1 read past it
  CHECK(frugal::key_bytes(no_nul) == frugal::key_bytes(std::string_view("abc")));
  const char embedded[] = "a\0b";  // format 1 cut it at the NUL
  CHECK(frugal::hash_key(embedded) == frugal::hash_key(std::string_view("a\0b", 3)));
  CHECK(frugal::hash_key(embedded) != frugal::hash_key("a"));
  char buffer[8] = "ab";  // a fixed buffer: its whole extent is the text
  CHECK(frugal::hash_key(buffer) == frugal::hash_key(std::string_view("ab\0\0\0\0\0", 7)));
  CHECK(frugal::hash_key(buffer) != frugal::hash_key("ab"));
}

TEST_CASE("cache keys: a null character pointer is refused") {
  const char* null_text = nullptr;
  CHECK_THROWS_WITH_AS(frugal::hash_key(null_text), doctest::Contains("null character pointer"),
                       std::invalid_argument);
  CHECK_THROWS_AS(frugal::hash_key64(1, null_text), std::invalid_argument);
  const char* empty = "";
  CHECK(frugal::hash_key(empty) == frugal::hash_key(std::string()));
}

TEST_CASE("cache keys: distinct argument lists give distinct bytes before hashing") {
  using namespace std::string_view_literals;
  using bytes = std::vector<std::byte>;
  // Every pair here had equal (or over-read) bytes under format 1, or differs in one type or width.
  const std::vector<bytes> all{
      frugal::key_bytes(),
      frugal::key_bytes(std::uint64_t{0}),
      frugal::key_bytes(std::uint32_t{0}, std::uint32_t{0}),
      frugal::key_bytes(std::uint32_t{0}),
      frugal::key_bytes(std::int32_t{0}),
      frugal::key_bytes(std::int64_t{0}),
      frugal::key_bytes(std::int16_t{0}, std::int16_t{0}),
      frugal::key_bytes(std::uint8_t{0}),
      frugal::key_bytes(std::int8_t{0}),
      frugal::key_bytes(false),
      frugal::key_bytes(char{0}),
      frugal::key_bytes(char8_t{0}),
      frugal::key_bytes(0.0f),
      frugal::key_bytes(0.0),
      frugal::key_bytes(""sv),
      frugal::key_bytes(u8""),
      frugal::key_bytes(U""),
      frugal::key_bytes(""sv, ""sv),
      frugal::key_bytes("\0"sv),
      frugal::key_bytes(std::vector<std::uint8_t>{}),
      frugal::key_bytes(std::vector<std::uint8_t>{0}),
      frugal::key_bytes(std::vector<std::int8_t>{0}),
      frugal::key_bytes(std::vector<std::string>{}),
      frugal::key_bytes(std::vector<std::string>{""}),
      frugal::key_bytes(std::vector<std::vector<std::string>>{{}}),
      frugal::key_bytes(std::tuple<>{}),
      frugal::key_bytes(std::tuple{0}),
      frugal::key_bytes(std::tuple<std::tuple<int>>{std::tuple{0}}),  // (CTAD would copy)
      frugal::key_bytes(std::pair{0, 0}),
      frugal::key_bytes(0, 0),
      frugal::key_bytes(std::pair{0, 0}, 0),
      frugal::key_bytes(0, std::pair{0, 0}),
      frugal::key_bytes(user::request{}),
      frugal::key_bytes(""sv, std::vector<int>{}, 0.0),
      frugal::key_bytes("ab"sv, "c"sv),
      frugal::key_bytes("a"sv, "bc"sv),
      frugal::key_bytes("abc"sv),
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      INFO("argument lists " << i << " and " << j);
      CHECK(all[i] != all[j]);
    }
  }
  // And hash_key hashes exactly those bytes.
  const bytes b = frugal::key_bytes("m"sv, 3, std::vector<double>{1, 2});
  const XXH128_hash_t h = XXH3_128bits(b.data(), b.size());
  CHECK(frugal::hash_key("m"sv, 3, std::vector<double>{1, 2}) == frugal::key128{h.low64, h.high64});
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
