#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <vector>

#include "frugal/cost/histogram.hpp"
#include "frugal/kv/salt.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Identifies a submitted sequence, for cancel() and in a step's entries.
using sequence_id = std::uint64_t;

/// @brief How a sequence picks its next token from the model's logits. temperature 0 is greedy (the lowest
/// id among equal maxima); otherwise softmax(logits / temperature) cut to the smallest set of most likely
/// tokens whose probability reaches top_p. Draw n of a sequence depends on (seed, n) alone, so the same
/// seed gives the same tokens whatever else ran in its steps and however often it was preempted.
struct sampling_params {
  float temperature = 0;
  float top_p = 1;  ///< in (0, 1]
  std::uint64_t seed = 0;
};

/// @brief Why a sequence finished: a stop token came (stop), or it reached max_tokens or the model's
/// context (length).
enum class finish_reason { stop, length };

inline constexpr const char* to_string(finish_reason r) noexcept {
  return r == finish_reason::stop ? "stop" : "length";
}

/// @brief A finished sequence: what its future holds.
struct generation {
  std::vector<kv_token> tokens;  ///< generated tokens, a stop token excluded
  finish_reason reason = finish_reason::length;
  std::optional<kv_token> stop_token;  ///< the stop token that ended it (reason stop)
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;  ///< prompt tokens served from the prefix cache when it was first admitted
  std::size_t preemptions = 0;    ///< times its blocks were taken back and it was computed again
  std::chrono::nanoseconds time_to_first_token{0};
};

/// @brief One sequence to generate. Only the prompt must be set.
template <class TimePoint>
struct basic_generation_request {
  std::vector<kv_token> prompt;
  sampling_params sampling{};
  /// Generated tokens at most (a stop token counts); must be positive.
  std::size_t max_tokens = 256;
  /// Token ids that end the sequence when sampled (e.g. the model's end-of-turn); not in the result.
  std::vector<kv_token> stop{};
  /// In [0, priority_levels); higher runs first, is preempted last, FIFO within one level.
  std::size_t priority = 0;
  /// If it has not finished by then it ends with deadline_exceeded (waiting or running); max(): none.
  TimePoint deadline = TimePoint::max();
  /// Scopes its prefix sharing (kv_salt::of(model, adapter, tenant)).
  kv_salt salt{};
  /// Called on the loop thread, inside complete(), with each generated token (a stop token excepted), in
  /// order. It may call cancel(); an exception from it fails the sequence with that exception.
  std::function<void(kv_token)> on_token{};
  /// Stopping it cancels the sequence, as cancel(id) does.
  std::stop_token stop_when{};
};

using generation_request = basic_generation_request<std::chrono::steady_clock::time_point>;

/// @brief A scheduler's bounds. Validated at construction (std::invalid_argument naming the field).
struct scheduler_options {
  /// Sequences admitted at once (holding KV blocks, in the steps). More raise throughput until the step's
  /// time grows with them, and raise everyone's inter-token latency.
  std::size_t max_running = 32;
  /// Submitted sequences that may wait for admission; the next submit is rejected with queue_full at once.
  /// Preempted sequences come back to the queue whatever its length.
  std::size_t max_waiting = 1024;
  /// Tokens one step may run: every decode token first, then prefill chunks in what is left, so a long
  /// prompt is cut into chunks and never stalls the running sequences' next token. At least max_running.
  std::size_t step_tokens = 512;
  /// The model's context (positions it can attend); 0: only the KV budget bounds a sequence.
  std::size_t max_context = 0;
  /// Priority levels of generation_request::priority.
  std::size_t priority_levels = 1;
  /// Logits per row that complete(step, logits) expects; 0 when the model samples itself.
  std::size_t vocab_size = 0;
};

/// @brief Sequences the scheduler ended without finishing them, by cause.
struct scheduler_failures {
  std::uint64_t deadline_exceeded = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t queue_full = 0;
  std::uint64_t too_long = 0;
  std::uint64_t closed = 0;
  std::uint64_t bad_logits = 0;
  std::uint64_t model_error = 0;  ///< failed through fail(), or by an exception from on_token

  std::uint64_t rejected() const noexcept { return queue_full + too_long + closed; }
  std::uint64_t total() const noexcept {
    return deadline_exceeded + cancelled + queue_full + too_long + closed + bad_logits + model_error;
  }
};

/// @brief A snapshot of a scheduler. submitted == finished_stop + finished_length + failed.total() +
/// running + waiting holds in every snapshot.
struct scheduler_stats {
  std::size_t running = 0;  ///< admitted, holding KV blocks
  std::size_t waiting = 0;  ///< queued for admission, preempted ones included
  std::uint64_t submitted = 0;
  std::uint64_t finished_stop = 0;
  std::uint64_t finished_length = 0;
  scheduler_failures failed{};
  std::uint64_t steps = 0;              ///< steps completed (complete() or fail())
  std::uint64_t prefill_tokens = 0;     ///< tokens run in prefill chunks, recomputed ones included
  std::uint64_t decode_tokens = 0;      ///< tokens run as a sequence's one decode token
  std::uint64_t generated_tokens = 0;   ///< tokens sampled
  std::uint64_t prefix_hit_tokens = 0;  ///< tokens admissions found in the prefix cache
  std::uint64_t preemptions = 0;        ///< sequences whose blocks were taken back for another's
  std::uint64_t recomputed_tokens = 0;  ///< tokens computed before a preemption and not found cached after it
  /// From submit to the first generated token, and between two tokens of one sequence (ns), on the clock.
  cost::histogram_snapshot time_to_first_token{};
  cost::histogram_snapshot inter_token_latency{};
};

FRUGAL_END_NAMESPACE
