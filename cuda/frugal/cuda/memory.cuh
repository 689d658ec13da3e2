#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "frugal/cuda/errors.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

namespace detail {
inline void throw_on_cuda_error(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // reported here: the next launch_status() must not see it
    throw std::runtime_error(std::string("frugal::cuda: ") + what + ": " + cudaGetErrorString(e));
  }
}

// cudaMalloc of n elements of `elem` bytes. A failure is a status naming the bytes and the CUDA error, and it
// is cleared from the thread's last error, so that the next kernel's launch_status() is not blamed for it.
inline status device_malloc(void** p, std::size_t n, std::size_t elem) {
  *p = nullptr;
  if (n == 0) return status::ok();
  if (n > std::numeric_limits<std::size_t>::max() / elem)
    return make_status(cuda_errc::invalid_problem, "frugal::cuda::device_buffer: " + std::to_string(n) +
                                                       " elements of " + std::to_string(elem) +
                                                       " bytes overflow size_t");
  const std::size_t bytes = n * elem;
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaSuccess) return status::ok();
  *p = nullptr;
  (void)cudaGetLastError();
  return make_status(cuda_errc::cuda_error,
                     "frugal::cuda::device_buffer: cudaMalloc of " + std::to_string(bytes) + " bytes (" +
                         std::to_string(n) + " elements of " + std::to_string(elem) +
                         ") failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}
}  // namespace detail

/// @brief An owning device allocation of `size()` elements of T (uninitialised); move-only.
/// The constructor throws std::runtime_error when cudaMalloc fails; create() returns a status instead.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) {
    void* p = nullptr;
    if (auto s = detail::device_malloc(&p, n, sizeof(T)); !s) throw std::runtime_error(s.message);
    data_ = static_cast<T*>(p);
    size_ = n;
  }
  /// @brief Allocates `n` elements into `out`, which is left empty on failure: cuda_error (out of memory, no
  /// device, ...) or invalid_problem (the byte count overflows), with a message naming the bytes and the
  /// error.
  [[nodiscard]] static status create(std::size_t n, device_buffer& out) {
    out = device_buffer();
    void* p = nullptr;
    if (auto s = detail::device_malloc(&p, n, sizeof(T)); !s) return s;
    out.data_ = static_cast<T*>(p);
    out.size_ = n;
    return status::ok();
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
