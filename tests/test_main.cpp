// The main of every doctest binary. A case skipped for something missing (support/requires.hpp) is listed
// with what it lacked, and a binary that ran no case but skipped one exits 77: ctest's SKIP_RETURN_CODE
// reports it as skipped, where it would otherwise fail as a binary that ran nothing. A binary that ran some
// cases and skipped others passes, and doctest's summary counts the skipped ones.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <ostream>

#include "support/requires.hpp"

namespace {

struct run_record {
  bool ended = false;
  unsigned ran = 0;
  unsigned failed = 0;
  unsigned skipped_missing = 0;
};

run_record& record() {
  static run_record r;
  return r;
}

struct missing_listener : doctest::IReporter {
  std::ostream& out;
  explicit missing_listener(const doctest::ContextOptions& opt) : out(*opt.cout) {}

  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (!tc.m_skip) return;
    if (const auto* c = frugal_test::detail::find_missing(tc); c && !c->fails) {
      ++record().skipped_missing;
      out << "[frugal] skipped \"" << c->name << "\": missing " << c->what << "\n";
    }
  }
  void test_run_end(const doctest::TestRunStats& s) override {
    record().ended = true;
    record().ran = s.numTestCasesPassingFilters;
    record().failed = s.numTestCasesFailed;
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("frugal_missing", 1, missing_listener);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  const run_record& r = record();
  return r.ended && r.ran == 0 && r.failed == 0 && r.skipped_missing > 0 ? 77 : 0;
}
