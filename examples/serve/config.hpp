#pragma once

// The demo's config: every field optional with the defaults below, unknown keys refused, and errors that
// name the field's full path, all before any work.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "served_model.hpp"

namespace serve {

using clock = std::chrono::steady_clock;
using nlohmann::json;

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

#ifndef FRUGAL_SERVE_MODEL_DIR
#  define FRUGAL_SERVE_MODEL_DIR "build/models/all-MiniLM-L6-v2"
#endif
#ifndef FRUGAL_SERVE_CALIBRATION
#  define FRUGAL_SERVE_CALIBRATION "tests/models/fixtures/calibration.txt"
#endif

struct config {
  std::string model_name = "mlp-1024x4096";
  std::string model_kind = "mlp";  // "mlp" (synthetic, model.dims) or "minilm" (a BERT directory, model.path)
  model_config model{};
  std::string model_path;  // minilm: the model directory; empty: $FRUGAL_MODEL_DIR, else the build's default
  std::string calibration = FRUGAL_SERVE_CALIBRATION;  // minilm int8: SmoothQuant's calibration sentences
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
  std::string out_dir = "serve-out";
  std::string device = "auto";  // auto: the GPU when this build has CUDA and a device is present; cpu; gpu
  bool quiet = false;
};

namespace detail {

[[noreturn]] inline void bad_field(const std::string& key, const std::string& what) {
  throw std::invalid_argument("config: " + key + " " + what);
}

// nlohmann's get<int>() static_casts a double, which is undefined out of range: check first.
template <class T>
void read(const json& v, const std::string& key, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad_field(key, "must be true or false");
    out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) bad_field(key, "must be a string");
    out = v.get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) bad_field(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::abs(d) > static_cast<double>(std::numeric_limits<T>::max()))
      bad_field(key, "must be a finite number");
    out = static_cast<T>(d);
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number()) bad_field(key, "must be an integer");
    std::int64_t i = 0;
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(std::abs(d) < 9007199254740992.0) || d != std::floor(d))
        bad_field(key, "must be an integer in range");
      i = static_cast<std::int64_t>(d);
    } else if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        bad_field(key, "is out of range");
      i = static_cast<std::int64_t>(u);
    } else {
      i = v.get<std::int64_t>();
    }
    if (i < 0 && std::is_unsigned_v<T>) bad_field(key, "must not be negative");
    if constexpr (std::is_signed_v<T>) {
      if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          i > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
        bad_field(key, "is out of range");
    } else if (static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
      bad_field(key, "is out of range");
    }
    out = static_cast<T>(i);
  } else {  // std::vector<int>
    if (!v.is_array()) bad_field(key, "must be an array");
    out.clear();
    for (std::size_t i = 0; i < v.size(); ++i) {
      typename T::value_type e{};
      read(v[i], key + "[" + std::to_string(i) + "]", e);
      out.push_back(e);
    }
  }
}

}  // namespace detail

/// Reads a config; every field is optional and falls back to the defaults of `config`.
// A key that the demo does not read is an error, never silently ignored (a typo would otherwise run
// the default).
inline void check_keys(const json& o, const std::string& where, std::initializer_list<const char*> known) {
  if (!o.is_object())
    throw std::invalid_argument("config: " + (where.empty() ? std::string("the config") : where) +
                                " must be an object");
  for (auto it = o.begin(); it != o.end(); ++it) {  // not a structured binding: clang 14 cannot capture one
    const std::string& k = it.key();
    if (std::none_of(known.begin(), known.end(), [&](const char* n) { return k == n; }))
      throw std::invalid_argument("config: unknown key \"" + (where.empty() ? k : where + "." + k) + "\"");
  }
}

inline config parse_config(const json& j) {
  config c;
  auto get = [](const json& o, const char* key, auto& field) {
    if (o.is_object() && o.contains(key)) detail::read(o.at(key), key, field);
  };
  check_keys(j, "",
             {"seed", "out_dir", "quiet", "device", "model", "gpu", "batcher", "cache", "traffic", "ladder"});
  if (j.contains("model"))
    check_keys(j["model"], "model",
               {"kind", "name", "dims", "outlier_channels", "outlier_scale", "path", "calibration",
                "calibration_sentences", "threads"});
  if (j.contains("gpu")) check_keys(j["gpu"], "gpu", {"name", "hourly_usd"});
  if (j.contains("batcher"))
    check_keys(j["batcher"], "batcher",
               {"window_ms", "max_batch", "latency_target_ms", "max_queued", "max_batch_tokens"});
  if (j.contains("cache")) check_keys(j["cache"], "cache", {"max_entries", "max_bytes"});
  if (j.contains("traffic")) {
    check_keys(j["traffic"], "traffic", {"pool", "zipf_s", "accuracy_sample", "phases", "corpus"});
    if (j["traffic"].contains("phases") && j["traffic"]["phases"].is_array())
      for (std::size_t i = 0; i < j["traffic"]["phases"].size(); ++i)
        check_keys(j["traffic"]["phases"][i], "traffic.phases[" + std::to_string(i) + "]",
                   {"kind", "clients", "requests", "seconds", "rate", "ms"});
  }
  if (j.contains("ladder") && j["ladder"].is_array())
    for (std::size_t i = 0; i < j["ladder"].size(); ++i)
      check_keys(j["ladder"][i], "ladder[" + std::to_string(i) + "]",
                 {"name", "why", "precision", "batching", "cache", "policy", "max_batch"});
  get(j, "seed", c.model.seed);
  get(j, "out_dir", c.out_dir);
  get(j, "quiet", c.quiet);
  get(j, "device", c.device);
  if (j.contains("model")) {
    const auto& m = j["model"];
    get(m, "name", c.model_name);
    get(m, "dims", c.model.dims);
    get(m, "outlier_channels", c.model.outlier_channels);
    get(m, "outlier_scale", c.model.outlier_scale);
    get(m, "kind", c.model_kind);
    get(m, "path", c.model_path);
    get(m, "calibration", c.calibration);
    get(m, "calibration_sentences", c.calibration_sentences);
    get(m, "threads", c.model_threads);
  }
  if (j.contains("gpu")) {
    get(j["gpu"], "name", c.gpu_name);
    get(j["gpu"], "hourly_usd", c.gpu_hourly_usd);
  }
  if (j.contains("batcher")) {
    const auto& b = j["batcher"];
    get(b, "window_ms", c.window_ms);
    get(b, "max_batch", c.max_batch);
    get(b, "latency_target_ms", c.latency_target_ms);
    get(b, "max_queued", c.max_queued);
    get(b, "max_batch_tokens", c.max_batch_tokens);
  }
  if (j.contains("cache")) {
    get(j["cache"], "max_entries", c.cache_entries);
    get(j["cache"], "max_bytes", c.cache_bytes);
  }
  if (j.contains("traffic")) {
    const auto& t = j["traffic"];
    get(t, "pool", c.pool);
    get(t, "zipf_s", c.zipf_s);
    get(t, "accuracy_sample", c.accuracy_sample);
    get(t, "corpus", c.corpus);
    if (t.contains("phases")) {
      if (!t["phases"].is_array()) detail::bad_field("traffic.phases", "must be an array");
      for (const auto& p : t["phases"]) {
        phase ph;
        get(p, "kind", ph.kind);
        get(p, "clients", ph.clients);
        get(p, "requests", ph.requests);
        get(p, "seconds", ph.seconds);
        get(p, "rate", ph.rate);
        get(p, "ms", ph.ms);
        c.phases.push_back(ph);
      }
    }
  }
  if (j.contains("ladder") && !j["ladder"].is_array()) detail::bad_field("ladder", "must be an array");
  if (j.contains("ladder"))
    for (const auto& s : j["ladder"]) {
      step_config st;
      get(s, "name", st.name);
      get(s, "why", st.why);
      get(s, "precision", st.precision);
      get(s, "batching", st.batching);
      get(s, "cache", st.cache);
      get(s, "policy", st.policy);
      get(s, "max_batch", st.max_batch);
      c.ladder.push_back(st);
    }

  auto bad = [](const std::string& what) { throw std::invalid_argument("config: " + what); };
  // Upper bounds keep every duration within nanoseconds' range and the input pool within memory.
  constexpr double hour_ms = 3.6e6;
  if (c.pool <= 0 || c.pool > 1'000'000) bad("traffic.pool must be in 1..1000000");
  if (c.max_batch > 65536) bad("batcher.max_batch must be at most 65536");
  if (c.window_ms > hour_ms) bad("batcher.window_ms must be at most an hour");
  if (c.latency_target_ms > hour_ms) bad("batcher.latency_target_ms must be at most an hour");
  for (int d : c.model.dims)
    if (d > 65536) bad("model.dims entries must be at most 65536");
  if (c.zipf_s < 0) bad("traffic.zipf_s must be >= 0");
  if (c.max_batch <= 0) bad("batcher.max_batch must be > 0");
  if (c.window_ms < 0) bad("batcher.window_ms must be >= 0");
  if (c.latency_target_ms <= 0) bad("batcher.latency_target_ms must be > 0");
  if (c.phases.empty()) bad("traffic.phases must not be empty");
  if (c.ladder.empty()) bad("ladder must not be empty");
  for (std::size_t i = 0; i < c.phases.size(); ++i) {
    const auto& p = c.phases[i];
    const std::string at = "traffic.phases[" + std::to_string(i) + "]";
    if (p.requests > 10'000'000 || p.clients > 100'000)
      bad(at + ": at most 10M requests and 100k clients a phase");
    if (p.requests < 0) bad(at + ".requests must be >= 0");
    if (p.kind == "closed") {
      if (p.clients <= 0 || (p.requests <= 0 && p.seconds <= 0))
        bad(at + ": a closed phase needs clients > 0 and requests > 0 or seconds > 0");
      if (p.seconds < 0 || p.seconds > 3600) bad(at + ".seconds must be in [0, 3600]");
    } else if (p.kind == "poisson") {
      if (p.rate < 1e-3 || p.rate > 1e9 || p.requests <= 0)
        bad(at + ": a poisson phase needs rate in [0.001, 1e9] and requests > 0");
    } else if (p.kind == "idle") {
      if (p.ms < 0 || p.ms > hour_ms) bad(at + ": an idle phase needs ms in [0, one hour]");
    } else {
      bad(at + ".kind \"" + p.kind + "\" is not closed, poisson or idle");
    }
  }
  for (std::size_t i = 0; i < c.ladder.size(); ++i) {
    const auto& s = c.ladder[i];
    if (c.model_kind == "mlp") (void)parse_precision(s.precision);
    if (s.max_batch < 0 || s.max_batch > 65536)
      bad("ladder[" + std::to_string(i) + "].max_batch must be in 0..65536");
    if (s.policy != "fixed" && s.policy != "adaptive")
      bad("ladder[" + std::to_string(i) + "].policy \"" + s.policy + "\" is not fixed or adaptive");
  }
  if (c.model_kind != "mlp" && c.model_kind != "minilm")
    bad("model.kind \"" + c.model_kind + "\" is not mlp or minilm");
  if (c.model_kind == "minilm") {
    for (std::size_t i = 0; i < c.ladder.size(); ++i) {  // the encoder's own names (bert::parse_precision)
      try {
        (void)bert::parse_precision(c.ladder[i].precision);
      } catch (const std::invalid_argument& e) {
        bad("ladder[" + std::to_string(i) + "]." + e.what());
      }
    }
    if (c.calibration_sentences <= 0 || c.calibration_sentences > 100000)
      bad("model.calibration_sentences must be in 1..100000");
    if (c.model_threads == 0 || c.model_threads > 256) bad("model.threads must be in 1..256");
    if (c.model_path.empty()) {
      const char* env = std::getenv("FRUGAL_MODEL_DIR");
      c.model_path = env && *env ? env : FRUGAL_SERVE_MODEL_DIR;
    }
  }
  if (c.device != "auto" && c.device != "cpu" && c.device != "gpu")
    bad("device \"" + c.device + "\" is not auto, cpu or gpu");
  (void)frugal::cost::money::parse(c.gpu_hourly_usd);
  return c;
}

/// Applies `--a.b.c=value` overrides to a JSON config; the value is read as JSON, or else as a string.
inline void apply_override(json& j, const std::string& arg) {
  const auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos)
    throw std::invalid_argument("command line: \"" + arg + "\" is not of the form --key.path=value");
  const std::string path = arg.substr(2, eq - 2), text = arg.substr(eq + 1);
  json* node = &j;
  std::size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw std::invalid_argument("command line: empty key in \"" + path + "\"");
    if (dot == std::string::npos) {
      json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
      (*node)[key] = v.is_discarded() ? json(text) : v;
      return;
    }
    node = &(*node)[key];
    start = dot + 1;
  }
}

}  // namespace serve
