#pragma once
/// @file
/// @brief basic_cache, the sharded, thread-safe result cache, with its eviction policy as a parameter:
/// lru_cache<V> for plain LRU and tinylfu_cache<V> for W-TinyLFU. The shards (detail/shard.hpp), the
/// lock-free read protocol (detail/read_buffer.hpp) and single flight (detail/flights.hpp) live apart.
#include <algorithm>
#include <bit>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "frugal/cache/detail/flights.hpp"
#include "frugal/cache/detail/shard.hpp"
#include "frugal/cache/eviction.hpp"
#include "frugal/cache/key.hpp"
#include "frugal/cache/tinylfu.hpp"
#include "frugal/cache/weigher.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Options of a basic_cache; a plain aggregate, e.g. `{.max_entries = 1'000'000, .ttl = 10min}`.
template <class Key, class V>
struct cache_options {
  /// Entry limit; 0 for none. At least one of max_entries and max_bytes must be set. The limit is split
  /// over the shards (each holds at most its share, stats().shard_max_entries) and keys do not split
  /// evenly, so a cache filled with max_entries distinct keys evicts before it holds them all: 10,000
  /// keys in 64 shards of 157 leave about 9,650 (96.5%). It never holds more than max_entries. For an
  /// exact bound use shards = 1; otherwise size the limit about 5% above the entries you need.
  std::size_t max_entries = 0;
  /// Byte limit on the values (as weighed, not counting the cache's metadata); 0 for none. A value
  /// heavier than a shard's share of it, or of 1 GiB or more, is returned to the caller but not cached.
  std::size_t max_bytes = 0;
  /// Cache-wide time to live; 0 for none. put and get_or_compute may override it per entry.
  std::chrono::nanoseconds ttl{0};
  /// Number of shards, a power of two, each with its own lock and an equal share of the limits.
  /// 0 picks up to 64 while each shard keeps at least 64 entries (or 1 MiB): with fewer, threads on a
  /// Zipf load meet more often on the hot shards' lock lines. Use 1 for one exact LRU order over the
  /// whole cache; raise it when many threads hit the cache at once.
  std::size_t shards = 0;
  /// The bytes of a value. Defaults to frugal::default_weigher<V> where that is defined; required when
  /// max_bytes is set and it is not.
  std::function<std::size_t(const V&)> weigher{};
  /// Called for each entry that leaves the cache, outside the shard's lock; it may use the cache, and
  /// it may run on several threads at once.
  std::function<void(const Key&, const std::shared_ptr<const V>&, eviction_cause)> on_evict{};
};

/// @brief A snapshot of a cache's counters.
struct cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;                ///< values stored by put and get_or_compute
  std::uint64_t evictions_size = 0;      ///< entries pushed out by a limit
  std::uint64_t evictions_expired = 0;   ///< entries whose TTL ran out
  std::uint64_t evictions_explicit = 0;  ///< entries removed by erase, erase_if or clear
  std::uint64_t replacements = 0;        ///< values replaced by a put on the same key
  std::uint64_t rejected_oversize = 0;   ///< values too large to cache
  std::uint64_t loads = 0;               ///< compute functions started by get_or_compute
  std::uint64_t load_waits = 0;          ///< callers that waited on another caller's compute
  std::uint64_t load_failures = 0;       ///< computes that threw (never cached)
  std::size_t entries = 0;
  std::size_t bytes = 0;           ///< sum of the weights of the live values
  std::size_t metadata_bytes = 0;  ///< the cache's own structures: slots, index, sketch, shards
  double hit_ratio = 0;            ///< hits / (hits + misses), 0 before any lookup
  std::size_t shards = 0;          ///< the number of shards
  /// The largest shard's share of max_entries and of max_bytes (0: no such limit): what one shard holds at
  /// most, the bound behind "a full cache holds fewer than max_entries" (see cache_options::max_entries).
  std::size_t shard_max_entries = 0;
  std::size_t shard_max_bytes = 0;
  std::size_t full_shards = 0;  ///< shards at their entry or byte limit now
};

/// @brief A thread-safe, sharded cache of inference results keyed by request hashes, with its eviction
/// policy as a parameter; use it through lru_cache<V> or tinylfu_cache<V>.
///
/// Each shard is an exact LRU (Admission = lru_admission) or W-TinyLFU (tinylfu_admission) behind its
/// own lock; the shard is chosen by key bits. Entries live in one slot array per shard, which keeps the
/// metadata near 60 bytes per entry. get never allocates, and does not take the shard's lock: it reads
/// through Caffeine-style read buffers, and on one thread the order it sees is exactly that of a locked
/// LRU (see detail/read_buffer.hpp for the protocol).
///
/// Values are handed out as std::shared_ptr<const V>. A reader's value then stays valid after it is
/// evicted, replaced or cleared, and even after the cache is gone, with no pin to release and no
/// handle that can dangle. put allocates the value and its control block together (make_shared), so a
/// hit only bumps a count. The price is the 16-byte pointer in each slot, and on a hot value read
/// from several cores, the count's cache line moving between them. visit(key, fn) avoids that: fn
/// reads the value in place while the reader's flag keeps it alive, and copies out what it needs.
///
/// @tparam Admission lru_admission or tinylfu_admission.
/// @tparam Clock     the clock for TTLs, e.g. frugal::manual_clock in tests.
/// @tparam Key       key128 or key64.
template <class V, class Admission, class Clock = std::chrono::steady_clock, class Key = key128>
class basic_cache {
  static_assert(std::is_same_v<Admission, lru_admission> || std::is_same_v<Admission, tinylfu_admission>,
                "frugal::basic_cache: Admission must be lru_admission or tinylfu_admission");
  static_assert(std::is_integral_v<typename Clock::duration::rep>,
                "frugal::basic_cache: Clock::duration must count in integers");

  using shard = detail::shard<Key, V, Admission>;
  using entry = typename shard::entry;
  using write_lock = typename shard::write_lock;
  using exclusive_lock = typename shard::exclusive_lock;
  using eviction_list = typename shard::evictions;

 public:
  using key_type = Key;
  using value_type = V;
  using pointer = std::shared_ptr<const V>;
  using options_type = cache_options<Key, V>;
  using clock_type = Clock;
  using admission_type = Admission;

  /// @brief Throws std::invalid_argument naming the field when the options are unusable.
  explicit basic_cache(options_type opts, Clock clock = {})
      : opts_(std::move(opts)), clock_(std::move(clock)) {
    validate_and_complete();
    shards_ = std::make_unique<shard[]>(shard_count_);
    // Limits are split evenly; the first shards take the remainder.
    const auto share = [&](std::size_t total, std::size_t i) {
      return total / shard_count_ + (i < total % shard_count_ ? 1 : 0);
    };
    for (std::size_t i = 0; i < shard_count_; ++i)
      shards_[i].init(i, share(opts_.max_entries, i), share(opts_.max_bytes, i));
  }
  basic_cache(const basic_cache&) = delete;
  basic_cache& operator=(const basic_cache&) = delete;
  /// @brief Waits for the computes started by get_or_compute_async, which write into the cache.
  ~basic_cache() {
    std::unique_lock lock(async_mutex_);
    async_cv_.wait(lock, [this] { return async_pending_ == 0; });
  }

  /// @brief The value under key, or null on a miss. Makes the entry the most recently used.
  pointer get(const Key& key) {
    shard& s = shard_for(key);
    pointer hit;
    if (s.read_fast(key, expired(), [&](const entry& e) { hit = e.value; })) [[likely]]
      return hit;
    return get_locked(s, key);
  }

  /// @brief Calls fn(const V&) with the value under key and returns true, or returns false on a
  /// miss; like get, makes the entry the most recently used. Most calls touch no reference count:
  /// fn reads the value in place while this thread's read flag keeps it alive, so that many cores
  /// can read one hot value without passing its count between them. Writers to the same shard wait
  /// for fn, so keep it short (copy out what you need). fn must not call any frugal cache: such a
  /// call throws std::logic_error instead of deadlocking. An exception from fn propagates.
  template <class F>
  bool visit(const Key& key, F&& fn) {
    static_assert(std::is_invocable_v<F&, const V&>, "frugal::basic_cache::visit: fn must take const V&");
    shard& s = shard_for(key);
    bool found = false;
    const auto call = [&](const V& v) {
      found = true;
      const detail::callback_scope scope("visit");
      std::invoke(fn, v);
    };
    if (s.read_fast(key, expired(), [&](const entry& e) { call(*e.value); })) [[likely]]
      return found;
    // The slow path holds the value by its count, so fn runs after the lock is released.
    const pointer p = get_locked(s, key);
    if (p) call(*p);
    return found;
  }

  /// @brief Stores value under key, replacing any older value. ttl 0 takes the cache's ttl and
  /// duration::max() means never. Returns false if the value is too large to cache.
  bool put(const Key& key, V value, std::chrono::nanoseconds ttl = {}) {
    const std::size_t w = weigh(value);
    return put_pointer(key, std::make_shared<const V>(std::move(value)), w, ttl);
  }

  /// @brief As put, for a value already shared with the caller.
  bool put(const Key& key, pointer value, std::chrono::nanoseconds ttl = {}) {
    if (!value) throw std::invalid_argument("frugal::basic_cache::put: value must not be null");
    const std::size_t w = weigh(*value);
    return put_pointer(key, std::move(value), w, ttl);
  }

  /// @brief The value under key, computing it with fn() on a miss. Concurrent misses on one key run fn
  /// once; the others wait for its result. If fn throws, every waiter gets the exception and nothing is
  /// cached, so the next call computes again. A result too large to cache is still returned. fn runs
  /// outside any lock, but must not itself wait on the same key.
  template <class F>
  pointer get_or_compute(const Key& key, F&& fn, std::chrono::nanoseconds ttl = {}) {
    check_ttl(ttl, "get_or_compute");
    shard& s = shard_for(key);
    std::promise<pointer> promise;
    std::shared_future<pointer> other;
    if (pointer hit = begin_load(s, key, promise, other)) return hit;
    if (other.valid()) {
      detail::check_not_computing(this, key, "get_or_compute");
      return other.get();
    }
    return run_load(s, key, fn, ttl, promise);
  }

  /// @brief As get_or_compute, without blocking: fn runs on a new thread (on a miss that no other
  /// caller is computing) and the future is shared by every caller of the same key meanwhile.
  template <class F>
  std::shared_future<pointer> get_or_compute_async(const Key& key, F fn, std::chrono::nanoseconds ttl = {}) {
    return get_or_compute_async(
        key, std::move(fn), [](std::function<void()> task) { std::thread(std::move(task)).detach(); }, ttl);
  }

  /// @brief As get_or_compute_async, with fn run by executor(std::function<void()>), e.g. a thread pool.
  template <class F, std::invocable<std::function<void()>> Executor>
  std::shared_future<pointer> get_or_compute_async(const Key& key, F fn, Executor&& executor,
                                                   std::chrono::nanoseconds ttl = {}) {
    check_ttl(ttl, "get_or_compute_async");
    shard& s = shard_for(key);
    auto promise = std::make_shared<std::promise<pointer>>();
    std::shared_future<pointer> other;
    if (pointer hit = begin_load(s, key, *promise, other)) {
      promise->set_value(std::move(hit));
      return promise->get_future().share();
    }
    if (other.valid()) {
      detail::check_not_computing(this, key, "get_or_compute_async");
      return other;
    }
    // begin_load registered this future in the shard; it must be taken before the task can finish.
    std::shared_future<pointer> result = find_flight(s, key);
    {
      std::lock_guard lock(async_mutex_);
      ++async_pending_;
    }
    auto shared_fn = std::make_shared<F>(std::move(fn));
    std::function<void()> task = [this, &s, key, shared_fn, ttl, promise] {
      try {
        run_load(s, key, *shared_fn, ttl, *promise);
      } catch (...) {
        // Already delivered through the future.
      }
      std::lock_guard lock(async_mutex_);
      --async_pending_;
      async_cv_.notify_all();
    };
    try {
      executor(task);
    } catch (...) {
      task();  // no thread to be had: compute here rather than leave waiters hanging
    }
    return result;
  }

  /// @brief Removes key; true if it was cached.
  bool erase(const Key& key) {
    shard& s = shard_for(key);
    eviction_list ev;
    exclusive_lock lock(s);
    const std::uint32_t i = s.find(key);
    if (i != shard::nil) s.remove(i, eviction_cause::erased, ev);
    lock.unlock();
    notify(ev);
    return i != shard::nil;
  }

  /// @brief Removes every entry for which pred(key, value) (or pred(value)) is true, e.g. the results
  /// of one model; returns how many. pred runs under a shard's lock: a cache call from inside it throws
  /// std::logic_error. If pred throws, the entries already removed stay removed, on_evict is called
  /// for each of them, and the exception propagates.
  template <class Pred>
  std::size_t erase_if(Pred pred) {
    std::size_t n = 0;
    for (std::size_t si = 0; si < shard_count_; ++si) {
      shard& s = shards_[si];
      eviction_list ev;
      exclusive_lock lock(s);
      try {
        for (std::uint32_t i = 0; i < s.slab.size(); ++i) {
          entry& e = s.slab[i];
          if (!e.value) continue;
          bool match;
          {
            const detail::callback_scope scope("erase_if");
            if constexpr (std::is_invocable_r_v<bool, Pred&, const Key&, const V&>) {
              match = pred(e.key, *e.value);
            } else {
              match = pred(*e.value);
            }
          }
          if (match) {
            s.remove(i, eviction_cause::erased, ev);
            ++n;
          }
        }
      } catch (...) {
        lock.unlock();
        notify(ev);
        throw;
      }
      lock.unlock();
      notify(ev);
    }
    return n;
  }

  /// @brief Removes every entry.
  void clear() {
    erase_if([](const Key&, const V&) { return true; });
  }

  /// @brief Removes the entries whose TTL has run out (they are also dropped lazily when looked up);
  /// returns how many.
  std::size_t purge_expired() {
    std::size_t n = 0;
    for (std::size_t si = 0; si < shard_count_; ++si) {
      shard& s = shards_[si];
      eviction_list ev;
      const std::int64_t now = now_ticks();
      exclusive_lock lock(s);
      for (std::uint32_t i = 0; i < s.slab.size(); ++i) {
        const entry& e = s.slab[i];
        if (e.value && e.expiry != 0 && now >= e.expiry) {
          s.remove(i, eviction_cause::expired, ev);
          ++n;
        }
      }
      lock.unlock();
      notify(ev);
    }
    return n;
  }

  /// @brief A snapshot of the counters, summed over the shards.
  cache_stats stats() const {
    cache_stats st;
    st.metadata_bytes = sizeof(*this) + shard_count_ * sizeof(shard);
    st.shards = shard_count_;
    for (std::size_t si = 0; si < shard_count_; ++si) {
      shard& s = shards_[si];
      exclusive_lock lock(s);
      st.hits += s.hits;
      st.misses += s.misses;
      st.puts += s.puts;
      st.evictions_size += s.c.evictions_size;
      st.evictions_expired += s.c.evictions_expired;
      st.evictions_explicit += s.c.evictions_explicit;
      st.replacements += s.replacements;
      st.rejected_oversize += s.c.rejected_oversize;
      st.loads += s.c.loads;
      st.load_waits += s.c.load_waits;
      st.load_failures += s.c.load_failures;
      st.entries += s.count;
      st.bytes += s.bytes;
      st.shard_max_entries = std::max(st.shard_max_entries, s.max_count);
      st.shard_max_bytes = std::max(st.shard_max_bytes, s.max_bytes);
      if (s.full()) ++st.full_shards;
      st.metadata_bytes += s.metadata_bytes();
    }
    const auto lookups = st.hits + st.misses;
    st.hit_ratio = lookups == 0 ? 0.0 : static_cast<double>(st.hits) / static_cast<double>(lookups);
    return st;
  }

  /// @brief The number of entries (including expired ones not yet dropped).
  std::size_t size() const {
    std::size_t n = 0;
    for (std::size_t si = 0; si < shard_count_; ++si) {
      exclusive_lock lock(shards_[si]);
      n += shards_[si].count;
    }
    return n;
  }

  /// @brief The options in use, with shards and weigher filled in.
  const options_type& options() const noexcept { return opts_; }

  /// @brief Bytes of metadata in one slot, the fixed part of the per-entry cost.
  static constexpr std::size_t slot_bytes() noexcept {
    return sizeof(entry) + sizeof(typename shard::lru_link);
  }

 private:
  void validate_and_complete() {
    const std::string where = "frugal::basic_cache: ";
    if (opts_.max_entries == 0 && opts_.max_bytes == 0)
      throw std::invalid_argument(where +
                                  "options.max_entries and options.max_bytes are both 0; set at least one");
    if (opts_.ttl < std::chrono::nanoseconds::zero())
      throw std::invalid_argument(where + "options.ttl must be >= 0");
    if (opts_.shards != 0 && !std::has_single_bit(opts_.shards))
      throw std::invalid_argument(where + "options.shards must be a power of two (or 0 for automatic), got " +
                                  std::to_string(opts_.shards));
    if (opts_.shards != 0 && opts_.max_entries != 0 && opts_.shards > opts_.max_entries)
      throw std::invalid_argument(where + "options.shards (" + std::to_string(opts_.shards) +
                                  ") must not exceed options.max_entries (" +
                                  std::to_string(opts_.max_entries) + ")");
    if (opts_.shards != 0 && opts_.max_bytes != 0 && opts_.shards > opts_.max_bytes)
      throw std::invalid_argument(where + "options.shards (" + std::to_string(opts_.shards) +
                                  ") must not exceed options.max_bytes (" + std::to_string(opts_.max_bytes) +
                                  ")");
    if (opts_.shards == 0) {
      std::size_t n = 64;
      while (n > 1 && opts_.max_entries != 0 && opts_.max_entries / n < 64) n /= 2;
      while (n > 1 && opts_.max_bytes != 0 && opts_.max_bytes / n < (std::size_t{1} << 20)) n /= 2;
      opts_.shards = n;
    }
    if (opts_.max_entries / opts_.shards >= shard::max_slots)
      throw std::invalid_argument(where +
                                  "options.max_entries must be below 2^30 per shard; raise options.shards");
    if (!opts_.weigher) {
      if constexpr (detail::has_default_weigher<V>) {
        opts_.weigher = [](const V& v) -> std::size_t { return default_weigher<V>{}(v); };
      } else if (opts_.max_bytes != 0) {
        throw std::invalid_argument(where +
                                    "options.weigher is required when options.max_bytes is set and the "
                                    "value type has no frugal::default_weigher");
      }
    }
    shard_count_ = opts_.shards;
  }

  shard& shard_for(const Key& key) const noexcept {
    // Bits 40 and up pick the shard; the index uses the low bits, so the two stay independent.
    return shards_[(detail::key_high(key) >> 40) & (shard_count_ - 1)];
  }

  static void check_ttl(std::chrono::nanoseconds ttl, const char* fn) {
    if (ttl < std::chrono::nanoseconds::zero())
      throw std::invalid_argument(std::string("frugal::basic_cache::") + fn + ": ttl must be >= 0");
  }

  std::int64_t now_ticks() const {
    return static_cast<std::int64_t>(clock_.now().time_since_epoch().count());
  }

  // Whether an entry's expiry has passed; the clock is read only for entries that have one.
  auto expired() const noexcept {
    return [this](std::int64_t expiry) { return now_ticks() >= expiry; };
  }

  std::int64_t expiry_for(std::chrono::nanoseconds ttl) const {
    const auto effective = ttl == std::chrono::nanoseconds::zero() ? opts_.ttl : ttl;
    if (effective <= std::chrono::nanoseconds::zero() || effective == std::chrono::nanoseconds::max())
      return 0;
    const auto d = std::chrono::duration_cast<typename Clock::duration>(effective).count();
    const std::int64_t now = now_ticks();
    if (d > std::numeric_limits<std::int64_t>::max() - now) return 0;
    return std::max<std::int64_t>(1, now + static_cast<std::int64_t>(d));
  }

  std::size_t weigh(const V& v) const { return opts_.weigher ? opts_.weigher(v) : sizeof(V); }

  pointer get_locked(shard& s, const Key& key) {
    pointer gone;
    exclusive_lock lock(s);
    pointer hit = s.lookup_locked(key, expired(), gone);
    lock.unlock();
    if (gone) [[unlikely]]
      notify_one(key, gone, eviction_cause::expired);
    return hit;
  }

  bool put_pointer(const Key& key, pointer value, std::size_t w, std::chrono::nanoseconds ttl) {
    check_ttl(ttl, "put");
    const std::int64_t expiry = expiry_for(ttl);
    shard& s = shard_for(key);
    eviction_list ev;
    bool stored;
    {
      write_lock lock(s);
      stored = s.store(lock, key, std::move(value), w, expiry, ev);
    }
    notify(ev);
    return stored;
  }

  // A hit returns the value. Otherwise either `other` becomes the future of a compute already running,
  // or this caller becomes the one to compute, with its promise's future registered for the others.
  pointer begin_load(shard& s, const Key& key, std::promise<pointer>& promise,
                     std::shared_future<pointer>& other) {
    pointer gone;
    exclusive_lock lock(s);
    pointer hit = s.lookup_locked(key, expired(), gone);
    if (!hit) {
      if (s.loads.begin(key, promise, other))
        ++s.c.loads;
      else
        ++s.c.load_waits;
    }
    lock.unlock();
    if (gone) notify_one(key, gone, eviction_cause::expired);
    return hit;
  }

  std::shared_future<pointer> find_flight(shard& s, const Key& key) {
    exclusive_lock lock(s);
    return s.loads.at(key);
  }

  template <class F>
  pointer run_load(shard& s, const Key& key, F& fn, std::chrono::nanoseconds ttl,
                   std::promise<pointer>& promise) {
    eviction_list ev;
    pointer result;
    try {
      result = std::make_shared<const V>(detail::run_compute(this, &key, fn));
      const std::size_t w = weigh(*result);
      const std::int64_t expiry = expiry_for(ttl);
      write_lock lock(s);
      s.store(lock, key, result, w, expiry, ev, true);
      s.loads.end(key);
    } catch (...) {
      {
        exclusive_lock lock(s);
        s.loads.end(key);
        ++s.c.load_failures;
      }
      promise.set_exception(std::current_exception());
      throw;
    }
    promise.set_value(result);
    notify(ev);
    return result;
  }

  void notify_one(const Key& key, const pointer& value, eviction_cause cause) {
    if (opts_.on_evict) opts_.on_evict(key, value, cause);
  }

  void notify(eviction_list& ev) {
    if (ev.empty() || !opts_.on_evict) return;
    ev.for_each([this](auto& e) { opts_.on_evict(e.key, e.value, e.cause); });
  }

  options_type opts_;
  Clock clock_;
  std::size_t shard_count_ = 1;
  std::unique_ptr<shard[]> shards_;
  std::mutex async_mutex_;
  std::condition_variable async_cv_;
  std::size_t async_pending_ = 0;
};

/// @brief The plain LRU cache: every put is cached and the least recently used entry goes first.
template <class V, class Clock = std::chrono::steady_clock, class Key = key128>
using lru_cache = basic_cache<V, lru_admission, Clock, Key>;

/// @brief The W-TinyLFU cache: a small LRU window in front of a segmented LRU whose entries a
/// frequency sketch admits; keeps frequent keys through scans (see tinylfu_admission).
template <class V, class Clock = std::chrono::steady_clock, class Key = key128>
using tinylfu_cache = basic_cache<V, tinylfu_admission, Clock, Key>;

/// @brief Caches keyed by key64, for small caches (see key64 for the collision risk).
template <class V, class Clock = std::chrono::steady_clock>
using lru_cache64 = lru_cache<V, Clock, key64>;
template <class V, class Clock = std::chrono::steady_clock>
using tinylfu_cache64 = tinylfu_cache<V, Clock, key64>;

FRUGAL_END_NAMESPACE
