#pragma once

// What the demo's inference loop calls: a model over a pool of inputs, named by index. Two kinds:
//   minilm  all-MiniLM-L6-v2 (examples/models/bert.hpp) over short fortunes, a request's cost in tokens;
//   mlp     the synthetic 4-layer MLP (model.hpp) over random vectors, a request's cost 1.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <frugal/cache.hpp>

#include "bert.hpp"
#include "model.hpp"

namespace demo {

/// @brief The traffic's inputs: MLP vectors, or sentences with their token ids.
struct input_pool {
  matrix rows;                                 // mlp: one input vector per row
  std::vector<std::string> texts;              // minilm: the sentences
  std::vector<std::vector<std::int32_t>> ids;  // minilm: their token ids
  int size() const { return texts.empty() ? static_cast<int>(rows.rows()) : static_cast<int>(texts.size()); }
};

/// @brief The model one step of the ladder serves.
class served_model {
 public:
  virtual ~served_model() = default;
  virtual std::string precision_name() const = 0;
  virtual std::string backend() const = 0;
  virtual std::size_t weight_bytes() const = 0;
  virtual int output_dim() const = 0;
  /// One model call: the outputs of the pool's inputs @p inputs, one row each.
  virtual matrix forward(std::span<const int> inputs) const = 0;
  /// The batcher's weight of a request (tokens for a text model).
  virtual std::uint64_t cost(int input) const = 0;
  /// The result cache's key of an input.
  virtual frugal::key128 key(const std::string& model_name, int input) const = 0;
};

class mlp_model final : public served_model {
 public:
  mlp_model(const model_config& cfg, recipe p, const input_pool& pool, std::unique_ptr<gpu_backend> gpu)
      : model_(cfg, p), pool_(&pool), gpu_(std::move(gpu)) {}
  std::string precision_name() const override { return name(model_.kind()); }
  std::string backend() const override { return gpu_ ? gpu_->describe() : precision_name() + " on the CPU"; }
  std::size_t weight_bytes() const override { return model_.weight_bytes(); }
  int output_dim() const override { return model_.output_dim(); }
  matrix forward(std::span<const int> inputs) const override {
    matrix x(static_cast<Eigen::Index>(inputs.size()), model_.input_dim());
    for (std::size_t i = 0; i < inputs.size(); ++i)
      x.row(static_cast<Eigen::Index>(i)) = pool_->rows.row(inputs[i]);
    return gpu_ ? gpu_->forward(x) : model_.forward(x);
  }
  std::uint64_t cost(int) const override { return 1; }
  frugal::key128 key(const std::string& model_name, int input) const override {
    const float* row = pool_->rows.row(input).data();
    return frugal::hash_key(model_name,
                            std::span<const float>(row, static_cast<std::size_t>(model_.input_dim())));
  }
  const mlp& inner() const { return model_; }

 private:
  mlp model_;
  const input_pool* pool_;
  std::unique_ptr<gpu_backend> gpu_;
};

class bert_model final : public served_model {
 public:
  bert_model(bert::encoder enc, const input_pool& pool) : enc_(std::move(enc)), pool_(&pool) {}
  std::string precision_name() const override {
    return enc_.weights() == bert::precision::int8 ? "int8 W8A8 SmoothQuant"
                                                   : bert::to_string(enc_.weights());
  }
  std::string backend() const override { return precision_name() + " on the CPU"; }
  std::size_t weight_bytes() const override { return enc_.linear_bytes(); }
  int output_dim() const override { return static_cast<int>(enc_.dimension()); }
  matrix forward(std::span<const int> inputs) const override {
    std::vector<std::vector<std::int32_t>> ids;
    ids.reserve(inputs.size());
    for (const int i : inputs) ids.push_back(pool_->ids[static_cast<std::size_t>(i)]);
    const auto out = enc_.encode(ids);
    matrix y(static_cast<Eigen::Index>(out.size()), output_dim());
    for (std::size_t i = 0; i < out.size(); ++i)
      y.row(static_cast<Eigen::Index>(i)) = Eigen::Map<const Eigen::RowVectorXf>(out[i].data(), output_dim());
    return y;
  }
  std::uint64_t cost(int input) const override { return pool_->ids[static_cast<std::size_t>(input)].size(); }
  frugal::key128 key(const std::string& model_name, int input) const override {
    return frugal::hash_key(model_name, std::string_view(pool_->texts[static_cast<std::size_t>(input)]));
  }

 private:
  bert::encoder enc_;
  const input_pool* pool_;
};

}  // namespace demo
