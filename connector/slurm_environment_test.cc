#include "connector/slurm_environment.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

using Variables = std::map<std::string, std::string>;

// What srun sets for the process with `procid` in a job of `nodes` nodes x `per_node` tasks.
Variables Srun(int nodes, int per_node, int procid) {
  return {{"SLURM_NTASKS", std::to_string(nodes * per_node)},
          {"SLURM_NTASKS_PER_NODE", std::to_string(per_node)},
          {"SLURM_NNODES", std::to_string(nodes)},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(procid % per_node)},
          {"SLURM_NODEID", std::to_string(procid / per_node)},
          {"SLURM_NODELIST", "gpu[12-15]"},
          {"SLURM_JOB_ID", "4123456"},
          {"SLURM_JOB_NAME", "train"}};
}

struct DetectCase {
  Variables variables;
  bool detected;
};

TEST(SlurmEnvironmentTest, DetectsSrunButNotInteractiveJobs) {
  const std::vector<DetectCase> cases = {
      {{}, false},
      {{{"SLURM_NTASKS", "2"}}, true},
      {{{"SLURM_NTASKS", "2"}, {"SLURM_JOB_NAME", "train"}}, true},
      {{{"SLURM_NTASKS", "2"}, {"SLURM_JOB_NAME", "bash"}}, false},
      {{{"SLURM_NTASKS", "2"}, {"SLURM_JOB_NAME", "interactive"}}, false},
      {{{"SLURM_JOB_ID", "12"}}, false},  // An allocation without srun.
  };
  for (const DetectCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    EXPECT_EQ(SlurmEnvironment::Detect(ProcessEnvironment::FromMap(c.variables)), c.detected);
  }
}

TEST(SlurmEnvironmentTest, RootNodeAddressIsTheFirstHost) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"host0", "host0"},
      {"host0 host1 host3", "host0"},
      {"host0,host1,host3", "host0"},
      {"host[5-9]", "host5"},
      {"host[5,7,9]", "host5"},
      {"host[07-09],other2", "host07"},
      {"rack1-node[3]", "rack1-node3"},
      {"a[1-2]b[3-4]", "a1b3"},
      {"", ""},
  };
  for (const auto& [nodelist, root] : cases) {
    EXPECT_EQ(SlurmEnvironment::RootNodeAddress(nodelist), root) << nodelist;
  }
}

TEST(SlurmEnvironmentTest, ReadsRanksAndAddress) {
  SlurmEnvironment environment(ProcessEnvironment::FromMap(Srun(4, 2, 5)));
  EXPECT_EQ(environment.name(), "slurm");
  EXPECT_TRUE(environment.CreatesProcessesExternally());
  EXPECT_EQ(*environment.WorldSize(), 8);
  EXPECT_EQ(*environment.GlobalRank(), 5);
  EXPECT_EQ(*environment.LocalRank(), 1);
  EXPECT_EQ(*environment.NodeRank(), 2);
  EXPECT_EQ(*environment.MainAddress(), "gpu12");
  EXPECT_EQ(*environment.MainPort(), 15000 + 3456);
  EXPECT_TRUE(environment.ValidateSettings(2, 4).ok());
}

TEST(SlurmEnvironmentTest, MasterAddrOverridesTheFirstNodeAsInLightning) {
  Variables variables = Srun(4, 2, 5);
  variables["MASTER_ADDR"] = "10.0.0.7";
  EXPECT_EQ(*SlurmEnvironment(ProcessEnvironment::FromMap(variables)).MainAddress(), "10.0.0.7");
  variables["MASTER_ADDR"] = "";  // Empty: unset.
  EXPECT_EQ(*SlurmEnvironment(ProcessEnvironment::FromMap(variables)).MainAddress(), "gpu12");
}

struct PortCase {
  Variables variables;
  std::optional<int> port;  // nullopt: an error containing error_part.
  std::string error_part;
};

TEST(SlurmEnvironmentTest, MainPortComesFromTheJobId) {
  const std::vector<PortCase> cases = {
      {{{"SLURM_JOB_ID", "4123456"}}, 18456, ""},
      {{{"SLURM_JOB_ID", "77"}}, 15077, ""},
      {{{"SLURM_JOB_ID", "4123456"}, {"MASTER_PORT", "29500"}}, 29500, ""},
      {{}, 12910, ""},
      {{{"SLURM_JOB_ID", "12ab"}}, std::nullopt, "SLURM_JOB_ID='12ab' does not end in digits"},
      {{{"MASTER_PORT", "x"}}, std::nullopt, "MASTER_PORT='x' is not a TCP port"},
  };
  for (const PortCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    absl::StatusOr<std::optional<int>> port = SlurmEnvironment(ProcessEnvironment::FromMap(c.variables)).MainPort();
    if (c.port.has_value()) {
      ASSERT_TRUE(port.ok()) << port.status();
      EXPECT_EQ(*port, c.port);
    } else {
      EXPECT_THAT(port.status().message(), HasSubstr(c.error_part));
    }
  }
}

struct ValidateCase {
  Variables variables;
  int devices, nodes;
  std::string error_part;  // Empty when valid.
};

TEST(SlurmEnvironmentTest, ValidatesSettingsInLightningsWords) {
  Variables ntasks_only = {{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}};
  Variables interactive = Srun(1, 2, 0);
  interactive["SLURM_JOB_NAME"] = "interactive";
  const std::vector<ValidateCase> cases = {
      {Srun(2, 4, 0), 4, 2, ""},
      {Srun(1, 1, 0), 1, 1, ""},
      {ntasks_only, 4, 1,
       "You set `--ntasks=4` in your SLURM bash script, but this variable is not supported. HINT: Use "
       "`--ntasks-per-node=4` instead."},
      {Srun(2, 4, 0), 2, 2,
       "You set `devices=2` in Kiln, but the number of tasks per node configured in SLURM `--ntasks-per-node=4` "
       "does not match. HINT: Set `devices=4`."},
      {Srun(2, 4, 0), 4, 1,
       "You set `num_nodes=1` in Kiln, but the number of nodes configured in SLURM `--nodes=2` does not match. "
       "HINT: Set `num_nodes=2`."},
      {interactive, 1, 3, ""},  // The user launches the processes; SLURM's counts do not apply.
  };
  for (const ValidateCase& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    absl::Status status =
        SlurmEnvironment(ProcessEnvironment::FromMap(c.variables)).ValidateSettings(c.devices, c.nodes);
    if (c.error_part.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr(c.error_part));
    }
  }
}

TEST(SlurmEnvironmentTest, MissingRankSaysHowToLaunch) {
  SlurmEnvironment environment(ProcessEnvironment::FromMap({{"SLURM_NTASKS", "1"}}));
  EXPECT_THAT(environment.LocalRank().status().message(),
              HasSubstr("SLURM_LOCALID is not set; launch with srun, or name the job 'interactive'"));
  EXPECT_EQ(*environment.MainAddress(), "127.0.0.1");
}

}  // namespace
}  // namespace kiln
