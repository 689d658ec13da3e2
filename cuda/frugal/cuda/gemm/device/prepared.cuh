#pragma once

// Which (kernel, device) pairs have had their one-time setup (image found, shared-memory limit raised). Keyed
// on the kernel's own address: kernels of one signature (the i8, f16 and bf16 bodies of a tile, say) share a
// function-pointer type, so a flag per type would let one kernel's setup stand in for another's.
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "frugal/cuda/errors.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::detail {

class prepared_kernels {
 public:
  /// @brief Runs `prepare()` (returning a status) unless `kernel` was prepared on `dev` before; a failed
  /// preparation is not remembered, so the next call tries again.
  template <class Prepare>
  status ensure(const void* kernel, int dev, Prepare&& prepare) {
    std::lock_guard lock(mutex_);
    for (const auto& e : done_)
      if (e.first == kernel && e.second == dev) return status::ok();
    status s = std::forward<Prepare>(prepare)();
    if (s) done_.emplace_back(kernel, dev);
    return s;
  }
  /// @brief Whether `kernel` was prepared on `dev`.
  bool prepared(const void* kernel, int dev) const {
    std::lock_guard lock(mutex_);
    for (const auto& e : done_)
      if (e.first == kernel && e.second == dev) return true;
    return false;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return done_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<const void*, int>> done_;
};

/// @brief The process-wide registry that run() uses.
inline prepared_kernels& prepared_registry() {
  static prepared_kernels r;
  return r;
}

}  // namespace cuda::detail
FRUGAL_END_NAMESPACE
