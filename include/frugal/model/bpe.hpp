#pragma once

// A byte-level BPE tokenizer (the GPT-2 family), read from a GGUF file's tokenizer.ggml.* keys, that gives
// the ids llama.cpp gives for the same file:
// 1. special tokens are cut out of the text first (only when asked: parse_special);
// 2. the pre-tokenizer named by tokenizer.ggml.pre splits the rest into words, by Unicode category
//    (libutf8proc's tables);
// 3. each word's bytes are mapped to GPT-2's printable code points and merged by rank.
// Invalid UTF-8 in the input is read as llama.cpp reads it: each byte that does not start a well-formed
// sequence becomes U+FFFD. Target frugal::bpe (needs libutf8proc).

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/model/detail/bpe_text.hpp"
#include "frugal/model/gguf.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace bpe {

/// @brief Thrown for a vocabulary the tokenizer cannot use and for ids out of range; what() names the key.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief A token's kind, as GGUF's tokenizer.ggml.token_type stores it.
enum class token_kind : std::int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

/// @brief The pre-tokenizers this tokenizer implements, by the names tokenizer.ggml.pre gives them.
/// "smollm" and the files that share its rules (StarCoder's): each digit is a word of its own, then
/// GPT-2's split ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+).
inline constexpr std::string_view supported_pre_tokenizers[] = {
    "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"};

/// @brief Everything the tokenizer reads from a file.
struct vocabulary {
  std::vector<std::string> tokens;
  std::vector<token_kind> kinds;
  /// "left right", in rank order.
  std::vector<std::string> merges;
  std::string pre = "smollm";
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  bool add_bos = false;
  bool add_eos = false;
};

/// @brief What encode() does besides splitting text.
struct encode_options {
  /// Cut control and user-defined tokens' texts out of the input as single ids.
  bool parse_special = false;
  /// Prepend or append the file's BOS/EOS when the file asks for them (add_bos_token, add_eos_token).
  bool add_special = false;
};

class tokenizer {
 public:
  /// @brief Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, bos_token_id, eos_token_id,
  /// add_bos_token, add_eos_token}; throws bpe::error naming the key for anything it cannot use.
  static tokenizer from_gguf(const gguf::file& f) {
    const auto fail = [&](const std::string& what) {
      return error("frugal::bpe: " + f.path() + ": " + what);
    };
    try {
      const std::string_view model = f.get_string("tokenizer.ggml.model");
      if (model != "gpt2")
        throw fail("tokenizer.ggml.model is '" + std::string(model) +
                   "'; only 'gpt2' (byte-level BPE) is supported");
      vocabulary v;
      v.pre = f.contains("tokenizer.ggml.pre") ? std::string(f.get_string("tokenizer.ggml.pre")) : "default";
      for (const auto s : f.get_strings("tokenizer.ggml.tokens")) v.tokens.emplace_back(s);
      if (f.contains("tokenizer.ggml.token_type")) {
        for (const gguf::value& t : f.get_array("tokenizer.ggml.token_type", gguf::value_type::i32)) {
          std::int32_t k = 0;
          (void)t.get_integer(k);
          if (k < 1 || k > 6)
            throw fail("tokenizer.ggml.token_type has the unknown kind " + std::to_string(k));
          v.kinds.push_back(static_cast<token_kind>(k));
        }
      }
      for (const auto s : f.get_strings("tokenizer.ggml.merges")) v.merges.emplace_back(s);
      v.bos = f.get_integer_or<std::int32_t>("tokenizer.ggml.bos_token_id", -1);
      v.eos = f.get_integer_or<std::int32_t>("tokenizer.ggml.eos_token_id", -1);
      v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
      v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
      return tokenizer(std::move(v), f.path());
    } catch (const gguf::error& e) {
      throw error(std::string("frugal::bpe: ") + e.what());
    }
  }

  /// @brief Checks @p v; @p label names it in errors.
  explicit tokenizer(vocabulary v, std::string label = "vocabulary")
      : v_(std::move(v)), label_(std::move(label)) {
    const auto fail = [&](const std::string& what) { return error("frugal::bpe: " + label_ + ": " + what); };
    if (std::find(std::begin(supported_pre_tokenizers), std::end(supported_pre_tokenizers), v_.pre) ==
        std::end(supported_pre_tokenizers))
      throw fail("the pre-tokenizer '" + v_.pre +
                 "' (tokenizer.ggml.pre) is not supported; supported: smollm, "
                 "starcoder, refact, command-r, codeshell, exaone, minerva");
    if (v_.tokens.empty()) throw fail("tokenizer.ggml.tokens is empty");
    if (v_.tokens.size() > static_cast<std::size_t>(INT32_MAX)) throw fail("too many tokens");
    if (v_.kinds.empty()) v_.kinds.assign(v_.tokens.size(), token_kind::normal);
    if (v_.kinds.size() != v_.tokens.size())
      throw fail("tokenizer.ggml.token_type has " + std::to_string(v_.kinds.size()) + " entries for " +
                 std::to_string(v_.tokens.size()) + " tokens");
    const auto n = static_cast<std::int32_t>(v_.tokens.size());
    if (v_.bos >= n || v_.bos < -1)
      throw fail("tokenizer.ggml.bos_token_id " + std::to_string(v_.bos) + " is out of range");
    if (v_.eos >= n || v_.eos < -1)
      throw fail("tokenizer.ggml.eos_token_id " + std::to_string(v_.eos) + " is out of range");
    if (v_.add_bos && v_.bos < 0) throw fail("add_bos_token is set but the file has no bos_token_id");
    if (v_.add_eos && v_.eos < 0) throw fail("add_eos_token is set but the file has no eos_token_id");
    ids_.reserve(v_.tokens.size());
    for (std::int32_t i = 0; i < n; ++i) {
      ids_.emplace(v_.tokens[static_cast<std::size_t>(i)], i);
      const token_kind k = v_.kinds[static_cast<std::size_t>(i)];
      if ((k == token_kind::control || k == token_kind::user_defined || k == token_kind::unknown) &&
          !v_.tokens[static_cast<std::size_t>(i)].empty())
        special_.push_back(i);
    }
    std::stable_sort(special_.begin(), special_.end(),
                     [&](std::int32_t a, std::int32_t b) { return text(a).size() > text(b).size(); });
    ranks_.reserve(v_.merges.size());
    for (std::size_t r = 0; r < v_.merges.size(); ++r) {
      const std::string& m = v_.merges[r];
      const std::size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        throw fail("merge " + std::to_string(r) + " ('" + m + "') is not 'left right'");
      ranks_.emplace(m, static_cast<std::int32_t>(r));
    }
  }

  std::size_t size() const noexcept { return v_.tokens.size(); }
  std::int32_t bos() const noexcept { return v_.bos; }
  std::int32_t eos() const noexcept { return v_.eos; }
  bool adds_bos() const noexcept { return v_.add_bos; }
  const std::string& pre_tokenizer() const noexcept { return v_.pre; }
  /// @brief A token's stored text (GPT-2's printable form of its bytes).
  const std::string& text(std::int32_t id) const { return v_.tokens.at(checked(id)); }
  token_kind kind(std::int32_t id) const { return v_.kinds.at(checked(id)); }
  /// @brief The id of the token whose stored text is @p s, or -1.
  std::int32_t find(std::string_view s) const {
    const auto it = ids_.find(std::string(s));
    return it == ids_.end() ? -1 : it->second;
  }

  /// @brief The ids of @p text.
  std::vector<std::int32_t> encode(std::string_view text, encode_options o = {}) const {
    std::vector<std::int32_t> out;
    if (o.add_special && v_.add_bos) out.push_back(v_.bos);
    std::vector<std::pair<std::string_view, std::int32_t>> parts{{text, -1}};
    if (o.parse_special) parts = split_special(text);
    std::vector<std::uint32_t> cps;
    std::vector<std::size_t> words;
    std::string word;
    for (const auto& [part, id] : parts) {
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      cps.clear();
      detail::decode_utf8_lossy(part, cps);
      words.clear();
      detail::split_words_smollm(cps, words);
      std::size_t at = 0;
      for (const std::size_t len : words) {
        word.clear();
        for (std::size_t i = at; i < at + len; ++i) detail::append_utf8(word, cps[i]);
        at += len;
        merge_word(word, out);
      }
    }
    if (o.add_special && v_.add_eos) out.push_back(v_.eos);
    return out;
  }

  /// @brief The bytes of one token: its text for control and user-defined tokens when @p special, nothing for
  /// them otherwise; byte-decoded text for every other kind.
  std::string token_bytes(std::int32_t id, bool special = false) const {
    const std::string& t = text(id);
    switch (kind(id)) {
      case token_kind::control:
      case token_kind::unknown:
      case token_kind::unused:
        return special ? t : std::string();
      case token_kind::user_defined:
        return t;
      default:
        break;
    }
    std::string out;
    if (!detail::symbols_to_bytes(t, out))
      throw error("frugal::bpe: " + label_ + ": token " + std::to_string(id) + " ('" + t +
                  "') holds a character outside GPT-2's byte alphabet");
    return out;
  }

  /// @brief The bytes of @p ids, concatenated (which may end inside a UTF-8 sequence; see stream_decoder).
  std::string decode(std::span<const std::int32_t> ids, bool special = false) const {
    std::string out;
    for (const std::int32_t id : ids) out += token_bytes(id, special);
    return out;
  }

 private:
  std::size_t checked(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= v_.tokens.size())
      throw error("frugal::bpe: " + label_ + ": token id " + std::to_string(id) + " is out of range [0, " +
                  std::to_string(v_.tokens.size()) + ")");
    return static_cast<std::size_t>(id);
  }

  // Special tokens are cut out longest first, each over every stretch of text still unclaimed.
  std::vector<std::pair<std::string_view, std::int32_t>> split_special(std::string_view text) const {
    std::vector<std::pair<std::string_view, std::int32_t>> parts{{text, -1}};
    for (const std::int32_t id : special_) {
      const std::string& s = v_.tokens[static_cast<std::size_t>(id)];
      std::vector<std::pair<std::string_view, std::int32_t>> next;
      for (const auto& [part, pid] : parts) {
        if (pid >= 0 || part.find(s) == std::string_view::npos) {
          next.emplace_back(part, pid);
          continue;
        }
        std::string_view rest = part;
        for (std::size_t p; (p = rest.find(s)) != std::string_view::npos;) {
          if (p > 0) next.emplace_back(rest.substr(0, p), -1);
          next.emplace_back(std::string_view(s), id);
          rest.remove_prefix(p + s.size());
        }
        if (!rest.empty()) next.emplace_back(rest, -1);
      }
      parts = std::move(next);
    }
    return parts;
  }

  struct symbol {
    std::size_t begin;
    std::size_t len;
    std::int64_t prev;
    std::int64_t next;
  };
  struct bigram {
    std::int32_t rank;
    std::int64_t left;
    std::size_t size;
    bool operator<(const bigram& o) const noexcept {  // the queue pops the lowest rank, then the leftmost
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };

  // Merges the byte-mapped form of one word by rank and appends its ids.
  void merge_word(const std::string& word, std::vector<std::int32_t>& out) const {
    std::string enc;
    for (const char c : word) enc += detail::byte_to_symbol(static_cast<std::uint8_t>(c));
    std::vector<symbol> sym;
    for (std::size_t i = 0; i < enc.size();) {
      const std::size_t n = detail::utf8_length(static_cast<std::uint8_t>(enc[i]));
      sym.push_back(
          {i, n, static_cast<std::int64_t>(sym.size()) - 1, static_cast<std::int64_t>(sym.size()) + 1});
      i += n;
    }
    if (!sym.empty()) sym.back().next = -1;
    std::priority_queue<bigram> queue;
    std::string key;
    const auto add = [&](std::int64_t l, std::int64_t r) {
      if (l < 0 || r < 0) return;
      const symbol& a = sym[static_cast<std::size_t>(l)];
      const symbol& b = sym[static_cast<std::size_t>(r)];
      key.assign(enc, a.begin, a.len);
      key += ' ';
      key.append(enc, b.begin, b.len);
      const auto it = ranks_.find(key);
      if (it != ranks_.end()) queue.push({it->second, l, a.len + b.len});
    };
    for (std::size_t i = 1; i < sym.size(); ++i)
      add(static_cast<std::int64_t>(i) - 1, static_cast<std::int64_t>(i));
    while (!queue.empty()) {
      const bigram g = queue.top();
      queue.pop();
      symbol& l = sym[static_cast<std::size_t>(g.left)];
      if (l.len == 0 || l.next < 0) continue;
      symbol& r = sym[static_cast<std::size_t>(l.next)];
      if (l.len + r.len != g.size) continue;  // one side has merged since this pair was queued
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (l.next >= 0) sym[static_cast<std::size_t>(l.next)].prev = g.left;
      add(l.prev, g.left);
      add(g.left, l.next);
    }
    for (std::int64_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
      const symbol& s = sym[static_cast<std::size_t>(i)];
      const auto it = ids_.find(enc.substr(s.begin, s.len));
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (std::size_t k = s.begin; k < s.begin + s.len;) {  // not in the vocabulary: its bytes one by one
        const std::size_t n = detail::utf8_length(static_cast<std::uint8_t>(enc[k]));
        const auto b = ids_.find(enc.substr(k, n));
        if (b != ids_.end()) out.push_back(b->second);
        k += n;
      }
    }
  }

  vocabulary v_;
  std::string label_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::unordered_map<std::string, std::int32_t> ranks_;
  std::vector<std::int32_t> special_;
};

/// @brief Turns a stream of ids into complete UTF-8: bytes that may still begin a character are held until
/// it completes; bytes that cannot are replaced by U+FFFD. finish() flushes what is held.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& t, bool special = false) : t_(&t), special_(special) {}

  /// @brief The text that @p id completes (possibly empty).
  std::string push(std::int32_t id) {
    held_ += t_->token_bytes(id, special_);
    return take(false);
  }
  /// @brief Whatever is held, with an incomplete character replaced by U+FFFD.
  std::string finish() { return take(true); }

 private:
  std::string take(bool final) {
    std::string out;
    std::size_t i = 0;
    while (i < held_.size()) {
      const std::size_t n = detail::valid_utf8_prefix(std::string_view(held_).substr(i));
      if (n > 0) {
        out.append(held_, i, n);
        i += n;
        continue;
      }
      if (!final && detail::could_complete(std::string_view(held_).substr(i))) break;
      out += "\xEF\xBF\xBD";
      ++i;
    }
    held_.erase(0, i);
    return out;
  }
  const tokenizer* t_;
  bool special_;
  std::string held_;
};

}  // namespace bpe
FRUGAL_END_NAMESPACE
