// frugal_generate: text from a Llama-family GGUF file (SmolLM2-135M-Instruct and its kin), on the CPU.
// Its flags and output are a stable interface to script against; README.md beside it documents them.
//
//   frugal_generate --model FILE.gguf [--precision native|fp32|int8|int4] [--threads N]
//                   (--prompt TEXT | --input FILE) [--chat] [--max-tokens N] [--temperature T] [--top-p P]
//                   [--seed S] [--parallel N] [--stats]
//   frugal_generate --model FILE.gguf --tokenize (--prompt TEXT | --input FILE)
//   frugal_generate --model FILE.gguf --perplexity FILE [--ctx N] [--precision ...] [--threads N]
//   frugal_generate --model FILE.gguf --bench [--n-prompt 512] [--n-gen 128] [--repetitions 5] [...]
//
// Exit codes: 0 done, 1 a runtime error (a bad model file, an unreadable input, each named), 2 a usage error.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <frugal/scheduler.hpp>
#include "../common/flags.hpp"
#include "../common/lines.hpp"

#include "llama.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
namespace q = frugal::quant;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::size_t>(u.ru_maxrss) * 1024;
}

// The widest path the precision's kernels take on this CPU (FRUGAL_MAX_CPU_ISA included).
std::string isa_of(llama::precision p) {
  const bool amx_too = p == llama::precision::int8;
  for (q::simd_path s : {q::simd_path::amx, q::simd_path::avx512_vnni, q::simd_path::avx512,
                         q::simd_path::avx_vnni, q::simd_path::avx2})
    if ((s != q::simd_path::amx || amx_too) && q::is_supported(s)) return q::to_string(s);
  return "portable";
}

struct job {
  std::string prompt;
  std::vector<std::int32_t> prompt_ids, ids;
  std::uint64_t seed = 0;  ///< its draws: frugal::sampling_uniform(seed, token index)
};

std::vector<std::int32_t> encode_prompt(const llama::model& m, const std::string& text, bool chat) {
  if (chat) return m.encode_chat(text);
  return m.tokenizer().encode(text, {.parse_special = false, .add_special = true});
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model_path, prompt, input, perplexity_file, precision_name = "native";
  bool chat = false, tokenize = false, stats = false, bench = false, have_prompt = false;
  std::size_t threads = 1, max_tokens = 64, ctx = 512, parallel = 1, n_prompt = 512, n_gen = 128, reps = 5;
  std::size_t kv_budget_mb = 256;
  std::uint64_t seed = 0;
  frugal::sampling_params smp;
  examples::flags f(argc, argv);
  while (f.next()) {
    if (f.is("--model"))
      model_path = f.value();
    else if (f.is("--precision"))
      precision_name = f.value();
    else if (f.is("--threads"))
      threads = f.integer(1, 256);
    else if (f.is("--prompt"))
      prompt = f.value(), have_prompt = true;
    else if (f.is("--input"))
      input = f.value();
    else if (f.is("--chat"))
      chat = true;
    else if (f.is("--max-tokens"))
      max_tokens = f.integer(0, 1 << 20);
    else if (f.is("--temperature"))
      smp.temperature = static_cast<float>(f.number(0.0, 100.0));
    else if (f.is("--top-p"))
      smp.top_p = static_cast<float>(f.number(0.0, 1.0));
    else if (f.is("--seed"))
      seed = f.integer(0, UINT64_MAX);
    else if (f.is("--parallel"))
      parallel = f.integer(1, 1024);
    else if (f.is("--tokenize"))
      tokenize = true;
    else if (f.is("--perplexity"))
      perplexity_file = f.value();
    else if (f.is("--ctx"))
      ctx = f.integer(4, 1 << 20);
    else if (f.is("--stats"))
      stats = true;
    else if (f.is("--bench"))
      bench = true;
    else if (f.is("--n-prompt"))
      n_prompt = f.integer(1, 1 << 20);
    else if (f.is("--n-gen"))
      n_gen = f.integer(1, 1 << 20);
    else if (f.is("--repetitions"))
      reps = f.integer(1, 1000);
    else if (f.is("--kv-budget-mb"))
      kv_budget_mb = f.integer(1, 1 << 24);
    else
      f.unknown();
  }
  if (model_path.empty()) throw examples::usage_error("--model FILE.gguf is required");
  const int modes = int(tokenize) + int(!perplexity_file.empty()) + int(bench);
  if (modes > 1) throw examples::usage_error("--tokenize, --perplexity and --bench exclude each other");
  if (modes == 0 || tokenize) {
    if (have_prompt == !input.empty())
      throw examples::usage_error("give exactly one of --prompt TEXT and --input FILE");
  } else if (have_prompt || !input.empty() || chat) {
    throw examples::usage_error(std::string(bench ? "--bench" : "--perplexity") +
                                " takes no --prompt, --input or --chat");
  }
  if (smp.top_p <= 0.0) throw examples::usage_error("--top-p must be in (0, 1], not 0");
  const llama::precision prec = [&] {
    try {
      return llama::parse_precision(precision_name);
    } catch (const std::invalid_argument& e) {
      throw examples::usage_error(std::string("--precision: ") + e.what());
    }
  }();

  const auto t_load = clock_type::now();
  // Perplexity chunks and benchmark runs must each start from an empty cache, as llama.cpp's do.
  auto m = llama::model::load(model_path, {.weights = prec,
                                           .kv_budget_bytes = kv_budget_mb << 20,
                                           .prefix_caching = !bench && perplexity_file.empty()});
  const double load_s = seconds_since(t_load);
  const llama::config& c = m->cfg();
  q::thread_pool pool(threads);
  const auto& tok = m->tokenizer();

  if (tokenize) {
    std::vector<std::string> lines =
        have_prompt ? std::vector<std::string>{prompt} : examples::read_lines(input, "--input");
    for (const auto& l : lines)
      std::cout << nlohmann::json(tok.encode(l, {.parse_special = false, .add_special = false})).dump()
                << '\n';
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("writing stdout failed");
    return 0;
  }

  if (!perplexity_file.empty()) {
    // Read whole, as llama-perplexity reads it (a final newline is part of the text).
    std::ifstream in(perplexity_file, std::ios::binary);
    if (!in)
      throw std::runtime_error("--perplexity " + perplexity_file +
                               ": cannot be opened: " + std::strerror(errno));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad())
      throw std::runtime_error("--perplexity " + perplexity_file +
                               ": reading failed: " + std::strerror(errno));
    std::vector<std::int32_t> ids = tok.encode(text, {.parse_special = false, .add_special = true});
    if (ctx > c.context)
      throw examples::usage_error("--ctx " + std::to_string(ctx) + " is past the model's context length " +
                                  std::to_string(c.context));
    const std::size_t chunks = ids.size() / ctx, first = ctx / 2;
    if (chunks == 0)
      throw std::runtime_error("--perplexity " + perplexity_file + ": " + std::to_string(ids.size()) +
                               " tokens, fewer than one chunk of --ctx " + std::to_string(ctx));
    const auto t0 = clock_type::now();
    const std::vector<double> sums = llama::chunk_nll(
        *m, ids, ctx, chunks, &pool, tok.adds_bos() ? std::optional<std::int32_t>(tok.bos()) : std::nullopt);
    const nlohmann::json nll = sums;
    double total = 0.0;
    for (const double x : sums) total += x;
    const std::size_t scored = chunks * (ctx - 1 - first);
    const double secs = seconds_since(t0);
    std::cout << nlohmann::json{{"perplexity", std::exp(total / static_cast<double>(scored))},
                                {"chunks", chunks},
                                {"ctx", ctx},
                                {"tokens", ids.size()},
                                {"scored_tokens", scored},
                                {"nll", nll},
                                {"precision", llama::to_string(prec)},
                                {"seconds", secs}}
                     .dump()
              << std::endl;
    if (!std::cout) throw std::runtime_error("writing stdout failed");
    return 0;
  }

  if (bench) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int32_t> any(0, static_cast<std::int32_t>(c.vocab) - 1);
    std::vector<std::int32_t> toks(n_prompt);
    for (auto& t : toks) t = any(rng);
    std::vector<double> pp, tg;
    for (std::size_t r = 0; r <= reps; ++r) {  // run 0 warms up, as llama-bench's does
      llama::sequence seq = m->open();
      auto t0 = clock_type::now();
      const llama::input e{.seq = &seq, .tokens = toks};
      (void)m->forward(std::span(&e, 1), &pool);
      const double p_s = seconds_since(t0);
      seq = m->open();
      std::int32_t next = toks[0];
      t0 = clock_type::now();
      for (std::size_t i = 0; i < n_gen; ++i) {
        const llama::input d{.seq = &seq, .tokens = std::span(&next, 1)};
        const std::vector<float> logits = m->forward(std::span(&d, 1), &pool);
        next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      const double g_s = seconds_since(t0);
      if (r == 0) continue;
      pp.push_back(static_cast<double>(n_prompt) / p_s);
      tg.push_back(static_cast<double>(n_gen) / g_s);
    }
    const auto summary = [](const std::vector<double>& v) {
      const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      double ss = 0.0;
      for (double x : v) ss += (x - mean) * (x - mean);
      return nlohmann::json{{"mean", mean},
                            {"sd", v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0},
                            {"runs", v}};
    };
    std::cout << nlohmann::json{{"prefill_tokens_per_s", summary(pp)},
                                {"decode_tokens_per_s", summary(tg)},
                                {"n_prompt", n_prompt},
                                {"n_gen", n_gen},
                                {"repetitions", reps},
                                {"threads", threads},
                                {"precision", llama::to_string(prec)},
                                {"isa", isa_of(prec)},
                                {"weight_bytes", m->weight_bytes()},
                                {"kv_bytes_per_token", c.kv_bytes_per_token()},
                                {"context", c.context},
                                {"load_ms", load_s * 1e3},
                                {"peak_rss_bytes", peak_rss_bytes()}}
                     .dump()
              << std::endl;
    if (!std::cout) throw std::runtime_error("writing stdout failed");
    return 0;
  }

  // Generation: up to --parallel sequences share each step; a finished one makes room for the next prompt.
  std::vector<std::string> prompts =
      have_prompt ? std::vector<std::string>{prompt} : examples::read_lines(input, "--input");
  std::vector<std::int32_t> stops{tok.eos()};
  if (chat) {
    const std::int32_t eot = tok.find(std::string(m->chat_template().end_of_turn()));
    if (eot >= 0) stops.push_back(eot);
  }
  std::vector<job> jobs(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    jobs[i].prompt = prompts[i];
    jobs[i].prompt_ids = encode_prompt(*m, prompts[i], chat);
    if (jobs[i].prompt_ids.empty())
      throw std::runtime_error(
          (have_prompt ? std::string("--prompt") : "--input " + input + " line " + std::to_string(i + 1)) +
          ": no tokens to start from");
    jobs[i].seed = seed + i;
  }
  struct running {
    std::size_t job;
    llama::sequence seq;
    std::vector<std::int32_t> feed;
  };
  std::vector<running> live;
  std::size_t kv_peak = 0, next_job = 0, done = 0, prefill_tokens = 0, decode_tokens = 0;
  double prefill_s = 0.0, decode_s = 0.0;
  std::vector<bool> finished(jobs.size(), false);
  std::size_t printed = 0;
  while (done < jobs.size()) {
    while (live.size() < parallel && next_job < jobs.size()) {
      job& j = jobs[next_job];
      if (j.prompt_ids.size() >= c.context)
        throw std::runtime_error("prompt " + std::to_string(next_job + 1) + " has " +
                                 std::to_string(j.prompt_ids.size()) + " tokens, the model's context is " +
                                 std::to_string(c.context));
      llama::sequence seq = m->open(j.prompt_ids);
      std::vector<std::int32_t> feed(j.prompt_ids.begin() + static_cast<std::ptrdiff_t>(seq.cached_tokens()),
                                     j.prompt_ids.end());
      live.push_back({next_job, std::move(seq), std::move(feed)});
      ++next_job;
    }
    std::vector<llama::input> entries;
    bool any_prefill = false;
    for (auto& r : live) {
      entries.push_back({.seq = &r.seq, .tokens = r.feed});
      any_prefill = any_prefill || r.feed.size() > 1;
    }
    const auto t0 = clock_type::now();
    const std::vector<float> logits = m->forward(entries, &pool);
    kv_peak = std::max(kv_peak, m->kv_bytes());
    const double secs = seconds_since(t0);
    std::size_t fed = 0;
    for (const auto& r : live) fed += r.feed.size();
    (any_prefill ? prefill_s : decode_s) += secs;
    (any_prefill ? prefill_tokens : decode_tokens) += fed;
    for (std::size_t i = 0; i < live.size(); ++i) {
      running& r = live[i];
      job& j = jobs[r.job];
      const std::span<const float> row(logits.data() + i * c.vocab, c.vocab);
      bool stop = j.ids.size() >= max_tokens;
      if (!stop) {
        // The scheduler's sampling: greedy, or temperature and top-p with draw n a function of (seed, n).
        const std::optional<std::int32_t> picked =
            frugal::sample_token(row, smp, frugal::sampling_uniform(j.seed, j.ids.size()));
        if (!picked)
          throw std::runtime_error("prompt " + std::to_string(r.job) + ": no finite logit to sample");
        const std::int32_t t = *picked;
        j.ids.push_back(t);
        stop = std::find(stops.begin(), stops.end(), t) != stops.end() || j.ids.size() >= max_tokens ||
               r.seq.length() + 1 > c.context;
        r.feed.assign(1, t);
      }
      if (stop) {
        finished[r.job] = true;
        ++done;
      }
    }
    std::erase_if(live, [&](const running& r) { return finished[r.job]; });
    for (; printed < jobs.size() && finished[printed]; ++printed) {
      const job& j = jobs[printed];
      std::cout << nlohmann::json{{"prompt", j.prompt},
                                  {"prompt_ids", j.prompt_ids},
                                  {"ids", j.ids},
                                  {"text", tok.decode(j.ids)}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << '\n';
    }
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("writing stdout failed");
  }
  if (stats) {
    std::cerr << nlohmann::json{{"precision", llama::to_string(prec)},
                                {"isa", isa_of(prec)},
                                {"threads", threads},
                                {"load_ms", load_s * 1e3},
                                {"prefill_tokens", prefill_tokens},
                                {"prefill_tokens_per_s",
                                 prefill_s > 0 ? static_cast<double>(prefill_tokens) / prefill_s : 0.0},
                                {"decode_tokens", decode_tokens},
                                {"decode_tokens_per_s",
                                 decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0.0},
                                {"weight_mb", static_cast<double>(m->weight_bytes()) / 1e6},
                                {"kv_mb", static_cast<double>(kv_peak) / 1e6},
                                {"kv_mb_per_token", static_cast<double>(c.kv_bytes_per_token()) / 1e6},
                                {"peak_rss_mb", static_cast<double>(peak_rss_bytes()) / 1e6}}
                     .dump()
              << std::endl;
  }
  return 0;
} catch (const examples::usage_error& e) {
  std::fprintf(stderr, "frugal_generate: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "frugal_generate: %s\n", e.what());
  return 1;
}
