#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {

/// @brief A GPU's utilisation and memory as the driver reports them (NVML), for the ledger's
/// record_memory and the utilisation alerts: sampled, not told.
struct device_sample {
  double utilization = 0;        ///< the fraction of the last sample period a kernel ran, 0..1
  std::uint64_t used_bytes = 0;  ///< device memory in use (all processes)
  std::uint64_t total_bytes = 0;
};

/// @brief The NVIDIA driver's management library (NVML), loaded at run time with dlopen, so that a program
/// built with it still runs on a machine without a driver (open() then returns nullopt and says why). The
/// CUDA toolkit does not ship nvml.h; the few functions used here are declared from NVML's documented C API.
/// Not thread-safe: one sampler thread owns it. Link the program with ${CMAKE_DL_LIBS} on glibc before 2.34.
class nvml {
 public:
  /// @brief Loads `library` (the driver's libnvidia-ml.so.1 by default; a path for tests) and initialises
  /// NVML; nullopt, with the reason in *why when given, if either fails or a function is missing.
  static std::optional<nvml> open(const char* library = "libnvidia-ml.so.1", std::string* why = nullptr) {
    const auto fail = [&](std::string reason) -> std::optional<nvml> {
      if (why != nullptr) *why = std::move(reason);
      return std::nullopt;
    };
    if (library == nullptr || *library == '\0') return fail("frugal::cost::nvml::open: no library named");
    void* h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      return fail(std::string("frugal::cost::nvml::open: ") + (e != nullptr ? e : library));
    }
    nvml n(h);
    const char* missing = n.bind();
    if (missing != nullptr)
      return fail(std::string("frugal::cost::nvml::open: ") + library + " has no " + missing);
    if (const int rc = n.init_(); rc != 0)
      return fail("frugal::cost::nvml::open: nvmlInit_v2: " + n.error(rc));
    n.initialised_ = true;
    return n;
  }

  nvml(nvml&& o) noexcept { *this = std::move(o); }
  nvml& operator=(nvml&& o) noexcept {
    if (this != &o) {
      close();
      handle_ = std::exchange(o.handle_, nullptr);
      initialised_ = std::exchange(o.initialised_, false);
      init_ = o.init_, shutdown_ = o.shutdown_, count_ = o.count_, by_index_ = o.by_index_;
      utilization_ = o.utilization_, memory_ = o.memory_, error_string_ = o.error_string_;
    }
    return *this;
  }
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;
  ~nvml() { close(); }

  /// @brief The number of GPUs the driver sees; throws std::runtime_error with NVML's message on failure.
  unsigned device_count() const {
    unsigned n = 0;
    check(count_(&n), "nvmlDeviceGetCount_v2");
    return n;
  }

  /// @brief GPU `index`'s utilisation over NVML's last sample period and its memory now; throws
  /// std::out_of_range for an index past device_count() and std::runtime_error with NVML's message.
  device_sample read(unsigned index) const {
    const unsigned n = device_count();
    if (index >= n)
      throw std::out_of_range("frugal::cost::nvml::read: device " + std::to_string(index) + " of " +
                              std::to_string(n));
    device_handle d = nullptr;
    check(by_index_(index, &d), "nvmlDeviceGetHandleByIndex_v2");
    utilization u{};
    check(utilization_(d, &u), "nvmlDeviceGetUtilizationRates");
    memory m{};
    check(memory_(d, &m), "nvmlDeviceGetMemoryInfo");
    if (u.gpu > 100)
      throw std::runtime_error("frugal::cost::nvml::read: utilisation " + std::to_string(u.gpu) +
                               "% is past 100% (device " + std::to_string(index) + ")");
    if (m.used > m.total)
      throw std::runtime_error("frugal::cost::nvml::read: " + std::to_string(m.used) + " bytes used of " +
                               std::to_string(m.total) + " (device " + std::to_string(index) + ")");
    return {static_cast<double>(u.gpu) / 100.0, m.used, m.total};
  }

 private:
  // NVML's C ABI, as documented: nvmlReturn_t is an int-sized enum (0 is NVML_SUCCESS), a device is an
  // opaque pointer, and the two structs are laid out as below.
  using device_handle = struct nvml_device_st*;
  struct utilization {
    unsigned gpu;
    unsigned memory;
  };
  struct memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };

  explicit nvml(void* h) noexcept : handle_(h) {}

  template <class F>
  bool sym(F& f, const char* name) noexcept {
    f = reinterpret_cast<F>(dlsym(handle_, name));
    return f != nullptr;
  }
  // The first missing function's name, or null.
  const char* bind() noexcept {
    if (!sym(init_, "nvmlInit_v2")) return "nvmlInit_v2";
    if (!sym(shutdown_, "nvmlShutdown")) return "nvmlShutdown";
    if (!sym(count_, "nvmlDeviceGetCount_v2")) return "nvmlDeviceGetCount_v2";
    if (!sym(by_index_, "nvmlDeviceGetHandleByIndex_v2")) return "nvmlDeviceGetHandleByIndex_v2";
    if (!sym(utilization_, "nvmlDeviceGetUtilizationRates")) return "nvmlDeviceGetUtilizationRates";
    if (!sym(memory_, "nvmlDeviceGetMemoryInfo")) return "nvmlDeviceGetMemoryInfo";
    if (!sym(error_string_, "nvmlErrorString")) return "nvmlErrorString";
    return nullptr;
  }

  std::string error(int rc) const {
    const char* s = error_string_ != nullptr ? error_string_(rc) : nullptr;
    return (s != nullptr ? std::string(s) : std::string("error")) + " (" + std::to_string(rc) + ")";
  }
  void check(int rc, const char* what) const {
    if (rc != 0) throw std::runtime_error(std::string("frugal::cost::nvml: ") + what + ": " + error(rc));
  }

  void close() noexcept {
    if (initialised_ && shutdown_ != nullptr) (void)shutdown_();
    initialised_ = false;
    if (handle_ != nullptr) dlclose(std::exchange(handle_, nullptr));
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*by_index_)(unsigned, device_handle*) = nullptr;
  int (*utilization_)(device_handle, utilization*) = nullptr;
  int (*memory_)(device_handle, memory*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

}  // namespace cost
FRUGAL_END_NAMESPACE
