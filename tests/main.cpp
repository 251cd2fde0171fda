// The test runner's main: doctest, plus two listeners. One appends this
// binary's totals ("passed failed", in test cases) to $QKV_TOTALS_FILE so that
// tests/run_all.sh can print one "N passed, N failed" line for all binaries;
// the other tells tests/test_seed.h which test case is running (the name its
// seeds come from).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "test_seed.h"

namespace {
// A listener that ignores every event; the two below override what they need.
struct Listener : doctest::IReporter {
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
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

struct TotalsListener : Listener {
  explicit TotalsListener(const doctest::ContextOptions&) {}
  void test_run_end(const doctest::TestRunStats& s) override {
    const char* path = std::getenv("QKV_TOTALS_FILE");
    if (!path) return;
    if (FILE* f = std::fopen(path, "a")) {
      const unsigned failed = s.numTestCasesFailed;
      std::fprintf(f, "%u %u\n", s.numTestCasesPassingFilters - failed, failed);
      std::fclose(f);
    }
  }
};

struct SeedListener : Listener {
  explicit SeedListener(const doctest::ContextOptions&) {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    qkv::testing::test_case_started(tc.m_name);
  }
  void test_case_reenter(const doctest::TestCaseData&) override {
    qkv::testing::test_case_reentered();
  }
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    qkv::testing::test_case_ended();
    // What it takes to re-run a failed test on the same random inputs.
    if (!st.testCaseSuccess && qkv::testing::test_case_drew_seed())
      std::printf("  (its random inputs came from test_seed() with QKV_TEST_SEED=%llu)\n",
                  static_cast<unsigned long long>(qkv::testing::test_seed_offset()));
  }
};
}  // namespace

REGISTER_LISTENER("qkv_totals", 1, TotalsListener);
REGISTER_LISTENER("qkv_seed", 2, SeedListener);

int main(int argc, char** argv) {
  try {
    if (const uint64_t offset = qkv::testing::test_seed_offset())
      std::printf("QKV_TEST_SEED=%llu: every test's seeds are offset by it (tests/test_seed.h)\n",
                  static_cast<unsigned long long>(offset));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
