#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/cost/histogram.hpp"
#include "frugal/detail/spin.hpp"
#include "frugal/namespace.hpp"
#include "frugal/pool/detail/gate.hpp"
#include "frugal/pool/errors.hpp"
#include "frugal/pool/options.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

struct pool_string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

inline std::string exception_message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "(an exception not derived from std::exception)";
  }
}

// One load in progress. Every caller that finds it waits for `done` and takes its `error`, so that a
// failure reaches exactly the callers of that load and no later ones.
struct pool_flight {
  bool done = false;
  std::exception_ptr error;
};

// The engine of a model_pool, shared with its leases so that a lease may outlive the pool. One mutex
// guards every slot; loaders, warm-ups and unloads run outside it.
template <class Model, class Args, class Clock>
class pool_core {
 public:
  using options_type = pool_options<Model, Args, Clock>;
  using spec_type = model_spec<Args>;
  using time_point = typename Clock::time_point;

  // A version that a reload replaced while leases held it; unloaded when the last of them ends.
  struct retired_instance {
    std::unique_ptr<Model> model;
    std::size_t users = 0;
    std::size_t charged = 0;
    time_point loaded_at{};
    std::shared_ptr<const spec_type> spec;
  };

  struct slot {
    explicit slot(spec_type s) : name(s.name), spec(std::make_shared<const spec_type>(std::move(s))) {}
    // The lease path: the gate stripes (see pool_gate), each with the time its last lease ended, and on
    // a line that only reloads and loads write, the current version's model and max_users.
    struct alignas(64) stripe {
      std::atomic<std::uint64_t> gate{0};
      std::atomic<typename Clock::rep> released_at{0};
    };
    stripe stripes[pool_stripes];
    alignas(64) std::atomic<Model*> live{nullptr};
    std::atomic<std::size_t> live_max_users{0};
    // Under the lock: the current generation and the acquires folded out of the gates.
    std::uint32_t gen = 0;
    std::uint64_t acquires = 0;

    // Leases on the current version, over the stripes (exact under the lock once the gates are closed).
    std::size_t users() const noexcept {
      std::size_t n = 0;
      for (const stripe& st : stripes) n += pool_gate::users(st.gate.load(std::memory_order_acquire));
      return n;
    }
    // When the model's last lease ended (or it loaded), in Clock ticks.
    typename Clock::rep released_at() const noexcept {
      typename Clock::rep t = stripes[0].released_at.load(std::memory_order_relaxed);
      for (const stripe& st : stripes) t = std::max(t, st.released_at.load(std::memory_order_relaxed));
      return t;
    }

    alignas(64) const std::string name;
    // Replaced by reload; a load in flight keeps the copy it started with.
    std::shared_ptr<const spec_type> spec;
    model_state state = model_state::unloaded;
    std::unique_ptr<Model> model;
    std::size_t charged = 0;      // bytes against the budget now
    std::size_t known_bytes = 0;  // measured by the last good load; the next load's charge
    time_point loaded_at{};
    time_point retry_at{};
    std::shared_ptr<pool_flight> flight;
    bool reloading = false;  // a new version is loading beside the current one
    std::vector<retired_instance> retired;
    std::uint64_t loads = 0, load_failures = 0, unloads = 0, evictions = 0, idle_unloads = 0,
                  failures_in_row = 0, reloads = 0, reload_failures = 0;
    std::string last_error;
    std::chrono::nanoseconds load_time_total{0}, last_load_time{0};
    double byte_seconds = 0;
  };

  pool_core(options_type opts, Clock clock) : opts_(std::move(opts)), clock_(std::move(clock)) {
    validate();
    slots_.reserve(opts_.models.size());
    for (const auto& spec : opts_.models) {
      slots_.push_back(std::make_unique<slot>(spec));
      by_name_.emplace(spec.name, slots_.back().get());
    }
  }

  const options_type& options() const noexcept { return opts_; }

  // A lease: the slot, the version's model and its generation. A reload may replace the slot's model
  // right after, so all three are read at once: the model and the generation that the gate's
  // compare-exchange checked, or under the lock.
  struct grant {
    slot* s;
    Model* model;
    std::uint32_t gen;
    std::size_t stripe;
  };

  // The slot of a name, for a handle that skips the lookup; throws unknown_model.
  slot& slot_of(std::string_view name) const { return find(name); }

  grant acquire(std::string_view name, std::chrono::nanoseconds timeout) {
    if (timeout.count() < 0)
      throw std::invalid_argument("frugal::model_pool::acquire: timeout must not be negative");
    // by_name_ never changes after construction, so the lookup needs no lock.
    return acquire(find(name), timeout);
  }

  grant acquire(slot& s, std::chrono::nanoseconds timeout) {
    grant g{};
    if (try_acquire(s, g)) [[likely]]
      return g;
    return acquire_locked(s, timeout);
  }

  // A lease on the ready version without the lock: one compare-exchange on the gate, which fails if the
  // gate closed or took a new generation since it was read, so that `live` read in between is the model
  // of the generation leased. False sends the caller to the lock: the model is not ready, at max_users,
  // or the gate's acquire count is due to be folded.
  bool try_acquire(slot& s, grant& out) noexcept {
    const std::size_t limit = s.live_max_users.load(std::memory_order_acquire);
    const std::size_t k = limit == 0 ? pool_stripe_of_this_thread() : 0;
    auto& gate = s.stripes[k].gate;
    std::uint64_t g = gate.load(std::memory_order_acquire);
    // A reload may have changed max_users, and with it the stripe to count on: the lock sorts that out.
    if (s.live_max_users.load(std::memory_order_relaxed) != limit) return false;
    for (;;) {
      if ((g & pool_gate::open) == 0) return false;
      const std::size_t users = pool_gate::users(g);
      if (users >= pool_gate::max_users || (limit != 0 && users >= limit) ||
          (g & pool_gate::acquire_mask) == pool_gate::acquire_mask)
        return false;
      Model* m = s.live.load(std::memory_order_acquire);
      if (gate.compare_exchange_weak(g, g + pool_gate::acquire_one + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        out = {&s, m, pool_gate::gen(g), k};
        return true;
      }
    }
  }

  grant acquire_locked(slot& s, std::chrono::nanoseconds timeout) {
    // The deadline is read off the clock only if the acquire has to wait.
    lazy_deadline deadline{timeout};
    std::unique_lock lock(mutex_);
    ++acquires_;
    bool waited_for_load = false;
    waiter waits(*this);
    for (;;) {
      if (closed_) throw pool_error(s.name, "frugal::model_pool: the pool is closed");
      switch (s.state) {
        case model_state::ready: {
          fold_acquires(s);
          grant g{};
          // Under the lock the gate of a ready model is open; only the lease limits can refuse.
          if (try_take(s, g)) return g;
          if (!waits.held()) {
            waits.raise();
            continue;
          }
          if (!wait_until(lock, deadline.get())) {
            ++busy_;
            throw model_busy(s.name, effective_max_users(*s.spec));
          }
          continue;
        }
        case model_state::loading:
        case model_state::warming: {
          const std::shared_ptr<pool_flight> f = s.flight;
          if (!waited_for_load) {
            ++load_waits_;
            waited_for_load = true;
          }
          cv_.wait(lock, [&] { return f->done; });
          if (f->error) std::rethrow_exception(f->error);
          continue;
        }
        case model_state::failed: {
          const time_point now = clock_.now();
          if (now < s.retry_at) {
            ++backoff_refusals_;
            throw load_backoff(s.name, s.failures_in_row,
                               std::chrono::duration_cast<std::chrono::nanoseconds>(s.retry_at - now),
                               s.last_error);
          }
          s.state = model_state::unloaded;
          continue;
        }
        case model_state::unloaded: {
          const std::size_t need = s.known_bytes != 0 ? s.known_bytes : s.spec->estimated_bytes;
          if (need > opts_.budget_bytes) {
            ++too_large_;
            throw model_too_large(s.name, need, opts_.budget_bytes);
          }
          std::vector<victim> victims;
          if (!make_room(need, nullptr, victims)) {
            if (!victims.empty()) {  // a model taken meanwhile cut the room short: look again
              lock.unlock();
              dispose(victims);
              lock.lock();
              continue;
            }
            if (!waits.held()) {
              waits.raise();
              continue;
            }
            if (!wait_until(lock, deadline.get())) {
              ++exhausted_;
              throw pool_exhausted(s.name, need, used_, used_ - freeable_bytes(nullptr), opts_.budget_bytes);
            }
            continue;
          }
          waits.drop();  // load returns without the lock
          return load(lock, s, need, std::move(victims));
        }
      }
    }
  }

  // Ends a lease. Without the lock when the version is still current and nobody waits: one
  // compare-exchange, and the release stamp when it was the last lease.
  void release(const grant& l) noexcept {
    auto& st = l.s->stripes[l.stripe];
    std::uint64_t g = st.gate.load(std::memory_order_relaxed);
    for (;;) {
      if ((g & (pool_gate::open | pool_gate::waiters)) != pool_gate::open || pool_gate::gen(g) != l.gen)
        break;
      if (pool_gate::users(g) == 1) st.released_at.store(release_stamp(clock_), std::memory_order_relaxed);
      if (st.gate.compare_exchange_weak(g, g - 1, std::memory_order_release, std::memory_order_relaxed))
        return;
    }
    release_locked(l);
  }

  // A release under the lock: of a retired version, of a closed pool's model, or with waiters to wake.
  // The last lease of a closed pool whose owner has gone deletes the core.
  void release_locked(const grant& l) noexcept {
    std::vector<victim> victims;
    bool last = false;
    {
      std::lock_guard lock(mutex_);
      slot& s = *l.s;
      auto& st = s.stripes[l.stripe];
      std::uint64_t g = st.gate.load(std::memory_order_relaxed);
      if (pool_gate::gen(g) == l.gen && l.model == s.model.get()) {
        // Fast releases may still change an open gate: decrement with a compare-exchange.
        while (
            !st.gate.compare_exchange_weak(g, g - 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        }
        if (pool_gate::users(g) == 1) {
          st.released_at.store(release_stamp(clock_), std::memory_order_relaxed);
          if (closed_ && s.state == model_state::ready && close_idle_gate(s))
            unload(s, victims, unload_kind::close);
        }
      } else {
        for (auto it = s.retired.begin(); it != s.retired.end(); ++it) {
          if (it->model.get() != l.model) continue;
          if (--it->users == 0) {
            s.byte_seconds += byte_seconds_between(it->charged, it->loaded_at, clock_.now());
            used_ -= it->charged;
            ++s.unloads;
            victims.push_back({std::move(it->model), std::move(it->spec)});
            s.retired.erase(it);
          }
          break;
        }
      }
      // Acquires and reloads waiting for room or for a lease under max_users; notified under the lock,
      // which an orphaned core's last release must not touch after it unlocks.
      if (waiting_ > 0) cv_.notify_all();
      last = orphaned_ && leases_locked() == 0;
    }
    dispose(victims);
    if (last) delete this;
  }

  std::size_t collect_idle() {
    std::vector<victim> victims;
    {
      std::lock_guard lock(mutex_);
      const time_point now = clock_.now();
      for (auto& p : slots_) {
        slot& s = *p;
        if (s.state != model_state::ready || s.reloading || s.spec->pinned ||
            s.spec->idle_unload_after.count() <= 0 || s.users() != 0)
          continue;
        const time_point since{typename Clock::duration(s.released_at())};
        if (now - since >= s.spec->idle_unload_after && close_idle_gate(s))
          unload(s, victims, unload_kind::idle);
      }
    }
    if (!victims.empty()) cv_.notify_all();
    dispose(victims);
    return victims.size();
  }

  // Closes the pool: unloads every model not leased, and closes the gates so that the last leases end
  // under the lock. True when no lease is held: the core may go; otherwise the last release deletes it.
  bool close() noexcept {
    std::vector<victim> victims;
    bool idle = false;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      for (auto& p : slots_) {
        slot& s = *p;
        if (s.state != model_state::ready) continue;
        if (close_idle_gate(s)) {
          unload(s, victims, unload_kind::close);
        } else {
          (void)close_gates(s);
        }
      }
      idle = leases_locked() == 0;
      orphaned_ = !idle;
    }
    cv_.notify_all();
    dispose(victims);
    return idle;
  }

  model_state state(std::string_view name) const {
    std::lock_guard lock(mutex_);
    return find(name).state;
  }

  std::vector<std::string> pinned_names() const {
    std::vector<std::string> names;
    std::lock_guard lock(mutex_);
    for (const auto& p : slots_)
      if (p->spec->pinned) names.push_back(p->name);
    return names;
  }

  bool all_pinned_ready() const {
    std::lock_guard lock(mutex_);
    for (const auto& p : slots_)
      if (p->spec->pinned && p->state != model_state::ready) return false;
    return true;
  }

  pool_stats stats() const {
    pool_stats st;
    std::lock_guard lock(mutex_);
    const time_point now = clock_.now();
    st.budget_bytes = opts_.budget_bytes;
    st.used_bytes = used_;
    st.acquires = acquires_;
    st.load_waits = load_waits_;
    st.exhausted = exhausted_;
    st.busy = busy_;
    st.too_large = too_large_;
    st.backoff_refusals = backoff_refusals_;
    st.over_budget_loads = over_budget_loads_;
    st.leases = leases_locked();
    st.waiting = waiting_;
    st.cold_start = cold_start_.snapshot();
    for (const auto& p : slots_) {
      const slot& s = *p;
      model_status m;
      m.name = s.name;
      m.state = s.state;
      m.pinned = s.spec->pinned;
      m.users = s.users();
      st.acquires += s.acquires;
      for (const auto& stripe : s.stripes) st.acquires += pool_gate::acquires(stripe.gate.load());
      m.bytes = s.charged;
      for (const auto& r : s.retired) {
        m.retired_bytes += r.charged;
        m.retired_users += r.users;
        m.byte_seconds += byte_seconds_between(r.charged, r.loaded_at, now);
      }
      m.reloads = s.reloads;
      m.reload_failures = s.reload_failures;
      m.loads = s.loads;
      m.load_failures = s.load_failures;
      m.unloads = s.unloads;
      m.evictions = s.evictions;
      m.idle_unloads = s.idle_unloads;
      m.consecutive_failures = s.failures_in_row;
      m.last_error = s.last_error;
      m.load_time_total = s.load_time_total;
      m.last_load_time = s.last_load_time;
      m.byte_seconds = s.byte_seconds;
      if (s.model) m.byte_seconds += byte_seconds_between(s.charged, s.loaded_at, now);
      st.loads += s.loads + s.load_failures + s.reload_failures;
      st.load_failures += s.load_failures;
      st.unloads += s.unloads;
      st.evictions += s.evictions;
      st.idle_unloads += s.idle_unloads;
      st.models.push_back(std::move(m));
    }
    return st;
  }

 private:
  enum class unload_kind { eviction, idle, close, reload };

  struct victim {
    std::unique_ptr<Model> model;
    std::shared_ptr<const spec_type> spec;
  };

  void validate() const {
    const std::string who = "frugal::model_pool: options.";
    if (opts_.budget_bytes == 0) throw std::invalid_argument(who + "budget_bytes must be > 0");
    if (opts_.models.empty()) throw std::invalid_argument(who + "models must not be empty");
    if (!opts_.load) throw std::invalid_argument(who + "load (the loader) is required");
    if (opts_.acquire_timeout.count() < 0)
      throw std::invalid_argument(who + "acquire_timeout must not be negative");
    if (opts_.retry_backoff.count() < 0)
      throw std::invalid_argument(who + "retry_backoff must not be negative");
    if (opts_.max_retry_backoff < opts_.retry_backoff)
      throw std::invalid_argument(who + "max_retry_backoff must be >= retry_backoff");
    if (opts_.collect_interval.count() < 0)
      throw std::invalid_argument(who + "collect_interval must not be negative");
    if (opts_.ledger != nullptr && opts_.ledger_device >= opts_.ledger->options().devices.size())
      throw std::invalid_argument(who + "ledger_device " + std::to_string(opts_.ledger_device) +
                                  " is not a device of the ledger (it has " +
                                  std::to_string(opts_.ledger->options().devices.size()) + ")");
    std::unordered_map<std::string_view, std::size_t> seen;
    std::size_t pinned_bytes = 0;
    for (std::size_t i = 0; i < opts_.models.size(); ++i) {
      const spec_type& m = opts_.models[i];
      const std::string at = who + "models[" + std::to_string(i) + "]";
      if (m.name.empty()) throw std::invalid_argument(at + ".name must not be empty");
      const std::string named = at + " (\"" + m.name + "\")";
      if (auto [it, fresh] = seen.emplace(m.name, i); !fresh)
        throw std::invalid_argument(named + ".name is a duplicate of models[" + std::to_string(it->second) +
                                    "]");
      if (m.estimated_bytes == 0) throw std::invalid_argument(named + ".estimated_bytes must be > 0");
      if (m.idle_unload_after.count() < 0)
        throw std::invalid_argument(named + ".idle_unload_after must not be negative");
      if (m.pinned) pinned_bytes += m.estimated_bytes;
    }
    if (pinned_bytes > opts_.budget_bytes)
      throw std::invalid_argument(who + "models: the pinned models' estimated_bytes sum to " +
                                  std::to_string(pinned_bytes) +
                                  ", more than budget_bytes = " + std::to_string(opts_.budget_bytes));
  }

  // A deadline `timeout` after its first use.
  struct lazy_deadline {
    std::chrono::nanoseconds timeout;
    std::chrono::steady_clock::time_point at{};  // a flag and a value, not std::optional: GCC 12 then
    bool known = false;                          // reports the optional's value as maybe-uninitialized
    std::chrono::steady_clock::time_point get() {
      if (!known) {
        at = deadline_after(timeout);
        known = true;
      }
      return at;
    }
  };

  static std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
    const auto now = std::chrono::steady_clock::now();
    if (timeout >= std::chrono::steady_clock::time_point::max() - now)
      return std::chrono::steady_clock::time_point::max();
    return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  }

  // Held by an acquire or reload while it waits for room or for a lease under max_users (under the
  // lock). The first raises every gate's waiters bit, which sends each release that could end such a
  // wait to the lock, where it wakes the waiters; the last lowers it. Raise it before checking the
  // condition once more, so that no release between that check and the wait goes unseen.
  class waiter {
   public:
    explicit waiter(pool_core& c) noexcept : c_(c) {}
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;
    ~waiter() { drop(); }
    bool held() const noexcept { return held_; }
    void raise() noexcept {
      if (held_) return;
      held_ = true;
      if (c_.waiting_++ == 0) c_.mark_waiters(true);
    }
    void drop() noexcept {
      if (!held_) return;
      held_ = false;
      if (--c_.waiting_ == 0) c_.mark_waiters(false);
    }

   private:
    pool_core& c_;
    bool held_ = false;
  };

  // With a waiter held: false once the deadline has passed.
  bool wait_until(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock);
      return true;
    }
    return cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  }

  slot& find(std::string_view name) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw unknown_model(std::string(name));
    return *it->second;
  }

  static std::size_t effective_max_users(const spec_type& spec) noexcept {
    const auto limit = static_cast<std::size_t>(pool_gate::max_users);
    return spec.max_users == 0 ? limit : std::min(spec.max_users, limit);
  }

  // Under the lock, on a ready model: a lease through the gate, unless max_users are held.
  bool try_take(slot& s, grant& out) noexcept {
    const std::size_t k = s.spec->max_users == 0 ? pool_stripe_of_this_thread() : 0;
    auto& gate = s.stripes[k].gate;
    std::uint64_t g = gate.load(std::memory_order_acquire);
    for (;;) {
      if (pool_gate::users(g) >= effective_max_users(*s.spec)) return false;
      if (gate.compare_exchange_weak(g, g + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        out = {&s, s.model.get(), pool_gate::gen(g), k};
        return true;
      }
    }
  }

  // Under the lock: moves the gates' acquire counts into the slot's total.
  void fold_acquires(slot& s) noexcept {
    for (auto& st : s.stripes) {
      std::uint64_t g = st.gate.load(std::memory_order_relaxed);
      while (!st.gate.compare_exchange_weak(g, g & ~pool_gate::acquire_mask, std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
      }
      s.acquires += pool_gate::acquires(g);
    }
  }

  // Under the lock: closes the gates of a model that no lease holds, so that no acquire can take it until
  // they are opened again; false (and the gates left as they were) when a lease is held. Closed gates
  // change only under the lock, so the ones closed before a held one is found are put back exactly.
  bool close_idle_gate(slot& s) noexcept {
    std::uint64_t before[pool_stripes];
    for (std::size_t i = 0; i < pool_stripes; ++i) {
      auto& gate = s.stripes[i].gate;
      std::uint64_t g = gate.load(std::memory_order_acquire);
      for (;;) {
        if (pool_gate::users(g) != 0) {
          for (std::size_t j = 0; j < i; ++j) s.stripes[j].gate.store(before[j], std::memory_order_release);
          return false;
        }
        if (gate.compare_exchange_weak(g, g & ~(pool_gate::open | pool_gate::acquire_mask),
                                       std::memory_order_acq_rel, std::memory_order_acquire))
          break;
      }
      before[i] = g;
    }
    for (const std::uint64_t g : before) s.acquires += pool_gate::acquires(g);
    return true;
  }

  // Under the lock: closes the gates with their leases in them (a reload's swap, the pool's end); returns
  // the leases, which no acquire can add to until the gates open again.
  std::size_t close_gates(slot& s) noexcept {
    std::size_t users = 0;
    for (auto& st : s.stripes) {
      std::uint64_t g = st.gate.load(std::memory_order_acquire);
      while (!st.gate.compare_exchange_weak(g, g & ~pool_gate::open, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
      }
      users += pool_gate::users(g);
    }
    return users;
  }

  // Under the lock: the slot's model becomes the new current version, with `users` leases (on stripe 0),
  // behind gates of a new generation (closed if the pool is). Its gates are closed, and none holds a lease.
  void open_gate(slot& s, std::size_t users) noexcept {
    fold_acquires(s);
    s.gen = (s.gen + 1) & static_cast<std::uint32_t>(pool_gate::gen_mask >> pool_gate::gen_shift);
    s.live.store(s.model.get(), std::memory_order_release);
    s.live_max_users.store(s.spec->max_users, std::memory_order_release);
    const std::uint64_t g = (closed_ ? 0 : pool_gate::open) | (waiting_ > 0 ? pool_gate::waiters : 0) |
                            (static_cast<std::uint64_t>(s.gen) << pool_gate::gen_shift);
    for (std::size_t i = 0; i < pool_stripes; ++i)
      s.stripes[i].gate.store(g | (i == 0 ? users : 0), std::memory_order_release);
  }

  // Under the lock: raises or lowers every gate's waiters bit, as the first acquire starts to wait or
  // the last stops.
  void mark_waiters(bool on) noexcept {
    for (auto& p : slots_) {
      for (auto& st : p->stripes) {
        if (on) {
          st.gate.fetch_or(pool_gate::waiters, std::memory_order_acq_rel);
        } else {
          st.gate.fetch_and(~pool_gate::waiters, std::memory_order_acq_rel);
        }
      }
    }
  }

  // Under the lock: the leases held, on current and retired versions.
  std::size_t leases_locked() const noexcept {
    std::size_t n = 0;
    for (const auto& p : slots_) {
      n += p->users();
      for (const auto& r : p->retired) n += r.users;
    }
    return n;
  }

  static bool evictable(const slot& s) noexcept {
    return s.state == model_state::ready && s.users() == 0 && !s.reloading && !s.spec->pinned;
  }

  static double byte_seconds_between(std::size_t bytes, time_point from, time_point to) {
    return static_cast<double>(bytes) * std::chrono::duration<double>(to - from).count();
  }

  // Unloads idle models, least recently used first, until `need` more bytes fit; evicts nothing and
  // returns false when even evicting every idle model would not be enough.
  bool make_room(std::size_t need, const slot* keep, std::vector<victim>& victims) {
    if (fits(need)) return true;
    if (used_ - freeable_bytes(keep) + need > opts_.budget_bytes) return false;
    // Least recently released first (ties in config order). A model leased without the lock after it
    // was counted as freeable refuses to close its gate and is passed over.
    std::vector<slot*> passed;
    while (!fits(need)) {
      slot* lru = nullptr;
      for (const auto& p : slots_)
        if (p.get() != keep && evictable(*p) &&
            std::find(passed.begin(), passed.end(), p.get()) == passed.end() &&
            (lru == nullptr || p->released_at() < lru->released_at()))
          lru = p.get();
      if (lru == nullptr) return false;
      if (close_idle_gate(*lru)) {
        unload(*lru, victims, unload_kind::eviction);
      } else {
        passed.push_back(lru);
      }
    }
    return true;
  }

  std::size_t freeable_bytes(const slot* keep) const noexcept {
    std::size_t n = 0;
    for (const auto& p : slots_)
      if (p.get() != keep && evictable(*p)) n += p->charged;
    return n;
  }

  bool fits(std::size_t need) const noexcept {
    return used_ <= opts_.budget_bytes && need <= opts_.budget_bytes - used_;
  }

  // Under the lock, with the slot's gate closed and no lease held.
  void unload(slot& s, std::vector<victim>& victims, unload_kind kind) {
    s.live.store(nullptr, std::memory_order_relaxed);
    s.byte_seconds += byte_seconds_between(s.charged, s.loaded_at, clock_.now());
    used_ -= s.charged;
    s.charged = 0;
    s.state = model_state::unloaded;
    ++s.unloads;
    if (kind == unload_kind::eviction) ++s.evictions;
    if (kind == unload_kind::idle) ++s.idle_unloads;
    victims.push_back({std::move(s.model), s.spec});
  }

  // Outside the lock. A throwing unload hook must not leave a lease's destructor or the pool's half done.
  void dispose_one(std::unique_ptr<Model> m, const spec_type& spec) noexcept {
    try {
      if (opts_.unload) {
        opts_.unload(std::move(m), spec);
      } else {
        m.reset();
      }
    } catch (...) {
    }
  }

  void dispose(std::vector<victim>& victims) noexcept {
    for (victim& v : victims) {
      dispose_one(std::move(v.model), *v.spec);
      if (opts_.ledger != nullptr) {
        try {
          opts_.ledger->record_model_unload(opts_.ledger_device);
        } catch (...) {
        }
      }
    }
  }

  std::chrono::nanoseconds backoff_for(std::uint64_t failures) const {
    std::chrono::nanoseconds b = opts_.retry_backoff;
    for (std::uint64_t i = 1; i < failures && b < opts_.max_retry_backoff; ++i)
      b = b > opts_.max_retry_backoff / 2 ? opts_.max_retry_backoff : b * 2;
    return std::min(b, opts_.max_retry_backoff);
  }

  struct attempt {
    loaded_model<Model> got;
    std::exception_ptr error;
    time_point end{};
    std::chrono::nanoseconds took{0};
  };

  // The loader and warm-up, outside the lock. `s` is touched only under it, to show the warm-up.
  attempt run_loader(slot& s, const spec_type& spec, std::unique_lock<std::mutex>& lock, bool show_warming) {
    attempt a;
    const time_point t0 = clock_.now();
    try {
      a.got = opts_.load(spec);
      if (!a.got.model)
        throw pool_error(s.name, "frugal::model_pool: the loader returned no model for \"" + s.name + "\"");
      if (opts_.warm_up) {
        if (show_warming) {
          lock.lock();
          s.state = model_state::warming;
          lock.unlock();
        }
        opts_.warm_up(*a.got.model, spec);
      }
    } catch (...) {
      a.error = std::current_exception();
    }
    a.end = clock_.now();
    a.took = std::max(std::chrono::duration_cast<std::chrono::nanoseconds>(a.end - t0),
                      std::chrono::nanoseconds(0));
    return a;
  }

  // Under the lock: the bytes a good attempt measured, or the attempt failed with model_too_large.
  std::size_t measured_bytes(slot& s, attempt& a, std::size_t need) {
    const std::size_t measured = a.got.bytes != 0 ? a.got.bytes : need;
    if (!a.error && measured > opts_.budget_bytes) {
      ++too_large_;
      a.error = std::make_exception_ptr(model_too_large(s.name, measured, opts_.budget_bytes));
    }
    return measured;
  }

  // Under the lock: the new model becomes the slot's current one, charged `measured` bytes.
  void install(slot& s, attempt& a, std::size_t measured, std::vector<victim>& more, std::size_t users) {
    s.charged = measured;
    s.known_bytes = measured;
    if (!fits(0) && !make_room(0, &s, more)) ++over_budget_loads_;
    s.model = std::move(a.got.model);
    s.state = model_state::ready;
    s.loaded_at = a.end;
    for (auto& st : s.stripes)
      st.released_at.store(a.end.time_since_epoch().count(), std::memory_order_relaxed);
    ++s.loads;
    s.failures_in_row = 0;
    s.last_error.clear();
    s.load_time_total += a.took;
    s.last_load_time = a.took;
    open_gate(s, users);
  }

  void record_load(std::chrono::nanoseconds took) noexcept {
    if (opts_.ledger == nullptr) return;
    try {
      opts_.ledger->record_model_load(opts_.ledger_device, std::min(took, cost::max_record_duration));
    } catch (...) {
    }
  }

  // Called with the lock held and room made; runs the loader and warm-up without it, as the one flight
  // every other caller of this model waits on.
  grant load(std::unique_lock<std::mutex>& lock, slot& s, std::size_t need, std::vector<victim> victims) {
    const auto f = std::make_shared<pool_flight>();
    const std::shared_ptr<const spec_type> spec = s.spec;
    used_ += need;
    s.charged = need;
    s.state = model_state::loading;
    s.flight = f;
    lock.unlock();
    dispose(victims);

    attempt a = run_loader(s, *spec, lock, true);

    std::unique_ptr<Model> discard;
    std::vector<victim> more;
    Model* model = nullptr;
    std::uint32_t gen = 0;
    lock.lock();
    const std::size_t measured = measured_bytes(s, a, need);
    if (a.error) {
      discard = std::move(a.got.model);
      used_ -= s.charged;
      s.charged = 0;
      ++s.load_failures;
      ++s.failures_in_row;
      s.last_error = exception_message(a.error);
      if (opts_.retry_backoff.count() > 0) {
        s.state = model_state::failed;
        s.retry_at =
            a.end + std::chrono::duration_cast<typename Clock::duration>(backoff_for(s.failures_in_row));
      } else {
        s.state = model_state::unloaded;
      }
      f->error = a.error;
    } else {
      used_ = used_ - need + measured;
      install(s, a, measured, more, 1);
      cold_start_.record(static_cast<std::uint64_t>(a.took.count()));
      model = s.model.get();
      gen = s.gen;
    }
    f->done = true;
    s.flight.reset();
    lock.unlock();
    cv_.notify_all();
    if (discard) dispose_one(std::move(discard), *spec);
    dispose(more);
    if (a.error) std::rethrow_exception(a.error);
    record_load(a.took);
    return {&s, model, gen, 0};
  }

 public:
  // Swaps a model for a new version (new args, path, size) without failing a request: the new one loads
  // beside the current one, which keeps serving meanwhile and, once replaced, stays until its last lease
  // ends. When both do not fit and the current one is idle, it is unloaded first and the new one loaded
  // in its place. A model not loaded just takes the new spec. A failed load leaves the current one.
  void reload(spec_type next, std::chrono::nanoseconds timeout) {
    if (timeout.count() < 0)
      throw std::invalid_argument("frugal::model_pool::reload: timeout must not be negative");
    const std::string who = "frugal::model_pool::reload: spec (\"" + next.name + "\")";
    if (next.estimated_bytes == 0) throw std::invalid_argument(who + ".estimated_bytes must be > 0");
    if (next.idle_unload_after.count() < 0)
      throw std::invalid_argument(who + ".idle_unload_after must not be negative");
    const auto spec = std::make_shared<const spec_type>(std::move(next));
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(mutex_);
    slot& s = find(spec->name);
    std::vector<victim> victims;
    const std::size_t need = spec->estimated_bytes;
    waiter waits(*this);
    for (;;) {
      if (closed_) throw pool_error(s.name, "frugal::model_pool: the pool is closed");
      if (s.reloading) {
        cv_.wait(lock);
        continue;
      }
      if (s.state == model_state::loading || s.state == model_state::warming) {
        const std::shared_ptr<pool_flight> f = s.flight;
        cv_.wait(lock, [&] { return f->done; });
        continue;
      }
      if (s.state != model_state::ready) {
        swap_spec(s, spec);
        return;
      }
      if (need > opts_.budget_bytes) {
        ++too_large_;
        throw model_too_large(s.name, need, opts_.budget_bytes);
      }
      if (make_room(need, &s, victims)) break;
      if (!victims.empty()) {  // a model taken meanwhile cut the room short: look again
        lock.unlock();
        dispose(victims);
        victims.clear();
        lock.lock();
        continue;
      }
      if (close_idle_gate(s)) {
        unload(s, victims, unload_kind::reload);
        swap_spec(s, spec);
        waits.drop();
        lock.unlock();
        dispose(victims);
        const auto left =
            std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(0));
        release(acquire(s, deadline == std::chrono::steady_clock::time_point::max()
                               ? std::chrono::nanoseconds::max()
                               : std::chrono::duration_cast<std::chrono::nanoseconds>(left)));
        return;
      }
      if (!waits.held()) {
        waits.raise();
        continue;
      }
      if (!wait_until(lock, deadline)) {
        ++exhausted_;
        throw pool_exhausted(s.name, need, used_, used_ - freeable_bytes(&s), opts_.budget_bytes);
      }
    }

    waits.drop();
    used_ += need;
    s.reloading = true;
    lock.unlock();
    dispose(victims);

    attempt a = run_loader(s, *spec, lock, false);

    std::unique_ptr<Model> discard;
    std::vector<victim> more;
    lock.lock();
    s.reloading = false;
    const std::size_t measured = measured_bytes(s, a, need);
    if (a.error) {
      discard = std::move(a.got.model);
      used_ -= need;
      ++s.reload_failures;
    } else {
      used_ = used_ - need + measured;
      s.byte_seconds += byte_seconds_between(s.charged, s.loaded_at, a.end);
      // Close the current version's gate: its leases (counted now, none can be added) move with it.
      const std::size_t users = close_gates(s);
      if (users > 0) {
        s.retired.push_back({std::move(s.model), users, s.charged, a.end, s.spec});
      } else {
        used_ -= s.charged;
        ++s.unloads;
        more.push_back({std::move(s.model), s.spec});
      }
      s.spec = spec;
      ++s.reloads;
      install(s, a, measured, more, 0);
    }
    lock.unlock();
    cv_.notify_all();
    if (discard) dispose_one(std::move(discard), *spec);
    dispose(more);
    if (a.error) std::rethrow_exception(a.error);
    record_load(a.took);
  }

 private:
  void swap_spec(slot& s, const std::shared_ptr<const spec_type>& spec) {
    s.spec = spec;
    s.known_bytes = 0;
    s.state = model_state::unloaded;
    s.failures_in_row = 0;
    s.last_error.clear();
    ++s.reloads;
  }

  const options_type opts_;
  Clock clock_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<slot>> slots_;
  std::unordered_map<std::string, slot*, pool_string_hash, std::equal_to<>> by_name_;
  std::size_t used_ = 0;
  std::size_t waiting_ = 0;
  std::uint64_t acquires_ = 0, load_waits_ = 0, exhausted_ = 0, busy_ = 0, too_large_ = 0,
                backoff_refusals_ = 0, over_budget_loads_ = 0;
  cost::log_linear_histogram cold_start_;
  bool closed_ = false;
  bool orphaned_ = false;  // closed with leases held: the last release deletes the core
};

}  // namespace detail
FRUGAL_END_NAMESPACE
