#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "../support/errors.hpp"
#include "frugal/kv.hpp"
#include "kv_support.hpp"

using frugal_test::what_of;
using path = frugal::quant::simd_path;

namespace {

// GQA with 6 query heads on 2 KV heads, and a head_dim of 20 that leaves a partial vector on every path.
constexpr std::size_t H = 6, Hkv = 2, D = 20, B = 4, layers = 2;

frugal::kv_cache make_cache(std::size_t blocks = 32) {
  return frugal::kv_cache({.block_tokens = B,
                           .layers = layers,
                           .kv_heads = Hkv,
                           .head_dim = D,
                           .budget_bytes = blocks * 2 * sizeof(float) * layers * Hkv * D * B});
}

float q_value(frugal::kv_token tok, std::size_t pos, std::size_t layer, std::size_t i) {
  return 0.9f * std::cos(0.29f * static_cast<float>(tok) + 0.05f * static_cast<float>(pos) +
                         0.3f * static_cast<float>(layer) + 0.021f * static_cast<float>(i));
}

// Q of the sequence's tokens [first, first + n): n rows of H * D.
std::vector<float> queries(const frugal::kv_cache& c, frugal::kv_sequence_id id, std::size_t layer,
                           std::size_t first, std::size_t n) {
  std::vector<float> q(n * H * D);
  const auto toks = c.tokens(id);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < H * D; ++i) q[t * H * D + i] = q_value(toks[first + t], first + t, layer, i);
  return q;
}

std::vector<float> attend(const frugal::kv_cache& c, frugal::kv_sequence_id id, std::size_t layer,
                          std::size_t first, std::size_t n, path p) {
  const auto q = queries(c, id, layer, first, n);
  std::vector<float> out(q.size());
  frugal::kv_attention(c, id, layer, first, q, out, {.heads = H, .path = p});
  return out;
}

// The same attention in double, from the K/V formula rather than the cache.
std::vector<double> reference(const std::vector<frugal::kv_token>& toks, std::size_t layer, std::size_t first,
                              std::size_t n) {
  std::vector<double> out(n * H * D);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t pos = first + i;
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / (H / Hkv);
      std::vector<double> w(pos + 1);
      double m = -1e300, sum = 0;
      for (std::size_t t = 0; t <= pos; ++t) {
        double s = 0;
        for (std::size_t d = 0; d < D; ++d)
          s += static_cast<double>(q_value(toks[pos], pos, layer, h * D + d)) *
               kv_test::value(toks[t], t, layer, g * D + d, 0);
        w[t] = s / std::sqrt(static_cast<double>(D));
        m = std::max(m, w[t]);
      }
      for (auto& x : w) sum += (x = std::exp(x - m));
      for (std::size_t d = 0; d < D; ++d) {
        double o = 0;
        for (std::size_t t = 0; t <= pos; ++t) o += w[t] * kv_test::value(toks[t], t, layer, g * D + d, 1);
        out[(i * H + h) * D + d] = o / sum;
      }
    }
  }
  return out;
}

std::vector<path> paths() { return frugal_test::cpu_paths({path::portable, path::avx2, path::avx512}); }

frugal::kv_sequence_id append_written(frugal::kv_cache& c, frugal::kv_sequence_id id,
                                      std::span<const frugal::kv_token> toks) {
  const std::size_t first = c.length(id);
  REQUIRE(c.append(id, toks).ok);
  kv_test::write_kv(c, id, first, toks.size());
  return id;
}

}  // namespace

TEST_CASE("kv_attention: causal GQA attention over block tables equals a double-precision reference") {
  const auto prompt = kv_test::iota(23, 40);
  for (const path p : paths()) {
    CAPTURE(frugal::quant::to_string(p));
    auto c = make_cache();
    const auto id = c.open(prompt).id;
    append_written(c, id, prompt);
    for (std::size_t layer = 0; layer < layers; ++layer) {
      const auto out = attend(c, id, layer, 0, prompt.size(), p);
      const auto ref = reference(prompt, layer, 0, prompt.size());
      double worst = 0;
      for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
      CHECK(worst < 2e-6);
      // A decode row in the middle: position 17 alone.
      const auto one = attend(c, id, layer, 17, 1, p);
      const auto ref1 = reference(prompt, layer, 17, 1);
      for (std::size_t i = 0; i < one.size(); ++i) CHECK(std::abs(one[i] - ref1[i]) < 2e-6);
    }
  }
}

TEST_CASE("kv_attention: a row's bits do not depend on chunking, decoding, head splits or the prefix cache") {
  const auto prompt = kv_test::iota(27, 7);
  for (const path p : paths()) {
    CAPTURE(frugal::quant::to_string(p));
    auto c = make_cache(64);
    // One shot.
    const auto a = c.open(prompt).id;
    append_written(c, a, prompt);
    const auto whole = attend(c, a, 1, 0, prompt.size(), p);
    c.commit(a);

    // Chunks of 5, 7 and 11, then one token at a time, in another cache (other block numbers).
    auto c2 = make_cache(64);
    const auto filler = c2.open(kv_test::iota(9, 900)).id;
    append_written(c2, filler, kv_test::iota(9, 900));
    const auto b = c2.open(prompt).id;
    std::vector<float> chunked;
    std::size_t at = 0;
    for (const std::size_t n : {5u, 7u, 11u, 1u, 1u, 1u, 1u}) {
      append_written(c2, b, std::span(prompt).subspan(at, n));
      const auto out = attend(c2, b, 1, at, n, p);
      chunked.insert(chunked.end(), out.begin(), out.end());
      c2.commit(b);
      at += n;
    }
    REQUIRE(at == prompt.size());
    REQUIRE(chunked.size() == whole.size());
    CHECK(std::memcmp(chunked.data(), whole.data(), whole.size() * sizeof(float)) == 0);

    // From the prefix cache: 24 tokens shared with a, the last 3 computed.
    const auto r = c.open(prompt);
    REQUIRE(r.cached_tokens == 24);
    append_written(c, r.id, std::span(prompt).subspan(24));
    const auto tail = attend(c, r.id, 1, 24, 3, p);
    CHECK(std::memcmp(tail.data(), whole.data() + 24 * H * D, tail.size() * sizeof(float)) == 0);

    // Heads split across calls, as threads would.
    const auto q = queries(c, a, 1, 0, prompt.size());
    std::vector<float> split(q.size());
    frugal::kv_attention(c, a, 1, 0, q, split, {.heads = H, .head_begin = 0, .head_end = 1, .path = p});
    frugal::kv_attention(c, a, 1, 0, q, split, {.heads = H, .head_begin = 1, .head_end = 4, .path = p});
    frugal::kv_attention(c, a, 1, 0, q, split, {.heads = H, .head_begin = 4, .path = p});
    CHECK(std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("kv_attention: bad shapes and positions are refused, naming what was wrong") {
  auto c = make_cache();
  const auto id = c.open(kv_test::iota(5)).id;
  append_written(c, id, kv_test::iota(5));
  std::vector<float> q(H * D), out(H * D), short_out(D);
  CHECK(what_of([&] { frugal::kv_attention(c, id, 0, 0, q, out, {.heads = 5}); }) ==
        "frugal::kv_attention: options.heads 5 is not a positive multiple of kv_heads 2");
  CHECK(what_of([&] { frugal::kv_attention(c, id, 0, 0, q, out, {}); }) ==
        "frugal::kv_attention: options.heads 0 is not a positive multiple of kv_heads 2");
  CHECK(what_of([&] { frugal::kv_attention(c, id, 0, 0, q, short_out, {.heads = H}); }) ==
        "frugal::kv_attention: q has 120 and out 20 elements; both must be the same positive multiple of "
        "heads * "
        "head_dim = 120");
  CHECK(what_of([&] { frugal::kv_attention(c, id, 0, 5, q, out, {.heads = H}); }) ==
        "frugal::kv_attention: positions [5, 6) are not all within the sequence's 5 tokens");
  CHECK(what_of([&] { frugal::kv_attention(c, id, 2, 0, q, out, {.heads = H}); }) ==
        "frugal::kv_attention: layer 2 is not below options.layers 2");
  CHECK(what_of([&] {
          frugal::kv_attention(c, id, 0, 0, q, out, {.heads = H, .head_begin = 3, .head_end = 3});
        }) ==
        "frugal::kv_attention: options.head_begin 3 and head_end 3 do not give a non-empty range of the 6 "
        "heads");
  c.release(id);
  try {
    frugal::kv_attention(c, id, 0, 0, q, out, {.heads = H});
    FAIL("no exception");
  } catch (const frugal::kv_error& e) {
    CHECK(e.code() == frugal::kv_errc::unknown_sequence);
  }
}
