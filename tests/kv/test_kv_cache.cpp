#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/errors.hpp"
#include "frugal/kv.hpp"
#include "kv_support.hpp"

using frugal_test::what_of;
using kv_test::iota;
using kv_test::small;
using kv_test::write_kv;

namespace {

// Opens a sequence for `prompt`, appends, writes and commits what was not cached; returns its id.
frugal::kv_sequence_id prefill(frugal::kv_cache& c, const std::vector<frugal::kv_token>& prompt,
                               const frugal::kv_salt& salt = {}) {
  const auto r = c.open(prompt, salt);
  const auto rest = std::span(prompt).subspan(r.cached_tokens);
  REQUIRE(c.append(r.id, rest).ok);
  write_kv(c, r.id, r.cached_tokens, rest.size());
  c.commit(r.id);
  return r.id;
}

}  // namespace

TEST_CASE("kv_cache: bad options are refused, naming the field") {
  auto o = small(4);
  CHECK(what_of([&] {
          frugal::kv_cache c({.layers = 0, .kv_heads = 1, .head_dim = 1, .budget_bytes = 1 << 20});
        }) == "frugal::kv_cache: options.layers must be positive");
  o.block_tokens = 0;
  CHECK(what_of([&] { frugal::kv_cache c(o); }) == "frugal::kv_cache: options.block_tokens must be positive");
  o = small(4);
  o.element = frugal::element_type::f16;
  CHECK(what_of([&] { frugal::kv_cache c(o); }) ==
        "frugal::kv_cache: options.element f16 is not supported (only f32)");
  o = small(4);
  o.budget_bytes = 100;
  CHECK(
      what_of([&] { frugal::kv_cache c(o); }) ==
      "frugal::kv_cache: options.budget_bytes 100 is less than one block (512 bytes: 2 * layers * kv_heads * "
      "head_dim * block_tokens * 4)");
  o = small(4);
  o.budget_bytes += 511;  // a partial block is not a block
  frugal::kv_cache c(o);
  CHECK(c.blocks_total() == 4);
  CHECK(c.block_bytes() == 512);
  CHECK(c.stats().bytes_total == 2048);
}

TEST_CASE("kv_cache: append takes blocks as tokens cross block boundaries; release returns them all") {
  frugal::kv_cache c(small(8));
  const auto r = c.open(iota(6));
  CHECK(r.cached_tokens == 0);
  CHECK(c.length(r.id) == 0);
  CHECK(c.blocks_needed(r.id, 6) == 2);
  const auto a = c.append(r.id, iota(6));
  CHECK(a.ok);
  CHECK(a.blocks_needed == 2);
  CHECK(a.blocks_available == 8);
  CHECK(c.block_table(r.id).size() == 2);
  CHECK(c.length(r.id) == 6);
  CHECK(c.committed(r.id) == 0);
  CHECK(c.blocks_needed(r.id, 2) == 0);
  CHECK(c.blocks_needed(r.id, 3) == 1);
  REQUIRE(c.append(r.id, iota(2, 7)).ok);  // fills block 1 exactly
  CHECK(c.block_table(r.id).size() == 2);
  REQUIRE(c.append(r.id, iota(1, 9)).ok);
  CHECK(c.block_table(r.id).size() == 3);
  auto s = c.stats();
  CHECK(s.blocks_used == 3);
  CHECK(s.sequences == 1);
  CHECK(s.sequence_tokens == 9);
  CHECK(s.stored_tokens == 9);
  CHECK(s.appended_tokens == 9);
  for (const auto b : c.block_table(r.id)) CHECK(c.block_refs(b) == 1);
  c.release(r.id);
  CHECK(kv_test::all_blocks_unreferenced(c));
  s = c.stats();
  CHECK(s.blocks_free == 8);  // nothing was committed, so nothing is cached
  CHECK(s.sequences == 0);
}

TEST_CASE("kv_cache: a released sequence's id is stale, and using it says so") {
  frugal::kv_cache c(small(4));
  const auto id = c.open(iota(3)).id;
  c.release(id);
  CHECK_FALSE(c.contains(id));
  const auto again = c.open(iota(3)).id;
  CHECK(again.index == id.index);  // the slot is reused under a new generation
  CHECK(c.contains(again));
  try {
    (void)c.append(id, iota(1));
    FAIL("no exception");
  } catch (const frugal::kv_error& e) {
    CHECK(e.code() == frugal::kv_errc::unknown_sequence);
    CHECK(std::string(e.what()) ==
          "frugal::kv_cache::append: sequence 0.0 is not open (never opened, or released)");
  }
  CHECK(what_of([&] { c.release(id); }) ==
        "frugal::kv_cache::release: sequence 0.0 is not open (never opened, or released)");
}

TEST_CASE("kv_cache: write refuses positions outside the appended, uncommitted tokens and wrong shapes") {
  frugal::kv_cache c(small(4));
  const auto id = c.open(iota(5)).id;
  REQUIRE(c.append(id, iota(5)).ok);
  std::vector<float> row(8), rows2(16);
  CHECK(what_of([&] { c.write(id, 0, 5, row, row); }) ==
        "frugal::kv_cache::write: positions [5, 6) are not within the appended, uncommitted [0, 5)");
  CHECK(what_of([&] { c.write(id, 0, 0, row, rows2); }) ==
        "frugal::kv_cache::write: k has 8 and v 16 elements; both must be a multiple of kv_heads * head_dim "
        "= 8 and "
        "equal");
  CHECK(what_of([&] { c.write(id, 2, 0, row, row); }) ==
        "frugal::kv_cache::write: layer 2 is not below options.layers 2");
  c.commit(id);
  try {
    c.write(id, 0, 4, row, row);
    FAIL("no exception");
  } catch (const frugal::kv_error& e) {
    CHECK(e.code() == frugal::kv_errc::bad_position);
  }
}

TEST_CASE("kv_cache: write puts each token's K and V in its block, head-major") {
  frugal::kv_cache c(small(4));
  const auto id = c.open(iota(6)).id;
  REQUIRE(c.append(id, iota(6)).ok);
  write_kv(c, id, 0, 6);
  const auto table = c.block_table(id);
  const auto toks = c.tokens(id);
  for (std::size_t l = 0; l < 2; ++l)
    for (std::size_t pos = 0; pos < 6; ++pos)
      for (std::size_t g = 0; g < 2; ++g)
        for (std::size_t d = 0; d < 4; ++d) {
          const std::size_t at = (g * 4 + pos % 4) * 4 + d;
          CHECK(c.keys(l, table[pos / 4])[at] == kv_test::value(toks[pos], pos, l, g * 4 + d, 0));
          CHECK(c.values(l, table[pos / 4])[at] == kv_test::value(toks[pos], pos, l, g * 4 + d, 1));
        }
}

TEST_CASE(
    "kv_cache: a prompt shares the longest chain of cached full blocks, leaving its last token to compute") {
  frugal::kv_cache c(small(16));
  const auto a = prefill(c, iota(10));
  const auto a_table = std::vector<std::uint32_t>(c.block_table(a).begin(), c.block_table(a).end());

  SUBCASE("while the first sequence is open") {
    auto prompt = iota(10);
    prompt.push_back(7);
    const auto b = c.open(prompt);
    CHECK(b.cached_tokens == 8);
    CHECK(c.length(b.id) == 8);
    CHECK(c.committed(b.id) == 8);
    REQUIRE(c.block_table(b.id).size() == 2);
    CHECK(c.block_table(b.id)[0] == a_table[0]);
    CHECK(c.block_table(b.id)[1] == a_table[1]);
    CHECK(c.block_refs(a_table[0]) == 2);
    CHECK(c.block_refs(a_table[2]) == 1);  // a's partial block is never shared by prefix
    const auto s = c.stats();
    CHECK(s.prefix_query_tokens == 21);
    CHECK(s.prefix_hit_tokens == 8);
    CHECK(s.stored_tokens == 10);
    CHECK(s.sequence_tokens == 18);
  }
  SUBCASE("after it was released") {
    c.release(a);
    CHECK(c.stats().blocks_cached == 2);
    const auto b = c.open(iota(12));
    CHECK(b.cached_tokens == 8);
    CHECK(c.stats().blocks_cached == 0);
  }
  SUBCASE("a prompt of exactly the cached blocks recomputes its last block, for its last token's logits") {
    CHECK(c.open(iota(8)).cached_tokens == 4);
    CHECK(c.open(iota(9)).cached_tokens == 8);
    CHECK(c.open(iota(1)).cached_tokens == 0);
    CHECK(c.open({}).cached_tokens == 0);
  }
  SUBCASE("a prompt that differs inside the second block shares the first only") {
    auto p = iota(12);
    p[6] = 1;
    CHECK(c.open(p).cached_tokens == 4);
    p[0] = 1;
    CHECK(c.open(p).cached_tokens == 0);
  }
  SUBCASE("uncommitted blocks are never shared") {
    const auto x = c.open(iota(12, 500));
    REQUIRE(c.append(x.id, iota(12, 500)).ok);
    CHECK(c.open(iota(12, 500)).cached_tokens == 0);
    c.commit(x.id);
    CHECK(c.open(iota(12, 500)).cached_tokens == 8);
  }
}

TEST_CASE("kv_cache: blocks are shared only under equal salts") {
  frugal::kv_cache c(small(16));
  const auto m1 = frugal::kv_salt::of("smollm2-135m", "", "tenant-a");
  const auto m2 = frugal::kv_salt::of("smollm2-135m", "", "tenant-b");
  CHECK(frugal::kv_salt::of("ab", "c") != frugal::kv_salt::of("a", "bc"));
  CHECK(frugal::kv_salt::of("m") == frugal::kv_salt::of("m", "", ""));
  CHECK(frugal::kv_salt::of("m") != frugal::kv_salt{});
  prefill(c, iota(9), m1);
  CHECK(c.open(iota(9), m2).cached_tokens == 0);
  CHECK(c.open(iota(9)).cached_tokens == 0);
  CHECK(c.open(iota(9), m1).cached_tokens == 8);
}

TEST_CASE("kv_cache: prefix caching off shares nothing and caches nothing") {
  auto o = small(8);
  o.prefix_caching = false;
  frugal::kv_cache c(o);
  const auto a = prefill(c, iota(9));
  CHECK(c.open(iota(9)).cached_tokens == 0);
  c.release(a);
  CHECK(c.stats().blocks_cached == 0);
  CHECK(c.stats().prefix_query_tokens == 18);
  CHECK(c.stats().prefix_hit_tokens == 0);
}

TEST_CASE("kv_cache: out of blocks is a result, changes nothing, and clears once blocks are released") {
  frugal::kv_cache c(small(3));
  const auto a = c.open(iota(8)).id;
  REQUIRE(c.append(a, iota(8)).ok);
  const auto b = c.open(iota(8, 50)).id;
  const auto r = c.append(b, iota(8, 50));
  CHECK_FALSE(r.ok);
  CHECK_FALSE(static_cast<bool>(r));
  CHECK(r.error == frugal::kv_errc::out_of_blocks);
  CHECK(r.blocks_needed == 2);
  CHECK(r.blocks_available == 1);
  CHECK(c.length(b) == 0);
  CHECK(c.block_table(b).empty());
  CHECK(c.stats().allocation_failures == 1);
  CHECK(c.stats().blocks_free == 1);
  REQUIRE(c.append(b, iota(4, 50)).ok);  // what fits still goes in
  CHECK_FALSE(c.append(b, iota(1, 54)).ok);
  c.release(a);
  CHECK(c.append(b, iota(4, 54)).ok);
  CHECK(c.stats().allocation_failures == 2);
  CHECK(std::string(frugal::to_string(frugal::kv_errc::out_of_blocks)) == "out_of_blocks");
}

TEST_CASE(
    "kv_cache: unreferenced cached blocks are evicted least recently released first, a chain's tail first") {
  frugal::kv_cache c(small(6));
  const auto a = prefill(c, iota(8, 100));  // 2 full blocks
  const auto b = prefill(c, iota(8, 200));
  const std::vector<std::uint32_t> ta(c.block_table(a).begin(), c.block_table(a).end());
  const std::vector<std::uint32_t> tb(c.block_table(b).begin(), c.block_table(b).end());
  c.release(a);
  c.release(b);
  CHECK(c.eviction_order() == std::vector<std::uint32_t>{ta[1], ta[0], tb[1], tb[0]});
  CHECK(c.stats().blocks_cached == 4);
  CHECK(c.stats().blocks_free == 2);

  // Free blocks go first; then a's tail, then a's head.
  const auto x = c.open(iota(4, 900)).id;
  REQUIRE(c.append(x, iota(4, 900)).ok);
  CHECK(c.stats().evictions == 0);
  REQUIRE(c.append(x, iota(8, 904)).ok);
  CHECK(c.stats().evictions == 1);
  CHECK(c.eviction_order() == std::vector<std::uint32_t>{ta[0], tb[1], tb[0]});
  CHECK(c.open(iota(9, 100)).cached_tokens == 4);  // a's head survives, and is in use again
  CHECK(c.eviction_order() == std::vector<std::uint32_t>{tb[1], tb[0]});
  REQUIRE(c.append(x, iota(4, 912)).ok);
  CHECK(c.stats().evictions == 2);
  CHECK(c.open(iota(9, 200)).cached_tokens == 4);
  CHECK(c.drop_cached() == 0);
  CHECK(c.eviction_order().empty());
}

TEST_CASE("kv_cache: drop_cached forgets every cached block") {
  frugal::kv_cache c(small(6));
  c.release(prefill(c, iota(9)));
  CHECK(c.stats().blocks_cached == 2);
  CHECK(c.drop_cached() == 2);
  CHECK(c.stats().blocks_free == 6);
  CHECK(c.open(iota(9)).cached_tokens == 0);
}

TEST_CASE("kv_cache: fork shares every block; the first append into the shared partial block copies it") {
  frugal::kv_cache c(small(8));
  const auto a = prefill(c, iota(6));
  const auto b = c.fork(a);
  const std::vector<std::uint32_t> ta(c.block_table(a).begin(), c.block_table(a).end());
  CHECK(std::vector<std::uint32_t>(c.block_table(b).begin(), c.block_table(b).end()) == ta);
  CHECK(c.block_refs(ta[1]) == 2);
  CHECK(c.blocks_needed(a, 1) == 1);  // the copy
  CHECK(c.blocks_needed(a, 3) == 2);  // the copy and a new block
  std::vector<float> before(c.keys(1, ta[1]), c.keys(1, ta[1]) + 32);

  REQUIRE(c.append(a, iota(1, 7)).ok);
  CHECK(c.stats().cow_copies == 1);
  const auto copy = c.block_table(a)[1];
  CHECK(copy != ta[1]);
  CHECK(c.block_table(a)[0] == ta[0]);
  CHECK(c.block_refs(ta[0]) == 2);
  CHECK(c.block_refs(ta[1]) == 1);
  CHECK(c.block_refs(copy) == 1);
  CHECK(std::memcmp(c.keys(1, copy), before.data(), before.size() * sizeof(float)) == 0);
  write_kv(c, a, 6, 1);
  CHECK(std::memcmp(c.keys(1, ta[1]), before.data(), before.size() * sizeof(float)) ==
        0);                             // b's block untouched
  REQUIRE(c.append(b, iota(1, 8)).ok);  // b now owns the original alone: no copy
  CHECK(c.stats().cow_copies == 1);
  CHECK(c.block_table(b)[1] == ta[1]);

  const auto p = c.open(iota(3)).id;
  REQUIRE(c.append(p, iota(3)).ok);
  try {
    (void)c.fork(p);
    FAIL("no exception");
  } catch (const frugal::kv_error& e) {
    CHECK(e.code() == frugal::kv_errc::pending_tokens);
    CHECK(std::string(e.what()) ==
          "frugal::kv_cache::fork: the sequence has 3 appended tokens not committed yet");
  }
  c.release(a);
  c.release(b);
  c.release(p);
  CHECK(kv_test::all_blocks_unreferenced(c));
}

TEST_CASE(
    "kv_cache: random opens, appends, commits, forks and releases keep every sequence's K/V and leak no "
    "block") {
  std::mt19937 rng(7);
  frugal::kv_cache c(small(24));
  std::vector<frugal::kv_sequence_id> open;
  std::uint64_t refused = 0;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 2 || open.empty()) {
      auto prompt = iota(rng() % 14, static_cast<frugal::kv_token>(rng() % 3));
      const auto r = c.open(prompt);
      open.push_back(r.id);
    } else if (op < 6) {
      const auto id = open[rng() % open.size()];
      const auto n = rng() % 7;
      const auto before = c.length(id);
      const auto r = c.append(id, iota(n, static_cast<frugal::kv_token>(rng() % 3)));
      if (!r.ok) {
        ++refused;
        CHECK(c.length(id) == before);
      } else {
        write_kv(c, id, before, n);
      }
    } else if (op < 7) {
      c.commit(open[rng() % open.size()]);
    } else if (op < 8) {
      const auto id = open[rng() % open.size()];
      c.commit(id);
      open.push_back(c.fork(id));
    } else {
      const auto i = rng() % open.size();
      c.release(open[i]);
      open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
    }
    const auto s = c.stats();
    REQUIRE(s.blocks_used + s.blocks_cached + s.blocks_free == s.blocks_total);
    REQUIRE(s.stored_tokens <= s.blocks_used * 4);
    if (step % 10 == 0)
      REQUIRE(
          std::all_of(open.begin(), open.end(), [&](auto id) { return kv_test::stored_kv_matches(c, id); }));
  }
  CHECK(c.stats().allocation_failures == refused);
  CHECK(c.stats().cow_copies > 0);
  CHECK(c.stats().prefix_hit_tokens > 0);
  for (const auto id : open) c.release(id);
  CHECK(kv_test::all_blocks_unreferenced(c));
  c.drop_cached();
  CHECK(c.stats().blocks_free == 24);
}
