#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/scheduler/options.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief One sequence's part of a step: run `tokens` at positions first_position, first_position + 1, ...
/// of KV sequence `kv` (their K/V go into the cache with kv_cache::write, then kv_attention reads the
/// sequence's positions [0, first_position + tokens.size())). The scheduler has appended the tokens to the
/// cache already and commits them in complete().
struct step_entry {
  sequence_id sequence = 0;
  kv_sequence_id kv{};
  std::span<const kv_token> tokens;
  std::size_t first_position = 0;
  /// Whether complete() needs the logits of this entry's last token: a decode token, or a prefill chunk
  /// that ends the sequence's tokens (its prompt, or after a preemption, its prompt and generated tokens).
  bool logits = false;
  /// The one token left to run of the sequence (usually the token sampled in the last step), budgeted
  /// before any prefill chunk, rather than a prefill chunk.
  bool decode = false;
};

namespace detail {
struct sched_seq;
class scheduler_core;
}  // namespace detail

/// @brief What the model runs in one forward pass. Decode entries come first, then prefill chunks. Pass it
/// back to complete() or fail(); the spans stay valid while the step lives. Move-only.
class step {
 public:
  step() = default;
  step(step&&) noexcept = default;
  step& operator=(step&&) noexcept = default;
  step(const step&) = delete;
  step& operator=(const step&) = delete;

  std::uint64_t id() const noexcept { return id_; }
  std::span<const step_entry> entries() const noexcept { return entries_; }
  std::size_t size() const noexcept { return entries_.size(); }
  const step_entry& operator[](std::size_t i) const { return entries_[i]; }
  /// @brief Tokens of all entries: at most scheduler_options::step_tokens.
  std::size_t tokens() const noexcept { return tokens_.size(); }
  std::size_t decode_tokens() const noexcept { return decodes_; }
  /// @brief Entries with logits == true: the rows complete(step, logits) takes, in entry order.
  std::size_t logits_rows() const noexcept { return logits_rows_; }

 private:
  friend class detail::scheduler_core;

  std::uint64_t id_ = 0;
  std::vector<step_entry> entries_;
  std::vector<kv_token> tokens_;
  std::vector<detail::sched_seq*> seqs_;
  std::size_t decodes_ = 0;
  std::size_t logits_rows_ = 0;
};

FRUGAL_END_NAMESPACE
