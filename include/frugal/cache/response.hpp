#pragma once
/// @file
/// @brief The response cache: a deterministic request's whole completion (greedy, or sampled with a seed
/// the caller chose) kept under a key of the model, the sampling parameters and the prompt's token ids, in
/// any frugal result cache (tinylfu_cache, lru_cache) or, across replicas, a redis_tier. A hit costs no
/// model step.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/cache/key.hpp"
#include "frugal/cache/weigher.hpp"
#include "frugal/cost/ledger.hpp"
#include "frugal/namespace.hpp"
#include "frugal/scheduler/options.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The version of the response key's parts (see response_key). Every change to them changes this
/// and every key; a Redis namespace shared by replicas should carry it and key_format_version, as
/// response_namespace_version() spells them.
inline constexpr unsigned response_key_version = 1;

/// @brief The version for redis_options::version of a response cache: the response key's and the key
/// encoding's versions, e.g. "r1k2", so that replicas of different formats never share values.
inline std::string response_namespace_version() {
  return "r" + std::to_string(response_key_version) + "k" + std::to_string(key_format_version);
}

/// @brief What a completion depends on. A completion is cacheable when it is deterministic: greedy
/// (temperature 0) or sampled with a seed the caller chose (draw n depends on the seed and n alone).
struct response_request {
  /// The model's identity: what makes its answers differ, e.g. the file's name or digest and the precision
  /// (only a batch-invariant precision answers one prompt the same way in every batch) and the adapter.
  std::string_view model;
  std::span<const kv_token> prompt;
  float temperature = 0;
  float top_p = 1;
  /// The seed the caller chose; none: a sampled request (temperature > 0) is not cacheable.
  std::optional<std::uint64_t> seed{};
  std::size_t max_tokens = 256;
  std::span<const kv_token> stop{};

  /// @brief The request of a scheduler's generation request; its seed counts only when `seeded` (the
  /// client chose it), since sampling_params::seed has a default.
  template <class TimePoint>
  static response_request of(std::string_view model, const basic_generation_request<TimePoint>& r,
                             bool seeded) {
    return {.model = model,
            .prompt = r.prompt,
            .temperature = r.sampling.temperature,
            .top_p = r.sampling.top_p,
            .seed = seeded ? std::optional<std::uint64_t>(r.sampling.seed) : std::nullopt,
            .max_tokens = r.max_tokens,
            .stop = r.stop};
  }
};

namespace detail {

inline void check_response_request(const response_request& r, const char* fn) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string("frugal::") + fn + ": request." + what);
  };
  if (r.model.empty()) fail("model must not be empty (it scopes the key)");
  if (!std::isfinite(r.temperature) || r.temperature < 0)
    fail("temperature must be finite and >= 0, not " + std::to_string(r.temperature));
  if (!(r.top_p > 0 && r.top_p <= 1)) fail("top_p must be in (0, 1], not " + std::to_string(r.top_p));
  if (r.max_tokens == 0) fail("max_tokens must be > 0");
}

// The key's parts, normalized so that requests that must give the same completion share a key: a greedy
// request ignores top_p and the seed, and stop ids are a set.
template <class F>
decltype(auto) with_response_key_parts(const response_request& r, F&& f) {
  const bool greedy = r.temperature == 0;
  std::vector<kv_token> stop(r.stop.begin(), r.stop.end());
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
  const std::uint8_t mode = greedy ? 0 : 1;
  const float temperature = greedy ? 0.0f : r.temperature;
  const float top_p = greedy ? 1.0f : r.top_p;
  const std::uint64_t seed = greedy ? 0 : r.seed.value_or(0);
  return f(std::string_view("frugal.response"), std::uint32_t{response_key_version}, r.model, r.prompt, mode,
           temperature, top_p, seed, std::uint64_t{r.max_tokens}, stop);
}

}  // namespace detail

/// @brief True when the request's completion is deterministic: greedy, or seeded.
inline bool response_cacheable(const response_request& r) {
  detail::check_response_request(r, "response_cacheable");
  return r.temperature == 0 || r.seed.has_value();
}

/// @brief The cache key of a request's completion, or nullopt when it is not cacheable (temperature > 0
/// without a seed). Stable across processes and builds of one key format: XXH3-128 of the tagged parts
/// ("frugal.response", response_key_version, model, prompt ids, greedy or seeded, temperature, top_p, seed,
/// max_tokens, sorted stop ids), with temperature, top_p and seed ignored for a greedy request. Throws
/// std::invalid_argument naming the field for a request no model could run.
inline std::optional<key128> response_key(const response_request& r) {
  if (!response_cacheable(r)) return std::nullopt;
  return detail::with_response_key_parts(r, [](const auto&... parts) { return hash_key(parts...); });
}

/// @brief The bytes response_key hashes, for tests and to see why two processes' keys differ.
inline std::vector<std::byte> response_key_bytes(const response_request& r) {
  detail::check_response_request(r, "response_key_bytes");
  return detail::with_response_key_parts(r, [](const auto&... parts) { return key_bytes(parts...); });
}

/// @brief A whole completion as the response cache keeps it: the generated tokens, why it finished, and
/// its usage (prompt tokens; completion tokens, which count a stop token as the scheduler does).
struct completion {
  std::vector<kv_token> tokens;  ///< generated tokens, a stop token excluded
  finish_reason reason = finish_reason::length;
  std::optional<kv_token> stop_token{};  ///< set exactly when reason is stop
  std::uint64_t prompt_tokens = 0;

  std::uint64_t completion_tokens() const noexcept { return tokens.size() + (stop_token ? 1 : 0); }

  /// @brief The completion of a scheduler's finished sequence.
  static completion of(const generation& g) {
    return {
        .tokens = g.tokens, .reason = g.reason, .stop_token = g.stop_token, .prompt_tokens = g.prompt_tokens};
  }
  friend bool operator==(const completion&, const completion&) = default;
};

/// @brief A completion's bytes, so that a cache of them can be bounded by max_bytes.
template <>
struct default_weigher<completion> {
  std::size_t operator()(const completion& c) const noexcept {
    return sizeof(completion) + c.tokens.capacity() * sizeof(kv_token);
  }
};

/// @brief The byte format of a completion, little-endian, 32 bytes then the tokens:
///   magic "FRCC" | u16 format (1) | u8 reason (0 stop, 1 length) | u8 flags (bit 0: a stop token) |
///   i32 stop token (0 without one) | u64 prompt tokens | u64 completion tokens | u32 n | n × i32 tokens.
/// parse() refuses anything else with std::invalid_argument naming what is wrong and at which byte. It is
/// also redis_tier's codec for completions (type_tag, version, encode, decode).
struct completion_codec {
  static constexpr std::uint16_t format = 1;
  static constexpr std::size_t header_size = 32;
  static constexpr std::uint64_t type_tag = 0x6672756761'6c2e63ull;  // "frugal.c"
  static constexpr std::uint32_t version = format;

  static void encode(const completion& c, std::string& out) {
    if (c.tokens.size() > 0xffffffffull)
      throw std::length_error("frugal::completion_codec::encode: over 2^32 - 1 tokens");
    if ((c.reason == finish_reason::stop) != c.stop_token.has_value())
      throw std::invalid_argument(
          "frugal::completion_codec::encode: a completion has a stop token exactly when its reason is stop");
    out.reserve(out.size() + header_size + 4 * c.tokens.size());
    out.append("FRCC", 4);
    put(out, format, 2);
    put(out, c.reason == finish_reason::stop ? 0 : 1, 1);
    put(out, c.stop_token ? 1 : 0, 1);
    put(out, static_cast<std::uint32_t>(c.stop_token.value_or(0)), 4);
    put(out, c.prompt_tokens, 8);
    put(out, c.completion_tokens(), 8);
    put(out, c.tokens.size(), 4);
    for (kv_token t : c.tokens) put(out, static_cast<std::uint32_t>(t), 4);
  }
  static std::string encode(const completion& c) {
    std::string out;
    encode(c, out);
    return out;
  }

  /// @brief The completion in `in`, which must be exactly one encoded completion.
  static completion parse(std::string_view in) {
    auto fail = [&](std::size_t at, const std::string& what) { refuse(in, at, what); };
    if (in.size() < header_size)
      fail(in.size(),
           "truncated header: " + std::to_string(in.size()) + " bytes, need " + std::to_string(header_size));
    if (in.substr(0, 4) != "FRCC") fail(0, "bad magic (not a frugal completion)");
    if (get(in, 4, 2) != format) fail(4, "unknown format " + std::to_string(get(in, 4, 2)));
    const std::uint64_t reason = get(in, 6, 1), flags = get(in, 7, 1);
    if (reason > 1) fail(6, "unknown finish reason " + std::to_string(reason));
    if (flags > 1) fail(7, "unknown flags " + std::to_string(flags));
    const bool has_stop = flags == 1;
    if (has_stop != (reason == 0)) fail(7, "a stop token must come with reason stop, and only with it");
    const auto stop = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(in, 8, 4)));
    if (has_stop ? stop < 0 : stop != 0) fail(8, "bad stop token " + std::to_string(stop));
    completion c;
    c.reason = reason == 0 ? finish_reason::stop : finish_reason::length;
    if (has_stop) c.stop_token = stop;
    c.prompt_tokens = get(in, 12, 8);
    const std::uint64_t usage = get(in, 20, 8);
    const std::uint64_t n = get(in, 28, 4);
    if (in.size() - header_size != 4 * n)
      fail(in.size() < header_size + 4 * n ? in.size() : header_size + 4 * n,
           std::to_string(n) + " tokens need " + std::to_string(header_size + 4 * n) + " bytes, not " +
               std::to_string(in.size()));
    if (usage != n + (has_stop ? 1 : 0))
      fail(20, "completion tokens " + std::to_string(usage) + " do not match " + std::to_string(n) +
                   " tokens" + (has_stop ? " and a stop token" : ""));
    c.tokens.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      c.tokens[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(in, header_size + 4 * i, 4)));
      if (c.tokens[i] < 0) fail(header_size + 4 * i, "negative token id " + std::to_string(c.tokens[i]));
    }
    return c;
  }

  /// @brief parse() without the exception, for redis_tier: nullopt on bad bytes.
  static std::optional<completion> decode(std::string_view in) {
    try {
      return parse(in);
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  }

 private:
  [[noreturn]] static void refuse(std::string_view in, std::size_t at, const std::string& what) {
    throw std::invalid_argument("frugal::completion_codec::parse: " + what + " at byte " +
                                std::to_string(at) + " (of " + std::to_string(in.size()) + ")");
  }
  static void put(std::string& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  static std::uint64_t get(std::string_view in, std::size_t at, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
    return v;
  }
};

/// @brief A response cache's counters. lookups == hits + misses; uncacheable requests are not lookups.
struct response_cache_stats {
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;         ///< served from the store (or another caller's generation of one key)
  std::uint64_t misses = 0;       ///< not in the store (get_or_generate then generates and stores)
  std::uint64_t uncacheable = 0;  ///< generated without the store (temperature > 0 without a seed)
};

/// @brief Options of a response_cache.
struct response_cache_options {
  /// Where hits are recorded (record_response_hit: what a hit saved, in prompt and generated tokens); null
  /// for nowhere. Give the store no ledger of its own, or its hits are counted twice.
  cost::ledger<>* ledger = nullptr;
};

/// @brief Completions of deterministic requests, kept in `Store`: a basic_cache<completion, ...>
/// (tinylfu_cache, lru_cache) or a redis_tier<completion, completion_codec> shared by replicas. Concurrent
/// requests with one key generate once (the store's single flight). Thread-safe as its store is.
template <class Store>
class response_cache {
 public:
  using pointer = std::shared_ptr<const completion>;
  static_assert(std::is_same_v<typename Store::value_type, completion>,
                "frugal::response_cache: the store must hold frugal::completion values");

  /// @brief What get_or_generate did: the completion, whether the store had it (hit), and whether the
  /// request could be cached at all.
  struct result {
    pointer value;
    bool hit = false;
    bool cacheable = false;
  };

  explicit response_cache(Store& store, response_cache_options options = {})
      : store_(store), options_(options) {}
  response_cache(const response_cache&) = delete;
  response_cache& operator=(const response_cache&) = delete;

  /// @brief The request's completion: from the store, or from generate() (which returns a completion and
  /// runs the model), stored when the request is cacheable. A hit is recorded in the ledger under
  /// `feature` when both are given. An exception from generate reaches every caller waiting on its key, and
  /// nothing is stored.
  template <class F>
  result get_or_generate(const response_request& request, F&& generate, cost::feature_id feature = {}) {
    static_assert(std::is_convertible_v<std::invoke_result_t<F&>, completion>,
                  "frugal::response_cache::get_or_generate: generate() must return a frugal::completion");
    const std::optional<key128> key = response_key(request);
    if (!key) {
      uncacheable_.fetch_add(1, std::memory_order_relaxed);
      return {std::make_shared<const completion>(generate()), false, false};
    }
    lookups_.fetch_add(1, std::memory_order_relaxed);
    bool ran = false;
    pointer p = store_.get_or_compute(*key, [&]() -> completion {
      ran = true;
      return generate();
    });
    (ran ? misses_ : hits_).fetch_add(1, std::memory_order_relaxed);
    if (!ran) record_hit(*p, feature);
    return {std::move(p), !ran, true};
  }

  /// @brief The stored completion of a cacheable request, or null (a miss, or not cacheable).
  pointer get(const response_request& request, cost::feature_id feature = {}) {
    const std::optional<key128> key = response_key(request);
    if (!key) {
      uncacheable_.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    lookups_.fetch_add(1, std::memory_order_relaxed);
    pointer p = store_.get(*key);
    (p ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
    if (p) record_hit(*p, feature);
    return p;
  }

  /// @brief Stores a generated completion of a cacheable request; false when the request is not cacheable.
  bool put(const response_request& request, completion c) {
    const std::optional<key128> key = response_key(request);
    if (!key) return false;
    store_.put(*key, std::move(c));
    return true;
  }

  response_cache_stats stats() const {
    return {lookups_.load(std::memory_order_relaxed), hits_.load(std::memory_order_relaxed),
            misses_.load(std::memory_order_relaxed), uncacheable_.load(std::memory_order_relaxed)};
  }
  Store& store() noexcept { return store_; }

 private:
  void record_hit(const completion& c, cost::feature_id feature) {
    if (options_.ledger && feature.value != UINT32_MAX)
      options_.ledger->record_response_hit(feature, c.prompt_tokens, c.completion_tokens());
  }

  Store& store_;
  response_cache_options options_;
  std::atomic<std::uint64_t> lookups_{0}, hits_{0}, misses_{0}, uncacheable_{0};
};

FRUGAL_END_NAMESPACE
