#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/pool/detail/core.hpp"
#include "frugal/pool/errors.hpp"
#include "frugal/pool/options.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A set of models named in config, loaded on demand by a user-supplied loader and kept within a
/// memory budget. Thread-safe.
///
/// acquire(name) returns a lease that keeps the model loaded while it is held. The first acquire of an
/// unloaded model runs the loader (and warm-up) once, however many callers arrive; the others wait for it
/// and share its outcome, a failure included, which is not remembered as loaded: after retry_backoff
/// (doubling per failure in a row) the next acquire loads again. A load that does not fit in the budget
/// first unloads idle (unleased, unpinned) models, least recently used first; if the leased models leave no
/// room, acquire waits up to acquire_timeout for leases to end, then throws pool_exhausted. A model larger
/// than the whole budget is refused at once with model_too_large. collect_idle() (or the background thread
/// of options.collect_interval) unloads the models idle for their idle_unload_after on Clock.
///
/// reload(spec) swaps a model for a new version without failing a request. A lease may outlive the pool:
/// the model is then unloaded when the lease ends.
///
/// A ready model is leased without the pool's mutex: a compare-and-swap on one of a few per-model gates
/// (a thread's own, so that threads leasing one model do not contend), another at release, and a coarse
/// clock read when the last lease ends (see detail::release_stamp). Recency, for idle unload and for
/// least-recently-used eviction, is the time of a model's last release on Clock: models released within
/// one tick (of CLOCK_MONOTONIC_COARSE for steady_clock, 1-4 ms) are equally recent and go in config order.
///
/// @tparam Model the loaded model; leases hand out Model&. With max_users other than 1, several threads
///               use one Model at once.
/// @tparam Args  the loader's arguments in each model_spec (model_args, a string map, by default).
/// @tparam Clock the clock for idle unload, retry backoff and load times, e.g. frugal::manual_clock in tests.
template <class Model, class Args = model_args, class Clock = std::chrono::steady_clock>
class model_pool {
  using core_type = detail::pool_core<Model, Args, Clock>;

 public:
  using model_type = Model;
  using args_type = Args;
  using clock_type = Clock;
  using spec_type = model_spec<Args>;
  using options_type = pool_options<Model, Args, Clock>;

  /// @brief Keeps one model loaded while it is held; move-only. Model& through * and ->.
  class lease {
   public:
    lease() noexcept = default;
    lease(lease&& o) noexcept : core_(std::exchange(o.core_, nullptr)), g_(o.g_) {}
    lease& operator=(lease&& o) noexcept {
      if (this != &o) {
        reset();
        core_ = std::exchange(o.core_, nullptr);
        g_ = o.g_;
      }
      return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { reset(); }

    Model& operator*() const noexcept { return *g_.model; }
    Model* operator->() const noexcept { return g_.model; }
    Model* get() const noexcept { return core_ != nullptr ? g_.model : nullptr; }
    explicit operator bool() const noexcept { return core_ != nullptr; }
    const std::string& name() const noexcept { return g_.s->name; }
    /// @brief Ends the lease now (the destructor does the same); the model becomes idle if no other is held.
    void reset() noexcept {
      if (core_ != nullptr) std::exchange(core_, nullptr)->release(g_);
    }

   private:
    friend class model_pool;
    lease(core_type* core, typename core_type::grant g) noexcept : core_(core), g_(g) {}

    core_type* core_ = nullptr;  // kept alive by this lease if the pool has gone (see ~model_pool)
    typename core_type::grant g_{};
  };

  /// @brief A model of the pool, found once by name: acquire(handle) skips the name's lookup. Valid for
  /// the pool's lifetime; copyable.
  class handle {
   public:
    const std::string& name() const noexcept { return s_->name; }

   private:
    friend class model_pool;
    explicit handle(typename core_type::slot& s) noexcept : s_(&s) {}
    typename core_type::slot* s_;
  };

  /// @brief Validates the options (std::invalid_argument naming the field or model); loads nothing (see
  /// load_pinned) and starts the collector thread if collect_interval is set.
  explicit model_pool(options_type opts, Clock clock = {})
      : core_(std::make_unique<core_type>(std::move(opts), std::move(clock))) {
    const auto interval = core_->options().collect_interval;
    if (interval.count() > 0) {
      collector_ = std::jthread([core = core_.get(), interval](std::stop_token stop) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        while (!cv.wait_for(lock, stop, interval, [] { return false; }) && !stop.stop_requested()) {
          core->collect_idle();
        }
      });
    }
  }
  model_pool(const model_pool&) = delete;
  model_pool& operator=(const model_pool&) = delete;
  /// @brief Stops the collector and unloads every model not leased; leased ones go when their lease ends,
  /// and the last of those leases frees what is left of the pool.
  ~model_pool() {
    if (collector_.joinable()) {
      collector_.request_stop();
      collector_.join();
    }
    if (!core_->close()) (void)core_.release();  // the last lease deletes it
  }

  /// @brief The handle of a model; throws unknown_model.
  handle find(std::string_view name) const { return handle(core_->slot_of(name)); }

  /// @brief A lease on the model, loading it first if needed. Throws unknown_model, model_too_large,
  /// pool_exhausted or model_busy (after acquire_timeout), load_backoff, or the loader's own exception.
  /// A ready model under max_users is leased without a lock: one compare-and-swap here and one at release.
  lease acquire(std::string_view name) { return acquire(name, core_->options().acquire_timeout); }
  /// @brief As acquire(name), waiting at most timeout for room or for a lease under max_users.
  lease acquire(std::string_view name, std::chrono::nanoseconds timeout) {
    return lease(core_.get(), core_->acquire(name, timeout));
  }
  /// @brief As acquire(name), without the name's lookup.
  lease acquire(handle h) { return acquire(h, core_->options().acquire_timeout); }
  lease acquire(handle h, std::chrono::nanoseconds timeout) {
    if (timeout.count() < 0)
      throw std::invalid_argument("frugal::model_pool::acquire: timeout must not be negative");
    return lease(core_.get(), core_->acquire(*h.s_, timeout));
  }

  /// @brief Loads the model if needed and leaves it loaded but idle (an acquire whose lease ends at once).
  void preload(std::string_view name) { acquire(name).reset(); }
  /// @brief Loads every pinned model (as the latest reload has it), in config order; the first failure
  /// propagates.
  void load_pinned() {
    for (const auto& name : core_->pinned_names()) preload(name);
  }

  /// @brief Swaps the model named spec.name for a new version (a new path, precision or size) without
  /// failing a request: the new one loads beside the current one, which serves meanwhile and, once
  /// replaced, stays loaded until its last lease ends. If both do not fit in the budget and the current
  /// one is idle, it is unloaded first and the new one loaded in its place; if it is leased, reload waits
  /// up to the timeout for room, then throws pool_exhausted. A model that is not loaded just takes the new
  /// spec for its next load. If the new version fails to load, the exception propagates and the current
  /// version stays.
  void reload(spec_type spec) { reload(std::move(spec), core_->options().acquire_timeout); }
  void reload(spec_type spec, std::chrono::nanoseconds timeout) { core_->reload(std::move(spec), timeout); }

  /// @brief Unloads the models idle for at least their idle_unload_after on Clock; returns how many.
  std::size_t collect_idle() { return core_->collect_idle(); }

  /// @brief The model's state now; throws unknown_model.
  model_state state(std::string_view name) const { return core_->state(name); }
  /// @brief True when the model is loaded and warmed up.
  bool ready(std::string_view name) const { return state(name) == model_state::ready; }
  /// @brief readyz: true when every pinned model is ready (true for a pool with none pinned).
  bool ready() const { return core_->all_pinned_ready(); }

  /// @brief A snapshot of the counters and of every model's state.
  pool_stats stats() const { return core_->stats(); }
  /// @brief The options as given (reload changes the pool's specs, not these).
  const options_type& options() const noexcept { return core_->options(); }

 private:
  std::unique_ptr<core_type> core_;
  std::jthread collector_;
};

FRUGAL_END_NAMESPACE
