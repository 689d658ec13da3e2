// The safetensors reader on arbitrary bytes. Property: it either throws safetensors::error with a message
// naming the file, or returns tensors whose bytes lie inside the image and match dtype * shape, and
// floats() on each either converts or throws.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <frugal/model/safetensors.hpp>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  namespace st = frugal::safetensors;
  const std::span<const std::byte> img(reinterpret_cast<const std::byte*>(bytes), size);
  try {
    st::file f(img, "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors()) {
      if (t.data.data() < img.data() || t.data.data() + t.data.size() > img.data() + img.size()) std::abort();
      std::size_t n = 1;
      for (std::size_t d : t.shape) n *= d;
      if (n * static_cast<std::size_t>(frugal::element_bits(t.type) / 8) != t.data.size()) std::abort();
      try {
        const auto v = f.floats(name, t.shape);
        if (v.size() != n) std::abort();
      } catch (const st::error&) {
      }
    }
  } catch (const st::error& e) {
    if (std::string(e.what()).find("fuzz.safetensors") == std::string::npos) std::abort();
  }
  return 0;
}
