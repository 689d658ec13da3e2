// Traffic with paraphrased repeats, built from the fixture (tests/semantic/fixtures/pairs.jsonl), through an
// exact cache and the semantic cache side by side in one run: the semantic cache's extra hit rate, the
// precision of its semantic hits (measured against the fixture's labels, not assumed), and what the ledger
// records as saved.
//
// The traffic: sentences that the fixture calls paraphrases share an intent (one answer); every other
// sentence, near misses included, is an intent of its own. A request draws an intent by Zipf (s = 1) and
// then one of its fixture phrasings uniformly; in the "edited" traffic half the requests also get one
// surface edit (lower case, the end punctuation dropped, "Hi, " or " please" added, two letters swapped).
// A semantic hit is right only when the cached answer's intent is the request's.
//
// The expensive model is a stand-in: every miss books --model-ms of busy time on a GPU at --gpu-usd an
// hour in the ledger (nothing runs). The MiniLM embedding every semantic lookup needs is real: its time per
// request is measured here, one text at a time, and booked on a CPU at --cpu-usd an hour.
//
//   bench_semantic_traffic [--requests N] [--seed S] [--model-ms X] [--gpu-usd X] [--cpu-usd X] [--out DIR]
//   writes DIR/traffic.md

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <frugal/cache.hpp>
#include <frugal/clock.hpp>
#include <frugal/cost.hpp>
#include <frugal/semantic.hpp>

#include "bert.hpp"
#include "pairs.hpp"

namespace {

namespace fc = frugal::cost;
using clk = std::chrono::steady_clock;

struct answer {
  int intent = 0;
};

// Fixture sentences grouped into intents: the paraphrase pairs joined, every other sentence alone.
struct intents {
  std::map<std::string, int> of;                    // sentence -> intent
  std::vector<std::vector<std::string>> phrasings;  // intent -> its sentences
};

intents group(const std::vector<frugal_test::text_pair>& pairs) {
  std::map<std::string, std::string> parent;
  const std::function<std::string(const std::string&)> root = [&](const std::string& s) {
    auto& p = parent.try_emplace(s, s).first->second;
    if (p == s) return s;
    p = root(p);
    return p;
  };
  for (const auto& p : pairs) {
    root(p.a);
    root(p.b);
    if (p.same) parent[root(p.a)] = root(p.b);
  }
  intents r;
  std::map<std::string, int> id_of_root;
  for (const auto& [s, _] : parent) {
    const auto [it, fresh] = id_of_root.emplace(root(s), int(id_of_root.size()));
    if (fresh) r.phrasings.emplace_back();
    r.of[s] = it->second;
    r.phrasings[std::size_t(it->second)].push_back(s);
  }
  return r;
}

constexpr const char* edit_names[] = {"lower case", "end punctuation dropped", "\"Hi, \" added",
                                      "\" please\" added", "two letters swapped"};
constexpr std::size_t edit_kinds = std::size(edit_names);

std::string edit(std::string s, std::size_t kind, std::mt19937& rng) {
  switch (kind) {
    case 0:
      for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      return s;
    case 1:
      while (!s.empty() && (s.back() == '?' || s.back() == '.' || s.back() == '!')) s.pop_back();
      return s;
    case 2:
      s[0] = char(std::tolower(static_cast<unsigned char>(s[0])));
      return "Hi, " + s;
    case 3:
      return s + " please";
    default: {
      // Two adjacent letters of a word of four or more swapped: a typo.
      std::vector<std::size_t> at;
      for (std::size_t i = 1; i + 2 < s.size(); ++i)
        if (std::isalpha(static_cast<unsigned char>(s[i - 1])) &&
            std::isalpha(static_cast<unsigned char>(s[i])) &&
            std::isalpha(static_cast<unsigned char>(s[i + 1])) &&
            std::isalpha(static_cast<unsigned char>(s[i + 2])))
          at.push_back(i);
      if (!at.empty()) {
        const std::size_t i = at[rng() % at.size()];
        std::swap(s[i], s[i + 1]);
      }
      return s;
    }
  }
}

struct request {
  std::string text;
  int intent = 0;
  std::size_t edit = edit_kinds;  // edit_kinds: none, the fixture's phrasing as it is
};

std::vector<request> traffic(const intents& in, std::size_t n, unsigned seed, bool edited) {
  std::mt19937 rng(seed);
  std::vector<int> order(in.phrasings.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> w(order.size());
  for (std::size_t r = 0; r < w.size(); ++r) w[r] = 1.0 / double(r + 1);
  std::discrete_distribution<std::size_t> zipf(w.begin(), w.end());
  std::vector<request> out;
  for (std::size_t i = 0; i < n; ++i) {
    const int intent = order[zipf(rng)];
    const auto& ph = in.phrasings[std::size_t(intent)];
    request q{ph[rng() % ph.size()], intent};
    if (edited && rng() % 2) {
      q.edit = rng() % edit_kinds;
      q.text = edit(std::move(q.text), q.edit, rng);
    }
    out.push_back(std::move(q));
  }
  return out;
}

fc::ledger_options prices(const std::string& gpu_usd, const std::string& cpu_usd) {
  return {.prices = {{.gpu_class = "gpu", .on_demand = fc::rate::per_hour(fc::money::parse(gpu_usd))},
                     {.gpu_class = "cpu", .on_demand = fc::rate::per_hour(fc::money::parse(cpu_usd))}},
          .devices = {{.gpu_class = "gpu", .name = "expensive"}, {.gpu_class = "cpu", .name = "minilm"}}};
}

struct counts {
  std::size_t requests = 0, baseline_hits = 0, exact_hits = 0, semantic_hits = 0, wrong = 0;
};

struct run_result {
  float threshold = 0;
  std::size_t baseline_hits = 0, exact_hits = 0, semantic_hits = 0, wrong = 0, n = 0;
  std::array<counts, edit_kinds + 1> by_edit{};
  fc::ledger_snapshot baseline, semantic;
};

run_result replay(const std::vector<request>& reqs, const std::map<std::string, std::vector<float>>& vec,
                  float threshold, std::chrono::nanoseconds model, std::chrono::nanoseconds embed,
                  const fc::ledger_options& lo) {
  run_result r{threshold};
  r.n = reqs.size();
  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> base_ledger(lo, clock), sem_ledger(lo, clock);
  const auto base_feature = base_ledger.feature("answer");
  const auto sem_feature = sem_ledger.feature("answer");
  const auto embed_feature = sem_ledger.feature("embed");
  frugal::lru_cache<answer> exact({.max_entries = reqs.size()});
  frugal::semantic_cache<answer> sem({.dimension = 384, .threshold = threshold, .max_entries = reqs.size()});
  for (const auto& q : reqs) {
    counts& k = r.by_edit[q.edit];
    ++k.requests;
    const auto key = frugal::hash_key(std::string_view(q.text));
    if (exact.get(key)) {
      ++r.baseline_hits;
      ++k.baseline_hits;
      base_ledger.record_cache_hit(base_feature);
    } else {
      base_ledger.record_batch({.feature = base_feature, .device = 0, .busy = model});
      exact.put(key, answer{q.intent});
    }
    const auto& e = vec.at(q.text);
    sem_ledger.record_batch({.feature = embed_feature, .device = 1, .busy = embed});
    if (const auto hit = sem.get(e, key)) {
      if (hit->match == frugal::semantic_match::exact) {
        ++r.exact_hits;
        ++k.exact_hits;
        sem_ledger.record_cache_hit(sem_feature);
      } else {
        ++r.semantic_hits;
        ++k.semantic_hits;
        const bool wrong = hit->value->intent != q.intent;
        r.wrong += wrong;
        k.wrong += wrong;
        sem_ledger.record_semantic_hit(sem_feature);
      }
    } else {
      sem_ledger.record_batch({.feature = sem_feature, .device = 0, .busy = model});
      sem.put(e, key, answer{q.intent});
    }
  }
  r.baseline = base_ledger.snapshot();
  r.semantic = sem_ledger.snapshot();
  return r;
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 4000;
  unsigned seed = 7;
  double model_ms = 1000;
  std::string gpu_usd = "3.60", cpu_usd = "0.50", out = FRUGAL_BENCH_RESULTS_DIR;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--requests")
      n = std::stoul(v);
    else if (k == "--seed")
      seed = unsigned(std::stoul(v));
    else if (k == "--model-ms")
      model_ms = std::stod(v);
    else if (k == "--gpu-usd")
      gpu_usd = v;
    else if (k == "--cpu-usd")
      cpu_usd = v;
    else if (k == "--out")
      out = v;
    else {
      std::cerr << "bench_semantic_traffic: unknown flag " << k << '\n';
      return 2;
    }
  }
  const std::string model_dir = FRUGAL_MODEL_DIR;
  if (!std::filesystem::exists(model_dir + "/model.safetensors")) {
    std::cerr << "bench_semantic_traffic: no model at " << model_dir << '\n';
    return 1;
  }
  const auto pairs = frugal_test::load_pairs(std::string(FRUGAL_FIXTURE_DIR) + "/pairs.jsonl");
  const intents in = group(pairs);
  const std::vector<request> plain = traffic(in, n, seed, false), edited = traffic(in, n, seed, true);

  std::vector<std::string> texts;
  std::map<std::string, std::vector<float>> vec;
  for (const auto* t : {&plain, &edited})
    for (const auto& q : *t)
      if (vec.emplace(q.text, std::vector<float>{}).second) texts.push_back(q.text);
  const auto enc = bert::encoder::load(model_dir, {.threads = 1});
  // The embedding's cost per request, as a server pays it: one text at a time, one thread.
  const std::size_t timed = std::min<std::size_t>(200, texts.size());
  const auto t0 = clk::now();
  for (std::size_t i = 0; i < timed; ++i) vec[texts[i]] = enc.encode_texts(std::span(&texts[i], 1))[0];
  const auto embed = std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - t0) / timed;
  for (std::size_t i = timed; i < texts.size(); i += 64) {
    const std::size_t m = std::min<std::size_t>(64, texts.size() - i);
    const auto vs = enc.encode_texts(std::span(texts.data() + i, m));
    for (std::size_t k = 0; k < m; ++k) vec[texts[i + k]] = vs[k];
  }

  const auto model = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double, std::milli>(model_ms));
  const auto lo = prices(gpu_usd, cpu_usd);
  std::ostringstream md;
  md << "Traffic: " << n << " requests over " << in.phrasings.size() << " intents of the fixture ("
     << in.of.size() << " sentences), Zipf s = 1, seed " << seed << "; " << texts.size()
     << " distinct texts. Expensive model: a stand-in of " << model_ms << " ms a miss on a $" << gpu_usd
     << "/h GPU (booked, not run). MiniLM embedding: measured "
     << std::chrono::duration<double, std::milli>(embed).count()
     << " ms a request (one text, one thread, fp32), booked on a $" << cpu_usd
     << "/h CPU. Both caches unbounded, filled by the traffic itself (cold start).\n\n"
     << "| traffic | threshold | exact cache hits | semantic cache hits (exact + semantic) | extra hit rate "
        "| "
        "semantic hits right / all (precision) | wrong answers per 1k | ledger: cache saved, exact-only | "
        "ledger: cache saved (of it semantic) | embedding cost | net extra saving |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& [name, reqs] :
       {std::pair{"fixture phrasings", &plain}, std::pair{"with surface edits", &edited}}) {
    for (float t : {0.80f, 0.85f, 0.90f, 0.95f, frugal::semantic_default_threshold}) {
      const auto r = replay(*reqs, vec, t, model, embed, lo);
      const auto& b = *r.baseline.find("answer");
      const auto& s = *r.semantic.find("answer");
      const auto& e = *r.semantic.find("embed");
      // The semantic cache's extra saving net of the embeddings it needs: the exact-only ledger's busy cost
      // less the semantic one's, less the embedding's cost.
      const fc::money net = b.busy_cost - s.busy_cost - e.busy_cost;
      const double prec = r.semantic_hits ? double(r.semantic_hits - r.wrong) / double(r.semantic_hits) : 1.0;
      char line[1024];
      std::snprintf(
          line, sizeof line,
          "| %s | %.2f%s | %s | %s (%s + %s) | %s | %zu / %zu (%s) | %.1f | %s | %s (%s) | %s | %s |\n", name,
          double(t), t == frugal::semantic_default_threshold ? " (default)" : "",
          pct(double(r.baseline_hits) / double(r.n)).c_str(),
          pct(double(r.exact_hits + r.semantic_hits) / double(r.n)).c_str(),
          pct(double(r.exact_hits) / double(r.n)).c_str(), pct(double(r.semantic_hits) / double(r.n)).c_str(),
          pct((double(r.exact_hits + r.semantic_hits) - double(r.baseline_hits)) / double(r.n)).c_str(),
          r.semantic_hits - r.wrong, r.semantic_hits, pct(prec).c_str(),
          1000.0 * double(r.wrong) / double(r.n), b.cache_saved.to_string().c_str(),
          s.cache_saved.to_string().c_str(), s.semantic_saved.to_string().c_str(),
          e.busy_cost.to_string().c_str(), net.to_string().c_str());
      md << line;
    }
  }
  const auto r = replay(edited, vec, frugal::semantic_default_threshold, model, embed, lo);
  md << "\nThe traffic with surface edits at the default threshold, by edit (the tokenizer is uncased, so a "
        "lower-cased request has the same tokens and embedding as the original):\n\n"
     << "| request | requests | exact cache hits | semantic cache hits | of them semantic, right / all |\n"
     << "|---|---:|---:|---:|---:|\n";
  for (std::size_t e = 0; e <= edit_kinds; ++e) {
    const counts& k = r.by_edit[e];
    const double q = k.requests ? double(k.requests) : 1.0;
    md << "| " << (e == edit_kinds ? "as in the fixture" : edit_names[e]) << " | " << k.requests << " | "
       << pct(double(k.baseline_hits) / q) << " | " << pct(double(k.exact_hits + k.semantic_hits) / q)
       << " | " << k.semantic_hits - k.wrong << " / " << k.semantic_hits << " |\n";
  }
  md << "\nThe ledger books a semantic hit's saving whether it was right or not: a wrong hit saved the model "
        "call and returned another intent's answer. Precision is counted against the fixture's labels, so "
        "an unlabelled pair of true paraphrases counts as wrong.\n";
  std::filesystem::create_directories(out);
  std::ofstream(out + "/traffic.md") << md.str();
  std::cout << md.str();
}
