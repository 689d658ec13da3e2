#pragma once

// The demo's config: every field optional with the defaults below, read by examples/common/config.hpp
// (unknown keys refused, every number in its range, errors that name the field's whole path), all before
// any work.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <frugal/cost.hpp>

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

/// @brief The priced GPU class: `name` and `hourly_usd` (a price that money::parse reads, > 0). A value
/// the ledger would refuse is refused here, named by the keys that feed it (gpu.name, gpu.hourly_usd),
/// not at the first step's ledger in the words of its options.
inline void read_gpu(examples::config_object& g, std::string& name, std::string& hourly_usd) {
  g.get("name", name);
  g.get("hourly_usd", hourly_usd);
  if (name.empty()) g.fail("name", "must not be empty");
  frugal::cost::money price;
  try {
    price = frugal::cost::money::parse(hourly_usd);
  } catch (const std::exception& e) {
    g.fail("hourly_usd", e.what());
  }
  if (price.nanos() <= 0) g.fail("hourly_usd", "must be a price > 0, not \"" + hourly_usd + "\"");
  try {  // the ledger's own checks of the class and its price, as a step's ledger will make them
    const frugal::cost::rate r = frugal::cost::rate::per_hour(price);
    frugal::cost::ledger<> check(
        {.prices = {{.gpu_class = name, .on_demand = r}}, .devices = {{.gpu_class = name, .name = "cpu0"}}});
  } catch (const std::exception& e) {
    g.fail("name and " + g.path("hourly_usd"), e.what());
  }
}

/// @brief A name the cost ledger books under (its feature, a Prometheus label): not empty, valid UTF-8
/// without control characters. Refused here, named by @p key of @p o, not by the ledger's words.
inline void check_ledger_name(examples::config_object& o, const char* key, const std::string& name) {
  if (name.empty()) o.fail(key, "must not be empty");
  try {
    frugal::cost::ledger<> check(
        {.prices = {{.gpu_class = "check",
                     .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse("1"))}},
         .devices = {{.gpu_class = "check", .name = "cpu0"}}});
    (void)check.feature(name);
  } catch (const std::exception& e) {
    std::string why = e.what();  // "frugal::cost::ledger::feature: a feature name must ..."
    const auto colon = why.find(": ");
    o.fail(key, "\"" + name + "\" is refused as a cost ledger name: " +
                    (colon == std::string::npos ? why : why.substr(colon + 2)));
  }
}

/// @brief The files and directories a config names, checked before any work: each is refused by its key
/// (a directory where a file goes is said to be one). @p defaulted: the key is not in the config and its
/// value came from @p default_from.
class path_checks {
 public:
  explicit path_checks(const examples::config_document& doc) : doc_(doc), root_(doc) {}

  /// @brief @p path at @p key must be a regular file that can be opened.
  void file(const std::string& key, const std::string& path, const std::string& default_from = "") const {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(where(key, path, default_from), ec);
    if (fs::is_directory(st)) fail(key, path, default_from, "is a directory; a file is expected here");
    std::ifstream probe(path, std::ios::binary);
    if (!probe) fail(key, path, default_from, "cannot be opened: " + reason(st));
  }
  /// @brief @p path at @p key must be a directory holding each of @p files.
  void directory(const std::string& key, const std::string& path,
                 std::initializer_list<const char*> files = {}, const std::string& default_from = "") const {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(where(key, path, default_from), ec);
    if (!fs::exists(st)) fail(key, path, default_from, "does not exist; a directory is expected here");
    if (!fs::is_directory(st))
      fail(key, path, default_from, "is not a directory; a directory is expected here");
    for (const char* f : files) {
      std::ifstream probe(path + "/" + f, std::ios::binary);
      if (!probe || fs::is_directory(path + "/" + f, ec))
        fail(key, path, default_from, std::string("has no readable ") + f);
    }
  }
  /// @brief Whether the config (or an override) sets @p key (a dotted path of objects).
  bool has(const std::string& key) const {
    const examples::json* j = &doc_.root();
    std::size_t i = 0;
    while (i <= key.size()) {
      const auto dot = key.find('.', i);
      const std::string k = key.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
      if (!j->is_object() || !j->contains(k)) return false;
      j = &(*j)[k];
      if (dot == std::string::npos) return true;
      i = dot + 1;
    }
    return false;
  }

 private:
  const std::string& where(const std::string& key, const std::string& path, const std::string& d) const {
    if (path.empty()) fail(key, path, d, "must not be empty");
    return path;
  }
  static std::string reason(const std::filesystem::file_status& st) {
    return std::filesystem::exists(st) ? "permission denied or not a regular file" : "it does not exist";
  }
  [[noreturn]] void fail(const std::string& key, const std::string& path, const std::string& default_from,
                         const std::string& what) const {
    root_.fail(
        key,
        (path.empty() ? std::string() : "\"" + path + "\" ") + what +
            (default_from.empty() ? "" : " (not set in the config: the default from " + default_from + ")"));
  }
  const examples::config_document& doc_;
  examples::config_object root_;
};

/// @brief The files and directories @p c reads (minilm: the model directory, the calibration file where a
/// step needs it, the corpus), checked before any work; throws config_error naming the key.
inline void check_paths(const config& c, const examples::config_document& doc) {
  if (c.model_kind != "minilm") return;  // the MLP is synthetic: it reads no file
  const path_checks p(doc);
  p.directory("model.path", c.model_path, {"config.json", "vocab.txt", "model.safetensors"},
              p.has("model.path") ? "" : "$FRUGAL_MODEL_DIR or the build");
  for (const auto& st : c.ladder)
    if (bert::needs_calibration(bert::parse_precision(st.precision))) {
      p.file("model.calibration", c.calibration, p.has("model.calibration") ? "" : "the build");
      break;
    }
  p.directory("traffic.corpus", c.corpus, {}, p.has("traffic.corpus") ? "" : "the demo");
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
    check_ledger_name(m, "name", c.model_name);
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
    if (s.has("name") && st.name.empty()) s.fail("name", "must not be empty when given");
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
