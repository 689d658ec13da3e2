// The generation ladder on SmolLM2 (issue 45): one chat trace (chat_trace.hpp) replayed in real time
// against
//   1. one request at a time (frugal::batcher, max_batch 1, whole requests);
//   2. static batches of whole requests (frugal::batcher, window 0, max_batch = --max-running: a batch is
//      prefilled in one step and decoded until its longest answer ends; nothing joins it meanwhile; the
//      Orca paper's baseline);
//   2p. 2 with each batch's finished sequences still computed until the batch ends (--rungs p);
//   3. iteration-level scheduling (frugal::scheduler, prefix caching off);
//   4. 3 with prefix caching;
//   5. 4 with the response cache (frugal::response_cache over an LRU, keyed by the prompt and max_tokens:
//      a request that repeats a finished one exactly costs no model step; --repeat-share makes repeats).
// Each rung reports output tokens/s (generated tokens over the time from the first arrival to the last
// answer), p50/p99 time to first token from each request's arrival, prefill tokens computed, and KV memory
// (paged: the share of the used blocks' slots holding no token; a contiguous per-sequence allocation of
// prompt + max_tokens, or of the model's context, for the same live sequences at the same steps). Then the
// costs of the machinery: the scheduler's own time per step against the model's step at 32 running
// sequences, and what batch invariance costs (fp32 with load_options::batch_invariant against Eigen's
// GEMM; native and int8 beside them). Answers are greedy and exactly answer_tokens long (no stop token), so
// every rung generates the same tokens. One JSON line per result on stdout, a markdown table on stderr.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <frugal/batcher.hpp>
#include <frugal/cache.hpp>
#include <frugal/cache/response.hpp>
#include <frugal/scheduler.hpp>

#include "chat_trace.hpp"
#include "llama.hpp"
#include "stats.hpp"

namespace {

using clk = std::chrono::steady_clock;
using frugal::kv_token;

double ms_since(clk::time_point a, clk::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct prepared {
  std::vector<kv_token> prompt;
  std::size_t answer = 0;
  double arrival_s = 0;
};

/// Rung 5's response cache: whole greedy completions keyed by the prompt and the answer length.
using responses = frugal::response_cache<frugal::lru_cache<frugal::completion>>;

frugal::response_request response_key(std::span<const kv_token> prompt, std::size_t answer) {
  return {.model = "smollm2/native", .prompt = prompt, .max_tokens = answer};
}

struct kv_tally {
  // Summed over the steps: slots of the used blocks, tokens stored in them; contiguous reservations and the
  // tokens of the same sequences.
  double paged_slots = 0, paged_tokens = 0, reserved_max = 0, reserved_context = 0, seq_tokens = 0;
  std::size_t peak_bytes = 0;

  void sample(const frugal::kv_cache& kv, double reserve_max, double reserve_context) {
    const frugal::kv_cache_stats s = kv.stats();
    paged_slots += static_cast<double>(s.blocks_used * s.block_tokens);
    paged_tokens += static_cast<double>(s.stored_tokens);
    seq_tokens += static_cast<double>(s.sequence_tokens);
    reserved_max += reserve_max;
    reserved_context += reserve_context;
    peak_bytes = std::max(peak_bytes, s.bytes_used);
  }
};

struct rung_result {
  std::string name;
  double wall_s = 0;
  std::size_t generated = 0;
  std::vector<double> ttft_ms;
  std::uint64_t prefill_computed = 0, prefix_hits = 0, steps = 0, preemptions = 0, recomputed = 0, failed = 0;
  kv_tally kv;
};

using examples::quantile;

kv_token greedy(std::span<const float> row) { return *frugal::sample_token(row, {}, 0.0); }

// Calls submit(i) at each request's arrival time (real time, from `start`), then done().
std::thread replay(const std::vector<prepared>& trace, clk::time_point start,
                   std::vector<clk::time_point>& arrival, std::function<void(std::size_t)> submit,
                   std::function<void()> done) {
  return std::thread([&trace, start, &arrival, submit = std::move(submit), done = std::move(done)] {
    for (std::size_t i = 0; i < trace.size(); ++i) {
      const auto at = start + std::chrono::duration_cast<clk::duration>(
                                  std::chrono::duration<double>(trace[i].arrival_s));
      std::this_thread::sleep_until(at);
      arrival[i] = clk::now();
      submit(i);
    }
    done();
  });
}

// Rungs 1 and 2: whole requests grouped by frugal::batcher; each batch prefilled in one packed step, then
// decoded together until its longest answer ends. Finished sequences leave the step (no padding is
// computed), but no request joins a batch once it started. `padded` (rung 2p) keeps them in every step
// until the batch ends, their rows computed and thrown away, as the Orca paper's FasterTransformer
// baseline computes a batch's padding.
rung_result run_static(const std::string& name, llama::model& m, const std::vector<prepared>& trace,
                       std::size_t max_batch, frugal::quant::executor* threads, bool padded = false) {
  rung_result r;
  r.name = name;
  frugal::batcher<std::size_t, int> b({.window = std::chrono::nanoseconds(0), .max_batch = max_batch});
  std::vector<clk::time_point> arrival(trace.size());
  const std::size_t ctx = m.cfg().context;
  const clk::time_point start = clk::now();
  std::thread producer = replay(
      trace, start, arrival, [&](std::size_t i) { b.submit(i, [](frugal::result<int>) {}); },
      [&] { b.close(frugal::drain::yes); });
  clk::time_point last = start;
  while (auto bt = b.next_batch()) {
    const std::span<const std::size_t> ids = bt->requests();
    const std::size_t k = ids.size();
    std::vector<llama::sequence> seqs;
    // Padded, every sequence runs for the batch's longest answer; else each for its own.
    std::size_t longest = 0;
    for (std::size_t i = 0; i < k; ++i) longest = std::max(longest, trace[ids[i]].answer);
    double reserve = 0;
    for (std::size_t i = 0; i < k; ++i) {
      seqs.push_back(m.open());
      reserve += static_cast<double>(trace[ids[i]].prompt.size() + (padded ? longest : trace[ids[i]].answer));
    }
    std::vector<llama::input> in;
    for (std::size_t i = 0; i < k; ++i) in.push_back({.seq = &seqs[i], .tokens = trace[ids[i]].prompt});
    std::vector<float> logits = m.forward(in, threads);
    r.kv.sample(m.kv(), reserve, static_cast<double>(k * ctx));
    ++r.steps;
    const std::size_t V = m.cfg().vocab;
    std::vector<kv_token> cur(k);
    std::vector<std::size_t> made(k, 1);
    const clk::time_point first = clk::now();
    for (std::size_t i = 0; i < k; ++i) {
      r.prefill_computed += trace[ids[i]].prompt.size();
      r.ttft_ms.push_back(ms_since(arrival[ids[i]], first));
      cur[i] = greedy(std::span<const float>(logits).subspan(i * V, V));
    }
    for (;;) {
      in.clear();
      std::vector<std::size_t> live;
      for (std::size_t i = 0; i < k; ++i)
        if (made[i] < trace[ids[i]].answer) live.push_back(i);
      if (live.empty()) break;
      for (std::size_t i = 0; i < k; ++i)
        if (padded || made[i] < trace[ids[i]].answer)
          in.push_back({.seq = &seqs[i], .tokens = std::span(&cur[i], 1)});
      logits = m.forward(in, threads);  // padded: one row per sequence of the batch, else per live one
      r.kv.sample(m.kv(), reserve, static_cast<double>(k * ctx));
      ++r.steps;
      for (std::size_t j = 0; j < live.size(); ++j) {
        cur[live[j]] = greedy(std::span<const float>(logits).subspan((padded ? live[j] : j) * V, V));
        ++made[live[j]];
      }
    }
    for (std::size_t i = 0; i < k; ++i) r.generated += made[i];
    bt->fulfill(std::vector<int>(k, 0));
    last = clk::now();
  }
  producer.join();
  r.wall_s = std::chrono::duration<double>(last - start).count();
  return r;
}

// Rungs 3 to 5: frugal::scheduler, the user's loop; the model runs each step on its KV cache.
rung_result run_iteration(const std::string& name, llama::model& m, const std::vector<prepared>& trace,
                          frugal::scheduler_options o, frugal::quant::executor* threads,
                          responses* cache = nullptr) {
  rung_result r;
  r.name = name;
  o.vocab_size = m.cfg().vocab;
  o.max_context = m.cfg().context;
  frugal::scheduler<> s(m.kv(), o);
  std::vector<clk::time_point> arrival(trace.size());
  std::mutex mu;  // r.ttft_ms and r.generated from the producer's cache hits and the loop's callbacks
  std::map<frugal::sequence_id, std::size_t> job;  // the loop thread's: admitted sequences and their request
  std::map<std::size_t, double> reserved;
  std::atomic<bool> all_in{false};
  clk::time_point last = clk::now();
  const clk::time_point start = clk::now();
  std::mutex job_mu;
  std::thread producer = replay(
      trace, start, arrival,
      [&](std::size_t i) {
        if (cache) {
          if (const auto hit = cache->get(response_key(trace[i].prompt, trace[i].answer))) {
            std::lock_guard lk(mu);
            r.ttft_ms.push_back(ms_since(arrival[i], clk::now()));
            r.generated += hit->tokens.size();
            last = std::max(last, clk::now());
            return;
          }
        }
        std::lock_guard jl(job_mu);
        const frugal::sequence_id id = s.submit(
            {.prompt = trace[i].prompt, .max_tokens = trace[i].answer},
            [&, i](frugal::result<frugal::generation> g) {
              std::lock_guard lk(mu);
              reserved.erase(i);
              if (!g) {
                ++r.failed;
                return;
              }
              const frugal::generation& gen = g.value();
              r.ttft_ms.push_back(std::chrono::duration<double, std::milli>(gen.time_to_first_token).count());
              r.generated += gen.tokens.size();
              last = std::max(last, clk::now());
              if (cache)
                cache->put(response_key(trace[i].prompt, trace[i].answer),
                           {.tokens = gen.tokens, .prompt_tokens = gen.prompt_tokens});
            });
        job[id] = i;
      },
      [&] {
        all_in = true;
        s.close();
      });
  const double ctx = static_cast<double>(m.cfg().context);
  for (;;) {
    std::optional<frugal::step> st = s.next_step(std::chrono::milliseconds(50));
    if (!st) {
      if (all_in && s.idle()) break;
      continue;
    }
    const std::vector<float> logits = m.run_step(*st, threads);
    {
      std::lock_guard jl(job_mu);
      std::lock_guard lk(mu);
      for (const frugal::step_entry& e : st->entries()) {
        const std::size_t i = job.at(e.sequence);
        reserved.emplace(i, static_cast<double>(trace[i].prompt.size() + trace[i].answer));
      }
      double res = 0;
      for (const auto& [i, v] : reserved) res += v;
      r.kv.sample(m.kv(), res, static_cast<double>(reserved.size()) * ctx);
    }
    s.complete(*st, logits, threads);
  }
  producer.join();
  const frugal::scheduler_stats ss = s.stats();
  r.prefill_computed = ss.prefill_tokens;
  r.prefix_hits = ss.prefix_hit_tokens;
  r.steps = ss.steps;
  r.preemptions = ss.preemptions;
  r.recomputed = ss.recomputed_tokens;
  r.wall_s = std::chrono::duration<double>(last - start).count();
  return r;
}

std::string json(const rung_result& r, std::size_t kv_bytes_per_token) {
  std::ostringstream o;
  const auto share = [](double used, double all) { return all > 0 ? 1.0 - used / all : 0.0; };
  o << "{\"rung\": \"" << r.name << "\", \"requests\": " << r.ttft_ms.size() << ", \"wall_s\": " << r.wall_s
    << ", \"generated_tokens\": " << r.generated
    << ", \"output_tokens_per_s\": " << static_cast<double>(r.generated) / r.wall_s
    << ", \"ttft_ms\": {\"p50\": " << quantile(r.ttft_ms, 0.5) << ", \"p99\": " << quantile(r.ttft_ms, 0.99)
    << "}, \"prefill_tokens_computed\": " << r.prefill_computed
    << ", \"prefix_hit_tokens\": " << r.prefix_hits << ", \"steps\": " << r.steps
    << ", \"preemptions\": " << r.preemptions << ", \"recomputed_tokens\": " << r.recomputed
    << ", \"failed\": " << r.failed << ", \"kv\": {\"bytes_per_token\": " << kv_bytes_per_token
    << ", \"peak_bytes\": " << r.kv.peak_bytes
    << ", \"paged_waste\": " << share(r.kv.paged_tokens, r.kv.paged_slots)
    << ", \"contiguous_max_tokens_waste\": " << share(r.kv.seq_tokens, r.kv.reserved_max)
    << ", \"contiguous_context_waste\": " << share(r.kv.seq_tokens, r.kv.reserved_context) << "}}";
  return o.str();
}

std::vector<kv_token> encode_chat(const llama::model& m, const std::vector<chat_trace::message>& msgs) {
  std::vector<frugal::chat::message> cm;
  for (const auto& x : msgs) cm.push_back({x.role, x.content});
  return m.encode_chat(cm);
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

// The scheduler's own time (try_next_step + complete, greedy sampling included) against the model's step,
// over pure decode steps of `running` sequences.
std::string scheduler_cost(llama::model& m, const std::vector<prepared>& trace, std::size_t running,
                           frugal::quant::executor* threads) {
  frugal::scheduler<> s(m.kv(), {.max_running = running,
                                 .step_tokens = 4096,
                                 .max_context = m.cfg().context,
                                 .vocab_size = m.cfg().vocab});
  for (std::size_t i = 0; i < running; ++i)
    s.submit({.prompt = trace[i % trace.size()].prompt, .max_tokens = 24},
             [](frugal::result<frugal::generation>) {});
  std::vector<double> sched_ms, model_ms, sample_ms;
  for (;;) {
    const auto t0 = clk::now();
    std::optional<frugal::step> st = s.try_next_step();
    const auto t1 = clk::now();
    if (!st) break;
    const std::vector<float> logits = m.run_step(*st, threads);
    const auto t2 = clk::now();
    s.complete(*st, logits, threads);
    const auto t3 = clk::now();
    if (st->decode_tokens() == running && st->size() == running) {
      sched_ms.push_back(ms_since(t0, t1) + ms_since(t2, t3));
      model_ms.push_back(ms_since(t1, t2));
      const std::size_t V = m.cfg().vocab;
      const auto a = clk::now();
      kv_token sink = 0;
      for (std::size_t r = 0; r < running; ++r)
        sink ^= greedy(std::span<const float>(logits).subspan(r * V, V));
      sample_ms.push_back(ms_since(a, clk::now()));
      if (sink == -1) std::fputs("", stderr);
    }
  }
  std::ostringstream o;
  o << "{\"scheduler_cost\": {\"running\": " << running << ", \"steps\": " << sched_ms.size()
    << ", \"scheduler_ms_per_step\": " << median(sched_ms)
    << ", \"greedy_sampling_ms_per_step\": " << median(sample_ms)
    << ", \"model_ms_per_step\": " << median(model_ms)
    << ", \"share\": " << median(sched_ms) / median(model_ms) << "}}";
  return o.str();
}

// Prefill of one 256-token prompt (tokens/s) and decode steps of 1 and 32 sequences (ms), median of `reps`.
std::string kernel_cost(const std::string& path, llama::precision p, bool invariant,
                        frugal::quant::executor* threads, int reps) {
  auto m = llama::model::load(path, {.weights = p, .prefix_caching = false, .batch_invariant = invariant});
  std::vector<kv_token> prompt(256);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<kv_token>(100 + (i * 7919) % 40000);
  std::vector<double> pre, d1, d32;
  for (int r = 0; r < reps; ++r) {
    {
      llama::sequence s = m->open();
      const llama::input e{.seq = &s, .tokens = prompt};
      const auto a = clk::now();
      (void)m->forward(std::span(&e, 1), threads);
      pre.push_back(static_cast<double>(prompt.size()) / (ms_since(a, clk::now()) / 1e3));
    }
    for (const std::size_t n : {std::size_t{1}, std::size_t{32}}) {
      std::vector<llama::sequence> seqs;
      std::vector<llama::input> in;
      for (std::size_t i = 0; i < n; ++i) seqs.push_back(m->open());
      for (std::size_t i = 0; i < n; ++i)
        in.push_back({.seq = &seqs[i], .tokens = std::span(prompt).first(16 + i)});
      (void)m->forward(in, threads);
      in.clear();
      for (std::size_t i = 0; i < n; ++i)
        in.push_back({.seq = &seqs[i], .tokens = std::span(prompt).subspan(100, 1)});
      const auto a = clk::now();
      (void)m->forward(in, threads);
      (n == 1 ? d1 : d32).push_back(ms_since(a, clk::now()));
    }
  }
  std::ostringstream o;
  o << "{\"kernel_cost\": {\"precision\": \"" << llama::to_string(p)
    << "\", \"batch_invariant\": " << (invariant || p != llama::precision::fp32 ? "true" : "false")
    << ", \"prefill_256_tokens_per_s\": " << median(pre) << ", \"decode_step_ms_1\": " << median(d1)
    << ", \"decode_step_ms_32\": " << median(d32) << "}}";
  return o.str();
}

int usage(const std::string& what) {
  std::cerr << "bench_ladder: " << what
            << "\nusage: bench_ladder --model FILE.gguf [--threads 2] [--requests 48] [--rate 6] [--seed 1]\n"
               "  [--max-running 32] [--step-tokens 256] [--rungs 1,2,p,3,4,5] [--no-costs] [--trace-out "
               "FILE.jsonl]\n"
               "  [--fortunes DIR] [--repeat-share 0] [--answer-median 24]\n"
               "  [--answer-sigma 0.6] [--answer-max 96] [--kv-budget-mb 1024]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model_path, rungs = "1,2,p,3,4,5", trace_out;
  std::size_t threads_n = 2, max_running = 32, step_tokens = 256, kv_budget_mb = 1024;
  bool costs = true;
  chat_trace::options to;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      model_path = next();
    else if (a == "--threads")
      threads_n = std::stoul(next());
    else if (a == "--requests")
      to.requests = std::stoul(next());
    else if (a == "--rate")
      to.rate_per_s = std::stod(next());
    else if (a == "--seed")
      to.seed = std::stoull(next());
    else if (a == "--max-running")
      max_running = std::stoul(next());
    else if (a == "--step-tokens")
      step_tokens = std::stoul(next());
    else if (a == "--rungs")
      rungs = next();
    else if (a == "--no-costs")
      costs = false;
    else if (a == "--trace-out")
      trace_out = next();
    else if (a == "--fortunes")
      to.fortunes_dir = next();
    else if (a == "--repeat-share")
      to.repeat_share = std::stod(next());
    else if (a == "--answer-median")
      to.answer_median = std::stod(next());
    else if (a == "--kv-budget-mb")
      kv_budget_mb = std::stoul(next());
    else if (a == "--answer-sigma")
      to.answer_sigma = std::stod(next());
    else if (a == "--answer-max")
      to.answer_max = std::stoul(next());
    else
      return usage("unknown flag " + a);
  }
  if (model_path.empty()) return usage("--model is required");
  const std::vector<chat_trace::request> trace = chat_trace::make(to);
  if (!trace_out.empty()) {
    std::ofstream f(trace_out);
    chat_trace::write_jsonl(f, trace);
    if (!f) throw std::runtime_error(trace_out + ": cannot write the trace");
  }
  const std::size_t kv_budget = kv_budget_mb << 20;
  frugal::quant::thread_pool pool(threads_n);
  auto plain = llama::model::load(
      model_path,
      {.weights = llama::precision::native, .kv_budget_bytes = kv_budget, .prefix_caching = false});
  auto cached = llama::model::load(
      model_path,
      {.weights = llama::precision::native, .kv_budget_bytes = kv_budget, .prefix_caching = true});
  std::vector<prepared> t;
  std::size_t prompt_tokens = 0, answer_tokens = 0;
  for (const auto& q : trace) {
    t.push_back({encode_chat(*plain, q.messages), q.answer_tokens, q.arrival_s});
    prompt_tokens += t.back().prompt.size();
    answer_tokens += q.answer_tokens;
  }
  const std::size_t block = plain->kv().stats().block_tokens, shareable = [&] {
    std::vector<std::vector<kv_token>> prompts;
    for (const auto& p : t) prompts.push_back(p.prompt);
    return chat_trace::shareable_tokens(prompts, block);
  }();
  std::size_t conversations = 0;
  for (const auto& q : trace) conversations = std::max(conversations, q.conversation + 1);
  std::cout << "{\"trace\": {\"requests\": " << t.size() << ", \"conversations\": " << conversations
            << ", \"rate_per_s\": " << to.rate_per_s << ", \"span_s\": " << t.back().arrival_s
            << ", \"prompt_tokens\": " << prompt_tokens << ", \"answer_tokens\": " << answer_tokens
            << ", \"shareable_prompt_tokens\": " << shareable
            << ", \"shared_share\": " << static_cast<double>(shareable) / static_cast<double>(prompt_tokens)
            << ", \"seed\": " << to.seed << ", \"threads\": " << threads_n << "}}" << std::endl;
  const std::size_t kvpt = plain->cfg().kv_bytes_per_token();
  std::vector<rung_result> results;
  const auto has = [&](char c) { return rungs.find(c) != std::string::npos; };
  const frugal::scheduler_options so{.max_running = max_running, .step_tokens = step_tokens};
  if (has('1')) results.push_back(run_static("1 one at a time", *plain, t, 1, &pool));
  if (has('2')) results.push_back(run_static("2 static batches", *plain, t, max_running, &pool));
  if (has('p'))
    results.push_back(run_static("2p static batches, padded", *plain, t, max_running, &pool, true));
  if (has('3')) results.push_back(run_iteration("3 iteration-level", *plain, t, so, &pool));
  if (has('4')) results.push_back(run_iteration("4 + prefix caching", *cached, t, so, &pool));
  if (has('5')) {
    // A fresh model: rung 4's prefix cache stays out of rung 5.
    auto fresh = llama::model::load(
        model_path,
        {.weights = llama::precision::native, .kv_budget_bytes = kv_budget, .prefix_caching = true});
    frugal::lru_cache<frugal::completion> store({.max_entries = 4096});
    responses cache(store);
    results.push_back(run_iteration("5 + response cache", *fresh, t, so, &pool, &cache));
    const frugal::response_cache_stats rs = cache.stats();
    std::cout << "{\"response_cache\": {\"lookups\": " << rs.lookups << ", \"hits\": " << rs.hits << "}}"
              << std::endl;
  }
  for (const auto& r : results) std::cout << json(r, kvpt) << std::endl;
  std::cerr << "| rung | output tok/s | TTFT p50 ms | TTFT p99 ms | prefill computed | prefix hits | paged "
               "KV waste | "
               "contiguous waste (max_tokens / context) | preemptions (tokens recomputed) |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    const auto share = [](double used, double all) { return all > 0 ? 1.0 - used / all : 0.0; };
    std::fprintf(
        stderr, "| %s | %.1f | %.0f | %.0f | %llu | %llu | %.1f%% | %.1f%% / %.1f%% | %llu (%llu) |\n",
        r.name.c_str(), static_cast<double>(r.generated) / r.wall_s, quantile(r.ttft_ms, 0.5),
        quantile(r.ttft_ms, 0.99), static_cast<unsigned long long>(r.prefill_computed),
        static_cast<unsigned long long>(r.prefix_hits), 100 * share(r.kv.paged_tokens, r.kv.paged_slots),
        100 * share(r.kv.seq_tokens, r.kv.reserved_max), 100 * share(r.kv.seq_tokens, r.kv.reserved_context),
        static_cast<unsigned long long>(r.preemptions), static_cast<unsigned long long>(r.recomputed));
  }
  if (costs) {
    std::cout << scheduler_cost(*plain, t, 32, &pool) << std::endl;
    plain.reset();
    cached.reset();
    for (const auto& [p, inv] :
         {std::pair{llama::precision::fp32, false}, std::pair{llama::precision::fp32, true},
          std::pair{llama::precision::native, false}, std::pair{llama::precision::int8, false}})
      std::cout << kernel_cost(model_path, p, inv, &pool, 3) << std::endl;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_ladder: " << e.what() << "\n";
  return 1;
}
