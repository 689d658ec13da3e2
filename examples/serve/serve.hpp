#pragma once

// The main demo as a library, so that a test can run a short scripted version of it: a user-owned
// inference loop built from frugal's batcher, quantized kernels, result cache and cost ledger, served
// the same traffic under a ladder of configurations.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <frugal/frugal.hpp>
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

/// One request of the traffic: which pooled input, and when (open-loop phases).
struct planned_request {
  int input = 0;
  clock::duration offset{0};  // from the phase's start
};

/// Zipf-distributed draws over the pool; the popular inputs are spread over it by a seeded permutation.
class zipf_inputs {
 public:
  explicit zipf_inputs(const config& c)
      : cdf_(static_cast<std::size_t>(c.pool)), perm_(static_cast<std::size_t>(c.pool)) {
    double sum = 0;
    for (int i = 0; i < c.pool; ++i)
      cdf_[static_cast<std::size_t>(i)] = (sum += 1.0 / std::pow(i + 1.0, c.zipf_s));
    for (auto& v : cdf_) v /= sum;
    for (int i = 0; i < c.pool; ++i) perm_[static_cast<std::size_t>(i)] = i;
    std::mt19937_64 rng(c.model.seed * 7919 + 1);
    std::shuffle(perm_.begin(), perm_.end(), rng);
  }
  int draw(std::mt19937_64& rng) const {
    const auto it =
        std::lower_bound(cdf_.begin(), cdf_.end(), std::uniform_real_distribution<double>(0.0, 1.0)(rng));
    return perm_[static_cast<std::size_t>(
        std::min<std::ptrdiff_t>(it - cdf_.begin(), static_cast<std::ptrdiff_t>(perm_.size()) - 1))];
  }

 private:
  std::vector<double> cdf_;
  std::vector<int> perm_;
};

/// One phase's requests, the same sequence at every step: drawn from (seed, phase index) alone, so a
/// timed phase that serves more requests at a faster step serves a longer prefix of the same stream.
class phase_stream {
 public:
  phase_stream(const zipf_inputs& z, const config& c, std::size_t phase_index)
      : z_(&z),
        rng_(c.model.seed * 0x9e3779b97f4a7c15ull + (phase_index + 1) * 0xbf58476d1ce4e5b9ull),
        gap_(c.phases[phase_index].kind == "poisson" ? c.phases[phase_index].rate : 1.0),
        poisson_(c.phases[phase_index].kind == "poisson") {}
  planned_request next() {
    if (poisson_) t_ += gap_(rng_);
    return {z_->draw(rng_), std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(t_))};
  }

 private:
  const zipf_inputs* z_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  bool poisson_;
  double t_ = 0;
};

/// The requests of the phases that have a fixed count, in order (a timed closed phase contributes none,
/// as its count depends on the step's speed): what a test can know before the run.
inline std::vector<planned_request> make_plan(const config& c) {
  const zipf_inputs z(c);
  std::vector<planned_request> plan;
  for (std::size_t p = 0; p < c.phases.size(); ++p) {
    const auto& ph = c.phases[p];
    if (ph.kind == "idle" || (ph.kind == "closed" && ph.seconds > 0)) continue;
    phase_stream st(z, c, p);
    for (int i = 0; i < ph.requests; ++i) plan.push_back(st.next());
  }
  return plan;
}

/// CPU time of the calling thread, in seconds.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct step_result {
  std::string name, why, precision, policy, backend;
  std::uint64_t requests = 0, answered = 0, failed = 0, model_calls = 0, cache_hits = 0;
  double throughput = 0;  // requests per second over the closed-loop (saturating) phases
  std::uint64_t closed_requests = 0, closed_calls = 0, closed_batched = 0;  // in the closed-loop phases
  double closed_seconds = 0, closed_busy_s = 0;
  double closed_cpu_s = 0;  // the worker thread's CPU time in model calls while saturated (no time preempted)
  double closed_mean_batch = 0;  // requests per model call while saturated
  double open_p50_ms =
      0;  // p50 latency of the requests a model call answered in the open-loop (Poisson) phases: light load
  double p50_ms = 0, p99_ms = 0;
  double busy_s = 0, wall_s = 0, utilization = 0;
  double mean_batch = 0;
  frugal::cost::money cost{}, cost_per_1k{};
  double savings = 0;  // against the first step
  double hit_ratio = 0;
  double ledger_cache_saved_fraction = 0;  // the ledger's cache savings over (busy cost + cache savings)
  double cosine_mean = 1, max_rel_error = 0;
  std::size_t weight_bytes = 0;
  std::string prometheus, json_export, table;
  frugal::cost::ledger_snapshot snapshot;
};

struct request {
  int input = 0;
  frugal::key128 key{};
};
using output = std::shared_ptr<const std::vector<float>>;

// Accuracy against the fp32 outputs, over the requests whose input is in the reference sample.
struct accuracy_tally {
  std::mutex m;
  double cosine_sum = 0, max_rel = 0;
  std::uint64_t count = 0;
  void add(const std::vector<float>& got, const float* ref, std::size_t n) {
    double dot = 0, gg = 0, rr = 0, dd = 0;
    for (std::size_t i = 0; i < n; ++i) {
      dot += double(got[i]) * ref[i];
      gg += double(got[i]) * got[i];
      rr += double(ref[i]) * ref[i];
      dd += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    }
    const double cos = dot / std::sqrt(gg * rr + 1e-300), rel = std::sqrt(dd / (rr + 1e-300));
    std::lock_guard g(m);
    cosine_sum += cos;
    max_rel = std::max(max_rel, rel);
    ++count;
  }
};

using progress_fn =
    std::function<void(const std::string& phase, std::uint64_t done, std::uint64_t total, double rate)>;

struct shared_inputs {
  const config& cfg;
  const input_pool& pool;
  const matrix& reference;  // fp32 outputs of the first accuracy_sample pool inputs
  const zipf_inputs& inputs;
  std::function<const served_model&(const std::string& precision)> model_for;
};

template <class Policy>
step_result run_step(const step_config& st, const shared_inputs& in, Policy policy,
                     const progress_fn& progress) {
  const config& cfg = in.cfg;
  const served_model& model = in.model_for(st.precision);
  const int out_dim = model.output_dim();
  const std::string backend = model.backend();

  frugal::batcher_options bopt{
      .window = st.batching ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::duration<double, std::milli>(cfg.window_ms))
                            : std::chrono::nanoseconds(0),
      .max_batch = st.batching ? static_cast<std::size_t>(st.max_batch ? st.max_batch : cfg.max_batch) : 1,
      .max_batch_cost = st.batching ? cfg.max_batch_tokens : 0,
      .max_queued = cfg.max_queued,
  };
  frugal::batcher<request, output, Policy> batcher(bopt, {}, std::move(policy));

  const auto price = frugal::cost::rate::per_hour(frugal::cost::money::parse(cfg.gpu_hourly_usd));
  frugal::cost::ledger<> ledger({.prices = {{.gpu_class = cfg.gpu_name, .on_demand = price}},
                                 .devices = {{.gpu_class = cfg.gpu_name, .name = "cpu0"}}});
  const auto tag = ledger.tag(cfg.model_name);

  std::optional<frugal::lru_cache<std::vector<float>>> cache;
  if (st.cache)
    cache.emplace(frugal::lru_cache<std::vector<float>>::options_type{.max_entries = cfg.cache_entries,
                                                                      .max_bytes = cfg.cache_bytes});

  accuracy_tally acc;
  std::atomic<std::uint64_t> answered{0}, failed{0};
  std::mutex done_m;
  std::condition_variable done_cv;
  std::uint64_t in_flight = 0;
  std::vector<double> open_latency_ms;  // model-answered requests of open-loop phases; under done_m
  std::atomic<bool> saturated{false};   // a closed-loop phase is running: the worker tallies its batches
  std::uint64_t closed_calls = 0, closed_batched = 0;  // worker thread only until it is joined
  clock::duration closed_busy{0};
  double closed_cpu = 0;

  auto finish = [&](int input, const output* out, clock::time_point start, bool ok, bool open_loop) {
    const auto latency = clock::now() - start;
    ledger.record_request(tag, std::chrono::duration_cast<std::chrono::nanoseconds>(latency),
                          ok ? frugal::cost::outcome::ok : frugal::cost::outcome::error);
    if (ok && input < cfg.accuracy_sample)
      acc.add(**out, in.reference.row(input).data(), static_cast<std::size_t>(out_dim));
    (ok ? answered : failed).fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard g(done_m);
      --in_flight;
      if (open_loop) open_latency_ms.push_back(std::chrono::duration<double, std::milli>(latency).count());
    }
    done_cv.notify_all();
  };

  // The user-owned inference loop: pull a batch, run one model call, hand every caller its result.
  std::jthread worker([&](std::stop_token stop) {
    std::vector<int> inputs;
    while (auto b = batcher.next_batch(stop)) {
      auto reqs = b->requests();
      inputs.clear();
      for (const auto& rq : reqs) inputs.push_back(rq.input);
      try {
        const auto t0 = clock::now();
        const double cpu0 = thread_cpu_seconds();
        const matrix y = model.forward(inputs);
        const auto busy = clock::now() - t0;
        const double cpu = thread_cpu_seconds() - cpu0;
        std::vector<output> results;
        results.reserve(reqs.size());
        for (std::size_t i = 0; i < reqs.size(); ++i) {
          const float* r = y.row(static_cast<Eigen::Index>(i)).data();
          results.push_back(std::make_shared<const std::vector<float>>(r, r + out_dim));
          if (cache) cache->put(reqs[i].key, results.back());
        }
        ledger.record_batch({.tag = tag,
                             .busy = std::chrono::duration_cast<std::chrono::nanoseconds>(busy),
                             .batch_size = static_cast<std::uint32_t>(reqs.size()),
                             .capacity = static_cast<std::uint32_t>(b->max_batch())});
        b->report_duration(busy);
        if (saturated.load(std::memory_order_relaxed)) {
          ++closed_calls;
          closed_batched += reqs.size();
          closed_busy += busy;
          closed_cpu += cpu;
        }
        b->fulfill(std::move(results));
      } catch (...) {
        b->fail(std::current_exception());
      }
    }
  });

  auto issue = [&](const planned_request& pr, clock::time_point start, bool open_loop) {
    {
      std::lock_guard g(done_m);
      ++in_flight;
    }
    request r{pr.input, {}};
    if (cache) {
      r.key = model.key(cfg.model_name, pr.input);
      if (auto hit = cache->get(r.key)) {
        ledger.record_cache_hit(tag);
        finish(pr.input, &hit, start, true, false);  // a hit is not a model call: not in the light-load p50
        return;
      }
    }
    const int input = pr.input;
    batcher.submit(std::move(r),
                   [&finish, input, start, open_loop](frugal::outcome<output> o) noexcept {
                     if (o.has_value())
                       finish(input, &*o, start, true, open_loop);
                     else
                       finish(input, nullptr, start, false, open_loop);
                   },
                   {.weight = model.cost(input)});
  };

  const auto step_start = clock::now();
  double closed_seconds = 0;
  std::uint64_t closed_requests = 0, done_total = 0;
  // The total is known before the run only when no phase is timed; 0 means unknown.
  std::uint64_t total = 0;
  bool timed = false;
  for (const auto& ph : cfg.phases) {
    if (ph.kind == "closed" && ph.seconds > 0)
      timed = true;
    else if (ph.kind != "idle")
      total += static_cast<std::uint64_t>(ph.requests);
  }
  if (timed) total = 0;
  auto report = [&](const std::string& what, clock::time_point since) {
    if (!progress) return;
    const double s = std::chrono::duration<double>(clock::now() - since).count();
    progress(st.name + ": " + what, done_total, total, s > 0 ? static_cast<double>(done_total) / s : 0);
  };
  for (std::size_t p = 0; p < cfg.phases.size(); ++p) {
    const phase& ph = cfg.phases[p];
    const auto phase_start = clock::now();
    auto last_report = phase_start;
    if (ph.kind == "idle") {
      report("idle", step_start);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ph.ms));
      continue;
    }
    const bool closed = ph.kind == "closed";
    // A timed closed phase stops issuing at its deadline (then drains), or at `requests` if that comes first.
    const auto deadline = closed && ph.seconds > 0
                              ? phase_start + std::chrono::duration_cast<clock::duration>(
                                                  std::chrono::duration<double>(ph.seconds))
                              : clock::time_point::max();
    const std::uint64_t cap =
        ph.requests > 0 ? static_cast<std::uint64_t>(ph.requests) : std::numeric_limits<std::uint64_t>::max();
    phase_stream stream(in.inputs, cfg, p);
    if (closed) saturated.store(true);
    std::uint64_t issued = 0;
    for (; issued < cap; ++issued) {
      const planned_request pr = stream.next();
      clock::time_point start;
      if (closed) {
        std::unique_lock lk(done_m);
        done_cv.wait(lk, [&] { return in_flight < static_cast<std::uint64_t>(ph.clients); });
        start = clock::now();
        if (start >= deadline) break;
      } else {
        start = phase_start + pr.offset;  // intended time: no coordinated omission
        std::this_thread::sleep_until(start);
      }
      issue(pr, start, !closed);
      done_total = answered.load() + failed.load();
      if (clock::now() - last_report > std::chrono::milliseconds(500)) {
        report(ph.kind, step_start);
        last_report = clock::now();
      }
    }
    {
      std::unique_lock lk(done_m);
      done_cv.wait(lk, [&] { return in_flight == 0; });
    }
    saturated.store(false);
    done_total = answered.load() + failed.load();
    if (closed) {
      closed_seconds += std::chrono::duration<double>(clock::now() - phase_start).count();
      closed_requests += issued;
    }
  }
  report("done", step_start);
  batcher.close();
  worker.request_stop();
  worker.join();

  step_result r;
  r.name = st.name;
  r.why = st.why;
  r.precision = model.precision_name();
  r.policy = st.batching ? st.policy : "none";
  r.backend = backend;
  r.weight_bytes = model.weight_bytes();
  r.snapshot = ledger.snapshot();
  const auto& s = r.snapshot;
  r.requests = s.total.requests;
  r.answered = answered.load();
  r.failed = failed.load();
  r.model_calls = s.total.batches;
  r.cache_hits = s.total.cache_hits;
  r.throughput = closed_seconds > 0 ? static_cast<double>(closed_requests) / closed_seconds : 0;
  r.closed_requests = closed_requests;
  r.closed_seconds = closed_seconds;
  r.closed_calls = closed_calls;
  r.closed_busy_s = std::chrono::duration<double>(closed_busy).count();
  r.closed_cpu_s = closed_cpu;
  r.closed_batched = closed_batched;
  r.closed_mean_batch =
      closed_calls ? static_cast<double>(closed_batched) / static_cast<double>(closed_calls) : 0;
  if (!open_latency_ms.empty()) {
    const auto mid = open_latency_ms.begin() + static_cast<std::ptrdiff_t>(open_latency_ms.size() / 2);
    std::nth_element(open_latency_ms.begin(), mid, open_latency_ms.end());
    r.open_p50_ms = *mid;
  }
  r.p50_ms = std::chrono::duration<double, std::milli>(s.total.latency.p50).count();
  r.p99_ms = std::chrono::duration<double, std::milli>(s.total.latency.p99).count();
  r.busy_s = std::chrono::duration<double>(s.total.busy).count();
  r.wall_s = std::chrono::duration<double>(s.wall).count();
  r.utilization = s.utilization;
  r.mean_batch = s.total.mean_batch_size;
  r.cost = s.total_cost;
  r.cost_per_1k =
      r.requests ? s.total_cost.mul_div(1000, static_cast<std::int64_t>(r.requests)) : s.total_cost;
  r.hit_ratio = s.total.cache_hit_ratio;
  const double saved = static_cast<double>(s.total.cache_saved.nanos()),
               busy = static_cast<double>(s.busy_cost.nanos());
  r.ledger_cache_saved_fraction = saved + busy > 0 ? saved / (saved + busy) : 0;
  if (acc.count) {
    r.cosine_mean = acc.cosine_sum / static_cast<double>(acc.count);
    r.max_rel_error = acc.max_rel;
  }
  r.prometheus = frugal::cost::to_prometheus(s);
  r.json_export = frugal::cost::to_json(s);
  r.table = frugal::cost::to_table(s);
  return r;
}

/// Serves the plan under every step of the ladder; step i's savings are against step 0.
inline std::vector<step_result> run(const config& cfg, const progress_fn& progress = {}) {
  input_pool pool;
  std::optional<bert::encoder> fp32_text;  // minilm: the reference, also served by the fp32 steps
  std::vector<std::string> calibration;
  if (cfg.model_kind == "minilm") {
    pool.texts = corpus_sentences(cfg.corpus, cfg.pool, cfg.model.seed);
    fp32_text = bert::encoder::load(cfg.model_path, {.threads = cfg.model_threads});
    for (const auto& t : pool.texts) pool.ids.push_back(fp32_text->tokenize(t));
  } else {
    pool.rows = make_input_pool(cfg.pool, cfg.model.dims.front(), cfg.model.seed);
  }
  // One model per precision, made on first use and shared by the steps that serve it.
  std::map<std::string, std::unique_ptr<served_model>> models;
  const auto model_for = [&](const std::string& prec) -> const served_model& {
    auto& m = models[prec];
    if (m) return *m;
    if (cfg.model_kind == "minilm") {
      bert::load_options opt{.weights = bert::parse_precision(prec), .threads = cfg.model_threads};
      if (opt.weights == bert::precision::int8) {
        std::ifstream in(cfg.calibration);
        if (!in)
          throw std::runtime_error("config: model.calibration \"" + cfg.calibration + "\" cannot be opened");
        for (std::string l; std::getline(in, l) &&
                            opt.calibration.size() < static_cast<std::size_t>(cfg.calibration_sentences);)
          opt.calibration.push_back(l);
      }
      m = std::make_unique<bert_model>(opt.weights == bert::precision::fp32
                                           ? std::move(*fp32_text)
                                           : bert::encoder::load(cfg.model_path, opt),
                                       pool);
    } else {
      const precision p = parse_precision(prec);
      std::unique_ptr<gpu_backend> gpu;
      if (cfg.device != "cpu" && (p == precision::fp32 || p == precision::w8a8)) {
        std::string why;
        gpu = make_gpu_backend(p == precision::w8a8, mlp(cfg.model, p).export_layers(), why);
        if (!gpu && cfg.device == "gpu") throw std::runtime_error("config: device is gpu but " + why);
      }
      m = std::make_unique<mlp_model>(cfg.model, p, pool, std::move(gpu));
    }
    return *m;
  };
  const int sample = std::min(cfg.accuracy_sample, cfg.pool);
  std::vector<int> first(static_cast<std::size_t>(sample));
  for (int i = 0; i < sample; ++i) first[static_cast<std::size_t>(i)] = i;
  const matrix reference = model_for("fp32").forward(first);
  const zipf_inputs inputs(cfg);
  const shared_inputs in{cfg, pool, reference, inputs, model_for};
  std::vector<step_result> out;
  for (const auto& st : cfg.ladder) {
    if (st.policy == "adaptive" && st.batching) {
      frugal::adaptive pol(
          frugal::adaptive_options{.latency_target = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::duration<double, std::milli>(cfg.latency_target_ms))});
      out.push_back(run_step(st, in, std::move(pol), progress));
    } else {
      out.push_back(run_step(st, in, frugal::fixed_window{}, progress));
    }
    const auto base = out.front().cost_per_1k.nanos();
    out.back().savings =
        base > 0 ? 1.0 - static_cast<double>(out.back().cost_per_1k.nanos()) / static_cast<double>(base) : 0;
  }
  return out;
}

/// The traffic of one step, in words.
inline std::string describe_traffic(const config& cfg) {
  std::ostringstream o;
  char buf[160];
  for (std::size_t i = 0; i < cfg.phases.size(); ++i) {
    const auto& p = cfg.phases[i];
    if (p.kind == "closed" && p.seconds > 0)
      std::snprintf(buf, sizeof buf, "%d closed-loop clients for %g s", p.clients, p.seconds);
    else if (p.kind == "closed")
      std::snprintf(buf, sizeof buf, "%d closed-loop clients for %d requests", p.clients, p.requests);
    else if (p.kind == "poisson")
      std::snprintf(buf, sizeof buf, "%d Poisson arrivals at %g/s", p.requests, p.rate);
    else
      std::snprintf(buf, sizeof buf, "%g ms idle", p.ms);
    o << (i ? ", then " : "") << buf;
  }
  return o.str();
}

inline std::string format_report(const config& cfg, const std::vector<step_result>& rs) {
  std::ostringstream o;
  char line[640];
  o << "frugal serve: " << cfg.model_name << " (" << rs.front().weight_bytes / (1 << 20)
    << " MiB fp32 weights), "
    << "priced as " << cfg.gpu_name << " at $" << cfg.gpu_hourly_usd << "/h (paid while idle too)\n"
    << "each step serves " << describe_traffic(cfg) << "; throughput is over the closed-loop time\n\n";
  o << "| step | requests | model calls | throughput req/s | p50 ms | p99 ms | light-load p50 ms, model "
       "calls | compute s | util "
       "| batch, saturated | $ per 1k req | saving | hit ratio | cosine | max rel err |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    std::snprintf(line, sizeof line,
                  "| %zu. %s | %llu | %llu | %.0f | %.1f | %.1f | %.1f | %.2f | %.0f%% | %.1f | %s | %.0f%% "
                  "| %.0f%% | %.5f | %.4f |\n",
                  i + 1, r.name.c_str(), static_cast<unsigned long long>(r.requests),
                  static_cast<unsigned long long>(r.model_calls), r.throughput, r.p50_ms, r.p99_ms,
                  r.open_p50_ms, r.busy_s, 100 * r.utilization, r.closed_mean_batch,
                  r.cost_per_1k.to_string().c_str(), 100 * r.savings, 100 * r.hit_ratio, r.cosine_mean,
                  r.max_rel_error);
    o << line;
  }
  o << "\nWhere each step ran:";
  for (std::size_t i = 0; i < rs.size(); ++i) o << (i ? "; " : " ") << i + 1 << ". " << rs[i].backend;
  o << "\n\nWhy each step costs less (the same paid seconds serve more requests when throughput rises):\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    o << "  " << i + 1 << ". " << r.name << ": " << r.why;
    if (i > 0 && rs[i - 1].throughput > 0) {
      const auto& q = rs[i - 1];
      std::snprintf(line, sizeof line,
                    " [throughput x%.2f vs step %zu, cost per 1k x%.2f; batch when saturated %.1f vs %.1f; "
                    "light-load p50 %.1f vs %.1f ms",
                    r.throughput / q.throughput, i,
                    static_cast<double>(r.cost_per_1k.nanos()) /
                        static_cast<double>(std::max<std::int64_t>(1, q.cost_per_1k.nanos())),
                    r.closed_mean_batch, q.closed_mean_batch, r.open_p50_ms, q.open_p50_ms);
      o << line;
      if (r.cache_hits && !q.cache_hits && r.closed_requests && q.closed_requests && q.closed_cpu_s > 0) {
        // Compute per request while saturated, against the step before (same precision and batching, no
        // cache), in the worker's CPU time: on a shared machine, wall time also counts time preempted.
        const double per_req = r.closed_cpu_s / static_cast<double>(r.closed_requests),
                     per_req_before = q.closed_cpu_s / static_cast<double>(q.closed_requests);
        std::snprintf(line, sizeof line,
                      "; cache hit ratio %.1f%%, ledger's cache saving %.1f%% of compute, measured compute "
                      "per request fell %.1f%%",
                      100 * r.hit_ratio, 100 * r.ledger_cache_saved_fraction,
                      100 * (1 - per_req / per_req_before));
        o << line;
      }
      o << "]";
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace serve
