#pragma once

// The demo's load generator: the same Zipf traffic at every step, in phases of closed-loop clients
// (each a thread that waits for its answer before it asks again), Poisson arrivals (timed from their
// intended start, so a late answer is never hidden), and idle time.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "loop.hpp"

namespace demo {

/// One request of the traffic: which pooled input, and when (open-loop phases).
struct planned_request {
  int input = 0;
  clock::duration offset{0};  // from the phase's start
};

/// Zipf-distributed draws over the pool; the popular inputs are spread over it by a seeded permutation.
class zipf_inputs {
 public:
  explicit zipf_inputs(const config& c)
      : cdf_(static_cast<std::size_t>(c.pool)), perm_(static_cast<std::size_t>(c.pool)) {
    double sum = 0;
    for (int i = 0; i < c.pool; ++i)
      cdf_[static_cast<std::size_t>(i)] = (sum += 1.0 / std::pow(i + 1.0, c.zipf_s));
    for (auto& v : cdf_) v /= sum;
    for (int i = 0; i < c.pool; ++i) perm_[static_cast<std::size_t>(i)] = i;
    std::mt19937_64 rng(c.model.seed * 7919 + 1);
    std::shuffle(perm_.begin(), perm_.end(), rng);
  }
  int draw(std::mt19937_64& rng) const {
    const auto it =
        std::lower_bound(cdf_.begin(), cdf_.end(), std::uniform_real_distribution<double>(0.0, 1.0)(rng));
    return perm_[static_cast<std::size_t>(
        std::min<std::ptrdiff_t>(it - cdf_.begin(), static_cast<std::ptrdiff_t>(perm_.size()) - 1))];
  }

 private:
  std::vector<double> cdf_;
  std::vector<int> perm_;
};

/// One phase's requests, the same sequence at every step: drawn from (seed, phase index) alone, so a
/// timed phase that serves more requests at a faster step serves a longer prefix of the same stream.
class phase_stream {
 public:
  phase_stream(const zipf_inputs& z, const config& c, std::size_t phase_index)
      : z_(&z),
        rng_(c.model.seed * 0x9e3779b97f4a7c15ull + (phase_index + 1) * 0xbf58476d1ce4e5b9ull),
        gap_(c.phases[phase_index].kind == "poisson" ? c.phases[phase_index].rate : 1.0),
        poisson_(c.phases[phase_index].kind == "poisson") {}
  planned_request next() {
    if (poisson_) t_ += gap_(rng_);
    return {z_->draw(rng_), std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(t_))};
  }

 private:
  const zipf_inputs* z_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  bool poisson_;
  double t_ = 0;
};

/// The requests of the phases that have a fixed count, in order (a timed closed phase contributes none,
/// as its count depends on the step's speed): what a test can know before the run.
inline std::vector<planned_request> make_plan(const config& c) {
  const zipf_inputs z(c);
  std::vector<planned_request> plan;
  for (std::size_t p = 0; p < c.phases.size(); ++p) {
    const auto& ph = c.phases[p];
    if (ph.kind == "idle" || (ph.kind == "closed" && ph.seconds > 0)) continue;
    phase_stream st(z, c, p);
    for (int i = 0; i < ph.requests; ++i) plan.push_back(st.next());
  }
  return plan;
}

// Accuracy against the fp32 outputs, over the requests whose input is in the reference sample.
struct accuracy_tally {
  std::mutex m;
  double cosine_sum = 0, max_rel = 0;
  std::uint64_t count = 0;
  void add(const std::vector<float>& got, const float* ref, std::size_t n) {
    double dot = 0, gg = 0, rr = 0, dd = 0;
    for (std::size_t i = 0; i < n; ++i) {
      dot += double(got[i]) * ref[i];
      gg += double(got[i]) * got[i];
      rr += double(ref[i]) * ref[i];
      dd += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    }
    const double cos = dot / std::sqrt(gg * rr + 1e-300), rel = std::sqrt(dd / (rr + 1e-300));
    std::lock_guard g(m);
    cosine_sum += cos;
    max_rel = std::max(max_rel, rel);
    ++count;
  }
};

using progress_fn =
    std::function<void(const std::string& phase, std::uint64_t done, std::uint64_t total, double rate)>;

struct shared_inputs {
  const config& cfg;
  const input_pool& pool;
  const matrix& reference;  // fp32 outputs of the first accuracy_sample pool inputs
  const zipf_inputs& inputs;
  std::function<const served_model&(const std::string& precision)> model_for;
};

/// What a step's traffic measured beside the ledger.
struct load_result {
  std::uint64_t answered = 0, failed = 0;
  double closed_seconds = 0;            // time spent in closed-loop (saturating) phases
  std::uint64_t closed_requests = 0;    // requests issued in them
  std::vector<double> open_latency_ms;  // model-answered requests of the open-loop phases
};

/// Plays the config's phases against answer(input, intended start) -> serving_loop::answer_type.
/// `saturated` is set while a closed-loop phase runs, for the loop's worker to tally its batches.
template <class Answer>
load_result generate_load(const shared_inputs& in, const std::string& step_name, Answer&& answer,
                          std::atomic<bool>& saturated, accuracy_tally& acc, const progress_fn& progress,
                          int out_dim) {
  const config& cfg = in.cfg;
  load_result r;
  std::atomic<std::uint64_t> answered{0}, failed{0};
  std::mutex open_m;  // guards r.open_latency_ms
  const auto one = [&](int input, clock::time_point start, bool open_loop) {
    const auto a = answer(input, start);
    if (!a.value) {
      failed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (input < cfg.accuracy_sample)
      acc.add(*a.value, in.reference.row(input).data(), static_cast<std::size_t>(out_dim));
    answered.fetch_add(1, std::memory_order_relaxed);
    if (open_loop && !a.hit) {  // a hit is not a model call: not in the light-load p50
      const double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
      std::lock_guard g(open_m);
      r.open_latency_ms.push_back(ms);
    }
  };

  // The total is known before the run only when no phase is timed; 0 means unknown.
  std::uint64_t total = 0;
  bool timed = false;
  for (const auto& ph : cfg.phases) {
    if (ph.kind == "closed" && ph.seconds > 0)
      timed = true;
    else if (ph.kind != "idle")
      total += static_cast<std::uint64_t>(ph.requests);
  }
  if (timed) total = 0;
  const auto step_start = clock::now();
  auto report = [&](const std::string& what) {
    if (!progress) return;
    const double s = std::chrono::duration<double>(clock::now() - step_start).count();
    const std::uint64_t done = answered.load() + failed.load();
    progress(step_name + ": " + what, done, total, s > 0 ? static_cast<double>(done) / s : 0);
  };

  for (std::size_t p = 0; p < cfg.phases.size(); ++p) {
    const phase& ph = cfg.phases[p];
    const auto phase_start = clock::now();
    if (ph.kind == "idle") {
      report("idle");
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ph.ms));
      continue;
    }
    const bool closed = ph.kind == "closed";
    // A timed closed phase stops issuing at its deadline (then drains), or at `requests` if that comes first.
    const auto deadline = closed && ph.seconds > 0
                              ? phase_start + std::chrono::duration_cast<clock::duration>(
                                                  std::chrono::duration<double>(ph.seconds))
                              : clock::time_point::max();
    const std::uint64_t cap =
        ph.requests > 0 ? static_cast<std::uint64_t>(ph.requests) : std::numeric_limits<std::uint64_t>::max();
    phase_stream stream(in.inputs, cfg, p);
    std::mutex stream_m;
    std::uint64_t issued = 0;
    // The next request of the phase, or none once it has issued them all (or passed its deadline).
    const auto take = [&](planned_request& pr) {
      std::lock_guard g(stream_m);
      if (issued >= cap || clock::now() >= deadline) return false;
      pr = stream.next();
      ++issued;
      return true;
    };
    // Closed loop: `clients` callers. Open loop: enough callers that an arrival rarely waits for one
    // (its latency counts from its intended time either way).
    const std::size_t callers =
        closed ? static_cast<std::size_t>(ph.clients)
               : static_cast<std::size_t>(std::clamp<double>(std::ceil(ph.rate * 0.25), 8.0, 256.0));
    if (closed) saturated.store(true);
    {
      std::vector<std::jthread> threads;
      threads.reserve(callers);
      for (std::size_t t = 0; t < callers; ++t)
        threads.emplace_back([&] {
          planned_request pr;
          while (take(pr)) {
            clock::time_point start = clock::now();
            if (!closed) {
              start = phase_start + pr.offset;  // intended time: no coordinated omission
              std::this_thread::sleep_until(start);
            }
            one(pr.input, start, !closed);
          }
        });
      // Progress every half second until the phase has issued its last request.
      for (auto last = clock::now();;) {
        {
          std::lock_guard g(stream_m);
          if (issued >= cap || clock::now() >= deadline) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (clock::now() - last > std::chrono::milliseconds(500)) {
          report(ph.kind);
          last = clock::now();
        }
      }
    }  // joins the callers: the phase is drained
    saturated.store(false);
    if (closed) {
      r.closed_seconds += std::chrono::duration<double>(clock::now() - phase_start).count();
      r.closed_requests += issued;
    }
  }
  report("done");
  r.answered = answered.load();
  r.failed = failed.load();
  return r;
}

}  // namespace demo
