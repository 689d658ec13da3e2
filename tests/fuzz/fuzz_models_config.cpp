// frugal_server's --models file (examples/server/models_config.hpp) on arbitrary text. Properties: no UB (the
// sanitizers watch); a refusal is a std::invalid_argument (config_error is one) whose message names the file,
// and nothing else escapes; an accepted config keeps the invariants the server relies on: at least one model,
// names of 1-64 of [A-Za-z0-9._:-] given once, every count within its documented range, and a budget that is
// the sum of the estimates when none is given.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>

#include "models_config.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& text) {
  std::fprintf(stderr, "fuzz_models_config: %s: %.300s\n", what, text.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The default directory and every path a config names do not exist here, so embedding entries are refused
  // at their path; chat entries whose path does not exist are too. What is reached is the parsing and every
  // check before the file system.
  try {
    const server::models_config c = server::parse_models_config(
        examples::config_document::from_text(text, "--models fuzz.json"), "fuzz.json", "");
    if (c.models.empty()) fail("accepted a config without models", text);
    std::set<std::string> names;
    for (const server::model_entry& m : c.models) {
      if (!server::detail::valid_model_name(m.name)) fail("accepted an invalid name", text);
      if (!names.insert(m.name).second) fail("accepted a name twice", text);
      if (m.threads < 1 || m.threads > 256 || m.max_running < 1 || m.step_tokens < 1 || m.max_waiting < 1 ||
          m.default_max_tokens < 1 || m.kv_budget_bytes == 0)
        fail("accepted a count out of range", text);
    }
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("fuzz.json") == std::string::npos)
      fail("a refusal without the file", e.what());
  }
  return 0;
}
