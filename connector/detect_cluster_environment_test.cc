#include "connector/detect_cluster_environment.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

using Variables = std::map<std::string, std::string>;

struct Case {
  Variables variables;
  std::string expected;
};

TEST(DetectClusterEnvironmentTest, AsksEachEnvironmentInKilnsOrder) {
  const Variables torchrun = {{"TORCHELASTIC_RUN_ID", "r"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};
  const Variables srun = {{"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "2"}};
  const Variables jsrun = {
      {"LSB_JOBID", "1"}, {"LSB_DJOB_RANKFILE", "/r"}, {"JSM_NAMESPACE_LOCAL_RANK", "0"}, {"JSM_NAMESPACE_SIZE", "2"}};
  const Variables mpirun = {{"OMPI_COMM_WORLD_SIZE", "2"}};
  const auto merge = [](std::vector<Variables> parts) {
    Variables merged;
    for (const Variables& part : parts) merged.insert(part.begin(), part.end());
    return merged;
  };
  Variables interactive_slurm = merge({srun, mpirun});
  interactive_slurm["SLURM_JOB_NAME"] = "interactive";
  const std::vector<Case> cases = {
      {{}, "lightning"},
      {{{"LOCAL_RANK", "1"}, {"NODE_RANK", "0"}}, "lightning"},
      {torchrun, "torchelastic"},
      {srun, "slurm"},
      {jsrun, "lsf"},
      {mpirun, "mpi"},
      {merge({torchrun, srun}), "torchelastic"},  // torchrun inside a SLURM allocation.
      {merge({srun, jsrun, mpirun}), "slurm"},
      {merge({jsrun, mpirun}), "lsf"},
      {interactive_slurm, "mpi"},  // An interactive SLURM job launching with mpirun.
      {{{"SLURM_NTASKS", "2"}, {"SLURM_JOB_NAME", "bash"}}, "lightning"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.variables));
    std::shared_ptr<ClusterEnvironment> detected = DetectClusterEnvironment(ProcessEnvironment::FromMap(c.variables));
    ASSERT_NE(detected, nullptr);
    EXPECT_EQ(detected->name(), c.expected);
  }
}

}  // namespace
}  // namespace kiln
