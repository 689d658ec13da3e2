#pragma once

// A Llama-family decoder (SmolLM2 and any GGUF file with general.architecture = "llama"), loaded from its
// GGUF file and run on the CPU with frugal's parts. Every shape, the RoPE base, the norm epsilon, the
// tokenizer and the chat template come from the file's metadata.
//
// Precisions of the linear layers (attention, norms, RoPE and the KV cache stay fp32 in all of them):
//   native  the file's own blocks kept as they are (Q4_1, Q8_0) on frugal's block kernels
//           (quant::gemm_ggml: activations quantized in blocks of 32, exact integer dot products); a tensor
//           of another type is dequantized to fp32
//   fp32    weights dequantized once, Eigen GEMMs split over the threads along N; with
//           load_options::batch_invariant, frugal's fixed-order tiles instead (detail::invariant_gemm)
//   int8    W8A8 on frugal's exact int8 kernels: per-channel weights, per-token dynamic activations
//   int4    frugal's groupwise asymmetric int4 (W4A16): groups of 128 where K allows it, else the largest of
//   64
//           and 32 that divides K (SmolLM2's K = 576 takes 64)
// The output projection is the tied token embedding unless the file has output.weight; it takes the same
// precision as the other layers. The embedding lookup always reads the file's rows (dequantized per token).
//
// Batches are packed: the tokens of every sequence in a step are stacked into one (T x hidden) matrix for
// each linear layer, and attention runs per sequence on its own rows against its own KV cache.
//
// This is example code, meant to be copied or linked: the library gives it the GGUF reader, the tokenizer and
// the kernels; the model's structure lives here.
#include <frugal/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include <frugal/kv.hpp>
#include <frugal/model/bpe.hpp>
#include <frugal/model/chat_template.hpp>
#include <frugal/model/gguf.hpp>
#include <frugal/quant/ggml.hpp>
#include <frugal/scheduler.hpp>

namespace llama {

namespace q = frugal::quant;
using matrix = q::row_matrix;

/// @brief How the linear layers' weights are kept and multiplied.
enum class precision { native, fp32, int8, int4 };

inline constexpr const char* to_string(precision p) noexcept {
  switch (p) {
    case precision::native:
      return "native";
    case precision::fp32:
      return "fp32";
    case precision::int8:
      return "int8";
    case precision::int4:
      return "int4";
  }
  return "?";
}

/// @brief Parses a precision name; throws naming the value and the accepted names.
inline precision parse_precision(const std::string& s) {
  for (precision p : {precision::native, precision::fp32, precision::int8, precision::int4})
    if (s == to_string(p)) return p;
  throw std::invalid_argument("precision \"" + s + "\" is not one of native, fp32, int8, int4");
}

/// @brief The hyper-parameters, all read from the file's `llama.*` keys.
struct config {
  std::size_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  std::size_t context = 0;  ///< llama.context_length: the longest sequence the model was trained for
  std::size_t rope_dims = 0;
  double rope_base = 10000.0;
  float rms_eps = 1e-5f;

  std::size_t q_dim() const noexcept { return heads * head_dim; }
  std::size_t kv_dim() const noexcept { return kv_heads * head_dim; }
  /// @brief KV cache bytes per token of one sequence (K and V of every layer, fp32).
  std::size_t kv_bytes_per_token() const noexcept { return 2 * layers * kv_dim() * sizeof(float); }

  static config from_gguf(const frugal::gguf::file& f) {
    const std::string_view arch = f.get_string("general.architecture");
    if (arch != "llama")
      throw std::invalid_argument(f.path() + ": general.architecture is \"" + std::string(arch) +
                                  "\"; this model reads \"llama\" files only");
    config c;
    c.layers = f.get_integer<std::size_t>("llama.block_count");
    c.hidden = f.get_integer<std::size_t>("llama.embedding_length");
    c.ffn = f.get_integer<std::size_t>("llama.feed_forward_length");
    c.heads = f.get_integer<std::size_t>("llama.attention.head_count");
    c.kv_heads = f.contains("llama.attention.head_count_kv")
                     ? f.get_integer<std::size_t>("llama.attention.head_count_kv")
                     : c.heads;
    c.context = f.get_integer<std::size_t>("llama.context_length");
    c.rope_base = f.get_float_or("llama.rope.freq_base", 10000.0);
    c.rms_eps = static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon"));
    if (c.layers == 0 || c.hidden == 0 || c.ffn == 0 || c.heads == 0 || c.kv_heads == 0 || c.context == 0)
      throw std::invalid_argument(f.path() +
                                  ": a llama.* size (block_count, embedding_length, "
                                  "feed_forward_length, head_count, head_count_kv, context_length) is 0");
    if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0)
      throw std::invalid_argument(f.path() + ": llama.embedding_length " + std::to_string(c.hidden) +
                                  " and head_count " + std::to_string(c.heads) + " / head_count_kv " +
                                  std::to_string(c.kv_heads) + " do not divide evenly");
    c.head_dim = c.hidden / c.heads;
    c.rope_dims = f.contains("llama.rope.dimension_count")
                      ? f.get_integer<std::size_t>("llama.rope.dimension_count")
                      : c.head_dim;
    if (c.rope_dims == 0 || c.rope_dims > c.head_dim || c.rope_dims % 2 != 0)
      throw std::invalid_argument(f.path() + ": llama.rope.dimension_count " + std::to_string(c.rope_dims) +
                                  " must be even and in [2, head_dim = " + std::to_string(c.head_dim) + "]");
    if (!(c.rope_base > 0.0) || !std::isfinite(c.rope_base))
      throw std::invalid_argument(f.path() + ": llama.rope.freq_base must be finite and > 0");
    if (!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps))
      throw std::invalid_argument(f.path() +
                                  ": llama.attention.layer_norm_rms_epsilon must be finite and > 0");
    return c;
  }
};

namespace detail {

// exp for the softmax and SiLU loops: Cody-Waite reduction and a degree-6 polynomial on [-ln2/2, ln2/2]
// (relative error under 2e-7), written so that GCC vectorizes the loops that call it.
inline float fast_exp(float x) noexcept {
  x = std::clamp(x, -87.0f, 88.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = std::fma(n, -0.693145751953125f, std::fma(n, -1.428606765330187e-06f, x));
  float p = 1.3888889e-03f;
  p = std::fma(p, r, 8.3333333e-03f);
  p = std::fma(p, r, 4.1666667e-02f);
  p = std::fma(p, r, 1.6666667e-01f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// y (m x n, row-major) = x (m x k) w^T (w n x k row-major) for rows [n0, n1) of w. Every output is its two
// rows' products accumulated in 16 lanes over k in order, then the lanes summed in one fixed tree: its bits
// depend on its row of x and its row of w alone, not on m, the tile it falls in or the thread (Eigen's GEMM
// picks another blocking and reduction order for one row than for many). Tiles of 4 rows of x by 4 rows of
// w (a single row of x: by 8), over panels of 64 rows of w that stay in cache while every row of x passes;
// k % 16 == 0.
using f32x16 = float __attribute__((vector_size(64)));

template <int MR, int NR>
inline void invariant_tile(const float* x, std::size_t k, const float* w, std::size_t n, std::size_t j0,
                           float* y) noexcept {
  const float* wr[NR];
  for (int j = 0; j < NR; ++j) wr[j] = w + std::min(j0 + static_cast<std::size_t>(j), n - 1) * k;
  f32x16 acc[MR][NR] = {};
  for (std::size_t t = 0; t < k; t += 16) {
    f32x16 wv[NR];
    for (int j = 0; j < NR; ++j) std::memcpy(&wv[j], wr[j] + t, sizeof(f32x16));
    for (int i = 0; i < MR; ++i) {
      f32x16 xv;
      std::memcpy(&xv, x + static_cast<std::size_t>(i) * k + t, sizeof(f32x16));
      for (int j = 0; j < NR; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR && j0 + static_cast<std::size_t>(j) < n; ++j) {
      float s[16];
      std::memcpy(s, &acc[i][j], sizeof s);
      for (int half = 8; half >= 1; half /= 2)
        for (int l = 0; l < half; ++l) s[l] += s[l + half];
      y[static_cast<std::size_t>(i) * n + j0 + static_cast<std::size_t>(j)] = s[0];
    }
}

inline void invariant_gemm(const float* x, std::size_t m, std::size_t k, const float* w, std::size_t n,
                           std::size_t n0, std::size_t n1, float* y) noexcept {
  for (std::size_t p0 = n0; p0 < n1; p0 += 64) {
    const std::size_t p1 = std::min(n1, p0 + 64);
    std::size_t i = 0;
    for (; i + 4 <= m; i += 4)
      for (std::size_t j = p0; j < p1; j += 4) invariant_tile<4, 4>(x + i * k, k, w, n, j, y + i * n);
    for (; i < m; ++i)
      for (std::size_t j = p0; j < p1; j += 8) invariant_tile<1, 8>(x + i * k, k, w, n, j, y + i * n);
  }
}

inline std::size_t int4_group(std::size_t k) {
  for (std::size_t g : {std::size_t{128}, std::size_t{64}, std::size_t{32}})
    if (k % g == 0) return g;
  throw std::invalid_argument("llama: int4 needs K divisible by 32, not " + std::to_string(k));
}

}  // namespace detail

/// @brief One linear layer y = x W^T (no bias in Llama), W N x K, made of one or more of the file's tensors
/// stacked along N (Q, K and V become one layer; so do the gate and up projections).
class linear {
 public:
  linear() = default;

  /// @brief @p invariant: fp32 weights (precision fp32, or a tensor that native keeps as fp32) run
  /// detail::invariant_gemm, whose rows do not depend on the batch, instead of Eigen's GEMM.
  linear(std::span<const frugal::gguf::tensor_info* const> parts, precision p, bool invariant = false)
      : p_(p), invariant_(invariant) {
    k_ = static_cast<std::size_t>(parts[0]->row_length());
    for (const auto* t : parts) {
      if (t->row_length() != k_)
        throw std::invalid_argument("llama: tensor " + t->name + " has rows of " +
                                    std::to_string(t->row_length()) + ", not " + std::to_string(k_) +
                                    " like " + parts[0]->name);
      n_ += static_cast<std::size_t>(t->rows());
    }
    const auto ggml_format_of = [](frugal::gguf::ggml_type t, q::ggml_format& f) {
      if (t == frugal::gguf::ggml_type::q4_1)
        f = q::ggml_format::q4_1;
      else if (t == frugal::gguf::ggml_type::q8_0)
        f = q::ggml_format::q8_0;
      else
        return false;
      return true;
    };
    q::ggml_format fmt{};
    bool native = p == precision::native && ggml_format_of(parts[0]->type, fmt);
    for (const auto* t : parts) native = native && t->type == parts[0]->type;
    if (native) {
      std::vector<std::byte> raw;
      for (const auto* t : parts) raw.insert(raw.end(), t->data.begin(), t->data.end());
      ggml_ = q::make_ggml_weights(fmt, raw, n_, k_);
      kind_ = kind::ggml;
      return;
    }
    std::vector<float> w(n_ * k_);
    std::size_t at = 0;
    for (const auto* t : parts) {
      frugal::gguf::dequantize_rows(*t, 0, t->rows(), std::span<float>(w.data() + at, t->elements));
      at += t->elements;
    }
    switch (p) {
      case precision::native:
      case precision::fp32:
        w32_ =
            Eigen::Map<const matrix>(w.data(), static_cast<Eigen::Index>(n_), static_cast<Eigen::Index>(k_));
        kind_ = kind::f32;
        if (invariant_ && k_ % 16 != 0)
          throw std::invalid_argument("llama: batch_invariant fp32 needs rows of a multiple of 16, and " +
                                      parts[0]->name + " has " + std::to_string(k_));
        break;
      case precision::int8:
        w8_ = q::quantize_weights_per_channel(w, n_, k_);
        kind_ = kind::i8;
        break;
      case precision::int4:
        w4_ = q::quantize_int4(
            w, n_, k_,
            q::int4_options{.group_size = static_cast<int>(detail::int4_group(k_)), .symmetric = false});
        kind_ = kind::i4;
        break;
    }
  }

  std::size_t rows() const noexcept { return n_; }
  std::size_t cols() const noexcept { return k_; }

  /// @brief Bytes of the weights as kept (with their scales).
  std::size_t bytes() const noexcept {
    switch (kind_) {
      case kind::ggml:
        return ggml_.bytes();
      case kind::f32:
        return n_ * k_ * sizeof(float);
      case kind::i8:
        return w8_.data.size() + w8_.scales.size() * sizeof(float);
      case kind::i4:
        return w4_.memory_bytes();
    }
    return 0;
  }

  /// @brief y (m x N, row-major) = x (m x K, row-major) W^T.
  void forward(const float* x, std::size_t m, float* y, q::executor* threads) const {
    if (m == 0) return;
    switch (kind_) {
      case kind::ggml:
        q::gemm_ggml(std::span<const float>(x, m * k_), m, ggml_, std::span<float>(y, m * n_),
                     q::ggml_gemm_options{.threads = threads});
        return;
      case kind::i8: {
        const q::quantized_activations a = q::quantize_rows(std::span<const float>(x, m * k_), m, k_);
        q::gemm_w8a8(a, w8_, std::span<float>(y, m * n_), q::gemm_options{.threads = threads});
        return;
      }
      case kind::i4:
        q::gemm_weight_only(std::span<const float>(x, m * k_), m, w4_, std::span<float>(y, m * n_),
                            q::weight_only_options{.threads = threads});
        return;
      case kind::f32: {
        const Eigen::Map<const matrix> xm(x, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(k_));
        const std::size_t parts = threads ? std::min<std::size_t>(threads->concurrency(), (n_ + 63) / 64) : 1;
        const auto part = [&](std::size_t i) {
          const std::size_t n0 = n_ * i / parts / 16 * 16,
                            n1 = i + 1 == parts ? n_ : n_ * (i + 1) / parts / 16 * 16;
          if (invariant_) {
            detail::invariant_gemm(x, m, k_, w32_.data(), n_, n0, n1, y);
            return;
          }
          Eigen::Map<matrix, 0, Eigen::OuterStride<>> ym(y + n0, static_cast<Eigen::Index>(m),
                                                         static_cast<Eigen::Index>(n1 - n0),
                                                         Eigen::OuterStride<>(static_cast<Eigen::Index>(n_)));
          ym.noalias() =
              xm *
              w32_.middleRows(static_cast<Eigen::Index>(n0), static_cast<Eigen::Index>(n1 - n0)).transpose();
        };
        if (parts <= 1)
          part(0);
        else
          threads->parallel_for(parts, part);
        return;
      }
    }
  }

 private:
  enum class kind { ggml, f32, i8, i4 };
  precision p_ = precision::fp32;
  bool invariant_ = false;
  kind kind_ = kind::f32;
  std::size_t n_ = 0, k_ = 0;
  q::ggml_weights ggml_;
  matrix w32_;
  q::quantized_weights w8_;
  q::int4_weights w4_;
};

class model;

/// @brief One sequence's place in the model's paged KV cache (frugal::kv_cache): its blocks are given back
/// when it is destroyed. Full blocks of computed tokens stay cached for later sequences with the same prefix.
class sequence {
 public:
  sequence(const sequence&) = delete;
  sequence& operator=(const sequence&) = delete;
  sequence(sequence&& o) noexcept : kv_(std::exchange(o.kv_, nullptr)), id_(o.id_), cached_(o.cached_) {}
  sequence& operator=(sequence&& o) noexcept {
    if (this != &o) {
      release();
      kv_ = std::exchange(o.kv_, nullptr);
      id_ = o.id_;
      cached_ = o.cached_;
    }
    return *this;
  }
  ~sequence() { release(); }

  /// @brief Tokens held; the next token goes to this position.
  std::size_t length() const { return kv_ ? kv_->length(id_) : 0; }
  /// @brief Leading prompt tokens whose K/V came from the prefix cache when the sequence was opened: feed
  /// the prompt from there on.
  std::size_t cached_tokens() const noexcept { return cached_; }
  frugal::kv_sequence_id id() const noexcept { return id_; }

 private:
  friend class model;
  sequence(frugal::kv_cache* kv, frugal::kv_open_result r) : kv_(kv), id_(r.id), cached_(r.cached_tokens) {}
  void release() noexcept {
    if (kv_) kv_->release(id_);
    kv_ = nullptr;
  }

  frugal::kv_cache* kv_ = nullptr;
  frugal::kv_sequence_id id_{};
  std::size_t cached_ = 0;
};

/// @brief Options of model::load.
struct load_options {
  precision weights = precision::native;
  /// Bytes of the paged KV cache (fp32 K and V of every layer, in blocks of 16 tokens), reserved at load and
  /// touched as it fills. A step that needs more blocks than are free or evictable throws std::length_error.
  std::size_t kv_budget_bytes = std::size_t{256} << 20;
  /// Whether full blocks of computed tokens are kept and shared by later sequences with the same prefix.
  bool prefix_caching = true;
  /// fp32 weights through a fixed-order kernel, so that a sequence's logits are the same bits alone or
  /// batched, prefilled at once or chunked, from the prefix cache or computed (native and int8 are so
  /// anyway). Off, fp32 runs Eigen's GEMMs, faster for prefill, whose rows change in the last bits with the
  /// batch.
  bool batch_invariant = false;
};

/// @brief One sequence's input to model::forward: run `tokens` at the end of `seq`, and return logits for its
/// last token, or for every token from position `logits_from` of `tokens` on. (A frugal::scheduler's step
/// carries its own frugal::step_entry list; model::run_step takes that.)
struct input {
  sequence* seq = nullptr;
  std::span<const std::int32_t> tokens;
  bool all_logits = false;
  std::size_t logits_from = 0;
};

class model {
 public:
  /// @brief Opens and maps @p path, reads its configuration, tokenizer and chat template, and converts the
  /// linear layers to @p opt.weights. Any missing or inconsistent tensor throws naming the file and tensor.
  static std::unique_ptr<model> load(const std::string& path, const load_options& opt = {}) {
    auto m = std::unique_ptr<model>(new model());
    m->file_ = std::make_unique<frugal::gguf::file>(path);
    const auto& f = *m->file_;
    m->cfg_ = config::from_gguf(f);
    m->opt_ = opt;
    m->tokenizer_ = std::make_unique<frugal::bpe::tokenizer>(frugal::bpe::tokenizer::from_gguf(f));
    m->template_ = std::make_unique<frugal::chat::chat_template>(frugal::chat::chat_template::from_gguf(f));
    const config& c = m->cfg_;
    const auto tensor = [&](const std::string& name,
                            std::vector<std::uint64_t> dims) -> const frugal::gguf::tensor_info& {
      const frugal::gguf::tensor_info* t = m->find(name);
      if (!t) throw std::invalid_argument(path + ": tensor " + name + " is missing");
      if (t->dims != dims) {
        std::string want, got;
        for (auto d : dims) want += (want.empty() ? "" : " x ") + std::to_string(d);
        for (auto d : t->dims) got += (got.empty() ? "" : " x ") + std::to_string(d);
        throw std::invalid_argument(path + ": tensor " + name + " is " + got + ", not " + want);
      }
      return *t;
    };
    m->cfg_.vocab = m->tokenizer_->size();
    m->embd_ = &tensor("token_embd.weight", {c.hidden, c.vocab});
    const auto norm = [&](const std::string& name) {
      std::vector<float> w = frugal::gguf::dequantize(tensor(name, {c.hidden}));
      return w;
    };
    for (std::size_t l = 0; l < c.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      layer L;
      L.attn_norm = norm(p + "attn_norm.weight");
      L.ffn_norm = norm(p + "ffn_norm.weight");
      const frugal::gguf::tensor_info* qkv[] = {&tensor(p + "attn_q.weight", {c.hidden, c.q_dim()}),
                                                &tensor(p + "attn_k.weight", {c.hidden, c.kv_dim()}),
                                                &tensor(p + "attn_v.weight", {c.hidden, c.kv_dim()})};
      L.qkv = linear(qkv, opt.weights, opt.batch_invariant);
      const frugal::gguf::tensor_info* o[] = {&tensor(p + "attn_output.weight", {c.q_dim(), c.hidden})};
      L.o = linear(o, opt.weights, opt.batch_invariant);
      const frugal::gguf::tensor_info* gu[] = {&tensor(p + "ffn_gate.weight", {c.hidden, c.ffn}),
                                               &tensor(p + "ffn_up.weight", {c.hidden, c.ffn})};
      L.gate_up = linear(gu, opt.weights, opt.batch_invariant);
      const frugal::gguf::tensor_info* d[] = {&tensor(p + "ffn_down.weight", {c.ffn, c.hidden})};
      L.down = linear(d, opt.weights, opt.batch_invariant);
      m->layers_.push_back(std::move(L));
    }
    m->out_norm_ = norm("output_norm.weight");
    const frugal::gguf::tensor_info* out =
        m->find("output.weight") ? &tensor("output.weight", {c.hidden, m->cfg_.vocab}) : m->embd_;
    const frugal::gguf::tensor_info* outs[] = {out};
    m->output_ = linear(outs, opt.weights, opt.batch_invariant);
    m->kv_ =
        std::make_unique<frugal::kv_cache>(frugal::kv_cache_options{.layers = c.layers,
                                                                    .kv_heads = c.kv_heads,
                                                                    .head_dim = c.head_dim,
                                                                    .budget_bytes = opt.kv_budget_bytes,
                                                                    .prefix_caching = opt.prefix_caching});
    // K and V depend on the weights as kept: a prefix computed in one precision is not another's.
    m->salt_ = frugal::kv_salt::of(path + "#" + to_string(opt.weights));
    m->inv_freq_.resize(c.rope_dims / 2);
    for (std::size_t i = 0; i < c.rope_dims / 2; ++i)
      m->inv_freq_[i] =
          std::pow(c.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims));
    return m;
  }

  const config& cfg() const noexcept { return cfg_; }
  precision weights() const noexcept { return opt_.weights; }
  const frugal::bpe::tokenizer& tokenizer() const noexcept { return *tokenizer_; }
  const frugal::chat::chat_template& chat_template() const noexcept { return *template_; }
  const frugal::gguf::file& file() const noexcept { return *file_; }

  /// @brief Bytes of the linear layers' weights as kept, the output projection included.
  std::size_t weight_bytes() const noexcept {
    std::size_t b = output_.bytes();
    for (const auto& L : layers_) b += L.qkv.bytes() + L.o.bytes() + L.gate_up.bytes() + L.down.bytes();
    return b;
  }
  /// @brief Bytes of KV cache the open sequences' blocks hold now (shared blocks once).
  std::size_t kv_bytes() const { return kv_->stats().bytes_used; }
  frugal::kv_cache& kv() noexcept { return *kv_; }
  /// @brief The prefix-cache salt of this file in this precision: a scheduler's requests for this model carry
  /// it.
  const frugal::kv_salt& salt() const noexcept { return salt_; }
  const frugal::kv_cache& kv() const noexcept { return *kv_; }

  /// @brief The token ids of a chat: the messages rendered by the file's chat template (ending with the
  /// assistant's turn opened), the template's markup parsed as special tokens, the messages' text not.
  std::vector<std::int32_t> encode_chat(std::span<const frugal::chat::message> messages) const {
    std::vector<std::int32_t> ids;
    for (const auto& seg : template_->render(messages)) {
      const auto part = tokenizer_->encode(seg.text, {.parse_special = !seg.is_content});
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  }
  /// @brief A one-turn chat: the template's default system prompt and @p user.
  std::vector<std::int32_t> encode_chat(const std::string& user) const {
    const frugal::chat::message msgs[] = {{"system", template_->default_system()}, {"user", user}};
    return encode_chat(msgs);
  }
  /// @brief The token ids that end an answer: end of sequence, and the template's end of turn when that is
  /// another token.
  std::vector<std::int32_t> stop_tokens() const {
    std::vector<std::int32_t> out{tokenizer_->eos()};
    const std::int32_t eot = tokenizer_->find(std::string(template_->end_of_turn()));
    if (eot >= 0 && eot != tokenizer_->eos()) out.push_back(eot);
    return out;
  }

  /// @brief A new sequence. With @p prompt and prefix caching on, it starts holding the longest run of the
  /// prompt's leading full blocks that is cached (sequence::cached_tokens()); feed the rest.
  sequence open(std::span<const std::int32_t> prompt = {}) {
    return sequence(kv_.get(), kv_->open(prompt, salt_));
  }

  /// @brief Runs one step: every entry's tokens are appended to its sequence and go through the model in one
  /// packed batch. Returns the logits asked for, entry after entry (vocab floats per row). An entry that
  /// would overflow its sequence, a token id out of the vocabulary or two entries on one sequence throw
  /// before anything runs.
  std::vector<float> forward(std::span<const input> entries, q::executor* threads = nullptr) {
    const config& c = cfg_;
    std::size_t t = 0, out_rows = 0;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const input& s = entries[e];
      if (!s.seq)
        throw std::invalid_argument("llama::forward: entries[" + std::to_string(e) + "].seq is null");
      for (std::size_t f = 0; f < e; ++f)
        if (entries[f].seq == s.seq)
          throw std::invalid_argument("llama::forward: entries " + std::to_string(f) + " and " +
                                      std::to_string(e) + " name the same sequence");
      if (!s.seq->kv_ || s.seq->kv_ != kv_.get())
        throw std::invalid_argument("llama::forward: entries[" + std::to_string(e) +
                                    "].seq is not an open sequence of this model");
      if (s.seq->length() + s.tokens.size() > c.context)
        throw std::length_error("llama::forward: entries[" + std::to_string(e) + "] adds " +
                                std::to_string(s.tokens.size()) + " tokens to a sequence of " +
                                std::to_string(s.seq->length()) + ", past the context length " +
                                std::to_string(c.context) + " (llama.context_length)");
      for (std::size_t i = 0; i < s.tokens.size(); ++i)
        if (s.tokens[i] < 0 || static_cast<std::size_t>(s.tokens[i]) >= c.vocab)
          throw std::out_of_range("llama::forward: entries[" + std::to_string(e) + "].tokens[" +
                                  std::to_string(i) + "] = " + std::to_string(s.tokens[i]) +
                                  " is not a token id (vocabulary of " + std::to_string(c.vocab) + ")");
      if (s.all_logits && s.logits_from > s.tokens.size())
        throw std::invalid_argument("llama::forward: entries[" + std::to_string(e) +
                                    "].logits_from is past its tokens");
      t += s.tokens.size();
      out_rows += s.tokens.empty() ? 0 : s.all_logits ? s.tokens.size() - s.logits_from : 1;
    }
    if (t == 0) return {};
    std::size_t blocks = 0;
    for (const input& s : entries) blocks += kv_->blocks_needed(s.seq->id_, s.tokens.size());
    if (blocks > kv_->blocks_available())
      throw std::length_error("llama::forward: the step needs " + std::to_string(blocks) + " KV blocks and " +
                              std::to_string(kv_->blocks_available()) + " of " +
                              std::to_string(kv_->blocks_total()) +
                              " are free or evictable (load_options.kv_budget_bytes)");
    std::vector<group> groups(entries.size());
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const input& s = entries[e];
      groups[e] = {s.seq->id_, s.tokens, s.seq->length(),
                   s.tokens.empty() ? 0
                   : s.all_logits   ? s.logits_from
                                    : s.tokens.size() - 1};
      const auto r = kv_->append(s.seq->id_, s.tokens);
      if (!r) throw std::logic_error("llama::forward: a KV append failed after its blocks were counted");
    }
    std::vector<float> logits = run(groups, out_rows, threads);
    for (const input& s : entries) kv_->commit(s.seq->id_);
    return logits;
  }

  /// @brief Runs a frugal::scheduler step on this model: the scheduler has appended the entries' tokens to
  /// this model's kv() and commits them when the step completes. Returns the logits of the entries whose
  /// `logits` is set, in entry order, as scheduler::complete takes them.
  std::vector<float> run_step(const frugal::step& st, q::executor* threads = nullptr) {
    std::vector<group> groups(st.size());
    std::size_t out_rows = 0;
    for (std::size_t e = 0; e < st.size(); ++e) {
      const frugal::step_entry& s = st[e];
      for (std::size_t i = 0; i < s.tokens.size(); ++i)
        if (s.tokens[i] < 0 || static_cast<std::size_t>(s.tokens[i]) >= cfg_.vocab)
          throw std::out_of_range("llama::run_step: entries[" + std::to_string(e) + "].tokens[" +
                                  std::to_string(i) + "] = " + std::to_string(s.tokens[i]) +
                                  " is not a token id (vocabulary of " + std::to_string(cfg_.vocab) + ")");
      if (s.first_position + s.tokens.size() > cfg_.context)
        throw std::length_error("llama::run_step: entries[" + std::to_string(e) +
                                "] runs past the context length " + std::to_string(cfg_.context) +
                                " (llama.context_length)");
      groups[e] = {s.kv, s.tokens, s.first_position, s.logits ? s.tokens.size() - 1 : s.tokens.size()};
      out_rows += s.logits && !s.tokens.empty() ? 1 : 0;
    }
    return run(groups, out_rows, threads);
  }

 private:
  // One sequence's rows in a packed step: tokens at positions first, first + 1, ... (already appended to the
  // KV cache), logits for the tokens from logits_from on (tokens.size(): none).
  struct group {
    frugal::kv_sequence_id kv{};
    std::span<const std::int32_t> tokens;
    std::size_t first = 0;
    std::size_t logits_from = 0;
  };

  std::vector<float> run(std::span<const group> entries, std::size_t out_rows, q::executor* threads) {
    const config& c = cfg_;
    std::size_t t = 0;
    for (const group& g : entries) t += g.tokens.size();
    // The residual stream, one row per token, and each row's position.
    std::vector<float> x(t * c.hidden), h(t * c.hidden);
    std::vector<std::size_t> pos(t);
    {
      std::size_t r = 0;
      for (const group& s : entries)
        for (std::size_t i = 0; i < s.tokens.size(); ++i, ++r) {
          frugal::gguf::dequantize_rows(*embd_, static_cast<std::uint64_t>(s.tokens[i]), 1,
                                        std::span<float>(x.data() + r * c.hidden, c.hidden));
          pos[r] = s.first + i;
        }
    }
    // cos and sin of every row's angles, once for all layers.
    const std::size_t half = c.rope_dims / 2;
    std::vector<float> rc(t * half), rs(t * half);
    for (std::size_t r = 0; r < t; ++r)
      for (std::size_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(pos[r]) * inv_freq_[i];
        rc[r * half + i] = static_cast<float>(std::cos(a));
        rs[r * half + i] = static_cast<float>(std::sin(a));
      }

    const std::size_t qkv_w = c.q_dim() + 2 * c.kv_dim();
    std::vector<float> qkv(t * qkv_w), qs(t * c.q_dim()), att(t * c.q_dim()), gu(t * 2 * c.ffn),
        act(t * c.ffn), y(t * c.hidden);
    std::size_t longest = 0;
    for (const group& s : entries) longest = std::max(longest, s.tokens.size());
    std::vector<float> ks(longest * c.kv_dim()), vs(longest * c.kv_dim());
    for (std::size_t l = 0; l < c.layers; ++l) {
      const layer& L = layers_[l];
      rms_norm(x.data(), t, L.attn_norm.data(), h.data());
      L.qkv.forward(h.data(), t, qkv.data(), threads);
      for (std::size_t r = 0; r < t; ++r) {
        float* row = qkv.data() + r * qkv_w;
        for (std::size_t hd = 0; hd < c.heads + c.kv_heads; ++hd)
          rope(row + hd * c.head_dim, rc.data() + r * half, rs.data() + r * half);
      }
      // K and V into each sequence's blocks, then attention over them.
      {
        std::size_t r0 = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const std::size_t n = entries[e].tokens.size();
          for (std::size_t i = 0; i < n; ++i) {
            const float* row = qkv.data() + (r0 + i) * qkv_w;
            std::memcpy(qs.data() + (r0 + i) * c.q_dim(), row, c.q_dim() * sizeof(float));
            std::memcpy(ks.data() + i * c.kv_dim(), row + c.q_dim(), c.kv_dim() * sizeof(float));
            std::memcpy(vs.data() + i * c.kv_dim(), row + c.q_dim() + c.kv_dim(), c.kv_dim() * sizeof(float));
          }
          kv_->write(entries[e].kv, l, entries[e].first, std::span<const float>(ks.data(), n * c.kv_dim()),
                     std::span<const float>(vs.data(), n * c.kv_dim()));
          r0 += n;
        }
      }
      attend(entries, l, qs.data(), att.data(), threads);
      L.o.forward(att.data(), t, y.data(), threads);
      for (std::size_t i = 0; i < t * c.hidden; ++i) x[i] += y[i];

      rms_norm(x.data(), t, L.ffn_norm.data(), h.data());
      L.gate_up.forward(h.data(), t, gu.data(), threads);
      for (std::size_t r = 0; r < t; ++r) {
        const float* g = gu.data() + r * 2 * c.ffn;
        const float* u = g + c.ffn;
        float* a = act.data() + r * c.ffn;
        for (std::size_t i = 0; i < c.ffn; ++i) a[i] = g[i] / (1.0f + detail::fast_exp(-g[i])) * u[i];
      }
      L.down.forward(act.data(), t, y.data(), threads);
      for (std::size_t i = 0; i < t * c.hidden; ++i) x[i] += y[i];
    }
    // Only the rows whose logits were asked for go through the output norm and projection.
    std::vector<float> sel(out_rows * c.hidden);
    {
      std::size_t r = 0, o = 0;
      for (const group& s : entries) {
        const std::size_t n = s.tokens.size();
        if (n != 0) {
          for (std::size_t i = s.logits_from; i < n; ++i, ++o)
            std::memcpy(sel.data() + o * c.hidden, x.data() + (r + i) * c.hidden, c.hidden * sizeof(float));
        }
        r += n;
      }
    }
    rms_norm(sel.data(), out_rows, out_norm_.data(), sel.data());
    std::vector<float> logits(out_rows * c.vocab);
    output_.forward(sel.data(), out_rows, logits.data(), threads);
    return logits;
  }

  struct layer {
    std::vector<float> attn_norm, ffn_norm;
    linear qkv, o, gate_up, down;
  };

  model() = default;

  const frugal::gguf::tensor_info* find(const std::string& name) const {
    for (const auto& t : file_->tensors())
      if (t.name == name) return &t;
    return nullptr;
  }

  void rms_norm(const float* x, std::size_t t, const float* w, float* out) const {
    const std::size_t d = cfg_.hidden;
    for (std::size_t r = 0; r < t; ++r) {
      const float* xr = x + r * d;
      float ss = 0.0f;
      for (std::size_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const float scale = 1.0f / std::sqrt(ss / static_cast<float>(d) + cfg_.rms_eps);
      float* o = out + r * d;
      for (std::size_t i = 0; i < d; ++i) o[i] = xr[i] * scale * w[i];
    }
  }

  // llama.cpp's "normal" RoPE: adjacent pairs (x[2i], x[2i+1]) rotate together (the GGUF converter permutes Q
  // and K so that this equals the checkpoint's rotation of halves).
  void rope(float* v, const float* cs, const float* sn) const {
    for (std::size_t i = 0; i < cfg_.rope_dims / 2; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }

  // Causal GQA attention of every entry's new rows over its sequence's blocks (frugal::kv_attention: a row's
  // bits depend only on its query, its position and the K/V before it, so a prompt prefilled at once and fed
  // token by token give the same logits). A prefill splits its heads over the threads; a decode step's
  // attention is too little work to hand to another thread.
  void attend(std::span<const group> entries, std::size_t l, const float* q, float* att,
              q::executor* threads) const {
    const config& c = cfg_;
    std::size_t work = 0;
    for (const group& s : entries) work += s.tokens.size() * (s.first + s.tokens.size());
    const std::size_t splits =
        threads && work * c.hidden >= (std::size_t{1} << 20) ? std::min(threads->concurrency(), c.heads) : 1;
    const auto task = [&](std::size_t i) {
      const std::size_t e = i / splits, part = i % splits;
      std::size_t r0 = 0;
      for (std::size_t f = 0; f < e; ++f) r0 += entries[f].tokens.size();
      const std::size_t n = entries[e].tokens.size();
      if (n == 0) return;
      frugal::kv_attention(*kv_, entries[e].kv, l, entries[e].first,
                           std::span<const float>(q + r0 * c.q_dim(), n * c.q_dim()),
                           std::span<float>(att + r0 * c.q_dim(), n * c.q_dim()),
                           {.heads = c.heads,
                            .head_begin = c.heads * part / splits,
                            .head_end = c.heads * (part + 1) / splits});
    };
    const std::size_t tasks = entries.size() * splits;
    if (splits > 1)
      threads->parallel_for(tasks, task);
    else
      for (std::size_t i = 0; i < tasks; ++i) task(i);
  }

  std::unique_ptr<frugal::gguf::file> file_;
  config cfg_;
  load_options opt_;
  std::unique_ptr<frugal::bpe::tokenizer> tokenizer_;
  std::unique_ptr<frugal::chat::chat_template> template_;
  const frugal::gguf::tensor_info* embd_ = nullptr;
  std::vector<layer> layers_;
  std::vector<float> out_norm_;
  linear output_;
  std::vector<double> inv_freq_;
  std::unique_ptr<frugal::kv_cache> kv_;
  frugal::kv_salt salt_;
};

/// @brief llama-perplexity's method over @p tokens: chunks of @p ctx tokens (the first @p chunks of them,
/// all when 0), each from an empty sequence, its first token replaced by @p first_token when given; the
/// tokens of each chunk's second half are scored. Returns each chunk's sum of negative log-likelihoods
/// (perplexity = exp(sum of all / (chunks * (ctx - 1 - ctx / 2)))).
inline std::vector<double> chunk_nll(model& m, std::span<const std::int32_t> tokens, std::size_t ctx,
                                     std::size_t chunks = 0, q::executor* threads = nullptr,
                                     std::optional<std::int32_t> first_token = std::nullopt) {
  if (ctx < 2 || ctx > m.cfg().context)
    throw std::invalid_argument("llama::chunk_nll: ctx " + std::to_string(ctx) + " is not in [2, " +
                                std::to_string(m.cfg().context) + "]");
  const std::size_t have = tokens.size() / ctx;
  if (chunks == 0) chunks = have;
  if (chunks == 0 || chunks > have)
    throw std::invalid_argument("llama::chunk_nll: " + std::to_string(tokens.size()) + " tokens hold " +
                                std::to_string(have) + " chunks of " + std::to_string(ctx) + ", not " +
                                std::to_string(chunks));
  const std::size_t v = m.cfg().vocab, first = ctx / 2;
  std::vector<double> out;
  std::vector<std::int32_t> chunk(ctx);
  for (std::size_t c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(c * ctx), ctx, chunk.begin());
    if (first_token) chunk[0] = *first_token;
    sequence s = m.open();
    const input e{.seq = &s, .tokens = chunk, .all_logits = true, .logits_from = first};
    const std::vector<float> l = m.forward(std::span(&e, 1), threads);
    double sum = 0.0;
    for (std::size_t i = first; i + 1 < ctx; ++i) {
      const float* row = l.data() + (i - first) * v;
      const double mx = *std::max_element(row, row + v);
      double z = 0.0;
      for (std::size_t t = 0; t < v; ++t) z += std::exp(static_cast<double>(row[t]) - mx);
      sum += std::log(z) + mx - row[chunk[i + 1]];
    }
    out.push_back(sum);
  }
  return out;
}

}  // namespace llama
