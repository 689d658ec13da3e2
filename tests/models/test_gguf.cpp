#include <doctest/doctest.h>

#include "../support/requires.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <frugal/model/gguf.hpp>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gguf = frugal::gguf;

namespace {

std::string fixture(const char* name) { return std::string(FRUGAL_FIXTURE_DIR) + "/" + name; }

std::vector<std::byte> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// A GGUF image built field by field, for the error paths.
struct builder {
  std::vector<std::byte> b;
  template <class T>
  builder& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  builder& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    for (char c : s) b.push_back(static_cast<std::byte>(c));
    return *this;
  }
  builder& header(std::uint32_t version, std::uint64_t tensors, std::uint64_t kvs) {
    for (char c : std::string("GGUF")) b.push_back(static_cast<std::byte>(c));
    return put(version).put(tensors).put(kvs);
  }
  builder& kv_u32(const std::string& k, std::uint32_t v) { return str(k).put<std::uint32_t>(4).put(v); }
  builder& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
                  std::uint64_t off) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) put(d);
    return put(type).put(off);
  }
  builder& pad(std::size_t align = 32) {
    while (b.size() % align) b.push_back(std::byte{0});
    return *this;
  }
  builder& zeros(std::size_t n) {
    b.insert(b.end(), n, std::byte{0});
    return *this;
  }
};

std::string error_of(const std::vector<std::byte>& img) {
  try {
    gguf::file f(img, "t.gguf");
  } catch (const gguf::error& e) {
    return e.what();
  }
  return "";
}

std::string model_path() { return frugal_test::gguf_model_path(); }

}  // namespace

TEST_CASE("gguf: every metadata value type reads back as written by ggml's own writer") {
  gguf::file f(fixture("gguf_tiny.gguf"));
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.get_string("general.architecture") == "tiny");
  CHECK(f.get_integer<std::uint8_t>("test.u8") == 200);
  CHECK(f.get_integer<std::int8_t>("test.i8") == -100);
  CHECK(f.get_integer<std::uint16_t>("test.u16") == 60000);
  CHECK(f.get_integer<std::int16_t>("test.i16") == -30000);
  CHECK(f.get_integer<std::uint32_t>("test.u32") == 4000000000u);
  CHECK(f.get_integer<std::int32_t>("test.i32") == -2000000000);
  CHECK(f.get_float("test.f32") == 0.25);
  CHECK(f.get_integer<std::uint64_t>("test.u64") == (std::uint64_t{1} << 63) + 5);
  CHECK(f.get_integer<std::int64_t>("test.i64") == -(std::int64_t{1} << 62));
  CHECK(f.get_float("test.f64") == -1.5e300);
  CHECK(f.get_bool("test.bool"));
  CHECK(f.get_string("test.string") == "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82");
  CHECK(f.get_strings("test.strings") == std::vector<std::string_view>{"a", "", "\xc3\xbc"});
  const auto ints = f.get_array("test.ints", gguf::value_type::i32);
  REQUIRE(ints.size() == 3);
  std::int64_t second = 0;
  CHECK(ints[1].get_integer(second));
  CHECK(second == -2);
  const auto nested = f.get_array("test.nested", gguf::value_type::array);
  REQUIRE(nested.size() == 2);
  CHECK(nested[0].as_array().size() == 2);
  CHECK(nested[1].as_array().size() == 1);
  CHECK(f.keys().front() == "general.architecture");
  CHECK(f.get_integer_or<int>("test.absent", 7) == 7);
}

TEST_CASE("gguf: a getter of the wrong type or range names the file, the key and both types") {
  gguf::file f(fixture("gguf_tiny.gguf"));
  CHECK_THROWS_WITH_AS(f.get_string("test.u32"),
                       doctest::Contains("key 'test.u32': expected a string, found u32"), gguf::error);
  CHECK_THROWS_WITH_AS(f.get_integer<std::uint8_t>("test.u16"),
                       doctest::Contains("key 'test.u16': out of range"), gguf::error);
  CHECK_THROWS_WITH_AS(f.get_integer<std::uint32_t>("test.i8"), doctest::Contains("out of range"),
                       gguf::error);
  CHECK_THROWS_WITH_AS(f.get_strings("test.ints"),
                       doctest::Contains("expected an array of string, found array of i32"), gguf::error);
  CHECK_THROWS_WITH_AS(f.at("no.such.key"), doctest::Contains("gguf_tiny.gguf: key 'no.such.key': missing"),
                       gguf::error);
  CHECK_THROWS_WITH_AS(f.tensor("t.none"), doctest::Contains("tensor 't.none' is missing"), gguf::error);
}

TEST_CASE("gguf: every tensor type dequantizes to gguf.quants.dequantize's values, bit for bit") {
  gguf::file f(fixture("gguf_tiny.gguf"));
  const nlohmann::json expected = read_json(fixture("gguf_tiny.expected.json"));
  CHECK(f.tensors().size() == expected.size());
  for (const auto& [name, e] : expected.items()) {
    CAPTURE(name);
    const gguf::tensor_info& t = f.tensor(name);
    CHECK(std::string(gguf::type_name(t.type)) == e["type"].get<std::string>());
    CHECK(t.dims == e["dims"].get<std::vector<std::uint64_t>>());
    const std::vector<float> got = gguf::dequantize(t);
    const auto want = e["values"].get<std::vector<float>>();
    REQUIRE(got.size() == want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
    CHECK(differ == 0);
    // One row alone equals the same row of the whole tensor.
    std::vector<float> row(static_cast<std::size_t>(t.row_length()));
    gguf::dequantize_rows(t, t.rows() - 1, 1, row);
    CHECK(std::memcmp(row.data(), got.data() + got.size() - row.size(), row.size() * 4) == 0);
  }
}

TEST_CASE(
    "gguf: dequantize_rows refuses a range past the tensor, a wrong output size and a type it cannot read") {
  gguf::file f(fixture("gguf_tiny.gguf"));
  const gguf::tensor_info& t = f.tensor("t.q4_1");
  std::vector<float> out(64);
  CHECK_THROWS_WITH_AS(gguf::dequantize_rows(t, 3, 1, out), doctest::Contains("rows 3+1 past its 3 rows"),
                       gguf::error);
  CHECK_THROWS_WITH_AS(gguf::dequantize_rows(t, 0, 2, out),
                       doctest::Contains("an output of 64 floats for 2 rows"), gguf::error);
  gguf::tensor_info q2 = t;
  q2.type = gguf::ggml_type::q2_k;
  CHECK_THROWS_WITH_AS(gguf::dequantize_rows(q2, 0, 1, out), doctest::Contains("cannot dequantize type Q2_K"),
                       gguf::error);
}

TEST_CASE("gguf: every truncation of a valid file is an error that names the file, never a crash") {
  const std::vector<std::byte> img = read_all(fixture("gguf_tiny.gguf"));
  REQUIRE(error_of(img).empty());
  // The writer pads the last tensor to the alignment; the file needs only up to its last byte of data.
  std::size_t needed = 0;
  {
    gguf::file f(img, "t.gguf");
    for (const auto& t : f.tensors())
      needed = std::max(needed, static_cast<std::size_t>(t.data.data() + t.data.size() - img.data()));
  }
  REQUIRE(needed > img.size() - 32);
  for (std::size_t n = 0; n < img.size(); ++n) {
    CAPTURE(n);
    const std::string e = error_of({img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n)});
    if (n < needed)
      REQUIRE(e.find("frugal::gguf: t.gguf: ") == 0);
    else
      REQUIRE(e.empty());
  }
}

TEST_CASE("gguf: malformed headers, metadata and tensor infos are refused with the field named") {
  const auto hdr = [](std::uint32_t v) { return builder{}.header(v, 0, 0).b; };
  CHECK(error_of(builder{}.str("GGML").b).find("not a GGUF file") != std::string::npos);
  CHECK(error_of(hdr(1)).find("version 1 (32-bit counts) is not supported") != std::string::npos);
  CHECK(error_of(hdr(4)).find("version 4 is not supported (only 2 and 3 are)") != std::string::npos);
  CHECK(error_of(hdr(0x03000000)).find("a big-endian file?") != std::string::npos);
  CHECK(error_of(hdr(2)).empty());

  SUBCASE("metadata") {
    CHECK(error_of(builder{}.header(3, 0, 1'000'000'000).b).find("metadata count 1000000000 exceeds") !=
          std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).str("k").put<std::uint32_t>(13).put<std::uint32_t>(0).b)
              .find("key 'k': unknown value type 13") != std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).str("k").put<std::uint32_t>(8).put<std::uint64_t>(1'000'000).b)
              .find("key 'k': truncated: a string needs 1000000 bytes") != std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).put<std::uint64_t>(~0ull).zeros(16).b)
              .find("truncated: a key needs") != std::string::npos);
    CHECK(error_of(builder{}
                       .header(3, 0, 1)
                       .str("k")
                       .put<std::uint32_t>(9)
                       .put<std::uint32_t>(10)
                       .put<std::uint64_t>(1ull << 60)
                       .zeros(16)
                       .b)
              .find("key 'k': truncated: an array of 1152921504606846976 u64") != std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).str("k").put<std::uint32_t>(7).put<std::uint8_t>(2).b)
              .find("a bool is 2, not 0 or 1") != std::string::npos);
    CHECK(
        error_of(builder{}.header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2).b).find("key 'k': duplicate key") !=
        std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).str("").put<std::uint32_t>(4).put<std::uint32_t>(0).b)
              .find("an empty key") != std::string::npos);
    builder deep;
    deep.header(3, 0, 1).str("k");
    deep.put<std::uint32_t>(9);
    for (int i = 0; i < 10; ++i) deep.put<std::uint32_t>(9).put<std::uint64_t>(1);
    deep.put<std::uint32_t>(4).put<std::uint64_t>(1).put<std::uint32_t>(0);
    CHECK(error_of(deep.b).find("arrays nested deeper than 8") != std::string::npos);
    CHECK(error_of(builder{}.header(3, 0, 1).kv_u32("general.alignment", 24).b)
              .find("key 'general.alignment': 24 is not a power of two") != std::string::npos);
    CHECK(error_of(builder{}
                       .header(3, 0, 1)
                       .str("general.alignment")
                       .put<std::uint32_t>(10)
                       .put<std::uint64_t>(64)
                       .b)
              .find("key 'general.alignment': expected u32, found u64") != std::string::npos);
  }
  SUBCASE("tensor infos") {
    const auto one = [](std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t off,
                        std::size_t data) {
      return builder{}.header(3, 1, 0).tensor("w", std::move(dims), type, off).pad().zeros(data).b;
    };
    CHECK(error_of(one({32, 2}, 3, 0, 40)).empty());
    CHECK(error_of(one({32, 2}, 3, 0, 39))
              .find("tensor 'w': truncated: its data ends at byte 40 of a 39-byte") != std::string::npos);
    CHECK(error_of(one({32, 2}, 5, 0, 40)).find("tensor 'w': unknown tensor type 5") != std::string::npos);
    CHECK(error_of(one({33, 2}, 3, 0, 40))
              .find("a row of 33 elements is not a whole number of Q4_1 blocks of 32") != std::string::npos);
    CHECK(
        error_of(one({32, 2}, 3, 16, 80)).find("the data offset 16 is not a multiple of the alignment 32") !=
        std::string::npos);
    CHECK(error_of(one({32, 2}, 3, 1ull << 63, 40)).find("its data ends at byte") != std::string::npos);
    CHECK(error_of(one({}, 0, 0, 4)).find("0 dimensions (1 to 4 are allowed)") != std::string::npos);
    CHECK(error_of(one({1, 1, 1, 1, 1}, 0, 0, 4)).find("5 dimensions") != std::string::npos);
    CHECK(error_of(one({1ull << 40, 1ull << 40}, 0, 0, 4)).find("the shape overflows 64 bits") !=
          std::string::npos);
    CHECK(error_of(builder{}.header(3, 1'000'000'000'000, 0).b).find("tensor count 1000000000000 exceeds") !=
          std::string::npos);
    CHECK(error_of(builder{}.header(3, 2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad().zeros(64).b)
              .find("tensor 'w': duplicate tensor name") != std::string::npos);
    CHECK(error_of(builder{}.header(3, 2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32).pad().zeros(64).b)
              .empty());
    CHECK(error_of(builder{}.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 0).pad().zeros(64).b)
              .find("its data overlaps tensor") != std::string::npos);
    builder big;
    big.header(3, 1, 0).str("w").put<std::uint32_t>(2).put<std::uint64_t>(1ull << 62).put<std::uint64_t>(4);
    big.put<std::uint32_t>(0).put<std::uint64_t>(0).zeros(16);
    CHECK(error_of(big.b).find("the shape overflows 64 bits") != std::string::npos);
  }
}

TEST_CASE("gguf: opening a missing file or a directory names the path") {
  CHECK_THROWS_WITH_AS(gguf::file("/nonexistent/x.gguf"),
                       doctest::Contains("/nonexistent/x.gguf: cannot open"), gguf::error);
  CHECK_THROWS_WITH_AS(gguf::file(std::string(FRUGAL_FIXTURE_DIR)), doctest::Contains("not a regular file"),
                       gguf::error);
}

TEST_CASE("gguf: SmolLM2-135M-Instruct's file reads as ggml's reader reads it" *
          frugal_test::needs(frugal_test::gguf_model())) {
  gguf::file f(model_path());
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_integer<int>("llama.block_count") == 30);
  CHECK(f.get_integer<int>("llama.embedding_length") == 576);
  CHECK(f.get_integer<int>("llama.attention.head_count_kv") == 3);
  CHECK(f.get_float("llama.rope.freq_base") == 100000.0);
  CHECK(f.get_string("tokenizer.ggml.pre") == "smollm");
  CHECK(f.get_strings("tokenizer.ggml.tokens").size() == 49152);
  CHECK(f.get_strings("tokenizer.ggml.merges").size() == 48900);
  CHECK(f.tensors().size() == 272);
  const nlohmann::json expected = read_json(fixture("gguf_smollm2_rows.json"));
  for (const auto& [name, e] : expected.items()) {
    CAPTURE(name);
    const gguf::tensor_info& t = f.tensor(name);
    CHECK(std::string(gguf::type_name(t.type)) == e["type"].get<std::string>());
    CHECK(t.dims == e["dims"].get<std::vector<std::uint64_t>>());
    for (const auto& [row, values] : e["rows"].items()) {
      const auto want = values.get<std::vector<float>>();
      std::vector<float> got(want.size());
      gguf::dequantize_rows(t, std::stoull(row), 1, got);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    }
  }
}
