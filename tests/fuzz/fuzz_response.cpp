// The response cache's parsers and keys on the fuzzer's bytes. Property: completion_codec::parse either
// throws std::invalid_argument from "frugal::completion_codec::parse:" naming a byte within the input, or
// returns a completion whose encoding is exactly the input (the format has one spelling per completion);
// decode agrees with parse; and response_key on a request drawn from the bytes either refuses it with
// std::invalid_argument naming a request field or gives a key that a greedy request keeps whatever its
// seed and top_p.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/cache/response.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_response: %s\n", what);
  std::abort();
}

void check_parse(std::string_view in) {
  std::optional<frugal::completion> parsed;
  try {
    parsed = frugal::completion_codec::parse(in);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.rfind("frugal::completion_codec::parse: ", 0) != 0) fail("an error not from the parser");
    const auto at = what.rfind(" at byte ");
    if (at == std::string::npos) fail("an error without its byte");
    if (std::stoull(what.substr(at + 9)) > in.size()) fail("an error at a byte past the input");
    if (frugal::completion_codec::decode(in)) fail("decode accepted what parse refused");
    return;
  }
  if (frugal::completion_codec::encode(*parsed) != in) fail("a parsed completion encodes to other bytes");
  if (!(frugal::completion_codec::decode(in) == parsed)) fail("decode differs from parse");
}

void check_key(FuzzedDataProvider& fdp) {
  const std::string model = fdp.ConsumeRandomLengthString(16);
  std::vector<frugal::kv_token> prompt(fdp.ConsumeIntegralInRange<std::size_t>(0, 64));
  for (auto& t : prompt) t = fdp.ConsumeIntegral<std::int32_t>();
  std::vector<frugal::kv_token> stop(fdp.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (auto& t : stop) t = fdp.ConsumeIntegral<std::int32_t>();
  frugal::response_request r{.model = model,
                             .prompt = prompt,
                             .temperature = fdp.ConsumeFloatingPoint<float>(),
                             .top_p = fdp.ConsumeFloatingPoint<float>(),
                             .seed = fdp.ConsumeBool()
                                         ? std::optional<std::uint64_t>(fdp.ConsumeIntegral<std::uint64_t>())
                                         : std::nullopt,
                             .max_tokens = fdp.ConsumeIntegralInRange<std::size_t>(0, 1 << 20),
                             .stop = stop};
  std::optional<frugal::key128> k;
  try {
    k = frugal::response_key(r);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find(": request.") == std::string::npos) fail("a refusal that names no field");
    return;
  }
  if (k.has_value() != (r.temperature == 0 || r.seed.has_value())) fail("cacheable is not greedy-or-seeded");
  if (k && r.temperature == 0) {
    frugal::response_request other = r;
    other.seed = 12345;
    other.top_p = 0.5f;
    if (frugal::response_key(other) != k) fail("a greedy request's key depends on its seed or top_p");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_parse(std::string_view(reinterpret_cast<const char*>(data), size));
  FuzzedDataProvider fdp(data, size);
  check_key(fdp);
  return 0;
}
