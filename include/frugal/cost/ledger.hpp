#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/cost/detail/stripe.hpp"
#include "frugal/cost/histogram.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/cost/snapshot.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {

/// @brief An interned feature; get one from ledger::feature().
struct feature_id {
  std::uint32_t value = UINT32_MAX;
  friend constexpr bool operator==(feature_id, feature_id) = default;
};

/// @brief The longest duration one record may carry (busy, latency, saved, load): a day. Longer ones are
/// rejected as bad input, which keeps every sum far from overflow (and sums saturate regardless).
inline constexpr std::chrono::nanoseconds max_record_duration = std::chrono::hours(24);

/// @brief Options of a ledger.
struct ledger_options {
  /// GPU hourly prices per class. Every device's class must be here, with a price > 0 for its billing.
  std::vector<gpu_price> prices;
  /// The devices (or replicas) paid for from the ledger's start; a device id is an index here.
  std::vector<device_spec> devices;
  /// Most distinct features. Features become Prometheus labels, so keep them a small set of names such as
  /// chat or search; raise this only for a few more features, never for per-user or per-request values.
  std::size_t max_features = 32;
  /// What happens to idle cost; none reports it apart, as OpenCost does by default.
  idle_sharing share_idle = idle_sharing::none;
  /// Correction for coordinated omission: when a closed-loop client sends one request per interval, a latency
  /// of k intervals also records the k−1 requests it held back. Zero turns it off.
  std::chrono::nanoseconds expected_interval{0};
  /// Latencies above this are counted at this value; it sizes the histograms (one hour: ~270 kB per feature).
  std::chrono::nanoseconds latency_highest = std::chrono::hours(1);
  /// Alert thresholds, checked by snapshot().
  thresholds alerts{};
};

/// @brief One batch run on a device.
struct batch_record {
  feature_id feature;
  std::size_t device = 0;
  std::chrono::nanoseconds busy{0};  ///< GPU-busy time of the run
  std::uint32_t batch_size = 1;
  std::uint32_t capacity = 0;  ///< the batch's limit (the batcher's max_batch), for fill; 0 when unknown
  std::uint64_t tokens_in = 0;
  std::uint64_t tokens_out = 0;
};

/// @brief One generation (a decoder's request that reached the model): its tokens, by the caller that ran
/// it (e.g. from frugal::generation: prompt_tokens, cached_tokens, tokens.size() plus a stop token).
struct generation_record {
  feature_id feature;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_prompt_tokens = 0;  ///< of prompt_tokens, served from the prefix cache
  std::uint64_t generated_tokens = 0;
  /// Recorded into the TTFT histogram when set (or call record_time_to_first_token when it happens).
  std::optional<std::chrono::nanoseconds> time_to_first_token{};
};

/// @brief A thread-safe record of GPU time and requests per feature, fed by the user's inference loop,
/// that says what each feature costs, what idle GPU-hours cost, and what batching and caching saved.
///
/// Recording is lock-free and costs a few plain stores into a per-thread stripe (plus one relaxed atomic
/// increment in the feature's latency histogram); snapshot() sums the stripes under a mutex. Each thread that
/// records gets its own stripe for the ledger's lifetime, so feed it from long-lived threads (a pool).
/// Wall time from the ledger's start on `Clock` is what each device is paid for.
template <class Clock = std::chrono::steady_clock>
class ledger {
 public:
  using clock_type = Clock;
  using snapshot_type = ledger_snapshot;

  /// @brief Validates the options (std::invalid_argument naming the field) and starts the clock.
  explicit ledger(ledger_options options, Clock clock = {})
      : options_(std::move(options)), clock_(std::move(clock)), id_(detail::serial_source.fetch_add(1)) {
    const char* who = "frugal::cost::ledger: options.";
    if (options_.devices.empty()) throw std::invalid_argument(std::string(who) + "devices must not be empty");
    if (options_.max_features == 0 || options_.max_features > 4096)
      throw std::invalid_argument(std::string(who) + "max_features must be in 1..4096");
    if (options_.expected_interval.count() < 0)
      throw std::invalid_argument(std::string(who) + "expected_interval must not be negative");
    if (options_.latency_highest < std::chrono::microseconds(3))
      throw std::invalid_argument(std::string(who) + "latency_highest must be at least 3us");
    const thresholds& th = options_.alerts;
    const std::pair<const char*, double> ratios[] = {{"utilization_low", th.utilization_low},
                                                     {"utilization_high", th.utilization_high},
                                                     {"memory_high", th.memory_high},
                                                     {"queue_high", th.queue_high}};
    for (const auto& [name, v] : ratios)
      if (!std::isfinite(v) || v < 0)
        throw std::invalid_argument(std::string(who) + "alerts." + name + " must be finite and >= 0, not " +
                                    std::to_string(v));
    const std::pair<const char*, std::chrono::nanoseconds> spans[] = {
        {"utilization_window", th.utilization_window},
        {"memory_window", th.memory_window},
        {"p99_max", th.p99_max}};
    for (const auto& [name, v] : spans)
      if (v.count() < 0)
        throw std::invalid_argument(std::string(who) + "alerts." + name + " must not be negative");
    for (std::size_t d = 0; d < options_.devices.size(); ++d)
      if (!detail::printable_utf8(options_.devices[d].name) ||
          !detail::printable_utf8(options_.devices[d].gpu_class))
        throw std::invalid_argument(std::string(who) + "devices[" + std::to_string(d) +
                                    "]: name and gpu_class must be valid UTF-8 without control characters");
    auto cfg = std::make_shared<detail::ledger_config>();
    cfg->devices = options_.devices;
    cfg->share = options_.share_idle;
    cfg->alerts = options_.alerts;
    std::optional<currency> cur;
    for (std::size_t d = 0; d < options_.devices.size(); ++d) {
      const device_spec& spec = options_.devices[d];
      const std::string where = std::string(who) + "devices[" + std::to_string(d) + "]";
      const gpu_price* p = nullptr;
      for (const auto& gp : options_.prices)
        if (gp.gpu_class == spec.gpu_class) p = &gp;
      if (!p)
        throw std::invalid_argument(where + ".gpu_class \"" + spec.gpu_class +
                                    "\" has no entry in options.prices");
      const rate& r = spec.pricing == billing::spot ? p->spot : p->on_demand;
      const std::string field = std::string(who) + "prices[" + spec.gpu_class + "]." +
                                (spec.pricing == billing::spot ? "spot" : "on_demand");
      if (!r.is_time()) throw std::invalid_argument(field + " must be a per-hour or per-second rate");
      if (r.price().nanos() <= 0)
        throw std::invalid_argument(field + " must be > 0 (" + where + " is billed at it)");
      if (cur && !(*cur == r.price().cur()))
        throw std::invalid_argument(field + " is in " + std::string(r.price().cur().code()) +
                                    " but other prices are in " + std::string(cur->code()));
      cur = r.price().cur();
      cfg->device_rates.push_back(r);
    }
    cfg->cur = *cur;
    config_ = std::move(cfg);
    stride_ = detail::f_fixed_count + options_.devices.size();
    counters_ = options_.max_features * stride_ + options_.devices.size() * detail::d_field_count +
                detail::s_field_count;
    features_ = std::make_unique<feature_slot[]>(options_.max_features);
    devices_.resize(options_.devices.size());
    start_ = clock_.now();
  }

  ledger(const ledger&) = delete;
  ledger& operator=(const ledger&) = delete;

  /// @brief The id of feature `name`, interning it on first use; throws std::length_error past
  /// options.max_features.
  feature_id feature(std::string_view name) {
    if (name.empty())
      throw std::invalid_argument("frugal::cost::ledger::feature: a feature name must not be empty");
    if (!detail::printable_utf8(name))
      throw std::invalid_argument(
          "frugal::cost::ledger::feature: a feature name must be valid UTF-8 without control characters");
    std::lock_guard lock(mutex_);
    const std::uint32_t n = feature_count_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < n; ++i)
      if (features_[i].name == name) return {i};
    if (n == options_.max_features)
      throw std::length_error("frugal::cost::ledger::feature: \"" + std::string(name) +
                              "\" refused: options.max_features = " + std::to_string(options_.max_features) +
                              " features are interned already (features are a low-cardinality set of names)");
    features_[n].name = std::string(name);
    features_[n].hist =
        std::make_unique<log_linear_histogram>(static_cast<std::uint64_t>(options_.latency_highest.count()));
    feature_count_.store(n + 1, std::memory_order_release);
    return {n};
  }

  /// @brief The id of an interned feature, or nullopt.
  std::optional<feature_id> find_feature(std::string_view name) const {
    std::lock_guard lock(mutex_);
    for (std::uint32_t i = 0; i < feature_count_.load(std::memory_order_relaxed); ++i)
      if (features_[i].name == name) return feature_id{i};
    return std::nullopt;
  }

  /// @brief Records one batch run: busy time on a device, batch size, tokens.
  void record_batch(const batch_record& b) {
    check_feature(b.feature, "record_batch");
    check_device(b.device, "record_batch");
    check_duration(b.busy, "record_batch", "busy");
    if (b.batch_size == 0)
      throw std::invalid_argument("frugal::cost::ledger::record_batch: batch_size must be > 0");
    if (b.capacity != 0 && b.capacity < b.batch_size)
      throw std::invalid_argument(
          "frugal::cost::ledger::record_batch: capacity must be >= batch_size (or 0)");
    detail::stripe& s = local_stripe();
    const std::size_t base = b.feature.value * stride_;
    const auto t = static_cast<std::uint64_t>(b.busy.count());
    const std::uint64_t n = b.batch_size;
    s.add(base + detail::f_batches, 1);
    s.add(base + detail::f_items, n);
    if (b.capacity) {
      s.add(base + detail::f_capacity, b.capacity);
      s.add(base + detail::f_capacity_items, n);
    }
    if (b.tokens_in) s.add(base + detail::f_tokens_in, b.tokens_in);
    if (b.tokens_out) s.add(base + detail::f_tokens_out, b.tokens_out);
    s.add(base + detail::f_sum_n2, n * n);
    s.add(base + detail::f_sum_nt, detail::mul_sat(n, t));
    s.add(base + detail::f_busy, t);
    s.add(base + detail::f_fixed_count + b.device, t);
  }

  /// @brief Records one request's end-to-end latency and how it ended.
  void record_request(feature_id feature, std::chrono::nanoseconds latency, outcome o = outcome::ok) {
    check_feature(feature, "record_request");
    check_duration(latency, "record_request", "latency");
    if (static_cast<std::size_t>(o) >= outcome_count)
      throw std::invalid_argument("frugal::cost::ledger::record_request: unknown outcome");
    detail::stripe& s = local_stripe();
    const std::size_t base = feature.value * stride_;
    const auto ns = static_cast<std::uint64_t>(latency.count());
    log_linear_histogram& h = *features_[feature.value].hist;
    h.count_only(ns);
    // The coordinated-omission correction, as log_linear_histogram::record_corrected, with the sum kept here;
    // its work is bounded by the histogram's buckets, not by latency / interval.
    const std::uint64_t sum = detail::add_sat(
        ns, h.count_series(ns, static_cast<std::uint64_t>(options_.expected_interval.count())));
    s.add(base + detail::f_outcome0 + static_cast<std::size_t>(o), 1);
    s.add(base + detail::f_latency_sum, sum);
  }

  /// @brief Records a cache hit that saved what an average miss of this feature costs (its busy time per
  /// item).
  void record_cache_hit(feature_id feature) {
    check_feature(feature, "record_cache_hit");
    local_stripe().add(feature.value * stride_ + detail::f_hits_implicit, 1);
  }
  /// @brief Records a cache hit that saved `saved` of GPU time.
  void record_cache_hit(feature_id feature, std::chrono::nanoseconds saved) {
    check_feature(feature, "record_cache_hit");
    check_duration(saved, "record_cache_hit", "saved");
    detail::stripe& s = local_stripe();
    s.add(feature.value * stride_ + detail::f_hits_explicit, 1);
    s.add(feature.value * stride_ + detail::f_saved_explicit, static_cast<std::uint64_t>(saved.count()));
  }

  /// @brief Records a semantic cache hit (a similar input's result, not an identical one's) that saved what
  /// an average miss of this feature costs: a cache hit, counted apart as semantic.
  void record_semantic_hit(feature_id feature) {
    check_feature(feature, "record_semantic_hit");
    detail::stripe& s = local_stripe();
    s.add(feature.value * stride_ + detail::f_hits_implicit, 1);
    s.add(feature.value * stride_ + detail::f_semantic_hits_implicit, 1);
  }
  /// @brief Records a semantic cache hit that saved `saved` of GPU time.
  void record_semantic_hit(feature_id feature, std::chrono::nanoseconds saved) {
    check_feature(feature, "record_semantic_hit");
    check_duration(saved, "record_semantic_hit", "saved");
    detail::stripe& s = local_stripe();
    const auto ns = static_cast<std::uint64_t>(saved.count());
    s.add(feature.value * stride_ + detail::f_hits_explicit, 1);
    s.add(feature.value * stride_ + detail::f_saved_explicit, ns);
    s.add(feature.value * stride_ + detail::f_semantic_hits_explicit, 1);
    s.add(feature.value * stride_ + detail::f_semantic_saved_explicit, ns);
  }

  /// @brief Records a hit in a shared cache tier (e.g. Redis) that took `latency`: a cache hit that saved
  /// an average miss of this feature, counted apart as a remote hit with its latency.
  void record_remote_hit(feature_id feature, std::chrono::nanoseconds latency) {
    check_feature(feature, "record_remote_hit");
    check_duration(latency, "record_remote_hit", "latency");
    detail::stripe& s = local_stripe();
    s.add(feature.value * stride_ + detail::f_hits_implicit, 1);
    s.add(feature.value * stride_ + detail::f_remote_hits, 1);
    s.add(feature.value * stride_ + detail::f_remote_latency_sum,
          static_cast<std::uint64_t>(latency.count()));
  }
  /// @brief Records a shared cache tier's fault (down, slow, an error) that fell back to the model.
  void record_remote_fault(feature_id feature) {
    check_feature(feature, "record_remote_fault");
    local_stripe().add(feature.value * stride_ + detail::f_remote_faults, 1);
  }

  /// @brief A cascade's tier (this feature) passed a request on to the next tier after `spent` of its own
  /// model time (frugal::cascade records it when given a ledger).
  void record_escalation(feature_id tier, std::chrono::nanoseconds spent) {
    check_feature(tier, "record_escalation");
    check_duration(spent, "record_escalation", "spent");
    detail::stripe& s = local_stripe();
    s.add(tier.value * stride_ + detail::f_escalations, 1);
    s.add(tier.value * stride_ + detail::f_cascade_spent, static_cast<std::uint64_t>(spent.count()));
  }
  /// @brief A cascade's tier (this feature), not the last, answered a request after `spent` of its own model
  /// time, so the last tier's call, which takes `avoided`, was not made.
  void record_cascade_answer(feature_id tier, std::chrono::nanoseconds avoided,
                             std::chrono::nanoseconds spent) {
    check_feature(tier, "record_cascade_answer");
    check_duration(avoided, "record_cascade_answer", "avoided");
    check_duration(spent, "record_cascade_answer", "spent");
    detail::stripe& s = local_stripe();
    s.add(tier.value * stride_ + detail::f_cascade_avoided, static_cast<std::uint64_t>(avoided.count()));
    s.add(tier.value * stride_ + detail::f_cascade_spent, static_cast<std::uint64_t>(spent.count()));
  }

  /// @brief Records a generation's tokens (and its TTFT, when set); the caller records its request (latency,
  /// outcome) and the steps' busy time apart.
  void record_generation(const generation_record& g) {
    check_feature(g.feature, "record_generation");
    if (g.cached_prompt_tokens > g.prompt_tokens)
      throw std::invalid_argument("frugal::cost::ledger::record_generation: cached_prompt_tokens = " +
                                  std::to_string(g.cached_prompt_tokens) +
                                  " is over prompt_tokens = " + std::to_string(g.prompt_tokens));
    if (g.time_to_first_token)
      check_duration(*g.time_to_first_token, "record_generation", "time_to_first_token");
    detail::stripe& s = local_stripe();
    const std::size_t base = g.feature.value * stride_;
    s.add(base + detail::f_generations, 1);
    s.add(base + detail::f_prompt_tokens, g.prompt_tokens);
    s.add(base + detail::f_cached_prompt_tokens, g.cached_prompt_tokens);
    s.add(base + detail::f_generated_tokens, g.generated_tokens);
    if (g.time_to_first_token)
      token_histogram(g.feature, &feature_slot::ttft)
          .record(static_cast<std::uint64_t>(g.time_to_first_token->count()));
  }
  /// @brief Records a time to first token (from the request's submit to its first generated token).
  void record_time_to_first_token(feature_id feature, std::chrono::nanoseconds ttft) {
    check_feature(feature, "record_time_to_first_token");
    check_duration(ttft, "record_time_to_first_token", "ttft");
    token_histogram(feature, &feature_slot::ttft).record(static_cast<std::uint64_t>(ttft.count()));
  }
  /// @brief Records an inter-token latency (the time between two tokens of one sequence).
  void record_inter_token_latency(feature_id feature, std::chrono::nanoseconds latency) {
    check_feature(feature, "record_inter_token_latency");
    check_duration(latency, "record_inter_token_latency", "latency");
    token_histogram(feature, &feature_slot::itl).record(static_cast<std::uint64_t>(latency.count()));
  }
  /// @brief Records a response cache hit: a whole completion served without a model step. It is a cache
  /// hit; what it saved is priced at snapshot() from the measured cost of `prompt_tokens` prefill tokens
  /// and `generated_tokens` decode tokens (record_step_cost).
  void record_response_hit(feature_id feature, std::uint64_t prompt_tokens, std::uint64_t generated_tokens) {
    check_feature(feature, "record_response_hit");
    detail::stripe& s = local_stripe();
    const std::size_t base = feature.value * stride_;
    s.add(base + detail::f_response_hits, 1);
    s.add(base + detail::f_response_prompt_tokens, prompt_tokens);
    s.add(base + detail::f_response_generated_tokens, generated_tokens);
  }
  /// @brief Records the measured time of one model step that ran `prefill_tokens` prompt tokens and
  /// `decode_tokens` decode tokens (one per decoding sequence), from the caller's own timing of the step.
  /// These measurements price a prefill and a decode token (step_cost_model): what the caches saved and
  /// the cost per 1M tokens. They are not busy time: book that with record_batch, by feature.
  void record_step_cost(std::uint64_t prefill_tokens, std::uint64_t decode_tokens,
                        std::chrono::nanoseconds duration) {
    check_duration(duration, "record_step_cost", "duration");
    if (prefill_tokens == 0 && decode_tokens == 0)
      throw std::invalid_argument(
          "frugal::cost::ledger::record_step_cost: a step must run at least one token");
    detail::stripe& s = local_stripe();
    const std::size_t base =
        options_.max_features * stride_ + options_.devices.size() * detail::d_field_count;
    const std::uint64_t p = prefill_tokens, d = decode_tokens,
                        t = static_cast<std::uint64_t>(duration.count());
    s.add(base + detail::s_steps, 1);
    s.add(base + detail::s_p, p);
    s.add(base + detail::s_d, d);
    s.add(base + detail::s_t, t);
    s.add(base + detail::s_pp, detail::mul_sat(p, p));
    s.add(base + detail::s_dd, detail::mul_sat(d, d));
    s.add(base + detail::s_pd, detail::mul_sat(p, d));
    s.add(base + detail::s_pt, detail::mul_sat(p, t));
    s.add(base + detail::s_dt, detail::mul_sat(d, t));
    if (d == 0) {
      s.add(base + detail::s_p1, p);
      s.add(base + detail::s_t1, t);
    } else if (p == 0) {
      s.add(base + detail::s_d1, d);
      s.add(base + detail::s_t1d, t);
    }
  }

  /// @brief Records a model load on a device that took `duration` (overhead: paid, not serving).
  void record_model_load(std::size_t device, std::chrono::nanoseconds duration) {
    check_device(device, "record_model_load");
    check_duration(duration, "record_model_load", "duration");
    detail::stripe& s = local_stripe();
    const std::size_t base = options_.max_features * stride_ + device * detail::d_field_count;
    s.add(base + detail::d_load, static_cast<std::uint64_t>(duration.count()));
    s.add(base + detail::d_loads, 1);
  }
  /// @brief Records a model unload on a device.
  void record_model_unload(std::size_t device) {
    check_device(device, "record_model_unload");
    local_stripe().add(options_.max_features * stride_ + device * detail::d_field_count + detail::d_unloads,
                       1);
  }

  /// @brief Records a preemption of a job on a device (frugal::job: a resume after an interruption) and
  /// the work it cost: `redone_records` computed again, taking `redone` (already recorded as busy time by
  /// the batches that redid them; this says how much of it was repeated).
  void record_preemption(std::size_t device, std::uint64_t redone_records, std::chrono::nanoseconds redone) {
    check_device(device, "record_preemption");
    check_duration(redone, "record_preemption", "redone");
    detail::stripe& s = local_stripe();
    const std::size_t base = options_.max_features * stride_ + device * detail::d_field_count;
    s.add(base + detail::d_preemptions, 1);
    s.add(base + detail::d_redone_records, redone_records);
    s.add(base + detail::d_redone, static_cast<std::uint64_t>(redone.count()));
  }

  /// @brief Records a device's memory use now, for the memory threshold.
  void record_memory(std::size_t device, std::uint64_t used_bytes, std::uint64_t capacity_bytes) {
    check_device(device, "record_memory");
    if (capacity_bytes == 0 || used_bytes > capacity_bytes)
      throw std::invalid_argument(
          "frugal::cost::ledger::record_memory: need 0 <= used_bytes <= capacity_bytes, capacity > 0");
    const double f = double(used_bytes) / double(capacity_bytes);
    const std::int64_t now = since_start();
    std::lock_guard lock(mutex_);
    detail::raw_device& d = devices_[device];
    d.memory_fraction = f;
    if (f > options_.alerts.memory_high) {
      if (!d.memory_high_since_ns) d.memory_high_since_ns = now;
    } else {
      d.memory_high_since_ns.reset();
    }
  }

  /// @brief Records the request queue's depth now and its limit, for the queue threshold.
  void record_queue_depth(std::size_t depth, std::size_t limit) {
    if (limit == 0)
      throw std::invalid_argument("frugal::cost::ledger::record_queue_depth: limit must be > 0");
    std::lock_guard lock(mutex_);
    queue_ = std::pair<std::uint64_t, std::uint64_t>(depth, limit);
  }

  /// @brief The figures since the ledger started; cut a window with `later.since(earlier)`.
  ledger_snapshot snapshot() const {
    detail::raw_state raw;
    raw.at_ns = since_start();
    std::lock_guard lock(mutex_);
    const std::uint32_t n = feature_count_.load(std::memory_order_acquire);
    const std::size_t nd = options_.devices.size();
    std::vector<std::uint64_t> sum(counters_, 0);
    for (const auto& st : stripes_)
      for (std::size_t i = 0; i < counters_; ++i)
        sum[i] = detail::add_sat(sum[i], st.second->c[i].load(std::memory_order_relaxed));
    raw.features.resize(n);
    for (std::uint32_t t = 0; t < n; ++t) {
      detail::raw_feature& r = raw.features[t];
      r.name = features_[t].name;
      for (std::size_t f = 0; f < detail::f_fixed_count; ++f) r.c[f] = sum[t * stride_ + f];
      r.busy_by_device.assign(sum.begin() + static_cast<std::ptrdiff_t>(t * stride_ + detail::f_fixed_count),
                              sum.begin() + static_cast<std::ptrdiff_t>((t + 1) * stride_));
      r.hist = features_[t].hist->snapshot();
      r.hist.sum = r.c[detail::f_latency_sum];
      if (const log_linear_histogram* h = features_[t].ttft.load(std::memory_order_acquire))
        r.ttft = h->snapshot();
      if (const log_linear_histogram* h = features_[t].itl.load(std::memory_order_acquire))
        r.itl = h->snapshot();
    }
    raw.devices = devices_;
    for (std::size_t d = 0; d < nd; ++d)
      for (std::size_t f = 0; f < detail::d_field_count; ++f)
        raw.devices[d].c[f] = sum[options_.max_features * stride_ + d * detail::d_field_count + f];
    raw.queue = queue_;
    const std::size_t steps = options_.max_features * stride_ + nd * detail::d_field_count;
    for (std::size_t f = 0; f < detail::s_field_count; ++f) raw.steps[f] = sum[steps + f];
    return detail::derive(config_, std::move(raw), nullptr);
  }

  /// @brief The same as snapshot(), by the name every frugal component uses.
  ledger_snapshot stats() const { return snapshot(); }

  /// @brief The ledger's clock, for callers that time work they book here (e.g. frugal::cascade).
  const Clock& clock() const noexcept { return clock_; }
  const ledger_options& options() const noexcept { return options_; }

 private:
  struct feature_slot {
    std::string name;
    std::unique_ptr<log_linear_histogram> hist;
    // The token histograms, made on first use: a ledger without a decoder does not pay for them.
    std::atomic<log_linear_histogram*> ttft{nullptr}, itl{nullptr};
    std::unique_ptr<log_linear_histogram> ttft_owner, itl_owner;
  };

  log_linear_histogram& token_histogram(feature_id f,
                                        std::atomic<log_linear_histogram*> feature_slot::*which) {
    feature_slot& slot = features_[f.value];
    if (log_linear_histogram* h = (slot.*which).load(std::memory_order_acquire)) return *h;
    std::lock_guard lock(mutex_);
    if (log_linear_histogram* h = (slot.*which).load(std::memory_order_relaxed)) return *h;
    auto& owner = which == &feature_slot::ttft ? slot.ttft_owner : slot.itl_owner;
    owner =
        std::make_unique<log_linear_histogram>(static_cast<std::uint64_t>(options_.latency_highest.count()));
    (slot.*which).store(owner.get(), std::memory_order_release);
    return *owner;
  }

  std::int64_t since_start() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.now() - start_).count();
  }

  void check_feature(feature_id t, const char* fn) const {
    if (t.value >= feature_count_.load(std::memory_order_acquire))
      throw std::out_of_range(std::string("frugal::cost::ledger::") + fn + ": feature id " +
                              std::to_string(t.value) + " was not returned by feature()");
  }
  static void check_duration(std::chrono::nanoseconds d, const char* fn, const char* what) {
    if (d.count() < 0)
      throw std::invalid_argument(std::string("frugal::cost::ledger::") + fn + ": " + what +
                                  " must not be negative");
    if (d > max_record_duration)
      throw std::invalid_argument(std::string("frugal::cost::ledger::") + fn + ": " + what + " = " +
                                  std::to_string(d.count()) + " ns is over max_record_duration (24h)");
  }
  void check_device(std::size_t d, const char* fn) const {
    if (d >= options_.devices.size())
      throw std::out_of_range(std::string("frugal::cost::ledger::") + fn + ": device " + std::to_string(d) +
                              " is out of range (" + std::to_string(options_.devices.size()) + " devices)");
  }

  detail::stripe& local_stripe() {
    detail::stripe_cache& c = detail::tl_stripe;
    for (std::size_t i = 0; i < detail::stripe_cache::ways; ++i)
      if (c.ledger[i] == id_) return *c.s[i];
    return find_stripe();
  }
  detail::stripe& find_stripe() {
    std::lock_guard lock(mutex_);
    const std::uint64_t me = detail::thread_serial;
    detail::stripe* s = nullptr;
    for (auto& [owner, st] : stripes_)
      if (owner == me) s = st.get();
    if (!s) {
      stripes_.emplace_back(me, std::make_unique<detail::stripe>(counters_));
      s = stripes_.back().second.get();
    }
    detail::stripe_cache& c = detail::tl_stripe;
    c.ledger[c.next] = id_;
    c.s[c.next] = s;
    c.next = (c.next + 1) % detail::stripe_cache::ways;
    return *s;
  }

  ledger_options options_;
  Clock clock_;
  std::uint64_t id_;
  typename Clock::time_point start_{};
  std::shared_ptr<const detail::ledger_config> config_;
  std::size_t stride_ = 0;
  std::size_t counters_ = 0;
  std::unique_ptr<feature_slot[]> features_;
  std::atomic<std::uint32_t> feature_count_{0};
  mutable std::mutex mutex_;
  std::vector<std::pair<std::uint64_t, std::unique_ptr<detail::stripe>>> stripes_;
  std::vector<detail::raw_device> devices_;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> queue_;
};

}  // namespace cost
FRUGAL_END_NAMESPACE
