#pragma once

// What a test needs that a machine may lack (the MiniLM model, a tool, a GPU), and the one place that
// decides what a missing one means:
//
//   TEST_CASE("server: ..." * frugal_test::needs(frugal_test::model(), frugal_test::tool("wrk", FRUGAL_WRK)))
//
// The predicates are evaluated once, when doctest registers the case. Something missing skips the case:
// doctest counts it as skipped, test_main.cpp prints what was missing, and a binary that then ran no case
// exits 77, which ctest reports as skipped (SKIP_RETURN_CODE). Named in FRUGAL_REQUIRE, a missing
// requirement fails the case instead, naming it. FRUGAL_REQUIRE is a comma-separated list of names;
// `all` stands for everything ./cmake/quickstart.sh test installs (the model, the tools, the libraries),
// not for what it cannot provide (a GPU, privileges, a build configuration), which must be named.
// For one step inside a test, available() applies the same rule at run time.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace frugal_test {

struct requirement {
  std::string name;         // as FRUGAL_REQUIRE names it: "model", "wrk", "gpu", ...
  std::string missing;      // empty when present, else what is missing and where
  bool installable = true;  // covered by FRUGAL_REQUIRE=all
};

inline bool required(const requirement& r) {
  const char* env = std::getenv("FRUGAL_REQUIRE");
  std::string_view list = env ? env : "";
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    if (item == r.name || (item == "all" && r.installable)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// The model directory: $FRUGAL_MODEL_DIR, else the one the build was configured with (tests/CMakeLists.txt
// defines it for every test; benchmarks/gpu/run.sh's nvcc-only builds do not).
inline std::string model_dir() {
  if (const char* e = std::getenv("FRUGAL_MODEL_DIR"); e && *e) return e;
#ifdef FRUGAL_MODEL_DIR
  return FRUGAL_MODEL_DIR;
#else
  return "build/models/all-MiniLM-L6-v2";
#endif
}

// all-MiniLM-L6-v2 as ./cmake/quickstart.sh fetches it.
inline requirement model() {
  const std::string dir = model_dir();
  for (const char* part : {"model.safetensors", "vocab.txt", "config.json"})
    if (!std::filesystem::exists(dir + "/" + part))
      return {"model",
              "no " + std::string(part) + " in " + dir +
                  " (./cmake/quickstart.sh test fetches it; FRUGAL_MODEL_DIR names another directory)"};
  return {"model", ""};
}

// SmolLM2-135M-Instruct's GGUF file as ./cmake/quickstart.sh fetches it: $FRUGAL_GGUF_MODEL, else the one the
// build was configured with.
inline std::string gguf_model_path() {
  if (const char* e = std::getenv("FRUGAL_GGUF_MODEL"); e && *e) return e;
#ifdef FRUGAL_GGUF_MODEL
  return FRUGAL_GGUF_MODEL;
#else
  return "build/models/SmolLM2-135M-Instruct.Q4_1.gguf";
#endif
}

inline requirement gguf_model() {
  const std::string path = gguf_model_path();
  if (!std::filesystem::exists(path))
    return {"gguf-model",
            "no " + path + " (./cmake/quickstart.sh test fetches it; FRUGAL_GGUF_MODEL names another file)"};
  return {"gguf-model", ""};
}

// A program found when the build was configured: find_program's result, empty or <VAR>-NOTFOUND without one.
inline requirement tool(const std::string& name, const std::string& path) {
  const std::string_view notfound = "-NOTFOUND";
  if (path.empty() || (path.size() >= notfound.size() &&
                       path.compare(path.size() - notfound.size(), notfound.size(), notfound) == 0))
    return {name, name + " was not found when the build was configured"};
  if (!std::filesystem::exists(path)) return {name, path + " does not exist"};
  return {name, ""};
}

// A program on PATH now.
inline requirement on_path(const std::string& name) {
  const char* env = std::getenv("PATH");
  std::string_view path = env ? env : "";
  while (!path.empty()) {
    const std::size_t colon = path.find(':');
    const std::filesystem::path p = std::filesystem::path(path.substr(0, colon)) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return {name, ""};
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return {name, "no " + name + " on PATH"};
}

// A file the test reads (a corpus, a kernel interface).
inline requirement file(const std::string& name, const std::string& path) {
  if (std::filesystem::exists(path)) return {name, ""};
  return {name, "no " + path};
}

// A library the build looked for when it was configured.
inline requirement found(const std::string& name, bool present, const std::string& why_not) {
  return {name, present ? "" : why_not};
}

// What this build was configured without: not installable, so only an explicit FRUGAL_REQUIRE fails on it.
inline requirement built(const std::string& name, bool on, const std::string& why_not) {
  return {name, on ? "" : why_not, false};
}

namespace detail {

struct missing_case {
  std::string file;
  unsigned line = 0;
  std::string name;
  std::string what;  // "model: no model.safetensors in ..."; several joined by "; "
  bool fails = false;
};

// Cases registered with something missing, in registration order (static initialisation).
inline std::vector<missing_case>& missing_cases() {
  static std::vector<missing_case> cases;
  return cases;
}

inline const missing_case* find_missing(const doctest::TestCaseData& tc) {
  for (const auto& c : missing_cases())
    if (c.line == tc.m_line && c.file == tc.m_file.c_str()) return &c;
  return nullptr;
}

// The body of a case whose required dependency is missing.
inline void fail_missing() {
  const auto* tc = doctest::getContextOptions()->currentTest;
  const missing_case* c = tc ? find_missing(*tc) : nullptr;
  FAIL("missing, and FRUGAL_REQUIRE requires it: " << (c ? c->what : std::string("(unknown)")));
}

inline std::string describe(const requirement& r) { return r.name + ": " + r.missing; }

}  // namespace detail

// The decorator, `TEST_CASE("..." * needs(a, b))`: doctest calls fill() as it registers the case. A case
// that fails for a required dependency gets a body that says so at once: its own would fail further on,
// for a less plain reason, or pass on a stand-in.
class needs {
 public:
  template <class... R>
  explicit needs(const R&... r) : all_{r...} {}

  void fill(doctest::detail::TestCase& tc) const {
    std::string fails, skips;
    for (const auto& r : all_) {
      if (r.missing.empty()) continue;
      std::string& to = required(r) ? fails : skips;
      to += (to.empty() ? "" : "; ") + detail::describe(r);
    }
    if (fails.empty() && skips.empty()) return;
    // A case that cannot run here for a reason nobody requires (no GPU on CI) is skipped whatever else it
    // lacks: a required one that is missing fails the cases that lack nothing else.
    const bool fail = skips.empty();
    detail::missing_cases().push_back(
        {tc.m_file.c_str(), tc.m_line, tc.m_name ? tc.m_name : "", fail ? fails : skips, fail});
    if (fail)
      tc.m_test = &detail::fail_missing;
    else
      tc.m_skip = true;
  }

 private:
  std::vector<requirement> all_;
};

// For one step of a test: true when `r` is present; else the step is skipped, with a message, or, when
// FRUGAL_REQUIRE requires it, the test fails here.
inline bool available(const requirement& r) {
  if (r.missing.empty()) return true;
  if (required(r)) FAIL("missing, and FRUGAL_REQUIRE requires it: " << detail::describe(r));
  MESSAGE("skipped a step, missing " << detail::describe(r));
  return false;
}

}  // namespace frugal_test
