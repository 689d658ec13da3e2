#pragma once

// <immintrin.h> first, under frugal's pragmas (see frugal/quant/detail/eigen.hpp): hnswlib includes it too,
// and a TU built with -march=native on AVX-512 then trips GCC 12's false "uninitialized" warnings (bug
// 105593).
#include "frugal/quant/detail/cpu.hpp"

#include <hnswlib/hnswlib.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/cache/weigher.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The default similarity threshold, measured: on the project's fixture of paraphrase and
/// near-miss pairs (tests/semantic/fixtures/pairs.jsonl), all-MiniLM-L6-v2 reaches 99% precision on one
/// half only at cosine 0.971, rounded up here. Near misses that differ by a word ("open" / "close")
/// score as high as paraphrases, so this default answers near-duplicates only, and few paraphrases
/// (benchmarks/semantic/results). Another encoder, or other traffic, needs its own measurement.
inline constexpr float semantic_default_threshold = 0.98f;

/// @brief How a semantic_cache lookup was answered.
enum class semantic_match {
  exact,     ///< by the exact key
  semantic,  ///< by the nearest embedding, at or above the threshold
};

/// @brief Options of a semantic_cache; a plain aggregate, e.g. `{.dimension = 384, .max_entries = 100'000}`.
template <class V>
struct semantic_options {
  /// Length of every embedding.
  std::size_t dimension = 384;
  /// The lowest cosine similarity that is a hit. Raise it where a wrong answer costs more than a miss;
  /// measure before lowering it.
  float threshold = semantic_default_threshold;
  /// Thresholds for namespaces that tolerate a different risk; the others use threshold.
  std::map<std::string, float, std::less<>> namespace_thresholds{};
  /// Entry limit over all namespaces; required, since it also bounds each namespace's index.
  std::size_t max_entries = 0;
  /// Byte limit on the values as weighed (not counting the index); 0 for none. A heavier value is not
  /// cached.
  std::size_t max_bytes = 0;
  /// The bytes of a value: frugal::default_weigher<V> where that is defined, else sizeof(V).
  std::function<std::size_t(const V&)> weigher{};
  /// Time to live; 0 for none. put may override it per entry.
  std::chrono::nanoseconds ttl{0};
  /// HNSW links per node. More raise recall and memory (8 bytes per link at the base layer).
  std::size_t hnsw_m = 16;
  /// Candidates kept while inserting. More build a better graph, slower.
  std::size_t hnsw_ef_construction = 200;
  /// Candidates kept while searching. Raise it if recall@1 falls short of what the benchmark shows.
  std::size_t hnsw_ef_search = 64;
  /// Seed of HNSW's level generator, for reproducible graphs.
  std::size_t seed = 100;
};

/// @brief A hit: the value, the cosine similarity of its embedding to the query's (1 for an exact
/// hit) and how it was found.
template <class V>
struct semantic_hit {
  std::shared_ptr<const V> value;
  float similarity = 0;
  semantic_match match = semantic_match::exact;
};

/// @brief A snapshot of a semantic_cache's counters.
struct semantic_stats {
  static constexpr std::size_t histogram_buckets = 20;
  /// Bucket i counts semantic hits with similarity in [histogram_low + i * histogram_width, + width);
  /// the first also takes anything lower, the last includes 1.
  static constexpr float histogram_low = 0.5f;
  static constexpr float histogram_width = 0.025f;

  std::uint64_t exact_hits = 0;
  std::uint64_t semantic_hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;
  std::uint64_t replacements = 0;       ///< puts on an exact key already cached
  std::uint64_t rejected_oversize = 0;  ///< values heavier than max_bytes
  std::uint64_t evictions_size = 0;     ///< pushed out by max_entries or max_bytes
  std::uint64_t evictions_expired = 0;  ///< TTL ran out
  std::array<std::uint64_t, histogram_buckets> similarity_histogram{};  ///< of semantic hits
  std::size_t entries = 0;
  std::size_t bytes = 0;           ///< sum of the weights of the live values
  std::size_t namespaces = 0;      ///< namespaces with an index
  std::size_t index_slots = 0;     ///< HNSW elements over all namespaces, live or deleted for reuse
  std::size_t index_deleted = 0;   ///< of those, marked deleted and waiting for reuse
  std::size_t index_bytes = 0;     ///< HNSW's memory: vectors, links, label map (an estimate)
  std::size_t metadata_bytes = 0;  ///< the cache's own: LRU nodes, exact-key maps (an estimate)
  double hit_ratio = 0;            ///< (exact + semantic hits) / lookups, 0 before any lookup
};

/// @brief A cache of results for similar inputs: each entry is keyed by an embedding (and optionally
/// an exact key beside it), within a namespace.
///
/// get tries the exact key first, then the nearest cached embedding by cosine (HNSW over inner
/// products of the normalised vectors); the nearest is a hit only at or above the namespace's
/// threshold. Namespaces never answer for each other: each has its own index and exact-key map.
///
/// One LRU order over all entries enforces max_entries and max_bytes. An evicted or expired entry is
/// mark-deleted in its index, so no search returns it, and its slot is reused by the next insert into
/// that namespace (Debian's hnswlib 0.6 has no replace_deleted: the slot's label is re-added, which
/// unmarks it and relinks the node at its new vector). An index thus never holds more than max_entries
/// slots; it starts at 1024 (about 2 MB at 384 dimensions) and doubles up to that. Namespaces are meant
/// to be few (features, not users): each keeps its index, and its slots, for the cache's lifetime.
///
/// Thread-safe: one mutex guards everything, searches included, so lookups do not run in parallel. A
/// lookup at 100k entries took 0.26 ms (clustered vectors) to 1 ms (uniformly random ones) on a shared
/// 2-core EPYC (benchmarks/semantic); shard across caches if that is the bottleneck.
///
/// hnswlib 0.6's SSE code prefetches one link past a full upper-layer link list, reading up to 3 bytes
/// past its malloc block (nmslib/hnswlib#107); glibc's rounding keeps that inside the block, but
/// AddressSanitizer builds should define NO_MANUAL_VECTORIZATION, as frugal's tests do.
///
/// Embeddings must have options.dimension finite components and a non-zero norm (std::invalid_argument
/// otherwise); they are normalised here, so callers need not.
///
/// @tparam Clock the clock for TTLs, e.g. frugal::manual_clock in tests.
template <class V, class Clock = std::chrono::steady_clock>
class semantic_cache {
  static_assert(std::is_integral_v<typename Clock::duration::rep>,
                "frugal::semantic_cache: Clock::duration must count in integers");

 public:
  using value_type = V;
  using pointer = std::shared_ptr<const V>;
  using options = semantic_options<V>;
  using hit = semantic_hit<V>;
  using clock_type = Clock;

  /// @brief Throws std::invalid_argument naming the field when the options are unusable.
  explicit semantic_cache(options opts, Clock clock = {}) : opts_(std::move(opts)), clock_(std::move(clock)) {
    validate();
    space_ = std::make_unique<hnswlib::InnerProductSpace>(opts_.dimension);
  }
  semantic_cache(const semantic_cache&) = delete;
  semantic_cache& operator=(const semantic_cache&) = delete;

  /// @brief The entry for embedding in namespace ns: the nearest at or above the threshold, or none.
  std::optional<hit> get(std::span<const float> embedding, std::string_view ns = {}) {
    return lookup(embedding, nullptr, ns);
  }
  /// @brief As get, trying the exact key first.
  std::optional<hit> get(std::span<const float> embedding, const key128& exact, std::string_view ns = {}) {
    return lookup(embedding, &exact, ns);
  }

  /// @brief Caches value under embedding in namespace ns. ttl 0 takes the cache's ttl and
  /// duration::max() means never. Returns false if the value is too heavy to cache.
  bool put(std::span<const float> embedding, V value, std::string_view ns = {},
           std::chrono::nanoseconds ttl = {}) {
    return store(embedding, nullptr, std::move(value), ns, ttl);
  }
  /// @brief As put, also under an exact key; a put on a key already cached replaces its entry.
  bool put(std::span<const float> embedding, const key128& exact, V value, std::string_view ns = {},
           std::chrono::nanoseconds ttl = {}) {
    return store(embedding, &exact, std::move(value), ns, ttl);
  }

  /// @brief The threshold that applies to namespace ns.
  float threshold(std::string_view ns = {}) const {
    const auto it = opts_.namespace_thresholds.find(ns);
    return it == opts_.namespace_thresholds.end() ? opts_.threshold : it->second;
  }

  /// @brief Sets the candidates kept while searching (options.hnsw_ef_search) for every namespace, now
  /// and later: the knob between lookup time and recall.
  void set_ef_search(std::size_t ef) {
    if (ef == 0) throw std::invalid_argument("frugal::semantic_cache::set_ef_search: ef must be at least 1");
    std::lock_guard lock(mutex_);
    opts_.hnsw_ef_search = ef;
    for (auto& [name, sp] : spaces_) sp->index->setEf(ef);
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return lru_.size();
  }

  semantic_stats stats() const {
    std::lock_guard lock(mutex_);
    semantic_stats s = stats_;
    s.entries = lru_.size();
    s.bytes = bytes_;
    s.namespaces = spaces_.size();
    for (const auto& [name, sp] : spaces_) {
      const auto& h = *sp->index;
      s.index_slots += h.cur_element_count;
      s.index_deleted += sp->free_labels.size();
      std::size_t upper = 0;
      for (std::size_t i = 0; i < h.cur_element_count; ++i) {
        if (h.element_levels_[i] > 0) upper += h.size_links_per_element_ * h.element_levels_[i] + 1;
      }
      // Base layer, upper layers, per-slot level, lock and list pointer, and the label map's nodes.
      s.index_bytes +=
          h.max_elements_ * (h.size_data_per_element_ + sizeof(int) + sizeof(std::mutex) + sizeof(void*)) +
          upper + h.label_lookup_.size() * (sizeof(void*) * 2 + 2 * sizeof(std::size_t)) +
          h.label_lookup_.bucket_count() * sizeof(void*) + h.max_elements_ * sizeof(short);
      s.metadata_bytes += sp->by_label.capacity() * sizeof(entry*) + sp->free_labels.capacity() * 4 +
                          sp->exact.size() * (sizeof(void*) * 2 + sizeof(key128) + sizeof(void*)) +
                          sp->exact.bucket_count() * sizeof(void*);
    }
    s.metadata_bytes += lru_.size() * (sizeof(entry) + 2 * sizeof(void*)) + sizeof(*this);
    const std::uint64_t lookups = s.exact_hits + s.semantic_hits + s.misses;
    s.hit_ratio =
        lookups ? static_cast<double>(s.exact_hits + s.semantic_hits) / static_cast<double>(lookups) : 0;
    return s;
  }

 private:
  struct space;
  struct entry {
    space* sp = nullptr;
    std::uint32_t label = 0;
    bool has_key = false;
    key128 key{};
    pointer value;
    std::size_t weight = 0;
    typename Clock::time_point expiry = Clock::time_point::max();
    typename std::list<entry>::iterator self{};
  };
  using lru_list = std::list<entry>;
  using lru_iter = typename lru_list::iterator;

  struct space {
    float threshold = 0;
    std::unique_ptr<hnswlib::HierarchicalNSW<float>> index;
    std::vector<entry*> by_label;            // null where the slot is free
    std::vector<std::uint32_t> free_labels;  // mark-deleted, to be reused first
    std::uint32_t next_label = 0;            // labels never used yet start here
    std::unordered_map<key128, lru_iter> exact;
    std::size_t live() const noexcept { return next_label - free_labels.size(); }
  };

  static constexpr std::size_t initial_slots = 1024;

  void validate() const {
    const auto bad = [](const std::string& what) {
      throw std::invalid_argument("frugal::semantic_cache: options." + what);
    };
    if (opts_.dimension == 0 || opts_.dimension > 65536) bad("dimension must be in 1 .. 65536");
    const auto check_threshold = [&](float t, const std::string& name) {
      if (!(t > 0.0f && t <= 1.0f)) bad(name + " must be in (0, 1], not " + std::to_string(t));
    };
    check_threshold(opts_.threshold, "threshold");
    for (const auto& [ns, t] : opts_.namespace_thresholds)
      check_threshold(t, "namespace_thresholds[\"" + ns + "\"]");
    if (opts_.max_entries == 0 || opts_.max_entries >= (std::size_t{1} << 31))
      bad("max_entries must be in 1 .. 2^31 - 1 (it bounds the index)");
    if (opts_.ttl.count() < 0) bad("ttl must not be negative");
    if (opts_.hnsw_m < 2 || opts_.hnsw_m > 256) bad("hnsw_m must be in 2 .. 256");
    if (opts_.hnsw_ef_construction == 0) bad("hnsw_ef_construction must be at least 1");
    if (opts_.hnsw_ef_search == 0) bad("hnsw_ef_search must be at least 1");
  }

  // Checks the embedding and returns it normalised to unit length.
  std::vector<float> normalised(std::span<const float> e, const char* fn) const {
    const auto bad = [&](const std::string& what) {
      throw std::invalid_argument(std::string("frugal::semantic_cache::") + fn + ": embedding" + what);
    };
    if (e.size() != opts_.dimension)
      bad(" has " + std::to_string(e.size()) + " dimensions, expected " + std::to_string(opts_.dimension));
    double sum = 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
      if (!std::isfinite(e[i])) bad("[" + std::to_string(i) + "] is not finite (NaN or infinity)");
      sum += static_cast<double>(e[i]) * e[i];
    }
    if (!(sum > 1e-30)) bad(" has zero norm");
    const double inv = 1.0 / std::sqrt(sum);
    std::vector<float> out(e.size());
    for (std::size_t i = 0; i < e.size(); ++i) out[i] = static_cast<float>(e[i] * inv);
    return out;
  }

  std::size_t weigh(const V& v) const {
    if (opts_.weigher) return opts_.weigher(v);
    if constexpr (std::is_invocable_r_v<std::size_t, default_weigher<V>, const V&>) {
      return default_weigher<V>{}(v);
    } else {
      return sizeof(V);
    }
  }

  typename Clock::time_point expiry_for(std::chrono::nanoseconds ttl) const {
    if (ttl.count() < 0) throw std::invalid_argument("frugal::semantic_cache::put: ttl must not be negative");
    if (ttl.count() == 0) ttl = opts_.ttl;
    if (ttl.count() == 0 || ttl == std::chrono::nanoseconds::max()) return Clock::time_point::max();
    const auto now = clock_.now();
    const auto d = std::chrono::duration_cast<typename Clock::duration>(ttl);
    if (d >= Clock::time_point::max() - now) return Clock::time_point::max();
    return now + d;
  }

  space* find_space(std::string_view ns) {
    const auto it = spaces_.find(ns);
    return it == spaces_.end() ? nullptr : it->second.get();
  }

  space& space_for(std::string_view ns) {
    if (space* s = find_space(ns)) return *s;
    auto sp = std::make_unique<space>();
    sp->threshold = threshold(ns);
    const std::size_t slots = std::min(opts_.max_entries, initial_slots);
    sp->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(space_.get(), slots, opts_.hnsw_m,
                                                                  opts_.hnsw_ef_construction, opts_.seed);
    sp->index->setEf(opts_.hnsw_ef_search);
    sp->by_label.assign(slots, nullptr);
    return *spaces_.emplace(std::string(ns), std::move(sp)).first->second;
  }

  // Removes an entry: its slot is mark-deleted, so no search can return it, and queued for reuse.
  void remove(lru_iter it) {
    entry& e = *it;
    space& s = *e.sp;
    s.index->markDelete(e.label);
    s.by_label[e.label] = nullptr;
    s.free_labels.push_back(e.label);
    if (e.has_key) s.exact.erase(e.key);
    bytes_ -= e.weight;
    lru_.erase(it);
  }

  bool expired(const entry& e, typename Clock::time_point now) const { return e.expiry <= now; }

  std::optional<hit> found(lru_iter it, float similarity, semantic_match match) {
    lru_.splice(lru_.begin(), lru_, it);
    if (match == semantic_match::exact) {
      ++stats_.exact_hits;
    } else {
      ++stats_.semantic_hits;
      const float x = (similarity - semantic_stats::histogram_low) / semantic_stats::histogram_width;
      const auto b = x <= 0 ? std::size_t{0}
                            : std::min(static_cast<std::size_t>(x), semantic_stats::histogram_buckets - 1);
      ++stats_.similarity_histogram[b];
    }
    return hit{it->value, similarity, match};
  }

  std::optional<hit> lookup(std::span<const float> embedding, const key128* exact, std::string_view ns) {
    const std::vector<float> q = normalised(embedding, "get");
    std::lock_guard lock(mutex_);
    space* s = find_space(ns);
    if (!s) {
      ++stats_.misses;
      return std::nullopt;
    }
    const auto now = clock_.now();
    if (exact) {
      const auto it = s->exact.find(*exact);
      if (it != s->exact.end()) {
        if (!expired(*it->second, now)) return found(it->second, 1.0f, semantic_match::exact);
        remove(it->second);
        ++stats_.evictions_expired;
      }
    }
    // An expired nearest entry is removed and the search repeated, so a live entry behind it is found.
    while (s->live() != 0) {
      auto result = s->index->searchKnn(q.data(), 1);
      if (result.empty()) break;
      const float similarity = 1.0f - result.top().first;
      const auto label = static_cast<std::uint32_t>(result.top().second);
      entry* e = s->by_label[label];
      if (e == nullptr) throw std::logic_error("frugal::semantic_cache: the index returned a deleted slot");
      if (expired(*e, now)) {
        remove(e->self);
        ++stats_.evictions_expired;
        continue;
      }
      if (similarity < s->threshold) break;
      return found(e->self, similarity, semantic_match::semantic);
    }
    ++stats_.misses;
    return std::nullopt;
  }

  bool store(std::span<const float> embedding, const key128* exact, V value, std::string_view ns,
             std::chrono::nanoseconds ttl) {
    const std::vector<float> v = normalised(embedding, "put");
    const auto expiry = expiry_for(ttl);
    const std::size_t w = weigh(value);
    auto ptr = std::make_shared<const V>(std::move(value));
    std::lock_guard lock(mutex_);
    ++stats_.puts;
    if (opts_.max_bytes != 0 && w > opts_.max_bytes) {
      ++stats_.rejected_oversize;
      return false;
    }
    space& s = space_for(ns);
    if (exact) {
      const auto it = s.exact.find(*exact);
      if (it != s.exact.end()) {
        // The same slot takes the new vector: hnswlib relinks it in place.
        entry& e = *it->second;
        s.index->addPoint(v.data(), e.label);
        bytes_ -= e.weight;
        e.value = std::move(ptr);
        e.weight = w;
        e.expiry = expiry;
        bytes_ += w;
        lru_.splice(lru_.begin(), lru_, it->second);
        ++stats_.replacements;
        evict_to_fit(0, &e);
        return true;
      }
    }
    evict_to_fit(w, nullptr);
    const std::uint32_t label = take_label(s);
    try {
      s.index->addPoint(v.data(), label);
    } catch (...) {
      s.free_labels.push_back(label);
      throw;
    }
    lru_.push_front(entry{&s, label, exact != nullptr, exact ? *exact : key128{}, std::move(ptr), w, expiry});
    lru_.front().self = lru_.begin();
    s.by_label[label] = &lru_.front();
    if (exact) s.exact.emplace(*exact, lru_.begin());
    bytes_ += w;
    return true;
  }

  // Evicts from the LRU end until one more entry of weight w fits; keep is never evicted.
  void evict_to_fit(std::size_t w, const entry* keep) {
    const auto now = clock_.now();
    const std::size_t room = keep ? 0 : 1;
    while (!lru_.empty() && (lru_.size() + room > opts_.max_entries ||
                             (opts_.max_bytes != 0 && bytes_ + w > opts_.max_bytes))) {
      auto victim = std::prev(lru_.end());
      if (&*victim == keep) break;
      if (expired(*victim, now)) {
        ++stats_.evictions_expired;
      } else {
        ++stats_.evictions_size;
      }
      remove(victim);
    }
  }

  // A slot for a new entry: a deleted one first, then a fresh one, growing the index by doubling.
  std::uint32_t take_label(space& s) {
    if (!s.free_labels.empty()) {
      const std::uint32_t label = s.free_labels.back();
      s.free_labels.pop_back();
      return label;
    }
    auto& h = *s.index;
    if (s.next_label == h.max_elements_) {
      // Live entries of this namespace are fewer than max_entries here (evict_to_fit ran), so a full
      // index with no deleted slot is below max_entries.
      const std::size_t grown = std::min(opts_.max_entries, 2 * h.max_elements_);
      h.resizeIndex(grown);
      s.by_label.resize(grown, nullptr);
    }
    return s.next_label++;
  }

  options opts_;
  Clock clock_;
  std::unique_ptr<hnswlib::InnerProductSpace> space_;
  mutable std::mutex mutex_;
  lru_list lru_;
  std::map<std::string, std::unique_ptr<space>, std::less<>> spaces_;
  std::size_t bytes_ = 0;
  semantic_stats stats_;
};

FRUGAL_END_NAMESPACE
