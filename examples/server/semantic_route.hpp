#pragma once

// POST /v1/semantic/answer: frugal::semantic_cache in front of an expensive model, keyed by the request's
// MiniLM embedding (the cheap model the server already runs).
//
//   POST /v1/semantic/answer   {"input": "question", "namespace": "optional"}
//     -> {"answer": "...", "cache": "miss" | "exact" | "semantic", "similarity": x | null,
//         "answered_for": "the question the answer was computed for"}
//   GET  /v1/semantic/metrics  its own ledger (Prometheus text) and the cache's counters
//   GET  /v1/semantic/ledger   the same ledger as JSON
//
// The expensive model is a stand-in, not a model: a call sleeps model_ms, one call at a time (one device),
// and answers "stand-in answer to: <question>". The ledger books each call as model_ms of busy time on a
// device priced at gpu_usd an hour, and each request's MiniLM embedding, timed for real, on one priced at
// the server's --hourly-usd. Its ledger is apart from the server's (/metrics), whose families it repeats.
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <frugal/cache.hpp>
#include <frugal/cost.hpp>
#include <nlohmann/json.hpp>
#if FRUGAL_SERVER_WITH_SEMANTIC
#  include <frugal/semantic.hpp>
#endif

#include "../common/flags.hpp"

#include <httplib.h>

namespace server {

/// @brief The route's settings: flags --semantic, --semantic-threshold, --semantic-entries,
/// --semantic-model-ms, --semantic-gpu-usd.
struct semantic_route_options {
  bool enabled = false;
  float threshold = 0;  ///< 0: frugal::semantic_default_threshold
  std::size_t entries = 10000;
  double model_ms = 200;         ///< the stand-in's time per call
  std::string gpu_usd = "3.60";  ///< the stand-in's device, an hour
  std::size_t max_input_bytes = 4096;
};

/// @brief Reads the current flag of @p f if it is one of the route's flags; false if not.
inline bool semantic_flag(semantic_route_options& o, examples::flags& f) {
  if (f.is("--semantic"))
    o.enabled = true;
  else if (f.is("--semantic-threshold"))
    o.threshold = static_cast<float>(f.number(0.01, 1));
  else if (f.is("--semantic-entries"))
    o.entries = f.integer(1, 1u << 30);
  else if (f.is("--semantic-model-ms"))
    o.model_ms = f.number(0, 60000);
  else if (f.is("--semantic-gpu-usd")) {
    const std::string v = f.value();
    try {  // named by its flag, not by the money parser or the ledger that books it
      const frugal::cost::money m = frugal::cost::money::parse(v);
      if (m.nanos() <= 0) throw std::invalid_argument("must be a price > 0, not \"" + v + "\"");
      o.gpu_usd = m.to_decimal();
    } catch (const std::invalid_argument& e) {
      throw examples::usage_error(std::string("--semantic-gpu-usd: ") + e.what());
    }
  } else
    return false;
  return true;
}

#if FRUGAL_SERVER_WITH_SEMANTIC
class semantic_route {
 public:
  /// The request's embedding, or nullopt while the model is not ready.
  using embed_fn = std::function<std::optional<std::vector<float>>(const std::string&)>;
  /// The server's bearer-token check: true, or false with the 401 answered.
  using auth_fn = std::function<bool(const httplib::Request&, httplib::Response&)>;

  semantic_route(const semantic_route_options& o, const std::string& cpu_usd, embed_fn embed, auth_fn auth)
      : opt_(o),
        embed_(std::move(embed)),
        authorized_(std::move(auth)),
        ledger_(
            {.prices = {{.gpu_class = "stand-in",
                         .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse(o.gpu_usd))},
                        {.gpu_class = "cpu",
                         .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse(cpu_usd))}},
             .devices = {{.gpu_class = "stand-in", .name = "expensive"},
                         {.gpu_class = "cpu", .name = "minilm"}}}),
        cache_({.dimension = 384,
                .threshold = o.threshold > 0 ? o.threshold : frugal::semantic_default_threshold,
                .max_entries = o.entries,
                .weigher = [](const cached& c) { return sizeof(c) + c.answer.size() + c.question.size(); }}) {
    answer_feature_ = ledger_.feature("answer");
    embed_feature_ = ledger_.feature("embed");
  }

  void routes(httplib::Server& http) {
    http.Post("/v1/semantic/answer",
              [this](const httplib::Request& req, httplib::Response& res) { answer(req, res); });
    http.Get("/v1/semantic/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized_(req, res)) res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/semantic/ledger", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized_(req, res))
        res.set_content(frugal::cost::to_json(ledger_.snapshot()), "application/json");
    });
  }

 private:
  using json = nlohmann::json;
  using clock = std::chrono::steady_clock;
  struct cached {
    std::string answer, question;
  };

  static void reply_error(httplib::Response& res, int status, const std::string& message, const char* param,
                          const char* type = "invalid_request_error") {
    res.status = status;
    res.set_content(json{{"error",
                          {{"message", message},
                           {"type", type},
                           {"param", param ? json(param) : json()},
                           {"code", json()}}}}
                        .dump(),
                    "application/json");
  }

  // The stand-in for the expensive model: one call at a time, model_ms each.
  std::string expensive_model(const std::string& question) {
    std::lock_guard lock(model_mutex_);
    const auto busy = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(opt_.model_ms));
    std::this_thread::sleep_for(busy);
    ledger_.record_batch({.feature = answer_feature_, .device = 0, .busy = busy});
    return "stand-in answer to: " + question;
  }

  void answer(const httplib::Request& req, httplib::Response& res) {
    const auto start = clock::now();
    if (!authorized_(req, res)) return;
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) return reply_error(res, 400, "the body is not valid JSON", nullptr);
    if (!body.is_object()) return reply_error(res, 400, "the body must be a JSON object", nullptr);
    const auto input = body.find("input");
    if (input == body.end()) return reply_error(res, 400, "'input' is required", "input");
    if (!input->is_string()) return reply_error(res, 400, "'input' must be a string", "input");
    const std::string text = input->get<std::string>();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      return reply_error(res, 400, "'input' is empty or only whitespace", "input");
    if (text.size() > opt_.max_input_bytes)
      return reply_error(res, 413,
                         "'input' has " + std::to_string(text.size()) + " bytes, over the limit of " +
                             std::to_string(opt_.max_input_bytes),
                         "input", "request_too_large");
    std::string ns;
    if (const auto n = body.find("namespace"); n != body.end()) {
      if (!n->is_string()) return reply_error(res, 400, "'namespace' must be a string", "namespace");
      ns = n->get<std::string>();
    }
    // An embedding of another dimension than the cache's (another model) or a failed put: a 500, booked.
    try {
      const auto t0 = clock::now();
      const auto e = embed_(text);
      if (!e) {
        res.set_header("Retry-After", "1");
        return reply_error(res, 503, "the model is loading or the server is shutting down", nullptr,
                           "server_error");
      }
      ledger_.record_batch({.feature = embed_feature_,
                            .device = 1,
                            .busy = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0)});
      const frugal::key128 key = frugal::hash_key(std::string_view(ns), std::string_view(text));
      json out;
      if (const auto hit = cache_.get(*e, key, ns)) {
        const bool exact = hit->match == frugal::semantic_match::exact;
        if (exact)
          ledger_.record_cache_hit(answer_feature_);
        else
          ledger_.record_semantic_hit(answer_feature_);
        out = {{"answer", hit->value->answer},
               {"cache", exact ? "exact" : "semantic"},
               {"similarity", hit->similarity},
               {"answered_for", hit->value->question}};
      } else {
        std::string a = expensive_model(text);
        out = {{"answer", a}, {"cache", "miss"}, {"similarity", nullptr}, {"answered_for", text}};
        cache_.put(*e, key, cached{std::move(a), text}, ns);
      }
      ledger_.record_request(answer_feature_,
                             std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start));
      res.set_content(out.dump(), "application/json");
    } catch (const std::exception& ex) {
      ledger_.record_request(answer_feature_,
                             std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start),
                             frugal::cost::outcome::error);
      reply_error(res, 500, std::string("the semantic route failed: ") + ex.what(), nullptr, "server_error");
    }
  }

  std::string metrics() {
    frugal::prometheus_writer w;
    frugal::cost::append_prometheus(w, ledger_.snapshot());
    frugal::append_prometheus(w, cache_.stats());
    return w.str();
  }

  semantic_route_options opt_;
  embed_fn embed_;
  auth_fn authorized_;
  frugal::cost::ledger<> ledger_;
  frugal::semantic_cache<cached> cache_;
  frugal::cost::feature_id answer_feature_{}, embed_feature_{};
  std::mutex model_mutex_;
};
#else
// Built without hnswlib (libhnswlib-dev): --semantic is refused at start-up.
class semantic_route {
 public:
  template <class... A>
  explicit semantic_route(A&&...) {
    throw std::invalid_argument(
        "--semantic: this build has no semantic cache (libhnswlib-dev was not found)");
  }
  void routes(httplib::Server&) {}
};
#endif

}  // namespace server
