#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <frugal/model/safetensors.hpp>
#include <fstream>
#include <string>
#include <vector>

namespace st = frugal::safetensors;

namespace {

// A file image: the 8-byte length, the header, then `data`.
std::vector<std::byte> image(const std::string& header, const std::vector<std::uint8_t>& data) {
  std::vector<std::byte> out(8);
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (auto b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}

std::vector<std::uint8_t> floats_bytes(std::vector<float> v) {
  std::vector<std::uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string error_of(const std::vector<std::byte>& img) {
  try {
    st::file f(img, "test.safetensors");
  } catch (const st::error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string two =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]}})";

std::vector<std::uint8_t> two_data() {
  auto d = floats_bytes({1.0f, -2.0f, 3.5f, 0.25f});
  // bf16 1.5 = 0x3FC0, -4 = 0xC080 (little-endian)
  for (std::uint8_t b : {0xC0, 0x3F, 0x80, 0xC0}) d.push_back(b);
  return d;
}

}  // namespace

TEST_CASE("safetensors: a well-formed image gives each tensor's dtype, shape and values") {
  const auto img = image(two, two_data());
  st::file f(img, "test.safetensors");
  CHECK(f.tensors().size() == 2);
  CHECK(f.metadata()["format"] == "pt");
  CHECK(f.get("a").type == frugal::element_type::f32);
  CHECK(f.get("a").shape == std::vector<std::size_t>{2, 2});
  CHECK(f.floats("a", {2, 2}) == std::vector<float>{1.0f, -2.0f, 3.5f, 0.25f});
  CHECK(f.floats("b", {2}) == std::vector<float>{1.5f, -4.0f});
}

TEST_CASE(
    "safetensors: a missing tensor, a wrong shape and a wrong dtype are errors naming the file and the "
    "tensor") {
  auto d = two_data();
  const std::string h = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                        R"("i":{"dtype":"I32","shape":[1],"data_offsets":[16,20]}})";
  const auto img = image(h, d);
  st::file f(img, "test.safetensors");
  const auto msg = [&](auto&& fn) {
    try {
      fn();
    } catch (const st::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string missing = msg([&] { (void)f.get("nope"); });
  CHECK(has(missing, "test.safetensors"));
  CHECK(has(missing, "'nope' is missing"));
  const std::string shape = msg([&] { (void)f.floats("a", {4}); });
  CHECK(has(shape, "'a' has shape [2, 2], expected [4]"));
  const std::string type = msg([&] { (void)f.floats("i", {1}); });
  CHECK(has(type, "'i' has dtype I32"));
}

TEST_CASE("safetensors: type_name gives the format's names, and ? for a type it does not store") {
  CHECK(std::string(st::type_name(frugal::element_type::f32)) == "F32");
  CHECK(std::string(st::type_name(frugal::element_type::bf16)) == "BF16");
  CHECK(std::string(st::type_name(frugal::element_type::boolean)) == "BOOL");
  CHECK(std::string(st::type_name(frugal::element_type::u64)) == "U64");
  CHECK(std::string(st::type_name(frugal::element_type::i4)) == "?");
}

TEST_CASE("safetensors: truncated files are errors, never reads past the end") {
  CHECK(has(error_of({}), "truncated"));
  CHECK(has(error_of(std::vector<std::byte>(5)), "shorter than the 8-byte header length"));
  auto img = image(two, two_data());
  img.resize(8 + two.size() / 2);
  CHECK(has(error_of(img), "truncated: the header claims"));
  auto cut = image(two, two_data());
  cut.pop_back();
  const std::string e = error_of(cut);
  CHECK(has(e, "tensor 'b': truncated"));
  CHECK(has(e, "test.safetensors"));
}

TEST_CASE("safetensors: trailing bytes, holes, overlaps and size mismatches are inconsistent files") {
  auto d = two_data();
  d.push_back(0);
  CHECK(has(error_of(image(two, d)), "oversized"));
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  CHECK(has(error_of(image(overlap, std::vector<std::uint8_t>(12))), "overlap"));
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  CHECK(has(error_of(image(hole, std::vector<std::uint8_t>(8))), "belong to no tensor"));
  const std::string size = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  CHECK(has(error_of(image(size, std::vector<std::uint8_t>(8))),
            "tensor 'a': shape [3] of F32 needs 12 bytes"));
  const std::string huge = R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})";
  CHECK(has(error_of(image(huge, std::vector<std::uint8_t>(8))), "tensor 'a'"));
  const std::string back = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})";
  CHECK(has(error_of(image(back, {})), "begin 8 > end 0"));
}

TEST_CASE("safetensors: a malformed header is an error that says what is wrong") {
  CHECK(has(error_of(image("{not json", {})), "not valid JSON"));
  CHECK(has(error_of(image("[1,2]", {})), "not a JSON object"));
  CHECK(has(error_of(image(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})",
                           std::vector<std::uint8_t>(4))),
            "tensor 'a': unknown dtype 'F33'"));
  CHECK(has(error_of(image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                           std::vector<std::uint8_t>(4))),
            "not a non-negative integer"));
  CHECK(has(error_of(image(R"({"a":{"dtype":"F32","shape":[1]}})", {})), "data_offsets"));
  CHECK(has(error_of(image(R"({"__metadata__":{"k":1}})", {})), "__metadata__.k"));
  std::vector<std::byte> big(8, std::byte{0xff});
  CHECK(has(error_of(big), "exceeds 100 MB"));
}

TEST_CASE("safetensors: a file on disk is mmapped and checked; a missing file names its path") {
  const auto path =
      std::filesystem::temp_directory_path() / ("frugal_st_" + std::to_string(::getpid()) + ".safetensors");
  const auto img = image(two, two_data());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
    REQUIRE(out.good());
  }
  {
    st::file f(path.string());
    CHECK(f.floats("a", {2, 2})[2] == 3.5f);
    st::file moved = std::move(f);
    CHECK(moved.floats("b", {2})[0] == 1.5f);
  }
  std::filesystem::remove(path);
  try {
    st::file f(path.string());
    FAIL("opening a missing file did not throw");
  } catch (const st::error& e) {
    CHECK(has(e.what(), path.string()));
    CHECK(has(e.what(), "cannot open"));
  }
}
