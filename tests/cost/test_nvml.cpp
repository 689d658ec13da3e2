#include <dlfcn.h>
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "frugal/cost/nvml.hpp"

#include "../support/errors.hpp"

#ifndef FRUGAL_FAKE_NVML
#  error "FRUGAL_FAKE_NVML: the path of the fake libnvidia-ml built beside this test"
#endif

namespace {

// The fake's own controls, reached through the same loaded library as the one under test.
struct fake {
  void* h = dlopen(FRUGAL_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ~fake() {
    if (h != nullptr) dlclose(h);
  }
  template <class F>
  F fn(const char* name) const {
    return reinterpret_cast<F>(dlsym(h, name));
  }
  void set(int init_rc, int util_rc, unsigned count, unsigned util, unsigned long long total,
           unsigned long long used) const {
    fn<void (*)(int, int, unsigned, unsigned, unsigned long long, unsigned long long)>("fake_nvml_set")(
        init_rc, util_rc, count, util, total, used);
  }
  int inits() const { return fn<int (*)()>("fake_nvml_inits")(); }
  int shutdowns() const { return fn<int (*)()>("fake_nvml_shutdowns")(); }
};

using frugal_test::what_of;

}  // namespace

TEST_CASE("nvml: a machine without the driver gets nullopt and the loader's reason, never a crash") {
  std::string why;
  CHECK_FALSE(frugal::cost::nvml::open("libnvidia-ml-absent.so.1", &why).has_value());
  CHECK(why.find("frugal::cost::nvml::open: libnvidia-ml-absent.so.1") != std::string::npos);
  CHECK_FALSE(frugal::cost::nvml::open("", &why).has_value());
  CHECK(why == "frugal::cost::nvml::open: no library named");
  // A library that is not NVML: the first function it lacks is named.
  CHECK_FALSE(frugal::cost::nvml::open("libm.so.6", &why).has_value());
  CHECK(why == "frugal::cost::nvml::open: libm.so.6 has no nvmlInit_v2");
  // The real driver: here, usually absent; where present, it must read sanely.
  if (auto real = frugal::cost::nvml::open("libnvidia-ml.so.1", &why)) {
    for (unsigned i = 0; i < real->device_count(); ++i) {
      const auto s = real->read(i);
      CHECK(s.total_bytes > 0);
      CHECK(s.utilization <= 1.0);
    }
  } else {
    MESSAGE("no NVIDIA driver here: " << why);
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("nvml: through the loaded library, readings, errors with NVML's message, and a shutdown per init") {
  const fake f;
  REQUIRE(f.h != nullptr);
  const int inits = f.inits(), shutdowns = f.shutdowns();
  f.set(0, 0, 2, 37, 80ull << 30, 3ull << 30);
  {
    std::string why;
    auto n = frugal::cost::nvml::open(FRUGAL_FAKE_NVML, &why);
    REQUIRE_MESSAGE(n.has_value(), why);
    CHECK(n->device_count() == 2);
    const auto s = n->read(1);
    CHECK(s.utilization == doctest::Approx(0.37));
    CHECK(s.used_bytes == 3ull << 30);
    CHECK(s.total_bytes == 80ull << 30);
    CHECK(what_of([&] { (void)n->read(2); }) == "frugal::cost::nvml::read: device 2 of 2");
    f.set(0, 999, 2, 37, 80ull << 30, 3ull << 30);
    CHECK(what_of([&] { (void)n->read(0); }) ==
          "frugal::cost::nvml: nvmlDeviceGetUtilizationRates: Unknown Error (999)");
    f.set(0, 0, 2, 150, 80ull << 30, 3ull << 30);
    CHECK(what_of([&] { (void)n->read(0); }) ==
          "frugal::cost::nvml::read: utilisation 150% is past 100% (device 0)");
    f.set(0, 0, 2, 10, 1ull << 30, 2ull << 30);
    CHECK(what_of([&] { (void)n->read(0); }) ==
          "frugal::cost::nvml::read: 2147483648 bytes used of 1073741824 (device 0)");
    auto moved = std::move(*n);  // the moved-from one shuts nothing down
    CHECK(moved.device_count() == 2);
  }
  CHECK(f.inits() == inits + 1);
  CHECK(f.shutdowns() == shutdowns + 1);
  // A failing nvmlInit_v2 reaches the caller as nullopt with NVML's message, and nothing is shut down.
  f.set(9, 0, 2, 37, 80ull << 30, 3ull << 30);
  std::string why;
  CHECK_FALSE(frugal::cost::nvml::open(FRUGAL_FAKE_NVML, &why).has_value());
  CHECK(why == "frugal::cost::nvml::open: nvmlInit_v2: fake error (9)");
  CHECK(f.shutdowns() == shutdowns + 1);
  f.set(0, 0, 2, 37, 80ull << 30, 3ull << 30);
}
