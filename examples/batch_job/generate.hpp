#pragma once

// The generation task of frugal_batch_job: prompts in, completions out, with a Llama-family GGUF model
// (examples/models/llama.hpp) under frugal::scheduler, as a frugal::job::stream_model. Its own translation
// unit (generate.cpp), so the encoder's and the decoder's code compile apart.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <frugal/job.hpp>
#include <memory>
#include <string>

namespace batch_job {

struct generation_options {
  std::string model;  ///< a GGUF file
  std::string precision = "native";
  std::size_t threads = 1;
  bool chat = false;  ///< wrap each prompt in the model's chat template (its default system turn first)
  std::size_t max_tokens = 64;
  float temperature = 0;  ///< 0: greedy
  float top_p = 1;
  /// Line n of the input samples with seed + n: the same line gives the same text whatever the shard,
  /// batch or attempt.
  std::uint64_t seed = 0;
  std::size_t kv_budget_mb = 256;
  std::size_t max_running = 32;  ///< sequences at once, at most; the KV budget may allow fewer
  /// The job's checkpoint directory: generation.json there counts the tokens generated over every attempt,
  /// so that a resume knows how many were lost with the last one.
  std::string checkpoint_dir;
  std::string output;  ///< the job's output: the tokens of its checkpointed lines are counted from it
  /// A sleep in every step, for the kill tests (FRUGAL_JOB_SLOW_MS): kills then land mid-generation.
  std::chrono::milliseconds slow_step{0};
};

/// @brief What preemption cost, in tokens, over the job's attempts so far (generation.json).
struct generation_accounting {
  std::uint64_t generated_tokens = 0;  ///< sampled over every attempt, the stop token included
  std::uint64_t output_tokens = 0;     ///< in the output's lines, the stop token included
  std::uint64_t redone_tokens = 0;     ///< generated_tokens - output_tokens: generated, lost, generated again
  std::uint64_t attempts = 0;          ///< runs that generated anything
  /// Of redone_tokens, those this run found lost when it started (the last preemption's cost), and the
  /// lines they belonged to that had finished (the rest were cut mid-generation).
  std::uint64_t redone_at_start = 0, redone_lines_at_start = 0;
};

class generator : public frugal::job::stream_model {
 public:
  virtual std::string describe() const = 0;
  virtual std::size_t max_running() const = 0;
  /// @brief This run's steps: busy time in the model, tokens prefilled and generated.
  virtual double busy_seconds() const = 0;
  virtual std::uint64_t steps() const = 0;
  virtual std::uint64_t prefill_tokens() const = 0;
  virtual std::uint64_t generated_tokens() const = 0;
  /// @brief Re-reads the output (call it after run() returned) for the accounting.
  virtual generation_accounting accounting() = 0;
};

/// @brief Loads the model; throws std::invalid_argument for a bad option value.
std::unique_ptr<generator> make_generator(const generation_options& o);

}  // namespace batch_job
