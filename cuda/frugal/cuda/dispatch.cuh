#pragma once

// Picks our kernel or cuBLASLt per call. The default table is in choose(). No GPU run has measured its
// thresholds yet: they are estimates written before any (benchmarks/RESULTS.md, section cuda), to be replaced
// by the first run's table.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "frugal/cuda/cublaslt.cuh"
#include "frugal/cuda/gemm/device/gemm.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

/// @brief Who runs a GEMM.
enum class backend { automatic, frugal, cublaslt };

inline const char* to_string(backend b) noexcept {
  switch (b) {
    case backend::automatic:
      return "automatic";
    case backend::frugal:
      return "frugal";
    case backend::cublaslt:
      return "cublaslt";
  }
  return "?";
}

/// @brief A dispatch decision and why it was made.
struct dispatch_choice {
  backend chosen = backend::frugal;
  const char* reason = "";
};

/// @brief The W8A8 choice: a forced backend wins when it can run the problem.
inline dispatch_choice choose(const gemm_w8a8_arguments& a, const device_info& dev,
                              backend force = backend::automatic) {
  const bool lt_ok = static_cast<bool>(cublaslt_gemm_w8a8::can_implement(a));
  if (force == backend::frugal) return {backend::frugal, "forced"};
  if (force == backend::cublaslt) {
    if (lt_ok) return {backend::cublaslt, "forced"};
    return {backend::frugal, "forced cublaslt cannot implement the problem"};
  }
  if (!lt_ok) return {backend::frugal, "cublaslt cannot implement the problem"};
  if (a.m <= 16) return {backend::frugal, "small M: cuBLASLt int8 underperforms, ours fuses the dequant"};
  if (dev.cc_major >= 9 && a.m >= 1024 && a.n >= 4096 && a.k >= 4096)
    return {backend::cublaslt, "large Hopper shape: cuBLASLt uses wgmma, ours mma.sync"};
  return {backend::frugal, "fused epilogue saves the int32 round trip"};
}

/// @brief The fp16/bf16 choice.
inline dispatch_choice choose(const gemm_f16_arguments& a, const device_info& dev,
                              backend force = backend::automatic) {
  const bool lt_ok = static_cast<bool>(cublaslt_gemm_f16::can_implement(a));
  if (force == backend::frugal) return {backend::frugal, "forced"};
  if (force == backend::cublaslt) {
    if (lt_ok) return {backend::cublaslt, "forced"};
    return {backend::frugal, "forced cublaslt cannot implement the problem"};
  }
  if (!lt_ok) return {backend::frugal, "cublaslt cannot run this epilogue"};
  if (dev.cc_major >= 9 && a.m > 16) return {backend::cublaslt, "Hopper: cuBLASLt uses wgmma, ours mma.sync"};
  if (a.m >= 256) return {backend::cublaslt, "large M: vendor GEMM"};
  return {backend::frugal, "small M"};
}

/// @brief Dispatcher options.
struct dispatcher_options {
  backend force = backend::automatic;  ///< frugal or cublaslt to override the table (for A/B runs)
};

/// @brief Runs GEMMs on the backend choose() picks, keeping one cuBLASLt plan per shape. Thread-safe.
class dispatcher {
 public:
  struct stats_snapshot {
    std::uint64_t frugal_runs = 0;
    std::uint64_t cublaslt_runs = 0;
    std::uint64_t plans = 0;
  };

  explicit dispatcher(dispatcher_options options = {}) : options_(options) {}

  /// @brief The choice for `a` on the current device.
  template <class Args>
  status choice(const Args& a, dispatch_choice& out) const {
    device_info dev;
    if (auto s = query_device(dev); !s) return s;
    out = choose(a, dev, options_.force);
    return status::ok();
  }

  status run(const gemm_w8a8_arguments& a, cudaStream_t stream = nullptr) {
    return run_impl(a, w8a8_plans_, stream);
  }
  status run(const gemm_f16_arguments& a, cudaStream_t stream = nullptr) {
    return run_impl(a, f16_plans_, stream);
  }

  stats_snapshot stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  using key = std::tuple<int, int, int, int, int, int, int, int>;
  static key key_of(const gemm_w8a8_arguments& a) {
    return {a.m, a.n, a.k, a.lda, a.ldb, a.ldc, static_cast<int>(a.c_type), 0};
  }
  static key key_of(const gemm_f16_arguments& a) {
    return {a.m, a.n, a.k, a.lda, a.ldb, a.ldc, static_cast<int>(a.c_type), static_cast<int>(a.ab_type)};
  }
  template <class Args>
  using plan_of =
      std::conditional_t<std::is_same_v<Args, gemm_w8a8_arguments>, cublaslt_gemm_w8a8, cublaslt_gemm_f16>;

  template <class Args, class Map>
  status run_impl(const Args& a, Map& plans, cudaStream_t stream) {
    dispatch_choice c;
    if (auto s = choice(a, c); !s) return s;
    if (c.chosen == backend::frugal) {
      auto s = cuda::run(a, stream);
      if (s) {
        std::lock_guard lock(mutex_);
        ++stats_.frugal_runs;
      }
      return s;
    }
    std::lock_guard lock(mutex_);
    if (!lt_ready_) {
      if (auto s = lt_.initialize(); !s) return s;
      lt_ready_ = true;
    }
    auto& plan = plans[key_of(a)];
    if (!plan) {
      auto p = std::make_unique<plan_of<Args>>();
      if (auto s = p->initialize(lt_, a); !s) return s;
      plan = std::move(p);
      ++stats_.plans;
    }
    auto s = plan->run(a, stream);
    if (s) ++stats_.cublaslt_runs;
    return s;
  }

  dispatcher_options options_;
  mutable std::mutex mutex_;
  cublaslt_context lt_;
  bool lt_ready_ = false;
  std::map<key, std::unique_ptr<cublaslt_gemm_w8a8>> w8a8_plans_;
  std::map<key, std::unique_ptr<cublaslt_gemm_f16>> f16_plans_;
  stats_snapshot stats_;
};

}  // namespace cuda
FRUGAL_END_NAMESPACE
