// The tests' main: doctest's, plus one check. ctest runs each TEST_CASE as
// `<binary> --test-case=<name>`; a name doctest_discover_tests mangled (it splits at ';') then
// matches nothing, and doctest would pass having run nothing. A filter that matches no test
// case fails here instead, naming it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

namespace {

int g_passing_filters = -1;

struct FilterCount : doctest::IReporter {
  explicit FilterCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_passing_filters = static_cast<int>(s.numTestCasesPassingFilters);
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

REGISTER_LISTENER("chl-filter-count", 1, FilterCount);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit()) return rc;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    for (std::string_view flag : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="}) {
      if (a.substr(0, flag.size()) == flag && g_passing_filters == 0) {
        std::fprintf(stderr, "no test case matches %s (a name ctest cannot pass whole: ';' in it?)\n", argv[i]);
        return rc == 0 ? 1 : rc;
      }
    }
  }
  return rc;
}
