#pragma once

// A BERT-family sentence encoder (all-MiniLM-L6-v2 and any checkpoint of the same layout), loaded from
// a model directory (config.json, model.safetensors, vocab.txt) and run on the CPU with frugal's parts:
//   fp32        Eigen GEMMs
//   fp16, bf16  weights stored in 16 bits, widened per call by frugal::quant::convert
//   int8        W8A8 on frugal's int8 kernels: per-channel weights, per-token dynamic activations, and
//               SmoothQuant factors calibrated on sentences the caller gives (disjoint from any test set);
//               int8-per-channel and int8-per-tensor drop the smoothing (and the per-channel scales);
//               int8-7bit is int8 with 7-bit activations (quantize_rows' reduce_range), the exact
//               vpmaddubsw kernel on AVX2 CPUs without VNNI, at the cost of one bit of activation precision
//   int4        groupwise asymmetric int4 weights (g128, uint8 zero points), widened per call
// Attention, softmax, LayerNorm and pooling stay fp32 in every precision.
// With load_options.device (linear_device.hpp; bert_cuda.hpp's make_cuda_linear_device() on a CUDA build),
// the int8 and fp16/bf16 linear layers run on that device through frugal::cuda: their weights are uploaded
// once, and each call sends the layer's input and gets fp32 back. fp32 and int4 layers stay on the CPU.
//
// This is example code, meant to be copied or linked: the library gives it the tokenizer, the
// safetensors reader and the kernels; the model's structure lives here.
//
// Batches are packed, not padded: the sequences' tokens are stacked into one (T x hidden) matrix for
// every linear layer, and attention runs per sequence on its own rows. The attention mask is thus the
// block structure itself, and no FLOP is spent on padding.
// frugal before Eigen (see frugal/quant/detail/eigen.hpp): with -march=native on an AVX-512 machine, GCC 12
// reports false "uninitialized" warnings inside its own AVX-512 intrinsics that Eigen inlines (GCC bug
// 105593).
#include <frugal/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <frugal/model/safetensors.hpp>
#include <frugal/model/wordpiece.hpp>
#include <frugal/quant.hpp>

#include "linear_device.hpp"

namespace bert {

namespace q = frugal::quant;
using matrix = q::row_matrix;

/// @brief The weight formats of the encoder's linear layers.
enum class precision { fp32, fp16, bf16, int8, int8_per_channel, int8_per_tensor, int8_7bit, int4 };

inline constexpr const char* to_string(precision p) noexcept {
  switch (p) {
    case precision::fp32:
      return "fp32";
    case precision::fp16:
      return "fp16";
    case precision::bf16:
      return "bf16";
    case precision::int8:
      return "int8";
    case precision::int8_per_channel:
      return "int8-per-channel";
    case precision::int8_per_tensor:
      return "int8-per-tensor";
    case precision::int8_7bit:
      return "int8-7bit";
    case precision::int4:
      return "int4";
  }
  return "?";
}

/// @brief Parses a precision name; throws naming the value and the accepted names.
inline precision parse_precision(const std::string& s) {
  for (precision p :
       {precision::fp32, precision::fp16, precision::bf16, precision::int8, precision::int8_per_channel,
        precision::int8_per_tensor, precision::int8_7bit, precision::int4})
    if (s == to_string(p)) return p;
  throw std::invalid_argument(
      "precision \"" + s +
      "\" is not one of fp32, fp16, bf16, int8, int8-per-channel, int8-per-tensor, int8-7bit, int4");
}

/// @brief Whether the precision smooths its layers with SmoothQuant, and so needs calibration sentences.
inline constexpr bool needs_calibration(precision p) noexcept {
  return p == precision::int8 || p == precision::int8_7bit;
}

/// @brief The shapes of a BERT checkpoint, from its config.json.
struct config {
  std::size_t hidden = 0, layers = 0, heads = 0, intermediate = 0, vocab = 0, max_positions = 0,
              type_vocab = 0;
  float layer_norm_eps = 1e-12f;

  /// @brief Reads and checks @p path; every missing or wrong field throws naming the file and the field.
  static config load(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("bert: cannot open " + path);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw std::runtime_error("bert: " + path + " is not a JSON object");
    const auto size = [&](const char* key) {
      const auto it = j.find(key);
      if (it == j.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() == 0 ||
          it->get<std::uint64_t>() > (1u << 20))
        throw std::runtime_error("bert: " + path + ": \"" + key + "\" must be an integer in 1 .. 2^20");
      return static_cast<std::size_t>(it->get<std::uint64_t>());
    };
    config c;
    c.hidden = size("hidden_size");
    c.layers = size("num_hidden_layers");
    c.heads = size("num_attention_heads");
    c.intermediate = size("intermediate_size");
    c.vocab = size("vocab_size");
    c.max_positions = size("max_position_embeddings");
    c.type_vocab = size("type_vocab_size");
    if (c.hidden % c.heads != 0)
      throw std::runtime_error("bert: " + path + ": hidden_size " + std::to_string(c.hidden) +
                               " is not a multiple of num_attention_heads " + std::to_string(c.heads));
    if (const auto it = j.find("layer_norm_eps"); it != j.end()) {
      if (!it->is_number() || !(it->get<double>() > 0) || !(it->get<double>() < 1))
        throw std::runtime_error("bert: " + path + ": \"layer_norm_eps\" must be a number in (0, 1)");
      c.layer_norm_eps = it->get<float>();
    }
    if (const auto it = j.find("hidden_act"); it != j.end() && *it != "gelu")
      throw std::runtime_error("bert: " + path + ": hidden_act " + it->dump() +
                               " is not supported (only \"gelu\", the exact erf form)");
    if (const auto it = j.find("position_embedding_type"); it != j.end() && *it != "absolute")
      throw std::runtime_error("bert: " + path + ": position_embedding_type " + it->dump() +
                               " is not supported (only \"absolute\")");
    return c;
  }
};

/// @brief One linear layer, y = x W^T + b with W (N x K), in one of the precisions.
class linear {
 public:
  linear() = default;
  linear(matrix w, std::vector<float> bias)
      : n_(static_cast<std::size_t>(w.rows())),
        k_(static_cast<std::size_t>(w.cols())),
        bias_(std::move(bias)),
        w32_(std::move(w)) {}

  std::size_t rows() const noexcept { return n_; }
  std::size_t cols() const noexcept { return k_; }
  const matrix& fp32_weights() const noexcept { return w32_; }

  /// @brief Converts the fp32 weights to @p p. @p act_absmax (K entries, max |x_j| over calibration)
  /// is needed by precision::int8 (SmoothQuant, with @p alpha); the fp32 copy is released.
  void convert(precision p, std::span<const float> act_absmax = {}, float alpha = 0.5f) {
    p_ = p;
    switch (p) {
      case precision::fp32:
        return;
      case precision::fp16:
      case precision::bf16: {
        w16_.resize(n_ * k_);
        to_16bit(std::span<const float>(w32_.data(), n_ * k_), w16_);
        break;
      }
      case precision::int8:
      case precision::int8_7bit: {
        if (act_absmax.size() != k_)
          throw std::invalid_argument("bert: int8 (SmoothQuant) needs calibration statistics for " +
                                      std::to_string(k_) + " input channels, got " +
                                      std::to_string(act_absmax.size()));
        const q::smoothquant_result r = q::smoothquant(w32_, act_absmax, alpha);
        inv_smooth_.resize(k_);
        for (std::size_t j = 0; j < k_; ++j) inv_smooth_[j] = 1.0f / r.factors[j];
        w8_ = q::quantize_weights_per_channel(r.weights);
        break;
      }
      case precision::int8_per_channel:
        w8_ = q::quantize_weights_per_channel(w32_);
        break;
      case precision::int8_per_tensor: {
        const float amax = w32_.cwiseAbs().maxCoeff();
        const float scale = amax > 0 ? amax / 127.0f : 1.0f;
        std::vector<std::int8_t> d(n_ * k_);
        for (std::size_t i = 0; i < d.size(); ++i)
          d[i] =
              static_cast<std::int8_t>(std::clamp(std::nearbyint(w32_.data()[i] / scale), -127.0f, 127.0f));
        w8_ = q::make_quantized_weights(d, n_, k_, std::vector<float>(n_, scale));
        break;
      }
      case precision::int4:
        w4_ = q::quantize_int4(
            w32_, q::int4_options{.group_size = 128,
                                  .symmetric = false});  // asymmetric: 0.944 mean cosine, not 0.922
        break;
    }
    w32_ = matrix();
  }

  /// @brief Runs this layer's GEMM on @p device from now on (int8 and fp16/bf16 layers; the others stay on
  /// the CPU and this returns false). The weights are uploaded once here.
  bool place(std::shared_ptr<linear_device> device) {
    switch (p_) {
      case precision::int8:
      case precision::int8_per_channel:
      case precision::int8_per_tensor:
      case precision::int8_7bit:
        device_layer_ = device->upload_int8(w8_, bias_);
        break;
      case precision::fp16:
      case precision::bf16:
        device_layer_ = device->upload_16bit(w16_, p_ == precision::bf16, bias_, n_, k_);
        break;
      default:
        return false;
    }
    device_ = std::move(device);
    return true;
  }

  /// @brief Bytes of stored weights (the precision's own format, with its scales) and bias.
  std::size_t weight_bytes() const noexcept {
    std::size_t b = bias_.size() * sizeof(float);
    switch (p_) {
      case precision::fp32:
        return b + n_ * k_ * sizeof(float);
      case precision::fp16:
      case precision::bf16:
        return b + w16_.size() * 2;
      case precision::int8:
      case precision::int8_per_channel:
      case precision::int8_per_tensor:
      case precision::int8_7bit:
        return b + w8_.memory_bytes() + inv_smooth_.size() * sizeof(float);
      case precision::int4:
        return b + w4_.memory_bytes();
    }
    return b;
  }

  /// @brief y (resized to T x N) = act(x W^T + b), x is T x K.
  void forward(const matrix& x, matrix& y, q::activation_kind act = q::activation_kind::none) const {
    const std::size_t t = static_cast<std::size_t>(x.rows());
    y.resize(x.rows(), static_cast<Eigen::Index>(n_));
    if (t == 0) return;
    switch (p_) {
      case precision::int8:
      case precision::int8_per_channel:
      case precision::int8_per_tensor:
      case precision::int8_7bit: {
        q::quantized_activations a;
        const q::quantize_rows_options qo{.reduce_range = p_ == precision::int8_7bit};
        if (inv_smooth_.empty()) {
          a = q::quantize_rows(x, qo);
        } else {
          // One pass: X times the inverse smoothing factors, column by column, into a new matrix.
          const matrix xs = (x.array().rowwise() * Eigen::Map<const Eigen::ArrayXf>(
                                                       inv_smooth_.data(), static_cast<Eigen::Index>(k_))
                                                       .transpose())
                                .matrix();
          a = q::quantize_rows(xs, qo);
        }
        if (device_) {
          device_->forward_int8(device_layer_, a.data, a.scales, t, std::span<float>(y.data(), t * n_));
          if (act != q::activation_kind::none) q::apply_activation(std::span<float>(y.data(), t * n_), act);
          return;
        }
        q::gemm_w8a8(a, w8_, std::span<float>(y.data(), t * n_),
                     q::gemm_options{.bias = bias_, .activation = act});
        return;
      }
      case precision::fp32:
        y.noalias() = x * w32_.transpose();
        break;
      default: {
        if (device_) {  // fp16 or bf16 (place() keeps no other precision)
          std::vector<std::uint16_t> x16(t * k_);
          to_16bit(std::span<const float>(x.data(), t * k_), x16);
          device_->forward_16bit(device_layer_, x16, t, std::span<float>(y.data(), t * n_));
          if (act != q::activation_kind::none) q::apply_activation(std::span<float>(y.data(), t * n_), act);
          return;
        }
        const matrix w = widened();
        y.noalias() = x * w.transpose();
        break;
      }
    }
    y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias_.data(), static_cast<Eigen::Index>(n_));
    if (act != q::activation_kind::none) q::apply_activation(std::span<float>(y.data(), t * n_), act);
  }

 private:
  // fp32 to this layer's 16-bit format (fp16 or bf16), as bit patterns.
  void to_16bit(std::span<const float> src, std::span<std::uint16_t> dst) const {
    if (p_ == precision::fp16)
      q::convert(src, std::span<q::half>(reinterpret_cast<q::half*>(dst.data()), dst.size()));
    else
      q::convert(src, std::span<q::bfloat16>(reinterpret_cast<q::bfloat16*>(dst.data()), dst.size()));
  }

  matrix widened() const {
    if (p_ == precision::int4) return q::dequantize(w4_);
    matrix w(static_cast<Eigen::Index>(n_), static_cast<Eigen::Index>(k_));
    const std::span<float> dst(w.data(), n_ * k_);
    if (p_ == precision::fp16)
      q::convert(std::span<const q::half>(reinterpret_cast<const q::half*>(w16_.data()), w16_.size()), dst);
    else
      q::convert(std::span<const q::bfloat16>(reinterpret_cast<const q::bfloat16*>(w16_.data()), w16_.size()),
                 dst);
    return w;
  }

  precision p_ = precision::fp32;
  std::size_t n_ = 0, k_ = 0;
  std::vector<float> bias_;
  matrix w32_;
  std::vector<std::uint16_t> w16_;
  q::quantized_weights w8_;
  std::vector<float> inv_smooth_;
  q::int4_weights w4_;
  std::shared_ptr<linear_device> device_;
  std::size_t device_layer_ = 0;
};

/// @brief Options of encoder::load.
struct load_options {
  precision weights = precision::fp32;
  /// Sentences for SmoothQuant's activation statistics (precision::int8 only; required there). Keep them
  /// disjoint from whatever you measure accuracy on.
  std::vector<std::string> calibration = {};
  float smoothquant_alpha = 0.5f;
  /// Threads of encode(): a batch's sequences are split into this many groups of about equal tokens.
  std::size_t threads = 1;
  /// Where the int8 and fp16/bf16 linear layers run (null: the CPU); e.g. make_cuda_linear_device().
  std::shared_ptr<linear_device> device = nullptr;
};

/// @brief Per-linear statistics of the encoder's inputs, gathered by a calibration pass.
struct activation_stats {
  std::vector<std::vector<float>> absmax;  // [layer * 4 + slot] -> K maxima; slots: qkv, out, ffn_in, ffn_out
  void observe(std::size_t idx, const matrix& x) {
    if (absmax.size() <= idx) absmax.resize(idx + 1);
    auto& m = absmax[idx];
    if (m.empty()) m.assign(static_cast<std::size_t>(x.cols()), 0.0f);
    const Eigen::RowVectorXf c = x.cwiseAbs().colwise().maxCoeff();
    for (Eigen::Index j = 0; j < c.size(); ++j)
      m[static_cast<std::size_t>(j)] = std::max(m[static_cast<std::size_t>(j)], c[j]);
  }
};

/// @brief The encoder: token ids in, L2-normalised mean-pooled embeddings out.
class encoder {
 public:
  /// @brief Loads @p dir (config.json, model.safetensors, vocab.txt); shapes come from config.json and
  /// every tensor is checked against them. Errors name the file and the tensor.
  static encoder load(const std::string& dir, const load_options& opt = {}) {
    if (opt.threads == 0 || opt.threads > 256)
      throw std::invalid_argument("bert: load_options.threads must be in 1 .. 256, not " +
                                  std::to_string(opt.threads));
    encoder e;
    e.cfg_ = config::load(dir + "/config.json");
    e.threads_ = opt.threads;
    e.tokenizer_ = std::make_unique<frugal::wordpiece::tokenizer>(
        dir + "/vocab.txt",
        frugal::wordpiece::options{.max_length = std::min<std::size_t>(256, e.cfg_.max_positions)});
    {
      const frugal::safetensors::file f(dir + "/model.safetensors");
      e.load_weights(f);
    }  // unmapped here: what stays resident is the converted weights
    if (needs_calibration(opt.weights)) {
      if (opt.calibration.empty())
        throw std::invalid_argument(std::string("bert: precision ") + to_string(opt.weights) +
                                    " (SmoothQuant) needs load_options.calibration sentences");
      activation_stats st;
      std::vector<std::vector<std::int32_t>> ids;
      for (const auto& s : opt.calibration) ids.push_back(e.tokenize(s));
      for (std::size_t i = 0; i < ids.size(); i += 32) {
        const std::size_t n = std::min<std::size_t>(32, ids.size() - i);
        e.run(std::span<const std::vector<std::int32_t>>(ids.data() + i, n), &st);
      }
      e.convert(opt.weights, &st, opt.smoothquant_alpha);
    } else {
      e.convert(opt.weights, nullptr, opt.smoothquant_alpha);
    }
    e.precision_ = opt.weights;
    if (opt.device) {
      for (auto& l : e.layers_)
        for (linear* ls : {&l.qkv, &l.out, &l.ffn_in, &l.ffn_out})
          if (ls->place(opt.device)) e.device_ = opt.device;
    }
    return e;
  }

  const config& shapes() const noexcept { return cfg_; }
  /// @brief The device the linear layers run on; null when they run on the CPU (also when the precision has
  /// no device path: fp32, int4).
  const linear_device* device() const noexcept { return device_.get(); }
  precision weights() const noexcept { return precision_; }
  std::size_t dimension() const noexcept { return cfg_.hidden; }
  const frugal::wordpiece::tokenizer& tokenizer() const noexcept { return *tokenizer_; }
  std::vector<std::int32_t> tokenize(std::string_view text) const { return tokenizer_->encode(text); }

  /// @brief Bytes of the linear layers' weights in their stored precision.
  std::size_t linear_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& l : layers_)
      b += l.qkv.weight_bytes() + l.out.weight_bytes() + l.ffn_in.weight_bytes() + l.ffn_out.weight_bytes();
    return b;
  }
  /// @brief Bytes of the embedding tables and LayerNorms (fp32 in every precision).
  std::size_t other_bytes() const noexcept {
    std::size_t b = static_cast<std::size_t>(word_.size() + position_.size() + type_.size()) * sizeof(float);
    b += (emb_ln_g_.size() + emb_ln_b_.size()) * sizeof(float);
    for (const auto& l : layers_) b += (l.ln1_g.size() * 4) * sizeof(float);
    return b;
  }

  /// @brief Embeds a batch of token sequences (each from tokenize(): [CLS] ... [SEP], at most the
  /// maximum length); out[i] has dimension() floats with unit L2 norm.
  std::vector<std::vector<float>> encode(std::span<const std::vector<std::int32_t>> batch) const {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].empty() || batch[i].size() > cfg_.max_positions)
        throw std::invalid_argument("bert: sequence " + std::to_string(i) + " has " +
                                    std::to_string(batch[i].size()) + " tokens, not 1 .. " +
                                    std::to_string(cfg_.max_positions));
      for (const std::int32_t id : batch[i])
        if (id < 0 || static_cast<std::size_t>(id) >= cfg_.vocab)
          throw std::invalid_argument("bert: sequence " + std::to_string(i) + " has token id " +
                                      std::to_string(id) + " outside the vocabulary of " +
                                      std::to_string(cfg_.vocab));
    }
    const std::size_t groups = std::min(threads_, batch.size());
    if (groups <= 1) return run(batch, nullptr);
    // Contiguous groups of about equal token counts, one thread each.
    std::size_t total = 0;
    for (const auto& s : batch) total += s.size();
    std::vector<std::size_t> cut{0};
    std::size_t acc = 0;
    for (std::size_t i = 0; i < batch.size() && cut.size() < groups; ++i) {
      acc += batch[i].size();
      if (acc * groups >= total * cut.size()) cut.push_back(i + 1);
    }
    if (cut.back() != batch.size()) cut.push_back(batch.size());
    std::vector<std::vector<std::vector<float>>> parts(cut.size() - 1);
    std::vector<std::exception_ptr> errors(parts.size());
    {
      std::vector<std::jthread> pool;
      for (std::size_t g = 1; g < parts.size(); ++g)
        pool.emplace_back([&, g] {
          try {
            parts[g] = run(batch.subspan(cut[g], cut[g + 1] - cut[g]), nullptr);
          } catch (...) {
            errors[g] = std::current_exception();
          }
        });
      try {
        parts[0] = run(batch.subspan(0, cut[1]), nullptr);
      } catch (...) {
        errors[0] = std::current_exception();
      }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    std::vector<std::vector<float>> out;
    out.reserve(batch.size());
    for (auto& p : parts)
      for (auto& v : p) out.push_back(std::move(v));
    return out;
  }

  /// @brief Tokenizes and embeds @p texts.
  std::vector<std::vector<float>> encode_texts(std::span<const std::string> texts) const {
    std::vector<std::vector<std::int32_t>> ids;
    ids.reserve(texts.size());
    for (const auto& t : texts) ids.push_back(tokenize(t));
    return encode(ids);
  }

 private:
  struct layer {
    linear qkv, out, ffn_in, ffn_out;
    std::vector<float> ln1_g, ln1_b, ln2_g, ln2_b;
  };

  void load_weights(const frugal::safetensors::file& f) {
    // Plain BertModel checkpoints name tensors "embeddings...."; BertFor* ones prefix "bert.".
    const std::string pre = f.contains("embeddings.word_embeddings.weight") ? "" : "bert.";
    const std::size_t h = cfg_.hidden, ff = cfg_.intermediate;
    const auto vec = [&](const std::string& n, std::size_t len) { return f.floats(pre + n, {len}); };
    const auto mat = [&](const std::string& n, std::size_t r, std::size_t c) {
      const std::vector<float> v = f.floats(pre + n, {r, c});
      return matrix(
          Eigen::Map<const matrix>(v.data(), static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)));
    };
    word_ = mat("embeddings.word_embeddings.weight", cfg_.vocab, h);
    position_ = mat("embeddings.position_embeddings.weight", cfg_.max_positions, h);
    type_ = mat("embeddings.token_type_embeddings.weight", cfg_.type_vocab, h);
    emb_ln_g_ = vec("embeddings.LayerNorm.weight", h);
    emb_ln_b_ = vec("embeddings.LayerNorm.bias", h);
    layers_.resize(cfg_.layers);
    for (std::size_t i = 0; i < cfg_.layers; ++i) {
      const std::string p = "encoder.layer." + std::to_string(i) + ".";
      layer& L = layers_[i];
      matrix qkv(static_cast<Eigen::Index>(3 * h), static_cast<Eigen::Index>(h));
      std::vector<float> qkv_b;
      const char* names[] = {"query", "key", "value"};
      for (int k = 0; k < 3; ++k) {
        qkv.middleRows(static_cast<Eigen::Index>(k * h), static_cast<Eigen::Index>(h)) =
            mat(p + "attention.self." + names[k] + ".weight", h, h);
        const auto b = vec(p + "attention.self." + names[k] + ".bias", h);
        qkv_b.insert(qkv_b.end(), b.begin(), b.end());
      }
      L.qkv = linear(std::move(qkv), std::move(qkv_b));
      L.out =
          linear(mat(p + "attention.output.dense.weight", h, h), vec(p + "attention.output.dense.bias", h));
      L.ln1_g = vec(p + "attention.output.LayerNorm.weight", h);
      L.ln1_b = vec(p + "attention.output.LayerNorm.bias", h);
      L.ffn_in = linear(mat(p + "intermediate.dense.weight", ff, h), vec(p + "intermediate.dense.bias", ff));
      L.ffn_out = linear(mat(p + "output.dense.weight", h, ff), vec(p + "output.dense.bias", h));
      L.ln2_g = vec(p + "output.LayerNorm.weight", h);
      L.ln2_b = vec(p + "output.LayerNorm.bias", h);
    }
  }

  void convert(precision p, const activation_stats* st, float alpha) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      linear* ls[] = {&layers_[i].qkv, &layers_[i].out, &layers_[i].ffn_in, &layers_[i].ffn_out};
      for (std::size_t s = 0; s < 4; ++s)
        ls[s]->convert(p, st ? std::span<const float>(st->absmax.at(i * 4 + s)) : std::span<const float>{},
                       alpha);
    }
  }

  void layer_norm(matrix& x, const std::vector<float>& g, const std::vector<float>& b) const {
    const Eigen::Map<const Eigen::RowVectorXf> gm(g.data(), static_cast<Eigen::Index>(g.size()));
    const Eigen::Map<const Eigen::RowVectorXf> bm(b.data(), static_cast<Eigen::Index>(b.size()));
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      auto row = x.row(r);
      const float mean = row.mean();
      row.array() -= mean;
      const float var = row.squaredNorm() / static_cast<float>(row.size());
      row *= 1.0f / std::sqrt(var + cfg_.layer_norm_eps);
      row = row.cwiseProduct(gm) + bm;
    }
  }

  // The forward pass of one packed group; with `st`, records every linear layer's input statistics.
  std::vector<std::vector<float>> run(std::span<const std::vector<std::int32_t>> batch,
                                      activation_stats* st) const {
    const std::size_t h = cfg_.hidden, heads = cfg_.heads, d = h / heads;
    std::size_t total = 0;
    for (const auto& s : batch) total += s.size();
    const auto T = static_cast<Eigen::Index>(total);
    matrix x(T, static_cast<Eigen::Index>(h));
    {
      Eigen::Index r = 0;
      for (const auto& s : batch)
        for (std::size_t p = 0; p < s.size(); ++p, ++r)
          x.row(r) = word_.row(s[p]) + position_.row(static_cast<Eigen::Index>(p)) + type_.row(0);
    }
    layer_norm(x, emb_ln_g_, emb_ln_b_);
    matrix qkv, ctx(T, static_cast<Eigen::Index>(h)), y, f, scores;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const layer& L = layers_[li];
      if (st) st->observe(li * 4 + 0, x);
      L.qkv.forward(x, qkv);
      Eigen::Index o = 0;
      for (const auto& s : batch) {
        const auto n = static_cast<Eigen::Index>(s.size());
        for (std::size_t hd = 0; hd < heads; ++hd) {
          const auto c = static_cast<Eigen::Index>(hd * d), dd = static_cast<Eigen::Index>(d),
                     hh = static_cast<Eigen::Index>(h);
          scores.noalias() = (qkv.block(o, c, n, dd) * scale) * qkv.block(o, hh + c, n, dd).transpose();
          for (Eigen::Index r = 0; r < n; ++r) {
            auto row = scores.row(r).array();
            row = (row - row.maxCoeff()).exp();
            row /= row.sum();
          }
          ctx.block(o, c, n, dd).noalias() = scores * qkv.block(o, 2 * hh + c, n, dd);
        }
        o += n;
      }
      if (st) st->observe(li * 4 + 1, ctx);
      L.out.forward(ctx, y);
      x += y;
      layer_norm(x, L.ln1_g, L.ln1_b);
      if (st) st->observe(li * 4 + 2, x);
      L.ffn_in.forward(x, f, q::activation_kind::gelu_erf);
      if (st) st->observe(li * 4 + 3, f);
      L.ffn_out.forward(f, y);
      x += y;
      layer_norm(x, L.ln2_g, L.ln2_b);
    }
    std::vector<std::vector<float>> out;
    out.reserve(batch.size());
    Eigen::Index o = 0;
    for (const auto& s : batch) {
      const auto n = static_cast<Eigen::Index>(s.size());
      Eigen::RowVectorXf m = x.middleRows(o, n).colwise().sum() / static_cast<float>(n);
      const float norm = m.norm();
      if (norm > 0) m /= norm;
      out.emplace_back(m.data(), m.data() + m.size());
      o += n;
    }
    return out;
  }

  config cfg_;
  precision precision_ = precision::fp32;
  std::size_t threads_ = 1;
  std::shared_ptr<linear_device> device_;
  std::unique_ptr<frugal::wordpiece::tokenizer> tokenizer_;
  matrix word_, position_, type_;
  std::vector<float> emb_ln_g_, emb_ln_b_;
  std::vector<layer> layers_;
};

/// @brief Cosine similarity of two equal-length vectors.
inline double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

}  // namespace bert
