// frugal::job's checkpoint parser and the shard environment's numbers on arbitrary text. Properties: no UB
// (the sanitizers watch); anything refused is a job::error of the documented code, nothing else escapes;
// an accepted checkpoint keeps its invariants (offset within the input and within its shard's slice, index
// below count) and serializes back to text that parses to the same checkpoint. Half the inputs are re-signed
// with a valid checksum first, so that the field checks behind the checksum are reached.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "frugal/job/checkpoint.hpp"
#include "frugal/job/shard.hpp"

namespace job = frugal::job;

namespace {

[[noreturn]] void fail(const char* what, const std::string& text) {
  std::fprintf(stderr, "fuzz_checkpoint: %s: %.300s\n", what, text.c_str());
  std::abort();
}

void check_checkpoint(const std::string& text) {
  std::optional<job::checkpoint> c;
  try {
    c = job::parse_checkpoint(text, "fuzz");
  } catch (const job::error& e) {
    if (e.code() != frugal::job_errc::checkpoint_corrupt) fail("a refusal of another code", text);
    return;
  }
  if (c->input_offset > c->input.size) fail("input_offset past the input", text);
  if (c->extent) {
    const auto& [s, r] = *c->extent;
    if (s.count == 0 || s.index >= s.count) fail("shard index not below count", text);
    if (r.begin > r.end || r.end > c->input.size) fail("slice outside the input", text);
    if (c->input_offset < r.begin || c->input_offset > r.end) fail("offset outside the slice", text);
  }
  const std::string again = job::serialize_checkpoint(*c);
  try {
    if (!(job::parse_checkpoint(again, "fuzz") == *c)) fail("round trip changed the checkpoint", text);
  } catch (const job::error&) {
    fail("its own serialization refused", again);
  }
}

void check_shard_env(const std::string& index, const std::string& count) {
  const auto env = [&](const char* name) -> const char* {
    return std::string(name) == job::shard_index_env ? index.c_str() : count.c_str();
  };
  try {
    const job::shard s = job::resolve_shard(std::nullopt, std::nullopt, env);
    if (s.count == 0 || s.index >= s.count) fail("resolve_shard gave a bad shard", index + " " + count);
    if (std::to_string(s.index) != index.substr(index.find_first_not_of('0') == std::string::npos
                                                    ? index.size() - 1
                                                    : index.find_first_not_of('0')))
      fail("the index is not the variable's number", index);
  } catch (const job::error& e) {
    if (e.code() != frugal::job_errc::invalid_options) fail("a refusal of another code", index + " " + count);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange(0, 2);
  if (mode == 2) {
    const std::string index = in.ConsumeRandomLengthString(24);
    const std::string count = in.ConsumeBytesAsString(in.remaining_bytes());
    if (index.find('\0') == std::string::npos && count.find('\0') == std::string::npos && !index.empty())
      check_shard_env(index, count);
    return 0;
  }
  std::string text = in.ConsumeBytesAsString(in.remaining_bytes());
  if (mode == 1) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object()) {
      j.erase("checksum");
      j["checksum"] = job::detail::hex64(job::detail::checksum_of(j));
      text = j.dump();
    }
  }
  check_checkpoint(text);
  return 0;
}
