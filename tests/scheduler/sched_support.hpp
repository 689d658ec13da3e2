#pragma once

// A deterministic fake decoder for the scheduler's tests: each token's K is (token, position), written
// into the KV cache as a model would; a row of logits is a hash of the tokens read back from the cache
// through the sequence's block table, so a block lost, shared wrongly or computed at the wrong position
// changes the output. reference() gives what a sequence generates run alone, without a scheduler.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "frugal/kv.hpp"
#include "frugal/scheduler.hpp"

namespace sched_test {

inline std::uint64_t mix(std::uint64_t h, std::uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

inline void logits_of(std::uint64_t h, std::size_t vocab, float* out) {
  for (std::size_t v = 0; v < vocab; ++v) out[v] = static_cast<float>(mix(h, v) % 1000) / 100.0f;
}

inline std::uint64_t hash_tokens(const std::vector<frugal::kv_token>& t) {
  std::uint64_t h = 1;
  for (auto x : t) h = mix(h, static_cast<std::uint64_t>(x));
  return h;
}

inline frugal::kv_cache_options kv_options(std::size_t blocks, std::size_t block_tokens = 4) {
  frugal::kv_cache_options o{.block_tokens = block_tokens, .layers = 1, .kv_heads = 1, .head_dim = 2};
  o.budget_bytes = blocks * 2 * sizeof(float) * 2 * block_tokens;
  return o;
}

class fake_model {
 public:
  fake_model(frugal::kv_cache& kv, std::size_t vocab) : kv_(kv), vocab_(vocab) {}

  // Writes the step's K/V and returns its logits rows; throws if the cache holds a wrong position.
  std::vector<float> run(const frugal::step& st) {
    std::vector<float> logits(st.logits_rows() * vocab_);
    std::size_t row = 0;
    for (const frugal::step_entry& e : st.entries()) {
      std::vector<float> k;
      for (std::size_t i = 0; i < e.tokens.size(); ++i) {
        k.push_back(static_cast<float>(e.tokens[i]));
        k.push_back(static_cast<float>(e.first_position + i));
      }
      kv_.write(e.kv, 0, e.first_position, k, k);
      if (!e.logits) continue;
      const std::size_t len = e.first_position + e.tokens.size();
      const auto table = kv_.block_table(e.kv);
      const std::size_t B = kv_.options().block_tokens;
      std::uint64_t h = 1;
      for (std::size_t p = 0; p < len; ++p) {
        const float* at = kv_.keys(0, table[p / B]) + (p % B) * 2;
        if (at[1] != static_cast<float>(p))
          throw std::runtime_error("fake_model: the KV cache lost a position");
        h = mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(at[0])));
      }
      logits_of(h, vocab_, logits.data() + row++ * vocab_);
    }
    return logits;
  }

 private:
  frugal::kv_cache& kv_;
  std::size_t vocab_;
};

// What a sequence generates alone: the tokens, and the stop token if one ended it.
struct expected {
  std::vector<frugal::kv_token> tokens;
  std::optional<frugal::kv_token> stop;
};

inline expected reference(std::vector<frugal::kv_token> seq, std::size_t max_tokens,
                          const std::vector<frugal::kv_token>& stop, const frugal::sampling_params& p,
                          std::size_t vocab, std::size_t max_context = 0) {
  expected out;
  std::vector<float> row(vocab);
  for (std::size_t n = 0; n < max_tokens; ++n) {
    logits_of(hash_tokens(seq), vocab, row.data());
    const auto tok = *frugal::sample_token(row, p, frugal::sampling_uniform(p.seed, n));
    if (std::find(stop.begin(), stop.end(), tok) != stop.end()) {
      out.stop = tok;
      break;
    }
    out.tokens.push_back(tok);
    seq.push_back(tok);
    if (max_context != 0 && seq.size() > max_context) break;
  }
  return out;
}

}  // namespace sched_test
