#pragma once

// A reader of GGUF (versions 2 and 3), the file format of llama.cpp and ggml: a header, typed metadata
// (key → value, arrays included), tensor infos, then the tensor data at an aligned offset. The file is
// mmapped and checked in full at open: every length, count, offset and type, so that no later access
// reads outside the mapping. Little-endian files only.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "frugal/model/detail/gguf_blocks.hpp"
#include "frugal/model/detail/mapped_file.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace gguf {

/// @brief Thrown for every malformed file and every failed request; what() names the file and the field.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief The metadata value types, as stored.
enum class value_type : std::uint32_t {
  u8,
  i8,
  u16,
  i16,
  u32,
  i32,
  f32,
  boolean,
  string,
  array,
  u64,
  i64,
  f64
};

inline constexpr const char* value_type_name(value_type t) noexcept {
  constexpr const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                   "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < std::size(names) ? names[i] : "?";
}

namespace detail {
struct parser;
}

/// @brief One metadata value. Strings view the mapping; arrays hold their elements.
class value {
 public:
  value_type type() const noexcept { return type_; }
  /// @brief For an array, its elements' type.
  value_type element_type() const noexcept { return element_type_; }

  bool is_unsigned() const noexcept { return std::holds_alternative<std::uint64_t>(v_); }
  bool is_signed() const noexcept { return std::holds_alternative<std::int64_t>(v_); }
  bool is_integer() const noexcept { return is_unsigned() || is_signed(); }
  bool is_float() const noexcept { return std::holds_alternative<double>(v_); }
  bool is_bool() const noexcept { return std::holds_alternative<bool>(v_); }
  bool is_string() const noexcept { return std::holds_alternative<std::string_view>(v_); }
  bool is_array() const noexcept { return std::holds_alternative<std::vector<value>>(v_); }

  /// @brief The integer, when it is representable as T; otherwise false.
  template <class T>
  bool get_integer(T& out) const noexcept {
    if (const auto* u = std::get_if<std::uint64_t>(&v_)) {
      if (*u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
      out = static_cast<T>(*u);
      return true;
    }
    if (const auto* s = std::get_if<std::int64_t>(&v_)) {
      if (*s < 0 && !std::numeric_limits<T>::is_signed) return false;
      if (*s < 0 ? *s < static_cast<std::int64_t>(std::numeric_limits<T>::min())
                 : static_cast<std::uint64_t>(*s) > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
        return false;
      out = static_cast<T>(*s);
      return true;
    }
    return false;
  }
  double as_float() const noexcept { return std::get<double>(v_); }
  bool as_bool() const noexcept { return std::get<bool>(v_); }
  std::string_view as_string() const noexcept { return std::get<std::string_view>(v_); }
  std::span<const value> as_array() const noexcept { return std::get<std::vector<value>>(v_); }

 private:
  friend struct detail::parser;
  value_type type_ = value_type::u8;
  value_type element_type_ = value_type::u8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string_view, std::vector<value>> v_;
};

/// @brief One tensor: name, shape in ggml's order (dims[0] is the row length, the innermost), type, bytes.
struct tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;
  ggml_type type = ggml_type::f32;
  /// @brief Offset of the data from the start of the data section.
  std::uint64_t offset = 0;
  std::uint64_t elements = 0;
  std::span<const std::byte> data;

  std::uint64_t row_length() const noexcept { return dims.empty() ? 1 : dims[0]; }
  std::uint64_t rows() const noexcept { return row_length() == 0 ? 0 : elements / row_length(); }
  std::size_t row_bytes() const noexcept {
    const block_layout l = layout_of(type);
    return static_cast<std::size_t>(row_length() / l.elements * l.bytes);
  }
};

/// @brief The deepest nesting of arrays in metadata that the reader accepts.
inline constexpr int max_array_depth = 8;
/// @brief ggml's limit on a tensor's dimensions.
inline constexpr std::uint32_t max_dims = 4;

namespace detail {

// A key as messages show it: printable ASCII as is, every other byte as \xNN (keys come from the file, and a
// NUL would end the message).
inline std::string printable_key(std::string_view key) {
  std::string out;
  for (const char ch : key) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b < 0x7f && b != '\\') {
      out += ch;
    } else {
      constexpr char hex[] = "0123456789abcdef";
      out += {'\\', 'x', hex[b >> 4], hex[b & 15]};
    }
  }
  return out;
}

struct parser {
  std::span<const std::byte> bytes;
  const std::string& label;
  std::size_t pos = 0;
  std::string where;

  [[noreturn]] void fail(const std::string& what) const {
    throw error("frugal::gguf: " + label + ": " + (where.empty() ? "" : where + ": ") + what);
  }
  std::size_t left() const noexcept { return bytes.size() - pos; }
  void need(std::uint64_t n, const char* what) const {
    if (n > left())
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos) + ", but the file has " + std::to_string(left()) + " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    const auto n = read<std::uint64_t>(what);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(bytes.data() + pos), static_cast<std::size_t>(n));
    pos += static_cast<std::size_t>(n);
    return s;
  }
  static std::size_t scalar_size(value_type t) noexcept {
    switch (t) {
      case value_type::u8:
      case value_type::i8:
      case value_type::boolean:
        return 1;
      case value_type::u16:
      case value_type::i16:
        return 2;
      case value_type::u32:
      case value_type::i32:
      case value_type::f32:
        return 4;
      case value_type::u64:
      case value_type::i64:
      case value_type::f64:
        return 8;
      case value_type::string:
        return 8;  // the length; a lower bound of an element's size
      case value_type::array:
        return 12;  // element type and count
    }
    return 0;
  }
  value_type read_type(const char* what) {
    const auto t = read<std::uint32_t>(what);
    if (t > static_cast<std::uint32_t>(value_type::f64)) fail("unknown value type " + std::to_string(t));
    return static_cast<value_type>(t);
  }
  value read_value(value_type t, int depth) {
    value v;
    v.type_ = t;
    switch (t) {
      case value_type::u8:
        v.v_ = std::uint64_t{read<std::uint8_t>("a u8")};
        break;
      case value_type::i8:
        v.v_ = std::int64_t{read<std::int8_t>("an i8")};
        break;
      case value_type::u16:
        v.v_ = std::uint64_t{read<std::uint16_t>("a u16")};
        break;
      case value_type::i16:
        v.v_ = std::int64_t{read<std::int16_t>("an i16")};
        break;
      case value_type::u32:
        v.v_ = std::uint64_t{read<std::uint32_t>("a u32")};
        break;
      case value_type::i32:
        v.v_ = std::int64_t{read<std::int32_t>("an i32")};
        break;
      case value_type::u64:
        v.v_ = read<std::uint64_t>("a u64");
        break;
      case value_type::i64:
        v.v_ = read<std::int64_t>("an i64");
        break;
      case value_type::f32:
        v.v_ = double{read<float>("an f32")};
        break;
      case value_type::f64:
        v.v_ = read<double>("an f64");
        break;
      case value_type::boolean: {
        const auto b = read<std::uint8_t>("a bool");
        if (b > 1) fail("a bool is " + std::to_string(b) + ", not 0 or 1");
        v.v_ = b == 1;
        break;
      }
      case value_type::string:
        v.v_ = read_string("a string");
        break;
      case value_type::array: {
        if (depth >= max_array_depth) fail("arrays nested deeper than " + std::to_string(max_array_depth));
        v.element_type_ = read_type("an array's element type");
        const auto n = read<std::uint64_t>("an array's length");
        if (n > left() / scalar_size(v.element_type_))
          fail("truncated: an array of " + std::to_string(n) + " " + value_type_name(v.element_type_) +
               " needs more than the " + std::to_string(left()) + " bytes left");
        std::vector<value> items;
        items.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t i = 0; i < n; ++i) items.push_back(read_value(v.element_type_, depth + 1));
        v.v_ = std::move(items);
        break;
      }
    }
    return v;
  }
};

}  // namespace detail

/// @brief A GGUF file, mmapped read-only and checked in full at open.
class file {
 public:
  /// @brief Opens and checks @p path; throws gguf::error naming the file and the field for any defect.
  explicit file(const std::string& path) : label_(path) {
    map_ = model::detail::mapped_file::open<error>(path, "frugal::gguf");
    parse(map_.bytes());
  }
  /// @brief Checks an in-memory image, kept by the caller for the file's lifetime; @p label names it in
  /// errors.
  file(std::span<const std::byte> image, std::string label) : label_(std::move(label)) { parse(image); }

  const std::string& path() const noexcept { return label_; }
  std::uint32_t version() const noexcept { return version_; }
  std::size_t alignment() const noexcept { return alignment_; }
  /// @brief Metadata keys in file order.
  const std::vector<std::string_view>& keys() const noexcept { return keys_; }
  const std::vector<tensor_info>& tensors() const noexcept { return tensors_; }

  /// @brief The value of @p key, or nullptr.
  const value* find(std::string_view key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : &values_[it->second];
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }

  /// @brief The value of @p key; throws naming the file and the key when it is missing.
  const value& at(std::string_view key) const {
    const value* v = find(key);
    if (!v) throw fail(key, "missing");
    return *v;
  }
  std::string_view get_string(std::string_view key) const {
    const value& v = at(key);
    if (!v.is_string()) throw wrong_type(key, v, "a string");
    return v.as_string();
  }
  /// @brief An integer of any stored width that fits T; a missing key, another type or a value out of T's
  /// range throws naming the key.
  template <class T = std::uint64_t>
  T get_integer(std::string_view key) const {
    const value& v = at(key);
    T out{};
    if (!v.is_integer()) throw wrong_type(key, v, "an integer");
    if (!v.get_integer(out)) throw fail(key, "out of range");
    return out;
  }
  template <class T = std::uint64_t>
  T get_integer_or(std::string_view key, T fallback) const {
    return contains(key) ? get_integer<T>(key) : fallback;
  }
  double get_float(std::string_view key) const {
    const value& v = at(key);
    if (!v.is_float()) throw wrong_type(key, v, "a float");
    return v.as_float();
  }
  double get_float_or(std::string_view key, double fallback) const {
    return contains(key) ? get_float(key) : fallback;
  }
  bool get_bool(std::string_view key) const {
    const value& v = at(key);
    if (!v.is_bool()) throw wrong_type(key, v, "a bool");
    return v.as_bool();
  }
  bool get_bool_or(std::string_view key, bool fallback) const {
    return contains(key) ? get_bool(key) : fallback;
  }
  /// @brief An array of @p kind elements; throws naming the key when it is another type.
  std::span<const value> get_array(std::string_view key, value_type kind) const {
    const value& v = at(key);
    if (!v.is_array() || v.element_type() != kind)
      throw wrong_type(key, v, std::string("an array of ") + value_type_name(kind));
    return v.as_array();
  }
  std::vector<std::string_view> get_strings(std::string_view key) const {
    std::vector<std::string_view> out;
    for (const value& e : get_array(key, value_type::string)) out.push_back(e.as_string());
    return out;
  }

  /// @brief The tensor @p name, or nullptr.
  const tensor_info* find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }
  /// @brief The tensor @p name; throws naming the file and the tensor when it is missing.
  const tensor_info& tensor(std::string_view name) const {
    const tensor_info* t = find_tensor(name);
    if (!t) throw error("frugal::gguf: " + label_ + ": tensor '" + std::string(name) + "' is missing");
    return *t;
  }

 private:
  error fail(std::string_view key, const std::string& what) const {
    return error("frugal::gguf: " + label_ + ": key '" + detail::printable_key(key) + "': " + what);
  }
  error wrong_type(std::string_view key, const value& v, const std::string& expected) const {
    std::string found = value_type_name(v.type());
    if (v.is_array()) found += std::string(" of ") + value_type_name(v.element_type());
    return fail(key, "expected " + expected + ", found " + found);
  }

  void parse(std::span<const std::byte> bytes) {
    static_assert(std::endian::native == std::endian::little, "GGUF is read on little-endian hosts only");
    detail::parser p{bytes, label_, 0, {}};
    p.where = "header";
    p.need(4, "the magic");
    if (std::memcmp(bytes.data(), "GGUF", 4) != 0) p.fail("not a GGUF file (no 'GGUF' magic)");
    p.pos = 4;
    version_ = p.read<std::uint32_t>("the version");
    if (version_ == 1) p.fail("version 1 (32-bit counts) is not supported; convert the file to version 3");
    if (version_ != 2 && version_ != 3) {
      const bool swapped = __builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3;
      p.fail("version " + std::to_string(version_) + " is not supported" +
             (swapped ? " (a big-endian file?)" : " (only 2 and 3 are)"));
    }
    const auto n_tensors = p.read<std::uint64_t>("the tensor count");
    const auto n_kv = p.read<std::uint64_t>("the metadata count");
    if (n_kv > p.left() / 12)
      p.fail("the metadata count " + std::to_string(n_kv) + " exceeds what the file holds");
    values_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      p.where = "metadata entry " + std::to_string(i);
      const std::string_view key = p.read_string("a key");
      if (key.empty()) p.fail("an empty key");
      p.where = "key '" + detail::printable_key(key) + "'";
      const value_type t = p.read_type("a value type");
      if (index_.count(key)) p.fail("duplicate key");
      values_.push_back(p.read_value(t, 0));
      index_.emplace(key, values_.size() - 1);
      keys_.push_back(key);
    }
    p.where = "key 'general.alignment'";
    if (const value* a = find("general.alignment")) {
      if (a->type() != value_type::u32)
        p.fail(std::string("expected u32, found ") + value_type_name(a->type()));
      std::uint32_t al = 0;
      (void)a->get_integer(al);
      if (al == 0 || !std::has_single_bit(al)) p.fail(std::to_string(al) + " is not a power of two");
      alignment_ = al;
    }
    p.where = "header";
    if (n_tensors > p.left() / 24)
      p.fail("the tensor count " + std::to_string(n_tensors) + " exceeds what the file holds");
    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      p.where = "tensor info " + std::to_string(i);
      tensor_info t;
      t.name = std::string(p.read_string("a tensor name"));
      p.where = "tensor '" + t.name + "'";
      if (tensor_index_.count(t.name)) p.fail("duplicate tensor name");
      const auto n_dims = p.read<std::uint32_t>("the dimension count");
      if (n_dims == 0 || n_dims > max_dims)
        p.fail(std::to_string(n_dims) + " dimensions (1 to " + std::to_string(max_dims) + " are allowed)");
      std::uint64_t elements = 1;
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        const auto e = p.read<std::uint64_t>("a dimension");
        if (e > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
            (e != 0 && elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / e))
          p.fail("the shape overflows 64 bits");
        elements *= e;
        t.dims.push_back(e);
      }
      const auto code = p.read<std::uint32_t>("the tensor type");
      t.type = static_cast<ggml_type>(code);
      const block_layout l = layout_of(t.type);
      if (l.elements == 0) p.fail("unknown tensor type " + std::to_string(code));
      if (t.dims[0] % l.elements != 0)
        p.fail("a row of " + std::to_string(t.dims[0]) + " elements is not a whole number of " +
               type_name(t.type) + " blocks of " + std::to_string(l.elements));
      t.elements = elements;
      t.offset = p.read<std::uint64_t>("the data offset");
      if (t.offset % alignment_ != 0)
        p.fail("the data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
               std::to_string(alignment_));
      // tensors_ was reserved in full, so the names the index views never move.
      tensors_.push_back(std::move(t));
      tensor_index_.emplace(tensors_.back().name, tensors_.size() - 1);
    }

    p.where = "data section";
    const std::size_t data_start = (p.pos + alignment_ - 1) / alignment_ * alignment_;
    if (tensors_.empty()) return;
    if (data_start > bytes.size())
      p.fail("truncated: the data section starts at byte " + std::to_string(data_start) + " of a " +
             std::to_string(bytes.size()) + "-byte file");
    const std::uint64_t data_size = bytes.size() - data_start;
    std::vector<std::pair<std::uint64_t, std::size_t>> order;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      tensor_info& t = tensors_[i];
      p.where = "tensor '" + t.name + "'";
      const block_layout l = layout_of(t.type);
      const std::uint64_t blocks = t.elements / l.elements;
      if (blocks > std::numeric_limits<std::uint64_t>::max() / l.bytes) p.fail("its size overflows 64 bits");
      const std::uint64_t n = blocks * l.bytes;
      if (t.offset > data_size || n > data_size - t.offset)
        p.fail("truncated: its data ends at byte " +
               (t.offset > std::numeric_limits<std::uint64_t>::max() - n ? std::string("past 2^64")
                                                                         : std::to_string(t.offset + n)) +
               " of a " + std::to_string(data_size) + "-byte data section");
      t.data = bytes.subspan(data_start + static_cast<std::size_t>(t.offset), static_cast<std::size_t>(n));
      order.emplace_back(t.offset, i);
    }
    std::sort(order.begin(), order.end());
    for (std::size_t k = 1; k < order.size(); ++k) {
      const tensor_info& prev = tensors_[order[k - 1].second];
      const tensor_info& cur = tensors_[order[k].second];
      if (!prev.data.empty() && cur.offset < prev.offset + prev.data.size()) {
        p.where = "tensor '" + cur.name + "'";
        p.fail("its data overlaps tensor '" + prev.name + "'");
      }
    }
  }

  std::string label_;
  model::detail::mapped_file map_;
  std::uint32_t version_ = 0;
  std::size_t alignment_ = 32;
  std::vector<value> values_;
  std::vector<std::string_view> keys_;
  std::unordered_map<std::string_view, std::size_t> index_;
  std::vector<tensor_info> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
};

/// @brief Rows [first, first + count) of @p t as floats into @p out (count * row_length() floats). Throws
/// for a type that cannot be dequantized, a range past the tensor or an output of the wrong size.
inline void dequantize_rows(const tensor_info& t, std::uint64_t first, std::uint64_t count,
                            std::span<float> out) {
  const auto fail = [&](const std::string& what) {
    return error("frugal::gguf: tensor '" + t.name + "': " + what);
  };
  if (!can_dequantize(t.type)) throw fail(std::string("cannot dequantize type ") + type_name(t.type));
  if (first > t.rows() || count > t.rows() - first)
    throw fail("rows " + std::to_string(first) + "+" + std::to_string(count) + " past its " +
               std::to_string(t.rows()) + " rows");
  if (out.size() != count * t.row_length())
    throw fail("an output of " + std::to_string(out.size()) + " floats for " + std::to_string(count) +
               " rows of " + std::to_string(t.row_length()));
  detail::dequantize_blocks(t.type, t.data.data() + first * t.row_bytes(), out.data(), out.size());
}

/// @brief The whole tensor as floats.
inline std::vector<float> dequantize(const tensor_info& t) {
  std::vector<float> out(static_cast<std::size_t>(t.elements));
  dequantize_rows(t, 0, t.rows(), out);
  return out;
}

}  // namespace gguf
FRUGAL_END_NAMESPACE
