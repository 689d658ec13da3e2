#pragma once

// frugal's example server: OpenAI-compatible embeddings over HTTP (cpp-httplib), composed from frugal's
// parts the way the README's loop is: result cache -> batcher -> the worker's model call -> ledger.
//
//   POST /v1/embeddings   {"model": "...", "input": "text" | ["text", ...], "user": "feature"}
//   POST /v1/chat/completions, POST /v1/completions   a language model's (models_config.hpp, kind "chat"),
//                         streamed as Server-Sent Events with "stream": true
//   GET  /metrics         the library's exporters (ledger, batchers, pool, caches) and the process's own
//   GET  /healthz         alive;   GET /readyz   every pinned model is loaded and warm
//   GET  /v1/models       the served models, each with its state in the pool
//
// The models come from a frugal::model_pool (models_config.hpp): loaded on their first request (or at
// start when pinned), unloaded after their idle_unload_s without requests, and kept within the pool's
// memory budget by unloading idle ones, least recently used first. Each model has its own batcher and
// worker; a worker holds a lease on its model for one batch at a time. A language model has its own
// scheduler and loop thread instead (llm_engine.hpp); a chat request holds a lease while its sequence runs.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <frugal/cost/nvml.hpp>
#include <frugal/frugal.hpp>
#include <nlohmann/json.hpp>

#include "../common/load_model.hpp"
#include "../common/write.hpp"
#include "bert.hpp"
#include "chat.hpp"
#include "llm_engine.hpp"
#include "models_config.hpp"
#if FRUGAL_SERVER_WITH_REDIS
#  include <frugal/redis.hpp>
#endif

// After Eigen: httplib pulls in OpenSSL's headers, whose macros break Eigen's if they come first.
#include <httplib.h>

#include "semantic_route.hpp"

namespace server {

/// @brief httplib's thread pool, whose threads run at nice value @p nice (Linux; elsewhere unchanged;
/// frugal_server's --http-nice, default 0). The HTTP threads parse, answer 429s and serialise; the model's
/// threads do the work that was accepted. Under overload (wrk -c 512 on the same 2 cores, 512 HTTP threads)
/// the model's 2 threads got so little of the CPU that 150 embeddings/s were accepted; at nice 19 the
/// model is served first and 288/s were (benchmarks/RESULTS.md, server). At c = 64 below capacity it
/// changed nothing (1,972-2,019 req/s at 0, 1,988-2,059 at 19). A value that cannot be set is reported once.
class nice_pool : public httplib::TaskQueue {
 public:
  nice_pool(std::size_t threads, int nice) : pool_(threads), nice_(nice) {}
  void enqueue(std::function<void()> fn) override {
    pool_.enqueue([this, fn = std::move(fn)] {
      lower_once();
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  void lower_once() const {
    thread_local bool done = false;
    if (done || nice_ == 0) return;
    done = true;
#if defined(__linux__)
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice_) != 0 &&
        !warned_.exchange(true))
      std::fprintf(stderr, "frugal_server: cannot set the HTTP threads' nice value to %d: %s\n", nice_,
                   std::strerror(errno));
#endif
  }
  httplib::ThreadPool pool_;
  int nice_;
  mutable std::atomic<bool> warned_{false};
};

using json = nlohmann::json;
using clock = std::chrono::steady_clock;
using embedding = std::shared_ptr<const std::vector<float>>;

/// @brief The server's settings (flags of the same names, see main.cpp).
struct options {
  std::string host = "127.0.0.1";
  int port = 8080;  ///< 0: any free port (printed on stdout as "listening on HOST:PORT")
  std::string model_dir;
  std::string model_name = "all-MiniLM-L6-v2";
  std::string precision = "int8";
  /// The served models and the pool's budget (--models FILE); empty: one pinned model from model_dir,
  /// model_name and precision.
  models_config models{};
  double collect_interval_s = 1;  ///< how often the pool unloads idle models
  std::string calibration;        ///< SmoothQuant's calibration sentences (int8)
  std::size_t calibration_sentences = 64;
  std::size_t model_threads = 1;
  int http_threads = 16;
  std::size_t max_batch = 64;
  std::uint64_t max_batch_tokens = 4096;
  double window_ms = 5;
  std::size_t max_queued = 512;          ///< inputs waiting for the model; beyond it requests get 429
  std::size_t max_body_bytes = 1 << 20;  ///< larger bodies get 413
  std::size_t max_inputs = 256;          ///< inputs per request
  std::size_t cache_entries = 10000;     ///< 0: no cache
  std::string token;                     ///< bearer token; empty: no auth
  double request_timeout_s = 30;
  int io_timeout_s = 5;    ///< read/write timeouts: slow clients are cut off
  std::string export_dir;  ///< where SIGTERM flushes the ledger's exports (empty: not written)
  std::string
      redis;  ///< HOST:PORT of a shared result tier (empty: none); password from FRUGAL_REDIS_PASSWORD
  std::string gpu_name = "cpu";
  std::string hourly_usd = "0.50";
  semantic_route_options semantic{};  ///< POST /v1/semantic/answer (semantic_route.hpp)
  /// After SIGTERM, running generations may go on this long; then they are cut, with finish_reason
  /// "abort" (streamed) or a 503 (not yet answered).
  double drain_grace_s = 30;
};

/// @brief What the pool holds for one model: an encoder (embeddings) or a language model's engine.
struct served_model {
  std::unique_ptr<bert::encoder> encoder;
  std::unique_ptr<llm_engine> llm;
};

/// @brief Compares two strings in time that depends only on their lengths (for the bearer token).
inline bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

/// @brief The process's resident set in bytes (Linux /proc/self/statm), 0 if unknown.
inline std::uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

inline std::uint64_t physical_bytes() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

inline double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

class app {
 public:
  struct request {
    std::int32_t index = 0;
    const std::vector<std::int32_t>* ids = nullptr;  // owned by the HTTP handler, alive until it resolves
    frugal::cost::feature_id feature{};
    frugal::key128 key{};
  };

 private:
  // One served model: its tokenizer (always loaded), its batcher and its worker; a chat model has none of
  // the three (its tokenizer is in the GGUF file, its engine runs its steps).
  struct route {
    std::string name, precision;
    bool chat = false;
    std::size_t default_max_tokens = 256;
    double idle_unload_s = 0;
    std::atomic<std::uint64_t> outcome_ok{0}, outcome_cancelled{0}, outcome_aborted{0}, outcome_rejected{0},
        outcome_error{0};
    std::atomic<std::uint64_t> prompt_tokens{0}, cached_tokens{0}, completion_tokens{0};
    std::shared_ptr<const frugal::wordpiece::tokenizer> tokenizer;
    std::unique_ptr<frugal::batcher<request, embedding>> batcher;
    std::jthread worker;  // after the batcher: joined before it is destroyed
  };
  using pool_type = frugal::model_pool<served_model>;

 public:
  explicit app(const options& o)
      : opt_(o),
        ledger_({.prices = {{.gpu_class = o.gpu_name,
                             .on_demand =
                                 frugal::cost::rate::per_hour(frugal::cost::money::parse(o.hourly_usd))}},
                 .devices = {{.gpu_class = o.gpu_name, .name = "cpu0"}}}) {
    default_feature_ = ledger_.feature("default");
    if (!o.redis.empty()) {
#if FRUGAL_SERVER_WITH_REDIS
      // The shared tier: its own LRU in front, then Redis; its hits are recorded in the ledger under
      // "default" (the tier has one feature), as remote hits with their latency.
      const auto colon = o.redis.rfind(':');
      frugal::redis_options ro{
          .host = o.redis.substr(0, colon), .model = o.model_name, .version = o.precision};
      ro.port = std::atoi(o.redis.c_str() + colon + 1);
      if (std::getenv("FRUGAL_REDIS_PASSWORD")) ro.auth = frugal::redis_auth::from_env();
      tier_ = std::make_unique<tier_type>(
          tier_type::options_type{.redis = ro,
                                  .local = {.max_entries = std::max<std::size_t>(o.cache_entries, 1)},
                                  .ledger = &ledger_,
                                  .feature = default_feature_});
#else
      throw std::invalid_argument("--redis: this build has no Redis tier (libhiredis-dev was not found)");
#endif
    } else if (o.cache_entries) {
      cache_.emplace(frugal::lru_cache<std::vector<float>>::options_type{.max_entries = o.cache_entries});
    }
    if (o.semantic.enabled)
      semantic_ = std::make_unique<semantic_route>(
          o.semantic, o.hourly_usd,
          [this](const std::string& t) -> std::optional<std::vector<float>> {
            if (!ready_ || draining_) return std::nullopt;
            route& r = first_embedding_route();
            const auto ids = r.tokenizer->encode(t);
            auto lease = pool_->acquire(r.name);
            return std::move(lease->encoder->encode(std::span(&ids, 1))[0]);
          },
          [this](const httplib::Request& req, httplib::Response& res) { return authorized(req, res); });
  }

  /// @brief Builds the pool and each model's batcher, loads and warms up the pinned models, and starts
  /// the workers; /readyz answers 200 from then on.
  void load() {
    models_config mc = opt_.models;
    if (mc.models.empty()) {
      mc.models.push_back(
          {.name = opt_.model_name, .precision = opt_.precision, .path = opt_.model_dir, .pinned = true});
      finish_models_config(mc, opt_.model_dir, "", false);
    }
    std::vector<frugal::model_spec<>> specs;
    std::map<std::string, std::shared_ptr<const frugal::wordpiece::tokenizer>> tokenizers;  // by path
    for (const model_entry& m : mc.models) {
      if (m.chat) {
        frugal::model_spec<> spec{.name = m.name,
                                  .args = {{"kind", "chat"},
                                           {"path", m.path},
                                           {"precision", m.precision},
                                           {"threads", std::to_string(m.threads)},
                                           {"kv_budget_bytes", std::to_string(m.kv_budget_bytes)},
                                           {"max_running", std::to_string(m.max_running)},
                                           {"max_waiting", std::to_string(m.max_waiting)},
                                           {"step_tokens", std::to_string(m.step_tokens)},
                                           {"max_context", std::to_string(m.max_context)}},
                                  .estimated_bytes = m.estimated_bytes,
                                  .pinned = m.pinned};
        spec.idle_unload_after = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(m.idle_unload_s));
        specs.push_back(std::move(spec));
        auto r = std::make_unique<route>();
        r->name = m.name;
        r->precision = m.precision;
        r->chat = true;
        r->default_max_tokens = m.default_max_tokens;
        r->idle_unload_s = m.idle_unload_s;
        by_name_[r->name] = r.get();
        routes_.push_back(std::move(r));
        continue;
      }
      frugal::model_spec<> spec{.name = m.name,
                                .args = {{"path", m.path}, {"precision", m.precision}},
                                .estimated_bytes = m.estimated_bytes,
                                .pinned = m.pinned,
                                .warm_up_input = "warm up"};
      spec.idle_unload_after = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(m.idle_unload_s));
      specs.push_back(std::move(spec));
      // The tokenizer stays loaded with the route (a few MB), so that requests are tokenized, and their
      // cache keys made, while the model itself may be unloaded.
      auto& tok = tokenizers[m.path];
      if (!tok) {
        const bert::config cfg = bert::config::load(m.path + "/config.json");
        tok = std::make_shared<const frugal::wordpiece::tokenizer>(
            m.path + "/vocab.txt",
            frugal::wordpiece::options{.max_length = std::min<std::size_t>(256, cfg.max_positions)});
      }
      auto r = std::make_unique<route>();
      r->name = m.name;
      r->precision = m.precision;
      r->idle_unload_s = m.idle_unload_s;
      r->tokenizer = tok;
      r->batcher = std::make_unique<frugal::batcher<request, embedding>>(
          frugal::batcher_options{.window = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::duration<double, std::milli>(opt_.window_ms)),
                                  .max_batch = opt_.max_batch,
                                  .max_batch_cost = opt_.max_batch_tokens,
                                  .max_queued = opt_.max_queued});
      by_name_[r->name] = r.get();
      routes_.push_back(std::move(r));
    }
    pool_ = std::make_unique<pool_type>(pool_type::options_type{
        .budget_bytes = mc.budget_bytes,
        .models = std::move(specs),
        .load = [this](const frugal::model_spec<>& spec) { return load_model(spec); },
        .warm_up =
            [](served_model& m, const frugal::model_spec<>& spec) {
              if (m.encoder) (void)m.encoder->encode_texts(std::vector<std::string>{spec.warm_up_input});
              if (m.llm) warm_up(*m.llm);
            },
        .unload =
            [this](std::unique_ptr<served_model> m, const frugal::model_spec<>& spec) {
              if (m->llm) {
                std::lock_guard g(engines_m_);  // /metrics reads the engines under it
                engines_.erase(spec.name);
              }
              m.reset();
              ::malloc_trim(0);  // the freed weights go back to the system, not only to malloc's free lists
            },
        .acquire_timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(opt_.request_timeout_s)),
        .collect_interval = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(opt_.collect_interval_s)),
        .ledger = &ledger_,
        .ledger_device = 0});
    pool_->load_pinned();
    for (auto& r : routes_)
      if (!r->chat) r->worker = std::jthread([this, &r = *r](std::stop_token st) { work(r, st); });
    sampler_ = std::jthread([this](std::stop_token st) { sample(st); });
    ready_ = true;
  }

  /// @brief Registers the routes on @p http.
  void routes(httplib::Server& http) {
    http.set_payload_max_length(opt_.max_body_bytes);
    http.set_read_timeout(opt_.io_timeout_s, 0);
    http.set_write_timeout(opt_.io_timeout_s, 0);
    http.set_keep_alive_timeout(2);
    // httplib closes a keep-alive connection after 5 requests by default, and Debian's build listens with a
    // backlog of 5: under load the reconnects overflowed the backlog, and a client whose handshake was
    // dropped resent its request with exponential backoff, for up to 26 s (found by the overload test:
    // 9,486 listen drops in 20 s at -c 512; main.cpp widens the backlog). 100 requests a connection: a
    // connection holds an HTTP thread for its life, so with every thread busy a new client waits for one
    // to rotate (at 1,000 a probe waited 23 s under overload).
    http.set_keep_alive_max_count(100);
    // Without it every keep-alive response waits out the client's delayed ACK (~40 ms a request: found
    // by the wrk load test, where a cache hit at concurrency 1 took 43 ms instead of 0.14 ms).
    http.set_tcp_nodelay(true);
    http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      const bool ok = serving();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(models_json().dump(), "application/json");
    });
    http.Post("/v1/embeddings",
              [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); });
    if (semantic_) semantic_->routes(http);
    // 413 for bodies over the limit, and an OpenAI-shaped error for every status httplib sets itself.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const char* what = res.status == 413   ? "the request body is over the server's limit"
                         : res.status == 404 ? "no such route"
                                             : "the request could not be served";
      res.set_content(
          error_body(what, res.status == 413 ? "request_too_large" : "invalid_request_error", nullptr),
          "application/json");
    });
  }

  /// @brief Stops taking requests (readyz 503), answers what was accepted, stops the worker, and
  /// writes the ledger's exports. Call after the HTTP server has stopped and joined its handlers.
  void drain() {
    draining_ = true;
    for (auto& r : routes_)
      if (r->batcher) r->batcher->close(frugal::drain::yes);
    for (auto& r : routes_) {
      r->worker.request_stop();
      if (r->worker.joinable()) r->worker.join();
    }
    sampler_.request_stop();
    if (sampler_.joinable()) sampler_.join();
    if (!opt_.export_dir.empty()) {
      const auto snap = ledger_.snapshot();
      examples::write_file(opt_.export_dir + "/ledger.prom", frugal::cost::to_prometheus(snap));
      examples::write_file(opt_.export_dir + "/ledger.json", frugal::cost::to_json(snap));
    }
  }

  void begin_drain() {
    drain_deadline_.store(
        clock::now().time_since_epoch().count() +
        std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(opt_.drain_grace_s))
            .count());
    draining_ = true;
  }
  std::uint64_t accepted() const { return accepted_.load(); }
  std::uint64_t answered() const { return answered_.load(); }

 private:
  static std::string error_body(const std::string& message, const char* type, const char* param) {
    return json{{"error",
                 {{"message", message},
                  {"type", type},
                  {"param", param ? json(param) : json(nullptr)},
                  {"code", nullptr}}}}
        .dump();
  }
  static void fail(httplib::Response& res, int status, const std::string& message,
                   const char* param = nullptr, const char* type = "invalid_request_error") {
    res.status = status;
    res.set_content(error_body(message, type, param), "application/json");
  }

  embedding lookup(const frugal::key128& key, frugal::cost::feature_id feature) {
#if FRUGAL_SERVER_WITH_REDIS
    if (tier_) return tier_->get(key);  // records its own hits
#endif
    if (!cache_) return nullptr;
    auto hit = cache_->get(key);
    if (hit) ledger_.record_cache_hit(feature);
    return hit;
  }
  void store(const frugal::key128& key, const embedding& e) {
#if FRUGAL_SERVER_WITH_REDIS
    if (tier_) {
      tier_->put(key, *e);
      return;
    }
#endif
    if (cache_) cache_->put(key, e);
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (opt_.token.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    if (constant_time_equal(h, "Bearer " + opt_.token)) return true;
    res.set_header("WWW-Authenticate", "Bearer");
    fail(res, 401, "missing or invalid bearer token", nullptr, "authentication_error");
    return false;
  }

  // One HTTP request: validate, answer cached inputs, submit the rest, wait, respond.
  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const auto start = clock::now();
    if (!authorized(req, res)) return;
    if (!ready_ || draining_) {
      res.set_header("Retry-After", "1");
      return fail(res, 503, draining_ ? "the server is shutting down" : "the model is loading", nullptr,
                  "server_error");
    }
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return fail(res, 400, "the body is not valid JSON");
    if (!body.is_object()) return fail(res, 400, "the body must be a JSON object");
    const auto model = body.find("model");
    if (model == body.end() || !model->is_string())
      return fail(res, 400, "'model' must be a string", "model");
    route* found = find_route(model->get<std::string>(), res);
    if (!found) return;
    route& rt = *found;
    if (rt.chat)
      return fail(
          res, 400,
          "the model '" + rt.name + "' is a language model: use /v1/chat/completions or /v1/completions",
          "model");
    const auto input = body.find("input");
    std::vector<std::string> texts;
    if (input == body.end()) return fail(res, 400, "'input' is required", "input");
    if (input->is_string()) {
      texts.push_back(input->get<std::string>());
    } else if (input->is_array()) {
      for (std::size_t i = 0; i < input->size(); ++i) {
        if (!(*input)[i].is_string())
          return fail(res, 400,
                      "'input[" + std::to_string(i) + "]' must be a string (token arrays are not supported)",
                      "input");
        texts.push_back((*input)[i].get<std::string>());
      }
    } else {
      return fail(res, 400, "'input' must be a string or an array of strings", "input");
    }
    if (texts.empty()) return fail(res, 400, "'input' must not be empty", "input");
    if (texts.size() > opt_.max_inputs)
      return fail(res, 400,
                  "'input' has " + std::to_string(texts.size()) + " entries, over the limit of " +
                      std::to_string(opt_.max_inputs),
                  "input");
    for (std::size_t i = 0; i < texts.size(); ++i)
      if (texts[i].empty())
        return fail(res, 400, "'input[" + std::to_string(i) + "]' is an empty string", "input");
    if (const auto f = body.find("encoding_format"); f != body.end() && *f != "float")
      return fail(res, 400, "'encoding_format' must be \"float\"", "encoding_format");
    std::string feature_name = req.get_header_value("X-Frugal-Feature");
    if (const auto u = body.find("user"); feature_name.empty() && u != body.end()) {
      if (!u->is_string()) return fail(res, 400, "'user' must be a string", "user");
      feature_name = u->get<std::string>();
    }
    frugal::cost::feature_id feature = default_feature_;
    if (!feature_name.empty()) {
      try {
        feature = ledger_.feature(feature_name);
      } catch (const std::invalid_argument& e) {
        return fail(res, 400, std::string("'user' / X-Frugal-Feature: ") + e.what(), "user");
      }
    }

    // Shared with the batcher's callbacks, which may outlive this handler if it times out.
    struct pending {
      std::mutex m;
      std::condition_variable cv;
      std::vector<embedding> out;
      std::vector<std::vector<std::int32_t>> ids;
      std::size_t left = 0;
      std::exception_ptr error;
      bool full = false;
    };
    auto p = std::make_shared<pending>();
    p->out.resize(texts.size());
    p->ids.resize(texts.size());
    std::size_t tokens = 0;
    std::vector<std::size_t> misses;
    std::vector<frugal::key128> keys(texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      p->ids[i] = rt.tokenizer->encode(texts[i]);
      tokens += p->ids[i].size();
      keys[i] = frugal::hash_key(rt.name, std::string_view(texts[i]));
      if (auto hit = lookup(keys[i], feature)) {
        p->out[i] = std::move(hit);
        continue;
      }
      misses.push_back(i);
    }
    p->left = misses.size();
    accepted_.fetch_add(1);
    for (const std::size_t i : misses) {
      rt.batcher->submit(request{static_cast<std::int32_t>(i), &p->ids[i], feature, keys[i]},
                         [p, i](frugal::result<embedding> o) noexcept {
                           std::lock_guard g(p->m);
                           if (o.has_value()) {
                             p->out[i] = *o;
                           } else {
                             if (o.code() == frugal::batch_errc::queue_full) p->full = true;
                             if (!p->error) p->error = o.error();
                           }
                           if (--p->left == 0) p->cv.notify_all();
                         },
                         {.weight = p->ids[i].size()});
    }
    bool done;
    {
      std::unique_lock lk(p->m);
      done = p->cv.wait_for(lk, std::chrono::duration<double>(opt_.request_timeout_s),
                            [&] { return p->left == 0; });
    }
    const auto latency = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start);
    answered_.fetch_add(1);
    if (!done) {
      ledger_.record_request(feature, latency, frugal::cost::outcome::deadline_exceeded);
      return fail(res, 504, "the model did not answer within the request timeout", nullptr, "server_error");
    }
    if (p->full) {  // refused, not failed: overload handled as designed must not read as an error rate
      ledger_.record_request(feature, latency, frugal::cost::outcome::rejected);
      res.set_header("Retry-After", "1");
      return fail(res, 429, "the server is at capacity: retry later", nullptr, "rate_limit_error");
    }
    if (p->error) {
      ledger_.record_request(feature, latency, frugal::cost::outcome::error);
      std::string what = "the model failed";
      try {
        std::rethrow_exception(p->error);
      } catch (const std::exception& e) {
        what += std::string(": ") + e.what();
      } catch (...) {
      }
      return fail(res, 500, what, nullptr, "server_error");
    }
    json data = json::array();
    for (std::size_t i = 0; i < texts.size(); ++i)
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", *p->out[i]}});
    for (std::size_t i = 0; i < texts.size(); ++i) ledger_.record_request(feature, latency);
    res.set_content(json{{"object", "list"},
                         {"data", std::move(data)},
                         {"model", rt.name},
                         {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}
                        .dump(),
                    "application/json");
  }

  // The user-owned loop: one model call per batch, each caller its own row; busy time split over the
  // batch's features by their tokens.
  void work(route& r, std::stop_token st) {
    while (auto b = r.batcher->next_batch(st)) {
      auto reqs = b->requests();
      std::vector<std::vector<std::int32_t>> ids;
      ids.reserve(reqs.size());
      for (const auto& r : reqs) ids.push_back(*r.ids);
      try {
        // A lease for the batch: it loads the model on a cold start (recorded by the pool in the ledger as
        // a model load), and keeps it from being unloaded while the batch runs.
        auto model = pool_->acquire(r.name);
        const auto t0 = clock::now();
        auto out = model->encoder->encode(ids);
        const auto busy = clock::now() - t0;
        std::vector<embedding> results;
        results.reserve(out.size());
        std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> per_feature;  // tokens, count
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < out.size(); ++i) {
          results.push_back(std::make_shared<const std::vector<float>>(std::move(out[i])));
          store(reqs[i].key, results.back());
          auto& t = per_feature[reqs[i].feature.value];
          t.first += ids[i].size();
          ++t.second;
          total += ids[i].size();
        }
        for (const auto& [feature, t] : per_feature)
          ledger_.record_batch({.feature = frugal::cost::feature_id{feature},
                                .busy = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    busy * static_cast<double>(t.first) / static_cast<double>(total)),
                                .batch_size = t.second,
                                .capacity = static_cast<std::uint32_t>(b->max_batch()),
                                .tokens_in = t.first});
        b->report_duration(busy);
        b->fulfill(std::move(results));
      } catch (...) {
        b->fail(std::current_exception());
      }
    }
  }

  // Sampled, not told, once a second, into the ledger and /metrics: GPU 0's utilisation and memory
  // through NVML where the driver is (loaded at run time: a machine without one runs as well), and the
  // process's CPU time and RSS always.
  void sample(std::stop_token st) {
    std::string why;
    std::optional<frugal::cost::nvml> gpu = frugal::cost::nvml::open("libnvidia-ml.so.1", &why);
    try {
      if (gpu && gpu->device_count() == 0) {
        why = "NVML sees no GPU";
        gpu.reset();
      }
    } catch (const std::exception& e) {
      why = e.what();
      gpu.reset();
    }
    std::fprintf(stderr, "frugal_server: device memory and utilisation from %s\n",
                 gpu ? "GPU 0 (NVML)" : ("the process's RSS and CPU time (" + why + ")").c_str());
    gpu_sampled_.store(gpu.has_value());
    double last_cpu = process_cpu_seconds();
    auto last = clock::now();
    while (!st.stop_requested()) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lk(m);
      cv.wait_for(lk, st, std::chrono::seconds(1), [] { return false; });
      const double cpu = process_cpu_seconds();
      const auto now = clock::now();
      const double wall = std::chrono::duration<double>(now - last).count();
      cpu_utilization_.store(wall > 0 ? (cpu - last_cpu) / wall : 0);
      last_cpu = cpu, last = now;
      bool sampled = false;
      if (gpu) {
        try {
          const auto d = gpu->read(0);
          gpu_utilization_.store(d.utilization);
          ledger_.record_memory(0, d.used_bytes, d.total_bytes);
          sampled = true;
        } catch (const std::exception& e) {  // a failed read falls back to the process's figures this time
          std::fprintf(stderr, "frugal_server: %s\n", e.what());
        }
      }
      if (!sampled) ledger_.record_memory(0, resident_bytes(), physical_bytes());
      std::size_t depth = 0;
      std::size_t batchers = 0;
      for (const auto& r : routes_)
        if (r->batcher) depth += r->batcher->stats().queue_depth, ++batchers;
      if (batchers) ledger_.record_queue_depth(depth, opt_.max_queued * batchers);
    }
  }

  // The library's exporters composed into one text: the ledger, each model's batcher (label model), the
  // pool, the shared tier and the result cache, then the process's own figures.
  std::string metrics() {
    using type = frugal::prometheus_type;
    const auto snap = ledger_.snapshot();
    frugal::prometheus_writer w;
    frugal::cost::append_prometheus(w, snap);
    for (const auto& r : routes_)
      if (r->batcher) frugal::append_prometheus(w, r->batcher->stats(), {.labels = {{"model", r->name}}});
    w.family("frugal_batcher_queue_limit", type::gauge, "The batcher's queue limit (max_queued).");
    for (const auto& r : routes_)
      if (r->batcher)
        w.sample("frugal_batcher_queue_limit", {{"model", r->name}}, r->batcher->options().max_queued);
    llm_metrics(w);
    frugal::append_prometheus(w, pool_->stats());
#if FRUGAL_SERVER_WITH_REDIS
    if (tier_) frugal::append_prometheus(w, tier_->stats());
#endif
    if (cache_) frugal::append_prometheus(w, cache_->stats());
    const auto add = [&](const char* name, type t, const char* help, double v) {
      w.family(name, t, help);
      w.sample(name, {}, v);
    };
    add("frugal_process_cpu_seconds_total", type::counter, "CPU time of the server process.",
        process_cpu_seconds());
    add("frugal_process_cpu_utilization", type::gauge, "CPU seconds per second over the last sample (1 s).",
        cpu_utilization_.load());
    if (gpu_sampled_.load())
      add("frugal_device_utilization", type::gauge,
          "GPU 0's utilisation over NVML's last sample period (0..1).", gpu_utilization_.load());
    add("frugal_process_resident_bytes", type::gauge, "Resident set size of the server process.",
        static_cast<double>(resident_bytes()));
    add("frugal_process_memory_ratio", type::gauge, "Resident set over physical memory.",
        static_cast<double>(resident_bytes()) / static_cast<double>(physical_bytes()));
    // The replica advisor under the HPA rule (min 0, max 6, target 70%), for an HPA or KEDA to consume.
    const auto replicas = frugal::cost::advise_replicas(
        snap, {.target_utilization = 0.70, .min_replicas = 0, .max_replicas = 6});
    add("frugal_replicas_desired", type::gauge,
        "Replicas the HPA rule asks for at the measured utilization (min 0, max 6, target 70%).",
        static_cast<double>(replicas.desired));
    add("frugal_model_ready", type::gauge, "1 when every pinned model is loaded and warm.",
        serving() ? 1 : 0);
    return w.str();
  }

  bool serving() const { return ready_ && !draining_ && pool_->ready(); }

  // GET /v1/models: every model of the config, with its state in the pool.
  json models_json() const {
    const frugal::pool_stats ps = pool_->stats();
    json data = json::array();
    for (const frugal::model_status& m : ps.models) {
      const route& r = *by_name_.at(m.name);
      data.push_back({{"id", m.name},
                      {"object", "model"},
                      {"owned_by", "frugal"},
                      {"kind", r.chat ? "chat" : "embedding"},
                      {"precision", r.precision},
                      {"state", frugal::to_string(m.state)},
                      {"pinned", m.pinned},
                      {"idle_unload_s", r.idle_unload_s},
                      {"bytes", m.bytes},
                      {"loads", m.loads},
                      {"unloads", m.unloads},
                      {"evictions", m.evictions},
                      {"idle_unloads", m.idle_unloads},
                      {"last_load_seconds", std::chrono::duration<double>(m.last_load_time).count()},
                      {"last_error", m.last_error}});
    }
    return json{{"object", "list"}, {"data", std::move(data)}};
  }

  // The pool's loader: the encoder from spec.args (path, precision), its bytes as the encoder counts them;
  // or a language model's engine, its weights and KV budget.
  frugal::loaded_model<served_model> load_model(const frugal::model_spec<>& spec) {
    if (const auto k = spec.args.find("kind"); k != spec.args.end() && k->second == "chat")
      return load_llm(spec);
    auto e = std::make_unique<bert::encoder>(
        examples::load_encoder({.dir = spec.args.at("path"),
                                .precision = spec.args.at("precision"),
                                .calibration = opt_.calibration,
                                .calibration_sentences = opt_.calibration_sentences,
                                .threads = opt_.model_threads,
                                .precision_name = spec.name + ": precision"}));
    // The load's fp32 copies and calibration buffers are freed by now; give them back to the system, so that
    // the process holds about what the pool charges (int8: 97 -> 75 MiB resident, bench_pool_rss).
    ::malloc_trim(0);
    const std::size_t bytes = e->linear_bytes() + e->other_bytes();
    auto m = std::make_unique<served_model>();
    m->encoder = std::move(e);
    return {std::move(m), bytes};
  }

  // A language model's engine from spec.args (models_config.hpp's chat fields); its bytes are its weights
  // and its whole KV budget, reserved at load.
  frugal::loaded_model<served_model> load_llm(const frugal::model_spec<>& spec) {
    const auto num = [&](const char* k) { return static_cast<std::size_t>(std::stoull(spec.args.at(k))); };
    const llm_options o{.path = spec.args.at("path"),
                        .precision = llama::parse_precision(spec.args.at("precision")),
                        .threads = num("threads"),
                        .kv_budget_bytes = num("kv_budget_bytes"),
                        .scheduler = {.max_running = num("max_running"),
                                      .max_waiting = num("max_waiting"),
                                      .step_tokens = num("step_tokens"),
                                      .max_context = num("max_context")}};
    auto m = std::make_unique<served_model>();
    m->llm = std::make_unique<llm_engine>(o, [this](const llm_step_report& r) { record_step(r); });
    ::malloc_trim(0);
    const std::size_t bytes = m->llm->bytes();
    std::lock_guard g(engines_m_);
    engines_[spec.name] = m->llm.get();
    return {std::move(m), bytes};
  }

  // One short generation, so that the first request finds the model's pages touched.
  static void warm_up(llm_engine& e) {
    frugal::generation_request r;
    r.prompt = e.model().tokenizer().encode("warm up");
    r.max_tokens = 1;
    std::promise<void> done;
    e.submit(
        std::move(r),
        [&done](frugal::result<frugal::generation> g) noexcept {
          if (g.has_value())
            done.set_value();
          else
            done.set_exception(g.error());
        },
        0);
    done.get_future().get();
  }

  // A step's busy time split over the features of its sequences by the tokens each ran. Token counts are
  // booked per request (record_tokens), not here.
  void record_step(const llm_step_report& r) {
    std::uint64_t total = 0;
    for (const auto& [label, p] : r.by_label) total += p.tokens;
    if (total == 0) return;
    // The measured cost of prefill and decode tokens, from which the ledger prices input and output tokens.
    ledger_.record_step_cost(r.prefill_tokens, r.decode_tokens, r.busy);
    for (const auto& [label, p] : r.by_label)
      ledger_.record_batch({.feature = frugal::cost::feature_id{label},
                            .busy = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                r.busy * static_cast<double>(p.tokens) / static_cast<double>(total)),
                            .batch_size = p.sequences,
                            .capacity = static_cast<std::uint32_t>(r.capacity)});
  }

  // The token counts of one answered request: the ledger's per-feature tokens (in, served from the prefix
  // cache, out) and the route's own counters.
  void record_tokens(route& rt, frugal::cost::feature_id feature, std::size_t prompt, std::size_t cached,
                     std::size_t completion, std::optional<std::chrono::nanoseconds> ttft) {
    ledger_.record_generation({.feature = feature,
                               .prompt_tokens = prompt,
                               .cached_prompt_tokens = std::min(cached, prompt),
                               .generated_tokens = completion,
                               .time_to_first_token = ttft});
    rt.prompt_tokens.fetch_add(prompt);
    rt.cached_tokens.fetch_add(cached);
    rt.completion_tokens.fetch_add(completion);
  }

  route* find_route(const std::string& name, httplib::Response& res) {
    const auto found = by_name_.find(name);
    if (found != by_name_.end()) return found->second;
    std::string names;
    for (const auto& r : routes_) names += (names.empty() ? "'" : ", '") + r->name + "'";
    fail(res, 404, "the model '" + name + "' does not exist (this server has " + names + ")", "model");
    return nullptr;
  }

  route& first_embedding_route() {
    for (auto& r : routes_)
      if (!r->chat) return *r;
    throw std::invalid_argument("--semantic needs an embedding model in the config");
  }

  // What a request's sequence hands to its HTTP thread: its tokens as they come, then its end.
  struct generation_state {
    std::mutex m;
    std::condition_variable cv;
    std::vector<frugal::kv_token> tokens;
    std::optional<clock::time_point> first_token;
    bool resolved = false;
    std::optional<frugal::generation> gen;
    std::exception_ptr error;
  };

  // One chat or completion request from submit to its end.
  struct llm_call {
    std::shared_ptr<pool_type::lease> lease;
    llm_engine* engine = nullptr;
    route* rt = nullptr;
    std::shared_ptr<generation_state> st;
    frugal::sequence_id id = 0;
    frugal::cost::feature_id feature{};
    clock::time_point start{};
    std::string response_id;
    std::int64_t created = 0;
    bool chat = true;
    std::optional<text_stream> text;
    std::optional<connection_watch> watch;
    std::size_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    std::string finish_reason;  // stop, length, or abort (cut at shutdown)
    std::string error;          // the model failed
    bool disconnected = false;
    bool finished = false;
  };

  static std::string describe(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
    }
    return "unknown error";
  }

  // Cancels the sequence and waits for the scheduler to end it (at its next step boundary, which frees
  // its KV blocks).
  static void cancel_and_wait(llm_call& c) {
    c.engine->cancel(c.id);
    std::unique_lock lk(c.st->m);
    c.st->cv.wait(lk, [&] { return c.st->resolved; });
  }

  bool past_grace() const {
    return draining_ && clock::now().time_since_epoch().count() > drain_deadline_.load();
  }

  // Feeds the sequence's text to emit until it ends, a stop string appears, the client goes (emit returns
  // false, or the socket is closed), or the shutdown grace is over; the sequence has resolved after it.
  void drive(llm_call& c, const std::function<bool(const std::string&)>& emit) {
    follow(c, emit);
    // One cut short (a stop string, a client gone, the grace over) resolves cancelled, without its
    // generation; the engine kept what its first step found in the prefix cache.
    c.cached_tokens = c.st->gen ? c.st->gen->cached_tokens : c.engine->cached_tokens(c.id);
  }

  void follow(llm_call& c, const std::function<bool(const std::string&)>& emit) {
    generation_state& st = *c.st;
    std::size_t seen = 0;
    for (;;) {
      std::vector<frugal::kv_token> fresh;
      bool resolved;
      {
        std::unique_lock lk(st.m);
        st.cv.wait_for(lk, std::chrono::milliseconds(20),
                       [&] { return st.tokens.size() > seen || st.resolved; });
        fresh.assign(st.tokens.begin() + static_cast<std::ptrdiff_t>(seen), st.tokens.end());
        seen = st.tokens.size();
        resolved = st.resolved;
      }
      for (const frugal::kv_token t : fresh) {
        ++c.completion_tokens;
        const std::string piece = c.text->push(t);
        if (!piece.empty() && !emit(piece)) {
          c.disconnected = true;
          return cancel_and_wait(c);
        }
        if (c.text->stopped()) {
          c.finish_reason = "stop";
          if (!resolved) cancel_and_wait(c);
          return;
        }
      }
      if (resolved) {
        if (st.error) {
          c.error = describe(st.error);
          return;
        }
        c.finish_reason = frugal::to_string(st.gen->reason);
        const std::string rest = c.text->finish();
        if (!rest.empty() && !emit(rest)) c.disconnected = true;
        return;
      }
      if (c.watch->closed()) {
        c.disconnected = true;
        return cancel_and_wait(c);
      }
      if (past_grace()) {
        c.finish_reason = "abort";
        return cancel_and_wait(c);
      }
    }
  }

  // Books the request once: the ledger (a client that left is cancelled, not an error of the server), its
  // time to first token, the token counts, the outcome counters.
  void finish_call(llm_call& c) {
    if (c.finished) return;
    c.finished = true;
    if (!c.st->resolved) cancel_and_wait(c);
    c.engine->forget(c.id);
    const auto latency = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - c.start);
    ledger_.record_request(c.feature, latency,
                           c.disconnected     ? frugal::cost::outcome::cancelled
                           : !c.error.empty() ? frugal::cost::outcome::error
                                              : frugal::cost::outcome::ok);
    std::optional<std::chrono::nanoseconds> ttft;
    {
      std::lock_guard lk(c.st->m);
      if (c.st->first_token)
        ttft = std::chrono::duration_cast<std::chrono::nanoseconds>(*c.st->first_token - c.start);
    }
    record_tokens(*c.rt, c.feature, c.prompt_tokens, c.cached_tokens, c.completion_tokens, ttft);
    (c.disconnected               ? c.rt->outcome_cancelled
     : !c.error.empty()           ? c.rt->outcome_error
     : c.finish_reason == "abort" ? c.rt->outcome_aborted
                                  : c.rt->outcome_ok)
        .fetch_add(1);
    answered_.fetch_add(1);
    c.lease.reset();
  }

  json usage_json(const llm_call& c) const {
    return {{"prompt_tokens", c.prompt_tokens},
            {"completion_tokens", c.completion_tokens},
            {"total_tokens", c.prompt_tokens + c.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
  }

  // POST /v1/chat/completions (chat) and /v1/completions: validate, tokenize, submit, then answer at the
  // end or stream the text as it comes.
  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto start = clock::now();
    if (!authorized(req, res)) return;
    if (!ready_ || draining_) {
      res.set_header("Retry-After", "1");
      return fail(res, 503, draining_ ? "the server is shutting down" : "the model is loading", nullptr,
                  "server_error");
    }
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return fail(res, 400, "the body is not valid JSON");
    completion_request cr;
    if (const auto e = parse_completion_request(body, chat, cr))
      return fail(res, e->status, e->message, e->param.empty() ? nullptr : e->param.c_str());
    route* rt = find_route(cr.model, res);
    if (!rt) return;
    if (!rt->chat)
      return fail(res, 400, "the model '" + rt->name + "' is an embedding model: use /v1/embeddings",
                  "model");
    std::string feature_name = req.get_header_value("X-Frugal-Feature");
    if (feature_name.empty()) feature_name = cr.user;
    frugal::cost::feature_id feature = default_feature_;
    if (!feature_name.empty()) {
      try {
        feature = ledger_.feature(feature_name);
      } catch (const std::invalid_argument& e) {
        return fail(res, 400, std::string("'user' / X-Frugal-Feature: ") + e.what(), "user");
      }
    }
    auto c = std::make_shared<llm_call>();
    c->rt = rt;
    c->feature = feature;
    c->start = start;
    c->chat = chat;
    try {
      c->lease = std::make_shared<pool_type::lease>(pool_->acquire(rt->name));
    } catch (const std::exception& e) {
      res.set_header("Retry-After", "1");
      return fail(res, 503, std::string("the model cannot be served now: ") + e.what(), nullptr,
                  "server_error");
    }
    c->engine = (*c->lease)->llm.get();
    const llama::model& model = c->engine->model();
    const auto& tok = model.tokenizer();
    std::vector<frugal::kv_token> prompt;
    const char* prompt_field = chat ? "messages" : "prompt";
    try {
      if (chat) {
        prompt = model.encode_chat(cr.messages);
      } else {
        prompt = tok.encode(cr.prompt, {.parse_special = false, .add_special = true});
      }
    } catch (const std::exception& e) {
      return fail(res, 400, e.what(), prompt_field);
    }
    if (prompt.empty())
      return fail(res, 400, std::string("'") + prompt_field + "' has no tokens", prompt_field);
    const std::size_t context = c->engine->max_context();
    if (prompt.size() >= context)
      return fail(res, 400,
                  "this model's maximum context length is " + std::to_string(context) + " tokens; the " +
                      prompt_field + " take " + std::to_string(prompt.size()),
                  prompt_field);
    std::size_t max_tokens = std::min(rt->default_max_tokens, context - prompt.size());
    if (cr.max_tokens) {
      if (prompt.size() + *cr.max_tokens > context)
        return fail(res, 400,
                    "this model's maximum context length is " + std::to_string(context) +
                        " tokens; you asked for " + std::to_string(prompt.size() + *cr.max_tokens) + " (" +
                        std::to_string(prompt.size()) + " in the " + prompt_field + ", " +
                        std::to_string(*cr.max_tokens) + " in the completion)",
                    cr.max_tokens_field);
      max_tokens = *cr.max_tokens;
    }
    c->prompt_tokens = prompt.size();
    c->text.emplace(tok, cr.stop);
    c->watch.emplace(req.remote_addr, req.remote_port, req.local_port);
    c->st = std::make_shared<generation_state>();
    frugal::generation_request gr;
    gr.prompt = std::move(prompt);
    gr.max_tokens = max_tokens;
    gr.sampling = {.temperature = cr.temperature,
                   .top_p = cr.top_p,
                   .seed = cr.seed ? *cr.seed
                                   : frugal::detail::splitmix64(
                                         static_cast<std::uint64_t>(start.time_since_epoch().count()) ^
                                         next_completion_id_.load())};
    gr.on_token = [st = c->st](frugal::kv_token t) {
      std::lock_guard g(st->m);
      if (!st->first_token) st->first_token = clock::now();
      st->tokens.push_back(t);
      st->cv.notify_all();
    };
    c->id = c->engine->submit(
        std::move(gr),
        [st = c->st](frugal::result<frugal::generation> g) noexcept {
          std::lock_guard lk(st->m);
          st->resolved = true;
          if (g.has_value())
            st->gen = std::move(*g);
          else
            st->error = g.error();
          st->cv.notify_all();
        },
        feature.value);
    // Refusals come at once, on this thread.
    std::optional<frugal::scheduler_errc> refused;
    {
      std::lock_guard lk(c->st->m);
      if (c->st->resolved && c->st->error) {
        try {
          std::rethrow_exception(c->st->error);
        } catch (const frugal::scheduler_error& e) {
          refused = e.code();
        } catch (...) {
        }
      }
    }
    if (refused) {
      c->engine->forget(c->id);
      const auto latency = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start);
      if (*refused == frugal::scheduler_errc::too_long) {
        ledger_.record_request(feature, latency, frugal::cost::outcome::rejected);
        rt->outcome_rejected.fetch_add(1);
        return fail(res, 400,
                    "the prompt and " + std::to_string(max_tokens) +
                        " completion tokens cannot fit this model's KV cache; ask for fewer",
                    cr.max_tokens_field);
      }
      ledger_.record_request(feature, latency, frugal::cost::outcome::rejected);
      rt->outcome_rejected.fetch_add(1);
      res.set_header("Retry-After", "1");
      if (*refused == frugal::scheduler_errc::queue_full)
        return fail(res, 429, "the server is at capacity: retry later", nullptr, "rate_limit_error");
      return fail(res, 503, "the model is shutting down", nullptr, "server_error");
    }
    accepted_.fetch_add(1);
    c->response_id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_completion_id_.fetch_add(1));
    c->created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    if (cr.stream) return stream(res, c, cr.include_usage);

    std::string text;
    drive(*c, [&](const std::string& piece) {
      text += piece;
      return true;
    });
    finish_call(*c);
    if (c->disconnected) return fail(res, 503, "the client closed the connection", nullptr, "server_error");
    if (!c->error.empty()) return fail(res, 500, "the model failed: " + c->error, nullptr, "server_error");
    json choice = {{"index", 0}, {"finish_reason", c->finish_reason}, {"logprobs", nullptr}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    else
      choice["text"] = text;
    res.set_content(json{{"id", c->response_id},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", c->created},
                         {"model", rt->name},
                         {"choices", json::array({std::move(choice)})},
                         {"usage", usage_json(*c)}}
                        .dump(),
                    "application/json");
  }

  // The Server-Sent Events of a streamed request: the role (chat), the text's deltas, the finish_reason,
  // the usage when asked, then [DONE]. A model failure after the first event is an error event.
  void stream(httplib::Response& res, const std::shared_ptr<llm_call>& call, bool include_usage) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, include_usage](std::size_t, httplib::DataSink& sink) {
          llm_call& c = *call;
          const auto send = [&](const json& j) {
            const std::string e = sse_event(j);
            return sink.write(e.data(), e.size());
          };
          const auto chunk = [&](json choice) {
            json j = {{"id", c.response_id},
                      {"object", c.chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", c.created},
                      {"model", c.rt->name},
                      {"choices", json::array({std::move(choice)})}};
            if (include_usage) j["usage"] = nullptr;
            return j;
          };
          const auto delta = [&](const std::string& piece) {
            return c.chat ? chunk({{"index", 0}, {"delta", {{"content", piece}}}, {"finish_reason", nullptr}})
                          : chunk({{"index", 0}, {"text", piece}, {"finish_reason", nullptr}});
          };
          if (c.chat && !send(chunk({{"index", 0},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"finish_reason", nullptr}}))) {
            c.disconnected = true;
            cancel_and_wait(c);
          } else {
            drive(c, [&](const std::string& piece) { return send(delta(piece)); });
          }
          bool ok = !c.disconnected;
          if (ok && !c.error.empty()) {
            ok = send(json{{"error",
                            {{"message", "the model failed: " + c.error},
                             {"type", "server_error"},
                             {"param", nullptr},
                             {"code", nullptr}}}});
          } else if (ok) {
            ok = send(
                c.chat ? chunk({{"index", 0}, {"delta", json::object()}, {"finish_reason", c.finish_reason}})
                       : chunk({{"index", 0}, {"text", ""}, {"finish_reason", c.finish_reason}}));
            if (ok && include_usage) {
              json u = chunk(nullptr);
              u["choices"] = json::array();
              u["usage"] = usage_json(c);
              ok = send(u);
            }
          }
          if (ok) {
            static constexpr std::string_view done = "data: [DONE]\n\n";
            ok = sink.write(done.data(), done.size());
          }
          if (!ok) c.disconnected = true;
          finish_call(c);
          if (ok) sink.done();
          return ok;
        },
        // Runs when the response goes, written or not: a client gone before the first event still has its
        // sequence cancelled.
        [this, call](bool) { finish_call(*call); });
  }

  // Each language model's scheduler and KV cache through the library's exporters (label model), the
  // Gateway API Inference Extension's model-server gauges under the names its protocol documents (vLLM's:
  // an InferencePool's endpoint picker reads them), and the requests by outcome and their tokens. The
  // protocol names the KV-cache gauge vllm:kv_cache_usage_perc; endpoint pickers that follow its earlier
  // text read vllm:gpu_cache_usage_perc, so both are written.
  void llm_metrics(frugal::prometheus_writer& w) {
    using type = frugal::prometheus_type;
    w.family("frugal_llm_requests_total", type::counter,
             "Chat and completion requests by outcome: ok, cancelled (the client left; its sequence was "
             "cancelled), aborted (cut at shutdown), rejected (429/400 at submit), error.");
    w.family("frugal_llm_tokens_total", type::counter,
             "Tokens of answered chat and completion requests: prompt, cached (prompt tokens from the prefix "
             "cache), completion.");
    for (const auto& r : routes_) {
      if (!r->chat) continue;
      const std::pair<const char*, std::uint64_t> outcomes[] = {{"ok", r->outcome_ok.load()},
                                                                {"cancelled", r->outcome_cancelled.load()},
                                                                {"aborted", r->outcome_aborted.load()},
                                                                {"rejected", r->outcome_rejected.load()},
                                                                {"error", r->outcome_error.load()}};
      for (const auto& [o, n] : outcomes)
        w.sample("frugal_llm_requests_total", {{"model", r->name}, {"outcome", o}}, n);
      w.sample("frugal_llm_tokens_total", {{"model", r->name}, {"kind", "prompt"}}, r->prompt_tokens.load());
      w.sample("frugal_llm_tokens_total", {{"model", r->name}, {"kind", "cached"}}, r->cached_tokens.load());
      w.sample("frugal_llm_tokens_total", {{"model", r->name}, {"kind", "completion"}},
               r->completion_tokens.load());
    }
    w.family("frugal_scheduler_waiting_limit", type::gauge,
             "The scheduler's max_waiting: sequences that may wait before a request is refused with 429.");
    w.family("vllm:num_requests_waiting", type::gauge,
             "Sequences waiting for admission (the Gateway API Inference Extension's TotalQueuedRequests).");
    w.family("vllm:num_requests_running", type::gauge,
             "Sequences admitted and running (the Gateway API Inference Extension's TotalRunningRequests).");
    const char* kv_help =
        "KV cache blocks used by sequences over all blocks, 0..1 (the Gateway API Inference Extension's "
        "KVCacheUtilization; the cache is in host memory here).";
    w.family("vllm:kv_cache_usage_perc", type::gauge, kv_help);
    w.family("vllm:gpu_cache_usage_perc", type::gauge, kv_help);
    w.family("vllm:cache_config_info", type::gauge,
             "1, labelled with the KV cache's block_size (tokens per block) and num_gpu_blocks (blocks in "
             "all): the protocol's optional BlockSize and NumGPUBlocks, for the prefix-cache scorer.");
    std::lock_guard g(engines_m_);
    for (const auto& [name, e] : engines_) {
      const frugal::scheduler_stats ss = e->scheduler_stats();
      const frugal::kv_cache_stats ks = e->kv_stats();
      frugal::append_prometheus(w, ss, {.labels = {{"model", name}}});
      frugal::append_prometheus(w, ks, {.labels = {{"model", name}}});
      w.sample("frugal_scheduler_waiting_limit", {{"model", name}}, e->max_waiting());
      w.sample("vllm:num_requests_waiting", {{"model_name", name}}, ss.waiting);
      w.sample("vllm:num_requests_running", {{"model_name", name}}, ss.running);
      const double usage =
          ks.blocks_total ? static_cast<double>(ks.blocks_used) / static_cast<double>(ks.blocks_total) : 0.0;
      w.sample("vllm:kv_cache_usage_perc", {{"model_name", name}}, usage);
      w.sample("vllm:gpu_cache_usage_perc", {{"model_name", name}}, usage);
      w.sample("vllm:cache_config_info",
               {{"model_name", name},
                {"block_size", std::to_string(ks.block_tokens)},
                {"num_gpu_blocks", std::to_string(ks.blocks_total)}},
               1);
    }
  }

  options opt_;
  frugal::cost::ledger<> ledger_;
  std::optional<frugal::lru_cache<std::vector<float>>> cache_;
#if FRUGAL_SERVER_WITH_REDIS
  using tier_type = frugal::redis_tier<std::vector<float>>;
  std::unique_ptr<tier_type> tier_;
#endif
  std::mutex engines_m_;  // before the pool, whose unload hook erases from engines_
  std::map<std::string, llm_engine*, std::less<>> engines_;  // the loaded language models
  std::unique_ptr<pool_type> pool_;             // after the ledger it records in: destroyed before it
  std::vector<std::unique_ptr<route>> routes_;  // after the pool: workers stop before it goes
  std::map<std::string, route*, std::less<>> by_name_;
  frugal::cost::feature_id default_feature_{};
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<double> cpu_utilization_{0};
  std::atomic<double> gpu_utilization_{0};
  std::atomic<bool> gpu_sampled_{false};
  std::atomic<std::uint64_t> accepted_{0}, answered_{0};
  std::atomic<clock::rep> drain_deadline_{0};
  std::atomic<std::uint64_t> next_completion_id_{1};
  std::jthread sampler_;
  std::unique_ptr<semantic_route> semantic_;  // last: destroyed first, it calls into the pool
};

}  // namespace server
