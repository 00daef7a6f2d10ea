#include "connector/lightning_environment.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::map<std::string, std::string> variables;
  int local_rank;
  int node_rank;
  bool creates_processes_externally;
  std::string main_address;
  std::optional<int> main_port;
};

TEST(LightningEnvironmentTest, ReadsKilnsVariables) {
  const std::vector<Case> cases = {
      {{}, 0, 0, false, "127.0.0.1", std::nullopt},
      {{{"LOCAL_RANK", "1"}}, 1, 0, true, "127.0.0.1", std::nullopt},
      {{{"NODE_RANK", "2"}}, 0, 2, false, "127.0.0.1", std::nullopt},
      {{{"GROUP_RANK", "3"}}, 0, 3, false, "127.0.0.1", std::nullopt},
      {{{"NODE_RANK", "1"}, {"GROUP_RANK", "3"}}, 0, 1, false, "127.0.0.1", std::nullopt},
      {{{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}, 0, 0, false, "10.0.0.1", 29500},
      // An empty MASTER_ADDR names no host (found by tests/fuzz:cluster_environment).
      {{{"MASTER_ADDR", ""}, {"MASTER_PORT", "29502"}}, 0, 0, false, "127.0.0.1", 29502},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    LightningEnvironment environment(ProcessEnvironment::FromMap(c.variables));
    EXPECT_TRUE(LightningEnvironment::Detect(ProcessEnvironment::FromMap(c.variables)));
    EXPECT_EQ(environment.name(), "lightning");
    EXPECT_EQ(*environment.LocalRank(), c.local_rank);
    EXPECT_EQ(*environment.NodeRank(), c.node_rank);
    EXPECT_EQ(environment.CreatesProcessesExternally(), c.creates_processes_externally);
    EXPECT_EQ(*environment.MainAddress(), c.main_address);
    EXPECT_EQ(*environment.MainPort(), c.main_port);
    EXPECT_TRUE(environment.ValidateSettings(4, 2).ok());
    EXPECT_TRUE(environment.Warnings().empty());
  }
}

TEST(LightningEnvironmentTest, WorldSizeAndGlobalRankAreWhatTheConnectorSets) {
  LightningEnvironment environment(ProcessEnvironment::FromMap({}));
  EXPECT_EQ(*environment.WorldSize(), 1);
  EXPECT_EQ(*environment.GlobalRank(), 0);
  environment.SetWorldSize(8);
  environment.SetGlobalRank(5);
  EXPECT_EQ(*environment.WorldSize(), 8);
  EXPECT_EQ(*environment.GlobalRank(), 5);
}

TEST(LightningEnvironmentTest, BadVariablesAreNamed) {
  EXPECT_THAT(LightningEnvironment(ProcessEnvironment::FromMap({{"LOCAL_RANK", "one"}})).LocalRank().status().message(),
              HasSubstr("LOCAL_RANK='one' is not a non-negative integer"));
  EXPECT_THAT(LightningEnvironment(ProcessEnvironment::FromMap({{"NODE_RANK", "-2"}})).NodeRank().status().message(),
              HasSubstr("NODE_RANK='-2'"));
  EXPECT_THAT(
      LightningEnvironment(ProcessEnvironment::FromMap({{"MASTER_PORT", "99999"}})).MainPort().status().message(),
      HasSubstr("MASTER_PORT='99999' is not a TCP port"));
}

}  // namespace
}  // namespace kiln
