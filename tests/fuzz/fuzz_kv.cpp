// Random opens (prompts from a tiny alphabet, so prefixes repeat), appends, commits, forks, releases and
// drop_cached on a small KV cache, against invariants after every step: each block's reference count is
// the number of open sequences' table entries naming it; used, cached and free blocks add up; every open
// sequence's stored K and V are still those its tokens wrote (a block evicted, reused or written while
// shared would show here); an append refused for want of blocks changed nothing; when all sequences end,
// no block is referenced.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "frugal/kv.hpp"

namespace {

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_kv: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

float value(frugal::kv_token tok, std::size_t pos, std::size_t layer, std::size_t i, int which) {
  return static_cast<float>(tok * 1000003 + static_cast<int>(pos) * 7919 + static_cast<int>(layer) * 31 +
                            static_cast<int>(i) * 3 + which);
}

void write_kv(frugal::kv_cache& c, frugal::kv_sequence_id id, std::size_t first, std::size_t n) {
  const auto& o = c.options();
  const std::size_t row = o.kv_heads * o.head_dim;
  const auto toks = c.tokens(id);
  for (std::size_t l = 0; l < o.layers; ++l) {
    std::vector<float> k(n * row), v(n * row);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t i = 0; i < row; ++i) {
        k[t * row + i] = value(toks[first + t], first + t, l, i, 0);
        v[t * row + i] = value(toks[first + t], first + t, l, i, 1);
      }
    c.write(id, l, first, k, v);
  }
}

void check(const frugal::kv_cache& c, const std::vector<frugal::kv_sequence_id>& open) {
  const auto& o = c.options();
  std::map<std::uint32_t, std::uint32_t> refs;
  for (const auto id : open) {
    const auto table = c.block_table(id);
    const auto toks = c.tokens(id);
    if (table.size() != (toks.size() + o.block_tokens - 1) / o.block_tokens)
      fail("table size", static_cast<long long>(table.size()), static_cast<long long>(toks.size()));
    for (const auto b : table) ++refs[b];
    for (std::size_t pos = 0; pos < toks.size(); ++pos)
      for (std::size_t l = 0; l < o.layers; ++l)
        for (std::size_t g = 0; g < o.kv_heads; ++g)
          for (std::size_t d = 0; d < o.head_dim; ++d) {
            const std::size_t at = (g * o.block_tokens + pos % o.block_tokens) * o.head_dim + d;
            const std::uint32_t b = table[pos / o.block_tokens];
            if (c.keys(l, b)[at] != value(toks[pos], pos, l, g * o.head_dim + d, 0) ||
                c.values(l, b)[at] != value(toks[pos], pos, l, g * o.head_dim + d, 1))
              fail("stored K/V differ from the token's", static_cast<long long>(pos), b);
          }
  }
  std::size_t used = 0;
  for (std::uint32_t b = 0; b < c.blocks_total(); ++b) {
    const auto it = refs.find(b);
    const std::uint32_t want = it == refs.end() ? 0 : it->second;
    if (c.block_refs(b) != want) fail("block refs", c.block_refs(b), want);
    used += want != 0;
  }
  const auto s = c.stats();
  if (s.blocks_used != used)
    fail("blocks_used", static_cast<long long>(s.blocks_used), static_cast<long long>(used));
  if (s.blocks_used + s.blocks_cached + s.blocks_free != s.blocks_total) fail("block states do not add up");
  if (c.eviction_order().size() != s.blocks_cached) fail("eviction order size");
  if (s.sequences != open.size()) fail("sequences");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::size_t B = in.ConsumeIntegralInRange<std::size_t>(1, 5);
  const std::size_t blocks = in.ConsumeIntegralInRange<std::size_t>(1, 12);
  frugal::kv_cache c({.block_tokens = B,
                      .layers = 2,
                      .kv_heads = 1,
                      .head_dim = 2,
                      .budget_bytes = blocks * B * 2 * 2 * 2 * sizeof(float),
                      .prefix_caching = in.ConsumeBool()});
  std::vector<frugal::kv_sequence_id> open;
  const auto tokens = [&](std::size_t n) {
    std::vector<frugal::kv_token> t(n);
    for (auto& x : t) x = in.ConsumeIntegralInRange<frugal::kv_token>(0, 2);
    return t;
  };
  for (int step = 0; step < 64 && in.remaining_bytes() > 0; ++step) {
    const int op = in.ConsumeIntegralInRange<int>(0, 6);
    if (op == 0 || open.empty()) {
      const auto prompt = tokens(in.ConsumeIntegralInRange<std::size_t>(0, 12));
      const auto r = c.open(prompt);
      if (r.cached_tokens % B != 0 || (r.cached_tokens > 0 && r.cached_tokens >= prompt.size()))
        fail("cached_tokens", static_cast<long long>(r.cached_tokens), static_cast<long long>(prompt.size()));
      for (std::size_t i = 0; i < r.cached_tokens; ++i)
        if (c.tokens(r.id)[i] != prompt[i]) fail("cached token differs", static_cast<long long>(i));
      open.push_back(r.id);
      continue;
    }
    const std::size_t pick = in.ConsumeIntegralInRange<std::size_t>(0, open.size() - 1);
    const auto id = open[pick];
    switch (op) {
      case 1:
      case 2: {
        const auto t = tokens(in.ConsumeIntegralInRange<std::size_t>(0, 9));
        const std::size_t len = c.length(id), need = c.blocks_needed(id, t.size());
        const auto before = c.stats();
        const auto r = c.append(id, t);
        if (r.blocks_needed != need) fail("blocks_needed", static_cast<long long>(r.blocks_needed), need);
        if (r.ok != (need <= before.blocks_free + before.blocks_cached)) fail("append outcome");
        if (!r.ok) {
          if (c.length(id) != len || c.stats().blocks_free != before.blocks_free)
            fail("a refused append changed");
        } else {
          write_kv(c, id, len, t.size());
        }
        break;
      }
      case 3:
        c.commit(id);
        break;
      case 4:
        c.commit(id);
        open.push_back(c.fork(id));
        break;
      case 5:
        c.release(id);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
        break;
      case 6:
        c.drop_cached();
        break;
    }
    check(c, open);
  }
  for (const auto id : open) c.release(id);
  open.clear();
  check(c, open);
  return 0;
}
