#pragma once
/// @file
/// @brief One shard of basic_cache: the slot slab, the index of 32-bit slot numbers, the LRU links and
/// segments (one for LRU; window, probation and protected for W-TinyLFU), the store path with its one
/// way of replacing a value, and the shard's side of the read protocol (detail/read_buffer.hpp).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/cache/detail/flights.hpp"
#include "frugal/cache/detail/read_buffer.hpp"
#include "frugal/cache/eviction.hpp"
#include "frugal/cache/key.hpp"
#include "frugal/cache/tinylfu.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

// The name of the cache function ("visit", "erase_if") whose callback this thread runs, or null.
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

inline void check_not_in_callback() {
  if (in_callback != nullptr) [[unlikely]]
    throw std::logic_error(std::string("frugal::basic_cache: called from inside a function passed to ") +
                           in_callback +
                           ", which runs while the cache holds a shard; copy out what you need and "
                           "call the cache after it returns");
}

template <class Key, class Pointer>
struct evicted {
  Key key{};
  Pointer value;
  eviction_cause cause{};
};

// Evicted values are released, and the callback called, after the lock is dropped. Most operations
// evict at most two entries, which fit without allocating.
template <class Key, class Pointer>
class eviction_list {
 public:
  void push(const Key& k, Pointer v, eviction_cause c) {
    if (n_ < 2) {
      inline_[n_++] = evicted<Key, Pointer>{k, std::move(v), c};
    } else {
      more_.push_back(evicted<Key, Pointer>{k, std::move(v), c});
    }
  }
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < n_; ++i) f(inline_[i]);
    for (auto& e : more_) f(e);
  }
  bool empty() const noexcept { return n_ == 0; }

 private:
  evicted<Key, Pointer> inline_[2];
  std::size_t n_ = 0;
  std::vector<evicted<Key, Pointer>> more_;
};

// The counters that replays and replacing puts change are kept apart, on the writers' first line.
struct shard_counters {
  std::uint64_t evictions_size = 0, evictions_expired = 0, evictions_explicit = 0, rejected_oversize = 0,
                loads = 0, load_waits = 0, load_failures = 0;
};

// Entries live in one slot array per shard, chained into an index of 32-bit slot numbers and into the
// LRU list by 32-bit links, which keeps the metadata near 60 bytes per entry.
//
// The first cache line holds the views of the slab and index that a lookup without the lock reads;
// they change only while readers are kept out, when the slab or the index grows. Writers' state,
// `mutex` and the fields every put changes first, starts on the next line, so that the readers' line
// stays shared by all cores.
template <class Key, class V, class Admission>
struct alignas(64) shard {
  static constexpr bool tinylfu = std::is_same_v<Admission, tinylfu_admission>;
  using pointer = std::shared_ptr<const V>;
  using evictions = eviction_list<Key, pointer>;

  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t weight_bits = 30;
  static constexpr std::size_t max_weight = (std::size_t{1} << weight_bits) - 1;
  static constexpr std::uint32_t max_slots = std::uint32_t{1} << 30;
  enum : std::uint32_t { window = 0, probation = 1, protected_ = 2 };

  // What a lookup reads. The LRU links live apart, in `lru_link`, so that replaying reads, which
  // relinks the hot entries all the time, writes no cache line that another core's lookups read.
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

  struct no_sketch {
    std::size_t bytes() const noexcept { return 0; }
  };
  using sketch_type = std::conditional_t<tinylfu, frequency_sketch, no_sketch>;

  // A buffered put of a key already cached carries this bit on its slot: it moves the entry to the
  // front of its segment, as the put would have, and counts no hit. Slots are below 2^30.
  static constexpr std::uint32_t put_mark = std::uint32_t{1} << 31;

  // A buffered read: the slot found (nil for a miss) and, for the admission sketch, the key's low bits.
  struct keyed_record {
    std::uint64_t key_low;
    std::uint32_t slot;
  };
  struct slot_record {
    std::uint32_t slot;
  };
  using read_record = std::conditional_t<tinylfu, keyed_record, slot_record>;
  static_assert(tinylfu || sizeof(read_stripe<read_record>) == 64,
                "a plain LRU read stripe must fill one cache line");

  static read_record make_record([[maybe_unused]] std::uint64_t low, std::uint32_t slot) noexcept {
    if constexpr (tinylfu) {
      return read_record{low, slot};
    } else {
      return read_record{slot};
    }
  }

  std::uint32_t bucket_mask = 0;
  const entry* slab_at = nullptr;
  const std::uint32_t* buckets_at = nullptr;

  // What replaying reads and replacing a value of the same weight change, for plain LRU all on the
  // writers' first line: either writes one line of the shard's own besides the LRU links.
  alignas(64) spin_lock mutex;
  std::uint32_t free_head = nil;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;
  std::uint64_t replacements = 0;
  std::size_t count = 0;
  segment_list seg[3];  // LRU uses seg[0], which ends the first line
  // And the second line, with what adding and evicting change besides.
  std::size_t bytes = 0;
  shard_counters c;
  std::size_t max_count = 0;
  std::size_t max_bytes = 0;
  std::size_t window_max = 0;
  std::size_t main_max = 0;
  std::size_t protected_max = 0;
  std::size_t index = 0;  // this shard's place in the cache, which spreads ownership over the slots
  std::vector<entry> slab;
  std::vector<lru_link> links;  // parallel to slab
  std::vector<std::uint32_t> buckets;
  flights<Key, pointer> loads;
  [[no_unique_address]] sketch_type sketch;
  alignas(64) read_buffers<read_record> reads;

  // Sets the shard's limits, its share of the cache's, and sizes its index.
  void init(std::size_t shard_index, std::size_t entry_limit, std::size_t byte_limit) {
    index = shard_index;
    max_count = entry_limit;
    max_bytes = byte_limit;
    buckets.assign(max_count != 0 ? std::bit_ceil(max_count + 1) : 16, nil);
    refresh_views();
    if constexpr (tinylfu) {
      const std::size_t capacity = max_count != 0 ? max_count : max_bytes;
      window_max = std::max<std::size_t>(1, capacity * Admission::window_percent / 100);
      main_max = capacity > window_max ? capacity - window_max : 0;
      protected_max = main_max * Admission::protected_percent / 100;
      sketch.resize(max_count != 0 ? max_count : 1024);
    }
  }

  // Bytes of the slab, links, index and sketch.
  std::size_t metadata_bytes() const noexcept {
    return slab.capacity() * sizeof(entry) + links.capacity() * sizeof(lru_link) +
           buckets.capacity() * sizeof(std::uint32_t) + sketch.bytes();
  }

  bool fits(std::size_t w) const noexcept { return w <= max_weight && (max_bytes == 0 || w <= max_bytes); }

  bool full() const noexcept {
    return (max_count != 0 && count >= max_count) || (max_bytes != 0 && bytes >= max_bytes);
  }

  // Holds the writers' lock of a shard, and keeps its readers out only between keep_readers_out and
  // let_readers_in (or unlock, or the end of its life): a put that replaces a value keeps them out for
  // the swap alone.
  class write_lock {
   public:
    explicit write_lock(shard& s) : s_(&s) {
      check_not_in_callback();
      s_->mutex.lock();
    }
    write_lock(const write_lock&) = delete;
    write_lock& operator=(const write_lock&) = delete;
    ~write_lock() {
      if (s_ != nullptr) unlock();
    }
    void keep_readers_out() noexcept {
      s_->reads.exclude();
      out_ = true;
    }
    void let_readers_in() noexcept {
      s_->reads.admit();
      out_ = false;
    }
    void unlock() noexcept {
      if (out_) s_->reads.admit();
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
    explicit exclusive_lock(shard& s) : lock_(s) {
      lock_.keep_readers_out();
      s.replay_reads();
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

  // A read without the lock, retried after replaying this thread's full buffer or after a writer
  // leaves the shard; false when the caller must take the lock. on_hit(entry) is called on a hit while
  // the read flag holds the entry; expired(expiry) says whether an expiry has passed.
  template <class Expired, class OnHit>
  bool read_fast(const Key& key, Expired&& expired, OnHit&& on_hit) {
    for (int attempt = 0; attempt < 4; ++attempt) {
      switch (read_unlocked(key, expired, on_hit)) {
        case unlocked_read::done:
          return true;
        case unlocked_read::buffer_full:
          replay_mine();
          break;
        case unlocked_read::excluded:
          reads.wait_for_writer(reader_slot::mine());
          break;
        case unlocked_read::take_lock:
          return false;
      }
    }
    return false;
  }

  // On a hit under the lock, the value. An expired entry is dropped and its value moved to `gone`, for
  // the callback to see once the lock is released.
  template <class Expired>
  pointer lookup_locked(const Key& key, Expired&& expired, pointer& gone) {
    record_access(key);
    const std::uint32_t i = find(key);
    if (i == nil) {
      ++misses;
      return {};
    }
    entry& e = slab[i];
    if (e.expiry != 0 && expired(e.expiry)) [[unlikely]] {
      gone = detach(i, eviction_cause::expired);
      ++misses;
      return {};
    }
    touch(i);
    ++hits;
    return e.value;
  }

  // Stores value under key. A key already cached, with a value that fits, changes that entry alone:
  // readers are kept out only while its value and expiry are swapped (what lookups read). Its move to
  // the front of the LRU list is buffered behind this thread's reads, like a read, so that it neither
  // replays them nor relinks lines that the shard's owner relinks. The other threads' buffered reads
  // stay buffered, to be replayed when their own buffers fill or before anything is evicted, so that the
  // put moves no line of theirs. Only if the new weight overruns a limit are all reads replayed and
  // entries evicted, with readers out. Anything else (a new key, a value too large) keeps readers out
  // and replays every read first. `after_miss`: the lookup that missed has already counted this access
  // in the sketch. Returns false if the value is too large to cache.
  bool store(write_lock& lock, const Key& key, pointer value, std::size_t w, std::int64_t expiry,
             evictions& ev, bool after_miss = false) {
    // Under the writers' lock the index cannot change, so the key can be found with readers in.
    std::uint32_t i = find(key);
    if (i != nil && fits(w)) {
      replace(lock, i, std::move(value), w, expiry, ev);
      return true;
    }
    lock.keep_readers_out();
    replay_reads();
    if (!fits(w)) {
      // The old value must not outlive the newer one the caller meant to store.
      if (i != nil) remove(i, eviction_cause::replaced, ev);
      ++c.rejected_oversize;
      return false;
    }
    ++puts;
    if (!after_miss) record_access(key);
    i = allocate_slot();
    entry& e = slab[i];
    e.key = key;
    e.value = std::move(value);
    e.expiry = expiry;
    e.set(w, window);
    std::uint32_t& head = buckets[bucket_of(key)];
    e.chain = head;
    head = i;
    link_front(i, window);
    ++count;
    bytes += w;
    if (count > buckets.size()) grow_index();
    if constexpr (tinylfu) {
      if (max_count == 0 && count > sketch.width()) sketch.resize(2 * sketch.width());
    }
    make_room(i, ev);
    return true;
  }

  std::uint32_t find(const Key& key) const noexcept {
    std::uint32_t i = buckets_at[bucket_of(key)];
    while (i != nil && !(slab_at[i].key == key)) i = slab_at[i].chain;
    return i;
  }

  void remove(std::uint32_t i, eviction_cause cause, evictions& ev) {
    const Key key = slab[i].key;
    ev.push(key, detach(i, cause), cause);
  }

  // Applies the buffered reads (see read_buffers::replay_all); under the lock with readers out.
  void replay_reads() {
    reads.replay_all([this](const read_record& r) { apply(r); });
  }

 private:
  std::size_t bucket_of(const Key& key) const noexcept {
    return static_cast<std::size_t>(key_low(key)) & bucket_mask;
  }

  // After the slab or the index moves; under the lock with no reader inside.
  void refresh_views() noexcept {
    slab_at = slab.data();
    buckets_at = buckets.data();
    bucket_mask = static_cast<std::uint32_t>(buckets.size() - 1);
  }

  template <class Expired, class OnHit>
  unlocked_read read_unlocked(const Key& key, Expired& expired, OnHit& on_hit) {
    check_not_in_callback();
    const unsigned slot = reader_slot::mine();
    if (slot >= reader_slots) [[unlikely]]
      return unlocked_read::take_lock;
    read_stripe<read_record>& st = reads.stripes[slot];
    if (!st.joined) [[unlikely]]
      reads.join(mutex, slot, index);
    read_section<read_record> section(st);
    switch (section.state()) {
      case read_state::open:
        break;
      case read_state::excluded:
        return unlocked_read::excluded;
      case read_state::full:
        return unlocked_read::buffer_full;
    }
    const std::uint32_t i = find(key);
    const entry* e = i == nil ? nullptr : &slab_at[i];
    if (e != nullptr && e->expiry != 0 && expired(e->expiry)) [[unlikely]]
      return unlocked_read::take_lock;
    section.record(make_record(key_low(key), i));
    if (e != nullptr) on_hit(*e);
    return unlocked_read::done;
  }

  // Empties this thread's full buffer under the writers' lock alone: this changes only the LRU order
  // and counters, which lookups never read, so other threads' lookups go on meanwhile. Called with this
  // thread's flag down, so nothing appends to the stripe.
  void replay_mine() {
    mutex.lock();
    reads.hand_off(reader_slot::mine(), [this](const read_record& r) { apply(r); });
    mutex.unlock();
  }

  // The one way a cached key's value is replaced (see store).
  void replace(write_lock& lock, std::uint32_t i, pointer value, std::size_t w, std::int64_t expiry,
               evictions& ev) {
    entry& e = slab[i];
    const std::size_t old_w = e.weight();
    pointer old;
    lock.keep_readers_out();
    old = std::exchange(e.value, std::move(value));
    e.expiry = expiry;
    lock.let_readers_in();
    ++puts;
    ++replacements;
    ev.push(e.key, std::move(old), eviction_cause::replaced);
    if (w != old_w) {
      const std::uint32_t sg = e.segment();
      bytes = bytes - old_w + w;
      seg[sg].cost = seg[sg].cost - cost_of(old_w) + cost_of(w);
      e.set(w, sg);
    }
    // The move to the front, buffered behind this thread's reads so that its order stays exact without
    // replaying them, and relinked by whoever replays them; at once if the thread has no reads buffered.
    if (!reads.buffer_own(reader_slot::mine(), make_record(0, i | put_mark),
                          [this](const read_record& r) { apply(r); }))
      move_front(i, slab[i].segment());
    if (needs_room()) [[unlikely]] {
      lock.keep_readers_out();
      replay_reads();
      make_room(i, ev);
    }
  }

  void apply(const read_record& r) {
    if (r.slot != nil && (r.slot & put_mark) != 0) {
      const std::uint32_t i = r.slot & ~put_mark;
      move_front(i, slab[i].segment());
      return;
    }
    if constexpr (tinylfu) sketch.increment(r.key_low);
    if (r.slot == nil) {
      ++misses;
    } else {
      ++hits;
      touch(r.slot);
    }
  }

  std::size_t cost_of(std::size_t weight) const noexcept { return max_count != 0 ? 1 : weight; }

  void link_front(std::uint32_t i, std::uint32_t sg) noexcept {
    entry& e = slab[i];
    segment_list& l = seg[sg];
    if (e.segment() != sg) e.set(e.weight(), sg);
    lru_link& n = links[i];
    n.prev = nil;
    n.next = l.head;
    if (l.head != nil) links[l.head].prev = i;
    l.head = i;
    if (l.tail == nil) l.tail = i;
    l.cost += cost_of(e.weight());
  }

  void unlink(std::uint32_t i) noexcept {
    const entry& e = slab[i];
    const lru_link n = links[i];
    segment_list& l = seg[e.segment()];
    if (n.prev != nil)
      links[n.prev].next = n.next;
    else
      l.head = n.next;
    if (n.next != nil)
      links[n.next].prev = n.prev;
    else
      l.tail = n.prev;
    l.cost -= cost_of(e.weight());
  }

  void move_front(std::uint32_t i, std::uint32_t sg) noexcept {
    if (seg[sg].head == i && slab[i].segment() == sg) return;
    unlink(i);
    link_front(i, sg);
  }

  std::uint32_t allocate_slot() {
    if (free_head != nil) {
      const std::uint32_t i = free_head;
      free_head = links[i].next;
      return i;
    }
    if (slab.size() >= max_slots)
      throw std::length_error(
          "frugal::basic_cache: more than 2^30 entries in one shard; raise options.shards");
    if (slab.size() == slab.capacity()) {
      std::size_t want = std::max<std::size_t>(16, 2 * slab.capacity());
      // One slot above the limit: an insert is made before the eviction it causes.
      if (max_count != 0) want = std::min(want, max_count + 1);
      slab.reserve(want);
      links.reserve(want);
      refresh_views();
    }
    slab.emplace_back();
    links.emplace_back();
    return static_cast<std::uint32_t>(slab.size() - 1);
  }

  void grow_index() {
    std::vector<std::uint32_t> grown(2 * buckets.size(), nil);
    buckets.swap(grown);
    refresh_views();
    for (std::uint32_t i = 0; i < slab.size(); ++i) {
      entry& e = slab[i];
      if (!e.value) continue;
      std::uint32_t& head = buckets[bucket_of(e.key)];
      e.chain = head;
      head = i;
    }
  }

  // Unlinks slot i and frees it; returns its value.
  pointer detach(std::uint32_t i, eviction_cause cause) noexcept {
    entry& e = slab[i];
    std::uint32_t* link = &buckets[bucket_of(e.key)];
    while (*link != i) link = &slab[*link].chain;
    *link = e.chain;
    unlink(i);
    --count;
    bytes -= e.weight();
    switch (cause) {
      case eviction_cause::size:
        ++c.evictions_size;
        break;
      case eviction_cause::expired:
        ++c.evictions_expired;
        break;
      case eviction_cause::erased:
        ++c.evictions_explicit;
        break;
      case eviction_cause::replaced:
        ++replacements;
        break;
    }
    pointer value = std::move(e.value);
    e.expiry = 0;
    e.chain = nil;
    links[i] = lru_link{nil, free_head};
    free_head = i;
    return value;
  }

  void record_access(const Key& key) noexcept {
    if constexpr (tinylfu) sketch.increment(key_low(key));
  }

  void touch(std::uint32_t i) noexcept {
    if constexpr (tinylfu) {
      switch (slab[i].segment()) {
        case window:
          move_front(i, window);
          break;
        case probation:
          move_front(i, protected_);
          while (seg[protected_].cost > protected_max && seg[protected_].tail != i)
            move_front(seg[protected_].tail, probation);
          break;
        default:
          move_front(i, protected_);
          break;
      }
    } else {
      move_front(i, window);
    }
  }

  bool over_limit() const noexcept {
    return (max_count != 0 && count > max_count) || (max_bytes != 0 && bytes > max_bytes);
  }

  // Whether make_room would evict or move entries: the limits, or W-TinyLFU's window, overrun.
  bool needs_room() const noexcept {
    if constexpr (tinylfu) {
      if (seg[window].cost > window_max) return true;
    }
    return over_limit();
  }

  // The next entry to go when over a limit; never `keep`, the entry just written.
  std::uint32_t pick_victim(std::uint32_t keep) const noexcept {
    const std::uint32_t order[3] = {probation, protected_, window};
    for (std::uint32_t sg : order) {
      std::uint32_t t = seg[sg].tail;
      if (t == keep) t = links[t].prev;
      if (t != nil) return t;
    }
    return nil;
  }

  void make_room(std::uint32_t keep, evictions& ev) {
    if constexpr (tinylfu) {
      // Entries leaving the window join probation; once the main space is full, the candidate must be
      // more frequent than probation's LRU end to stay.
      while (seg[window].cost > window_max && seg[window].tail != keep) {
        const std::uint32_t candidate = seg[window].tail;
        move_front(candidate, probation);
        if (seg[probation].cost + seg[protected_].cost <= main_max) continue;
        std::uint32_t victim = seg[probation].tail;
        if (victim == candidate || victim == keep) victim = seg[protected_].tail;
        if (victim == nil || victim == keep) continue;
        const unsigned fc = sketch.estimate(key_low(slab[candidate].key));
        const unsigned fv = sketch.estimate(key_low(slab[victim].key));
        remove(fc > fv ? victim : candidate, eviction_cause::size, ev);
      }
    }
    while (over_limit()) {
      const std::uint32_t victim = pick_victim(keep);
      if (victim == nil) break;
      remove(victim, eviction_cause::size, ev);
    }
  }
};

}  // namespace detail

FRUGAL_END_NAMESPACE
