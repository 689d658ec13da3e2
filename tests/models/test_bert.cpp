#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/requires.hpp"
#include "bert.hpp"

namespace {

using frugal_test::model;
using frugal_test::model_dir;
using frugal_test::needs;

struct fixture {
  std::vector<std::string> texts;
  std::vector<std::vector<float>> embeddings;  // sentence-transformers' fp32 output
};

const fixture& reference() {
  static const fixture f = [] {
    fixture r;
    std::ifstream in(std::string(FRUGAL_FIXTURE_DIR) + "/embeddings.jsonl");
    REQUIRE(in);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      r.texts.push_back(j.at("text").get<std::string>());
      r.embeddings.push_back(j.at("embedding").get<std::vector<float>>());
      if (FRUGAL_BERT_QUICK && r.texts.size() == 48) break;
    }
    return r;
  }();
  return f;
}

std::vector<std::string> calibration() {
  std::ifstream in(std::string(FRUGAL_FIXTURE_DIR) + "/calibration.txt");
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The nearest other sentence of each sentence, by cosine, within one set of embeddings, and by how much
// it beats the second nearest.
std::vector<std::size_t> nearest(const std::vector<std::vector<float>>& e,
                                 std::vector<double>* margin = nullptr) {
  std::vector<std::size_t> out(e.size());
  if (margin) margin->assign(e.size(), 0.0);
  for (std::size_t i = 0; i < e.size(); ++i) {
    double best = -2, second = -2;
    for (std::size_t j = 0; j < e.size(); ++j)
      if (j != i) {
        const double c = bert::cosine(e[i], e[j]);
        if (c > best) {
          second = best, best = c, out[i] = j;
        } else {
          second = std::max(second, c);
        }
      }
    if (margin) (*margin)[i] = best - second;
  }
  return out;
}

}  // namespace

TEST_CASE("bert: fp32 equals sentence-transformers on every fixture sentence, over 256 tokens included" *
          needs(model())) {
  const auto& ref = reference();
  REQUIRE(ref.texts.size() >= (FRUGAL_BERT_QUICK ? 48u : 200u));
  const auto enc = bert::encoder::load(model_dir(), {.threads = 2});
  CHECK(enc.dimension() == 384);
  const auto got = enc.encode_texts(ref.texts);
  REQUIRE(got.size() == ref.texts.size());
  double worst = 1;
  std::size_t long_lines = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(ref.texts[i]);
    const double c = bert::cosine(got[i], ref.embeddings[i]);
    CHECK(c >= 0.99999);
    worst = std::min(worst, c);
    if (enc.tokenize(ref.texts[i]).size() == 256) ++long_lines;
  }
  CHECK(long_lines >= (FRUGAL_BERT_QUICK ? 0u : 10u));
  MESSAGE("bert fp32 vs sentence-transformers: min cosine " << std::setprecision(8) << worst << " over "
                                                            << got.size() << " sentences, " << long_lines
                                                            << " cut at 256 tokens");
}

TEST_CASE("bert: threads and batch packing do not change the result" * needs(model())) {
  const auto& ref = reference();
  const std::vector<std::string> some(ref.texts.begin(), ref.texts.begin() + 40);
  const auto one = bert::encoder::load(model_dir(), {.threads = 1}).encode_texts(some);
  const auto two = bert::encoder::load(model_dir(), {.threads = 3});
  const auto many = two.encode_texts(some);
  REQUIRE(many.size() == one.size());
  for (std::size_t i = 0; i < some.size(); ++i) {
    CHECK(bert::cosine(one[i], many[i]) > 0.999999);
    const auto alone = two.encode_texts(std::vector<std::string>{some[i]});
    CHECK(bert::cosine(one[i], alone[0]) > 0.999999);
  }
}

// The bounds are statistical over the whole fixture, which the sanitizer builds do not run.
TEST_CASE("bert: int8 with SmoothQuant keeps the meaning (cosine mean >= 0.995, min >= 0.98, top-1 >= 99%)" *
          needs(model(),
                frugal_test::built("whole-fixture", !FRUGAL_BERT_QUICK,
                                   "a sanitizer build runs a 48-sentence subset (FRUGAL_BERT_QUICK)"))) {
  const auto& ref = reference();
  const auto cal = calibration();
  REQUIRE(cal.size() >= 200);
  for (const auto& t : cal) REQUIRE(std::find(ref.texts.begin(), ref.texts.end(), t) == ref.texts.end());
  const auto fp32 = bert::encoder::load(model_dir(), {.threads = 2}).encode_texts(ref.texts);
  const auto enc =
      bert::encoder::load(model_dir(), {.weights = bert::precision::int8, .calibration = cal, .threads = 2});
  const auto got = enc.encode_texts(ref.texts);
  double sum = 0, worst = 1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double c = bert::cosine(got[i], fp32[i]);
    sum += c;
    worst = std::min(worst, c);
  }
  // Top-1 agreement over the queries whose fp32 top-1 is decided: it beats fp32's own second choice by
  // >= 0.01 in cosine. Below that margin the reference is a near tie, which bf16 rounding flips as well.
  std::vector<double> margin;
  const auto a = nearest(fp32, &margin), b = nearest(got);
  std::size_t agree = 0, decided = 0, agree_all = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    agree_all += a[i] == b[i];
    if (margin[i] < 0.01) continue;
    ++decided;
    agree += a[i] == b[i];
  }
  REQUIRE(decided >= a.size() / 2);
  const double mean = sum / static_cast<double>(got.size()), top1 = double(agree) / double(decided);
  MESSAGE("bert int8 (SmoothQuant) vs fp32: mean cosine " << mean << ", min " << worst << ", top-1 agreement "
                                                          << top1 << " on " << decided << " decided queries ("
                                                          << agree_all << "/" << a.size() << " on all) ");
  CHECK(mean >= 0.995);
  CHECK(worst >= 0.98);
  CHECK(top1 >= 0.99);
  CHECK(enc.linear_bytes() * 3 < bert::encoder::load(model_dir()).linear_bytes());  // ~1/4 of fp32
}

TEST_CASE("bert: bad model directories and inputs get errors naming what is wrong") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_bert_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  CHECK_THROWS_WITH(bert::encoder::load(dir.string()), doctest::Contains("cannot open"));
  write("config.json", R"({"hidden_size": 384, "num_hidden_layers": 6})");
  CHECK_THROWS_WITH(bert::encoder::load(dir.string()), doctest::Contains("num_attention_heads"));
  write("config.json", R"({"hidden_size": 384, "num_hidden_layers": 1, "num_attention_heads": 5,
    "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 8, "type_vocab_size": 2})");
  CHECK_THROWS_WITH(bert::encoder::load(dir.string()), doctest::Contains("not a multiple"));
  write("config.json",
        R"({"hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_act": "relu",
    "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 8, "type_vocab_size": 2})");
  CHECK_THROWS_WITH(bert::encoder::load(dir.string()), doctest::Contains("hidden_act"));
  CHECK_THROWS_WITH(bert::parse_precision("int3"), doctest::Contains("int3"));
  CHECK_THROWS_WITH(bert::encoder::load(dir.string(), {.threads = 0}), doctest::Contains("threads"));
  if (frugal_test::available(model())) {
    // The real tensors under a config that asks for other shapes: the error names file and tensor.
    fs::copy_file(model_dir() + "/vocab.txt", dir / "vocab.txt", fs::copy_options::overwrite_existing);
    fs::create_symlink(model_dir() + "/model.safetensors", dir / "model.safetensors");
    write("config.json", R"({"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12,
      "intermediate_size": 1536, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2})");
    CHECK_THROWS_WITH(
        bert::encoder::load(dir.string()),
        doctest::Contains(
            "embeddings.word_embeddings.weight' has shape [30522, 384], expected [30522, 768]"));
    fs::copy_file(model_dir() + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH(bert::encoder::load(dir.string(), {.weights = bert::precision::int8}),
                      doctest::Contains("calibration"));
    const auto enc = bert::encoder::load(dir.string());
    CHECK_THROWS_WITH(enc.encode(std::vector<std::vector<std::int32_t>>{{101, 30522, 102}}),
                      doctest::Contains("token id 30522"));
    CHECK_THROWS_WITH(enc.encode(std::vector<std::vector<std::int32_t>>{{}}),
                      doctest::Contains("sequence 0 has 0 tokens"));
  }
  fs::remove_all(dir);
}

TEST_CASE("bert: frugal_embed end to end: one JSON array per line in input order, usage errors exit 2" *
          needs(model())) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_embed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<std::string> lines = {"The quick brown fox.", "", "Ça va? 日本語 😀", "a second batch"};
  {
    std::ofstream in(dir / "in.txt", std::ios::binary);
    for (const auto& l : lines) in << l << '\n';
  }
  const std::string exe = FRUGAL_EMBED_EXE, out = (dir / "out.jsonl").string(),
                    err = (dir / "err.txt").string();
  const auto run = [&](const std::string& args) {
    const int rc = std::system((exe + " " + args + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const auto error_text = [&] {
    std::ifstream e(err);
    return std::string(std::istreambuf_iterator<char>(e), {});
  };
  REQUIRE(run("--model " + model_dir() + " --input " + (dir / "in.txt").string() + " --output " + out +
              " --precision fp32 --batch 3 --threads 2 --stats") == 0);
  CHECK(error_text().find("4 sentences") != std::string::npos);
  const auto want = bert::encoder::load(model_dir()).encode_texts(lines);
  std::ifstream got(out);
  std::size_t n = 0;
  for (std::string l; std::getline(got, l); ++n) {
    REQUIRE(n < want.size());
    const auto v = nlohmann::json::parse(l).get<std::vector<float>>();
    REQUIRE(v.size() == 384);
    CHECK(bert::cosine(v, want[n]) > 0.999999);
  }
  CHECK(n == lines.size());
  CHECK(run("--model " + model_dir() + " --input x --output y --precision int3") == 2);
  CHECK(error_text().find("int3") != std::string::npos);
  CHECK(run("--model " + model_dir() + " --input x --output y --batch 0") == 2);
  CHECK(error_text().find("--batch") != std::string::npos);
  CHECK(run("--model " + model_dir() + " --bogus") == 2);
  CHECK(run("--model " + (dir / "nothing").string() + " --input x --output y") == 1);
  CHECK(error_text().find("nothing/config.json") != std::string::npos);
  CHECK(run("--model " + model_dir() + " --input " + (dir / "missing.txt").string() + " --output " + out) ==
        1);
  CHECK(error_text().find("missing.txt") != std::string::npos);
  // An output that cannot be written is refused before the model loads, naming it.
  CHECK(run("--model " + model_dir() + " --input " + (dir / "in.txt").string() + " --output " +
            dir.string()) == 1);
  CHECK(error_text().find(dir.string() + ": cannot be written") != std::string::npos);
  fs::remove_all(dir);
}
