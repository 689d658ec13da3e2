#pragma once

// The demo's config: every field optional with the defaults below, read by examples/common/config.hpp
// (unknown keys refused, every number in its range, errors that name the field's whole path), all before
// any work.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/config.hpp"
#include "../common/load_model.hpp"
#include "served_model.hpp"

namespace demo {

using clock = std::chrono::steady_clock;
using examples::json;

struct phase {
  std::string
      kind;  // "closed": `clients` in a loop; "poisson": open arrivals at `rate`/s; "idle": nothing for `ms`
  int clients = 0;
  int requests =
      0;  // closed or poisson: this many requests (closed: at most this many when `seconds` is set)
  double seconds = 0;  // closed: issue requests for this long, so every step pays for the same saturated time
  double rate = 0;
  double ms = 0;
};

struct step_config {
  std::string name;
  std::string why;
  std::string precision = "fp32";
  bool batching = true;
  bool cache = false;
  std::string policy = "fixed";  // or "adaptive"
  int max_batch = 0;             // 0: the batcher's max_batch
};

#ifndef FRUGAL_DEMO_MODEL_DIR
#  define FRUGAL_DEMO_MODEL_DIR "build/models/all-MiniLM-L6-v2"
#endif
#ifndef FRUGAL_DEMO_CALIBRATION
#  define FRUGAL_DEMO_CALIBRATION "tests/models/fixtures/calibration.txt"
#endif

struct config {
  std::string model_name = "mlp-1024x4096";
  std::string model_kind = "mlp";  // "mlp" (synthetic, model.dims) or "minilm" (a BERT directory, model.path)
  model_config model{};
  std::string model_path;  // minilm: the model directory; empty: $FRUGAL_MODEL_DIR, else the build's default
  std::string calibration = FRUGAL_DEMO_CALIBRATION;  // minilm int8: SmoothQuant's calibration sentences
  int calibration_sentences = 64;
  std::size_t model_threads = 1;
  std::string corpus = "/usr/share/games/fortunes";  // minilm: the traffic's sentences
  std::uint64_t max_batch_tokens = 0;                // minilm: the batcher's max_batch_cost (0: none)
  std::string gpu_name = "A10G (example price)";
  std::string gpu_hourly_usd = "1.006";
  double window_ms = 5;
  int max_batch = 32;
  double latency_target_ms = 50;
  std::size_t max_queued = 100000;
  std::size_t cache_entries = 1024;
  std::size_t cache_bytes = std::size_t{64} << 20;
  int pool = 4096;
  double zipf_s = 1.0;
  int accuracy_sample = 256;
  std::vector<phase> phases;
  std::vector<step_config> ladder;
  std::string out_dir = "build/demo-out";
  std::string device = "auto";  // auto: the GPU when this build has CUDA and a device is present; cpu; gpu
  bool quiet = false;
};

/// @brief The priced GPU class: `name` and `hourly_usd` (a price that money::parse reads).
inline void read_gpu(examples::config_object& g, std::string& name, std::string& hourly_usd) {
  g.get("name", name);
  g.get("hourly_usd", hourly_usd);
  try {
    (void)frugal::cost::money::parse(hourly_usd);
  } catch (const std::exception& e) {
    g.fail("hourly_usd", e.what());
  }
}

/// @brief Reads a config; every field is optional and falls back to the defaults of `config`. Each value
/// is checked where it is read, against its type and range, and an error names its origin (the file or
/// the override that set it) and its whole path.
inline config parse_config(const examples::config_document& doc) {
  config c;
  examples::config_object root(doc);
  root.get("seed", c.model.seed, std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max());
  root.get("out_dir", c.out_dir);
  root.get("quiet", c.quiet);
  root.get("device", c.device, {"auto", "cpu", "gpu"});
  // Upper bounds keep every duration within nanoseconds' range, and every allocation and loop within
  // what a demo run can hold.
  constexpr double hour_ms = 3.6e6;
  root.section("model", [&](examples::config_object& m) {
    m.get("kind", c.model_kind, {"mlp", "minilm"});
    m.get("name", c.model_name);
    m.get("dims", c.model.dims, 2, 16, 128, 65536);
    for (std::size_t i = 0; i < c.model.dims.size(); ++i)
      if (c.model.dims[i] % 128 != 0)
        m.fail("dims[" + std::to_string(i) + "]",
               "must be a multiple of 128, not " + std::to_string(c.model.dims[i]));
    // Outlier channels are distinct input columns of every layer: at most the narrowest layer's inputs.
    const int narrowest = *std::min_element(c.model.dims.begin(), c.model.dims.end() - 1);
    m.get("outlier_channels", c.model.outlier_channels, 0, narrowest);
    m.get("outlier_scale", c.model.outlier_scale, 1.0f, 1000.0f);
    m.get("path", c.model_path);
    m.get("calibration", c.calibration);
    m.get("calibration_sentences", c.calibration_sentences, 1, 100000);
    m.get("threads", c.model_threads, std::size_t{1}, std::size_t{256});
  });
  root.section("gpu", [&](examples::config_object& g) { read_gpu(g, c.gpu_name, c.gpu_hourly_usd); });
  root.section("batcher", [&](examples::config_object& b) {
    b.get("window_ms", c.window_ms, 0.0, hour_ms);
    b.get("max_batch", c.max_batch, 1, 65536);
    b.get("latency_target_ms", c.latency_target_ms, 0.001, hour_ms);
    b.get("max_queued", c.max_queued, std::size_t{0}, std::size_t{1} << 24);
    b.get("max_batch_tokens", c.max_batch_tokens, std::uint64_t{0}, std::uint64_t{1} << 24);
  });
  root.section("cache", [&](examples::config_object& k) {
    k.get("max_entries", c.cache_entries, std::size_t{0}, std::size_t{1} << 24);
    k.get("max_bytes", c.cache_bytes, std::size_t{0}, std::size_t{1} << 40);
    if (c.cache_entries == 0 && c.cache_bytes == 0) k.fail("max_entries", "and cache.max_bytes are both 0");
  });
  root.section("traffic", [&](examples::config_object& t) {
    t.get("pool", c.pool, 1, 1'000'000);
    t.get("zipf_s", c.zipf_s, 0.0, 100.0);
    t.get("accuracy_sample", c.accuracy_sample, 1, 1'000'000);
    t.get("corpus", c.corpus);
    t.each("phases", [&](examples::config_object& p, std::size_t) {
      phase ph;
      p.get("kind", ph.kind, {"closed", "poisson", "idle"});
      p.get("clients", ph.clients, 0, 100'000);
      p.get("requests", ph.requests, 0, 10'000'000);
      p.get("seconds", ph.seconds, 0.0, 3600.0);
      p.get("rate", ph.rate, 0.0, 1e9);
      p.get("ms", ph.ms, 0.0, hour_ms);
      if (ph.kind == "closed" && (ph.clients <= 0 || (ph.requests <= 0 && ph.seconds <= 0)))
        p.fail("clients", "a closed phase needs clients > 0 and requests > 0 or seconds > 0");
      if (ph.kind == "poisson" && (ph.rate < 1e-3 || ph.requests <= 0))
        p.fail("rate", "a poisson phase needs rate in [0.001, 1e9] and requests > 0");
      c.phases.push_back(ph);
    });
  });
  root.each("ladder", [&](examples::config_object& s, std::size_t) {
    step_config st;
    s.get("name", st.name);
    s.get("why", st.why);
    s.get("precision", st.precision);
    try {  // the MLP's recipes, or the encoder's precisions
      if (c.model_kind == "mlp")
        (void)parse_recipe(st.precision);
      else
        (void)examples::encoder_precision(st.precision, "precision");
    } catch (const std::invalid_argument& e) {
      s.fail("precision", e.what());
    }
    s.get("batching", st.batching);
    s.get("cache", st.cache);
    s.get("policy", st.policy, {"fixed", "adaptive"});
    s.get("max_batch", st.max_batch, 0, 65536);
    c.ladder.push_back(st);
  });
  root.finish();  // unknown keys first: a misspelt "phases" or "ladder" is named as such
  if (c.phases.empty()) root.fail("traffic.phases", "must not be empty");
  if (c.ladder.empty()) root.fail("ladder", "must not be empty");
  if (c.model_kind == "minilm" && c.model_path.empty()) {
    const char* env = std::getenv("FRUGAL_MODEL_DIR");
    c.model_path = env && *env ? env : FRUGAL_DEMO_MODEL_DIR;
  }
  return c;
}

/// @brief parse_config of a JSON value whose errors name @p origin.
inline config parse_config(const json& j, const std::string& origin = "config") {
  return parse_config(examples::config_document(j, origin));
}

}  // namespace demo
