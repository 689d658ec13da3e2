// The GGUF reader on arbitrary bytes. Property: it either throws gguf::error with a message naming the
// file, or returns metadata that every getter reads without leaving the image and tensors whose bytes lie
// inside it, match their type's block size times their shape, and dequantize (or throw gguf::error).
#include <cstdint>
#include <cstdlib>
#include <frugal/model/gguf.hpp>
#include <string>
#include <vector>

namespace {

std::size_t walk(const frugal::gguf::value& v) {
  std::size_t n = 1;
  if (v.is_array())
    for (const auto& e : v.as_array()) n += walk(e);
  else if (v.is_string())
    n += v.as_string().size();
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  namespace gguf = frugal::gguf;
  const std::span<const std::byte> img(reinterpret_cast<const std::byte*>(bytes), size);
  try {
    gguf::file f(img, "fuzz.gguf");
    for (const auto key : f.keys()) {
      const gguf::value& v = f.at(key);
      (void)walk(v);
      try {
        (void)f.get_integer<std::int32_t>(key);
      } catch (const gguf::error&) {
      }
    }
    for (const auto& t : f.tensors()) {
      if (t.data.data() < img.data() || t.data.data() + t.data.size() > img.data() + img.size()) std::abort();
      const gguf::block_layout l = gguf::layout_of(t.type);
      if (t.elements / l.elements * l.bytes != t.data.size()) std::abort();
      if (!gguf::can_dequantize(t.type) || t.elements > (1u << 20)) continue;
      const std::vector<float> x = gguf::dequantize(t);
      if (x.size() != t.elements) std::abort();
    }
  } catch (const gguf::error& e) {
    if (std::string(e.what()).find("fuzz.gguf") == std::string::npos) std::abort();
  }
  return 0;
}
