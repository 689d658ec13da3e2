// The GPU path on frugal's kernels. Every CUDA call and kernel returns a status; a failure becomes an
// exception that the demo's worker turns into failed requests (never a silent wrong answer).
#include <stdexcept>
#include <string>

#include <frugal/cuda/device.cuh>
#include <frugal/cuda/gemm.cuh>
#include <frugal/cuda/memory.cuh>

#include "gpu_backend.hpp"

namespace demo {
namespace {

namespace fc = frugal::cuda;
using frugal::quant::half;

void check(const fc::status& s, const char* what) {
  if (!s) throw std::runtime_error(std::string("gpu backend: ") + what + ": " + s.str());
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("gpu backend: ") + what + ": " + cudaGetErrorString(e));
}

class cuda_backend final : public gpu_backend {
 public:
  cuda_backend(bool int8, const std::vector<gpu_layer>& layers) : int8_(int8) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    name_ = prop.name;
    for (const auto& l : layers) {
      dev_layer d;
      d.in = l.in;
      d.out = l.out;
      d.bias = fc::device_buffer<float>(l.bias.size());
      d.bias.upload(l.bias.data(), l.bias.size());
      if (int8_) {
        d.w8 = fc::device_buffer<std::int8_t>(l.w8.size());
        d.w8.upload(l.w8.data(), l.w8.size());
        d.scales = fc::device_buffer<float>(l.w8_scales.size());
        d.scales.upload(l.w8_scales.data(), l.w8_scales.size());
      } else {
        std::vector<half> h(l.w.size());
        for (std::size_t i = 0; i < h.size(); ++i) h[i] = half(l.w[i]);
        d.w16 = fc::device_buffer<half>(h.size());
        d.w16.upload(h.data(), h.size());
      }
      max_dim_ = std::max({max_dim_, l.in, l.out});
      layers_.push_back(std::move(d));
    }
  }

  frugal::quant::row_matrix forward(const frugal::quant::row_matrix& x) override {
    const int m = static_cast<int>(x.rows());
    ensure_capacity(m);
    std::vector<half> hx(static_cast<std::size_t>(x.size()));
    for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = half(x.data()[i]);
    act_[0].upload(hx.data(), hx.size());
    int cur = 0;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const dev_layer& L = layers_[l];
      const auto act = l + 1 == layers_.size() ? frugal::quant::activation_kind::none
                                               : frugal::quant::activation_kind::gelu;
      half* in = act_[cur].data();
      half* out = act_[1 - cur].data();
      if (int8_) {
        check(fc::run(fc::quantize_rows_arguments{.m = m,
                                                  .k = L.in,
                                                  .x = in,
                                                  .ldx = L.in,
                                                  .q = q_.data(),
                                                  .ldq = L.in,
                                                  .scale = qscale_.data()}),
              "quantize_rows");
        check(fc::run(fc::gemm_w8a8_arguments{.m = m,
                                              .n = L.out,
                                              .k = L.in,
                                              .a = q_.data(),
                                              .lda = L.in,
                                              .b = L.w8.data(),
                                              .ldb = L.in,
                                              .scale_a = qscale_.data(),
                                              .scale_b = L.scales.data(),
                                              .bias = L.bias.data(),
                                              .act = act,
                                              .c = out,
                                              .ldc = L.out}),
              "gemm_w8a8");
      } else {
        check(fc::run(fc::gemm_f16_arguments{.m = m,
                                             .n = L.out,
                                             .k = L.in,
                                             .a = in,
                                             .lda = L.in,
                                             .b = L.w16.data(),
                                             .ldb = L.in,
                                             .bias = L.bias.data(),
                                             .act = act,
                                             .c = out,
                                             .ldc = L.out}),
              "gemm_f16");
      }
      cur = 1 - cur;
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const int out_dim = layers_.back().out;
    std::vector<half> hy(static_cast<std::size_t>(m) * static_cast<std::size_t>(out_dim));
    act_[cur].download(hy.data(), hy.size());
    frugal::quant::row_matrix y(m, out_dim);
    for (std::size_t i = 0; i < hy.size(); ++i) y.data()[i] = static_cast<float>(hy[i]);
    return y;
  }

  std::string describe() const override {
    return std::string(int8_ ? "W8A8 int8" : "fp16") + " on " + name_ + " through frugal::cuda";
  }

 private:
  struct dev_layer {
    int in = 0, out = 0;
    fc::device_buffer<half> w16;
    fc::device_buffer<std::int8_t> w8;
    fc::device_buffer<float> scales, bias;
  };

  void ensure_capacity(int m) {
    if (m <= rows_) return;
    rows_ = m;
    const std::size_t n = static_cast<std::size_t>(m) * static_cast<std::size_t>(max_dim_);
    act_[0] = fc::device_buffer<half>(n);
    act_[1] = fc::device_buffer<half>(n);
    q_ = fc::device_buffer<std::int8_t>(n);
    qscale_ = fc::device_buffer<float>(static_cast<std::size_t>(m));
  }

  bool int8_;
  std::string name_;
  int max_dim_ = 0, rows_ = 0;
  std::vector<dev_layer> layers_;
  fc::device_buffer<half> act_[2];
  fc::device_buffer<std::int8_t> q_;
  fc::device_buffer<float> qscale_;
};

}  // namespace

bool gpu_available(std::string& why) {
  why = fc::no_device_reason();
  return why.empty();
}

std::unique_ptr<gpu_backend> make_gpu_backend(bool int8, const std::vector<gpu_layer>& layers,
                                              std::string& why) {
  if (!gpu_available(why)) return nullptr;
  try {
    return std::make_unique<cuda_backend>(int8, layers);
  } catch (const std::exception& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace demo
