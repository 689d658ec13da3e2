// The seeds' scenario priced on a frugal::manual_clock: three models, each busy a few hours a day, served
//   (a) always-on: one device per model, each paid all day (the pool with every model pinned);
//   (b) a pool with idle unload: one device per model, but a device is paid only while its model is loaded
//       (a device rented when its model's load starts and given back when the model is unloaded, as a
//       serverless GPU or a shared cluster would bill it): paid time = loaded time;
//   (c) a pool with a budget of one model on a single device paid all day: the LRU model is evicted when
//       another is asked for.
// Every scenario runs the real frugal::model_pool; a discrete-event loop moves the clock from one event (an
// arrival, a completion, a collect_idle() tick) to the next. A device serves its requests one at a time,
// first come first served; a request that finds its model unloaded waits for the load (a stated constant),
// then for its own service time (a stated constant), and so do the requests queued behind it. The leases
// are held for the whole service, so a model is never unloaded under a request.
//
// The ledger (frugal::cost::ledger<manual_clock>) gets every request (record_batch, record_request), every
// load (record_model_load, with the stated load time) and unload (record_model_unload). It pays its devices
// from its start, which is the bill of (a) and (c). For (b) the cost is loaded seconds x the hourly price,
// cross-checked against the ledger's own pricing of each loaded window (snapshot at the load, snapshot at the
// unload, since()) and against the pool's byte_seconds.
//
// The trace: model i is busy in one window a day of a stated length, whose start is drawn uniformly (whole
// minutes) with the seed, or given with --windows, and kept every day; inside it requests arrive as a Poisson
// process at --rate per second, outside it at --background per hour (stray requests); arrivals are drawn
// afresh each day.
//
//   bench_pool_trace [--days 7] [--seed 21] [--rate 1] [--background 1] [--load-s S] [--service-ms 50]
//                    [--idle-min 5] [--tick-s 30] [--price 0.80] [--windows HH:MM-HH:MM,...] [--out FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "frugal/clock.hpp"
#include "frugal/cost.hpp"
#include "frugal/pool.hpp"

namespace {

namespace fc = frugal::cost;
using ns = std::chrono::nanoseconds;
using std::chrono::duration_cast;

constexpr std::int64_t ns_per_s = 1'000'000'000;
constexpr std::int64_t day_ns = 24 * 3600 * ns_per_s;

struct params {
  int days = 7;
  std::uint64_t seed = 21;
  double rate_per_s = 1.0;
  double background_per_h = 1.0;
  // MiniLM fp32 from its files through the pool (loader and warm-up): the median of bench_pool_rss's three
  // cycles on the build machine, 161 ms.
  double load_s = 0.16;
  double service_ms = 50;
  double idle_min = 5;
  double tick_s = 30;
  std::string price = "0.80";
  std::string windows;  // "HH:MM-HH:MM,..." one per model, instead of the seeded ones
  std::string out;
};

struct model_def {
  const char* name;
  int busy_hours;
};
// "A few hours a day" each; the lengths are stated, not fitted.
constexpr model_def models[] = {{"a", 3}, {"b", 4}, {"c", 2}};
constexpr std::size_t model_count = std::size(models);

struct window {
  std::int64_t start = 0, end = 0;  // ns into the day
};

struct request {
  std::int64_t t = 0;  // ns since the trace's start
  std::uint32_t model = 0;
};

std::int64_t parse_hhmm(const std::string& s) {
  if (s.size() != 5 || s[2] != ':') throw std::invalid_argument("expected HH:MM, not " + s);
  const int h = std::stoi(s.substr(0, 2)), m = std::stoi(s.substr(3, 2));
  if (h < 0 || h > 24 || m < 0 || m > 59 || (h == 24 && m != 0))
    throw std::invalid_argument("expected HH:MM, not " + s);
  return (std::int64_t{h} * 60 + m) * 60 * ns_per_s;
}

std::vector<window> make_windows(const params& p) {
  std::vector<window> w;
  if (!p.windows.empty()) {
    std::stringstream in(p.windows);
    for (std::string item; std::getline(in, item, ',');) {
      const auto dash = item.find('-');
      if (dash == std::string::npos) throw std::invalid_argument("expected HH:MM-HH:MM, not " + item);
      const window x{parse_hhmm(item.substr(0, dash)), parse_hhmm(item.substr(dash + 1))};
      if (x.end <= x.start) throw std::invalid_argument("a window must end after it starts: " + item);
      w.push_back(x);
    }
    if (w.size() != model_count) throw std::invalid_argument("--windows needs one window per model (3)");
    return w;
  }
  std::mt19937_64 rng(p.seed);
  for (const auto& m : models) {
    std::uniform_int_distribution<int> start_min(0, 24 * 60 - m.busy_hours * 60);
    const std::int64_t s = std::int64_t{start_min(rng)} * 60 * ns_per_s;
    w.push_back({s, s + std::int64_t{m.busy_hours} * 3600 * ns_per_s});
  }
  return w;
}

std::vector<request> make_trace(const params& p, const std::vector<window>& w) {
  std::mt19937_64 rng(p.seed + 1);
  std::vector<request> trace;
  const auto poisson = [&](std::int64_t from, std::int64_t to, double per_s, std::uint32_t model) {
    if (per_s <= 0) return;
    std::exponential_distribution<double> gap(per_s);
    for (double t = static_cast<double>(from) / ns_per_s + gap(rng); t < static_cast<double>(to) / ns_per_s;
         t += gap(rng))
      trace.push_back({static_cast<std::int64_t>(t * ns_per_s), model});
  };
  for (int d = 0; d < p.days; ++d) {
    const std::int64_t base = std::int64_t{d} * day_ns;
    for (std::uint32_t m = 0; m < model_count; ++m) {
      poisson(base, base + w[m].start, p.background_per_h / 3600, m);
      poisson(base + w[m].start, base + w[m].end, p.rate_per_s, m);
      poisson(base + w[m].end, base + day_ns, p.background_per_h / 3600, m);
    }
  }
  std::sort(trace.begin(), trace.end(), [](const request& a, const request& b) { return a.t < b.t; });
  return trace;
}

enum class scenario { always_on, idle_unload, one_at_a_time };

struct result {
  std::string name;
  std::size_t devices = 0;
  double paid_hours = 0;  // device-hours paid over the whole run
  fc::money cost{};       // over the whole run
  fc::money check{};      // the ledger's figure for the same
  double pool_loaded_hours = 0;
  double utilization = 0;  // busy over paid time
  double loading = 0;      // load time over paid time
  std::uint64_t cold_starts = 0, preloads = 0, requests = 0, cold_requests = 0;
  double p99_cold_ms = 0, p99_all_ms = 0, max_cold_ms = 0;
  std::int64_t end_ns = 0;
};

struct sim_model {
  std::uint32_t id = 0;
};
using pool_t = frugal::model_pool<sim_model, frugal::model_args, frugal::manual_clock>;
using spec_t = frugal::model_spec<>;

double p99_ms(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(v.size())));
  return static_cast<double>(v[std::max<std::size_t>(rank, 1) - 1]) / 1e6;
}

std::uint32_t index_of(const std::string& name) {
  for (std::uint32_t m = 0; m < model_count; ++m)
    if (name == models[m].name) return m;
  throw std::logic_error("bench_pool_trace: no model " + name);
}

frugal::manual_clock::time_point at(std::int64_t t) { return frugal::manual_clock::time_point(ns(t)); }

result simulate(scenario sc, const params& p, const std::vector<request>& trace) {
  const std::size_t ndev = sc == scenario::one_at_a_time ? 1 : model_count;
  const auto device_of = [&](std::uint32_t m) -> std::size_t { return ndev == 1 ? 0 : m; };
  const fc::rate price = fc::rate::per_hour(fc::money::parse(p.price));
  const ns load(static_cast<std::int64_t>(p.load_s * 1e9));
  const ns service(static_cast<std::int64_t>(p.service_ms * 1e6));
  const ns tick(static_cast<std::int64_t>(p.tick_s * 1e9));
  // Any size will do: only the ratio of the budget to it matters.
  constexpr std::size_t model_bytes = std::size_t{1} << 30;

  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger(
      {.prices = {{.gpu_class = "gpu", .on_demand = price}},
       .devices = std::vector<fc::device_spec>(ndev, fc::device_spec{.gpu_class = "gpu"}),
       .alerts = {.enabled = false}},
      clock);
  std::vector<fc::feature_id> features;
  std::vector<spec_t> specs;
  for (const auto& m : models) {
    features.push_back(ledger.feature(m.name));
    specs.push_back(
        {.name = m.name,
         .estimated_bytes = model_bytes,
         .pinned = sc == scenario::always_on,
         .idle_unload_after = sc == scenario::idle_unload
                                  ? duration_cast<ns>(std::chrono::duration<double>(p.idle_min * 60))
                                  : ns(0)});
  }

  result r;
  r.name = sc == scenario::always_on     ? "(a) always-on, a device per model"
           : sc == scenario::idle_unload ? "(b) pool, idle unload, a device per model paid while loaded"
                                         : "(c) pool, budget of one model, one device";
  r.devices = ndev;
  std::uint64_t loader_calls = 0;
  std::int64_t loaded_ns = 0;
  fc::money window_paid = fc::money::from_nanos(0);
  std::vector<std::int64_t> load_start(model_count, 0);
  std::vector<std::optional<fc::ledger_snapshot>> at_load(model_count);

  auto pool = std::make_unique<pool_t>(
      pool_t::options_type{
          .budget_bytes = (sc == scenario::one_at_a_time ? 1 : model_count) * model_bytes,
          .models = specs,
          .load =
              [&](const spec_t& s) {
                const std::uint32_t m = index_of(s.name);
                ++loader_calls;
                load_start[m] = clock.now().time_since_epoch().count();
                at_load[m] = ledger.snapshot();
                ledger.record_model_load(device_of(m), load);
                return frugal::loaded_model<sim_model>{std::make_unique<sim_model>(sim_model{m}),
                                                       model_bytes};
              },
          .unload =
              [&](std::unique_ptr<sim_model> model, const spec_t&) {
                const std::uint32_t m = model->id;
                loaded_ns += clock.now().time_since_epoch().count() - load_start[m];
                window_paid += ledger.snapshot().since(*at_load[m]).devices[device_of(m)].paid;
                at_load[m].reset();
                ledger.record_model_unload(device_of(m));
              },
          // The loop never blocks: a device takes its next request only once the last lease has
          // ended, so a wait here would be a bug in the simulation; fail at once instead.
          .acquire_timeout = ns(0),
          .retry_backoff = ns(0)},
      clock);
  if (sc == scenario::always_on) pool->load_pinned();  // deployed before the first request
  r.preloads = loader_calls;

  struct device {
    std::deque<std::size_t> queue;
    bool busy = false;
    std::int64_t end = 0;
    std::size_t current = 0;
    bool current_cold = false;
    std::int64_t load_end = std::numeric_limits<std::int64_t>::min();
    pool_t::lease lease;
  };
  std::vector<device> devices(ndev);
  std::vector<std::int64_t> lat_all, lat_cold;
  lat_all.reserve(trace.size());

  const auto start = [&](device& d, std::size_t i, std::int64_t now) {
    const std::uint64_t before = loader_calls;
    d.lease = pool->acquire(models[trace[i].model].name);
    std::int64_t begin = now;
    const bool cold = loader_calls != before;
    if (cold) {
      ++r.cold_starts;
      begin += load.count();
      d.load_end = begin;
    }
    // It met a cold start if it started one or arrived before the load it queued behind had finished.
    d.current_cold = cold || trace[i].t < d.load_end;
    d.end = begin + service.count();
    d.current = i;
    d.busy = true;
  };
  const auto complete = [&](device& d, std::int64_t now) {
    const request& q = trace[d.current];
    const std::int64_t latency = now - q.t;
    lat_all.push_back(latency);
    if (d.current_cold) lat_cold.push_back(latency);
    ledger.record_batch(
        {.feature = features[q.model], .device = device_of(q.model), .busy = service, .batch_size = 1});
    ledger.record_request(features[q.model], std::min(ns(latency), fc::max_record_duration));
    d.lease.reset();
    d.busy = false;
    if (!d.queue.empty()) {
      const std::size_t next = d.queue.front();
      d.queue.pop_front();
      start(d, next, now);
    }
  };

  std::size_t next = 0;
  std::int64_t next_tick = tick.count();
  std::int64_t now = 0;
  const auto run_ticks = [&](std::int64_t until) {
    for (; next_tick <= until; next_tick += tick.count()) {
      clock.set(at(next_tick));
      pool->collect_idle();
    }
  };
  for (;;) {
    device* done = nullptr;
    for (auto& d : devices)
      if (d.busy && (done == nullptr || d.end < done->end)) done = &d;
    if (done == nullptr && next == trace.size()) break;
    const std::int64_t t_done = done ? done->end : std::numeric_limits<std::int64_t>::max();
    const std::int64_t t_arrive =
        next < trace.size() ? trace[next].t : std::numeric_limits<std::int64_t>::max();
    now = std::min(t_done, t_arrive);
    run_ticks(now);
    clock.set(at(now));
    if (t_done <= t_arrive) {
      complete(*done, now);
    } else {
      device& d = devices[device_of(trace[next].model)];
      if (d.busy) {
        d.queue.push_back(next);
      } else {
        start(d, next, now);
      }
      ++next;
    }
  }
  // A backlog may end after the last day; the run is paid up to whichever comes later.
  r.end_ns = std::max(now, std::int64_t{p.days} * day_ns);
  run_ticks(r.end_ns);
  clock.set(at(r.end_ns));

  const frugal::pool_stats st = pool->stats();
  for (const auto& m : st.models) r.pool_loaded_hours += m.byte_seconds / double(model_bytes) / 3600;
  pool.reset();  // unloads what is left, at the run's end, through the hook
  const fc::ledger_snapshot snap = ledger.snapshot();

  r.requests = lat_all.size();
  r.cold_requests = lat_cold.size();
  r.p99_all_ms = p99_ms(lat_all);
  r.p99_cold_ms = p99_ms(lat_cold);
  r.max_cold_ms =
      lat_cold.empty() ? 0 : static_cast<double>(*std::max_element(lat_cold.begin(), lat_cold.end())) / 1e6;
  if (sc == scenario::idle_unload) {
    r.paid_hours = static_cast<double>(loaded_ns) / 3600e9;
    r.cost = price.for_duration(ns(loaded_ns));
    r.check = window_paid;
  } else {
    r.paid_hours = static_cast<double>(ndev) * static_cast<double>(r.end_ns) / 3600e9;
    r.cost = price.for_duration(ns(r.end_ns)) * static_cast<std::int64_t>(ndev);
    r.check = snap.total_cost;
    if (sc == scenario::always_on) r.pool_loaded_hours = r.paid_hours;  // pinned: loaded all along
  }
  std::int64_t load_ns = 0;
  for (const auto& d : snap.devices) load_ns += d.load.count();
  r.loading = r.paid_hours > 0 ? static_cast<double>(load_ns) / 3600e9 / r.paid_hours : 0;
  r.utilization = r.paid_hours > 0 ? static_cast<double>(snap.total.busy.count()) / 3600e9 / r.paid_hours : 0;
  return r;
}

std::string hhmm(std::int64_t t) {
  char b[16];
  const auto m = t / (60 * ns_per_s);
  std::snprintf(b, sizeof b, "%02d:%02d", static_cast<int>(m / 60), static_cast<int>(m % 60));
  return b;
}

std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string report(const params& p, const std::vector<window>& w, const std::vector<request>& trace,
                   const std::vector<result>& rs) {
  std::ostringstream o;
  const double days = p.days;
  o << "### bench_pool_trace: three models, " << p.days << " days, $" << p.price << "/h per device\n\n";
  o << "Trace (seed " << p.seed << "): one busy window a day per model, "
    << (p.windows.empty() ? "drawn with the seed" : "given by --windows") << " and kept every day:";
  for (std::size_t m = 0; m < model_count; ++m)
    o << (m ? "," : "") << " " << models[m].name << " " << hhmm(w[m].start) << "-" << hhmm(w[m].end) << " ("
      << fixed(static_cast<double>(w[m].end - w[m].start) / 3600e9, 1) << " h)";
  o << "; Poisson arrivals at " << p.rate_per_s << "/s inside a window and " << p.background_per_h
    << "/h outside it, drawn afresh each day: " << trace.size() << " requests ("
    << fixed(static_cast<double>(trace.size()) / days, 0) << "/day).\n\n";
  o << "Stated constants: load " << p.load_s << " s, service " << p.service_ms << " ms per request (one at a "
    << "time per device, FIFO), idle unload after " << p.idle_min
    << " min of no lease (b), collect_idle() every " << p.tick_s << " s.\n\n";
  o << "| scenario | devices | device-hours/day | cost/day | saving vs (a) | seeds' figure | cold starts/day "
       "| "
       "requests that met one/day | p99 of those | p99 all requests | ledger cross-check |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  const double base = rs[0].cost.to_double();
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const result& r = rs[i];
    const double saving = 1 - r.cost.to_double() / base;
    const char* seed = i == 1 ? "40% (idle release)" : i == 2 ? "60% (load on demand)" : "";
    const double diff = (r.check - r.cost).to_double();
    std::string check = (i == 1 ? "loaded windows priced: $" : "paid: $") +
                        fixed(r.check.to_double() / days, 4) + "/day (diff " + fixed(diff, 9) + ")";
    if (i == 1) check += "; pool byte_seconds: " + fixed(r.pool_loaded_hours / days, 3) + " h/day";
    o << "| " << r.name << " | " << r.devices << " | " << fixed(r.paid_hours / days, 2) << " | $"
      << fixed(r.cost.to_double() / days, 2) << " | " << (i == 0 ? "-" : fixed(100 * saving, 1) + "%")
      << " | " << seed << " | " << fixed(static_cast<double>(r.cold_starts) / days, 1) << " | "
      << fixed(static_cast<double>(r.cold_requests) / days, 1) << " | "
      << (r.cold_requests ? fixed(r.p99_cold_ms, 0) + " ms" : "-") << " | " << fixed(r.p99_all_ms, 0)
      << " ms | " << check << " |\n";
  }
  o << "\n";
  for (const result& r : rs) {
    o << "- " << r.name << ": " << r.requests << " requests, " << r.cold_starts << " cold starts";
    if (r.preloads) o << " (plus " << r.preloads << " loads before the first request)";
    o << ", paid time " << fixed(100 * r.utilization, 1) << "% serving and " << fixed(100 * r.loading, 2)
      << "% loading";
    if (r.cold_requests) o << ", slowest request that met a cold start " << fixed(r.max_cold_ms, 0) << " ms";
    if (r.end_ns > std::int64_t{p.days} * day_ns)
      o << "; its backlog ran "
        << fixed(static_cast<double>(r.end_ns - std::int64_t{p.days} * day_ns) / 1e9, 1)
        << " s past the last day (paid)";
    o << ".\n";
  }
  return o.str();
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr
      << "bench_pool_trace: " << why
      << "\nusage: bench_pool_trace [--days N] [--seed S] [--rate PER_S] [--background PER_H] [--load-s S] "
         "[--service-ms MS] [--idle-min MIN] [--tick-s S] [--price 0.80] [--windows HH:MM-HH:MM,x3] [--out "
         "FILE]\n";
  std::exit(2);
}

params parse(int argc, char** argv) {
  params p;
  const std::pair<const char*, std::function<void(const std::string&)>> flags[] = {
      {"--days", [&](const std::string& v) { p.days = std::stoi(v); }},
      {"--seed", [&](const std::string& v) { p.seed = std::stoull(v); }},
      {"--rate", [&](const std::string& v) { p.rate_per_s = std::stod(v); }},
      {"--background", [&](const std::string& v) { p.background_per_h = std::stod(v); }},
      {"--load-s", [&](const std::string& v) { p.load_s = std::stod(v); }},
      {"--service-ms", [&](const std::string& v) { p.service_ms = std::stod(v); }},
      {"--idle-min", [&](const std::string& v) { p.idle_min = std::stod(v); }},
      {"--tick-s", [&](const std::string& v) { p.tick_s = std::stod(v); }},
      {"--price", [&](const std::string& v) { p.price = v; }},
      {"--windows", [&](const std::string& v) { p.windows = v; }},
      {"--out", [&](const std::string& v) { p.out = v; }}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto f =
        std::find_if(std::begin(flags), std::end(flags), [&](const auto& x) { return a == x.first; });
    if (f == std::end(flags)) usage("unknown flag " + a);
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    try {
      f->second(v);
    } catch (const std::logic_error&) {
      usage("bad value for " + a + ": " + v);
    }
  }
  if (p.days < 1 || p.rate_per_s < 0 || p.background_per_h < 0 || p.load_s < 0 || p.service_ms <= 0 ||
      p.idle_min <= 0 || p.tick_s <= 0 || p.load_s > 3600 || p.service_ms > 3600e3 || p.days > 366)
    usage(
        "need days in 1 .. 366, service-ms, idle-min and tick-s > 0, load-s and service-ms at most an hour, "
        "the rest >= 0");
  try {
    fc::money::parse(p.price);
  } catch (const std::exception& e) {
    usage(std::string("--price: ") + e.what());
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const params p = parse(argc, argv);
  std::vector<window> w;
  try {
    w = make_windows(p);
  } catch (const std::logic_error& e) {
    usage(std::string("--windows: ") + e.what());
  }
  const auto trace = make_trace(p, w);
  std::vector<result> rs;
  for (const scenario sc : {scenario::always_on, scenario::idle_unload, scenario::one_at_a_time})
    rs.push_back(simulate(sc, p, trace));
  const std::string text = report(p, w, trace, rs);
  std::cout << text;
  if (!p.out.empty()) {
    std::ofstream f(p.out);
    f << text;
    if (!f) {
      std::cerr << "bench_pool_trace: cannot write " << p.out << "\n";
      return 1;
    }
  }
  return 0;
}
