// hash_key's encoding over argument lists of mixed types, drawn from the fuzzer's bytes. Property: two
// argument lists that differ (in a part's type, width, value, length or in where one part ends and the
// next begins) give different bytes before hashing (key_bytes); equal lists give equal bytes whatever
// container holds their text or scalars; and hash_key is XXH3-128 of exactly those bytes, on the buffered
// and the streaming path alike.
#include <fuzzer/FuzzedDataProvider.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/cache/key.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_key: %s\n", what);
  std::abort();
}

// The kinds of part a list draws from. Each is one type (or one family that hash_key treats as one
// kind: text, a range of one scalar type); `form` picks the container, which must not change the bytes.
enum kind : std::uint8_t {
  k_bool,
  k_char,
  k_i8,
  k_u8,
  k_i16,
  k_u16,
  k_i32,
  k_u32,
  k_i64,
  k_u64,
  k_f32,
  k_f64,
  k_text,     // std::string, string_view, const char* (no NUL inside), a list<char>
  k_u16text,  // std::u16string or a span of char16_t
  k_i32s,     // vector<int32_t>, span, list
  k_u8s,      // vector<uint8_t>, span
  k_pair,     // pair<int32_t, string>
  k_tuple,    // tuple<uint8_t, uint8_t>
  k_nested,   // vector<string>: a sequence of text
  k_count
};

struct part {
  kind k{};
  std::uint64_t bits = 0;           // scalars: the value's bytes
  std::string text;                 // k_text, k_pair's string, k_u16text's bytes
  std::vector<std::int32_t> ints;   // k_i32s, and k_pair's int in ints[0]
  std::vector<std::uint8_t> bytes;  // k_u8s, k_tuple's two members
  std::vector<std::string> texts;   // k_nested
  std::uint8_t form = 0;

  friend bool operator==(const part& a, const part& b) {
    return a.k == b.k && a.bits == b.bits && a.text == b.text && a.ints == b.ints && a.bytes == b.bytes &&
           a.texts == b.texts;  // form is the container, not the value
  }
};

template <class T>
T from_bits(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

part draw(FuzzedDataProvider& fdp) {
  part p;
  p.k = static_cast<kind>(fdp.ConsumeIntegralInRange<int>(0, k_count - 1));
  p.form = fdp.ConsumeIntegral<std::uint8_t>();
  // A scalar's bytes, masked to its width so that equal values compare equal here.
  const auto width = [&]() -> unsigned {
    switch (p.k) {
      case k_bool:
      case k_char:
      case k_i8:
      case k_u8:
        return 1;
      case k_i16:
      case k_u16:
        return 2;
      case k_i32:
      case k_u32:
      case k_f32:
        return 4;
      default:
        return 8;
    }
  }();
  const std::size_t len = fdp.ConsumeIntegralInRange<std::size_t>(0, fdp.ConsumeBool() ? 4 : 300);
  switch (p.k) {
    case k_bool:
      p.bits = fdp.ConsumeBool();
      break;
    case k_text:
      p.text = fdp.ConsumeBytesAsString(len);
      if ((p.form & 3) == 2) p.text.erase(std::remove(p.text.begin(), p.text.end(), '\0'), p.text.end());
      break;
    case k_u16text:
      p.text = fdp.ConsumeBytesAsString(len & ~std::size_t{1});
      if (p.text.size() % 2) p.text.pop_back();
      break;
    case k_i32s:
      for (std::size_t i = 0; i < len; ++i) p.ints.push_back(fdp.ConsumeIntegral<std::int32_t>());
      break;
    case k_u8s:
      p.bytes = fdp.ConsumeBytes<std::uint8_t>(len);
      break;
    case k_pair:
      p.ints.push_back(fdp.ConsumeIntegral<std::int32_t>());
      p.text = fdp.ConsumeBytesAsString(len);
      break;
    case k_tuple:
      p.bytes = {fdp.ConsumeIntegral<std::uint8_t>(), fdp.ConsumeIntegral<std::uint8_t>()};
      break;
    case k_nested:
      for (std::size_t i = 0, n = len % 5; i < n; ++i) p.texts.push_back(fdp.ConsumeRandomLengthString(8));
      break;
    default: {
      p.bits = fdp.ConsumeIntegral<std::uint64_t>();
      if (width < 8) p.bits &= (std::uint64_t{1} << (8 * width)) - 1;
    }
  }
  return p;
}

// Appends one part through the container its form picks.
void append(frugal::key_hasher& h, const part& p) {
  switch (p.k) {
    case k_bool:
      h.append(p.bits != 0);
      return;
    case k_char:
      h.append(from_bits<char>(p.bits));
      return;
    case k_i8:
      h.append(from_bits<std::int8_t>(p.bits));
      return;
    case k_u8:
      h.append(from_bits<std::uint8_t>(p.bits));
      return;
    case k_i16:
      h.append(from_bits<std::int16_t>(p.bits));
      return;
    case k_u16:
      h.append(from_bits<std::uint16_t>(p.bits));
      return;
    case k_i32:
      h.append(from_bits<std::int32_t>(p.bits));
      return;
    case k_u32:
      h.append(from_bits<std::uint32_t>(p.bits));
      return;
    case k_i64:
      h.append(from_bits<std::int64_t>(p.bits));
      return;
    case k_u64:
      h.append(p.bits);
      return;
    case k_f32:
      h.append(from_bits<float>(p.bits));
      return;
    case k_f64:
      h.append(from_bits<double>(p.bits));
      return;
    case k_text:
      switch (p.form & 3) {
        case 0:
          h.append(p.text);
          return;
        case 1:
          h.append(std::string_view(p.text));
          return;
        case 2:
          h.append(p.text.c_str());  // NULs were removed for this form
          return;
        default:
          h.append(std::list<char>(p.text.begin(), p.text.end()));
          return;
      }
    case k_u16text: {
      std::u16string s(p.text.size() / 2, u'\0');
      if (!s.empty()) std::memcpy(s.data(), p.text.data(), s.size() * 2);
      if (p.form & 1)
        h.append(s);
      else
        h.append(std::span<const char16_t>(s));
      return;
    }
    case k_i32s:
      switch (p.form % 3) {
        case 0:
          h.append(p.ints);
          return;
        case 1:
          h.append(std::span<const std::int32_t>(p.ints));
          return;
        default:
          h.append(std::list<std::int32_t>(p.ints.begin(), p.ints.end()));
          return;
      }
    case k_u8s:
      if (p.form & 1)
        h.append(p.bytes);
      else
        h.append(std::span<const std::uint8_t>(p.bytes));
      return;
    case k_pair:
      h.append(std::pair<std::int32_t, std::string>(p.ints[0], p.text));
      return;
    case k_tuple:
      h.append(std::tuple<std::uint8_t, std::uint8_t>(p.bytes[0], p.bytes[1]));
      return;
    case k_nested:
      h.append(p.texts);
      return;
    case k_count:
      break;
  }
  fail("unknown kind");
}

struct part_list {
  std::vector<part> parts;
};
// Each part appended in turn, as hash_key(p0, p1, ...) would, enclosed in the user type's tags.
void hash_append(frugal::key_hasher& h, const part_list& l) {
  for (const part& p : l.parts) append(h, p);
}

part_list draw_list(FuzzedDataProvider& fdp) {
  part_list l;
  const std::size_t n = fdp.ConsumeIntegralInRange<std::size_t>(0, 6);
  for (std::size_t i = 0; i < n; ++i) l.parts.push_back(draw(fdp));
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  part_list a = draw_list(fdp);
  // The second list: often a near copy of the first (one part changed, moved, split or re-containered),
  // which is where an ambiguous encoding would collide.
  part_list b;
  switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      b = draw_list(fdp);
      break;
    case 1:  // the same values in other containers
      b = a;
      for (part& p : b.parts) p.form = fdp.ConsumeIntegral<std::uint8_t>();
      for (part& p : b.parts)
        if (p.k == k_text && (p.form & 3) == 2 && p.text.find('\0') != std::string::npos) p.form = 0;
      break;
    case 2:  // one part replaced
      b = a;
      if (!b.parts.empty())
        b.parts[fdp.ConsumeIntegralInRange<std::size_t>(0, b.parts.size() - 1)] = draw(fdp);
      break;
    case 3:  // text moved across a boundary: ("ab","c") against ("a","bc")
      b = a;
      for (std::size_t i = 0; i + 1 < b.parts.size(); ++i)
        if (b.parts[i].k == k_text && b.parts[i + 1].k == k_text && !b.parts[i].text.empty()) {
          b.parts[i + 1].text.insert(0, 1, b.parts[i].text.back());
          b.parts[i].text.pop_back();
          if (b.parts[i + 1].text.find('\0') != std::string::npos) b.parts[i + 1].form = 0;
          break;
        }
      break;
    default:  // a part dropped or one added
      b = a;
      if (!b.parts.empty() && fdp.ConsumeBool())
        b.parts.erase(b.parts.begin() + static_cast<std::ptrdiff_t>(
                                            fdp.ConsumeIntegralInRange<std::size_t>(0, b.parts.size() - 1)));
      else
        b.parts.push_back(draw(fdp));
  }

  const std::vector<std::byte> ea = frugal::key_bytes(a), eb = frugal::key_bytes(b);
  const bool same = a.parts == b.parts;
  if (same != (ea == eb))
    fail(same ? "equal argument lists gave different bytes" : "distinct argument lists gave equal bytes");

  // hash_key is XXH3-128 (seed 0) of the bytes key_bytes returns, past the 512-byte buffer too.
  const XXH128_hash_t want = XXH3_128bits_withSeed(ea.data(), ea.size(), 0);
  const frugal::key128 got = frugal::hash_key(a);
  if (got.lo != want.low64 || got.hi != want.high64) fail("hash_key is not XXH3-128 of key_bytes");
  if (frugal::hash_key64(a).value != XXH3_64bits_withSeed(ea.data(), ea.size(), 0))
    fail("hash_key64 is not XXH3-64 of key_bytes");
  if (same && frugal::hash_key(b) != got) fail("equal argument lists gave different keys");
  return 0;
}
