#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/requires.hpp"
#include "llama.hpp"

namespace {

using frugal_test::gguf_model;
using frugal_test::gguf_model_path;
using frugal_test::needs;

// One loaded model per precision for the whole suite (loading converts every layer).
llama::model& smollm2(llama::precision p) {
  static std::map<llama::precision, std::unique_ptr<llama::model>> models;
  auto& m = models[p];
  if (!m) m = llama::model::load(gguf_model_path(), {.weights = p});
  return *m;
}

frugal::quant::thread_pool& two_threads() {
  static frugal::quant::thread_pool pool(2);
  return pool;
}

// Logits of the last token of each prompt, all prompts in one step (or one step each when !together).
std::vector<std::vector<float>> last_logits(llama::model& m,
                                            const std::vector<std::vector<std::int32_t>>& prompts,
                                            bool together, frugal::quant::executor* threads = nullptr) {
  std::vector<llama::sequence> seqs;
  for (std::size_t i = 0; i < prompts.size(); ++i) seqs.push_back(m.open());
  std::vector<std::vector<float>> out;
  const std::size_t v = m.cfg().vocab;
  if (together) {
    std::vector<llama::input> entries;
    for (std::size_t i = 0; i < prompts.size(); ++i)
      entries.push_back({.seq = &seqs[i], .tokens = prompts[i]});
    const auto l = m.forward(entries, threads);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      out.emplace_back(l.begin() + static_cast<std::ptrdiff_t>(i * v),
                       l.begin() + static_cast<std::ptrdiff_t>((i + 1) * v));
  } else {
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const llama::input e{.seq = &seqs[i], .tokens = prompts[i]};
      out.push_back(m.forward(std::span(&e, 1), threads));
    }
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

const std::vector<std::vector<std::int32_t>>& sample_prompts() {
  static const std::vector<std::vector<std::int32_t>> p = [] {
    const auto& t = smollm2(llama::precision::fp32).tokenizer();
    std::vector<std::vector<std::int32_t>> r;
    for (const char* s : {"The quick brown fox jumps over the lazy dog.", "1 2 3 4 5 6",
                          "Once upon a time, in a land far away, there lived a", "Q: What is 7 times 8?\nA:"})
      r.push_back(t.encode(s));
    return r;
  }();
  return p;
}

// The float64 numpy reference of the same file (tests/models/make_llama_reference.py).
const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(FRUGAL_FIXTURE_DIR) + "/smollm2_reference.json");
    REQUIRE(in);
    return nlohmann::json::parse(in);
  }();
  return j;
}

// The reference's greedy continuations, teacher-forced: prompt + ids[:-1] as one sequence, logits from the
// prompt's last token on, for prompts [first, last). Returns, per prompt, the 32 argmax ids and top-1 minus
// top-2 margins.
struct forced {
  std::vector<std::int32_t> argmax;
};
std::vector<forced> teacher_forced(llama::model& m, std::size_t first, std::size_t last,
                                   frugal::quant::executor* threads) {
  const auto& g = reference().at("greedy");
  std::vector<forced> out;
  const std::size_t v = m.cfg().vocab;
  for (std::size_t i = first; i < last; ++i) {
    auto ids = g[i].at("prompt_ids").get<std::vector<std::int32_t>>();
    const std::size_t from = ids.size() - 1;
    const auto gen = g[i].at("ids").get<std::vector<std::int32_t>>();
    ids.insert(ids.end(), gen.begin(), gen.end() - 1);
    llama::sequence s = m.open();
    const llama::input e{.seq = &s, .tokens = ids, .all_logits = true, .logits_from = from};
    const auto l = m.forward(std::span(&e, 1), threads);
    forced f;
    for (std::size_t r = 0; r < gen.size(); ++r)
      f.argmax.push_back(
          static_cast<std::int32_t>(std::max_element(l.begin() + static_cast<std::ptrdiff_t>(r * v),
                                                     l.begin() + static_cast<std::ptrdiff_t>((r + 1) * v)) -
                                    (l.begin() + static_cast<std::ptrdiff_t>(r * v))));
    out.push_back(std::move(f));
  }
  return out;
}

// Per-chunk NLL sums over the first `chunks` chunks of the reference text at `ctx`, by llama-perplexity's
// method.
std::vector<double> chunk_nll(llama::model& m, std::size_t ctx, std::size_t chunks,
                              frugal::quant::executor* threads) {
  const auto tokens = reference().at("perplexity").at("tokens").get<std::vector<std::int32_t>>();
  return llama::chunk_nll(m, tokens, ctx, chunks, threads);
}

// Perplexity over fewer than 8 chunks of 128 is too noisy for the 0.5% bound (2 chunks: native 2.9% off), so
// the sanitizers run all 8; they check fewer greedy prompts.
constexpr std::size_t ppl_chunks = 8;
#if FRUGAL_LLAMA_QUICK
constexpr std::size_t greedy_prompts = 12;
#else
constexpr std::size_t greedy_prompts = 55;
#endif

}  // namespace

TEST_CASE("llama: fp32 logits equal the float64 reference's" * needs(gguf_model())) {
  llama::model& m = smollm2(llama::precision::fp32);
  const auto& g = reference().at("greedy");
  double worst = 0.0;
  for (const auto& r : reference().at("logits")) {
    const auto ids = g[r.at("prompt").get<std::size_t>()].at("prompt_ids").get<std::vector<std::int32_t>>();
    const auto l = last_logits(m, {ids}, false).at(0);
    double mx = *std::max_element(l.begin(), l.end()), z = 0.0;
    for (float x : l) z += std::exp(static_cast<double>(x) - mx);
    const double lse = std::log(z) + mx;
    CHECK(std::abs(lse - r.at("logsumexp").get<double>()) < 2e-3);
    for (const auto& t : r.at("top")) {
      const double want = t[1].get<double>();
      worst = std::max(worst, std::abs(l[t[0].get<std::size_t>()] - want));
    }
    for (std::size_t i = 0; i < r.at("fixed").size(); ++i)
      worst = std::max(worst, std::abs(l[7 + 768 * i] - r.at("fixed")[i].get<double>()));
    // The largest logit is the reference's.
    CHECK(std::max_element(l.begin(), l.end()) - l.begin() == r.at("top")[0][0].get<std::ptrdiff_t>());
  }
  MESSAGE("largest |fp32 - float64| logit difference: " << worst);
  CHECK(worst < 2e-3);
}

TEST_CASE("llama: fp32 greedy tokens equal the reference's wherever its top-2 margin exceeds 1e-3" *
          needs(gguf_model())) {
  llama::model& m = smollm2(llama::precision::fp32);
  const auto& g = reference().at("greedy");
  const auto got = teacher_forced(m, 0, greedy_prompts, &two_threads());
  std::size_t decided = 0, equal = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto ids = g[i].at("ids").get<std::vector<std::int32_t>>();
    const auto margin = g[i].at("margin").get<std::vector<double>>();
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (margin[k] <= 1e-3) continue;
      ++decided;
      equal += got[i].argmax[k] == ids[k];
      CHECK_MESSAGE(got[i].argmax[k] == ids[k], "prompt " << i << " step " << k << " margin " << margin[k]);
    }
  }
  MESSAGE(equal << " of " << decided << " decided steps equal");
  CHECK(decided > greedy_prompts * 30);
}

TEST_CASE("llama: perplexity on the held-out text: fp32 within 0.05% of the reference, native within 0.5%" *
          needs(gguf_model())) {
  const auto& res = reference().at("perplexity").at("results");
  const auto& r128 = *std::find_if(res.begin(), res.end(), [](const auto& r) { return r.at("ctx") == 128; });
  double want = 0.0;
  std::size_t scored = 0;
  for (std::size_t c = 0; c < ppl_chunks; ++c) {
    want += r128.at("per_chunk")[c].at("nll").get<double>();
    scored += r128.at("per_chunk")[c].at("tokens").get<std::size_t>();
  }
  const double want_ppl = std::exp(want / static_cast<double>(scored));
  for (const auto& [p, bound] :
       {std::pair{llama::precision::fp32, 5e-4}, std::pair{llama::precision::native, 5e-3}}) {
    const auto nll = chunk_nll(smollm2(p), 128, ppl_chunks, &two_threads());
    double got = 0.0;
    for (double x : nll) got += x;
    const double ppl = std::exp(got / static_cast<double>(scored));
    MESSAGE(std::string(llama::to_string(p)) << ": perplexity " << ppl << " against the reference's "
                                             << want_ppl << " over " << ppl_chunks << " chunks of 128");
    CHECK(std::abs(ppl / want_ppl - 1.0) < bound);
  }
}

TEST_CASE("llama: the tokenizer gives the reference's ids of the held-out text" * needs(gguf_model()) *
          needs(frugal_test::file("the held-out text", "/usr/share/common-licenses/GPL-3"))) {
  std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  // llama-perplexity's -f drops the file's final newline.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const auto want = reference().at("perplexity").at("tokens").get<std::vector<std::int32_t>>();
  CHECK(smollm2(llama::precision::native).tokenizer().encode(text, {.add_special = true}) == want);
}

TEST_CASE("llama: the configuration, tokenizer and chat template come from the file's metadata" *
          needs(gguf_model())) {
  const llama::model& m = smollm2(llama::precision::fp32);
  const llama::config& c = m.cfg();
  const frugal::gguf::file& f = m.file();
  CHECK(c.layers == f.get_integer<std::size_t>("llama.block_count"));
  CHECK(c.hidden == f.get_integer<std::size_t>("llama.embedding_length"));
  CHECK(c.kv_heads == f.get_integer<std::size_t>("llama.attention.head_count_kv"));
  CHECK(c.rope_base == f.get_float("llama.rope.freq_base"));
  CHECK(c.vocab == m.tokenizer().size());
  CHECK(c.head_dim * c.heads == c.hidden);
  CHECK(c.kv_bytes_per_token() == 2 * c.layers * c.kv_heads * c.head_dim * sizeof(float));
  CHECK(m.chat_template().name() == "chatml");
  // fp32 keeps every linear weight (the tied output projection included) as 4 bytes.
  std::size_t elements = 0;
  for (const auto& t : f.tensors())
    if (t.dims.size() == 2 && t.name != "token_embd.weight") elements += t.elements;
  elements += c.vocab * c.hidden;
  CHECK(m.weight_bytes() == elements * sizeof(float));
}

TEST_CASE("llama: several sequences in one step give what each gives alone" * needs(gguf_model())) {
  SUBCASE("native: bit for bit, on one thread or two") {
    llama::model& m = smollm2(llama::precision::native);
    const auto alone = last_logits(m, sample_prompts(), false);
    const auto together = last_logits(m, sample_prompts(), true, &two_threads());
    for (std::size_t i = 0; i < alone.size(); ++i) CHECK(alone[i] == together[i]);
  }
  SUBCASE("fp32: within rounding") {
    llama::model& m = smollm2(llama::precision::fp32);
    const auto alone = last_logits(m, sample_prompts(), false);
    const auto together = last_logits(m, sample_prompts(), true, &two_threads());
    for (std::size_t i = 0; i < alone.size(); ++i) CHECK(max_abs_diff(alone[i], together[i]) < 1e-3);
  }
}

// native is batch-invariant end to end (row-invariant GEMMs, fixed-order attention): the same bits. fp32's
// Eigen GEMMs take another path for one row than for many: within rounding.
TEST_CASE("llama: a prompt prefilled at once equals the same prompt fed token by token" *
          needs(gguf_model())) {
  for (const llama::precision p : {llama::precision::fp32, llama::precision::native}) {
    const std::string name = llama::to_string(p);
    CAPTURE(name);
    llama::model& m = smollm2(p);
    const std::vector<std::int32_t>& prompt = sample_prompts()[2];
    llama::sequence a = m.open(), b = m.open();
    const llama::input whole{.seq = &a, .tokens = prompt, .all_logits = true};
    const std::vector<float> all = m.forward(std::span(&whole, 1));
    const std::size_t v = m.cfg().vocab;
    REQUIRE(all.size() == prompt.size() * v);
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      const llama::input one{.seq = &b, .tokens = std::span(prompt).subspan(i, 1)};
      const std::vector<float> got = m.forward(std::span(&one, 1));
      const std::vector<float> want(all.begin() + static_cast<std::ptrdiff_t>(i * v),
                                    all.begin() + static_cast<std::ptrdiff_t>((i + 1) * v));
      CAPTURE(i);
      if (p == llama::precision::native)
        CHECK(got == want);
      else
        CHECK(max_abs_diff(got, want) < 2e-3);
    }
    CHECK(a.length() == prompt.size());
    CHECK(b.length() == prompt.size());
  }
}

TEST_CASE("llama: the KV cache's memory is counted and bounded, and full blocks of a prompt are shared" *
          needs(gguf_model())) {
  const std::size_t per_token = smollm2(llama::precision::native).cfg().kv_bytes_per_token();
  // Six blocks of 16 tokens.
  auto m = llama::model::load(gguf_model_path(),
                              {.weights = llama::precision::native, .kv_budget_bytes = 6 * 16 * per_token});
  CHECK(m->kv().blocks_total() == 6);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(1000 + i);
  std::vector<float> first_logits;
  {
    llama::sequence a = m->open(prompt);
    CHECK(a.cached_tokens() == 0);
    const llama::input e{.seq = &a, .tokens = prompt};
    first_logits = m->forward(std::span(&e, 1));
    CHECK(m->kv_bytes() == 3 * 16 * per_token);  // 40 tokens take 3 blocks
    llama::sequence b = m->open();
    std::vector<std::int32_t> long_prompt(60, 7);
    const llama::input big{.seq = &b, .tokens = long_prompt};
    CHECK_THROWS_WITH_AS(m->forward(std::span(&big, 1)), doctest::Contains("kv_budget_bytes"),
                         std::length_error);
    CHECK(b.length() == 0);  // refused before anything ran
    CHECK(m->kv_bytes() == 3 * 16 * per_token);
  }
  CHECK(m->kv_bytes() == 0);
  // The two full blocks of the finished prompt are cached: a new sequence with the same prompt starts from
  // them, and its logits are the same bits as computing the whole prompt.
  llama::sequence c = m->open(prompt);
  CHECK(c.cached_tokens() == 32);
  CHECK(c.length() == 32);
  const llama::input rest{.seq = &c, .tokens = std::span(prompt).subspan(32)};
  CHECK(m->forward(std::span(&rest, 1)) == first_logits);
  CHECK(m->kv().stats().prefix_hit_tokens == 32);
}

TEST_CASE("llama: a step that cannot run is refused before anything runs, naming the entry" *
          needs(gguf_model())) {
  llama::model& m = smollm2(llama::precision::native);
  llama::sequence s = m.open();
  const std::vector<std::int32_t> five{1, 2, 3, 4, 5}, bad{1, -3},
      big{static_cast<std::int32_t>(m.cfg().vocab)};
  const std::vector<std::int32_t> too_long(m.cfg().context + 1, 5);
  const llama::input over{.seq = &s, .tokens = too_long};
  CHECK_THROWS_WITH_AS(m.forward(std::span(&over, 1)), doctest::Contains("past the context length"),
                       std::length_error);
  const llama::input neg[] = {{.seq = &s, .tokens = std::span(five).first(1)},
                              {.seq = nullptr, .tokens = bad}};
  CHECK_THROWS_WITH_AS(m.forward(neg), doctest::Contains("entries[1].seq is null"), std::invalid_argument);
  llama::sequence t = m.open();
  const llama::input ids[] = {{.seq = &s, .tokens = std::span(five).first(1)}, {.seq = &t, .tokens = bad}};
  CHECK_THROWS_WITH_AS(m.forward(ids), doctest::Contains("entries[1].tokens[1] = -3"), std::out_of_range);
  const llama::input past{.seq = &t, .tokens = big};
  CHECK_THROWS_WITH_AS(m.forward(std::span(&past, 1)), doctest::Contains("is not a token id"),
                       std::out_of_range);
  const llama::input twice[] = {{.seq = &s, .tokens = std::span(five).first(1)},
                                {.seq = &s, .tokens = std::span(five).first(1)}};
  CHECK_THROWS_WITH_AS(m.forward(twice), doctest::Contains("name the same sequence"), std::invalid_argument);
  CHECK(s.length() == 0);
  CHECK(t.length() == 0);
}

TEST_CASE("llama: a file of another architecture or a missing file is refused, naming it") {
  namespace fs = std::filesystem;
  const fs::path p =
      fs::temp_directory_path() / ("frugal_llama_arch_" + std::to_string(::getpid()) + ".gguf");
  {
    std::ofstream o(p, std::ios::binary);
    const auto u32 = [&](std::uint32_t v) { o.write(reinterpret_cast<const char*>(&v), 4); };
    const auto u64 = [&](std::uint64_t v) { o.write(reinterpret_cast<const char*>(&v), 8); };
    const auto str = [&](const std::string& s) {
      u64(s.size());
      o.write(s.data(), static_cast<std::streamsize>(s.size()));
    };
    o.write("GGUF", 4);
    u32(3);
    u64(0);  // tensors
    u64(1);  // metadata
    str("general.architecture");
    u32(8);  // string
    str("bert");
  }
  CHECK_THROWS_WITH_AS(llama::model::load(p.string()), doctest::Contains("general.architecture is \"bert\""),
                       std::invalid_argument);
  fs::remove(p);
  CHECK_THROWS_WITH(llama::model::load((fs::temp_directory_path() / "no_such_model.gguf").string()),
                    doctest::Contains("no_such_model.gguf"));
  CHECK_THROWS_WITH_AS(llama::parse_precision("int3"), doctest::Contains("\"int3\" is not one of"),
                       std::invalid_argument);
}

TEST_CASE("llama: frugal_generate end to end" * needs(gguf_model())) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_generate_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string exe = FRUGAL_GENERATE_EXE, model = gguf_model_path(), out = (dir / "out.jsonl").string(),
                    err = (dir / "err.txt").string();
  const auto run = [&](const std::string& args) {
    const int rc = std::system((exe + " --model " + model + " " + args + " > " + out + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const auto read = [](const std::string& path) {
    std::ifstream e(path);
    return std::string(std::istreambuf_iterator<char>(e), {});
  };
  const auto json_lines = [&] {
    std::vector<nlohmann::json> r;
    std::ifstream in(out);
    for (std::string l; std::getline(in, l);) r.push_back(nlohmann::json::parse(l));
    return r;
  };
  const std::vector<std::string> lines = {"What is the capital of France?", "Name a colour."};
  {
    std::ofstream in(dir / "in.txt", std::ios::binary);
    for (const auto& l : lines) in << l << '\n';
  }
  llama::model& m = smollm2(llama::precision::native);

  SUBCASE("greedy chat answers, two sequences per step, equal the library's greedy decoding") {
    REQUIRE(run("--input " + (dir / "in.txt").string() +
                " --chat --max-tokens 12 --parallel 2 --threads 2 --stats") == 0);
    const auto got = json_lines();
    REQUIRE(got.size() == lines.size());
    for (std::size_t i = 0; i < lines.size(); ++i) {
      CHECK(got[i].at("prompt") == lines[i]);
      const auto prompt_ids = got[i].at("prompt_ids").get<std::vector<std::int32_t>>();
      CHECK(prompt_ids.front() == m.tokenizer().find("<|im_start|>"));
      // The library, one sequence alone, greedy: the same ids.
      llama::sequence s = m.open();
      std::vector<std::int32_t> feed = prompt_ids, want;
      const std::int32_t eot = m.tokenizer().find("<|im_end|>");
      while (want.size() < 12) {
        const llama::input e{.seq = &s, .tokens = feed};
        const auto l = m.forward(std::span(&e, 1));
        const auto t = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        want.push_back(t);
        if (t == eot || t == m.tokenizer().eos()) break;
        feed.assign(1, t);
      }
      CHECK(got[i].at("ids").get<std::vector<std::int32_t>>() == want);
      CHECK(got[i].at("text") == m.tokenizer().decode(want));
    }
    CHECK(!got[0].at("text").get<std::string>().empty());
    const auto stats = nlohmann::json::parse(read(err));
    CHECK(stats.at("precision") == "native");
    CHECK(stats.at("weight_mb").get<double>() > 10.0);
    CHECK(stats.at("decode_tokens_per_s").get<double>() > 0.0);
  }
  SUBCASE("--tokenize prints the tokenizer's ids of each line, special tokens not parsed") {
    REQUIRE(run("--tokenize --prompt '<|im_start|>hi 123'") == 0);
    const auto got = json_lines();
    REQUIRE(got.size() == 1);
    CHECK(got[0].get<std::vector<std::int32_t>>() == m.tokenizer().encode("<|im_start|>hi 123"));
  }
  SUBCASE("seeded sampling is reproducible") {
    REQUIRE(run("--prompt 'Once upon a time' --temperature 0.8 --top-p 0.9 --seed 7 --max-tokens 8") == 0);
    const std::string first = read(out);
    REQUIRE(run("--prompt 'Once upon a time' --temperature 0.8 --top-p 0.9 --seed 7 --max-tokens 8") == 0);
    CHECK(read(out) == first);
    CHECK(json_lines().at(0).at("ids").size() == 8);
  }
  SUBCASE("--perplexity scores the second half of each chunk") {
    {
      std::ofstream t(dir / "text.txt", std::ios::binary);
      for (int i = 0; i < 8; ++i) t << "The cat sat on the mat. The dog sat on the log. ";
    }
    REQUIRE(run("--perplexity " + (dir / "text.txt").string() + " --ctx 32 --threads 2") == 0);
    const auto j = json_lines().at(0);
    CHECK(j.at("ctx") == 32);
    CHECK(j.at("chunks").get<std::size_t>() == j.at("tokens").get<std::size_t>() / 32);
    CHECK(j.at("scored_tokens").get<std::size_t>() == j.at("chunks").get<std::size_t>() * 15);
    const double ppl = j.at("perplexity").get<double>();
    CHECK(ppl > 1.0);
    CHECK(ppl < 20.0);  // a repeated text is easy to predict
  }
  SUBCASE("--bench reports prefill and decode rates") {
    REQUIRE(run("--bench --n-prompt 16 --n-gen 4 --repetitions 1") == 0);
    const auto j = json_lines().at(0);
    CHECK(j.at("prefill_tokens_per_s").at("mean").get<double>() > 0.0);
    CHECK(j.at("decode_tokens_per_s").at("mean").get<double>() > 0.0);
    CHECK(j.at("weight_bytes").get<std::size_t>() == m.weight_bytes());
    CHECK(j.at("kv_bytes_per_token").get<std::size_t>() == m.cfg().kv_bytes_per_token());
    CHECK(j.at("context").get<std::size_t>() == m.cfg().context);
  }
  SUBCASE("bad command lines exit 2 and name the flag; bad files exit 1 and name the file") {
    CHECK(run("--prompt hi --precision int3") == 2);
    CHECK(read(err).find("int3") != std::string::npos);
    CHECK(run("--prompt hi --bogus") == 2);
    CHECK(read(err).find("--bogus") != std::string::npos);
    CHECK(run("--prompt hi --input x") == 2);
    CHECK(run("--bench --tokenize") == 2);
    CHECK(run("--prompt hi --top-p 0") == 2);
    CHECK(run("--input " + (dir / "missing.txt").string()) == 1);
    CHECK(read(err).find("missing.txt") != std::string::npos);
    CHECK(run("--perplexity " + (dir / "in.txt").string() + " --ctx 4096") == 1);
    CHECK(read(err).find("fewer than one chunk") != std::string::npos);
    const int rc =
        std::system((exe + " --model " + (dir / "none.gguf").string() + " --prompt hi 2> " + err).c_str());
    CHECK((WIFEXITED(rc) ? WEXITSTATUS(rc) : -1) == 1);
    CHECK(read(err).find("none.gguf") != std::string::npos);
  }
  fs::remove_all(dir);
}
