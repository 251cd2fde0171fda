// The test runner's main: doctest, plus a listener that appends this binary's
// totals ("passed failed", in test cases) to $QKV_TOTALS_FILE so that
// tests/run_all.sh can print one "N passed, N failed" line for all binaries.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

namespace {
struct TotalsListener : doctest::IReporter {
  explicit TotalsListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    const char* path = std::getenv("QKV_TOTALS_FILE");
    if (!path) return;
    if (FILE* f = std::fopen(path, "a")) {
      const unsigned failed = s.numTestCasesFailed;
      std::fprintf(f, "%u %u\n", s.numTestCasesPassingFilters - failed, failed);
      std::fclose(f);
    }
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
}  // namespace

REGISTER_LISTENER("qkv_totals", 1, TotalsListener);

int main(int argc, char** argv) {
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
