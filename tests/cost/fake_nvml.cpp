// A stand-in for the driver's libnvidia-ml.so.1 with the functions frugal::cost::nvml uses, returning what
// the test sets through fake_nvml_set, so that the dlopen path (loading, binding, errors, shutdown) runs
// on a machine without a GPU. Not NVML: only its documented C signatures.
#include <cstring>

namespace {
struct state {
  int init_rc = 0;
  int util_rc = 0;
  unsigned count = 2;
  unsigned util = 37;
  unsigned long long total = 80ull << 30, used = 3ull << 30;
  int inits = 0, shutdowns = 0;
} g;
struct device_st {
  unsigned index;
};
device_st devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
}  // namespace

extern "C" {
struct fake_utilization {
  unsigned gpu, memory;
};
struct fake_memory {
  unsigned long long total, free, used;
};

void fake_nvml_set(int init_rc, int util_rc, unsigned count, unsigned util, unsigned long long total,
                   unsigned long long used) {
  g.init_rc = init_rc, g.util_rc = util_rc, g.count = count, g.util = util, g.total = total, g.used = used;
}
int fake_nvml_inits() { return g.inits; }
int fake_nvml_shutdowns() { return g.shutdowns; }

int nvmlInit_v2() {
  if (g.init_rc != 0) return g.init_rc;
  ++g.inits;
  return 0;
}
int nvmlShutdown() {
  ++g.shutdowns;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = g.count;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, device_st** d) {
  if (i >= g.count || i >= 8) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetUtilizationRates(device_st*, fake_utilization* u) {
  if (g.util_rc != 0) return g.util_rc;
  u->gpu = g.util;
  u->memory = 0;
  return 0;
}
int nvmlDeviceGetMemoryInfo(device_st*, fake_memory* m) {
  m->total = g.total;
  m->used = g.used;
  m->free = g.total > g.used ? g.total - g.used : 0;
  return 0;
}
const char* nvmlErrorString(int rc) { return rc == 999 ? "Unknown Error" : "fake error"; }
}
