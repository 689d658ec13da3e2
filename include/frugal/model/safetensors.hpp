#pragma once

// A reader of the safetensors format: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the data. The header is parsed with nlohmann-json and the
// file is mmapped. Target frugal::safetensors (needs nlohmann-json); the core frugal::frugal does not.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "frugal/element_type.hpp"
#include "frugal/model/detail/mapped_file.hpp"
#include "frugal/namespace.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace safetensors {

/// @brief The name the format gives an element type ("F32", "BF16", ...); "?" for one it does not store here
/// (f8_e4m3, i4).
inline constexpr const char* type_name(element_type t) noexcept {
  switch (t) {
    case element_type::boolean:
      return "BOOL";
    case element_type::u8:
      return "U8";
    case element_type::i8:
      return "I8";
    case element_type::i16:
      return "I16";
    case element_type::u16:
      return "U16";
    case element_type::f16:
      return "F16";
    case element_type::bf16:
      return "BF16";
    case element_type::i32:
      return "I32";
    case element_type::u32:
      return "U32";
    case element_type::f32:
      return "F32";
    case element_type::f64:
      return "F64";
    case element_type::i64:
      return "I64";
    case element_type::u64:
      return "U64";
    case element_type::f8_e4m3:
    case element_type::i4:
      return "?";
  }
  return "?";
}

/// @brief Thrown for every malformed file and every failed request; what() names the file and the tensor.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief One tensor: its element type, its shape and its bytes (inside the mapping; not necessarily
/// aligned).
struct tensor_view {
  std::string name;
  element_type type = element_type::f32;
  std::vector<std::size_t> shape;
  std::span<const std::byte> data;
  std::size_t elements() const noexcept {
    return data.size() / (static_cast<std::size_t>(element_bits(type)) / 8);
  }
};

namespace detail {

inline bool parse_type_name(const std::string& s, element_type& out) {
  static constexpr element_type types[] = {
      element_type::boolean, element_type::u8,   element_type::i8,  element_type::i16, element_type::u16,
      element_type::f16,     element_type::bf16, element_type::i32, element_type::u32, element_type::f32,
      element_type::f64,     element_type::i64,  element_type::u64};
  for (const element_type t : types)
    if (s == type_name(t)) {
      out = t;
      return true;
    }
  return false;
}

inline std::string shape_string(std::span<const std::size_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The largest header the reference implementation accepts.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

/// Parses and checks the whole file image; every tensor's range lies inside it, ranges do not overlap,
/// and together they cover the data section exactly.
inline std::map<std::string, tensor_view> parse(std::span<const std::byte> bytes, const std::string& label,
                                                nlohmann::json* metadata = nullptr) {
  const auto fail = [&](const std::string& what) -> error {
    return error("frugal::safetensors: " + label + ": " + what);
  };
  if (bytes.size() < 8)
    throw fail("truncated: " + std::to_string(bytes.size()) +
               " bytes, shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i)]);
  if (n > max_header_bytes) throw fail("the header length " + std::to_string(n) + " exceeds 100 MB");
  if (n > bytes.size() - 8)
    throw fail("truncated: the header claims " + std::to_string(n) + " bytes but only " +
               std::to_string(bytes.size() - 8) + " follow");
  const auto* h = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json j = nlohmann::json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw fail("the header is not valid JSON");
  if (!j.is_object()) throw fail("the header is not a JSON object");
  const std::span<const std::byte> data = bytes.subspan(8 + n);
  std::map<std::string, tensor_view> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& item : j.items()) {
    const std::string& name = item.key();
    const nlohmann::json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [k, m] : v.items())
        if (!m.is_string()) throw fail("__metadata__." + k + " is not a string");
      if (metadata) *metadata = v;
      continue;
    }
    const auto tfail = [&](const std::string& what) { return fail("tensor '" + name + "': " + what); };
    if (!v.is_object()) throw tfail("the entry is not an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) throw tfail("no dtype string");
    if (sh == v.end() || !sh->is_array()) throw tfail("no shape array");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      throw tfail("data_offsets is not [begin, end]");
    tensor_view t;
    t.name = name;
    if (!parse_type_name(dt->get<std::string>(), t.type))
      throw tfail("unknown dtype '" + dt->get<std::string>() + "'");
    std::uint64_t count = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) throw tfail("a shape entry is not a non-negative integer");
      const auto e = d.get<std::uint64_t>();
      if (e != 0 && count > std::numeric_limits<std::uint64_t>::max() / e) throw tfail("the shape overflows");
      count *= e;
      t.shape.push_back(static_cast<std::size_t>(e));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      throw tfail("data_offsets are not non-negative integers");
    const auto begin = (*off)[0].get<std::uint64_t>(), end = (*off)[1].get<std::uint64_t>();
    if (begin > end)
      throw tfail("data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
    if (end > data.size())
      throw tfail("truncated: its data ends at byte " + std::to_string(end) + " of a " +
                  std::to_string(data.size()) + "-byte data section");
    const std::size_t es = static_cast<std::size_t>(element_bits(t.type)) / 8;
    if (count > std::numeric_limits<std::uint64_t>::max() / es || count * es != end - begin)
      throw tfail("shape " + shape_string(t.shape) + " of " + type_name(t.type) + " needs " +
                  (count > std::numeric_limits<std::uint64_t>::max() / es ? std::string("too many")
                                                                          : std::to_string(count * es)) +
                  " bytes, but data_offsets span " + std::to_string(end - begin));
    t.data = data.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin));
    ranges.emplace_back(begin, end);
    out.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  for (const auto& [b, e] : ranges) {
    if (b < covered)
      throw fail("inconsistent: two tensors' data_offsets overlap at byte " + std::to_string(b));
    if (b > covered)
      throw fail("inconsistent: bytes " + std::to_string(covered) + ".." + std::to_string(b) +
                 " of the data section belong to no tensor");
    covered = e;
  }
  if (covered != data.size())
    throw fail("oversized: the data section has " + std::to_string(data.size()) +
               " bytes but the tensors cover " + std::to_string(covered));
  return out;
}

}  // namespace detail

/// @brief A safetensors file, mmapped read-only and checked in full at open.
class file {
 public:
  /// @brief Opens and checks @p path; throws safetensors::error naming the file for any defect.
  explicit file(const std::string& path)
      : label_(path), map_(model::detail::mapped_file::open<error>(path, "frugal::safetensors")) {
    tensors_ = detail::parse(map_.bytes(), label_, &metadata_);
  }
  /// @brief Checks an in-memory image (kept by the caller for the file's lifetime); @p label names it in
  /// errors.
  file(std::span<const std::byte> image, std::string label) : label_(std::move(label)) {
    tensors_ = detail::parse(image, label_, &metadata_);
  }

  const std::string& path() const noexcept { return label_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, tensor_view>& tensors() const noexcept { return tensors_; }
  const nlohmann::json& metadata() const noexcept { return metadata_; }

  /// @brief The tensor @p name; throws naming the file and the tensor when it is missing.
  const tensor_view& get(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end())
      throw error("frugal::safetensors: " + label_ + ": tensor '" + name + "' is missing");
    return it->second;
  }

  /// @brief The tensor @p name as floats, converted from F32, F16 or BF16, after checking that its shape is
  /// @p shape; a different shape or another dtype throws naming the file and the tensor.
  std::vector<float> floats(const std::string& name, std::span<const std::size_t> shape) const {
    const tensor_view& t = get(name);
    if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
      throw error("frugal::safetensors: " + label_ + ": tensor '" + name + "' has shape " +
                  detail::shape_string(t.shape) + ", expected " + detail::shape_string(shape));
    std::vector<float> out(t.elements());
    const std::byte* p = t.data.data();
    switch (t.type) {
      case element_type::f32:
        std::memcpy(out.data(), p, t.data.size());
        break;
      case element_type::f16:
      case element_type::bf16:
        for (std::size_t i = 0; i < out.size(); ++i) {
          std::uint16_t h;
          std::memcpy(&h, p + 2 * i, 2);
          out[i] = t.type == element_type::f16 ? quant::detail::half_bits_to_float(h)
                                               : quant::detail::bf16_bits_to_float(h);
        }
        break;
      default:
        throw error("frugal::safetensors: " + label_ + ": tensor '" + name + "' has dtype " +
                    type_name(t.type) + ", expected F32, F16 or BF16");
    }
    return out;
  }
  std::vector<float> floats(const std::string& name, std::initializer_list<std::size_t> shape) const {
    return floats(name, std::span<const std::size_t>(shape.begin(), shape.size()));
  }

 private:
  std::string label_;
  model::detail::mapped_file map_;
  std::map<std::string, tensor_view> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

}  // namespace safetensors
FRUGAL_END_NAMESPACE
