#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "frugal/kv/detail/attention_kernels.hpp"
#include "frugal/kv/errors.hpp"
#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/quant/cpu.hpp"
#include "frugal/quant/detail/cpu.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The query side of kv_attention.
struct kv_attention_options {
  std::size_t heads =
      0;  ///< query heads H, a multiple of the cache's kv_heads: head h reads kv head h / (H / kv_heads)
  float scale = 0.0f;  ///< 0: 1 / sqrt(head_dim)
  /// The heads [head_begin, head_end) to compute (head_end 0: all), so that callers can split one call's
  /// heads across threads; a head's result does not depend on the split.
  std::size_t head_begin = 0;
  std::size_t head_end = 0;
  /// The SIMD path (automatic: the best this CPU has, capped by FRUGAL_MAX_CPU_ISA).
  quant::simd_path path = quant::simd_path::automatic;
};

/// @brief Causal attention of one sequence's n new tokens, at positions [first_pos, first_pos + n), over
/// the K/V in its blocks of one layer (the new tokens' K/V written already).
///
/// q and out are n rows of heads * head_dim floats, token-major then head-major. Row i, head h attends to
/// positions 0 ... first_pos + i: scores s_t = scale * (q . k_t); softmax in fp32 with the maximum
/// subtracted; out = sum_t e_t v_t / sum_t e_t.
///
/// Reduction order, fixed, so that a row's bits depend only on its query, its position and the sequence's
/// K/V (not on n, first_pos of the chunk, other rows or whether blocks came from the prefix cache):
/// - a score's dot product runs over head_dim as the SIMD path states (detail/attention_kernels.hpp:
///   portable in order; avx2 8 lanes and avx512 16 lanes, each lane in order, then a fixed tree);
/// - the maximum is exact; the e_t = exp(s_t - max) are summed in position order in double;
/// - each output element sums w_t v_t in position order with FMA (AVX paths) or multiply-add (portable);
///   it is then divided by the sum.
/// The bits differ between SIMD paths; one process uses one path unless options.path says otherwise.
inline void kv_attention(const kv_cache& cache, kv_sequence_id seq, std::size_t layer, std::size_t first_pos,
                         std::span<const float> q, std::span<float> out, const kv_attention_options& opts) {
  const kv_cache_options& o = cache.options();
  const std::size_t H = opts.heads, Hkv = o.kv_heads, D = o.head_dim, B = o.block_tokens;
  const auto fail = [](kv_errc c, const std::string& what) {
    return kv_error(c, "frugal::kv_attention: " + what);
  };
  if (H == 0 || H % Hkv != 0)
    throw fail(kv_errc::bad_shape, "options.heads " + std::to_string(H) +
                                       " is not a positive multiple of kv_heads " + std::to_string(Hkv));
  const std::size_t head_end = opts.head_end == 0 ? H : opts.head_end;
  if (opts.head_begin >= head_end || head_end > H)
    throw fail(kv_errc::bad_shape, "options.head_begin " + std::to_string(opts.head_begin) +
                                       " and head_end " + std::to_string(opts.head_end) +
                                       " do not give a non-empty range of the " + std::to_string(H) +
                                       " heads");
  if (layer >= o.layers)
    throw fail(kv_errc::bad_shape,
               "layer " + std::to_string(layer) + " is not below options.layers " + std::to_string(o.layers));
  const std::size_t row = H * D;
  if (q.empty() || q.size() % row != 0 || out.size() != q.size())
    throw fail(kv_errc::bad_shape,
               "q has " + std::to_string(q.size()) + " and out " + std::to_string(out.size()) +
                   " elements; both must be the same positive multiple of heads * head_dim = " +
                   std::to_string(row));
  const std::size_t n = q.size() / row;
  const std::size_t len = cache.length(seq);
  if (first_pos + n > len)
    throw fail(kv_errc::bad_position,
               "positions [" + std::to_string(first_pos) + ", " + std::to_string(first_pos + n) +
                   ") are not all within the sequence's " + std::to_string(len) + " tokens");
  const float scale = opts.scale != 0.0f ? opts.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const auto level = quant::detail::resolve_float_level(opts.path, "frugal::kv_attention");

  const detail::kv_kernels k = detail::kv_kernels_for(level);

  const std::span<const std::uint32_t> table = cache.block_table(seq);
  const std::size_t group = H / Hkv;
  std::vector<float> s(first_pos + n);
  std::vector<float> acc(D);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t count = first_pos + i + 1;
    for (std::size_t h = opts.head_begin; h < head_end; ++h) {
      const float* qh = q.data() + (i * H + h) * D;
      const std::size_t head_off = (h / group) * B * D;
      for (std::size_t t0 = 0; t0 < count; t0 += B)
        k.scores(qh, cache.keys(layer, table[t0 / B]) + head_off, std::min(B, count - t0), D, scale,
                 s.data() + t0);
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t t = 0; t < count; ++t) m = std::max(m, s[t]);
      double sum = 0.0;
      for (std::size_t t = 0; t < count; ++t) {
        s[t] = std::exp(s[t] - m);
        sum += s[t];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t t0 = 0; t0 < count; t0 += B)
        k.accumulate(acc.data(), s.data() + t0, cache.values(layer, table[t0 / B]) + head_off,
                     std::min(B, count - t0), D);
      const float denom = static_cast<float>(sum);
      float* oh = out.data() + (i * H + h) * D;
      for (std::size_t d = 0; d < D; ++d) oh[d] = acc[d] / denom;
    }
  }
}

FRUGAL_END_NAMESPACE
