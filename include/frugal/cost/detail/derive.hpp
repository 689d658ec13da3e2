#pragma once

// detail::derive, the ledger's figures computed from its cumulative counters: costs, shares of idle time,
// savings, percentiles and alerts, over the window between two raw states. Included by
// frugal/cost/snapshot.hpp, whose types it fills in.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/cost/detail/stripe.hpp"
#include "frugal/cost/histogram.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/cost/snapshot.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost::detail {

// A counter of nanoseconds as a duration, saturated rather than wrapped to a negative figure.
inline std::chrono::nanoseconds ns_of(std::uint64_t v) noexcept {
  return std::chrono::nanoseconds(v > std::uint64_t(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v));
}

inline std::uint64_t diff(std::uint64_t now, std::uint64_t base) { return now >= base ? now - base : 0; }

// A money figure from 128 bits, saturated to +-INT64_MAX nanos (symmetric, so that it can be negated).
inline money saturated_money(int128 v, currency c) {
  constexpr int128 top = std::numeric_limits<std::int64_t>::max();
  return money::from_nanos(static_cast<std::int64_t>(v > top ? top : v < -top ? -top : v), c);
}

// amount * part / whole. Saved time is priced this way at a feature's busy rate, and a feature with little
// busy time and much saved time (hits priced at the average miss) can be worth more than money holds: the
// figure saturates, as the ledger's counters do, rather than making snapshot() throw (found by fuzz_ledger).
inline money price_share(money amount, std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return money::from_nanos(0, amount.cur());
  return saturated_money(div_half_even(int128(amount.nanos()) * int128(part), int128(whole)), amount.cur());
}

// sum += x for the saved times, saturated: a feature's saved time may already be near the limit (response
// hits of huge token counts, found by fuzz_ledger).
inline void add_time(std::chrono::nanoseconds& sum, std::chrono::nanoseconds x) noexcept {
  std::int64_t r = 0;
  if (__builtin_add_overflow(sum.count(), x.count(), &r))
    r = x.count() < 0 ? std::numeric_limits<std::int64_t>::min() : std::numeric_limits<std::int64_t>::max();
  sum = std::chrono::nanoseconds(r);
}

// sum += x for the saved figures, saturated like price_share.
inline void add_saved(money& sum, money x) {
  sum = saturated_money(int128(sum.nanos()) + x.nanos(), sum.cur());
}

inline batch_model fit_batch_model(const std::array<std::uint64_t, f_fixed_count>& c) {
  batch_model m;
  const double n = static_cast<double>(c[f_batches]);
  const double sn = static_cast<double>(c[f_items]);
  const double sn2 = static_cast<double>(c[f_sum_n2]);
  const double st = static_cast<double>(c[f_busy]);
  const double snt = static_cast<double>(c[f_sum_nt]);
  const double den = n * sn2 - sn * sn;
  // den is n² times the variance of the batch sizes: zero when every batch had the same size.
  if (c[f_batches] < 2 || den <= 1e-9 * n * sn2) return m;
  m.a_ns = (n * snt - sn * st) / den;
  m.b_ns = (st - m.a_ns * sn) / n;
  m.valid = true;
  return m;
}

inline step_cost_model fit_step_costs(const std::array<std::uint64_t, s_field_count>& g) {
  step_cost_model m;
  m.steps = g[s_steps];
  m.prefill_tokens = g[s_p];
  m.decode_tokens = g[s_d];
  m.busy = ns_of(g[s_t]);
  const double P = double(g[s_p]), D = double(g[s_d]), T = double(g[s_t]);
  if (m.steps == 0 || (g[s_p] == 0 && g[s_d] == 0)) return m;
  if (g[s_d] == 0) {
    m.prefill_token_ns = T / P;
    return m;
  }
  if (g[s_p] == 0) {
    m.decode_token_ns = T / D;
    return m;
  }
  // The normal equations of t = c + a·p + b·d, centred: S_xy = Σxy − Σx·Σy / n.
  const double n = double(g[s_steps]);
  const double spp = double(g[s_pp]) - P * P / n, sdd = double(g[s_dd]) - D * D / n;
  const double spd = double(g[s_pd]) - P * D / n;
  const double spt = double(g[s_pt]) - P * T / n, sdt = double(g[s_dt]) - D * T / n;
  const double det = spp * sdd - spd * spd;
  if (m.steps >= 3 && spp > 0 && sdd > 0 && det > 1e-9 * spp * sdd) {
    const double a = (spt * sdd - sdt * spd) / det;
    const double b = (sdt * spp - spt * spd) / det;
    if (a > 0 && b > 0) {
      m.fitted = true;
      m.prefill_marginal_ns = a;
      m.decode_marginal_ns = b;
      m.fixed_ns = (T - a * P - b * D) / n;
    }
  }
  // The steps of one kind are that kind's time; the mixed steps' time is split by the fit's shares of
  // their own tokens.
  const double Pm = P - double(g[s_p1]), Dm = D - double(g[s_d1]);
  const double Tm = std::max(0.0, T - double(g[s_t1]) - double(g[s_t1d]));
  double mixed_share = Pm + Dm > 0 ? Pm / (Pm + Dm) : 0.0;
  if (m.fitted && Pm + Dm > 0)
    mixed_share = m.prefill_marginal_ns * Pm / (m.prefill_marginal_ns * Pm + m.decode_marginal_ns * Dm);
  m.prefill_token_ns = (double(g[s_t1]) + Tm * mixed_share) / P;
  m.decode_token_ns = (double(g[s_t1d]) + Tm * (1 - mixed_share)) / D;
  return m;
}

// tokens × ns per token, as whole nanoseconds, saturated.
inline std::uint64_t token_time(std::uint64_t tokens, double ns_per_token) {
  const double v = std::round(double(tokens) * ns_per_token);
  if (!(v > 0)) return 0;
  return v >= 9.2e18 ? std::uint64_t(INT64_MAX) : static_cast<std::uint64_t>(v);
}

inline latency_percentiles percentiles_of(const histogram_snapshot& h) {
  using std::chrono::nanoseconds;
  auto at = [&](double q) { return ns_of(h.value_at(q)); };
  return {at(0.50), at(0.90), at(0.99), at(0.999)};
}

inline std::string fmt_pct(double r) {
  std::string s = std::to_string(r * 100);
  return s.substr(0, s.find('.') + 2) + "%";
}
inline std::string fmt_ms(double ns) {
  std::string s = std::to_string(ns / 1e6);
  return s.substr(0, s.find('.') + 2) + " ms";
}

// Fills the feature-level figures from counter deltas; prices come later, once per-device busy is known.
inline void count_figures(feature_figures& t, const std::array<std::uint64_t, f_fixed_count>& c,
                          std::vector<std::uint64_t> busy_by_device, histogram_snapshot hist, currency cur,
                          const step_cost_model& steps, histogram_snapshot ttft, histogram_snapshot itl) {
  using std::chrono::nanoseconds;
  t.requests = 0;
  for (std::size_t o = 0; o < outcome_count; ++o) t.requests += t.by_outcome[o] = c[f_outcome0 + o];
  t.batches = c[f_batches];
  t.batched_items = c[f_items];
  t.tokens_in = c[f_tokens_in];
  t.tokens_out = c[f_tokens_out];
  t.busy = ns_of(c[f_busy]);
  t.busy_by_device.clear();
  for (auto b : busy_by_device) t.busy_by_device.push_back(ns_of(b));
  t.mean_batch_size = t.batches ? double(t.batched_items) / double(t.batches) : 0;
  t.fill = c[f_capacity] ? double(c[f_capacity_items]) / double(c[f_capacity]) : 0;
  t.generations = c[f_generations];
  t.prompt_tokens = c[f_prompt_tokens];
  t.cached_prompt_tokens = c[f_cached_prompt_tokens];
  t.generated_tokens = c[f_generated_tokens];
  t.response_hits = c[f_response_hits];
  t.response_prompt_tokens = c[f_response_prompt_tokens];
  t.response_generated_tokens = c[f_response_generated_tokens];
  t.prefix_saved_time = ns_of(token_time(t.cached_prompt_tokens, steps.prefill_token_ns));
  t.response_saved_time = ns_of(add_sat(token_time(t.response_prompt_tokens, steps.prefill_token_ns),
                                        token_time(t.response_generated_tokens, steps.decode_token_ns)));
  t.time_to_first_token = percentiles_of(ttft);
  t.time_to_first_token_histogram = std::move(ttft);
  t.inter_token_latency = percentiles_of(itl);
  t.inter_token_latency_histogram = std::move(itl);
  t.cache_hits = c[f_hits_explicit] + c[f_hits_implicit] + c[f_response_hits];
  t.cache_hit_ratio = t.requests ? std::min(1.0, double(t.cache_hits) / double(t.requests)) : 0;
  // A hit without a figure saved what an average miss of this feature cost: busy time per batched item.
  std::uint64_t implicit = c[f_items] ? static_cast<std::uint64_t>(div_half_even(
                                            int128(c[f_busy]) * c[f_hits_implicit], int128(c[f_items])))
                                      : 0;
  t.cache_saved_time = ns_of(
      add_sat(c[f_saved_explicit] + implicit, static_cast<std::uint64_t>(t.response_saved_time.count())));
  t.remote_hits = c[f_remote_hits];
  t.remote_latency = ns_of(c[f_remote_latency_sum]);
  t.remote_faults = c[f_remote_faults];
  t.semantic_hits = c[f_semantic_hits_explicit] + c[f_semantic_hits_implicit];
  const std::uint64_t semantic_implicit =
      c[f_items] ? static_cast<std::uint64_t>(
                       div_half_even(int128(c[f_busy]) * c[f_semantic_hits_implicit], int128(c[f_items])))
                 : 0;
  t.semantic_saved_time = ns_of(c[f_semantic_saved_explicit] + semantic_implicit);
  t.semantic_saved = money::from_nanos(0, cur);
  t.escalations = c[f_escalations];
  t.escalation_rate = t.requests ? std::min(1.0, double(t.escalations) / double(t.requests)) : 0;
  t.cascade_saved_time = ns_of(c[f_cascade_avoided]) - ns_of(c[f_cascade_spent]);
  t.cascade_saved = money::from_nanos(0, cur);
  t.model = fit_batch_model(c);
  // With least squares the residuals sum to zero, so the busy time paid equals a·items + b·batches, and
  // running each request alone, items·(a + b), would have cost b·(items − batches) more.
  if (t.model.valid && t.model.b_ns > 0 && t.batched_items > t.batches)
    t.batching_saved_time = nanoseconds(
        static_cast<std::int64_t>(std::llround(t.model.b_ns * double(t.batched_items - t.batches))));
  else
    t.batching_saved_time = nanoseconds(0);
  t.latency = percentiles_of(hist);
  t.latency_histogram = std::move(hist);
  t.busy_cost = t.idle_share = t.cost = t.cost_per_request = t.cache_saved = t.batching_saved =
      t.cost_per_million_input = t.cost_per_million_output = t.prefix_saved = t.response_saved =
          money::from_nanos(0, cur);
}

// The cost per 1M prompt and generated tokens served: the feature's cost split between prefill and decode
// in proportion to the measured time of the prompt tokens it computed and of the tokens it generated, over
// every token served (response cache hits included).
inline void token_prices(feature_figures& t, const step_cost_model& steps) {
  const std::uint64_t computed = t.prompt_tokens - std::min(t.prompt_tokens, t.cached_prompt_tokens);
  const std::uint64_t prefill = token_time(computed, steps.prefill_token_ns);
  const std::uint64_t decode = token_time(t.generated_tokens, steps.decode_token_ns);
  const std::uint64_t whole = add_sat(prefill, decode);
  const money zero = money::from_nanos(0, t.cost.cur());
  // The two shares add up to the cost: the rounding's remainder goes to decode.
  const money input = whole ? price_share(t.cost, prefill, whole) : zero;
  const money output = whole ? saturated_money(int128(t.cost.nanos()) - input.nanos(), t.cost.cur()) : zero;
  constexpr std::uint64_t million = 1'000'000;
  const std::uint64_t served_in = add_sat(t.prompt_tokens, t.response_prompt_tokens);
  const std::uint64_t served_out = add_sat(t.generated_tokens, t.response_generated_tokens);
  t.cost_per_million_input = served_in && prefill ? price_share(input, million, served_in) : zero;
  t.cost_per_million_output = served_out && decode ? price_share(output, million, served_out) : zero;
}

inline ledger_snapshot derive(std::shared_ptr<const ledger_config> cfg, raw_state now,
                              const raw_state* base) {
  using std::chrono::nanoseconds;
  const ledger_config& k = *cfg;
  const std::size_t nd = k.devices.size();
  const money zero = money::from_nanos(0, k.cur);
  ledger_snapshot s;
  s.cur = k.cur;
  s.share = k.share;
  s.at = nanoseconds(now.at_ns);
  s.window_start = nanoseconds(base ? base->at_ns : 0);
  s.wall = s.at - s.window_start;
  const auto wall = static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.wall.count()));
  s.total_cost = s.busy_cost = s.overhead_cost = s.idle_cost = s.unallocated_idle = zero;
  s.queue = now.queue;
  std::array<std::uint64_t, s_field_count> step_sums{};
  for (std::size_t f = 0; f < s_field_count; ++f)
    step_sums[f] = diff(now.steps[f], base ? base->steps[f] : 0);
  s.step_costs = fit_step_costs(step_sums);

  std::array<std::uint64_t, f_fixed_count> all{};
  std::vector<std::uint64_t> all_busy(nd, 0);
  histogram_snapshot all_hist, all_ttft, all_itl;
  std::vector<money> dev_busy_cost(nd, zero);
  s.features.resize(now.features.size());
  for (std::size_t i = 0; i < now.features.size(); ++i) {
    const raw_feature& r = now.features[i];
    const raw_feature* b = base && i < base->features.size() ? &base->features[i] : nullptr;
    std::array<std::uint64_t, f_fixed_count> c{};
    for (std::size_t f = 0; f < f_fixed_count; ++f) c[f] = diff(r.c[f], b ? b->c[f] : 0);
    std::vector<std::uint64_t> busy(nd, 0);
    for (std::size_t d = 0; d < nd; ++d) busy[d] = diff(r.busy_by_device[d], b ? b->busy_by_device[d] : 0);
    histogram_snapshot h = b ? r.hist.minus(b->hist) : r.hist;
    histogram_snapshot ttft = b ? r.ttft.minus(b->ttft) : r.ttft;
    histogram_snapshot itl = b ? r.itl.minus(b->itl) : r.itl;
    all_ttft.merge(ttft);
    all_itl.merge(itl);
    for (std::size_t f = 0; f < f_fixed_count; ++f) all[f] = add_sat(all[f], c[f]);
    for (std::size_t d = 0; d < nd; ++d) all_busy[d] = add_sat(all_busy[d], busy[d]);
    all_hist.merge(h);
    feature_figures& t = s.features[i];
    t.name = r.name;
    count_figures(t, c, busy, std::move(h), k.cur, s.step_costs, std::move(ttft), std::move(itl));
    for (std::size_t d = 0; d < nd; ++d) {
      money m = k.device_rates[d].for_duration(ns_of(busy[d]));
      t.busy_cost += m;
      dev_busy_cost[d] += m;
    }
  }

  std::uint64_t fleet_busy = 0;
  s.devices.resize(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    device_figures& f = s.devices[d];
    const raw_device& r = now.devices[d];
    const raw_device* b = base ? &base->devices[d] : nullptr;
    f.name = k.devices[d].name.empty() ? std::to_string(d) : k.devices[d].name;
    f.gpu_class = k.devices[d].gpu_class;
    f.pricing = k.devices[d].pricing;
    f.price = k.device_rates[d];
    const std::uint64_t load = diff(r.c[d_load], b ? b->c[d_load] : 0);
    f.model_loads = diff(r.c[d_loads], b ? b->c[d_loads] : 0);
    f.model_unloads = diff(r.c[d_unloads], b ? b->c[d_unloads] : 0);
    f.memory_fraction = r.memory_fraction;
    f.preemptions = diff(r.c[d_preemptions], b ? b->c[d_preemptions] : 0);
    f.redone_records = diff(r.c[d_redone_records], b ? b->c[d_redone_records] : 0);
    f.redone = ns_of(diff(r.c[d_redone], b ? b->c[d_redone] : 0));
    f.redone_cost = k.device_rates[d].for_duration(f.redone);
    f.busy = ns_of(all_busy[d]);
    f.load = ns_of(load);
    const std::uint64_t used = all_busy[d] + load;
    f.idle = ns_of(wall > used ? wall - used : 0);
    f.utilization = wall ? std::min(1.0, double(all_busy[d]) / double(wall)) : 0;
    f.busy_cost = dev_busy_cost[d];
    f.overhead_cost = f.price.for_duration(f.load);
    f.paid = f.price.for_duration(ns_of(wall));
    // As OpenCost charges max(requested, used): busy time recorded past the wall time is still paid for.
    if (f.paid < f.busy_cost + f.overhead_cost) f.paid = f.busy_cost + f.overhead_cost;
    f.idle_cost = f.paid - f.busy_cost - f.overhead_cost;
    s.total_cost += f.paid;
    s.busy_cost += f.busy_cost;
    s.overhead_cost += f.overhead_cost;
    s.idle_cost += f.idle_cost;
    fleet_busy += all_busy[d];

    // Idle cost shared out; the remainder of the integer split goes to the busiest feature so shares add up.
    std::vector<std::uint64_t> weight(s.features.size(), 0);
    for (std::size_t i = 0; i < s.features.size(); ++i) {
      const feature_figures& t = s.features[i];
      if (k.share == idle_sharing::by_busy)
        weight[i] = static_cast<std::uint64_t>(t.busy_by_device[d].count());
      if (k.share == idle_sharing::uniform) weight[i] = (t.requests || t.batches || t.busy.count()) ? 1 : 0;
    }
    std::uint64_t whole = 0;
    for (auto w : weight) whole += w;
    if (whole == 0 || f.idle_cost.is_zero()) {
      s.unallocated_idle += f.idle_cost;
      continue;
    }
    money given = zero;
    std::size_t heaviest = 0;
    for (std::size_t i = 0; i < s.features.size(); ++i) {
      money share = money::from_nanos(
          static_cast<std::int64_t>(int128(f.idle_cost.nanos()) * int128(weight[i]) / int128(whole)), k.cur);
      s.features[i].idle_share += share;
      given += share;
      if (weight[i] > weight[heaviest]) heaviest = i;
    }
    s.features[heaviest].idle_share += f.idle_cost - given;
  }
  s.utilization = wall && nd ? std::min(1.0, double(fleet_busy) / (double(wall) * double(nd))) : 0;

  for (feature_figures& t : s.features) {
    t.cost = t.busy_cost + t.idle_share;
    t.cost_per_request = t.requests ? t.cost.divided_by(static_cast<std::int64_t>(t.requests)) : zero;
    const auto busy = static_cast<std::uint64_t>(t.busy.count());
    const auto fleet_ns = wall * nd;
    // Saved time is priced at what this feature's busy time cost per ns, or at the fleet's paid rate if it
    // had none.
    auto price = [&](nanoseconds saved) {
      const auto ns = static_cast<std::uint64_t>(saved.count());
      return busy ? price_share(t.busy_cost, ns, busy) : price_share(s.total_cost, ns, fleet_ns);
    };
    t.cache_saved = price(t.cache_saved_time);
    t.prefix_saved = price(t.prefix_saved_time);
    t.response_saved = price(t.response_saved_time);
    token_prices(t, s.step_costs);
    t.batching_saved = price(t.batching_saved_time);
    t.cascade_saved =
        t.cascade_saved_time.count() >= 0 ? price(t.cascade_saved_time) : zero - price(-t.cascade_saved_time);
  }

  feature_figures& tot = s.total;
  tot.name = "total";
  count_figures(tot, all, all_busy, std::move(all_hist), k.cur, s.step_costs, std::move(all_ttft),
                std::move(all_itl));
  tot.cache_saved_time = tot.batching_saved_time = tot.cascade_saved_time = tot.prefix_saved_time =
      tot.response_saved_time = nanoseconds(0);
  tot.cascade_saved = zero;
  for (const feature_figures& t : s.features) {
    add_saved(tot.cascade_saved, t.cascade_saved);
    add_time(tot.cascade_saved_time, t.cascade_saved_time);
    tot.busy_cost += t.busy_cost;
    tot.idle_share += t.idle_share;
    add_saved(tot.cache_saved, t.cache_saved);
    add_time(tot.cache_saved_time, t.cache_saved_time);
    add_saved(tot.batching_saved, t.batching_saved);
    add_time(tot.batching_saved_time, t.batching_saved_time);
    add_saved(tot.prefix_saved, t.prefix_saved);
    add_time(tot.prefix_saved_time, t.prefix_saved_time);
    add_saved(tot.response_saved, t.response_saved);
    add_time(tot.response_saved_time, t.response_saved_time);
  }
  tot.cost = s.total_cost;
  // The total's cost is everything paid, idle included: its price per token is what the fleet costs.
  token_prices(tot, s.step_costs);
  tot.cost_per_request = tot.requests ? tot.cost.divided_by(static_cast<std::int64_t>(tot.requests)) : zero;

  // Semantic hits are a share of the cache's hits: their saving is that share of cache_saved.
  tot.semantic_saved_time = nanoseconds(0);
  for (feature_figures& t : s.features) {
    t.semantic_saved = price_share(t.cache_saved, static_cast<std::uint64_t>(t.semantic_saved_time.count()),
                                   static_cast<std::uint64_t>(t.cache_saved_time.count()));
    add_saved(tot.semantic_saved, t.semantic_saved);
    add_time(tot.semantic_saved_time, t.semantic_saved_time);
  }

  const thresholds& th = k.alerts;
  if (th.enabled) {
    auto fire = [&](std::string check, std::string subject, double value, double threshold, std::string msg) {
      s.alerts.push_back({std::move(check), std::move(subject), value, threshold, std::move(msg)});
    };
    if (s.wall >= th.utilization_window && s.wall.count() > 0) {
      for (const device_figures& f : s.devices) {
        if (f.utilization < th.utilization_low)
          fire("utilization_low", "device " + f.name, f.utilization, th.utilization_low,
               "device " + f.name + " was busy " + fmt_pct(f.utilization) + " of the window, under " +
                   fmt_pct(th.utilization_low) + ": idle GPU-hours are paid for (" + f.idle_cost.to_string() +
                   ")");
        if (f.utilization > th.utilization_high)
          fire("utilization_high", "device " + f.name, f.utilization, th.utilization_high,
               "device " + f.name + " was busy " + fmt_pct(f.utilization) + " of the window, over " +
                   fmt_pct(th.utilization_high) + ": no headroom, latency will suffer; add a replica");
      }
    }
    for (std::size_t d = 0; d < nd; ++d) {
      const raw_device& r = now.devices[d];
      if (!r.memory_high_since_ns) continue;
      // A user's clock may step back or jump far: the span saturates instead of overflowing.
      std::int64_t high_for = 0;
      if (__builtin_sub_overflow(now.at_ns, *r.memory_high_since_ns, &high_for))
        high_for = now.at_ns < 0 ? std::numeric_limits<std::int64_t>::min()
                                 : std::numeric_limits<std::int64_t>::max();
      if (high_for >= th.memory_window.count())
        fire("memory_high", "device " + s.devices[d].name, *r.memory_fraction, th.memory_high,
             "device " + s.devices[d].name + " memory at " + fmt_pct(*r.memory_fraction) + ", over " +
                 fmt_pct(th.memory_high) + " for " + fmt_ms(double(high_for)));
    }
    auto p99 = [&](const feature_figures& t, std::string subject) {
      if (t.latency_histogram.count && t.latency.p99 > th.p99_max)
        fire("p99_latency", subject, double(t.latency.p99.count()) / 1e9, double(th.p99_max.count()) / 1e9,
             subject + " p99 latency " + fmt_ms(double(t.latency.p99.count())) + " is over " +
                 fmt_ms(double(th.p99_max.count())));
    };
    for (const feature_figures& t : s.features) p99(t, "feature " + t.name);
    p99(tot, "total");
    if (s.queue && s.queue->second) {
      double r = double(s.queue->first) / double(s.queue->second);
      if (r > th.queue_high)
        fire("queue_depth", "queue", r, th.queue_high,
             "queue depth " + std::to_string(s.queue->first) + " of " + std::to_string(s.queue->second) +
                 " is over " + fmt_pct(th.queue_high) + " of its limit");
    }
  }

  s.config_ = std::move(cfg);
  s.raw_ = std::move(now);
  return s;
}

}  // namespace cost::detail
FRUGAL_END_NAMESPACE
