// The GPU path when this build has no CUDA.
#include "gpu_backend.hpp"

namespace demo {

bool gpu_available(std::string& why) {
  why = "this build has no CUDA (FRUGAL_ENABLE_CUDA=OFF or no toolkit)";
  return false;
}

std::unique_ptr<gpu_backend> make_gpu_backend(bool, const std::vector<gpu_layer>&, std::string& why) {
  gpu_available(why);
  return nullptr;
}

}  // namespace demo
