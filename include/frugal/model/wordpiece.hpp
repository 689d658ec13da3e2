#pragma once

// BERT's uncased WordPiece tokenizer, equal to HF tokenizers' BertNormalizer + BertPreTokenizer + WordPiece
// + the [CLS] ... [SEP] template: clean-up of control characters, CJK characters split apart, NFD with the
// accents (Mn) dropped, lower-casing, splitting on whitespace and punctuation, greedy longest-match
// sub-words with "##" continuations, [UNK] for a word that has no split. Unicode data comes from
// libutf8proc. Target frugal::wordpiece (needs utf8proc); the core frugal::frugal does not.

#include <utf8proc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace wordpiece {

/// @brief Options of the tokenizer; the defaults are all-MiniLM-L6-v2's.
struct options {
  /// Sequences longer than this, [CLS] and [SEP] included, are cut (sentence-transformers' max_seq_length).
  std::size_t max_length = 256;
  /// A word of more code points than this becomes [UNK] (HF's max_input_chars_per_word).
  std::size_t max_chars_per_word = 100;
  bool lowercase = true;
  bool strip_accents = true;
  bool split_cjk = true;
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string continuation = "##";
};

namespace detail {

inline bool is_cjk(std::int32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Unicode's White_Space property (what Rust's char::is_whitespace tests).
inline bool is_whitespace(std::int32_t c) noexcept {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The "Other" categories (Cc, Cf, Cs, Co, Cn), except tab, newline and carriage return.
inline bool is_control(std::int32_t c) noexcept {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

// ASCII punctuation (which includes $ + < = > ^ ` | ~) or a Unicode P* category.
inline bool is_punctuation(std::int32_t c) noexcept {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
    return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

inline void append_utf8(std::string& s, std::int32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(c, buf);
  s.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

// Decodes UTF-8; each byte of an invalid sequence becomes U+FFFD, which the clean-up then drops.
inline std::vector<std::int32_t> decode(std::string_view s) {
  std::vector<std::int32_t> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(c);
      i += static_cast<std::size_t>(n);
    }
  }
  return out;
}

}  // namespace detail

/// @brief The tokenizer: a vocabulary (one token per line, the id is the line number) and options.
class tokenizer {
 public:
  /// @brief Reads @p vocab_path (e.g. a model directory's vocab.txt); throws naming the file on failure.
  explicit tokenizer(const std::string& vocab_path, options opt = {}) : opt_(std::move(opt)) {
    std::ifstream in(vocab_path, std::ios::binary);
    if (!in) throw std::runtime_error("frugal::wordpiece: cannot open the vocabulary " + vocab_path);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      vocab_.emplace(line, static_cast<std::int32_t>(tokens_.size()));
      tokens_.push_back(line);
    }
    if (in.bad()) throw std::runtime_error("frugal::wordpiece: error reading " + vocab_path);
    init(vocab_path);
  }
  /// @brief A tokenizer over an in-memory vocabulary (tests).
  tokenizer(std::vector<std::string> tokens, options opt) : opt_(std::move(opt)), tokens_(std::move(tokens)) {
    for (std::size_t i = 0; i < tokens_.size(); ++i) vocab_.emplace(tokens_[i], static_cast<std::int32_t>(i));
    init("the given vocabulary");
  }

  std::size_t vocab_size() const noexcept { return tokens_.size(); }
  const options& opts() const noexcept { return opt_; }
  std::int32_t pad_id() const noexcept { return pad_; }
  const std::string& token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  /// @brief The id of @p token, or -1.
  std::int32_t id(const std::string& token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

  /// @brief The normalized words of @p text, before WordPiece (HF's normalizer and pre-tokenizer).
  std::vector<std::string> words(std::string_view text) const {
    std::vector<std::int32_t> cps;
    for (const std::int32_t c : detail::decode(text)) {
      if (c == 0 || c == 0xFFFD || detail::is_control(c)) continue;
      if (detail::is_whitespace(c)) {
        cps.push_back(' ');
      } else if (opt_.split_cjk && detail::is_cjk(c)) {
        cps.push_back(' ');
        cps.push_back(c);
        cps.push_back(' ');
      } else {
        cps.push_back(c);
      }
    }
    if (opt_.strip_accents) cps = nfd_without_marks(cps);
    std::vector<std::string> out;
    std::string cur;
    const auto flush = [&] {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    };
    for (std::int32_t c : cps) {
      if (opt_.lowercase) c = utf8proc_tolower(c);
      if (detail::is_whitespace(c)) {
        flush();
      } else if (detail::is_punctuation(c)) {
        flush();
        detail::append_utf8(cur, c);
        flush();
      } else {
        detail::append_utf8(cur, c);
      }
    }
    flush();
    return out;
  }

  /// @brief The ids of @p text: [CLS], the word pieces, [SEP], cut to options.max_length.
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids{cls_};
    const std::size_t room = opt_.max_length - 1;
    for (const std::string& w : words(text)) {
      if (!pieces(w, ids, room)) break;
    }
    if (ids.size() > room) ids.resize(room);
    ids.push_back(sep_);
    return ids;
  }

 private:
  void init(const std::string& where) {
    const auto need = [&](const std::string& t) {
      const std::int32_t i = id(t);
      if (i < 0) throw std::runtime_error("frugal::wordpiece: " + where + " has no token " + t);
      return i;
    };
    if (opt_.max_length < 2)
      throw std::invalid_argument("frugal::wordpiece: options.max_length must be >= 2");
    if (opt_.max_chars_per_word == 0)
      throw std::invalid_argument("frugal::wordpiece: options.max_chars_per_word must be > 0");
    unk_ = need(opt_.unk_token);
    cls_ = need(opt_.cls_token);
    sep_ = need(opt_.sep_token);
    pad_ = need(opt_.pad_token);
  }

  static std::vector<std::int32_t> nfd_without_marks(const std::vector<std::int32_t>& cps) {
    std::string s;
    for (const std::int32_t c : cps) detail::append_utf8(s, c);
    utf8proc_uint8_t* d = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()), &d,
                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    if (n < 0) throw std::runtime_error(std::string("frugal::wordpiece: NFD failed: ") + utf8proc_errmsg(n));
    const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(d, &std::free);
    std::vector<std::int32_t> out;
    for (const std::int32_t c :
         detail::decode({reinterpret_cast<const char*>(d), static_cast<std::size_t>(n)}))
      if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN) out.push_back(c);
    return out;
  }

  // Appends the pieces of one word; false once ids holds `room` tokens.
  bool pieces(const std::string& w, std::vector<std::int32_t>& ids, std::size_t room) const {
    std::vector<std::size_t> starts;  // byte offset of every code point, and the end
    for (std::size_t i = 0; i < w.size(); ++i)
      if ((static_cast<unsigned char>(w[i]) & 0xC0) != 0x80) starts.push_back(i);
    const std::size_t chars = starts.size();
    starts.push_back(w.size());
    const std::size_t before = ids.size();
    bool ok = chars <= opt_.max_chars_per_word;
    std::string sub;
    for (std::size_t b = 0; ok && b < chars;) {
      std::size_t e = chars;
      std::int32_t found = -1;
      for (; e > b; --e) {
        sub.assign(b > 0 ? opt_.continuation : std::string());
        sub.append(w, starts[b], starts[e] - starts[b]);
        if (const auto it = vocab_.find(sub); it != vocab_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        ok = false;
        break;
      }
      ids.push_back(found);
      b = e;
    }
    if (!ok) {
      ids.resize(before);
      ids.push_back(unk_);
    }
    return ids.size() < room;
  }

  options opt_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::int32_t unk_ = 0, cls_ = 0, sep_ = 0, pad_ = 0;
};

}  // namespace wordpiece
FRUGAL_END_NAMESPACE
