#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "frugal/config.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

namespace detail {
inline void throw_on_cuda_error(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("frugal::cuda: ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace detail

/// @brief An owning device allocation of `size()` elements of T (uninitialised); move-only.
/// For tests, examples and benchmarks; throws std::runtime_error when cudaMalloc fails.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) : size_(n) {
    if (n != 0) detail::throw_on_cuda_error(cudaMalloc(&data_, n * sizeof(T)), "device_buffer: cudaMalloc");
  }
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }

  /// @brief Copies `n` elements from host memory (synchronous).
  void upload(const T* host, std::size_t n) {
    if (n > size_) throw std::out_of_range("frugal::cuda::device_buffer::upload: n exceeds size()");
    detail::throw_on_cuda_error(cudaMemcpy(data_, host, n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  /// @brief Copies `n` elements to host memory (synchronous).
  void download(T* host, std::size_t n) const {
    if (n > size_) throw std::out_of_range("frugal::cuda::device_buffer::download: n exceeds size()");
    detail::throw_on_cuda_error(cudaMemcpy(host, data_, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  /// @brief Sets every byte to `byte`, e.g. 0xFF to poison an output (NaN for floats).
  void fill_bytes(int byte) {
    detail::throw_on_cuda_error(cudaMemset(data_, byte, bytes()), "fill_bytes: cudaMemset");
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// @brief An owned non-blocking stream, destroyed (after synchronising) with the guard.
class stream_guard {
 public:
  stream_guard() {
    detail::throw_on_cuda_error(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;
  ~stream_guard() {
    (void)cudaStreamSynchronize(s_);
    (void)cudaStreamDestroy(s_);
  }
  cudaStream_t get() const noexcept { return s_; }
  operator cudaStream_t() const noexcept { return s_; }
  cudaError_t synchronize() const noexcept { return cudaStreamSynchronize(s_); }

 private:
  cudaStream_t s_ = nullptr;
};

/// @brief An owned CUDA event, for timing.
class event_guard {
 public:
  event_guard() { detail::throw_on_cuda_error(cudaEventCreate(&e_), "cudaEventCreate"); }
  event_guard(const event_guard&) = delete;
  event_guard& operator=(const event_guard&) = delete;
  ~event_guard() { (void)cudaEventDestroy(e_); }
  cudaEvent_t get() const noexcept { return e_; }
  operator cudaEvent_t() const noexcept { return e_; }
  cudaError_t record(cudaStream_t s) const noexcept { return cudaEventRecord(e_, s); }
  /// @brief Milliseconds from `start` to this event, after waiting for this one.
  float elapsed_ms_since(const event_guard& start) const {
    detail::throw_on_cuda_error(cudaEventSynchronize(e_), "cudaEventSynchronize");
    float ms = 0;
    detail::throw_on_cuda_error(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace cuda
FRUGAL_END_NAMESPACE
