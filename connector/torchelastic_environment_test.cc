#include "connector/torchelastic_environment.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Variables = std::map<std::string, std::string>;

Variables Torchrun(int world_size, int rank, int local_rank, int group_rank) {
  return {{"TORCHELASTIC_RUN_ID", "job7"},
          {"WORLD_SIZE", std::to_string(world_size)},
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"GROUP_RANK", std::to_string(group_rank)},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29400"}};
}

TEST(TorchElasticEnvironmentTest, DetectsTorchrunByItsRunId) {
  EXPECT_TRUE(TorchElasticEnvironment::Detect(ProcessEnvironment::FromMap({{"TORCHELASTIC_RUN_ID", "x"}})));
  // torch.distributed.launch without torchrun sets ranks but no run id: Kiln's own environment handles that.
  EXPECT_FALSE(TorchElasticEnvironment::Detect(
      ProcessEnvironment::FromMap({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}})));
}

TEST(TorchElasticEnvironmentTest, TheAgentsStoreIsJoinedUnderTheAttemptsPrefix) {
  Variables variables = Torchrun(2, 0, 0, 0);
  EXPECT_EQ(*TorchElasticEnvironment(ProcessEnvironment::FromMap(variables)).LauncherStorePrefix(), std::nullopt);
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  variables["TORCHELASTIC_RESTART_COUNT"] = "3";
  EXPECT_EQ(*TorchElasticEnvironment(ProcessEnvironment::FromMap(variables)).LauncherStorePrefix(),
            "/worker/attempt_3");
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // --standalone and the c10d rendezvous: rank 0 serves.
  EXPECT_EQ(*TorchElasticEnvironment(ProcessEnvironment::FromMap(variables)).LauncherStorePrefix(), std::nullopt);
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  variables.erase("TORCHELASTIC_RESTART_COUNT");
  const absl::StatusOr<std::optional<std::string>> missing =
      TorchElasticEnvironment(ProcessEnvironment::FromMap(variables)).LauncherStorePrefix();
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("TORCHELASTIC_RESTART_COUNT is not set"));
}

struct RankCase {
  Variables variables;
  int world_size, global_rank, local_rank, node_rank;
};

TEST(TorchElasticEnvironmentTest, ReadsRanks) {
  Variables without_group = Torchrun(2, 1, 1, 0);
  without_group.erase("GROUP_RANK");
  const std::vector<RankCase> cases = {
      {Torchrun(8, 5, 1, 1), 8, 5, 1, 1},
      {Torchrun(1, 0, 0, 0), 1, 0, 0, 0},
      {without_group, 2, 1, 1, 0},
  };
  for (const RankCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    TorchElasticEnvironment environment(ProcessEnvironment::FromMap(c.variables));
    EXPECT_EQ(environment.name(), "torchelastic");
    EXPECT_TRUE(environment.CreatesProcessesExternally());
    EXPECT_EQ(*environment.WorldSize(), c.world_size);
    EXPECT_EQ(*environment.GlobalRank(), c.global_rank);
    EXPECT_EQ(*environment.LocalRank(), c.local_rank);
    EXPECT_EQ(*environment.NodeRank(), c.node_rank);
    EXPECT_EQ(*environment.MainAddress(), "node0");
    EXPECT_EQ(*environment.MainPort(), 29400);
    EXPECT_TRUE(environment.Warnings().empty());
    // Setting ranks is not allowed under torchrun, and is ignored.
    environment.SetWorldSize(99);
    environment.SetGlobalRank(98);
    EXPECT_EQ(*environment.WorldSize(), c.world_size);
    EXPECT_EQ(*environment.GlobalRank(), c.global_rank);
  }
}

TEST(TorchElasticEnvironmentTest, MissingAddressAndPortTakeLightningsDefaultsWithItsWarnings) {
  Variables variables = Torchrun(2, 0, 0, 0);
  variables.erase("MASTER_ADDR");
  variables.erase("MASTER_PORT");
  TorchElasticEnvironment environment(ProcessEnvironment::FromMap(variables));
  EXPECT_EQ(*environment.MainAddress(), "127.0.0.1");
  EXPECT_EQ(*environment.MainPort(), 12910);
  EXPECT_THAT(environment.Warnings(), ElementsAre("MASTER_ADDR environment variable is not defined. Set as localhost",
                                                  "MASTER_PORT environment variable is not defined. Set as 12910"));
}

TEST(TorchElasticEnvironmentTest, ValidatesTheWorldSizeInLightningsWords) {
  TorchElasticEnvironment environment(ProcessEnvironment::FromMap(Torchrun(4, 0, 0, 0)));
  EXPECT_TRUE(environment.ValidateSettings(2, 2).ok());
  EXPECT_TRUE(environment.ValidateSettings(4, 1).ok());
  absl::Status status = environment.ValidateSettings(2, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("You set `devices=2` and `num_nodes=1` in Kiln, but the product (2 * 1) "
                                          "does not match the world size (4, from WORLD_SIZE)."));
}

TEST(TorchElasticEnvironmentTest, MissingRanksSayWhatToDo) {
  Variables variables = Torchrun(2, 0, 0, 0);
  variables.erase("RANK");
  TorchElasticEnvironment environment(ProcessEnvironment::FromMap(variables));
  EXPECT_THAT(environment.GlobalRank().status().message(),
              HasSubstr("TORCHELASTIC_RUN_ID='job7' says torchrun started this process, but RANK is not set"));
}

}  // namespace
}  // namespace kiln
