#pragma once

#include <algorithm>
#include <atomic>
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
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/cache/tinylfu.hpp"
#include "frugal/cache/weigher.hpp"
#include "frugal/config.hpp"
#include "frugal/detail/spin.hpp"

// Whether ThreadSanitizer instruments this build (GCC defines __SANITIZE_THREAD__, Clang has the
// feature test); it does not model std::atomic_thread_fence.
#if defined(__SANITIZE_THREAD__)
#  define FRUGAL_CACHE_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define FRUGAL_CACHE_TSAN 1
#  endif
#endif
#ifndef FRUGAL_CACHE_TSAN
#  define FRUGAL_CACHE_TSAN 0
#endif

FRUGAL_BEGIN_NAMESPACE

namespace detail {

// Waits, spinning and then yielding, until flag reads false.
inline void spin_while_set(const std::atomic<bool>& flag, std::memory_order order) noexcept {
  for (unsigned spins = 0; flag.load(order); ++spins) spin_wait(spins);
}

// A shard's writers' lock. Critical sections are a few dozen instructions, so a test-and-set lock
// beats std::mutex: the release is a plain store, not a second atomic read-modify-write and call.
class spin_lock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_seq_cst)) {
      spin_while_set(locked_, std::memory_order_relaxed);
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// The number of threads at a time that read caches without their shards' locks.
inline constexpr unsigned reader_slots = 8;

// This thread's reader slot, 0 to reader_slots - 1, held from its first cache read until it exits
// and then free for another thread; reader_slots when all are taken, and the thread reads under the
// shards' locks. A slot is owned by one thread, so its stripe in each shard has a single writer.
class reader_slot {
 public:
  static unsigned mine() noexcept {
    thread_local const reader_slot slot;
    return slot.id_;
  }
  reader_slot(const reader_slot&) = delete;
  reader_slot& operator=(const reader_slot&) = delete;

 private:
  static constexpr unsigned all = (1u << reader_slots) - 1;
  static std::atomic<unsigned>& taken() noexcept {
    static std::atomic<unsigned> bits{0};
    return bits;
  }
  reader_slot() noexcept {
    unsigned bits = taken().load(std::memory_order_relaxed);
    do {
      if (bits == all) return;
      id_ = static_cast<unsigned>(std::countr_one(bits));
    } while (!taken().compare_exchange_weak(bits, bits | (1u << id_), std::memory_order_acquire));
  }
  ~reader_slot() {
    if (id_ < reader_slots) taken().fetch_and(~(1u << id_), std::memory_order_release);
  }
  unsigned id_ = reader_slots;
};

// The name of the lru_cache function ("visit", "erase_if") whose callback this thread runs, or null.
// A visit callback runs under the thread's read flag and an erase_if predicate under a shard's lock,
// which writers wait for, so a cache call from inside would wait for itself (or, on another shard, for
// a thread that waits for it): such calls throw instead.
inline thread_local const char* in_callback = nullptr;

struct callback_scope {
  explicit callback_scope(const char* what) noexcept { in_callback = what; }
  callback_scope(const callback_scope&) = delete;
  callback_scope& operator=(const callback_scope&) = delete;
  ~callback_scope() { in_callback = nullptr; }
};

// The keys whose get_or_compute fn this thread is running, innermost first: a fn that asks for a key
// it is computing (its own, or an outer one's) would wait for itself, and throws instead.
struct compute_frame {
  const void* cache;
  const void* key;
  const compute_frame* outer;
};
inline thread_local const compute_frame* computing = nullptr;

}  // namespace detail

/// @brief Why an entry left the cache, as passed to options.on_evict.
enum class eviction_cause {
  size,      ///< pushed out by the entry or byte limit
  expired,   ///< its TTL ran out
  erased,    ///< erase, erase_if or clear
  replaced,  ///< a put on the same key, or a put too large to cache
};

/// @brief Options of an lru_cache; a plain aggregate, e.g. `{.max_entries = 1'000'000, .ttl = 10min}`.
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

/// @brief A thread-safe, sharded LRU cache of inference results keyed by request hashes.
///
/// Each shard is an exact LRU (or W-TinyLFU with Admission = tinylfu_admission) behind its own lock;
/// the shard is chosen by key bits. Entries live in one slot array per shard, chained into an index
/// of 32-bit slot numbers and into the LRU list by 32-bit links, which keeps the metadata near 60
/// bytes per entry. get never allocates.
///
/// get does not take the shard's lock, in the manner of Caffeine's read buffers. Each of the first
/// eight threads to read holds a reader slot (until it exits) and owns one stripe in every shard. A
/// reader raises its stripe's flag, checks that no writer has excluded readers, looks the key up, and
/// appends the slot it found to its stripe's buffer of 15 instead of relinking the LRU list. Every
/// operation that adds, evicts or removes entries first keeps new readers out, waits for the flags to
/// drop, then replays all the buffered reads, so that evictions always see every read. A put that
/// replaces a cached value keeps readers out only while it swaps the value, and replays only its own
/// thread's reads. Reads by different threads are replayed one thread after another; each thread's
/// keep their order, and on one thread the order is exactly that of a locked LRU. A reader whose buffer is
/// full replays it under the writers' lock alone, while other threads go on reading; a reader that
/// meets a writer waits for it to leave and reads again; an expired entry, or a ninth thread, takes
/// the lock. The LRU links are kept apart from what lookups read, so replaying reads writes no line
/// that other cores' lookups need (with W-TinyLFU, an entry that changes segment also has its weight
/// word rewritten, on the entry's line). Reads of a shard by different threads thus write nothing that
/// the others read, except, for get, the value's reference count.
///
/// Values are handed out as std::shared_ptr<const V>. A reader's value then stays valid after it is
/// evicted, replaced or cleared, and even after the cache is gone, with no pin to release and no
/// handle that can dangle. put allocates the value and its control block together (make_shared), so a
/// hit only bumps a count. The price is the 16-byte pointer in each slot, and on a hot value read
/// from several cores, the count's cache line moving between them. visit(key, fn) avoids that: fn
/// reads the value in place while the reader's flag keeps it alive, and copies out what it needs.
///
/// @tparam Admission lru_admission (default) or tinylfu_admission.
/// @tparam Clock     the clock for TTLs, e.g. frugal::manual_clock in tests.
/// @tparam Key       key128 (default) or key64.
template <class V, class Admission = lru_admission, class Clock = std::chrono::steady_clock,
          class Key = key128>
class lru_cache {
  static_assert(std::is_same_v<Admission, lru_admission> || std::is_same_v<Admission, tinylfu_admission>,
                "frugal::lru_cache: Admission must be lru_admission or tinylfu_admission");
  static_assert(std::is_integral_v<typename Clock::duration::rep>,
                "frugal::lru_cache: Clock::duration must count in integers");
  static constexpr bool tinylfu = std::is_same_v<Admission, tinylfu_admission>;

 public:
  using key_type = Key;
  using value_type = V;
  using pointer = std::shared_ptr<const V>;
  using options = cache_options<Key, V>;
  using clock_type = Clock;

  /// @brief Throws std::invalid_argument naming the field when the options are unusable.
  explicit lru_cache(options opts, Clock clock = {}) : opts_(std::move(opts)), clock_(std::move(clock)) {
    validate_and_complete();
    shards_ = std::make_unique<shard[]>(shard_count_);
    for (std::size_t i = 0; i < shard_count_; ++i) init_shard(shards_[i], i);
  }
  lru_cache(const lru_cache&) = delete;
  lru_cache& operator=(const lru_cache&) = delete;
  /// @brief Waits for the computes started by get_or_compute_async, which write into the cache.
  ~lru_cache() {
    std::unique_lock lock(async_mutex_);
    async_cv_.wait(lock, [this] { return async_pending_ == 0; });
  }

  /// @brief The value under key, or null on a miss. Makes the entry the most recently used.
  pointer get(const Key& key) {
    shard& s = shard_for(key);
    pointer hit;
    if (read_fast(s, key, [&](const entry& e) { hit = e.value; })) [[likely]]
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
    static_assert(std::is_invocable_v<F&, const V&>, "frugal::lru_cache::visit: fn must take const V&");
    shard& s = shard_for(key);
    bool found = false;
    const auto call = [&](const V& v) {
      found = true;
      const detail::callback_scope scope("visit");
      std::invoke(fn, v);
    };
    if (read_fast(s, key, [&](const entry& e) { call(*e.value); })) [[likely]]
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
    if (!value) throw std::invalid_argument("frugal::lru_cache::put: value must not be null");
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
      if (detail::computing != nullptr) [[unlikely]]
        check_not_computing(key, "get_or_compute");
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
      if (detail::computing != nullptr) [[unlikely]]
        check_not_computing(key, "get_or_compute_async");
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
    exclusive_lock lock(*this, s);
    const std::uint32_t i = find(s, key);
    if (i != nil) remove(s, i, eviction_cause::erased, ev);
    lock.unlock();
    notify(ev);
    return i != nil;
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
      exclusive_lock lock(*this, s);
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
            remove(s, i, eviction_cause::erased, ev);
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
      exclusive_lock lock(*this, s);
      for (std::uint32_t i = 0; i < s.slab.size(); ++i) {
        const entry& e = s.slab[i];
        if (e.value && e.expiry != 0 && now >= e.expiry) {
          remove(s, i, eviction_cause::expired, ev);
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
      exclusive_lock lock(*this, s);
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
      if ((s.max_count != 0 && s.count >= s.max_count) || (s.max_bytes != 0 && s.bytes >= s.max_bytes))
        ++st.full_shards;
      st.metadata_bytes += s.slab.capacity() * sizeof(entry) + s.links.capacity() * sizeof(lru_link) +
                           s.buckets.capacity() * sizeof(std::uint32_t);
      if constexpr (tinylfu) st.metadata_bytes += s.sketch.bytes();
    }
    const auto lookups = st.hits + st.misses;
    st.hit_ratio = lookups == 0 ? 0.0 : static_cast<double>(st.hits) / static_cast<double>(lookups);
    return st;
  }

  /// @brief The number of entries (including expired ones not yet dropped).
  std::size_t size() const {
    std::size_t n = 0;
    for (std::size_t si = 0; si < shard_count_; ++si) {
      exclusive_lock lock(*this, shards_[si]);
      n += shards_[si].count;
    }
    return n;
  }

  /// @brief The options in use, with shards and weigher filled in.
  const options& config() const noexcept { return opts_; }

  /// @brief Bytes of metadata in one slot, the fixed part of the per-entry cost.
  static constexpr std::size_t slot_bytes() noexcept { return sizeof(entry) + sizeof(lru_link); }

 private:
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t weight_bits = 30;
  static constexpr std::size_t max_weight = (std::size_t{1} << weight_bits) - 1;
  static constexpr std::uint32_t max_slots_per_shard = std::uint32_t{1} << 30;
  enum : std::uint32_t { window = 0, probation = 1, protected_ = 2 };

  // What a lookup reads. The LRU links live apart, in `lru_link`, so that replaying reads, which relinks
  // the hot entries all the time, writes no cache line that another core's lookups read.
  struct entry {
    Key key{};
    pointer value;                 // null when the slot is free
    std::int64_t expiry = 0;       // Clock ticks since its epoch; 0 for never
    std::uint32_t chain = nil;     // next slot in the same index bucket
    std::uint32_t weight_seg = 0;  // weight in the low 30 bits, segment in the top 2

    std::size_t weight() const noexcept { return weight_seg & max_weight; }
    std::uint32_t segment() const noexcept { return weight_seg >> weight_bits; }
    void set(std::size_t w, std::uint32_t seg) noexcept {
      weight_seg = static_cast<std::uint32_t>(w) | (seg << weight_bits);
    }
  };

  struct lru_link {
    std::uint32_t prev = nil;  // LRU list
    std::uint32_t next = nil;  // LRU list, or the free list
  };

  struct segment_list {
    std::uint32_t head = nil;
    std::uint32_t tail = nil;
    std::size_t cost = 0;
  };

  // The counters that replays and replacing puts change are kept apart, on the writers' first line.
  struct counters {
    std::uint64_t evictions_size = 0, evictions_expired = 0, evictions_explicit = 0, rejected_oversize = 0,
                  loads = 0, load_waits = 0, load_failures = 0;
  };

  struct no_sketch {
    std::size_t bytes() const noexcept { return 0; }
  };
  using sketch_type = std::conditional_t<tinylfu, detail::frequency_sketch, no_sketch>;

  static constexpr std::uint32_t read_buffer_size = 15;
  // Reads handed to a shard's owner wait in its pending buffer: room for three stripes' worth.
  static constexpr std::uint32_t pending_size = 3 * read_buffer_size;
  // A buffered put of a key already cached carries this bit on its slot: it moves the entry to the
  // front of its segment, as the put would have, and counts no hit. Slots are below 2^30.
  static constexpr std::uint32_t put_mark = std::uint32_t{1} << 31;
  static constexpr std::uint8_t no_owner = 0xff;

  // A buffered read: the slot found (nil for a miss) and, for the admission sketch, the key's low bits.
  struct keyed_record {
    std::uint64_t key_low;
    std::uint32_t slot;
  };
  struct slot_record {
    std::uint32_t slot;
  };
  using read_record = std::conditional_t<tinylfu, keyed_record, slot_record>;

  // One reader slot's buffered reads of one shard, on cache lines of its own: only the thread that
  // holds the slot appends, and only a holder of the writers' lock empties it: a writer once `reading`
  // is false, or the slot's own thread, between its reads.
  // For plain LRU a record is the 4-byte slot, and the two flags, count, `joined` and 15 records fill
  // one 64-byte line, so that a writer replaying another core's reads moves one line between the cores.
  // A stripe is `joined` by its thread's first lock-free read of the shard, under the writers' lock;
  // writers raise `excluded` only in joined stripes, so that the stripes of slots no thread has used
  // are never written and never pass between the cores.
  struct alignas(64) read_stripe {
    std::atomic<bool> reading{false};   // raised by the owner while it looks up
    std::atomic<bool> excluded{false};  // raised by a writer while entries or the index change
    std::atomic<std::uint8_t> count{0};
    bool joined = false;  // set by the owner under the writers' lock; read by writers under it
    read_record records[read_buffer_size];
  };
  static_assert(tinylfu || sizeof(read_stripe) == 64, "a plain LRU read stripe must fill one cache line");

  // Two locks guard a shard. `mutex` orders the writers: whoever changes the LRU order, counters or
  // entries holds it. The stripes' `excluded` flags keep lookups out: a writer about to change entries
  // or the index raises the flag in every stripe and waits for their `reading` flags to drop. Each
  // stripe's two flags are a Dekker pair (a reader raises `reading`, then looks at `excluded`; a writer
  // raises `excluded`, then looks at `reading`; sequentially consistent), so that one always sees the
  // other. Both flags sit on the reader's own line, which it writes anyway: a lookup reads no line
  // that a put writes, except for the stripe the put must hand back and forth with it.
  // Replaying a thread's own reads when its buffer fills changes only the LRU order, which lookups
  // never read, so it takes `mutex` alone and leaves the other cores' lookups running.
  //
  // The first cache line holds the views of the slab and index that a lookup without the lock reads;
  // they change only while readers are kept out, when the slab or the index grows. Writers' state,
  // `mutex` and the fields every put changes first, starts on the next line, so that the readers'
  // line stays shared by all cores.
  struct alignas(64) shard {
    std::uint32_t bucket_mask = 0;
    const entry* slab_at = nullptr;
    const std::uint32_t* buckets_at = nullptr;

    // What replaying reads and replacing a value of the same weight change, for plain LRU all on the
    // writers' first line: either writes one line of the shard's own besides the LRU links.
    alignas(64) detail::spin_lock mutex;
    std::uint8_t owner = no_owner;  // the reader slot that relinks for the others (see hand_off)
    std::uint32_t free_head = nil;
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::uint64_t puts = 0;
    std::uint64_t replacements = 0;
    std::size_t count = 0;
    segment_list seg[3];  // LRU uses seg[0], which ends the first line
    // And the second line, with what adding and evicting change besides.
    std::size_t bytes = 0;
    counters c;
    std::size_t max_count = 0;
    std::size_t max_bytes = 0;
    std::size_t window_max = 0;
    std::size_t main_max = 0;
    std::size_t protected_max = 0;
    std::size_t index = 0;  // this shard's place in the cache, which spreads ownership over the slots
    std::vector<entry> slab;
    std::vector<lru_link> links;  // parallel to slab
    std::vector<std::uint32_t> buckets;
    std::unordered_map<Key, std::shared_future<pointer>> flights;
    [[no_unique_address]] sketch_type sketch;
    // Buffered reads that other threads handed to the owner, oldest first; under `mutex`.
    alignas(64) read_record pending[pending_size]{};
    std::uint32_t pending_n = 0;
    read_stripe stripes[detail::reader_slots];
  };

  // After the slab or the index moves; under the lock with no reader inside.
  static void refresh_views(shard& s) noexcept {
    s.slab_at = s.slab.data();
    s.buckets_at = s.buckets.data();
    s.bucket_mask = static_cast<std::uint32_t>(s.buckets.size() - 1);
  }

  static void check_not_in_visit() {
    if (detail::in_callback != nullptr) [[unlikely]]
      throw std::logic_error(std::string("frugal::lru_cache: called from inside a function passed to ") +
                             detail::in_callback +
                             ", which runs while the cache holds a shard; copy out what you need and "
                             "call the cache after it returns");
  }

  // Throws if this thread is inside the fn computing key (directly or through other keys' fns).
  void check_not_computing(const Key& key, const char* what) const {
    for (const detail::compute_frame* f = detail::computing; f != nullptr; f = f->outer) {
      if (f->cache == this && *static_cast<const Key*>(f->key) == key)
        throw std::logic_error(std::string("frugal::lru_cache::") + what +
                               ": fn asked for the key it is computing, which would wait for itself; "
                               "compute the value without the cache");
    }
  }

  // Raises every stripe's `excluded` and waits until no reader is inside; the caller holds the
  // writers' lock. The flags are stored plainly and ordered before the loads of `reading` by one
  // sequentially consistent fence (one barrier, not one per stripe). ThreadSanitizer does not model
  // fences, so under it each store is sequentially consistent instead: the same ordering, slower.
  // Only joined stripes can have a reader inside: a thread joins under the writers' lock, before its
  // first lock-free read of the shard.
  static void exclude_readers(shard& s) noexcept {
#if FRUGAL_CACHE_TSAN
    for (read_stripe& st : s.stripes) {
      if (st.joined) st.excluded.store(true, std::memory_order_seq_cst);
    }
#else
    for (read_stripe& st : s.stripes) {
      if (st.joined) st.excluded.store(true, std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    for (read_stripe& st : s.stripes) {
      if (st.joined) detail::spin_while_set(st.reading, std::memory_order_acquire);
    }
  }

  static void admit_readers(shard& s) noexcept {
    for (read_stripe& st : s.stripes) {
      if (st.joined) st.excluded.store(false, std::memory_order_release);
    }
  }

  // This thread's first lock-free read of s: waits for any writer to finish, after which every
  // writer sees the stripe joined and keeps its reads out.
#if defined(__GNUC__)
  [[gnu::noinline, gnu::cold]]
#endif
  static void
  join(shard& s, read_stripe& st) noexcept {
    s.mutex.lock();
    st.joined = true;
    // The owner is the joined slot at (shard index mod joined slots), so that two threads that read
    // all shards own half of them each.
    unsigned joined = 0;
    for (const read_stripe& j : s.stripes) joined += j.joined ? 1 : 0;
    unsigned k = static_cast<unsigned>(s.index % joined);
    for (unsigned slot = 0; slot < detail::reader_slots; ++slot) {
      if (s.stripes[slot].joined && k-- == 0) {
        s.owner = static_cast<std::uint8_t>(slot);
        break;
      }
    }
    s.mutex.unlock();
  }

  // Holds the writers' lock of a shard, and keeps its readers out only between keep_readers_out and
  // let_readers_in (or unlock, or the end of its life): a put that replaces a value keeps them out for
  // the swap alone.
  class write_lock {
   public:
    explicit write_lock(shard& s) : s_(&s) {
      check_not_in_visit();
      s_->mutex.lock();
    }
    write_lock(const write_lock&) = delete;
    write_lock& operator=(const write_lock&) = delete;
    ~write_lock() {
      if (s_ != nullptr) unlock();
    }
    void keep_readers_out() noexcept {
      exclude_readers(*s_);
      out_ = true;
    }
    void let_readers_in() noexcept {
      admit_readers(*s_);
      out_ = false;
    }
    void unlock() noexcept {
      if (out_) admit_readers(*s_);
      s_->mutex.unlock();
      s_ = nullptr;
    }

   private:
    shard* s_;
    bool out_ = false;
  };

  // Holds a shard alone: its writers' lock taken, no reader inside, every buffered read replayed.
  class exclusive_lock {
   public:
    exclusive_lock(const lru_cache& cache, shard& s) : lock_(s) {
      lock_.keep_readers_out();
      cache.replay_reads(s);
    }
    void unlock() noexcept { lock_.unlock(); }

   private:
    write_lock lock_;
  };

  enum class unlocked_read {
    done,         // hit or miss, recorded
    buffer_full,  // this thread's buffer must be replayed first
    excluded,     // a writer holds the shard
    take_lock,    // the entry has expired, or this thread has no reader slot
  };

  // The read without the lock; on_hit(entry) is called on a hit while the read flag holds the entry.
  template <class OnHit>
  unlocked_read read_unlocked(shard& s, const Key& key, OnHit&& on_hit) const {
    check_not_in_visit();
    const unsigned slot = detail::reader_slot::mine();
    if (slot >= detail::reader_slots) [[unlikely]]
      return unlocked_read::take_lock;
    read_stripe& st = s.stripes[slot];
    if (!st.joined) [[unlikely]]
      join(s, st);
    st.reading.store(true, std::memory_order_seq_cst);
    struct lower {
      read_stripe& st;
      ~lower() { st.reading.store(false, std::memory_order_release); }
    } flag{st};
    // Once `excluded` is seen down, no writer is past its wait for readers, and none can get past it
    // before this one lowers its flag.
    if (st.excluded.load(std::memory_order_seq_cst)) [[unlikely]]
      return unlocked_read::excluded;
    const std::uint32_t at = st.count.load(std::memory_order_relaxed);
    if (at >= read_buffer_size) [[unlikely]]
      return unlocked_read::buffer_full;
    const std::uint32_t i = find(s, key);
    const entry* e = i == nil ? nullptr : &s.slab_at[i];
    if (e != nullptr && e->expiry != 0 && now_ticks() >= e->expiry) [[unlikely]]
      return unlocked_read::take_lock;
    push_record(st, at, detail::key_low(key), i);
    if (e != nullptr) on_hit(*e);
    return unlocked_read::done;
  }

  // read_unlocked, again after replaying this thread's full buffer or after a writer leaves the
  // shard; false when the caller must take the lock. A reader that meets a writer waits for it rather
  // than take the lock itself: on a hot shard, readers that turned writers would keep each other out.
  template <class OnHit>
  bool read_fast(shard& s, const Key& key, OnHit&& on_hit) const {
    for (int attempt = 0; attempt < 4; ++attempt) {
      switch (read_unlocked(s, key, on_hit)) {
        case unlocked_read::done:
          return true;
        case unlocked_read::buffer_full:
          replay_mine(s);
          break;
        case unlocked_read::excluded:
          detail::spin_while_set(s.stripes[detail::reader_slot::mine()].excluded, std::memory_order_relaxed);
          break;
        case unlocked_read::take_lock:
          return false;
      }
    }
    return false;
  }

  // Empties this thread's full buffer of s under the writers' lock alone: this changes only the LRU
  // order and counters, which lookups never read, so other threads' lookups go on meanwhile.
  // Called with this thread's flag down, so nothing appends to the stripe.
  void replay_mine(shard& s) const {
    s.mutex.lock();
    hand_off(s, detail::reader_slot::mine());
    s.mutex.unlock();
  }

  // Empties a stripe of this thread's, under the writers' lock. Relinking the LRU list writes the
  // entries' links and the list's head, which every thread's reads of a hot entry change: if two
  // threads relinked one shard in turn, those lines would pass between their cores on every replay.
  // So one joined slot per shard, its owner, relinks for all: the others copy their records into the
  // shard's pending buffer, one line or two, and the owner replays them before its own, as every
  // replay of all the buffers does. Pending records are older than any record still in a stripe of
  // the same thread, so replaying them first keeps each thread's order exact. When the buffer has no
  // room (an owner that reads this shard seldom, or has exited), the thread replays it all itself.
  void hand_off(shard& s, unsigned slot) const {
    read_stripe& st = s.stripes[slot];
    const std::uint32_t n = st.count.load(std::memory_order_relaxed);
    if (slot != s.owner && s.pending_n + n <= pending_size) {
      std::copy_n(st.records, n, s.pending + s.pending_n);
      s.pending_n += n;
      st.count.store(0, std::memory_order_relaxed);
      return;
    }
    replay_pending(s);
    replay_stripe(s, st);
  }

  pointer get_locked(shard& s, const Key& key) {
    pointer expired;
    exclusive_lock lock(*this, s);
    pointer hit = lookup_locked(s, key, expired);
    lock.unlock();
    if (expired) [[unlikely]]
      notify_one(key, expired, eviction_cause::expired);
    return hit;
  }

  // Applies the buffered reads, each reader's in its own order, as if each had taken the lock when it
  // ran. Reads by different threads since the shard's last locked operation are applied one thread
  // after another: they overlapped in time, as far as the cache can tell, so any order is one the
  // threads could have run in.
  // The pending records come first: each is older than anything its thread has in its stripe.
  void replay_reads(shard& s) const {
    replay_pending(s);
    for (read_stripe& st : s.stripes) replay_stripe(s, st);
  }

  void replay_pending(shard& s) const {
    for (std::uint32_t j = 0; j < s.pending_n; ++j) apply(s, s.pending[j]);
    s.pending_n = 0;
  }

  void replay_stripe(shard& s, read_stripe& st) const {
    const std::uint32_t n = st.count.load(std::memory_order_relaxed);
    for (std::uint32_t j = 0; j < n; ++j) apply(s, st.records[j]);
    if (n != 0) st.count.store(0, std::memory_order_relaxed);
  }

  void apply(shard& s, const read_record& r) const {
    if (r.slot != nil && (r.slot & put_mark) != 0) {
      const std::uint32_t i = r.slot & ~put_mark;
      move_front(s, i, s.slab[i].segment());
      return;
    }
    if constexpr (tinylfu) s.sketch.increment(r.key_low);
    if (r.slot == nil) {
      ++s.misses;
    } else {
      ++s.hits;
      touch(s, r.slot);
    }
  }

  // A replacing put's move to the front of its segment, buffered behind this thread's reads so that
  // its order stays exact without replaying them, and relinked by whoever replays them. A thread
  // without a joined stripe has no buffered reads, and relinks at once.
  void record_put(shard& s, std::uint32_t i) const {
    const unsigned slot = detail::reader_slot::mine();
    if (slot >= detail::reader_slots || !s.stripes[slot].joined) {
      move_front(s, i, s.slab[i].segment());
      return;
    }
    read_stripe& st = s.stripes[slot];
    if (st.count.load(std::memory_order_relaxed) >= read_buffer_size) hand_off(s, slot);
    push_record(st, st.count.load(std::memory_order_relaxed), 0, i | put_mark);
  }

  // Writes a record at position `at` of a stripe and counts it; only the stripe's own thread appends.
  static void push_record(read_stripe& st, std::uint32_t at, [[maybe_unused]] std::uint64_t key_low,
                          std::uint32_t slot) noexcept {
    if constexpr (tinylfu) {
      st.records[at] = read_record{key_low, slot};
    } else {
      st.records[at] = read_record{slot};
    }
    st.count.store(static_cast<std::uint8_t>(at + 1), std::memory_order_relaxed);
  }

  struct evicted {
    Key key{};
    pointer value;
    eviction_cause cause{};
  };

  // Evicted values are released, and the callback called, after the lock is dropped. Most
  // operations evict at most two entries, which fit without allocating.
  class eviction_list {
   public:
    void push(const Key& k, pointer v, eviction_cause c) {
      if (n_ < 2) {
        inline_[n_++] = evicted{k, std::move(v), c};
      } else {
        more_.push_back(evicted{k, std::move(v), c});
      }
    }
    template <class F>
    void for_each(F&& f) {
      for (std::size_t i = 0; i < n_; ++i) f(inline_[i]);
      for (auto& e : more_) f(e);
    }
    bool empty() const noexcept { return n_ == 0; }

   private:
    evicted inline_[2];
    std::size_t n_ = 0;
    std::vector<evicted> more_;
  };

  void validate_and_complete() {
    const std::string where = "frugal::lru_cache: ";
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
    if (opts_.max_entries / opts_.shards >= max_slots_per_shard)
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

  void init_shard(shard& s, std::size_t index) {
    // Limits are split evenly; the first shards take the remainder.
    const auto share = [&](std::size_t total) {
      return total / shard_count_ + (index < total % shard_count_ ? 1 : 0);
    };
    s.index = index;
    s.max_count = share(opts_.max_entries);
    s.max_bytes = share(opts_.max_bytes);
    s.buckets.assign(s.max_count != 0 ? std::bit_ceil(s.max_count + 1) : 16, nil);
    refresh_views(s);
    if constexpr (tinylfu) {
      const std::size_t capacity = s.max_count != 0 ? s.max_count : s.max_bytes;
      s.window_max = std::max<std::size_t>(1, capacity * Admission::window_percent / 100);
      s.main_max = capacity > s.window_max ? capacity - s.window_max : 0;
      s.protected_max = s.main_max * Admission::protected_percent / 100;
      s.sketch.resize(s.max_count != 0 ? s.max_count : 1024);
    }
  }

  shard& shard_for(const Key& key) const noexcept {
    // Bits 40 and up pick the shard; the index uses the low bits, so the two stay independent.
    return shards_[(detail::key_high(key) >> 40) & (shard_count_ - 1)];
  }

  static void check_ttl(std::chrono::nanoseconds ttl, const char* fn) {
    if (ttl < std::chrono::nanoseconds::zero())
      throw std::invalid_argument(std::string("frugal::lru_cache::") + fn + ": ttl must be >= 0");
  }

  std::int64_t now_ticks() const {
    return static_cast<std::int64_t>(clock_.now().time_since_epoch().count());
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

  std::size_t cost_of(const shard& s, std::size_t weight) const noexcept {
    return s.max_count != 0 ? 1 : weight;
  }

  static std::size_t bucket_of(const shard& s, const Key& key) noexcept {
    return static_cast<std::size_t>(detail::key_low(key)) & s.bucket_mask;
  }

  static std::uint32_t find(const shard& s, const Key& key) noexcept {
    std::uint32_t i = s.buckets_at[bucket_of(s, key)];
    while (i != nil && !(s.slab_at[i].key == key)) i = s.slab_at[i].chain;
    return i;
  }

  void link_front(shard& s, std::uint32_t i, std::uint32_t seg) const noexcept {
    entry& e = s.slab[i];
    segment_list& l = s.seg[seg];
    if (e.segment() != seg) e.set(e.weight(), seg);
    lru_link& n = s.links[i];
    n.prev = nil;
    n.next = l.head;
    if (l.head != nil) s.links[l.head].prev = i;
    l.head = i;
    if (l.tail == nil) l.tail = i;
    l.cost += cost_of(s, e.weight());
  }

  void unlink(shard& s, std::uint32_t i) const noexcept {
    const entry& e = s.slab[i];
    const lru_link n = s.links[i];
    segment_list& l = s.seg[e.segment()];
    if (n.prev != nil)
      s.links[n.prev].next = n.next;
    else
      l.head = n.next;
    if (n.next != nil)
      s.links[n.next].prev = n.prev;
    else
      l.tail = n.prev;
    l.cost -= cost_of(s, e.weight());
  }

  void move_front(shard& s, std::uint32_t i, std::uint32_t seg) const noexcept {
    if (s.seg[seg].head == i && s.slab[i].segment() == seg) return;
    unlink(s, i);
    link_front(s, i, seg);
  }

  std::uint32_t allocate_slot(shard& s) {
    if (s.free_head != nil) {
      const std::uint32_t i = s.free_head;
      s.free_head = s.links[i].next;
      return i;
    }
    if (s.slab.size() >= max_slots_per_shard)
      throw std::length_error("frugal::lru_cache: more than 2^30 entries in one shard; raise options.shards");
    if (s.slab.size() == s.slab.capacity()) {
      std::size_t want = std::max<std::size_t>(16, 2 * s.slab.capacity());
      // One slot above the limit: an insert is made before the eviction it causes.
      if (s.max_count != 0) want = std::min(want, s.max_count + 1);
      s.slab.reserve(want);
      s.links.reserve(want);
      refresh_views(s);
    }
    s.slab.emplace_back();
    s.links.emplace_back();
    return static_cast<std::uint32_t>(s.slab.size() - 1);
  }

  void grow_index(shard& s) {
    std::vector<std::uint32_t> buckets(2 * s.buckets.size(), nil);
    s.buckets.swap(buckets);
    refresh_views(s);
    for (std::uint32_t i = 0; i < s.slab.size(); ++i) {
      entry& e = s.slab[i];
      if (!e.value) continue;
      std::uint32_t& head = s.buckets[bucket_of(s, e.key)];
      e.chain = head;
      head = i;
    }
  }

  void remove(shard& s, std::uint32_t i, eviction_cause cause, eviction_list& ev) {
    const Key key = s.slab[i].key;
    ev.push(key, detach(s, i, cause), cause);
  }

  // Unlinks slot i and frees it; returns its value.
  pointer detach(shard& s, std::uint32_t i, eviction_cause cause) noexcept {
    entry& e = s.slab[i];
    std::uint32_t* link = &s.buckets[bucket_of(s, e.key)];
    while (*link != i) link = &s.slab[*link].chain;
    *link = e.chain;
    unlink(s, i);
    --s.count;
    s.bytes -= e.weight();
    switch (cause) {
      case eviction_cause::size:
        ++s.c.evictions_size;
        break;
      case eviction_cause::expired:
        ++s.c.evictions_expired;
        break;
      case eviction_cause::erased:
        ++s.c.evictions_explicit;
        break;
      case eviction_cause::replaced:
        ++s.replacements;
        break;
    }
    pointer value = std::move(e.value);
    e.expiry = 0;
    e.chain = nil;
    s.links[i] = lru_link{nil, s.free_head};
    s.free_head = i;
    return value;
  }

  void record_access(shard& s, const Key& key) noexcept {
    if constexpr (tinylfu) s.sketch.increment(detail::key_low(key));
  }

  void touch(shard& s, std::uint32_t i) const noexcept {
    if constexpr (tinylfu) {
      switch (s.slab[i].segment()) {
        case window:
          move_front(s, i, window);
          break;
        case probation:
          move_front(s, i, protected_);
          while (s.seg[protected_].cost > s.protected_max && s.seg[protected_].tail != i)
            move_front(s, s.seg[protected_].tail, probation);
          break;
        default:
          move_front(s, i, protected_);
          break;
      }
    } else {
      move_front(s, i, window);
    }
  }

  // On a hit, the value. An expired entry is dropped and its value moved to `expired`, for the
  // callback to see once the lock is released.
  pointer lookup_locked(shard& s, const Key& key, pointer& expired) {
    record_access(s, key);
    const std::uint32_t i = find(s, key);
    if (i == nil) {
      ++s.misses;
      return {};
    }
    entry& e = s.slab[i];
    if (e.expiry != 0 && now_ticks() >= e.expiry) [[unlikely]] {
      expired = detach(s, i, eviction_cause::expired);
      ++s.misses;
      return {};
    }
    touch(s, i);
    ++s.hits;
    return e.value;
  }

  bool over_limit(const shard& s) const noexcept {
    return (s.max_count != 0 && s.count > s.max_count) || (s.max_bytes != 0 && s.bytes > s.max_bytes);
  }

  // The next entry to go when over a limit; never `keep`, the entry just written.
  std::uint32_t pick_victim(const shard& s, std::uint32_t keep) const noexcept {
    const std::uint32_t order[3] = {probation, protected_, window};
    for (std::uint32_t seg : order) {
      std::uint32_t t = s.seg[seg].tail;
      if (t == keep) t = s.links[t].prev;
      if (t != nil) return t;
    }
    return nil;
  }

  void make_room(shard& s, std::uint32_t keep, eviction_list& ev) {
    if constexpr (tinylfu) {
      // Entries leaving the window join probation; once the main space is full, the candidate must be
      // more frequent than probation's LRU end to stay.
      while (s.seg[window].cost > s.window_max && s.seg[window].tail != keep) {
        const std::uint32_t candidate = s.seg[window].tail;
        move_front(s, candidate, probation);
        if (s.seg[probation].cost + s.seg[protected_].cost <= s.main_max) continue;
        std::uint32_t victim = s.seg[probation].tail;
        if (victim == candidate || victim == keep) victim = s.seg[protected_].tail;
        if (victim == nil || victim == keep) continue;
        const unsigned fc = s.sketch.estimate(detail::key_low(s.slab[candidate].key));
        const unsigned fv = s.sketch.estimate(detail::key_low(s.slab[victim].key));
        remove(s, fc > fv ? victim : candidate, eviction_cause::size, ev);
      }
    }
    while (over_limit(s)) {
      const std::uint32_t victim = pick_victim(s, keep);
      if (victim == nil) break;
      remove(s, victim, eviction_cause::size, ev);
    }
  }

  // `after_miss`: the lookup that missed has already counted this access in the sketch.
  bool store_locked(shard& s, const Key& key, pointer value, std::size_t w, std::int64_t expiry,
                    eviction_list& ev, bool after_miss = false) {
    std::uint32_t i = find(s, key);
    if (w > max_weight || (s.max_bytes != 0 && w > s.max_bytes)) {
      // The old value must not outlive the newer one the caller meant to store.
      if (i != nil) remove(s, i, eviction_cause::replaced, ev);
      ++s.c.rejected_oversize;
      return false;
    }
    ++s.puts;
    if (i != nil) {
      entry& e = s.slab[i];
      const std::uint32_t seg = e.segment();
      unlink(s, i);
      ++s.replacements;
      ev.push(e.key, std::move(e.value), eviction_cause::replaced);
      s.bytes = s.bytes - e.weight() + w;
      e.value = std::move(value);
      e.expiry = expiry;
      e.set(w, seg);
      link_front(s, i, seg);
    } else {
      if (!after_miss) record_access(s, key);
      i = allocate_slot(s);
      entry& e = s.slab[i];
      e.key = key;
      e.value = std::move(value);
      e.expiry = expiry;
      e.set(w, window);
      std::uint32_t& head = s.buckets[bucket_of(s, key)];
      e.chain = head;
      head = i;
      link_front(s, i, window);
      ++s.count;
      s.bytes += w;
      if (s.count > s.buckets.size()) grow_index(s);
      if constexpr (tinylfu) {
        if (s.max_count == 0 && s.count > s.sketch.width()) s.sketch.resize(2 * s.sketch.width());
      }
    }
    make_room(s, i, ev);
    return true;
  }

  // Whether make_room would evict or move entries: the limits, or W-TinyLFU's window, overrun.
  bool needs_room(const shard& s) const noexcept {
    if constexpr (tinylfu) {
      if (s.seg[window].cost > s.window_max) return true;
    }
    return over_limit(s);
  }

  // A put of a key already cached, with a value that fits, changes that entry alone: readers are kept
  // out only while its value and expiry are swapped (what lookups read). Its move to the front of the
  // LRU list is buffered behind this thread's reads (record_put), like a read, so that it neither
  // replays them nor relinks lines that the shard's owner relinks. The other threads' buffered reads
  // stay buffered, to be replayed when their own buffers fill or before anything is evicted, so that
  // the put moves no line of theirs. Only if the new weight overruns a limit are all reads replayed
  // and entries evicted, with readers out.
  void replace_locked(shard& s, write_lock& lock, std::uint32_t i, pointer value, std::size_t w,
                      std::int64_t expiry, eviction_list& ev) {
    entry& e = s.slab[i];
    const std::size_t old_w = e.weight();
    pointer old;
    lock.keep_readers_out();
    old = std::exchange(e.value, std::move(value));
    e.expiry = expiry;
    lock.let_readers_in();
    ++s.puts;
    ++s.replacements;
    ev.push(e.key, std::move(old), eviction_cause::replaced);
    if (w != old_w) {
      const std::uint32_t seg = e.segment();
      s.bytes = s.bytes - old_w + w;
      s.seg[seg].cost = s.seg[seg].cost - cost_of(s, old_w) + cost_of(s, w);
      e.set(w, seg);
    }
    record_put(s, i);
    if (needs_room(s)) [[unlikely]] {
      lock.keep_readers_out();
      replay_reads(s);
      make_room(s, i, ev);
    }
  }

  bool put_pointer(const Key& key, pointer value, std::size_t w, std::chrono::nanoseconds ttl) {
    check_ttl(ttl, "put");
    const std::int64_t expiry = expiry_for(ttl);
    shard& s = shard_for(key);
    eviction_list ev;
    bool stored = true;
    {
      write_lock lock(s);
      // Under the writers' lock the index cannot change, so the key can be found with readers in.
      const std::uint32_t i = find(s, key);
      const bool fits = w <= max_weight && (s.max_bytes == 0 || w <= s.max_bytes);
      if (i != nil && fits) {
        replace_locked(s, lock, i, std::move(value), w, expiry, ev);
      } else {
        lock.keep_readers_out();
        replay_reads(s);
        stored = store_locked(s, key, std::move(value), w, expiry, ev);
      }
    }
    notify(ev);
    return stored;
  }

  // A hit returns the value. Otherwise either `other` becomes the future of a compute already running,
  // or this caller becomes the one to compute, with its promise's future registered for the others.
  pointer begin_load(shard& s, const Key& key, std::promise<pointer>& promise,
                     std::shared_future<pointer>& other) {
    pointer expired;
    exclusive_lock lock(*this, s);
    pointer hit = lookup_locked(s, key, expired);
    if (!hit) {
      auto it = s.flights.find(key);
      if (it != s.flights.end()) {
        other = it->second;
        ++s.c.load_waits;
      } else {
        s.flights.emplace(key, promise.get_future().share());
        ++s.c.loads;
      }
    }
    lock.unlock();
    if (expired) notify_one(key, expired, eviction_cause::expired);
    return hit;
  }

  std::shared_future<pointer> find_flight(shard& s, const Key& key) {
    exclusive_lock lock(*this, s);
    return s.flights.at(key);
  }

  template <class F>
  pointer run_load(shard& s, const Key& key, F& fn, std::chrono::nanoseconds ttl,
                   std::promise<pointer>& promise) {
    eviction_list ev;
    pointer result;
    try {
      {
        const detail::compute_frame frame{this, &key, detail::computing};
        detail::computing = &frame;
        struct pop {
          const detail::compute_frame* outer;
          ~pop() { detail::computing = outer; }
        } restore{frame.outer};
        result = std::make_shared<const V>(std::invoke(fn));
      }
      const std::size_t w = weigh(*result);
      const std::int64_t expiry = expiry_for(ttl);
      exclusive_lock lock(*this, s);
      store_locked(s, key, result, w, expiry, ev, true);
      s.flights.erase(key);
    } catch (...) {
      {
        exclusive_lock lock(*this, s);
        s.flights.erase(key);
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
    ev.for_each([this](evicted& e) { opts_.on_evict(e.key, e.value, e.cause); });
  }

  options opts_;
  Clock clock_;
  std::size_t shard_count_ = 1;
  std::unique_ptr<shard[]> shards_;
  std::mutex async_mutex_;
  std::condition_variable async_cv_;
  std::size_t async_pending_ = 0;
};

/// @brief An lru_cache keyed by key64, for small caches (see key64 for the collision risk).
template <class V, class Admission = lru_admission, class Clock = std::chrono::steady_clock>
using lru_cache64 = lru_cache<V, Admission, Clock, key64>;

FRUGAL_END_NAMESPACE
