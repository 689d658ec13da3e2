#pragma once

// The language-model demo as a library, so that a test can run a short version of it: chat traffic
// (examples/common/chat_trace.hpp) served by the loop of chat_loop.hpp under a ladder of configurations,
// each step with its cost from the ledger, its latencies, its KV memory and its accuracy.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <frugal/frugal.hpp>

#include "../common/chat_trace.hpp"
#include "../common/config.hpp"
#include "../common/stats.hpp"
#include "chat_loop.hpp"
#include "config.hpp"
#include "llama.hpp"

#ifndef FRUGAL_DEMO_GGUF_MODEL
#  define FRUGAL_DEMO_GGUF_MODEL "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace demo {

struct chat_step_config {
  std::string name;
  std::string why;
  std::string precision = "native";
  bool batching = true;         ///< iteration-level batching; false: one request at a time
  bool prefix_cache = false;    ///< KV blocks of shared prompt prefixes kept and reused
  bool response_cache = false;  ///< whole greedy completions kept and reused
};

struct chat_config {
  std::uint64_t seed = 42;
  std::string out_dir = "build/demo-out";
  bool quiet = false;
  std::string model_name = "SmolLM2-135M-Instruct";
  std::string model_path;  ///< empty: $FRUGAL_GGUF_MODEL, else the build's default
  std::size_t threads = 2;
  std::size_t kv_budget_mb = 256;
  std::string gpu_name = "A10G (example price)";
  std::string gpu_hourly_usd = "1.006";
  chat_trace::options trace{.requests = 40,
                            .system_prompts = 4,
                            .zipf_s = 1.2,
                            .new_conversation = 0.4,
                            .max_turns = 4,
                            .answer_median = 24,
                            .answer_sigma = 0.6,
                            .answer_min = 4,
                            .answer_max = 64,
                            .repeat_share = 0.3,
                            .questions = 8};
  std::size_t clients = 16;
  std::size_t max_running = 16;
  std::size_t step_tokens = 256;
  std::size_t response_cache_entries = 1024;
  std::string accuracy_text = "/usr/share/common-licenses/GPL-3";
  std::size_t accuracy_ctx = 256;
  std::size_t accuracy_chunks = 4;
  std::vector<chat_step_config> ladder;
};

/// @brief The model kind a config document names ("mlp" when it names none).
inline std::string config_model_kind(const examples::config_document& doc) {
  const auto& r = doc.root();
  if (r.is_object() && r.contains("model") && r["model"].is_object() && r["model"].contains("kind") &&
      r["model"]["kind"].is_string())
    return r["model"]["kind"].get<std::string>();
  return "mlp";
}

/// @brief Reads the language-model demo's config (model.kind "smollm2"); unknown keys are refused, every
/// value is checked against its range, and errors name the field's whole path.
inline chat_config parse_chat_config(const examples::config_document& doc) {
  chat_config c;
  examples::config_object root(doc);
  root.get("seed", c.seed, std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max());
  root.get("out_dir", c.out_dir);
  root.get("quiet", c.quiet);
  root.section("model", [&](examples::config_object& m) {
    std::string kind = "smollm2";
    m.get("kind", kind, {"smollm2"});
    m.get("name", c.model_name);
    check_ledger_name(m, "name", c.model_name);
    m.get("path", c.model_path);
    m.get("threads", c.threads, std::size_t{1}, std::size_t{256});
    m.get("kv_budget_mb", c.kv_budget_mb, std::size_t{1}, std::size_t{1} << 20);
  });
  root.section("gpu", [&](examples::config_object& g) { read_gpu(g, c.gpu_name, c.gpu_hourly_usd); });
  root.section("traffic", [&](examples::config_object& t) {
    auto& o = c.trace;
    t.get("requests", o.requests, std::size_t{1}, std::size_t{100000});
    t.get("clients", c.clients, std::size_t{1}, std::size_t{4096});
    t.get("corpus", o.fortunes_dir);
    t.get("system_prompts", o.system_prompts, std::size_t{1}, std::size_t{1000});
    t.get("zipf_s", o.zipf_s, 0.0, 100.0);
    t.get("new_conversation", o.new_conversation, 0.001, 1.0);
    t.get("max_turns", o.max_turns, std::size_t{1}, std::size_t{64});
    t.get("repeat_share", o.repeat_share, 0.0, 1.0);
    t.get("questions", o.questions, std::size_t{1}, std::size_t{10000});
    t.get("question_zipf_s", o.question_zipf_s, 0.0, 100.0);
    t.get("answer_median", o.answer_median, 1.0, 4096.0);
    t.get("answer_sigma", o.answer_sigma, 0.0, 10.0);
    t.get("answer_min", o.answer_min, std::size_t{1}, std::size_t{4096});
    t.get("answer_max", o.answer_max, std::size_t{1}, std::size_t{4096});
    if (o.answer_min > o.answer_max) t.fail("answer_min", "must be <= traffic.answer_max");
  });
  root.section("scheduler", [&](examples::config_object& s) {
    s.get("max_running", c.max_running, std::size_t{1}, std::size_t{4096});
    s.get("step_tokens", c.step_tokens, std::size_t{1}, std::size_t{1} << 20);
  });
  root.section("response_cache", [&](examples::config_object& r) {
    r.get("max_entries", c.response_cache_entries, std::size_t{1}, std::size_t{1} << 24);
  });
  root.section("accuracy", [&](examples::config_object& a) {
    a.get("text", c.accuracy_text);
    a.get("ctx", c.accuracy_ctx, std::size_t{8}, std::size_t{1} << 16);
    a.get("chunks", c.accuracy_chunks, std::size_t{1}, std::size_t{1} << 16);
  });
  root.each("ladder", [&](examples::config_object& s, std::size_t) {
    chat_step_config st;
    s.get("name", st.name);
    if (s.has("name") && st.name.empty()) s.fail("name", "must not be empty when given");
    s.get("why", st.why);
    s.get("precision", st.precision, {"fp32", "native", "int8", "int4"});
    s.get("batching", st.batching);
    s.get("prefix_cache", st.prefix_cache);
    s.get("response_cache", st.response_cache);
    c.ladder.push_back(st);
  });
  root.finish();
  if (c.ladder.empty()) root.fail("ladder", "must not be empty");
  c.trace.seed = c.seed;
  if (c.model_path.empty()) {
    const char* env = std::getenv("FRUGAL_GGUF_MODEL");
    c.model_path = env && *env ? env : FRUGAL_DEMO_GGUF_MODEL;
  }
  return c;
}

/// @brief The files and directories @p c reads (the GGUF model, the corpus, the accuracy text), checked
/// before any work; throws config_error naming the key.
inline void check_paths(const chat_config& c, const examples::config_document& doc) {
  const path_checks p(doc);
  const std::string model_default = p.has("model.path") ? "" : "$FRUGAL_GGUF_MODEL or the build";
  p.file("model.path", c.model_path, model_default);
  {
    std::ifstream probe(c.model_path, std::ios::binary);
    char magic[4] = {};
    if (!probe.read(magic, 4) || std::string_view(magic, 4) != "GGUF")
      examples::config_object(doc).fail(
          "model.path",
          "\"" + c.model_path + "\" is not a GGUF file" +
              (model_default.empty() ? ""
                                     : " (not set in the config: the default from " + model_default + ")"));
  }
  p.directory("traffic.corpus", c.trace.fortunes_dir, {}, p.has("traffic.corpus") ? "" : "the demo");
  p.file("accuracy.text", c.accuracy_text, p.has("accuracy.text") ? "" : "the demo");
}

/// @brief What one step measured.
struct chat_step_result {
  chat_step_config step;
  std::size_t requests = 0, answered = 0;
  double wall_s = 0;
  std::uint64_t prompt_tokens = 0;         ///< of every request (usage)
  std::uint64_t cached_prompt_tokens = 0;  ///< served from the prefix cache
  std::uint64_t generated_tokens = 0;      ///< served, response cache hits included (usage)
  std::uint64_t response_hits = 0;
  std::uint64_t steps = 0, prefill_computed = 0, decode_tokens = 0;
  double mean_step_sequences = 0;  ///< sequences in a model step, on average
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  double cost_per_million_input = 0, cost_per_million_output = 0;  ///< from the ledger, in its currency
  std::string currency;
  double prefill_token_us = 0, decode_token_us = 0;  ///< the ledger's measured cost of a token
  std::size_t weight_bytes = 0, kv_bytes_per_token = 0, kv_peak_bytes = 0;
  double perplexity = 0;
  double agreement_answers = 0;  ///< share of answers equal to step 1's, token for token
  double agreement_tokens = 0;   ///< share of step 1's answer tokens before the first difference
  std::vector<std::vector<frugal::kv_token>> answers;  ///< by request, greedy
  nlohmann::json ledger_tokens;                        ///< the ledger's token counts (for the usage check)
  std::string prometheus, json_export, table;
};

using chat_progress_fn = std::function<void(const std::string& step, std::size_t done, std::size_t total,
                                            std::uint64_t tokens, double seconds)>;

namespace detail {

inline double ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

inline double to_double(const frugal::cost::money& m) { return std::stod(m.to_decimal()); }

// Three significant digits, never in exponent form.
inline std::string num(double v) {
  char b[64];
  const double a = std::abs(v);
  std::snprintf(b, sizeof b, a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3f", v);
  return b;
}

inline std::vector<std::int32_t> read_text_tokens(const llama::model& m, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("accuracy.text: " + path + " cannot be opened");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("accuracy.text: " + path + ": reading failed");
  return m.tokenizer().encode(text, {.parse_special = false, .add_special = true});
}

}  // namespace detail

/// @brief The traffic: the trace's chats as token ids, in trace order.
struct chat_traffic {
  std::vector<chat_trace::request> trace;
  std::vector<chat_request> requests;
  std::uint64_t shareable_prompt_tokens = 0;  ///< whole blocks an earlier prompt shares
  std::size_t repeated = 0;                   ///< requests that repeat an earlier one exactly
};

inline chat_traffic make_chat_traffic(const chat_config& cfg, const llama::model& m) {
  chat_traffic t;
  t.trace = chat_trace::make(cfg.trace);
  std::map<std::vector<frugal::kv_token>, std::size_t> seen;
  std::vector<std::vector<frugal::kv_token>> prompts;
  for (const auto& q : t.trace) {
    std::vector<frugal::chat::message> msgs;
    for (const auto& x : q.messages) msgs.push_back({x.role, x.content});
    chat_request r{.prompt = m.encode_chat(msgs), .max_tokens = q.answer_tokens};
    if (seen[r.prompt]++ && q.repeated) ++t.repeated;
    prompts.push_back(r.prompt);
    t.requests.push_back(std::move(r));
  }
  t.shareable_prompt_tokens = chat_trace::shareable_tokens(prompts, m.kv().stats().block_tokens);
  return t;
}

/// @brief Serves the traffic under one step of the ladder, from a freshly loaded model (cold caches).
inline chat_step_result run_chat_step(const chat_config& cfg, const chat_step_config& st,
                                      const chat_traffic& traffic, const chat_progress_fn& progress) {
  const llama::precision prec = llama::parse_precision(st.precision);
  auto model = llama::model::load(cfg.model_path, {.weights = prec,
                                                   .kv_budget_bytes = cfg.kv_budget_mb << 20,
                                                   .prefix_caching = st.prefix_cache,
                                                   .batch_invariant = true});
  chat_step_result r;
  r.step = st;
  r.requests = traffic.requests.size();
  r.weight_bytes = model->weight_bytes();
  r.kv_bytes_per_token = model->cfg().kv_bytes_per_token();
  r.answers.resize(r.requests);
  std::vector<double> ttft, itl;
  std::vector<bool> ok(r.requests, false);
  std::mutex mu;
  std::atomic<std::size_t> next{0}, done{0};
  std::atomic<std::uint64_t> tokens{0};
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  {
    chat_loop loop(*model, cfg.model_name + "/" + st.precision,
                   {.max_running = st.batching ? cfg.max_running : 1,
                    .step_tokens = cfg.step_tokens,
                    .response_cache_entries = st.response_cache ? cfg.response_cache_entries : 0,
                    .gpu_class = cfg.gpu_name,
                    .price = frugal::cost::rate::per_hour(frugal::cost::money::parse(cfg.gpu_hourly_usd)),
                    .feature = "chat",
                    .threads = cfg.threads});
    std::vector<std::jthread> clients;
    for (std::size_t c = 0; c < std::min(cfg.clients, r.requests); ++c)
      clients.emplace_back([&] {
        for (std::size_t i; (i = next.fetch_add(1)) < traffic.requests.size();) {
          try {
            chat_answer a = loop.answer(traffic.requests[i]);
            const auto n = a.completion.completion_tokens();
            std::lock_guard g(mu);
            ok[i] = true;
            r.answers[i] = std::move(a.completion.tokens);
            r.prompt_tokens += a.completion.prompt_tokens;
            r.cached_prompt_tokens += a.cached_tokens;
            r.generated_tokens += n;
            r.response_hits += a.response_hit;
            ttft.push_back(detail::ms(a.time_to_first_token));
            for (const auto d : a.inter_token) itl.push_back(detail::ms(d));
            tokens += n;
          } catch (const std::exception& e) {
            std::lock_guard g(mu);
            if (error.empty()) error = "request " + std::to_string(i) + ": " + e.what();
          }
          const std::size_t d = ++done;
          if (progress) progress(st.name, d, traffic.requests.size(), tokens.load(), seconds());
        }
      });
    clients.clear();  // joined
    r.wall_s = seconds();
    loop.close();
    if (!error.empty()) throw std::runtime_error("step '" + st.name + "': " + error);
    const frugal::scheduler_stats ss = loop.scheduler_stats();
    r.steps = ss.steps;
    r.prefill_computed = ss.prefill_tokens;
    r.decode_tokens = ss.decode_tokens;
    r.kv_peak_bytes = loop.peak_kv_bytes();
    const frugal::cost::ledger_snapshot snap = loop.ledger().snapshot();
    const frugal::cost::feature_figures& f = *snap.find("chat");
    r.mean_step_sequences = f.mean_batch_size;  // record_batch books each step's sequences
    r.cost_per_million_input = detail::to_double(f.cost_per_million_input);
    r.cost_per_million_output = detail::to_double(f.cost_per_million_output);
    r.currency = std::string(snap.cur.code());
    r.prefill_token_us = snap.step_costs.prefill_token_ns / 1e3;
    r.decode_token_us = snap.step_costs.decode_token_ns / 1e3;
    r.ledger_tokens = {{"prompt_tokens", f.prompt_tokens + f.response_prompt_tokens},
                       {"cached_prompt_tokens", f.cached_prompt_tokens},
                       {"generated_tokens", f.generated_tokens + f.response_generated_tokens},
                       {"response_hits", f.response_hits}};
    r.prometheus = frugal::cost::to_prometheus(snap);
    r.json_export = frugal::cost::to_json(snap);
    r.table = frugal::cost::to_table(snap);
  }
  r.answered = static_cast<std::size_t>(std::count(ok.begin(), ok.end(), true));
  r.ttft_p50_ms = examples::quantile(ttft, 0.5);
  r.ttft_p99_ms = examples::quantile(ttft, 0.99);
  r.itl_p50_ms = examples::quantile(itl, 0.5);
  r.itl_p99_ms = examples::quantile(itl, 0.99);
  return r;
}

/// @brief Perplexity of @p precision on the config's fixed text (accuracy.*).
inline double chat_perplexity(const chat_config& cfg, llama::precision p) {
  auto m =
      llama::model::load(cfg.model_path, {.weights = p, .prefix_caching = false, .batch_invariant = true});
  const std::vector<std::int32_t> ids = detail::read_text_tokens(*m, cfg.accuracy_text);
  const std::size_t chunks = std::min(cfg.accuracy_chunks, ids.size() / cfg.accuracy_ctx);
  if (chunks == 0)
    throw std::runtime_error("accuracy.text: " + cfg.accuracy_text + " has " + std::to_string(ids.size()) +
                             " tokens, fewer than one chunk of accuracy.ctx " +
                             std::to_string(cfg.accuracy_ctx));
  frugal::quant::thread_pool pool(cfg.threads);
  const std::vector<double> nll = llama::chunk_nll(*m, ids, cfg.accuracy_ctx, chunks, &pool);
  double sum = 0;
  for (double x : nll) sum += x;
  return std::exp(sum / static_cast<double>(chunks * (cfg.accuracy_ctx - 1 - cfg.accuracy_ctx / 2)));
}

/// @brief Runs every step of the ladder on the same traffic; accuracy is against step 1.
inline std::vector<chat_step_result> run_chat(const chat_config& cfg, const chat_progress_fn& progress = {},
                                              chat_traffic* traffic_out = nullptr) {
  chat_traffic traffic;
  {
    auto m =
        llama::model::load(cfg.model_path, {.weights = llama::precision::native, .prefix_caching = false});
    traffic = make_chat_traffic(cfg, *m);
  }
  std::map<std::string, double> ppl;
  std::vector<chat_step_result> out;
  for (const auto& st : cfg.ladder) {
    out.push_back(run_chat_step(cfg, st, traffic, progress));
    chat_step_result& r = out.back();
    auto [it, fresh] = ppl.try_emplace(st.precision, 0.0);
    if (fresh) it->second = chat_perplexity(cfg, llama::parse_precision(st.precision));
    r.perplexity = it->second;
    const auto& base = out.front().answers;
    std::size_t same = 0, agree = 0, total = 0;
    for (std::size_t i = 0; i < base.size(); ++i) {
      same += r.answers[i] == base[i];
      std::size_t k = 0;
      while (k < base[i].size() && k < r.answers[i].size() && base[i][k] == r.answers[i][k]) ++k;
      agree += k;
      total += base[i].size();
    }
    r.agreement_answers = base.empty() ? 0 : static_cast<double>(same) / static_cast<double>(base.size());
    r.agreement_tokens = total ? static_cast<double>(agree) / static_cast<double>(total) : 0;
  }
  if (traffic_out) *traffic_out = std::move(traffic);
  return out;
}

/// @brief One measured line per step on what changed from the step before it.
inline std::string chat_why(const chat_step_result& r, const chat_step_result* prev) {
  using detail::num;
  const auto ms = [](double us) { return num(us / 1e3) + " ms"; };
  if (!prev)
    return "the baseline: " + std::to_string(r.steps) + " model steps of " + num(r.mean_step_sequences) +
           " sequence on average; a decode token costs " + ms(r.decode_token_us) + ", a prefill token " +
           ms(r.prefill_token_us);
  const auto fell = [](double now, double before) {
    return before > 0 ? num(100.0 * (1.0 - now / before)) + "%" : std::string("n/a");
  };
  std::vector<std::string> parts;
  if (r.step.batching != prev->step.batching)
    parts.push_back("a step ran " + num(r.mean_step_sequences) + " sequences on average (was " +
                    num(prev->mean_step_sequences) + "): a decode token's measured cost fell " +
                    fell(r.decode_token_us, prev->decode_token_us) + " (" + ms(prev->decode_token_us) +
                    " -> " + ms(r.decode_token_us) + ")");
  if (r.step.precision != prev->step.precision)
    parts.push_back("weights " + num(prev->weight_bytes / 1e6) + " -> " + num(r.weight_bytes / 1e6) +
                    " MB; a decode token " + ms(prev->decode_token_us) + " -> " + ms(r.decode_token_us) +
                    ", a prefill token " + ms(prev->prefill_token_us) + " -> " + ms(r.prefill_token_us) +
                    "; perplexity " + num(prev->perplexity) + " -> " + num(r.perplexity));
  if (r.step.prefix_cache != prev->step.prefix_cache)
    parts.push_back(
        "prefill tokens computed fell " +
        fell(static_cast<double>(r.prefill_computed), static_cast<double>(prev->prefill_computed)) + " (" +
        std::to_string(prev->prefill_computed) + " -> " + std::to_string(r.prefill_computed) + "; " +
        std::to_string(r.cached_prompt_tokens) + " of " + std::to_string(r.prompt_tokens) +
        " prompt tokens from the prefix cache)");
  if (r.step.response_cache != prev->step.response_cache)
    parts.push_back(std::to_string(r.response_hits) + " of " + std::to_string(r.requests) +
                    " requests answered without a model step; decode tokens computed " +
                    std::to_string(prev->decode_tokens) + " -> " + std::to_string(r.decode_tokens) +
                    ", prefill tokens computed " + std::to_string(prev->prefill_computed) + " -> " +
                    std::to_string(r.prefill_computed));
  if (parts.empty()) parts.push_back("the same configuration as the step before");
  std::string o;
  for (std::size_t i = 0; i < parts.size(); ++i) o += (i ? "; " : "") + parts[i];
  return o;
}

/// @brief The ladder as JSON: the traffic, the CPU, and each step's figures (the plot's input).
inline nlohmann::json chat_results_json(const chat_config& cfg, const chat_traffic& t,
                                        const std::vector<chat_step_result>& rs) {
  std::uint64_t prompt = 0, answer = 0;
  for (const auto& q : t.requests) {
    prompt += q.prompt.size();
    answer += q.max_tokens;
  }
  nlohmann::json steps = nlohmann::json::array();
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    steps.push_back({{"step", i + 1},
                     {"name", r.step.name},
                     {"precision", r.step.precision},
                     {"batching", r.step.batching},
                     {"prefix_cache", r.step.prefix_cache},
                     {"response_cache", r.step.response_cache},
                     {"requests", r.requests},
                     {"answered", r.answered},
                     {"wall_s", r.wall_s},
                     {"output_tokens_per_s", r.generated_tokens / r.wall_s},
                     {"ttft_ms", {{"p50", r.ttft_p50_ms}, {"p99", r.ttft_p99_ms}}},
                     {"itl_ms", {{"p50", r.itl_p50_ms}, {"p99", r.itl_p99_ms}}},
                     {"cost_per_million_input", r.cost_per_million_input},
                     {"cost_per_million_output", r.cost_per_million_output},
                     {"currency", r.currency},
                     {"prompt_tokens", r.prompt_tokens},
                     {"cached_prompt_tokens", r.cached_prompt_tokens},
                     {"prompt_cached_share",
                      r.prompt_tokens ? double(r.cached_prompt_tokens) / double(r.prompt_tokens) : 0.0},
                     {"generated_tokens", r.generated_tokens},
                     {"response_hits", r.response_hits},
                     {"model_steps", r.steps},
                     {"prefill_tokens_computed", r.prefill_computed},
                     {"decode_tokens_computed", r.decode_tokens},
                     {"weight_bytes", r.weight_bytes},
                     {"kv_bytes_per_token", r.kv_bytes_per_token},
                     {"kv_peak_bytes", r.kv_peak_bytes},
                     {"perplexity", r.perplexity},
                     {"agreement_answers", r.agreement_answers},
                     {"agreement_tokens", r.agreement_tokens},
                     {"ledger_tokens", r.ledger_tokens},
                     {"why", chat_why(r, i ? &rs[i - 1] : nullptr)}});
  }
  return {{"model", cfg.model_name},
          {"threads", cfg.threads},
          {"gpu", {{"name", cfg.gpu_name}, {"hourly_usd", cfg.gpu_hourly_usd}}},
          {"traffic",
           {{"requests", t.requests.size()},
            {"clients", cfg.clients},
            {"prompt_tokens", prompt},
            {"max_answer_tokens", answer},
            {"shareable_prompt_tokens", t.shareable_prompt_tokens},
            {"repeated_requests", t.repeated},
            {"seed", cfg.seed}}},
          {"steps", steps}};
}

/// @brief The ladder's table and what each step contributed, in Markdown.
inline std::string format_chat_report(const chat_config& cfg, const nlohmann::json& j) {
  std::ostringstream o;
  char line[768];
  const auto& tr = j.at("traffic");
  std::snprintf(
      line, sizeof line,
      "%s on %zu threads; traffic: %d chat requests from %d clients (%d prompt tokens, of which %d in "
      "blocks an earlier prompt shares; %d exact repeats); prices at %s, %s/h\n\n",
      cfg.model_name.c_str(), cfg.threads, tr.at("requests").get<int>(), tr.at("clients").get<int>(),
      tr.at("prompt_tokens").get<int>(), tr.at("shareable_prompt_tokens").get<int>(),
      tr.at("repeated_requests").get<int>(), cfg.gpu_name.c_str(), cfg.gpu_hourly_usd.c_str());
  o << line;
  o << "| step | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | per 1M input | per 1M output | prompt "
       "from "
       "cache | KV peak MB | perplexity | same answers as step 1 |\n"
       "|---|---|---|---|---|---|---|---|---|---|\n";
  const auto& steps = j.at("steps");
  for (const auto& s : steps) {
    std::snprintf(
        line, sizeof line,
        "| %d %s | %.1f | %.0f / %.0f | %.1f / %.1f | %.4f %s | %.4f %s | %.0f%% | %.1f | %.3f | %.0f%% "
        "(%.0f%% of tokens) |\n",
        s.at("step").get<int>(), s.at("name").get<std::string>().c_str(),
        s.at("output_tokens_per_s").get<double>(), s.at("ttft_ms").at("p50").get<double>(),
        s.at("ttft_ms").at("p99").get<double>(), s.at("itl_ms").at("p50").get<double>(),
        s.at("itl_ms").at("p99").get<double>(), s.at("cost_per_million_input").get<double>(),
        s.at("currency").get<std::string>().c_str(), s.at("cost_per_million_output").get<double>(),
        s.at("currency").get<std::string>().c_str(), 100 * s.at("prompt_cached_share").get<double>(),
        s.at("kv_peak_bytes").get<double>() / 1e6, s.at("perplexity").get<double>(),
        100 * s.at("agreement_answers").get<double>(), 100 * s.at("agreement_tokens").get<double>());
    o << line;
  }
  o << "\nWhy each step helps (measured):\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    o << "- step " << i + 1 << " (" << s.at("name").get<std::string>()
      << "): " << s.at("why").get<std::string>();
    if (i < cfg.ladder.size() && !cfg.ladder[i].why.empty()) o << ". " << cfg.ladder[i].why;
    o << "\n";
  }
  const double first = steps.front().at("cost_per_million_output").get<double>();
  const double last = steps.back().at("cost_per_million_output").get<double>();
  if (first > 0 && last > 0) {
    std::snprintf(line, sizeof line, "\nCost per 1M output tokens: step %zu is %.1fx cheaper than step 1",
                  steps.size(), first / last);
    o << line;
    for (std::size_t i = 1; i < steps.size(); ++i) {
      const double a = steps[i - 1].at("cost_per_million_output").get<double>();
      const double b = steps[i].at("cost_per_million_output").get<double>();
      std::snprintf(line, sizeof line, "%s step %zu %.2fx", i == 1 ? " (" : ",", i + 1, b > 0 ? a / b : 0.0);
      o << line;
    }
    o << (steps.size() > 1 ? ")" : "") << ".\n";
  }
  return o.str();
}

}  // namespace demo
