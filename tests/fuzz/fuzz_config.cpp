// The demo's config parsing: arbitrary text as a JSON config, optionally preceded by one command-line
// override line ("--a.b=value\n"). Property: examples::config_document (from_text, apply_override) and
// demo::parse_config either throw a std::exception or return a config the demo can run: every duration
// converts to nanoseconds, every count is positive, the price parses, and the batcher and cache accept the
// options it builds.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "demo.hpp"

namespace {

[[noreturn]] void fail(const char* what, double v = 0) {
  std::fprintf(stderr, "fuzz_config: parse_config returned an unusable config: %s (%g)\n", what, v);
  std::abort();
}

// A millisecond count the demo turns into a nanosecond duration must fit in int64 nanoseconds.
bool fits_ns(double ms) { return std::isfinite(ms) && ms >= 0 && ms * 1e6 < 9.2e18; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(bytes), size);
  std::string override_arg;
  if (text.rfind("--", 0) == 0) {
    const auto nl = text.find('\n');
    override_arg = text.substr(0, nl);
    text = nl == std::string::npos ? std::string() : text.substr(nl + 1);
  }
  demo::config c;
  try {
    examples::config_document doc(nlohmann::json::object());
    try {
      doc = examples::config_document::from_text(text, "fuzz");
    } catch (const examples::config_error& e) {
      if (std::string(e.what()).find("fuzz") == std::string::npos) fail("a parse error that names no origin");
    }
    if (!override_arg.empty()) doc.apply_override(override_arg);
    c = demo::parse_config(doc);
  } catch (const std::exception& e) {
    if (std::string(e.what()).empty()) fail("an exception without a message");
    return 0;
  }
  if (c.pool <= 0) fail("pool", c.pool);
  if (!(c.zipf_s >= 0) || !std::isfinite(c.zipf_s)) fail("zipf_s", c.zipf_s);
  if (c.max_batch <= 0) fail("max_batch", c.max_batch);
  if (!fits_ns(c.window_ms)) fail("window_ms", c.window_ms);
  if (!fits_ns(c.latency_target_ms) || c.latency_target_ms <= 0)
    fail("latency_target_ms", c.latency_target_ms);
  if (c.phases.empty() || c.ladder.empty()) fail("empty phases or ladder");
  for (const auto& p : c.phases) {
    if (p.kind == "closed" && (p.clients <= 0 || p.requests <= 0)) fail("closed phase", p.clients);
    if (p.kind == "poisson" && (!(p.rate > 0) || p.requests <= 0)) fail("poisson phase", p.rate);
    if (p.kind == "idle" && !fits_ns(p.ms)) fail("idle phase ms", p.ms);
    if (p.kind != "closed" && p.kind != "poisson" && p.kind != "idle") fail("phase kind");
  }
  if (c.accuracy_sample <= 0) fail("accuracy_sample", c.accuracy_sample);
  for (int d : c.model.dims)
    if (d <= 0 || d > 65536 || d % 128 != 0) fail("model.dims", d);
  if (c.model.outlier_channels < 0 || c.model.outlier_channels > c.model.dims.front())
    fail("model.outlier_channels", c.model.outlier_channels);
  if (!(c.model.outlier_scale >= 1 && c.model.outlier_scale <= 1000))
    fail("model.outlier_scale", c.model.outlier_scale);
  for (const auto& s : c.ladder) {
    if (c.model_kind == "mlp")  // throws if it was not checked
      (void)demo::parse_recipe(s.precision);
    else
      (void)bert::parse_precision(s.precision);
    if (s.policy != "fixed" && s.policy != "adaptive") fail("policy");
  }
  (void)frugal::cost::money::parse(c.gpu_hourly_usd);
  // The options the demo builds from it are accepted by the components.
  try {
    frugal::batcher<int, int> b({.window = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::duration<double, std::milli>(c.window_ms)),
                                 .max_batch = static_cast<std::size_t>(c.max_batch),
                                 .max_queued = c.max_queued});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("the batcher rejects the options");
  }
  return 0;
}
