#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/cache/basic_cache.hpp"
#include "frugal/cache/key.hpp"
#include "frugal/cost/ledger.hpp"
#include "frugal/namespace.hpp"
#include "frugal/redis/client.hpp"
#include "frugal/redis/codec.hpp"
#include "frugal/redis/options.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A snapshot of a redis_tier's counters.
struct redis_tier_stats {
  std::uint64_t lookups = 0;             ///< keys asked for, by any call
  std::uint64_t local_hits = 0;          ///< served by the in-process LRU
  std::uint64_t redis_hits = 0;          ///< served by Redis
  std::uint64_t misses = 0;              ///< in neither tier
  std::uint64_t model_calls = 0;         ///< values computed by the caller's function (one per key)
  std::uint64_t header_mismatches = 0;   ///< values in Redis whose header is not this codec's: misses
  std::uint64_t decode_errors = 0;       ///< values with the right header that the codec refused: misses
  std::uint64_t fallbacks = 0;           ///< lookups that could not ask Redis (a fault, or the breaker open)
  std::uint64_t writes = 0;              ///< values Redis acknowledged
  std::uint64_t write_errors = 0;        ///< writes refused (e.g. OOM under noeviction) or lost to a fault
  std::uint64_t oversize_skips = 0;      ///< values over max_value_bytes, not written
  std::uint64_t flight_waits = 0;        ///< callers that waited for a compute in this process
  std::uint64_t locks_taken = 0;         ///< cross-replica locks this replica took before computing
  std::uint64_t lock_waits = 0;          ///< misses that found another replica's lock and waited
  std::uint64_t lock_wait_hits = 0;      ///< of those, the ones that got the other replica's value
  std::uint64_t lock_wait_timeouts = 0;  ///< of those, the ones that gave up after lock_wait and computed
  redis_client_stats redis{};            ///< round trips, latency, errors and the breaker
  cache_stats local{};                   ///< the LRU in front (zeros without one)
};

/// @brief A two-tier result cache for replicas: the in-process lru_cache in front, a shared Redis behind
/// it, then the model. Thread-safe.
///
/// Values live in Redis under `prefix:model:version:` plus the 16 bytes of their key128, with a 24-byte
/// versioned header, written with `SET ... PX ttl`. A batch's lookups are one MGET and its writes one
/// pipeline. Faults never reach the caller: a Redis that is down, slow (past command_timeout) or
/// refusing is a miss, counted in stats() and in the ledger, and after breaker_failures in a row the
/// breaker skips Redis until a probe, backed off exponentially, reconnects.
///
/// With a ledger, every hit is recorded (LRU hits as cache hits, Redis hits as remote hits with their
/// latency) and every fault that fell back to the model as a remote fault; the caller records its own
/// requests and batches, and not the hits again.
template <class V, class Codec = redis_codec<V>, class Clock = std::chrono::steady_clock>
requires redis_codec_for<Codec, V>
class redis_tier {
 public:
  using value_type = V;
  using pointer = std::shared_ptr<const V>;
  using clock_type = Clock;

  /// @brief A redis_tier's options; a plain aggregate.
  struct options_type {
    redis_options redis{};
    /// The LRU in front. Both max_entries and max_bytes 0: no local tier, every lookup asks Redis.
    cache_options<key128, V> local{.max_entries = 10'000};
    /// Where hits and faults are recorded, under `feature`; null for nowhere.
    cost::ledger<>* ledger = nullptr;
    cost::feature_id feature{};
  };

  /// @brief Validates the options (std::invalid_argument naming the field). Connects lazily: a Redis that
  /// is down at start is a fault like any other, not an error.
  explicit redis_tier(options_type o, Clock clock = {})
      : opts_(std::move(o)), clock_(clock), client_((detail::validate(opts_.redis), opts_.redis), clock) {
    if (opts_.local.max_entries != 0 || opts_.local.max_bytes != 0)
      local_ = std::make_unique<lru_cache<V, Clock>>(opts_.local, clock);
    const auto& r = opts_.redis;
    base_ = r.prefix + ":" + r.model + ":" + r.version + ":";
    ttl_ = std::to_string(r.ttl.count());
    lock_ttl_ = std::to_string(r.lock_ttl.count());
    std::random_device rd;
    token_ = std::to_string(rd()) + "-" + std::to_string(rd()) + "-" + std::to_string(rd());
  }

  redis_tier(const redis_tier&) = delete;
  redis_tier& operator=(const redis_tier&) = delete;

  /// @brief The Redis key of `k`: the namespace, then lo and hi little-endian (binary).
  std::string redis_key(const key128& k) const {
    std::string s = base_;
    s.push_back('v');
    append_key(s, k);
    return s;
  }
  /// @brief The Redis key of the cross-replica lock on `k`.
  std::string lock_key(const key128& k) const {
    std::string s = base_;
    s.push_back('l');
    append_key(s, k);
    return s;
  }

  /// @brief The value under k from the LRU, else from Redis (then kept in the LRU); null on a miss.
  pointer get(const key128& k) {
    lookups_.fetch_add(1, std::memory_order_relaxed);
    if (pointer p = local_get(k)) return p;
    fetch f = fetch_one(k);
    if (!f.value) misses_.fetch_add(1, std::memory_order_relaxed);
    return f.value;
  }

  /// @brief Stores v in the LRU and in Redis with the TTL; true if Redis acknowledged it.
  bool put(const key128& k, V v) {
    auto p = std::make_shared<const V>(std::move(v));
    if (local_) local_->put(k, p);
    return write(std::span<const key128>(&k, 1), std::span<const pointer>(&p, 1)) == 1;
  }

  /// @brief The value under k, from the LRU, Redis, or fn() (a V), which is then written to both.
  /// Concurrent calls on one key in this process run fn once. With cross_replica_single_flight, a miss
  /// in Redis takes a short lock there, so that replicas asking at once compute once too; a replica that
  /// waits on another's lock computes itself after lock_wait. An exception from fn reaches every waiter
  /// of this process and nothing is stored; Redis faults never reach the caller.
  template <class F>
  pointer get_or_compute(const key128& k, F&& fn) {
    static_assert(std::is_convertible_v<std::invoke_result_t<F&>, V>,
                  "frugal::redis_tier::get_or_compute: fn() must return a V");
    lookups_.fetch_add(1, std::memory_order_relaxed);
    if (pointer p = local_get(k)) return p;
    std::promise<pointer> promise;
    {
      std::unique_lock lock(flights_mutex_);
      auto it = flights_.find(k);
      if (it != flights_.end()) {
        std::shared_future<pointer> other = it->second;
        lock.unlock();
        flight_waits_.fetch_add(1, std::memory_order_relaxed);
        return other.get();
      }
      flights_.emplace(k, promise.get_future().share());
    }
    try {
      pointer p = load(k, fn);
      end_flight(k);
      promise.set_value(p);
      return p;
    } catch (...) {
      end_flight(k);
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  /// @brief The values under keys, null where neither tier has one: the LRU, then one MGET for the rest.
  std::vector<pointer> get_batch(std::span<const key128> keys) {
    std::vector<pointer> out(keys.size());
    std::vector<std::size_t> missing;
    lookup_batch(keys, out, missing);
    misses_.fetch_add(missing.size(), std::memory_order_relaxed);
    return out;
  }

  /// @brief Stores values[i] under keys[i] in the LRU and in Redis, in one pipelined round trip; returns
  /// how many Redis acknowledged.
  std::size_t put_batch(std::span<const key128> keys, std::span<const V> values) {
    if (keys.size() != values.size())
      throw std::invalid_argument("frugal::redis_tier::put_batch: " + std::to_string(keys.size()) +
                                  " keys but " + std::to_string(values.size()) + " values");
    std::vector<pointer> ps;
    ps.reserve(values.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ps.push_back(std::make_shared<const V>(values[i]));
      if (local_) local_->put(keys[i], ps.back());
    }
    return write(keys, ps);
  }

  /// @brief The values under keys: the LRU, one MGET, then fn(std::span<const std::size_t> missing) for
  /// the indices (into keys) that neither tier had, which must return one V per index, in order. The
  /// computed values are written back in one pipeline. No single flight here: a batch computes its own
  /// misses (use get_or_compute per key for that).
  template <class F>
  std::vector<pointer> get_or_compute_batch(std::span<const key128> keys, F&& fn) {
    std::vector<pointer> out(keys.size());
    std::vector<std::size_t> missing;
    lookup_batch(keys, out, missing);
    if (missing.empty()) return out;
    misses_.fetch_add(missing.size(), std::memory_order_relaxed);
    std::vector<V> computed = std::invoke(fn, std::span<const std::size_t>(missing));
    if (computed.size() != missing.size())
      throw std::logic_error("frugal::redis_tier::get_or_compute_batch: fn returned " +
                             std::to_string(computed.size()) + " values for " +
                             std::to_string(missing.size()) + " missing keys");
    model_calls_.fetch_add(missing.size(), std::memory_order_relaxed);
    std::vector<key128> ks;
    std::vector<pointer> ps;
    ks.reserve(missing.size());
    ps.reserve(missing.size());
    for (std::size_t j = 0; j < missing.size(); ++j) {
      auto p = std::make_shared<const V>(std::move(computed[j]));
      if (local_) local_->put(keys[missing[j]], p);
      out[missing[j]] = p;
      ks.push_back(keys[missing[j]]);
      ps.push_back(std::move(p));
    }
    write(ks, ps);
    return out;
  }

  /// @brief The breaker's state now.
  breaker_state breaker() const { return client_.state(); }

  /// @brief The LRU in front, or null without one.
  lru_cache<V, Clock>* local() noexcept { return local_.get(); }

  redis_tier_stats stats() const {
    redis_tier_stats st;
    auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    st.lookups = ld(lookups_);
    st.local_hits = ld(local_hits_);
    st.redis_hits = ld(redis_hits_);
    st.misses = ld(misses_);
    st.model_calls = ld(model_calls_);
    st.header_mismatches = ld(header_mismatches_);
    st.decode_errors = ld(decode_errors_);
    st.fallbacks = ld(fallbacks_);
    st.writes = ld(writes_);
    st.write_errors = ld(write_errors_);
    st.oversize_skips = ld(oversize_);
    st.flight_waits = ld(flight_waits_);
    st.locks_taken = ld(locks_taken_);
    st.lock_waits = ld(lock_waits_);
    st.lock_wait_hits = ld(lock_wait_hits_);
    st.lock_wait_timeouts = ld(lock_wait_timeouts_);
    st.redis = client_.stats();
    if (local_) st.local = local_->stats();
    return st;
  }

  const options_type& options() const noexcept { return opts_; }

 private:
  struct fetch {
    pointer value;
    bool faulted = false;
  };

  static void append_key(std::string& s, const key128& k) {
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((k.lo >> (8 * i)) & 0xff));
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((k.hi >> (8 * i)) & 0xff));
  }

  pointer local_get(const key128& k) {
    if (!local_) return {};
    pointer p = local_->get(k);
    if (p) {
      local_hits_.fetch_add(1, std::memory_order_relaxed);
      if (opts_.ledger) opts_.ledger->record_cache_hit(opts_.feature);
    }
    return p;
  }

  void fault() {
    fallbacks_.fetch_add(1, std::memory_order_relaxed);
    if (opts_.ledger) opts_.ledger->record_remote_fault(opts_.feature);
  }

  // A bulk reply decoded, or null (counted) when its header or payload does not match.
  pointer decode(const redisReply* r) {
    if (!r || r->type != REDIS_REPLY_STRING) return {};
    std::optional<V> v;
    switch (detail::redis_decode<V, Codec>(std::string_view(r->str, r->len), v)) {
      case detail::decode_result::ok:
        return std::make_shared<const V>(std::move(*v));
      case detail::decode_result::header_mismatch:
        header_mismatches_.fetch_add(1, std::memory_order_relaxed);
        return {};
      case detail::decode_result::decode_error:
        decode_errors_.fetch_add(1, std::memory_order_relaxed);
        return {};
    }
    return {};
  }

  void redis_hit(const key128& k, const pointer& p, std::chrono::nanoseconds latency) {
    redis_hits_.fetch_add(1, std::memory_order_relaxed);
    if (local_) local_->put(k, p);
    if (opts_.ledger) opts_.ledger->record_remote_hit(opts_.feature, latency);
  }

  static std::chrono::nanoseconds since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  }

  fetch fetch_one(const key128& k) {
    const std::string key = redis_key(k);
    const detail::redis_command cmd{"GET", key};
    const auto t0 = std::chrono::steady_clock::now();
    detail::redis_result r = client_.run(std::span<const detail::redis_command>(&cmd, 1));
    if (!r) {
      fault();
      return {{}, true};
    }
    fetch f;
    f.value = decode(r.replies[0].get());
    if (f.value) redis_hit(k, f.value, since(t0));
    return f;
  }

  void lookup_batch(std::span<const key128> keys, std::vector<pointer>& out,
                    std::vector<std::size_t>& missing) {
    lookups_.fetch_add(keys.size(), std::memory_order_relaxed);
    std::vector<std::size_t> ask;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      out[i] = local_get(keys[i]);
      if (!out[i]) ask.push_back(i);
    }
    if (ask.empty()) return;
    std::vector<std::string> names;
    names.reserve(ask.size());
    detail::redis_command mget{"MGET"};
    for (std::size_t i : ask) names.push_back(redis_key(keys[i]));
    for (const std::string& n : names) mget.push_back(n);
    const auto t0 = std::chrono::steady_clock::now();
    detail::redis_result r = client_.run(std::span<const detail::redis_command>(&mget, 1));
    const redisReply* arr = r ? r.replies[0].get() : nullptr;
    if (!r || arr->type != REDIS_REPLY_ARRAY || arr->elements != ask.size()) {
      for (std::size_t j = 0; j < ask.size(); ++j) fault();
      missing = std::move(ask);
      return;
    }
    // One round trip served them all: each hit is charged its share of it.
    const auto each = since(t0) / static_cast<std::int64_t>(ask.size());
    for (std::size_t j = 0; j < ask.size(); ++j) {
      pointer p = decode(arr->element[j]);
      if (p) {
        redis_hit(keys[ask[j]], p, each);
        out[ask[j]] = std::move(p);
      } else {
        missing.push_back(ask[j]);
      }
    }
  }

  // Writes the values in one pipeline; with `release`, the lock on keys[0] is dropped in the same round
  // trip, if it is still this replica's. Returns how many were acknowledged.
  std::size_t write(std::span<const key128> keys, std::span<const pointer> values,
                    const key128* release = nullptr) {
    std::vector<std::string> names, blobs;
    names.reserve(keys.size() + 1);
    blobs.reserve(keys.size());
    std::vector<detail::redis_command> cmds;
    cmds.reserve(keys.size() + 1);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      std::string blob = detail::redis_encode<V, Codec>(*values[i]);
      if (blob.empty() || blob.size() > opts_.redis.max_value_bytes) {
        oversize_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      names.push_back(redis_key(keys[i]));
      blobs.push_back(std::move(blob));
      cmds.push_back({"SET", names.back(), blobs.back(), "PX", ttl_});
    }
    const std::size_t sets = cmds.size();
    if (release) {
      names.push_back(lock_key(*release));
      cmds.push_back({"EVAL", release_script, "1", names.back(), token_});
    }
    if (cmds.empty()) return 0;
    detail::redis_result r = client_.run(cmds);
    if (!r) {
      write_errors_.fetch_add(sets, std::memory_order_relaxed);
      return 0;
    }
    std::size_t ok = 0;
    for (std::size_t i = 0; i < sets; ++i)
      if (r.replies[i]->type == REDIS_REPLY_STATUS) ++ok;
    writes_.fetch_add(ok, std::memory_order_relaxed);
    write_errors_.fetch_add(sets - ok, std::memory_order_relaxed);
    return ok;
  }

  enum class lock_result { taken, held_by_other, fault };

  lock_result try_lock(const key128& k) {
    const std::string name = lock_key(k);
    const detail::redis_command cmd{"SET", name, token_, "NX", "PX", lock_ttl_};
    detail::redis_result r = client_.run(std::span<const detail::redis_command>(&cmd, 1));
    if (!r) return lock_result::fault;
    const redisReply* rep = r.replies[0].get();
    if (rep->type == REDIS_REPLY_STATUS) {
      locks_taken_.fetch_add(1, std::memory_order_relaxed);
      return lock_result::taken;
    }
    // nil: another replica holds it. An error reply (e.g. OOM) takes no lock: compute unlocked.
    return rep->type == REDIS_REPLY_NIL ? lock_result::held_by_other : lock_result::fault;
  }

  // While another replica holds the lock: polls for its value (and the lock) until lock_wait has passed.
  // Returns the value, or null with `mine` set when the lock came free and this replica took it.
  pointer wait_for_other(const key128& k, bool& mine) {
    lock_waits_.fetch_add(1, std::memory_order_relaxed);
    const std::string vk = redis_key(k), lk = lock_key(k);
    const detail::redis_command cmd{"MGET", vk, lk};
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + opts_.redis.lock_wait;
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(opts_.redis.lock_poll);
      const auto t0 = std::chrono::steady_clock::now();
      detail::redis_result r = client_.run(std::span<const detail::redis_command>(&cmd, 1));
      const redisReply* arr = r ? r.replies[0].get() : nullptr;
      if (!r || arr->type != REDIS_REPLY_ARRAY || arr->elements != 2) {
        fault();
        return {};
      }
      if (pointer p = decode(arr->element[0])) {
        lock_wait_hits_.fetch_add(1, std::memory_order_relaxed);
        redis_hit(k, p, since(t0));
        return p;
      }
      if (arr->element[1]->type == REDIS_REPLY_NIL) {
        // The holder finished without a value (it failed, or its write was refused): take over.
        const lock_result o = try_lock(k);
        if (o == lock_result::taken) {
          mine = true;
          return {};
        }
        if (o == lock_result::fault) return {};
      }
    }
    lock_wait_timeouts_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }

  template <class F>
  pointer load(const key128& k, F& fn) {
    // A caller that finished just before this one registered its flight has filled the LRU.
    if (local_) {
      if (pointer p = local_->get(k)) {
        local_hits_.fetch_add(1, std::memory_order_relaxed);
        if (opts_.ledger) opts_.ledger->record_cache_hit(opts_.feature);
        return p;
      }
    }
    fetch f = fetch_one(k);
    if (f.value) return f.value;
    misses_.fetch_add(1, std::memory_order_relaxed);
    bool locked = false;
    if (!f.faulted && opts_.redis.cross_replica_single_flight) {
      const lock_result o = try_lock(k);
      if (o == lock_result::taken) {
        locked = true;
      } else if (o == lock_result::held_by_other) {
        if (pointer p = wait_for_other(k, locked)) return p;
      }
    }
    pointer p;
    try {
      p = std::make_shared<const V>(std::invoke(fn));
    } catch (...) {
      if (locked) release(k);
      throw;
    }
    model_calls_.fetch_add(1, std::memory_order_relaxed);
    if (local_) local_->put(k, p);
    // After a fault the write would most likely fault too, and cost another timeout.
    if (!f.faulted)
      write(std::span<const key128>(&k, 1), std::span<const pointer>(&p, 1), locked ? &k : nullptr);
    return p;
  }

  void release(const key128& k) {
    const std::string name = lock_key(k);
    const detail::redis_command cmd{"EVAL", release_script, "1", name, token_};
    client_.run(std::span<const detail::redis_command>(&cmd, 1));
  }

  void end_flight(const key128& k) {
    std::lock_guard lock(flights_mutex_);
    flights_.erase(k);
  }

  // Deletes the lock only if it still holds this replica's token (it may have expired and been taken).
  static constexpr std::string_view release_script =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

  options_type opts_;
  Clock clock_;
  detail::redis_client<Clock> client_;
  std::unique_ptr<lru_cache<V, Clock>> local_;
  std::string base_, ttl_, lock_ttl_, token_;
  std::mutex flights_mutex_;
  std::unordered_map<key128, std::shared_future<pointer>> flights_;
  std::atomic<std::uint64_t> lookups_{0}, local_hits_{0}, redis_hits_{0}, misses_{0}, model_calls_{0},
      header_mismatches_{0}, decode_errors_{0}, fallbacks_{0}, writes_{0}, write_errors_{0}, oversize_{0},
      flight_waits_{0}, locks_taken_{0}, lock_waits_{0}, lock_wait_hits_{0}, lock_wait_timeouts_{0};
};

FRUGAL_END_NAMESPACE
