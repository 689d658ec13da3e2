#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "frugal/cost/histogram.hpp"
#include "frugal/cost/ledger.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The default loader arguments: a string map such as {{"path", "minilm.safetensors"}, {"dtype",
/// "int8"}}.
using model_args = std::map<std::string, std::string, std::less<>>;

/// @brief One model as named in config. Args is whatever the loader needs (a path and a precision, say).
template <class Args = model_args>
struct model_spec {
  /// The name acquire() takes; unique within a pool, not empty.
  std::string name;
  /// Handed to the loader as they are; the pool never reads them.
  Args args{};
  /// Bytes the model is expected to take once loaded, charged against the budget before the load starts.
  /// After a load, the bytes the loader measured replace it. Must be > 0.
  std::size_t estimated_bytes = 0;
  /// A pinned model is never evicted nor unloaded when idle, and load_pinned() loads it; use it for the
  /// models that must answer without a cold start. The pinned models together must fit in the budget.
  bool pinned = false;
  /// Unloaded by collect_idle() once it has had no lease for this long; 0 keeps it until evicted.
  std::chrono::nanoseconds idle_unload_after{0};
  /// The input the warm-up hook runs (a sentence, a JSON request); the pool only passes it on.
  std::string warm_up_input{};
  /// At most this many leases at once; 0 for no limit. An acquire past it waits for a lease to end.
  std::size_t max_users = 0;
};

// GCC 12 crashes (in nothrow_spec_p) when a model_spec's default member initializers are first needed inside
// a nested braced list such as `.models = {{.name = "a", ...}}`; asking for the trait here, and in
// pool_options, has them instantiated beforehand.
static_assert(std::is_default_constructible_v<model_spec<>>);

/// @brief What a loader returns: the model, and the bytes it really takes (0 keeps the estimate).
template <class Model>
struct loaded_model {
  std::unique_ptr<Model> model;
  std::size_t bytes = 0;
};

/// @brief A model_pool's settings; a plain aggregate for designated initializers. Validated at
/// construction (std::invalid_argument naming the field or the model).
template <class Model, class Args = model_args, class Clock = std::chrono::steady_clock>
struct pool_options {
  static_assert(std::is_default_constructible_v<model_spec<Args>>);
  /// Bytes all loaded (and loading) models may take together: device memory on a GPU, host memory otherwise.
  /// Must be > 0.
  std::size_t budget_bytes = 0;
  /// The models, by name.
  std::vector<model_spec<Args>> models{};
  /// Loads one model; called outside the pool's lock, once per load however many callers wait for it. An
  /// exception from it fails every caller waiting for that load, and the model stays unloaded. Required.
  std::function<loaded_model<Model>(const model_spec<Args>&)> load{};
  /// Runs after a load and before the model is handed out (e.g. one inference on warm_up_input to compile
  /// kernels); an exception counts as a failed load. Optional.
  std::function<void(Model&, const model_spec<Args>&)> warm_up{};
  /// Takes a model that leaves the pool (evicted, idle, or the pool's end), outside the lock. By default
  /// the model is destroyed; set it to release memory the destructor does not (malloc_trim, a CUDA pool's
  /// trim) or to observe unloads. Optional.
  std::function<void(std::unique_ptr<Model>, const model_spec<Args>&)> unload{};
  /// How long acquire waits for room in the budget, or for a lease under max_users, before it throws
  /// pool_exhausted or model_busy. Measured on the steady clock (a real wait, whatever Clock is).
  std::chrono::nanoseconds acquire_timeout = std::chrono::seconds(30);
  /// After a failed load, acquires fail at once with load_backoff for this long, doubling with each failure
  /// in a row up to max_retry_backoff; 0 retries at the next acquire. Measured on Clock.
  std::chrono::nanoseconds retry_backoff = std::chrono::seconds(1);
  std::chrono::nanoseconds max_retry_backoff = std::chrono::minutes(1);
  /// If non-zero, a background thread calls collect_idle() this often (a real wait); 0 leaves it to the user.
  std::chrono::nanoseconds collect_interval{0};
  /// If set, every load is recorded with record_model_load and every unload with record_model_unload on
  /// ledger_device. The ledger must outlive the pool and its leases.
  cost::ledger<Clock>* ledger = nullptr;
  std::size_t ledger_device = 0;
};

/// @brief Where a model is in its life.
enum class model_state {
  unloaded,  ///< not in memory; the next acquire loads it
  loading,   ///< the loader is running
  warming,   ///< loaded; the warm-up hook is running
  ready,     ///< loaded and warmed up; acquire hands it out at once
  failed,    ///< its last load failed and the retry backoff has not run out
};

/// @brief A short name for the state, e.g. "ready".
inline constexpr const char* to_string(model_state s) noexcept {
  switch (s) {
    case model_state::unloaded:
      return "unloaded";
    case model_state::loading:
      return "loading";
    case model_state::warming:
      return "warming";
    case model_state::ready:
      return "ready";
    case model_state::failed:
      return "failed";
  }
  return "unknown";
}

/// @brief One model in a pool_stats snapshot (e.g. for GET /v1/models).
struct model_status {
  std::string name;
  model_state state = model_state::unloaded;
  bool pinned = false;
  /// Leases held now on the current version.
  std::size_t users = 0;
  /// Bytes charged against the budget now: the estimate while loading, the measured bytes once loaded, 0
  /// when unloaded.
  std::size_t bytes = 0;
  /// Good loads (cold starts and reloads) and failed cold starts.
  std::uint64_t loads = 0;
  std::uint64_t load_failures = 0;
  /// Unloads of every kind: evictions, idle unloads and the pool's end.
  std::uint64_t unloads = 0;
  std::uint64_t evictions = 0;
  std::uint64_t idle_unloads = 0;
  /// Reloads (new versions swapped in), and those whose new version failed to load.
  std::uint64_t reloads = 0;
  std::uint64_t reload_failures = 0;
  /// Replaced versions still held by leases: their bytes (also in pool_stats::used_bytes) and leases.
  std::size_t retired_bytes = 0;
  std::size_t retired_users = 0;
  /// Failures in a row; 0 after a good load.
  std::uint64_t consecutive_failures = 0;
  /// The last load failure's message; empty after a good load.
  std::string last_error{};
  /// Time spent in the loader and warm-up over all good loads, and the last one.
  std::chrono::nanoseconds load_time_total{0};
  std::chrono::nanoseconds last_load_time{0};
  /// Bytes times seconds loaded, over the model's life so far (memory-seconds, for pricing what it held).
  double byte_seconds = 0;
};

/// @brief A snapshot of a model_pool.
struct pool_stats {
  std::size_t budget_bytes = 0;
  /// Bytes charged now by loaded and loading models.
  std::size_t used_bytes = 0;
  std::uint64_t acquires = 0;
  /// Loads started, failed ones included: cold starts (acquires that ran the loader) and reloads.
  std::uint64_t loads = 0;
  /// Acquires that waited for another caller's load instead of starting one (single flight).
  std::uint64_t load_waits = 0;
  /// Cold starts that failed (a failed reload counts in model_status::reload_failures alone).
  std::uint64_t load_failures = 0;
  std::uint64_t unloads = 0;
  std::uint64_t evictions = 0;
  std::uint64_t idle_unloads = 0;
  /// Acquires that failed with pool_exhausted, model_busy, model_too_large or load_backoff.
  std::uint64_t exhausted = 0;
  std::uint64_t busy = 0;
  std::uint64_t too_large = 0;
  std::uint64_t backoff_refusals = 0;
  /// Loads whose measured bytes pushed the pool over budget with nothing left to evict (it keeps them).
  std::uint64_t over_budget_loads = 0;
  /// Leases held now, over all models.
  std::size_t leases = 0;
  /// Acquires blocked now, waiting for room in the budget or for a lease under max_users.
  std::size_t waiting = 0;
  /// The duration of every good cold start (loader plus warm-up) in nanoseconds on Clock; reloads, which
  /// no request waits for, are not in it.
  cost::histogram_snapshot cold_start{};
  std::vector<model_status> models{};
};

FRUGAL_END_NAMESPACE
