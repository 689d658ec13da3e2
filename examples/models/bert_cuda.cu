// The encoder's linear layers on a CUDA device, through frugal::cuda's dispatcher: W8A8 (int8 activations
// and weights, the per-token x per-channel dequant and the bias fused in the epilogue, fp32 out) and
// fp16/bf16 (fp32 accumulation). Weights are uploaded once per layer; each forward copies the layer's input
// up and its fp32 output down. Attention, LayerNorm and the activation stay on the host (see
// linear_device.hpp).
#include <cuda_runtime.h>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bert_cuda.hpp"
#include "frugal/cuda/gemm.cuh"
#include "frugal/cuda/weights.cuh"

namespace bert {
namespace {

namespace fc = frugal::cuda;

void check(const fc::status& s, const std::string& what) {
  if (!s) throw std::runtime_error("bert cuda: " + what + ": " + s.str());
}

void check(cudaError_t e, const std::string& what) { check(fc::cuda_status(e, what.c_str()), what); }

int checked_int(std::size_t v, const char* what) {
  if (v == 0 || v > static_cast<std::size_t>(1 << 30))
    throw std::invalid_argument(std::string("bert cuda: ") + what + " = " + std::to_string(v) +
                                " is out of range (1 .. 2^30)");
  return static_cast<int>(v);
}

class cuda_linear_device final : public linear_device {
 public:
  explicit cuda_linear_device(int ordinal) : ordinal_(ordinal) {
    const std::string why = fc::no_device_reason();
    if (!why.empty()) throw std::runtime_error("bert cuda: " + why);
    if (ordinal < 0 || ordinal >= fc::device_count())
      throw std::invalid_argument("bert cuda: device " + std::to_string(ordinal) + " does not exist (" +
                                  std::to_string(fc::device_count()) + " devices)");
    check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, ordinal), "cudaGetDeviceProperties");
    name_ = "cuda:" + std::to_string(ordinal) + " (" + p.name + ", sm_" + std::to_string(p.major) +
            std::to_string(p.minor) + ")";
    stream_.emplace();  // on the device just set
  }

  std::string name() const override { return name_; }

  std::size_t upload_int8(const frugal::quant::quantized_weights& w, std::span<const float> bias) override {
    check_shape(w.data.size(), bias.size(), w.rows, w.cols, "upload_int8");
    if (w.scales.size() != w.rows)
      throw std::invalid_argument("bert cuda: upload_int8: " + std::to_string(w.scales.size()) +
                                  " scales for N = " + std::to_string(w.rows));
    std::lock_guard lock(mutex_);
    layer l = make_layer(w.rows, w.cols, {}, false, false);
    check(fc::upload(w, bias, l.w8), "uploading int8 weights");
    stats_.weight_bytes += l.w8.bytes();
    layers_.push_back(std::move(l));
    return layers_.size() - 1;
  }

  std::size_t upload_16bit(std::span<const std::uint16_t> w, bool bf16, std::span<const float> bias,
                           std::size_t n, std::size_t k) override {
    check_shape(w.size(), bias.size(), n, k, "upload_16bit");
    std::lock_guard lock(mutex_);
    layer l = make_layer(n, k, bias, true, bf16);
    l.w16 = upload(w, "16-bit weights");
    layers_.push_back(std::move(l));
    return layers_.size() - 1;
  }

  void forward_int8(std::size_t id, std::span<const std::int8_t> a, std::span<const float> scale_a,
                    std::size_t t, std::span<float> y) override {
    std::lock_guard lock(mutex_);
    const layer& l = layer_at(id, false);
    check_io(l, a.size(), t, y.size(), "forward_int8");
    if (scale_a.size() != t)
      throw std::invalid_argument("bert cuda: forward_int8: " + std::to_string(scale_a.size()) +
                                  " activation scales for " + std::to_string(t) + " tokens");
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    grow(a8_, a.size(), "int8 activations");
    grow(sa_, t, "activation scales");
    grow(y_, t * l.n, "output");
    check(cudaMemcpyAsync(a8_.data(), a.data(), a.size(), cudaMemcpyHostToDevice, *stream_),
          "activations upload");
    check(cudaMemcpyAsync(sa_.data(), scale_a.data(), t * sizeof(float), cudaMemcpyHostToDevice, *stream_),
          "activation scales upload");
    fc::gemm_w8a8_arguments g = l.w8.arguments;  // the weight half: b, ldb, scale_b, bias
    g.m = checked_int(t, "tokens");
    g.a = a8_.data();
    g.lda = g.k;
    g.scale_a = sa_.data();
    g.c = y_.data();
    g.ldc = g.n;
    g.c_type = frugal::element_type::f32;
    check(dispatcher_.run(g, *stream_), "W8A8 GEMM " + shape(t, l));
    download(y, t * l.n);
  }

  void forward_16bit(std::size_t id, std::span<const std::uint16_t> x, std::size_t t,
                     std::span<float> y) override {
    std::lock_guard lock(mutex_);
    const layer& l = layer_at(id, true);
    check_io(l, x.size(), t, y.size(), "forward_16bit");
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    grow(x16_, x.size(), "16-bit activations");
    grow(y_, t * l.n, "output");
    check(cudaMemcpyAsync(x16_.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice, *stream_),
          "activations upload");
    fc::gemm_f16_arguments g{};
    g.m = checked_int(t, "tokens");
    g.n = static_cast<int>(l.n);
    g.k = static_cast<int>(l.k);
    g.ab_type = l.bf16 ? frugal::element_type::bf16 : frugal::element_type::f16;
    g.a = x16_.data();
    g.lda = g.k;
    g.b = l.w16.data();
    g.ldb = g.k;
    g.bias = l.bias.size() ? l.bias.data() : nullptr;
    g.c = y_.data();
    g.ldc = g.n;
    g.c_type = frugal::element_type::f32;
    check(dispatcher_.run(g, *stream_), std::string(l.bf16 ? "bf16" : "fp16") + " GEMM " + shape(t, l));
    download(y, t * l.n);
  }

  stats_snapshot stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  struct layer {
    std::size_t n = 0, k = 0;
    bool sixteen = false, bf16 = false;
    fc::device_w8a8_weights w8;
    fc::device_buffer<std::uint16_t> w16;
    fc::device_buffer<float> bias;  // 16-bit layers; an int8 layer's bias is in w8
  };

  static std::string shape(std::size_t t, const layer& l) {
    return std::to_string(t) + "x" + std::to_string(l.n) + "x" + std::to_string(l.k);
  }

  // The kernels' operand rules (lda/ldb multiples of 16 for int8, 8 for 16-bit) hold for every BERT width
  // that is a multiple of 16; others are refused here, by name, rather than by the GEMM's check later.
  static void check_shape(std::size_t w, std::size_t bias, std::size_t n, std::size_t k, const char* where) {
    checked_int(n, "N");
    checked_int(k, "K");
    if (k % 16 != 0)
      throw std::invalid_argument(std::string("bert cuda: ") + where + ": K = " + std::to_string(k) +
                                  " must be a multiple of 16");
    if (w != n * k)
      throw std::invalid_argument(std::string("bert cuda: ") + where + ": weights hold " + std::to_string(w) +
                                  " values, N x K is " + std::to_string(n * k));
    if (bias != 0 && bias != n)
      throw std::invalid_argument(std::string("bert cuda: ") + where + ": bias has " + std::to_string(bias) +
                                  " entries for N = " + std::to_string(n));
  }

  static void check_io(const layer& l, std::size_t in, std::size_t t, std::size_t out, const char* where) {
    if (in != t * l.k || out != t * l.n)
      throw std::invalid_argument(std::string("bert cuda: ") + where + ": " + std::to_string(t) +
                                  " tokens of K = " + std::to_string(l.k) + " need " +
                                  std::to_string(t * l.k) + " inputs and " + std::to_string(t * l.n) +
                                  " outputs, got " + std::to_string(in) + " and " + std::to_string(out));
  }

  layer make_layer(std::size_t n, std::size_t k, std::span<const float> bias, bool sixteen, bool bf16) {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    layer l;
    l.n = n;
    l.k = k;
    l.sixteen = sixteen;
    l.bf16 = bf16;
    if (!bias.empty()) l.bias = upload(bias, "bias");
    return l;
  }

  const layer& layer_at(std::size_t id, bool sixteen) const {
    if (id >= layers_.size() || layers_[id].sixteen != sixteen)
      throw std::invalid_argument("bert cuda: layer " + std::to_string(id) + " is not a " +
                                  (sixteen ? "16-bit" : "int8") + " layer of this device");
    return layers_[id];
  }

  template <class T>
  fc::device_buffer<T> upload(std::span<const T> host, const char* what) {
    fc::device_buffer<T> b;
    check(fc::device_buffer<T>::create(host.size(), b), std::string("allocating ") + what);
    check(cudaMemcpy(b.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
          std::string("uploading ") + what);
    stats_.weight_bytes += host.size_bytes();
    return b;
  }

  template <class T>
  static void grow(fc::device_buffer<T>& b, std::size_t n, const char* what) {
    if (b.size() >= n) return;
    check(fc::device_buffer<T>::create(n, b), std::string("allocating the ") + what + " buffer");
  }

  void download(std::span<float> y, std::size_t n) {
    check(cudaMemcpyAsync(y.data(), y_.data(), n * sizeof(float), cudaMemcpyDeviceToHost, *stream_),
          "output download");
    check(cudaStreamSynchronize(*stream_), "cudaStreamSynchronize");
    ++stats_.forwards;
  }

  int ordinal_ = 0;
  std::string name_;
  mutable std::mutex mutex_;  // one layer at a time: the scratch buffers and the stream are shared
  std::optional<fc::stream_guard> stream_;
  fc::dispatcher dispatcher_;
  std::vector<layer> layers_;
  fc::device_buffer<std::int8_t> a8_;
  fc::device_buffer<float> sa_;
  fc::device_buffer<std::uint16_t> x16_;
  fc::device_buffer<float> y_;
  stats_snapshot stats_;
};

}  // namespace

std::shared_ptr<linear_device> make_cuda_linear_device(int ordinal) {
  return std::make_shared<cuda_linear_device>(ordinal);
}

}  // namespace bert
