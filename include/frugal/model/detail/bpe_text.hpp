#pragma once

// The text side of the byte-level BPE tokenizer: UTF-8 in and out, GPT-2's byte alphabet, and the smollm
// pre-tokenizer's word split. Unicode categories come from libutf8proc.

#include <utf8proc.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace bpe::detail {

inline constexpr std::uint32_t replacement = 0xFFFD;

inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The length a UTF-8 lead byte announces, by its high nibble (a stray continuation byte counts as one).
inline constexpr std::size_t utf8_length(std::uint8_t lead) noexcept {
  constexpr std::uint8_t by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return by_nibble[lead >> 4];
}

/// Code points of @p s as llama.cpp reads them: a lead byte with the continuation bytes its form asks for
/// is one code point (overlong forms and surrogates included); any other byte is U+FFFD, and reading goes
/// on at the next byte. Values past U+10FFFF, which no UTF-8 may encode, are U+FFFD too.
inline void decode_utf8_lossy(std::string_view s, std::vector<std::uint32_t>& out) {
  const auto cont = [&](std::size_t i) {
    return i < s.size() && (static_cast<std::uint8_t>(s[i]) & 0xC0) == 0x80;
  };
  const auto byte = [&](std::size_t i) {
    return static_cast<std::uint32_t>(static_cast<std::uint8_t>(s[i]));
  };
  for (std::size_t i = 0; i < s.size();) {
    const std::uint32_t b = byte(i);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(((b & 0x1F) << 6) | (byte(i + 1) & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((b & 0x0F) << 12) | ((byte(i + 1) & 0x3F) << 6) | (byte(i + 2) & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      const std::uint32_t cp = ((b & 0x07) << 18) | ((byte(i + 1) & 0x3F) << 12) |
                               ((byte(i + 2) & 0x3F) << 6) | (byte(i + 3) & 0x3F);
      out.push_back(cp <= 0x10FFFF ? cp : replacement);
      i += 4;
    } else {
      out.push_back(replacement);
      i += 1;
    }
  }
}

/// How many bytes at the start of @p s are whole, well-formed UTF-8 characters (RFC 3629: no overlong
/// forms, no surrogates, nothing past U+10FFFF).
inline std::size_t valid_utf8_prefix(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<std::uint8_t>(s[i]);
    std::size_t n = 0;
    std::uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b < 0x80) {
      n = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    for (std::size_t k = 1; k < n; ++k) {
      const auto c = static_cast<std::uint8_t>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return i;
    }
    i += n;
  }
  return i;
}

/// Whether @p s (starting at a character that is not whole) is a proper beginning of a well-formed character
/// that more bytes could complete.
inline bool could_complete(std::string_view s) noexcept {
  std::string padded(s);
  const auto b = static_cast<std::uint8_t>(s[0]);
  const std::size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (s.size() >= n) return false;
  // Complete it with the smallest continuation bytes the lead allows and ask whether that is well-formed.
  const std::uint8_t second = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
  while (padded.size() < n) padded += static_cast<char>(padded.size() == 1 ? second : 0x80);
  return valid_utf8_prefix(padded) == n;
}

/// GPT-2's byte alphabet: each byte as a printable code point (itself where printable, 256 + k otherwise),
/// in UTF-8.
inline const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[static_cast<std::size_t>(b)], printable ? static_cast<std::uint32_t>(b) : 256u + extra++);
    }
    return t;
  }();
  return table;
}

inline const std::string& byte_to_symbol(std::uint8_t b) { return byte_symbols()[b]; }

/// The bytes that @p text, written in GPT-2's byte alphabet, stands for; false for a character outside it.
inline bool symbols_to_bytes(std::string_view text, std::string& out) {
  static const std::array<std::int16_t, 0x144> inverse = [] {
    std::array<std::int16_t, 0x144> inv;
    inv.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      inv[static_cast<std::size_t>(printable ? b : 256 + extra++)] = static_cast<std::int16_t>(b);
    }
    return inv;
  }();
  std::vector<std::uint32_t> cps;
  decode_utf8_lossy(text, cps);
  for (const std::uint32_t cp : cps) {
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    out += static_cast<char>(inverse[cp]);
  }
  return true;
}

struct cp_class {
  bool letter = false;
  bool number = false;
  bool space = false;
  bool known = false;  // a Unicode scalar value (every one has a category, Cn included)
};

inline cp_class classify(std::uint32_t cp) noexcept {
  cp_class c;
  if (cp > 0x10FFFF) return c;
  c.known = true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      c.letter = true;
      break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      c.number = true;
      break;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      c.space = true;
      break;
    default:
      // Unicode's White_Space property: the separators above plus these controls.
      c.space = (cp >= 0x09 && cp <= 0x0D) || cp == 0x85;
      break;
  }
  return c;
}

// GPT-2's split of cps[begin, end) into word lengths, read as a scanner so that a lookahead never sees past
// the piece: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
inline void split_gpt2(const std::vector<std::uint32_t>& cps, std::size_t begin, std::size_t end,
                       std::vector<std::size_t>& words) {
  const auto at = [&](std::size_t i) { return i < end ? cps[i] : 0xFFFFFFFFu; };
  const auto cls = [&](std::size_t i) { return i < end ? classify(cps[i]) : cp_class{}; };
  const auto other = [](const cp_class& c) { return c.known && !c.space && !c.letter && !c.number; };
  std::size_t start = begin;
  const auto emit = [&](std::size_t stop) {
    if (stop > start) words.push_back(stop - start);
    start = stop;
  };
  for (std::size_t pos = begin; pos < end;) {
    const std::uint32_t cp = cps[pos];
    if (cp == '\'' && pos + 1 < end) {
      const std::uint32_t n1 = at(pos + 1), n2 = at(pos + 2);
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        emit(pos += 2);
        continue;
      }
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
        emit(pos += 3);
        continue;
      }
    }
    const cp_class here = cls(pos);
    const cp_class first = cp == ' ' ? cls(pos + 1) : here;  // the class after an optional leading space
    const std::size_t skip = cp == ' ' ? 1 : 0;
    if (first.letter || first.number || other(first)) {
      pos += skip;
      cp_class c = first;
      const bool letter = first.letter, number = first.number;
      while (letter ? c.letter : number ? c.number : other(c)) c = cls(++pos);
      emit(pos);
      continue;
    }
    std::size_t spaces = 0;
    while (cls(pos + spaces).space) ++spaces;
    if (spaces > 1 && pos + spaces < end) {  // \s+(?!\S): leave the last space to the word after it
      emit(pos += spaces - 1);
      continue;
    }
    if (spaces > 0) {
      emit(pos += spaces);
      continue;
    }
    emit(++pos);  // a code point no rule takes
  }
}

/// The smollm pre-tokenizer: every \p{N} code point is a piece of its own, then GPT-2's split within each
/// piece. Appends the words' lengths in code points.
inline void split_words_smollm(const std::vector<std::uint32_t>& cps, std::vector<std::size_t>& words) {
  std::size_t piece = 0;
  for (std::size_t i = 0; i <= cps.size(); ++i) {
    const bool digit = i < cps.size() && classify(cps[i]).number;
    if (i == cps.size() || digit) {
      if (i > piece) split_gpt2(cps, piece, i, words);
      if (digit) words.push_back(1);
      piece = i + 1;
    }
  }
}

}  // namespace bpe::detail
FRUGAL_END_NAMESPACE
