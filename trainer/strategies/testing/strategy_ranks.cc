#include "trainer/strategies/testing/strategy_ranks.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "connector/options.h"
#include "gtest/gtest.h"
#include "hal/testing/rank_runner.h"

namespace kiln::strategy_testing {
namespace {

constexpr char kRank[] = "KILN_STRATEGY_TEST_RANK";
constexpr char kWorld[] = "KILN_STRATEGY_TEST_WORLD";
constexpr char kPort[] = "KILN_STRATEGY_TEST_PORT";

int IntFromEnvironment(const char* name, int fallback) {
  const char* text = std::getenv(name);
  int value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

}  // namespace

bool IsRank() { return std::getenv(kRank) != nullptr; }
int Rank() { return IntFromEnvironment(kRank, 0); }
int WorldSize() { return IntFromEnvironment(kWorld, 1); }

void RunThisTestAsRanks(int world) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = absl::StrCat("--gtest_filter=", test->test_suite_name(), ".", test->name());
  const std::string self = testing::ThisProgram("");
  const int port = testing::FreeLoopbackPort();
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    // What Bazel tells the test itself, which a rank must not act on: the test's XML report and premature-exit file
    // (the test's own), and its shard (a rank runs the one test it is given).
    for (const char* test_only : {"XML_OUTPUT_FILE", "GTEST_OUTPUT", "TEST_PREMATURE_EXIT_FILE", "TEST_TOTAL_SHARDS",
                                  "TEST_SHARD_INDEX", "TEST_SHARD_STATUS_FILE", "GTEST_TOTAL_SHARDS",
                                  "GTEST_SHARD_INDEX"}) {
      argv.insert(argv.end(), {"-u", test_only});
    }
    argv.insert(argv.end(), {absl::StrCat(kRank, "=", rank), absl::StrCat(kWorld, "=", world),
                             absl::StrCat(kPort, "=", port), self, filter});
    argvs.push_back(std::move(argv));
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string logs = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", test->name());
  const std::vector<testing::RankRun> runs = testing::RunRanks(argvs, logs, 0.8 * testing::TestTimeoutSeconds());
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(runs[rank].status, 0) << "rank " << rank << " of " << world << " "
                                    << testing::RankEnding(runs[rank]) << ":\n" << testing::RankOutput(runs[rank]);
  }
}

Plan ThisRankPlan(const std::string& strategy) {
  ConnectorOptions options{.accelerator = "cpu", .devices = 1, .strategy = strategy};
  if (IsRank()) {
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", absl::StrCat(IntFromEnvironment(kPort, 0)).c_str(), 1);
    ::setenv("LOCAL_RANK", absl::StrCat(Rank()).c_str(), 1);
    ::setenv("NODE_RANK", "0", 1);
    options.devices = WorldSize();
  }
  absl::StatusOr<Plan> plan = ResolvePlan(options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : Plan{};
}

}  // namespace kiln::strategy_testing
