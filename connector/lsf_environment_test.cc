#include "connector/lsf_environment.h"

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

using Variables = std::map<std::string, std::string>;

// Writes a rank file under the test's temporary directory and returns its path.
std::string RankFile(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

// jsrun's variables for the process with `rank` in a job of `size` processes, `local_rank` on its node.
Variables Jsrun(const std::string& rankfile, int size, int rank, int local_rank) {
  return {{"LSB_JOBID", "12345"},
          {"LSB_DJOB_RANKFILE", rankfile},
          {"JSM_NAMESPACE_SIZE", std::to_string(size)},
          {"JSM_NAMESPACE_RANK", std::to_string(rank)},
          {"JSM_NAMESPACE_LOCAL_RANK", std::to_string(local_rank)}};
}

TEST(LsfEnvironmentTest, DetectsJsrunByItsFourVariables) {
  const Variables all = Jsrun("/nonexistent", 2, 0, 0);
  EXPECT_TRUE(LsfEnvironment::Detect(ProcessEnvironment::FromMap(all)));
  for (const char* missing : {"LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE"}) {
    Variables variables = all;
    variables.erase(missing);
    EXPECT_FALSE(LsfEnvironment::Detect(ProcessEnvironment::FromMap(variables))) << "without " << missing;
  }
}

struct NodeCase {
  std::string hostname;
  int node_rank;
};

TEST(LsfEnvironmentTest, NodeRankIsThisHostsPlaceInTheRankFile) {
  // The launch node first, then one line per process slot.
  const std::string rankfile = RankFile("ranks.txt", "launch0\nbatch3\nbatch3\nbatch1\nbatch1\n\nbatch7\nbatch7\n");
  const std::vector<NodeCase> cases = {{"batch3", 0}, {"batch1", 1}, {"batch7", 2}};
  for (const NodeCase& c : cases) {
    SCOPED_TRACE(c.hostname);
    LsfEnvironment environment(ProcessEnvironment::FromMap(Jsrun(rankfile, 6, 3, 1), c.hostname));
    EXPECT_EQ(environment.name(), "lsf");
    EXPECT_TRUE(environment.CreatesProcessesExternally());
    EXPECT_EQ(*environment.NodeRank(), c.node_rank);
    EXPECT_EQ(*environment.MainAddress(), "batch3");
    EXPECT_EQ(*environment.MainPort(), 10345);  // 10000 + 12345 % 1000.
    EXPECT_EQ(*environment.WorldSize(), 6);
    EXPECT_EQ(*environment.GlobalRank(), 3);
    EXPECT_EQ(*environment.LocalRank(), 1);
    EXPECT_TRUE(environment.ValidateSettings(2, 3).ok());
  }
}

TEST(LsfEnvironmentTest, MasterPortOverridesTheJobIdPort) {
  Variables variables = Jsrun("/nonexistent", 2, 0, 0);
  variables["MASTER_PORT"] = "29500";
  EXPECT_EQ(*LsfEnvironment(ProcessEnvironment::FromMap(variables)).MainPort(), 29500);
}

struct ErrorCase {
  Variables variables;
  std::string hostname;
  std::string error_part;
};

TEST(LsfEnvironmentTest, ErrorsSayWhatIsMissing) {
  const std::string rankfile = RankFile("ranks_ok.txt", "launch0\nbatch3\n");
  const std::string launch_only = RankFile("ranks_launch_only.txt", "launch0\n");
  Variables no_rank = Jsrun(rankfile, 2, 0, 0);
  no_rank.erase("JSM_NAMESPACE_RANK");
  Variables empty_rankfile = Jsrun("", 2, 0, 0);
  Variables no_rankfile = Jsrun(rankfile, 2, 0, 0);
  no_rankfile.erase("LSB_DJOB_RANKFILE");
  const std::vector<ErrorCase> cases = {
      {Jsrun(rankfile, 2, 0, 0), "elsewhere",
       "this machine's host name 'elsewhere' is not among the compute hosts of LSB_DJOB_RANKFILE"},
      {Jsrun(launch_only, 2, 0, 0), "batch3", "lists 1 host(s); it needs the launch node followed by"},
      {Jsrun(rankfile + ".missing", 2, 0, 0), "batch3", "cannot be read"},
      {empty_rankfile, "batch3", "The environment variable `LSB_DJOB_RANKFILE` is empty"},
      {no_rankfile, "batch3", "Did not find the environment variable `LSB_DJOB_RANKFILE`"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.error_part);
    absl::StatusOr<int> node_rank = LsfEnvironment(ProcessEnvironment::FromMap(c.variables, c.hostname)).NodeRank();
    ASSERT_FALSE(node_rank.ok());
    EXPECT_THAT(node_rank.status().message(), HasSubstr(c.error_part));
  }
  EXPECT_THAT(LsfEnvironment(ProcessEnvironment::FromMap(no_rank)).GlobalRank().status().message(),
              HasSubstr("Cannot determine global rank. Environment variable `JSM_NAMESPACE_RANK` not found. Make "
                        "sure you run your executable with `jsrun`."));
  EXPECT_THAT(LsfEnvironment(ProcessEnvironment::FromMap(Jsrun(rankfile, 4, 0, 0))).ValidateSettings(1, 1).message(),
              HasSubstr("does not match the world size (4, from JSM_NAMESPACE_SIZE)"));
  Variables no_job = Jsrun(rankfile, 2, 0, 0);
  no_job.erase("LSB_JOBID");
  EXPECT_THAT(LsfEnvironment(ProcessEnvironment::FromMap(no_job)).MainPort().status().message(),
              HasSubstr("Could not find job id in environment variable LSB_JOBID"));
}

}  // namespace
}  // namespace kiln
