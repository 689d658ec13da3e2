#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/element_type.hpp"
#include "frugal/kv/detail/block_pool.hpp"
#include "frugal/kv/errors.hpp"
#include "frugal/kv/salt.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The shape and budget of a kv_cache. Every field but the defaults must be set.
struct kv_cache_options {
  /// Tokens per block: the unit of allocation and of prefix sharing. Smaller blocks waste less of a
  /// sequence's last block and share shorter prefixes, at more block-table lookups per attention row.
  std::size_t block_tokens = 16;
  std::size_t layers = 0;    ///< the model's decoder layers
  std::size_t kv_heads = 0;  ///< K/V heads per layer (fewer than the query heads under GQA)
  std::size_t head_dim = 0;  ///< elements per head
  /// How K and V are stored. Only f32 today; the layout (see kv_cache::keys) is per element type, so f16,
  /// bf16 and i8 (with per-block scales) can follow without changing the block tables.
  element_type element = element_type::f32;
  /// Bytes for K and V together; the cache holds budget_bytes / block_bytes whole blocks, allocated once.
  std::size_t budget_bytes = 0;
  /// Whether full blocks get prefix keys, so that later sequences with the same salt and leading tokens
  /// share them. Off, every sequence computes its whole prompt and released blocks are free at once.
  bool prefix_caching = true;
};

/// @brief A sequence's handle. Stale after release(): using it then throws kv_errc::unknown_sequence.
struct kv_sequence_id {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
  friend constexpr bool operator==(const kv_sequence_id&, const kv_sequence_id&) noexcept = default;
};

/// @brief What open() gives: the sequence, and how many of its prompt's leading tokens have their K/V in
/// the cache already (a multiple of block_tokens), so the caller appends and computes the rest only.
struct kv_open_result {
  kv_sequence_id id;
  std::size_t cached_tokens = 0;
};

/// @brief An append's outcome. On out_of_blocks nothing changed: free or preempt a sequence and retry.
struct [[nodiscard]] kv_append_result {
  bool ok = true;
  kv_errc error{};                   ///< kv_errc::out_of_blocks when !ok
  std::size_t blocks_needed = 0;     ///< new blocks the append took (ok) or would have taken, copies included
  std::size_t blocks_available = 0;  ///< free and evictable blocks before the append
  explicit operator bool() const noexcept { return ok; }
};

/// @brief A snapshot of a kv_cache (kv_cache::stats).
struct kv_cache_stats {
  std::size_t block_tokens = 0;
  std::size_t block_bytes = 0;  ///< K and V of one block, all layers
  std::size_t blocks_total = 0;
  std::size_t blocks_used = 0;    ///< referenced by a sequence
  std::size_t blocks_cached = 0;  ///< unreferenced, keyed: reusable by a prefix hit, evictable
  std::size_t blocks_free = 0;    ///< unreferenced, no key
  std::size_t bytes_total = 0;    ///< blocks_total * block_bytes
  std::size_t bytes_used = 0;     ///< blocks_used * block_bytes
  std::size_t sequences = 0;      ///< open sequences
  std::size_t sequence_tokens =
      0;                          ///< the open sequences' lengths summed (shared tokens counted per sequence)
  std::size_t stored_tokens = 0;  ///< tokens in the used blocks, each shared block once
  std::uint64_t appended_tokens = 0;      ///< tokens appended since construction
  std::uint64_t cow_copies = 0;           ///< shared partial blocks copied before an append
  std::uint64_t evictions = 0;            ///< cached blocks taken for new tokens
  std::uint64_t allocation_failures = 0;  ///< appends refused with out_of_blocks
  std::uint64_t prefix_query_tokens = 0;  ///< prompt tokens that open() looked up
  std::uint64_t prefix_hit_tokens = 0;    ///< of those, tokens served from cached blocks
};

/// @brief A paged KV cache: K and V in fixed-size blocks taken from one budget, a block table per
/// sequence, reference-counted blocks shared by prefix (see kv_block_key) and by fork(), copy-on-write.
///
/// A sequence's life: open(prompt) shares the longest chain of cached full blocks of the prompt; append()
/// reserves room for the tokens the model is about to compute (the rest of the prompt, a chunk of it, or a
/// generated token); the model writes their K and V with write() (or through keys()/values()) for every
/// layer and runs kv_attention; commit() declares them computed, which gives the blocks they filled their
/// prefix keys; release() ends it. Released full blocks stay cached, and are evicted least recently
/// released first when a new block is needed; a sequence's blocks are released from its last to its first,
/// so a chain loses its tail before its head.
///
/// Single-threaded by design: the scheduler's thread owns it. kv_attention and the const accessors may run
/// on many threads at once while nothing mutates the cache (during a step's forward pass).
class kv_cache {
 public:
  explicit kv_cache(const kv_cache_options& o) : o_(validated(o)), pool_(block_count(o_)) {
    const std::size_t bytes = pool_.size() * block_bytes_ + 64;
    storage_.reset(static_cast<std::byte*>(std::calloc(bytes, 1)));
    if (!storage_) throw std::bad_alloc();
    base_ = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(storage_.get()) + 63) &
                                     ~std::uintptr_t{63});
  }

  kv_cache(const kv_cache&) = delete;
  kv_cache& operator=(const kv_cache&) = delete;

  const kv_cache_options& options() const noexcept { return o_; }
  std::size_t block_bytes() const noexcept { return block_bytes_; }
  std::size_t blocks_total() const noexcept { return pool_.size(); }
  /// @brief Blocks an append can take now: free ones and cached ones (evicted on use).
  std::size_t blocks_available() const noexcept { return pool_.available(); }

  /// @brief Opens a sequence for a prompt under a salt and shares the longest chain of cached full blocks
  /// of its leading tokens. At least the prompt's last token is left to compute, since its logits are
  /// needed. Counts prompt.size() queried tokens and cached_tokens hit tokens. The sequence holds the
  /// cached tokens only; append the rest.
  kv_open_result open(std::span<const kv_token> prompt, const kv_salt& salt = {}) {
    const kv_sequence_id id = new_sequence(salt);
    sequence& s = seqs_[id.index];
    stats_.prefix_query_tokens += prompt.size();
    if (o_.prefix_caching && !prompt.empty()) {
      const std::size_t B = o_.block_tokens;
      const std::size_t max_blocks = (prompt.size() - 1) / B;
      key128 parent{};
      for (std::size_t i = 0; i < max_blocks; ++i) {
        const key128 k = kv_block_key(parent, salt, prompt.subspan(i * B, B));
        const auto b = pool_.acquire(k);
        if (!b) break;
        s.blocks.push_back(*b);
        s.keys.push_back(k);
        parent = k;
      }
      s.tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(s.blocks.size() * B));
      s.committed = s.tokens.size();
    }
    stats_.prefix_hit_tokens += s.tokens.size();
    return {id, s.tokens.size()};
  }

  /// @brief Reserves room for `tokens` after the sequence's last one, all or nothing: new blocks, and a
  /// private copy of its last block if that is partly filled and shared (after fork). Their K/V are to be
  /// written before attention reads them; commit() when they are computed.
  kv_append_result append(kv_sequence_id id, std::span<const kv_token> tokens) {
    sequence& s = get(id, "append");
    const std::size_t need = blocks_needed(s, tokens.size());
    kv_append_result r{.blocks_needed = need, .blocks_available = pool_.available()};
    if (need > r.blocks_available) {
      ++stats_.allocation_failures;
      r.ok = false;
      r.error = kv_errc::out_of_blocks;
      return r;
    }
    const std::size_t B = o_.block_tokens;
    if (!tokens.empty() && s.tokens.size() % B != 0 && pool_.refs(s.blocks.back()) > 1) {
      const std::uint32_t copy = take_block();
      for (std::size_t l = 0; l < o_.layers; ++l)
        std::memcpy(keys(l, copy), keys(l, s.blocks.back()), 2 * block_layer_elems() * sizeof(float));
      pool_.release(s.blocks.back());
      s.blocks.back() = copy;
      ++stats_.cow_copies;
    }
    const std::size_t blocks_after = (s.tokens.size() + tokens.size() + B - 1) / B;
    while (s.blocks.size() < blocks_after) s.blocks.push_back(take_block());
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    stats_.appended_tokens += tokens.size();
    return r;
  }

  /// @brief Blocks append(id, n tokens) would take now, copies included.
  std::size_t blocks_needed(kv_sequence_id id, std::size_t n) const {
    return blocks_needed(get(id, "blocks_needed"), n);
  }

  /// @brief Declares the sequence's appended tokens computed (their K/V written for every layer): the full
  /// blocks among them get prefix keys and become shareable.
  void commit(kv_sequence_id id) {
    sequence& s = get(id, "commit");
    s.committed = s.tokens.size();
    if (!o_.prefix_caching) return;
    const std::size_t B = o_.block_tokens;
    for (std::size_t i = s.keys.size(); i < s.committed / B; ++i) {
      const key128 parent = i == 0 ? key128{} : s.keys[i - 1];
      const key128 k = kv_block_key(parent, s.salt, std::span(s.tokens).subspan(i * B, B));
      pool_.publish(s.blocks[i], k);
      s.keys.push_back(k);
    }
  }

  /// @brief A new sequence sharing every block of `id` (parallel sampling, beam search); the first of the
  /// two to append into a shared partly-filled block gets its own copy. `id` must have no pending tokens.
  kv_sequence_id fork(kv_sequence_id id) {
    kv_salt salt;
    {
      const sequence& s = get(id, "fork");
      if (s.committed != s.tokens.size())
        throw kv_error(kv_errc::pending_tokens, "frugal::kv_cache::fork: the sequence has " +
                                                    std::to_string(s.tokens.size() - s.committed) +
                                                    " appended tokens not committed yet");
      salt = s.salt;  // a copy: new_sequence may grow seqs_ and move s
    }
    const kv_sequence_id child = new_sequence(salt);
    sequence& c = seqs_[child.index];
    const sequence& s = seqs_[id.index];
    c.tokens = s.tokens;
    c.blocks = s.blocks;
    c.keys = s.keys;
    c.committed = s.committed;
    for (const std::uint32_t b : c.blocks) pool_.retain(b);
    return child;
  }

  /// @brief Ends a sequence: its blocks lose a reference; unreferenced full committed blocks stay cached.
  void release(kv_sequence_id id) {
    sequence& s = get(id, "release");
    for (std::size_t i = s.blocks.size(); i-- > 0;) pool_.release(s.blocks[i]);
    // Cleared, not destroyed: the slot's next sequence reuses the capacity.
    s.tokens.clear();
    s.blocks.clear();
    s.keys.clear();
    s.committed = 0;
    s.live = false;
    ++s.generation;
    free_seqs_.push_back(id.index);
    --open_;
  }

  /// @brief Copies the K and V of tokens [first_pos, first_pos + n) of one layer into the sequence's
  /// blocks; k and v are n rows of kv_heads * head_dim, token-major. Only appended, uncommitted positions.
  void write(kv_sequence_id id, std::size_t layer, std::size_t first_pos, std::span<const float> k,
             std::span<const float> v) {
    const sequence& s = get(id, "write");
    const std::size_t row = o_.kv_heads * o_.head_dim;
    if (layer >= o_.layers)
      throw kv_error(kv_errc::bad_shape, "frugal::kv_cache::write: layer " + std::to_string(layer) +
                                             " is not below options.layers " + std::to_string(o_.layers));
    if (k.size() != v.size() || k.size() % row != 0)
      throw kv_error(kv_errc::bad_shape, "frugal::kv_cache::write: k has " + std::to_string(k.size()) +
                                             " and v " + std::to_string(v.size()) +
                                             " elements; both must be a multiple of kv_heads * head_dim = " +
                                             std::to_string(row) + " and equal");
    const std::size_t n = k.size() / row;
    if (first_pos < s.committed || first_pos + n > s.tokens.size())
      throw kv_error(kv_errc::bad_position,
                     "frugal::kv_cache::write: positions [" + std::to_string(first_pos) + ", " +
                         std::to_string(first_pos + n) + ") are not within the appended, uncommitted [" +
                         std::to_string(s.committed) + ", " + std::to_string(s.tokens.size()) + ")");
    const std::size_t B = o_.block_tokens, D = o_.head_dim;
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t pos = first_pos + t;
      float* kb = keys(layer, s.blocks[pos / B]);
      float* vb = values(layer, s.blocks[pos / B]);
      for (std::size_t g = 0; g < o_.kv_heads; ++g) {
        const std::size_t at = (g * B + pos % B) * D;
        std::memcpy(kb + at, k.data() + t * row + g * D, D * sizeof(float));
        std::memcpy(vb + at, v.data() + t * row + g * D, D * sizeof(float));
      }
    }
  }

  /// @brief The K of one layer in one block: kv_heads * block_tokens * head_dim floats, head-major (a
  /// head's tokens are consecutive rows of head_dim); values() lies right after it. 64-byte aligned when
  /// kv_heads * block_tokens * head_dim is a multiple of 16 (always at 16 tokens a block).
  float* keys(std::size_t layer, std::uint32_t block) noexcept {
    return base_ + (layer * pool_.size() + block) * 2 * block_layer_elems();
  }
  const float* keys(std::size_t layer, std::uint32_t block) const noexcept {
    return base_ + (layer * pool_.size() + block) * 2 * block_layer_elems();
  }
  float* values(std::size_t layer, std::uint32_t block) noexcept {
    return keys(layer, block) + block_layer_elems();
  }
  const float* values(std::size_t layer, std::uint32_t block) const noexcept {
    return keys(layer, block) + block_layer_elems();
  }

  /// @brief The sequence's blocks, position p in block_table(id)[p / block_tokens], slot p % block_tokens.
  std::span<const std::uint32_t> block_table(kv_sequence_id id) const {
    return get(id, "block_table").blocks;
  }
  /// @brief The sequence's tokens (cached, appended and committed alike).
  std::span<const kv_token> tokens(kv_sequence_id id) const { return get(id, "tokens").tokens; }
  std::size_t length(kv_sequence_id id) const { return get(id, "length").tokens.size(); }
  /// @brief Tokens whose K/V are computed: the cached prefix and what commit() declared.
  std::size_t committed(kv_sequence_id id) const { return get(id, "committed").committed; }
  bool contains(kv_sequence_id id) const noexcept {
    return id.index < seqs_.size() && seqs_[id.index].live && seqs_[id.index].generation == id.generation;
  }
  /// @brief How many sequences reference the block (0: cached or free).
  std::uint32_t block_refs(std::uint32_t block) const noexcept { return pool_.refs(block); }
  /// @brief The cached blocks, the next to be evicted first.
  std::vector<std::uint32_t> eviction_order() const { return pool_.lru_order(); }

  /// @brief Makes every cached block free (their prefix keys are forgotten); referenced blocks keep theirs.
  std::size_t drop_cached() { return pool_.drop_cached(); }

  kv_cache_stats stats() const {
    kv_cache_stats st = stats_;
    st.block_tokens = o_.block_tokens;
    st.block_bytes = block_bytes_;
    st.blocks_total = pool_.size();
    st.blocks_cached = pool_.cached_count();
    st.blocks_free = pool_.free_count();
    st.blocks_used = st.blocks_total - st.blocks_cached - st.blocks_free;
    st.bytes_total = st.blocks_total * block_bytes_;
    st.bytes_used = st.blocks_used * block_bytes_;
    st.sequences = open_;
    std::vector<bool> seen(pool_.size());
    for (const sequence& s : seqs_) {
      if (!s.live) continue;
      st.sequence_tokens += s.tokens.size();
      for (std::size_t i = 0; i < s.blocks.size(); ++i) {
        if (seen[s.blocks[i]]) continue;
        seen[s.blocks[i]] = true;
        st.stored_tokens += std::min(o_.block_tokens, s.tokens.size() - i * o_.block_tokens);
      }
    }
    return st;
  }

 private:
  struct sequence {
    std::uint32_t generation = 0;
    bool live = false;
    kv_salt salt{};
    std::vector<kv_token> tokens;
    std::vector<std::uint32_t> blocks;
    std::vector<key128> keys;  // prefix keys of the leading full committed blocks
    std::size_t committed = 0;
  };
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  static kv_cache_options validated(const kv_cache_options& o) {
    const auto fail = [](const std::string& what) {
      return std::invalid_argument("frugal::kv_cache: options." + what);
    };
    if (o.block_tokens == 0) throw fail("block_tokens must be positive");
    if (o.layers == 0) throw fail("layers must be positive");
    if (o.kv_heads == 0) throw fail("kv_heads must be positive");
    if (o.head_dim == 0) throw fail("head_dim must be positive");
    if (o.element != element_type::f32)
      throw fail(std::string("element ") + to_string(o.element) + " is not supported (only f32)");
    const std::size_t max = std::numeric_limits<std::size_t>::max() / 8;
    std::size_t b = 2 * sizeof(float);
    for (const std::size_t f : {o.layers, o.kv_heads, o.head_dim, o.block_tokens}) {
      if (f > max / b) throw fail("layers * kv_heads * head_dim * block_tokens overflows");
      b *= f;
    }
    if (o.budget_bytes < b)
      throw fail("budget_bytes " + std::to_string(o.budget_bytes) + " is less than one block (" +
                 std::to_string(b) + " bytes: 2 * layers * kv_heads * head_dim * block_tokens * 4)");
    return o;
  }
  std::size_t block_count(const kv_cache_options& o) {
    block_bytes_ = 2 * sizeof(float) * o.layers * o.kv_heads * o.head_dim * o.block_tokens;
    return std::min<std::size_t>(o.budget_bytes / block_bytes_, detail::kv_block_pool::none - 1);
  }
  std::size_t block_layer_elems() const noexcept { return o_.kv_heads * o_.block_tokens * o_.head_dim; }

  std::size_t blocks_needed(const sequence& s, std::size_t n) const {
    if (n == 0) return 0;
    const std::size_t B = o_.block_tokens, len = s.tokens.size();
    const std::size_t grow = (len + n + B - 1) / B - (len + B - 1) / B;
    const bool cow = len % B != 0 && pool_.refs(s.blocks.back()) > 1;
    return grow + (cow ? 1 : 0);
  }

  std::uint32_t take_block() {
    bool evicted = false;
    const std::uint32_t b = pool_.allocate(evicted);
    if (evicted) ++stats_.evictions;
    return b;
  }

  kv_sequence_id new_sequence(const kv_salt& salt) {
    std::uint32_t index;
    if (!free_seqs_.empty()) {
      index = free_seqs_.back();
      free_seqs_.pop_back();
    } else {
      index = static_cast<std::uint32_t>(seqs_.size());
      seqs_.emplace_back();
    }
    sequence& s = seqs_[index];
    s.live = true;
    s.salt = salt;
    ++open_;
    return {index, s.generation};
  }

  sequence& get(kv_sequence_id id, const char* who) {
    return const_cast<sequence&>(static_cast<const kv_cache&>(*this).get(id, who));
  }
  const sequence& get(kv_sequence_id id, const char* who) const {
    if (!contains(id))
      throw kv_error(kv_errc::unknown_sequence,
                     std::string("frugal::kv_cache::") + who + ": sequence " + std::to_string(id.index) +
                         "." + std::to_string(id.generation) + " is not open (never opened, or released)");
    return seqs_[id.index];
  }

  kv_cache_options o_;
  std::size_t block_bytes_ = 0;
  detail::kv_block_pool pool_;
  std::unique_ptr<std::byte, free_deleter> storage_;
  float* base_ = nullptr;
  std::vector<sequence> seqs_;
  std::vector<std::uint32_t> free_seqs_;
  std::size_t open_ = 0;
  kv_cache_stats stats_{};
};

FRUGAL_END_NAMESPACE
