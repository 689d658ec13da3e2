#pragma once

// The part of the language-model demo to copy: a generation loop that the user owns, built from frugal's
// parts. Callers call answer() from their own threads. A response cache answers a deterministic request
// it has seen without a model step; the others go to the iteration-level scheduler, whose steps one loop
// thread runs on the model (the model call is yours: llama::model::run_step here). Every step's measured
// time is booked in the cost ledger, which prices input and output tokens from it.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <frugal/frugal.hpp>

#include "llama.hpp"

namespace demo {

struct chat_loop_options {
  /// Sequences in one step at most: 1 is one request at a time, the baseline.
  std::size_t max_running = 16;
  /// Tokens in one step at most (decode first, then prefill chunks).
  std::size_t step_tokens = 256;
  /// Entries of the response cache (an LRU of whole completions); 0: no response cache.
  std::size_t response_cache_entries = 0;
  std::string gpu_class = "A10G";
  frugal::cost::rate price{};
  std::string feature = "chat";
  std::size_t threads = 2;
};

struct chat_request {
  std::vector<frugal::kv_token> prompt;
  std::size_t max_tokens = 64;
};

/// @brief One answer: the completion and what it cost in time.
struct chat_answer {
  frugal::completion completion;
  std::size_t cached_tokens = 0;  ///< prompt tokens the prefix cache served
  bool response_hit = false;      ///< answered by the response cache, without a model step
  std::chrono::nanoseconds time_to_first_token{0};
  std::vector<std::chrono::nanoseconds> inter_token;  ///< between consecutive tokens (none for a hit)
};

class chat_loop {
 public:
  using clock = std::chrono::steady_clock;

  /// @brief Serves @p model (its KV cache, prefix caching as it was loaded) until close(). @p model_id
  /// scopes the response cache's keys (the file and the precision).
  chat_loop(llama::model& model, std::string model_id, chat_loop_options o)
      : model_(model),
        model_id_(std::move(model_id)),
        opts_(std::move(o)),
        pool_(opts_.threads),
        sched_(model.kv(), {.max_running = opts_.max_running,
                            .max_waiting = 1 << 16,
                            .step_tokens = opts_.step_tokens,
                            .max_context = model.cfg().context,
                            .vocab_size = model.cfg().vocab}),
        ledger_({.prices = {{.gpu_class = opts_.gpu_class, .on_demand = opts_.price}},
                 .devices = {{.gpu_class = opts_.gpu_class, .name = "cpu0"}}}),
        feature_(ledger_.feature(opts_.feature)),
        stop_(model.stop_tokens()) {
    if (opts_.response_cache_entries) {
      store_.emplace(frugal::cache_options<frugal::key128, frugal::completion>{
          .max_entries = opts_.response_cache_entries});
      responses_.emplace(*store_, frugal::response_cache_options{.ledger = &ledger_});
    }
    loop_ = std::jthread([this](std::stop_token st) { loop(st); });
  }
  chat_loop(const chat_loop&) = delete;
  chat_loop& operator=(const chat_loop&) = delete;
  ~chat_loop() { close(); }

  /// @brief A greedy answer to @p r, from the caller's thread; throws what the model or the scheduler threw.
  chat_answer answer(const chat_request& r) {
    const auto t0 = clock::now();
    chat_answer a;
    try {
      if (responses_) {
        // get() and put() rather than get_or_generate(): a request identical to one still generating is
        // generated too, instead of waiting for the other's whole completion (its time to first token).
        frugal::generation_request g = request(r);
        const auto rr = frugal::response_request::of(model_id_, g, false);
        if (const auto hit = responses_->get(rr, feature_)) {
          a.completion = *hit;
          a.response_hit = true;
          a.time_to_first_token = clock::now() - t0;
        } else {
          a.completion = generate(g, a);  // a copy: rr points into g
          responses_->put(rr, a.completion);
        }
      } else {
        a.completion = generate(request(r), a);
      }
    } catch (...) {
      book(t0, frugal::cost::outcome::error);
      throw;
    }
    book(t0, frugal::cost::outcome::ok);
    return a;
  }

  /// @brief Stops taking requests and joins the loop once the running sequences are done.
  void close() {
    sched_.close();
    if (loop_.joinable()) {
      loop_.request_stop();
      loop_.join();
    }
  }

  frugal::cost::ledger<>& ledger() noexcept { return ledger_; }
  frugal::scheduler_stats scheduler_stats() const { return sched_.stats(); }
  /// @brief The most KV-cache bytes held after any step.
  std::size_t peak_kv_bytes() const {
    std::lock_guard g(m_);
    return peak_kv_bytes_;
  }
  std::optional<frugal::response_cache_stats> response_stats() const {
    return responses_ ? std::optional(responses_->stats()) : std::nullopt;
  }

 private:
  frugal::generation_request request(const chat_request& r) const {
    return {.prompt = r.prompt, .max_tokens = r.max_tokens, .stop = stop_, .salt = model_.salt()};
  }

  // Runs one sequence through the scheduler and books its tokens; a.time_to_first_token and a.inter_token
  // from the token callbacks (on the loop thread, before the sequence resolves).
  frugal::completion generate(frugal::generation_request g, chat_answer& a) {
    std::vector<clock::time_point> at;
    g.on_token = [&at](frugal::kv_token) { at.push_back(clock::now()); };
    std::promise<frugal::generation> done;
    sched_.submit(std::move(g), [&done](frugal::result<frugal::generation> r) {
      if (r)
        done.set_value(std::move(r).value());
      else
        done.set_exception(r.error());
    });
    const frugal::generation gen = done.get_future().get();
    const frugal::completion c = frugal::completion::of(gen);
    a.cached_tokens = gen.cached_tokens;
    a.time_to_first_token = gen.time_to_first_token;
    for (std::size_t i = 1; i < at.size(); ++i) {
      a.inter_token.push_back(at[i] - at[i - 1]);
      ledger_.record_inter_token_latency(feature_, a.inter_token.back());
    }
    ledger_.record_generation({.feature = feature_,
                               .prompt_tokens = gen.prompt_tokens,
                               .cached_prompt_tokens = std::min(gen.cached_tokens, gen.prompt_tokens),
                               .generated_tokens = c.completion_tokens(),
                               .time_to_first_token = gen.time_to_first_token});
    return c;
  }

  void book(clock::time_point t0, frugal::cost::outcome o) {
    ledger_.record_request(feature_, clock::now() - t0, o);
  }

  void loop(std::stop_token st) {
    while (!st.stop_requested() || !sched_.idle()) {
      std::optional<frugal::step> step = sched_.next_step(std::chrono::milliseconds(20));
      if (!step) {
        if (st.stop_requested()) break;
        continue;
      }
      const auto t0 = clock::now();
      try {
        const std::vector<float> logits = model_.run_step(*step, &pool_);
        sched_.complete(*step, logits, &pool_);
      } catch (...) {
        sched_.fail(*step, std::current_exception());
        continue;
      }
      const auto busy = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0);
      const std::size_t decode = step->decode_tokens();
      ledger_.record_step_cost(step->tokens() - decode, decode, busy);
      ledger_.record_batch({.feature = feature_,
                            .busy = busy,
                            .batch_size = static_cast<std::uint32_t>(step->size()),
                            .capacity = static_cast<std::uint32_t>(opts_.max_running)});
      std::lock_guard g(m_);
      peak_kv_bytes_ = std::max(peak_kv_bytes_, model_.kv().stats().bytes_used);
    }
  }

  llama::model& model_;
  std::string model_id_;
  chat_loop_options opts_;
  frugal::quant::thread_pool pool_;
  frugal::scheduler<> sched_;
  frugal::cost::ledger<> ledger_;
  frugal::cost::feature_id feature_;
  std::vector<frugal::kv_token> stop_;
  std::optional<frugal::lru_cache<frugal::completion>> store_;
  std::optional<frugal::response_cache<frugal::lru_cache<frugal::completion>>> responses_;
  mutable std::mutex m_;
  std::size_t peak_kv_bytes_ = 0;
  std::jthread loop_;  // last: stopped before the rest goes
};

}  // namespace demo
