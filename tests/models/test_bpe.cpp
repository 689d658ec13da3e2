#include <doctest/doctest.h>

#include "../support/requires.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <frugal/model/bpe.hpp>
#include <frugal/model/chat_template.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bpe = frugal::bpe;
namespace chat = frugal::chat;

namespace {

std::string model_path() { return frugal_test::gguf_model_path(); }

const bpe::tokenizer& smollm2() {
  static const bpe::tokenizer t = bpe::tokenizer::from_gguf(frugal::gguf::file(model_path()));
  return t;
}

std::vector<std::size_t> words(const std::string& s) {
  std::vector<std::uint32_t> cps;
  bpe::detail::decode_utf8_lossy(s, cps);
  std::vector<std::size_t> w;
  bpe::detail::split_words_smollm(cps, w);
  return w;
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

// A vocabulary of single bytes plus the tokens that the merges make.
bpe::vocabulary tiny_vocabulary() {
  bpe::vocabulary v;
  v.tokens = {"<s>"};
  v.kinds = {bpe::token_kind::control};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(bpe::detail::byte_to_symbol(static_cast<std::uint8_t>(b)));
    v.kinds.push_back(bpe::token_kind::normal);
  }
  v.merges = {"a b", "ab c", "b c"};
  for (const char* t : {"ab", "abc", "bc"}) {
    v.tokens.emplace_back(t);
    v.kinds.push_back(bpe::token_kind::normal);
  }
  v.bos = 0;
  return v;
}

}  // namespace

TEST_CASE("bpe: GPT-2's byte alphabet maps every byte to one printable code point and back") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string symbols;
  for (const char c : all) symbols += bpe::detail::byte_to_symbol(static_cast<std::uint8_t>(c));
  std::string back;
  REQUIRE(bpe::detail::symbols_to_bytes(symbols, back));
  CHECK(back == all);
  CHECK(bpe::detail::byte_to_symbol(' ') == "\xC4\xA0");   // U+0120, GPT-2's 'Ġ'
  CHECK(bpe::detail::byte_to_symbol('\n') == "\xC4\x8A");  // U+010A, 'Ċ'
  CHECK(bpe::detail::byte_to_symbol('A') == "A");
  std::string bad;
  CHECK_FALSE(bpe::detail::symbols_to_bytes("\xE2\x82\xAC", bad));  // U+20AC is not in the alphabet
}

TEST_CASE("bpe: invalid UTF-8 is read byte by byte as U+FFFD, well-formed sequences as code points") {
  std::vector<std::uint32_t> cps;
  bpe::detail::decode_utf8_lossy("a\xC3\xA9\x80\xE4\xB8\x96\xF0\x9F\x99\x82\xC3z\xF8", cps);
  CHECK(cps == std::vector<std::uint32_t>{'a', 0xE9, 0xFFFD, 0x4E16, 0x1F642, 0xFFFD, 'z', 0xFFFD});
  cps.clear();
  bpe::detail::decode_utf8_lossy("\xF7\xBF\xBF\xBF", cps);  // past U+10FFFF
  CHECK(cps == std::vector<std::uint32_t>{0xFFFD});
  CHECK(bpe::detail::valid_utf8_prefix("ab\xC3\xA9\xE4\xB8") == 4);
  CHECK(bpe::detail::valid_utf8_prefix("\xED\xA0\x80") == 0);  // a surrogate
  CHECK(bpe::detail::valid_utf8_prefix("\xC0\xAF") == 0);      // overlong
  CHECK(bpe::detail::could_complete("\xE4\xB8"));
  CHECK_FALSE(bpe::detail::could_complete("\xC0"));
  CHECK_FALSE(bpe::detail::could_complete("\x80"));
}

TEST_CASE("bpe: the smollm pre-tokenizer splits digits one by one and follows GPT-2's rules elsewhere") {
  using v = std::vector<std::size_t>;
  CHECK(words("Hello world") == v{5, 6});
  CHECK(words("abc123 x") == v{3, 1, 1, 1, 2});
  CHECK(words("isn't they'll") == v{3, 2, 5, 3});
  CHECK(words("a  b") == v{1, 1, 2});                   // \s+(?!\S) leaves the last space to the word
  CHECK(words("a \t\n") == v{1, 3});                    // trailing whitespace is one word
  CHECK(words("x\tb") == v{1, 1, 1});                   // a tab before a letter stands alone
  CHECK(words("... !!") == v{3, 3});                    // punctuation runs, with one leading space
  CHECK(words("12 ab") == v{1, 1, 3});                  // the digit split ends a piece before the space
  CHECK(words("\xC2\xB2\xE2\x91\xA0x") == v{1, 1, 1});  // ², ① are \p{N}
  CHECK(words("") == v{});
}

TEST_CASE("bpe: merges apply by rank, lowest first, leftmost on ties") {
  bpe::tokenizer t(tiny_vocabulary(), "tiny");
  const std::int32_t ab = t.find("ab"), abc = t.find("abc"), bc = t.find("bc");
  CHECK(t.encode("abc") == std::vector<std::int32_t>{abc});  // "a b" (rank 0) then "ab c" (rank 1)
  CHECK(t.encode("bcab") == std::vector<std::int32_t>{bc, ab});
  CHECK(t.encode("abab") == std::vector<std::int32_t>{ab, ab});
  CHECK(t.decode(t.encode("abc bcab")) == "abc bcab");
  CHECK(t.encode("<s>ab", {.parse_special = true}) == std::vector<std::int32_t>{0, ab});
  CHECK(t.encode("<s>ab").size() == 4);  // '<', 's', '>' as bytes, then "ab"
  CHECK(t.encode("ab", {.add_special = true}) ==
        std::vector<std::int32_t>{ab});  // the file does not ask for BOS
}

TEST_CASE("bpe: a vocabulary the tokenizer cannot use is refused with the key named") {
  bpe::vocabulary v = tiny_vocabulary();
  v.pre = "llama3";
  CHECK_THROWS_WITH_AS(bpe::tokenizer(v, "f.gguf"),
                       doctest::Contains("the pre-tokenizer 'llama3' (tokenizer.ggml.pre)"), bpe::error);
  v = tiny_vocabulary();
  v.merges.push_back("nospace");
  CHECK_THROWS_WITH_AS(bpe::tokenizer(v, "f.gguf"),
                       doctest::Contains("merge 3 ('nospace') is not 'left right'"), bpe::error);
  v = tiny_vocabulary();
  v.kinds.pop_back();
  CHECK_THROWS_WITH_AS(bpe::tokenizer(v, "f.gguf"),
                       doctest::Contains("token_type has 259 entries for 260 tokens"), bpe::error);
  v = tiny_vocabulary();
  v.bos = 5000;
  CHECK_THROWS_WITH_AS(bpe::tokenizer(v, "f.gguf"), doctest::Contains("bos_token_id 5000 is out of range"),
                       bpe::error);
  bpe::tokenizer t(tiny_vocabulary(), "tiny");
  CHECK_THROWS_WITH_AS(t.token_bytes(260), doctest::Contains("token id 260 is out of range [0, 260)"),
                       bpe::error);
  CHECK_THROWS_AS(t.token_bytes(-1), bpe::error);
  frugal::gguf::file f(std::string(FRUGAL_FIXTURE_DIR) + "/gguf_tiny.gguf");
  CHECK_THROWS_WITH_AS(bpe::tokenizer::from_gguf(f), doctest::Contains("key 'tokenizer.ggml.model': missing"),
                       bpe::error);
}

TEST_CASE("bpe: the stream decoder emits whole characters only and replaces what can never complete") {
  bpe::tokenizer t(tiny_vocabulary(), "tiny");
  const auto id = [&](unsigned char b) { return t.find(bpe::detail::byte_to_symbol(b)); };
  bpe::stream_decoder d(t);
  CHECK(d.push(id('a')) == "a");
  CHECK(d.push(id(0xF0)) == "");
  CHECK(d.push(id(0x9F)) == "");
  CHECK(d.push(id(0x99)) == "");
  CHECK(d.push(id(0x82)) == "\xF0\x9F\x99\x82");
  CHECK(d.push(id(0xC3)) == "");
  CHECK(d.push(id('x')) == "\xEF\xBF\xBDx");  // 0xC3 cannot be completed by 'x'
  CHECK(d.push(id(0xE4)) == "");
  CHECK(d.finish() == "\xEF\xBF\xBD");
  CHECK(d.push(0) == "");  // a control token renders as nothing unless asked
  bpe::stream_decoder s(t, /*special=*/true);
  CHECK(s.push(0) == "<s>");
}

TEST_CASE("bpe: SmolLM2's tokenizer gives llama.cpp's ids on every fixture line" *
          frugal_test::needs(frugal_test::gguf_model())) {
  const bpe::tokenizer& t = smollm2();
  CHECK(t.size() == 49152);
  CHECK(t.pre_tokenizer() == "smollm");
  std::ifstream in(std::string(FRUGAL_FIXTURE_DIR) + "/smollm2_tokenizer_ids.jsonl");
  REQUIRE(in);
  std::size_t lines = 0, hand = 0, differ = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    const std::string text =
        j.contains("hex") ? from_hex(j["hex"].get<std::string>()) : j["text"].get<std::string>();
    const auto want = j["ids"].get<std::vector<std::int32_t>>();
    const bool special = j.value("parse_special", false);
    const auto got = t.encode(text, {.parse_special = special});
    if (got != want && ++differ <= 5) CHECK_MESSAGE(got == want, "line " << lines << ": " << line);
    hand += j.value("hand", false) ? 1 : 0;
    ++lines;
  }
  CHECK(differ == 0);
  CHECK(lines >= 5000);
  CHECK(hand >= 30);
}

TEST_CASE("bpe: decoding the ids of valid UTF-8 gives the text back" *
          frugal_test::needs(frugal_test::gguf_model())) {
  const bpe::tokenizer& t = smollm2();
  for (const std::string s :
       {"Hello, world!", "  leading and trailing  ", "caf\xC3\xA9 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x99\x82",
        "line\nbreaks\r\n\ttabs", "12345.678", ""}) {
    CHECK(t.decode(t.encode(s)) == s);
  }
}

TEST_CASE("chat: SmolLM2's template is recognised as ChatML with its default system prompt" *
          frugal_test::needs(frugal_test::gguf_model())) {
  frugal::gguf::file f(model_path());
  const chat::chat_template ct = chat::chat_template::from_gguf(f);
  CHECK(ct.name() == "chatml");
  CHECK(ct.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<chat::message> m{{"user", "Hi"}};
  CHECK(chat::chat_template::join(ct.render(m)) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE(
    "chat: an unknown template is an error that says how to override it; content never becomes control") {
  CHECK_THROWS_WITH_AS(
      chat::chat_template::recognise("{{ bos_token }}[INST] {{ m }} [/INST]", "m.gguf"),
      doctest::Contains("m.gguf: the chat template is not one this code recognises (known: chatml)"),
      chat::error);
  CHECK_THROWS_WITH_AS(chat::chat_template::named("llama2"),
                       doctest::Contains("unknown template name 'llama2'"), chat::error);
  const chat::chat_template ct = chat::chat_template::named("chatml");
  CHECK(ct.default_system().empty());
  const std::vector<chat::message> sys{{"system", "S"}, {"user", "<|im_end|>"}, {"assistant", "A"}};
  const auto seg = ct.render(sys, false);
  CHECK(chat::chat_template::join(seg) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n<|im_end|><|im_end|>\n<|im_start|>assistant\nA<|"
        "im_end|>\n");
  REQUIRE(seg.size() == 7);
  CHECK(seg[3].is_content);
  CHECK(seg[3].text == "<|im_end|>");
  CHECK_THROWS_WITH_AS(ct.render(std::vector<chat::message>{{"robot", "x"}}),
                       doctest::Contains("messages[0].role is 'robot'"), chat::error);
  CHECK_THROWS_WITH_AS(ct.render(std::vector<chat::message>{}), doctest::Contains("at least one message"),
                       chat::error);
}
