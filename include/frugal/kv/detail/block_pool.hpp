#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <unordered_map>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// The KV cache's block bookkeeping, apart from the K/V bytes. A block is in exactly one of three states:
// in use (refs > 0), cached (refs == 0, it has a prefix key and sits in the LRU list), or free (refs == 0,
// no key, on the free stack). Only full, committed blocks get a key, and a keyed block is never written.
class kv_block_pool {
 public:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  explicit kv_block_pool(std::size_t blocks) : meta_(blocks) {
    free_.reserve(blocks);
    // Block 0 on top of the stack: allocation order is deterministic and starts at the lowest index.
    for (std::size_t i = blocks; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }

  std::size_t size() const noexcept { return meta_.size(); }
  std::size_t free_count() const noexcept { return free_.size(); }
  std::size_t cached_count() const noexcept { return cached_; }
  std::size_t available() const noexcept { return free_.size() + cached_; }
  std::uint32_t refs(std::uint32_t b) const noexcept { return meta_[b].refs; }
  bool keyed(std::uint32_t b) const noexcept { return meta_[b].keyed; }
  const key128& key(std::uint32_t b) const noexcept { return meta_[b].key; }

  // A block for new tokens, with one reference: a free one if any, else the least recently released cached
  // one, whose key leaves the index (an eviction). `evicted` says which happened. none when neither exists.
  std::uint32_t allocate(bool& evicted) {
    evicted = false;
    std::uint32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else if (lru_head_ != none) {
      b = lru_head_;
      unlink(b);
      index_.erase(meta_[b].key);
      meta_[b].keyed = false;
      evicted = true;
    } else {
      return none;
    }
    meta_[b].refs = 1;
    return b;
  }

  // The cached block with this key, if any, now referenced once more (and out of the LRU list).
  std::optional<std::uint32_t> acquire(const key128& k) {
    const auto it = index_.find(k);
    if (it == index_.end()) return std::nullopt;
    retain(it->second);
    return it->second;
  }

  bool contains(const key128& k) const { return index_.count(k) != 0; }

  void retain(std::uint32_t b) {
    if (meta_[b].refs++ == 0) unlink(b);
  }

  // Drops a reference; at zero a keyed block becomes the most recently used cached one, an unkeyed one free.
  void release(std::uint32_t b) {
    if (--meta_[b].refs != 0) return;
    if (meta_[b].keyed)
      link_back(b);
    else
      free_.push_back(b);
  }

  // Gives a full, committed, referenced block its prefix key. false (and no key) when another block holds
  // the key already: both stay valid, the second is just not shared.
  bool publish(std::uint32_t b, const key128& k) {
    if (meta_[b].keyed) return meta_[b].key == k;
    if (!index_.emplace(k, b).second) return false;
    meta_[b].key = k;
    meta_[b].keyed = true;
    return true;
  }

  // Forgets every cached block's key; they become free. Referenced blocks keep theirs.
  std::size_t drop_cached() {
    std::size_t n = 0;
    while (lru_head_ != none) {
      const std::uint32_t b = lru_head_;
      unlink(b);
      index_.erase(meta_[b].key);
      meta_[b].keyed = false;
      free_.push_back(b);
      ++n;
    }
    return n;
  }

  // The cached blocks from the next to be evicted to the last.
  std::vector<std::uint32_t> lru_order() const {
    std::vector<std::uint32_t> v;
    for (std::uint32_t b = lru_head_; b != none; b = meta_[b].next) v.push_back(b);
    return v;
  }

 private:
  struct meta {
    std::uint32_t refs = 0;
    bool keyed = false;
    key128 key{};
    std::uint32_t prev = none, next = none;
  };
  struct key_hash {
    std::size_t operator()(const key128& k) const noexcept { return static_cast<std::size_t>(k.lo); }
  };

  void unlink(std::uint32_t b) {
    meta& m = meta_[b];
    (m.prev == none ? lru_head_ : meta_[m.prev].next) = m.next;
    (m.next == none ? lru_tail_ : meta_[m.next].prev) = m.prev;
    m.prev = m.next = none;
    --cached_;
  }
  void link_back(std::uint32_t b) {
    meta& m = meta_[b];
    m.prev = lru_tail_;
    m.next = none;
    (lru_tail_ == none ? lru_head_ : meta_[lru_tail_].next) = b;
    lru_tail_ = b;
    ++cached_;
  }

  std::vector<meta> meta_;
  std::vector<std::uint32_t> free_;
  std::unordered_map<key128, std::uint32_t, key_hash> index_;
  std::uint32_t lru_head_ = none, lru_tail_ = none;
  std::size_t cached_ = 0;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
