#pragma once

// The demo's model: a stack of dense layers with GELU between them, weights drawn from a seed with
// the statistics of real transformer layers (Gaussian, plus a few input channels that carry outliers).
// It runs in fp32 on Eigen, or on frugal's int8 CPU kernels (W8A8, weight-only int8 and int4).
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <frugal/quant.hpp>

#include "gpu_backend.hpp"

namespace demo {

using matrix = frugal::quant::row_matrix;

/// @brief How the MLP's layers are served: the weight format and the kernels that run it. The encoder's
/// own precisions (examples/models/bert.hpp) are another set: fp16 and the int8 variants are its alone,
/// w8a16 is the MLP's alone.
enum class recipe { fp32, w8a8, w8a16, w4a16 };

inline recipe parse_recipe(const std::string& s) {
  if (s == "fp32") return recipe::fp32;
  if (s == "int8" || s == "w8a8") return recipe::w8a8;
  if (s == "w8a16" || s == "int8-weight-only") return recipe::w8a16;
  if (s == "w4a16" || s == "int4" || s == "int4-weight-only") return recipe::w4a16;
  throw std::invalid_argument("\"" + s + "\" is not one of fp32, int8 (w8a8), w8a16, w4a16");
}

inline const char* name(recipe p) {
  switch (p) {
    case recipe::fp32:
      return "fp32";
    case recipe::w8a8:
      return "int8 W8A8";
    case recipe::w8a16:
      return "int8 weight-only";
    case recipe::w4a16:
      return "int4 weight-only";
  }
  return "?";
}

struct model_config {
  std::vector<int> dims{1024, 4096, 1024, 4096, 1024};
  int outlier_channels = 4;  // input channels per layer with outlier_scale times the typical magnitude
  float outlier_scale = 3.0f;
  std::uint64_t seed = 42;
};

/// GELU in place. Eigen's array tanh is vectorised (AVX-512 under -march=native); the scalar std::tanh
/// per element it replaces cost about a fifth of a batched fp32 forward pass.
template <class Matrix>
void gelu_inplace(Matrix& x) {
  constexpr float k = frugal::quant::detail::gelu_tanh_scale;  // the tanh form that the kernels use
  constexpr float c = frugal::quant::detail::gelu_tanh_cubic;
  auto v = x.array();
  v = 0.5f * v * (1.0f + (k * (v + c * v.cube())).tanh());
}

/// Adds the bias to every row of x and, with `gelu`, applies GELU in the same pass (row-major x).
inline void bias_gelu_inplace(matrix& x, const std::vector<float>& bias, bool gelu) {
  constexpr float k = frugal::quant::detail::gelu_tanh_scale;  // the tanh form that the kernels use
  constexpr float c = frugal::quant::detail::gelu_tanh_cubic;
  const Eigen::Map<const Eigen::ArrayXf> b(bias.data(), static_cast<Eigen::Index>(bias.size()));
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    Eigen::Map<Eigen::ArrayXf> v(x.row(r).data(), x.cols());
    v += b;
    if (gelu) v = 0.5f * v * (1.0f + (k * (v + c * v.cube())).tanh());
  }
}

class mlp {
 public:
  mlp(const model_config& cfg, recipe p) : cfg_(cfg), recipe_(p) {
    if (cfg.dims.size() < 2) throw std::invalid_argument("config: model.dims needs at least two sizes");
    for (int d : cfg.dims)
      if (d <= 0 || d % 128 != 0)
        throw std::invalid_argument("config: model.dims entries must be positive multiples of 128, got " +
                                    std::to_string(d));
    std::mt19937_64 rng(cfg.seed);
    for (std::size_t l = 0; l + 1 < cfg.dims.size(); ++l) {
      const int in = cfg.dims[l], out = cfg.dims[l + 1];
      std::normal_distribution<float> n(0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
      matrix w(out, in);
      for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = n(rng);
      // Outlier input channels: a few columns an order of magnitude larger, as in LLM layers.
      std::uniform_int_distribution<int> pick(0, in - 1);
      for (int c = 0; c < cfg.outlier_channels; ++c) w.col(pick(rng)) *= cfg.outlier_scale;
      std::vector<float> bias(static_cast<std::size_t>(out));
      std::normal_distribution<float> nb(0.0f, 0.02f);
      for (auto& b : bias) b = nb(rng);
      layers_.push_back(make_layer(std::move(w), std::move(bias)));
    }
  }

  int input_dim() const { return cfg_.dims.front(); }
  int output_dim() const { return cfg_.dims.back(); }
  recipe kind() const { return recipe_; }

  /// Weight bytes as deployed in this recipe (with scales).
  std::size_t weight_bytes() const {
    std::size_t b = 0;
    for (const auto& l : layers_) {
      switch (recipe_) {
        case recipe::fp32:
          b += static_cast<std::size_t>(l.w.size()) * sizeof(float);
          break;
        case recipe::w8a8:
        case recipe::w8a16:
          b += l.w8.memory_bytes();
          break;
        case recipe::w4a16:
          b += l.w4.memory_bytes();
          break;
      }
    }
    return b;
  }

  /// The layers in the form the GPU backend uploads.
  std::vector<gpu_layer> export_layers() const {
    std::vector<gpu_layer> out;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer& L = layers_[l];
      gpu_layer g;
      g.in = cfg_.dims[l];
      g.out = cfg_.dims[l + 1];
      g.bias = L.bias;
      if (recipe_ == recipe::fp32) g.w.assign(L.w.data(), L.w.data() + L.w.size());
      if (recipe_ == recipe::w8a8) {
        g.w8 = L.w8.data;
        g.w8_scales = L.w8.scales;
      }
      out.push_back(std::move(g));
    }
    return out;
  }

  /// Runs rows of x (batch x input_dim) through every layer.
  matrix forward(const matrix& x) const {
    if (recipe_ == recipe::fp32 && x.rows() > 1) return forward_fp32_batched(x);
    matrix a, b;  // ping-pong buffers; the input is read in place, not copied
    const matrix* h = &x;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const bool last = l + 1 == layers_.size();
      const auto act = last ? frugal::quant::activation_kind::none : frugal::quant::activation_kind::gelu;
      const layer& L = layers_[l];
      matrix& next = h == &a ? b : a;
      switch (recipe_) {
        case recipe::fp32:
          // One request: a matrix-vector product that streams the weights once (memory-bound).
          next.noalias() = *h * L.w.transpose();
          bias_gelu_inplace(next, L.bias, !last);
          break;
        case recipe::w8a8: {
          auto qa = frugal::quant::quantize_rows(*h);
          frugal::quant::gemm_w8a8(qa, L.w8, next, {.bias = L.bias, .activation = act});
          break;
        }
        case recipe::w8a16:
          frugal::quant::gemm_weight_only(*h, L.w8, next, {.bias = L.bias, .activation = act});
          break;
        case recipe::w4a16:
          frugal::quant::gemm_weight_only(*h, L.w4, next, {.bias = L.bias, .activation = act});
          break;
      }
      h = &next;
    }
    if (h == &x) return x;
    return std::move(h == &a ? a : b);
  }

 private:
  using col_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

  // A batch in fp32. Eigen's GEMM packs both operands on every call; with the activations column-major
  // and the row-major weights as the right-hand side (W^T is then column-major, so its packing reads
  // memory in order), the per-call packing of the weights costs least: about 25% less time per layer
  // at 64 rows than the row-major form, measured on this machine.
  matrix forward_fp32_batched(const matrix& x) const {
    col_matrix a = x, b;
    col_matrix* h = &a;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer& L = layers_[l];
      col_matrix& next = h == &a ? b : a;
      next.noalias() = *h * L.w.transpose();
      next.rowwise() +=
          Eigen::Map<const Eigen::RowVectorXf>(L.bias.data(), static_cast<Eigen::Index>(L.bias.size()));
      if (l + 1 < layers_.size()) gelu_inplace(next);
      h = &next;
    }
    return *h;
  }

  struct layer {
    matrix w;  // fp32 master copy (out x in); kept only for fp32
    std::vector<float> bias;
    frugal::quant::quantized_weights w8;
    frugal::quant::int4_weights w4;
  };

  layer make_layer(matrix w, std::vector<float> bias) const {
    layer l;
    l.bias = std::move(bias);
    switch (recipe_) {
      case recipe::fp32:
        l.w = std::move(w);
        break;
      case recipe::w8a8:
      case recipe::w8a16:
        l.w8 = frugal::quant::quantize_weights_per_channel(w);
        break;
      case recipe::w4a16:
        l.w4 = frugal::quant::quantize_int4(w, {.group_size = 128});
        break;
    }
    return l;
  }

  model_config cfg_;
  recipe recipe_;
  std::vector<layer> layers_;
};

/// The pool of distinct inputs that traffic draws from; activations with a few outlier features.
inline matrix make_input_pool(int count, int dim, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::normal_distribution<float> n(0.0f, 1.0f);
  matrix x(count, dim);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
  for (int c = 0; c < 4; ++c) x.col((c * 257) % dim) *= 6.0f;
  return x;
}

}  // namespace demo
