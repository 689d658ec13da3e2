#pragma once

// A language model as frugal_server serves it: the model (examples/models/llama.hpp), its thread pool, a
// frugal::scheduler over its KV cache, and the one loop thread that runs the scheduler's steps on it.
// The pool (frugal::model_pool) loads and unloads the whole of it; a request holds a lease while its
// sequence runs, so a model is never unloaded under a generation.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <frugal/kv/export.hpp>
#include <frugal/scheduler.hpp>
#include <frugal/scheduler/export.hpp>

#include "llama.hpp"

namespace server {

/// @brief What an llm_engine is built from (a chat entry of the models config).
struct llm_options {
  std::string path;
  llama::precision precision = llama::precision::native;
  std::size_t threads = 1;
  std::size_t kv_budget_bytes = std::size_t{256} << 20;
  frugal::scheduler_options scheduler{};  ///< vocab_size and a max_context of 0 are filled from the file
};

/// @brief One step's work, for the ledger: its busy time and, per label the sequences were submitted
/// with, the tokens it ran (prefill and decode) and the sequences in it.
struct llm_step_report {
  std::chrono::nanoseconds busy{0};
  std::uint64_t prefill_tokens = 0, decode_tokens = 0;
  struct part {
    std::uint64_t tokens = 0;
    std::uint32_t sequences = 0;
  };
  std::map<std::uint32_t, part> by_label;
  std::size_t capacity = 0;
};

class llm_engine {
 public:
  using step_hook = std::function<void(const llm_step_report&)>;

  /// @brief Loads the model and starts the loop; @p on_step runs on the loop thread after every step.
  llm_engine(const llm_options& o, step_hook on_step)
      : model_(llama::model::load(o.path, {.weights = o.precision, .kv_budget_bytes = o.kv_budget_bytes})),
        threads_(o.threads),
        sched_(model_->kv(), scheduler_options(o, *model_)),
        on_step_(std::move(on_step)),
        stop_tokens_(model_->stop_tokens()) {
    publish();
    loop_ = std::jthread([this](std::stop_token st) { loop(st); });
  }
  llm_engine(const llm_engine&) = delete;
  llm_engine& operator=(const llm_engine&) = delete;
  /// @brief Stops the loop; sequences still unresolved end with scheduler_errc::closed.
  ~llm_engine() {
    sched_.close();
    loop_.request_stop();
    if (loop_.joinable()) loop_.join();
  }

  const llama::model& model() const noexcept { return *model_; }
  const std::vector<std::int32_t>& stop_tokens() const noexcept { return stop_tokens_; }
  /// @brief The longest sequence, prompt and completion together.
  std::size_t max_context() const noexcept { return sched_.options().max_context; }
  /// @brief Sequences that may wait for admission before a submit is refused with queue_full.
  std::size_t max_waiting() const noexcept { return sched_.options().max_waiting; }

  /// @brief Submits a sequence (see frugal::scheduler::submit); @p label attributes its steps' time in
  /// llm_step_report.
  frugal::sequence_id submit(frugal::generation_request r, frugal::scheduler<>::callback done,
                             std::uint32_t label) {
    r.stop = stop_tokens_;
    std::lock_guard g(labels_m_);  // the loop reads the label of a sequence only once it is recorded
    const frugal::sequence_id id = sched_.submit(std::move(r), std::move(done));
    labels_[id] = {.label = label, .cached = std::nullopt};
    return id;
  }
  /// @brief The prompt tokens sequence @p id found in the prefix cache when it was first admitted (0 before
  /// its first step, or once forgotten). frugal::generation says the same, but a sequence cancelled (a stop
  /// string, a client gone) resolves without one.
  std::size_t cached_tokens(frugal::sequence_id id) {
    std::lock_guard g(labels_m_);
    const auto it = labels_.find(id);
    return it == labels_.end() || !it->second.cached ? 0 : *it->second.cached;
  }
  bool cancel(frugal::sequence_id id) { return sched_.cancel(id); }
  /// @brief Forgets a resolved sequence's label and cached tokens.
  void forget(frugal::sequence_id id) {
    std::lock_guard g(labels_m_);
    labels_.erase(id);
  }
  /// @brief Stops new sequences (they resolve with closed); the running ones go on.
  void close() { sched_.close(); }

  frugal::scheduler_stats scheduler_stats() const { return sched_.stats(); }
  /// @brief The KV cache's stats as of the loop's last step or idle wake-up (the cache belongs to the loop
  /// thread, which publishes them).
  frugal::kv_cache_stats kv_stats() const {
    std::lock_guard g(kv_m_);
    return kv_stats_;
  }
  /// @brief Bytes held: the weights and the KV cache's whole budget.
  std::size_t bytes() const { return model_->weight_bytes() + kv_stats().bytes_total; }

 private:
  static frugal::scheduler_options scheduler_options(const llm_options& o, const llama::model& m) {
    frugal::scheduler_options s = o.scheduler;
    s.vocab_size = m.cfg().vocab;
    if (s.max_context == 0 || s.max_context > m.cfg().context) s.max_context = m.cfg().context;
    return s;
  }

  void publish() {
    const frugal::kv_cache_stats s = model_->kv().stats();
    std::lock_guard g(kv_m_);
    kv_stats_ = s;
  }

  void loop(std::stop_token st) {
    using clock = std::chrono::steady_clock;
    while (!st.stop_requested()) {
      std::optional<frugal::step> step = sched_.next_step(std::chrono::milliseconds(50));
      if (!step) {
        publish();  // cancellations and expiries resolved by the sweep free blocks without a step
        continue;
      }
      const auto t0 = clock::now();
      {
        // A sequence's first step runs from the end of its prefix-cache hit, the tokens it was admitted
        // with. Recorded before the step, whose tokens may make the request cancel it.
        std::lock_guard g(labels_m_);
        for (const frugal::step_entry& e : step->entries())
          if (const auto it = labels_.find(e.sequence); it != labels_.end() && !it->second.cached)
            it->second.cached = e.first_position;
      }
      std::vector<float> logits;
      try {
        logits = model_->run_step(*step, &threads_);
      } catch (...) {
        sched_.fail(*step, std::current_exception());
        publish();
        continue;
      }
      try {
        sched_.complete(*step, logits, &threads_);
      } catch (...) {
        sched_.fail(*step, std::current_exception());
      }
      llm_step_report rep;
      rep.busy = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0);
      rep.capacity = sched_.options().max_running;
      rep.decode_tokens = step->decode_tokens();
      rep.prefill_tokens = step->tokens() - step->decode_tokens();
      {
        std::lock_guard g(labels_m_);
        for (const frugal::step_entry& e : step->entries()) {
          const auto it = labels_.find(e.sequence);
          auto& p = rep.by_label[it == labels_.end() ? 0 : it->second.label];
          p.tokens += e.tokens.size();
          ++p.sequences;
        }
      }
      publish();
      if (on_step_) on_step_(rep);
    }
  }

  std::unique_ptr<llama::model> model_;
  frugal::quant::thread_pool threads_;
  frugal::scheduler<> sched_;  // after the model, whose KV cache it uses
  step_hook on_step_;
  std::vector<std::int32_t> stop_tokens_;
  mutable std::mutex kv_m_;
  frugal::kv_cache_stats kv_stats_{};
  struct sequence_info {
    std::uint32_t label = 0;
    std::optional<std::size_t> cached;  // set at its first step
  };
  std::mutex labels_m_;
  std::map<frugal::sequence_id, sequence_info> labels_;
  std::jthread loop_;  // last: stopped before the rest goes
};

}  // namespace server
