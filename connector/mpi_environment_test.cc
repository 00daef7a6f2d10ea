#include "connector/mpi_environment.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Variables = std::map<std::string, std::string>;

Variables OpenMpi(int size, int rank, int local_size) {
  return {{"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % local_size)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

Variables Hydra(int size, int rank, int local_size) {
  return {{"PMI_SIZE", std::to_string(size)},
          {"PMI_RANK", std::to_string(rank)},
          {"MPI_LOCALRANKID", std::to_string(rank % local_size)},
          {"MPI_LOCALNRANKS", std::to_string(local_size)}};
}

struct DetectCase {
  Variables variables;
  bool detected;
};

TEST(MpiEnvironmentTest, DetectsAWorldOfMoreThanOneProcess) {
  const std::vector<DetectCase> cases = {
      {{}, false},
      {{{"OMPI_COMM_WORLD_SIZE", "1"}}, false},  // A lone `mpirun -n 1` process, as in Lightning.
      {{{"OMPI_COMM_WORLD_SIZE", "2"}}, true},
      {{{"PMI_SIZE", "4"}}, true},
      {{{"PMI_SIZE", "1"}}, false},
      {{{"OMPI_COMM_WORLD_SIZE", "many"}}, false},
  };
  for (const DetectCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    EXPECT_EQ(MpiEnvironment::Detect(ProcessEnvironment::FromMap(c.variables)), c.detected);
  }
}

struct RankCase {
  Variables variables;
  int world_size, global_rank, local_rank, node_rank;
};

TEST(MpiEnvironmentTest, ReadsRanksFromEitherLauncherFamily) {
  Variables both = OpenMpi(4, 3, 2);
  for (const auto& [name, value] : Hydra(8, 7, 4)) both[name] = value;
  const std::vector<RankCase> cases = {
      {OpenMpi(4, 3, 2), 4, 3, 1, 1},
      {OpenMpi(8, 5, 4), 8, 5, 1, 1},
      {OpenMpi(6, 4, 2), 6, 4, 0, 2},
      {Hydra(4, 2, 2), 4, 2, 0, 1},
      {both, 4, 3, 1, 1},  // Open MPI's variables win.
  };
  for (const RankCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    MpiEnvironment environment(ProcessEnvironment::FromMap(c.variables));
    EXPECT_EQ(environment.name(), "mpi");
    EXPECT_TRUE(environment.CreatesProcessesExternally());
    EXPECT_EQ(*environment.WorldSize(), c.world_size);
    EXPECT_EQ(*environment.GlobalRank(), c.global_rank);
    EXPECT_EQ(*environment.LocalRank(), c.local_rank);
    EXPECT_EQ(*environment.NodeRank(), c.node_rank);
  }
}

TEST(MpiEnvironmentTest, AddressAndPortDefaultWithWarnings) {
  MpiEnvironment defaults(ProcessEnvironment::FromMap(OpenMpi(2, 0, 2)));
  EXPECT_EQ(*defaults.MainAddress(), "127.0.0.1");
  EXPECT_EQ(*defaults.MainPort(), 12910);
  EXPECT_THAT(defaults.Warnings(), ElementsAre(HasSubstr("MASTER_ADDR environment variable is not defined"),
                                               "MASTER_PORT environment variable is not defined. Set as 12910"));
  Variables variables = OpenMpi(2, 0, 2);
  variables["MASTER_ADDR"] = "head";
  variables["MASTER_PORT"] = "23456";
  MpiEnvironment set(ProcessEnvironment::FromMap(variables));
  EXPECT_EQ(*set.MainAddress(), "head");
  EXPECT_EQ(*set.MainPort(), 23456);
  EXPECT_TRUE(set.Warnings().empty());
}

struct ValidateCase {
  Variables variables;
  int devices, nodes;
  std::string error_part;
};

TEST(MpiEnvironmentTest, ValidatesDevicesAndNodesAgainstTheLaunch) {
  Variables no_local_size = OpenMpi(4, 0, 2);
  no_local_size.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  const std::vector<ValidateCase> cases = {
      {OpenMpi(4, 0, 2), 2, 2, ""},
      {OpenMpi(4, 0, 2), 1, 2, "the product (1 * 2) does not match the world size (4, from OMPI_COMM_WORLD_SIZE)"},
      {OpenMpi(4, 0, 2), 4, 1,
       "MPI started 2 process(es) on this node (OMPI_COMM_WORLD_LOCAL_SIZE=2). HINT: Set "
       "`devices=2`"},
      {Hydra(4, 0, 4), 2, 2, "MPI_LOCALNRANKS=4"},
      {no_local_size, 2, 2, "the MPI environment needs OMPI_COMM_WORLD_LOCAL_SIZE, which is not set"},
  };
  for (const ValidateCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    absl::Status status = MpiEnvironment(ProcessEnvironment::FromMap(c.variables)).ValidateSettings(c.devices, c.nodes);
    if (c.error_part.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_THAT(status.message(), HasSubstr(c.error_part));
    }
  }
}

}  // namespace
}  // namespace kiln
