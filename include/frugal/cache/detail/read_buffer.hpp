#pragma once
/// @file
/// @brief The cache's lock-free read protocol: reader slots, per-shard read stripes and their flags,
/// and the functions that exclude readers, join a stripe, hand buffered reads off and replay them.
///
/// A get does not take its shard's lock, in the manner of Caffeine's read buffers. Each of the first
/// eight threads to read holds a reader slot (until it exits) and owns one stripe in every shard. A
/// reader raises its stripe's `reading` flag, checks that no writer has raised `excluded`, looks the
/// key up, and appends the slot it found to its stripe's buffer of 15 instead of relinking the LRU
/// list. Every operation that adds, evicts or removes entries first keeps new readers out (`exclude`),
/// waits for the flags to drop, then replays all the buffered reads, so that evictions always see every
/// read. A put that replaces a cached value keeps readers out only while it swaps the value, and buffers
/// its own move to the front behind its thread's reads. Reads by different threads are replayed one
/// thread after another; each thread's keep their order, and on one thread the order is exactly that of
/// a locked LRU. A reader whose buffer is full replays it under the writers' lock alone (`hand_off`),
/// while other threads go on reading; a reader that meets a writer waits for it to leave and reads
/// again; an expired entry, or a ninth thread, takes the lock. The LRU links are kept apart from what
/// lookups read, so replaying reads writes no line that other cores' lookups need. Reads of a shard by
/// different threads thus write nothing that the others read, except, for get, the value's count.
///
/// Two locks guard a shard. The writers' `spin_lock` orders the writers: whoever changes the LRU order,
/// counters or entries holds it. The stripes' `excluded` flags keep lookups out. Each stripe's two flags
/// are a Dekker pair: a reader raises `reading`, then loads `excluded`; a writer raises `excluded`, then
/// loads `reading`. With a total order over those four accesses one side always sees the other, so no
/// reader looks an entry up while a writer changes it. Both flags sit on the reader's own line, which
/// it writes anyway: a lookup reads no line that a put writes, except for the stripe.
///
/// Why ThreadSanitizer checks a different ordering from production. The writer raises up to eight
/// flags; making each store seq_cst would be one full barrier per stripe (an xchg on x86). Production
/// stores them relaxed and orders them before the loads of `reading` with one seq_cst fence, which is
/// the same guarantee (a seq_cst fence between a store and a later load makes the pair take part in the
/// single total order) at one barrier. ThreadSanitizer does not model std::atomic_thread_fence: it
/// would see relaxed stores with no happens-before to the reader and report races on every entry the
/// writer then changes, though none can happen. So under TSan (FRUGAL_CACHE_TSAN) each store is seq_cst
/// instead: the same ordering, stated in a form TSan understands, and slower. The fence version is thus
/// never checked by TSan; tests/cache/test_read_buffer.cpp, part of test_cache and so of every plain
/// ctest run (the dev preset's included), stresses it instead: no reader may see a pair that a writer
/// is rewriting, and every buffered read must be replayed once, in its thread's order. Without the
/// fence that test failed in two runs of three on x86; without the wait for readers, in every run.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "frugal/detail/spin.hpp"
#include "frugal/namespace.hpp"

#include "frugal/detail/macro_scope.hpp"

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

inline constexpr std::uint32_t read_buffer_size = 15;
// Reads handed to a shard's owner wait in its pending buffer: room for three stripes' worth.
inline constexpr std::uint32_t pending_size = 3 * read_buffer_size;
inline constexpr std::uint8_t no_owner = 0xff;

// One reader slot's buffered reads of one shard, on cache lines of its own: only the thread that
// holds the slot appends, and only a holder of the writers' lock empties it: a writer once `reading`
// is false, or the slot's own thread, between its reads.
// For a 4-byte record, the two flags, count, `joined` and 15 records fill one 64-byte line, so that a
// writer replaying another core's reads moves one line between the cores.
// A stripe is `joined` by its thread's first lock-free read of the shard, under the writers' lock;
// writers raise `excluded` only in joined stripes, so that the stripes of slots no thread has used
// are never written and never pass between the cores.
template <class Record>
struct alignas(64) read_stripe {
  std::atomic<bool> reading{false};   // raised by the owner while it looks up
  std::atomic<bool> excluded{false};  // raised by a writer while entries or the index change
  std::atomic<std::uint8_t> count{0};
  bool joined = false;  // set by the owner under the writers' lock; read by writers under it
  Record records[read_buffer_size];
};

enum class read_state {
  open,      // the reader may look up and then record()
  excluded,  // a writer holds the shard
  full,      // this thread's buffer must be replayed first
};

// One lock-free read of a shard by the stripe's own thread: the `reading` flag is up from construction
// to destruction, and whatever the reader looks at in between stays as it is while state() is open.
template <class Record>
class read_section {
 public:
  explicit read_section(read_stripe<Record>& st) noexcept : st_(st) {
    st_.reading.store(true, std::memory_order_seq_cst);
  }
  read_section(const read_section&) = delete;
  read_section& operator=(const read_section&) = delete;
  ~read_section() { st_.reading.store(false, std::memory_order_release); }

  // Once `excluded` is seen down, no writer is past its wait for readers, and none can get past it
  // before this one lowers its flag.
  read_state state() noexcept {
    if (st_.excluded.load(std::memory_order_seq_cst)) [[unlikely]]
      return read_state::excluded;
    at_ = st_.count.load(std::memory_order_relaxed);
    if (at_ >= read_buffer_size) [[unlikely]]
      return read_state::full;
    return read_state::open;
  }
  // Appends the read's record; only after state() returned open.
  void record(const Record& r) noexcept {
    st_.records[at_] = r;
    st_.count.store(static_cast<std::uint8_t>(at_ + 1), std::memory_order_relaxed);
  }

 private:
  read_stripe<Record>& st_;
  std::uint32_t at_ = 0;
};

// A shard's read stripes and the reads handed off to its owner. Everything but the readers' own
// appends and flags is changed under the shard's writers' lock.
template <class Record>
struct read_buffers {
  // Buffered reads that other threads handed to the owner, oldest first.
  Record pending[pending_size]{};
  std::uint32_t pending_n = 0;
  std::uint8_t owner = no_owner;  // the reader slot that relinks for the others (see hand_off)
  read_stripe<Record> stripes[reader_slots];

  // Raises every joined stripe's `excluded` and waits until no reader is inside; the caller holds the
  // writers' lock. Production stores the flags relaxed behind one seq_cst fence; see the file comment
  // for why ThreadSanitizer builds store each seq_cst instead. Only joined stripes can have a reader
  // inside: a thread joins under the writers' lock, before its first lock-free read of the shard.
  void exclude() noexcept {
#if FRUGAL_CACHE_TSAN
    for (read_stripe<Record>& st : stripes) {
      if (st.joined) st.excluded.store(true, std::memory_order_seq_cst);
    }
#else
    for (read_stripe<Record>& st : stripes) {
      if (st.joined) st.excluded.store(true, std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    for (read_stripe<Record>& st : stripes) {
      if (st.joined) spin_while_set(st.reading, std::memory_order_acquire);
    }
  }

  void admit() noexcept {
    for (read_stripe<Record>& st : stripes) {
      if (st.joined) st.excluded.store(false, std::memory_order_release);
    }
  }

  // A reader that met a writer waits for it to leave before it reads again, rather than take the lock
  // itself: on a hot shard, readers that turned writers would keep each other out.
  void wait_for_writer(unsigned slot) const noexcept {
    spin_while_set(stripes[slot].excluded, std::memory_order_relaxed);
  }

  // This thread's first lock-free read of the shard: waits for any writer to finish, after which every
  // writer sees the stripe joined and keeps its reads out. The owner is the joined slot at (shard_index
  // mod joined slots), so that two threads that read all shards own half of them each.
#if defined(__GNUC__)
  [[gnu::noinline, gnu::cold]]
#endif
  void
  join(spin_lock& writers, unsigned slot, std::size_t shard_index) noexcept {
    writers.lock();
    stripes[slot].joined = true;
    unsigned joined = 0;
    for (const read_stripe<Record>& j : stripes) joined += j.joined ? 1 : 0;
    unsigned k = static_cast<unsigned>(shard_index % joined);
    for (unsigned s = 0; s < reader_slots; ++s) {
      if (stripes[s].joined && k-- == 0) {
        owner = static_cast<std::uint8_t>(s);
        break;
      }
    }
    writers.unlock();
  }

  // Empties a stripe of this thread's, under the writers' lock, applying each record with apply(r).
  // Relinking the LRU list writes the entries' links and the list's head, which every thread's reads of
  // a hot entry change: if two threads relinked one shard in turn, those lines would pass between their
  // cores on every replay. So one joined slot per shard, its owner, relinks for all: the others copy
  // their records into the pending buffer, one line or two, and the owner replays them before its own,
  // as every replay of all the buffers does. Pending records are older than any record still in a
  // stripe of the same thread, so replaying them first keeps each thread's order exact. When the
  // buffer has no room (an owner that reads this shard seldom, or has exited), the thread replays it
  // all itself.
  template <class Apply>
  void hand_off(unsigned slot, Apply&& apply) {
    read_stripe<Record>& st = stripes[slot];
    const std::uint32_t n = st.count.load(std::memory_order_relaxed);
    if (slot != owner && pending_n + n <= pending_size) {
      std::copy_n(st.records, n, pending + pending_n);
      pending_n += n;
      st.count.store(0, std::memory_order_relaxed);
      return;
    }
    replay_pending(apply);
    replay_stripe(st, apply);
  }

  // Applies every buffered read, each reader's in its own order, as if each had taken the lock when it
  // ran; under the writers' lock with readers excluded. Reads by different threads since the shard's
  // last locked operation are applied one thread after another: they overlapped in time, as far as the
  // cache can tell, so any order is one the threads could have run in. The pending records come first:
  // each is older than anything its thread has in its stripe.
  template <class Apply>
  void replay_all(Apply&& apply) {
    replay_pending(apply);
    for (read_stripe<Record>& st : stripes) replay_stripe(st, apply);
  }

  // Buffers a write of this thread's (a record the writer makes under the writers' lock) behind its
  // reads, handing them off first if the stripe is full; false if the thread has no joined stripe,
  // hence no buffered reads, and must apply the record itself.
  template <class Apply>
  bool buffer_own(unsigned slot, const Record& r, Apply&& apply) {
    if (slot >= reader_slots || !stripes[slot].joined) return false;
    read_stripe<Record>& st = stripes[slot];
    if (st.count.load(std::memory_order_relaxed) >= read_buffer_size) hand_off(slot, apply);
    const std::uint32_t at = st.count.load(std::memory_order_relaxed);
    st.records[at] = r;
    st.count.store(static_cast<std::uint8_t>(at + 1), std::memory_order_relaxed);
    return true;
  }

 private:
  template <class Apply>
  void replay_pending(Apply& apply) {
    for (std::uint32_t j = 0; j < pending_n; ++j) apply(pending[j]);
    pending_n = 0;
  }

  template <class Apply>
  void replay_stripe(read_stripe<Record>& st, Apply& apply) {
    const std::uint32_t n = st.count.load(std::memory_order_relaxed);
    for (std::uint32_t j = 0; j < n; ++j) apply(st.records[j]);
    if (n != 0) st.count.store(0, std::memory_order_relaxed);
  }
};

}  // namespace detail

FRUGAL_END_NAMESPACE

#include "frugal/detail/macro_unscope.hpp"
