// The GGUF reader's metadata, arrays above all, on well-formed headers built from the input (fuzz_gguf takes
// raw bytes, which rarely get past the header to nested arrays). The input drives a GGUF v3 header with no
// tensors and up to 8 keys, each a scalar, a string or an array (nested up to 10 deep, so past
// gguf::max_array_depth), with element types, counts and string lengths that may lie. Properties: the reader
// throws gguf::error naming the file, or every value it returns has the type the bytes said, every array's
// elements have its element type, no nesting goes past max_array_depth, and every typed getter either
// returns or throws gguf::error naming the key.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <frugal/model/gguf.hpp>
#include <string>
#include <vector>

namespace gguf = frugal::gguf;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_gguf_meta: %s\n", what);
  std::abort();
}

template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
  const auto at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void put_string(std::vector<std::uint8_t>& out, FuzzedDataProvider& in) {
  const std::string s = in.ConsumeRandomLengthString(64);
  // Sometimes a length that lies (longer than what follows).
  put<std::uint64_t>(out, in.ConsumeBool() ? s.size() : in.ConsumeIntegral<std::uint64_t>());
  out.insert(out.end(), s.begin(), s.end());
}

// One value of type t (its bytes only, the type is written by the caller).
void put_value(std::vector<std::uint8_t>& out, FuzzedDataProvider& in, std::uint32_t t, int depth) {
  switch (t) {
    case 0:
    case 1:
    case 7:
      put<std::uint8_t>(out, in.ConsumeIntegral<std::uint8_t>());
      return;
    case 2:
    case 3:
      put<std::uint16_t>(out, in.ConsumeIntegral<std::uint16_t>());
      return;
    case 4:
    case 5:
    case 6:
      put<std::uint32_t>(out, in.ConsumeIntegral<std::uint32_t>());
      return;
    case 8:
      put_string(out, in);
      return;
    case 9: {
      const std::uint32_t et = in.ConsumeIntegralInRange<std::uint32_t>(0, 13);  // 13: not a type
      put<std::uint32_t>(out, et);
      const std::uint64_t n = in.ConsumeIntegralInRange<std::uint64_t>(0, 16);
      const bool lie = in.ConsumeBool() && in.ConsumeBool();
      put<std::uint64_t>(out, lie ? in.ConsumeIntegral<std::uint64_t>() : n);
      for (std::uint64_t i = 0; i < n && depth < 10 && in.remaining_bytes() > 0; ++i)
        put_value(out, in, et, depth + 1);
      return;
    }
    default:
      put<std::uint64_t>(out, in.ConsumeIntegral<std::uint64_t>());
      return;
  }
}

int depth_of(const gguf::value& v) {
  if (!v.is_array()) return 0;
  int d = 0;
  for (const auto& e : v.as_array()) d = std::max(d, depth_of(e));
  return d + 1;
}

void check(const gguf::value& v) {
  const auto t = v.type();
  const bool ok =
      (t == gguf::value_type::array && v.is_array()) || (t == gguf::value_type::string && v.is_string()) ||
      (t == gguf::value_type::boolean && v.is_bool()) ||
      ((t == gguf::value_type::f32 || t == gguf::value_type::f64) && v.is_float()) ||
      (t != gguf::value_type::array && t != gguf::value_type::string && t != gguf::value_type::boolean &&
       t != gguf::value_type::f32 && t != gguf::value_type::f64 && v.is_integer());
  if (!ok) fail("a value whose contents are not of its type");
  if (v.is_array())
    for (const auto& e : v.as_array()) {
      if (e.type() != v.element_type()) fail("an array element not of the array's element type");
      check(e);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::uint8_t> img{'G', 'G', 'U', 'F'};
  put<std::uint32_t>(img, 3);
  put<std::uint64_t>(img, 0);
  const std::uint64_t keys = in.ConsumeIntegralInRange<std::uint64_t>(0, 8);
  put<std::uint64_t>(img, keys);
  for (std::uint64_t k = 0; k < keys && in.remaining_bytes() > 0; ++k) {
    put_string(img, in);
    const std::uint32_t t = in.ConsumeIntegralInRange<std::uint32_t>(0, 13);
    put<std::uint32_t>(img, t);
    put_value(img, in, t, 0);
  }
  const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(img.data()), img.size());
  try {
    const gguf::file f(bytes, "fuzz.gguf");
    for (const auto key : f.keys()) {
      const gguf::value& v = f.at(key);
      check(v);
      if (depth_of(v) > gguf::max_array_depth) fail("arrays nested past max_array_depth");
      for (std::uint32_t kind = 0; kind <= 12; ++kind) {
        try {
          const auto elems = f.get_array(key, static_cast<gguf::value_type>(kind));
          if (!v.is_array() || elems.size() != v.as_array().size()) fail("get_array returned another value");
          if (kind == static_cast<std::uint32_t>(gguf::value_type::string)) (void)f.get_strings(key);
        } catch (const gguf::error& e) {
          if (std::string(e.what()).find(gguf::detail::printable_key(key)) == std::string::npos)
            fail("a getter's error without the key");
        }
      }
      try {
        (void)f.get_integer<std::int64_t>(key);
      } catch (const gguf::error&) {
      }
    }
  } catch (const gguf::error& e) {
    if (std::string(e.what()).find("fuzz.gguf") == std::string::npos) fail("an error without the file name");
  }
  return 0;
}
