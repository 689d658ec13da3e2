#pragma once

// The main demo as a library, so that a test can run a short scripted version of it: a user-owned
// inference loop built from frugal's batcher, quantized kernels, result cache and cost ledger (loop.hpp,
// the part to copy), served the same traffic (load.hpp) under a ladder of configurations (report.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <frugal/frugal.hpp>

#include "../common/corpus.hpp"
#include "../common/load_model.hpp"
#include "config.hpp"
#include "load.hpp"
#include "loop.hpp"
#include "report.hpp"
#include "served_model.hpp"

namespace demo {

/// One step of the ladder: a fresh serving loop (batcher, cache, ledger, worker) under the traffic.
template <class Policy>
step_result run_step(const step_config& st, const shared_inputs& in, Policy policy,
                     const progress_fn& progress) {
  const config& cfg = in.cfg;
  const served_model& model = in.model_for(st.precision);
  std::atomic<bool> saturated{false};
  saturated_tally sat;  // the worker's alone until the loop is closed
  loop_options o{
      .batcher = {.window = st.batching ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::duration<double, std::milli>(cfg.window_ms))
                                        : std::chrono::nanoseconds(0),
                  .max_batch =
                      st.batching ? static_cast<std::size_t>(st.max_batch ? st.max_batch : cfg.max_batch) : 1,
                  .max_batch_cost = st.batching ? cfg.max_batch_tokens : 0,
                  .max_queued = cfg.max_queued},
      .cache = st.cache ? std::optional<frugal::cache_options<frugal::key128, std::vector<float>>>(
                              {.max_entries = cfg.cache_entries, .max_bytes = cfg.cache_bytes})
                        : std::nullopt,
      .gpu_class = cfg.gpu_name,
      .price = frugal::cost::rate::per_hour(frugal::cost::money::parse(cfg.gpu_hourly_usd)),
      .feature = cfg.model_name,
      .on_batch =
          [&](std::size_t n, clock::duration busy, double cpu) {
            if (!saturated.load(std::memory_order_relaxed)) return;
            ++sat.calls;
            sat.batched += n;
            sat.busy += busy;
            sat.cpu += cpu;
          },
  };
  serving_loop<Policy> loop(model, std::move(o), std::move(policy));
  accuracy_tally acc;
  const load_result load = generate_load(
      in, st.name, [&](int input, clock::time_point start) { return loop.answer(input, start); }, saturated,
      acc, progress, model.output_dim());
  loop.close();
  return make_step_result(st, model, loop.ledger().snapshot(), load, sat, acc);
}

/// Serves the plan under every step of the ladder; step i's savings are against step 0.
inline std::vector<step_result> run(const config& cfg, const progress_fn& progress = {}) {
  input_pool pool;
  std::optional<bert::encoder> fp32_text;  // minilm: the reference, also served by the fp32 steps
  std::vector<std::string> calibration;
  const auto source = [&](const std::string& precision) {
    return examples::encoder_source{
        .dir = cfg.model_path,
        .precision = precision,
        .calibration = cfg.calibration,
        .calibration_sentences = static_cast<std::size_t>(cfg.calibration_sentences),
        .threads = cfg.model_threads,
        .precision_name = "precision",
        .calibration_name = "model.calibration"};
  };
  if (cfg.model_kind == "minilm") {
    try {
      pool.texts = examples::sample_fortunes(cfg.corpus, static_cast<std::size_t>(cfg.pool), cfg.model.seed);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("traffic.corpus: ") + e.what() + " (traffic.pool)");
    }
    fp32_text = examples::load_encoder(source("fp32"));
    for (const auto& t : pool.texts) pool.ids.push_back(fp32_text->tokenize(t));
  } else {
    pool.rows = make_input_pool(cfg.pool, cfg.model.dims.front(), cfg.model.seed);
  }
  // One model per precision, made on first use and shared by the steps that serve it.
  std::map<std::string, std::unique_ptr<served_model>> models;
  const auto model_for = [&](const std::string& prec) -> const served_model& {
    auto& m = models[prec];
    if (m) return *m;
    if (cfg.model_kind == "minilm") {
      m = std::make_unique<bert_model>(bert::parse_precision(prec) == bert::precision::fp32
                                           ? std::move(*fp32_text)
                                           : examples::load_encoder(source(prec)),
                                       pool);
    } else {
      const recipe p = parse_recipe(prec);
      std::unique_ptr<gpu_backend> gpu;
      if (cfg.device != "cpu" && (p == recipe::fp32 || p == recipe::w8a8)) {
        std::string why;
        gpu = make_gpu_backend(p == recipe::w8a8, mlp(cfg.model, p).export_layers(), why);
        if (!gpu && cfg.device == "gpu") throw std::runtime_error("config: device is gpu but " + why);
      }
      m = std::make_unique<mlp_model>(cfg.model, p, pool, std::move(gpu));
    }
    return *m;
  };
  const int sample = std::min(cfg.accuracy_sample, cfg.pool);
  std::vector<int> first(static_cast<std::size_t>(sample));
  for (int i = 0; i < sample; ++i) first[static_cast<std::size_t>(i)] = i;
  const matrix reference = model_for("fp32").forward(first);
  const zipf_inputs inputs(cfg);
  const shared_inputs in{cfg, pool, reference, inputs, model_for};
  std::vector<step_result> out;
  for (const auto& st : cfg.ladder) {
    if (st.policy == "adaptive" && st.batching) {
      frugal::adaptive pol(
          frugal::adaptive_options{.latency_target = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::duration<double, std::milli>(cfg.latency_target_ms))});
      out.push_back(run_step(st, in, std::move(pol), progress));
    } else {
      out.push_back(run_step(st, in, frugal::fixed_window{}, progress));
    }
    const auto base = out.front().cost_per_1k.nanos();
    out.back().savings =
        base > 0 ? 1.0 - static_cast<double>(out.back().cost_per_1k.nanos()) / static_cast<double>(base) : 0;
  }
  return out;
}

}  // namespace demo
