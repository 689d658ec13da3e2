#pragma once

// Where the encoder's linear layers run. bert.hpp runs them on the CPU unless load_options.device names an
// accelerator; this interface keeps bert.hpp free of CUDA: the encoder hands over the host toolkit's int8
// weights (frugal::cuda::upload turns them into device buffers) or plain 16-bit arrays, the device returns
// y = x W^T + b in fp32, and the activation stays on the host, where the exact GELU (erf) lives.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "frugal/quant/gemm.hpp"

namespace bert {

/// @brief A device that runs linear layers. Implementations are thread-safe (encode() calls forward from its
/// worker threads) and throw std::runtime_error naming the layer and the device error on any failure.
class linear_device {
 public:
  virtual ~linear_device() = default;

  /// @brief "cuda:0 (NVIDIA H200, sm_90)" or similar, for logs and reports.
  virtual std::string name() const = 0;

  /// @brief Uploads W8A8 weights once: @p w (N x K int8, one symmetric scale per output channel) as the
  /// host toolkit holds them; @p bias has N entries (or is empty). Returns the layer's handle.
  virtual std::size_t upload_int8(const frugal::quant::quantized_weights& w, std::span<const float> bias) = 0;

  /// @brief Uploads 16-bit weights once (fp16, or bf16 when @p bf16), N x K row-major, with @p bias.
  virtual std::size_t upload_16bit(std::span<const std::uint16_t> w, bool bf16, std::span<const float> bias,
                                   std::size_t n, std::size_t k) = 0;

  /// @brief y (T x N fp32) = (a (T x K int8, symmetric per-row scales) W^T) dequantized + bias.
  virtual void forward_int8(std::size_t layer, std::span<const std::int8_t> a, std::span<const float> scale_a,
                            std::size_t t, std::span<float> y) = 0;

  /// @brief y (T x N fp32) = x (T x K, in the layer's 16-bit type) W^T + bias, accumulated in fp32.
  virtual void forward_16bit(std::size_t layer, std::span<const std::uint16_t> x, std::size_t t,
                             std::span<float> y) = 0;

  /// @brief Linear layers run so far, and the bytes of weights held on the device.
  struct stats_snapshot {
    std::uint64_t forwards = 0;
    std::size_t weight_bytes = 0;
  };
  virtual stats_snapshot stats() const = 0;
};

}  // namespace bert
