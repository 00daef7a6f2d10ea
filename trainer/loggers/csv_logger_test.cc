#include "trainer/loggers/csv_logger.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/loggers/hparams_yaml.h"
#include "trainer/loggers/log_dir.h"
#include "trainer/loggers/tensorboard_logger.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string Read(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(LogDirTest, VersionsCountUpFromTheHighestFolder) {
  const std::string root = FreshDir("versions");
  EXPECT_EQ(NextVersion(root, "lightning_logs"), 0);
  EXPECT_EQ(VersionDir({.save_dir = root}), root + "/lightning_logs/version_0");
  fs::create_directories(root + "/lightning_logs/version_0");
  fs::create_directories(root + "/lightning_logs/version_7");
  fs::create_directories(root + "/lightning_logs/version_x");
  std::ofstream(root + "/lightning_logs/version_9");  // A file, not a folder.
  EXPECT_EQ(NextVersion(root, "lightning_logs"), 8);
  EXPECT_EQ(VersionDir({.save_dir = root, .name = "", .version = 3}), root + "/version_3");
}

TEST(RunFolderTest, RunsStartedTogetherClaimDifferentVersions) {
  const std::string root = FreshDir("claim");
  fs::create_directories(root + "/lightning_logs/version_2");
  std::ofstream(root + "/lightning_logs/version_3");  // A file named like a version: in the way, and skipped.
  constexpr int kRuns = 16;
  std::vector<std::string> claimed(kRuns);
  std::atomic<bool> go{false};
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.emplace_back([&, i] {
      RunFolder folder({.save_dir = root});
      while (!go.load()) {
      }
      absl::StatusOr<std::string> path = folder.Claim();
      claimed[i] = path.ok() ? *path : path.status().ToString();
    });
  }
  go = true;
  for (std::thread& run : runs) run.join();
  std::set<std::string> distinct(claimed.begin(), claimed.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kRuns)) << "two runs took the same folder";
  for (int version = 4; version < 4 + kRuns; ++version) {
    const std::string folder = root + "/lightning_logs/version_" + std::to_string(version);
    EXPECT_EQ(distinct.count(folder), 1u) << folder;
    EXPECT_TRUE(fs::is_directory(folder)) << folder;
  }
}

TEST(RunFolderTest, ClaimsOnceAndReusesAGivenVersion) {
  const std::string root = FreshDir("claim_once") + "/runs";
  RunFolder folder({.save_dir = root});
  EXPECT_EQ(folder.path(), root + "/lightning_logs/version_0") << "before the claim: the folder it would try";
  EXPECT_FALSE(fs::exists(root)) << "nothing is created before the claim";
  fs::create_directories(root + "/lightning_logs/version_0");  // Another run took it in between.
  ASSERT_EQ(folder.Claim().value_or(""), root + "/lightning_logs/version_1");
  EXPECT_EQ(folder.Claim().value_or(""), root + "/lightning_logs/version_1") << "a second claim is the same";
  EXPECT_EQ(folder.path(), root + "/lightning_logs/version_1");

  // A version asked for is that folder, whether it exists or not: the user chose it.
  RunFolder given({.save_dir = root, .version = 0});
  EXPECT_EQ(given.Claim().value_or(""), root + "/lightning_logs/version_0");
}

// A run holds its folder while it lives: this process may claim it again, another process may not until it is
// released.
TEST(RunFolderTest, AnotherProcessCannotClaimAFolderThisOneHolds) {
  const std::string root = FreshDir("held");
  auto first = std::make_unique<RunFolder>(LogDirOptions{.save_dir = root, .version = 2});
  ASSERT_TRUE(first->Claim().ok());
  RunFolder again({.save_dir = root, .version = 2});
  EXPECT_TRUE(again.Claim().ok()) << "this process already holds it";
  const auto other_process_claims = [&] {
    const pid_t child = ::fork();
    if (child == 0) {
      const absl::StatusOr<std::string> claimed = RunFolder({.save_dir = root, .version = 2}).Claim();
      if (claimed.ok()) ::_exit(0);
      const bool named = claimed.status().code() == absl::StatusCode::kFailedPrecondition &&
                         claimed.status().message().find(absl::StrCat("in use by another run (process ", ::getppid(),
                                                                       ": ")) != std::string::npos;
      ::_exit(named ? 1 : 2);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(other_process_claims(), 1) << "0: it claimed a held folder; 2: the error does not name this process";
  first.reset();
  EXPECT_EQ(other_process_claims(), 1) << "still held by `again`";
}

TEST(RunFolderTest, ReleasedFolderCanBeClaimedByAnotherProcess) {
  const std::string root = FreshDir("released");
  { RunFolder({.save_dir = root, .version = 0}).Claim().IgnoreError(); }
  const pid_t child = ::fork();
  if (child == 0) ::_exit(RunFolder({.save_dir = root, .version = 0}).Claim().ok() ? 0 : 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(RunFolderTest, LoggersOfOneRunShareTheClaimedFolder) {
  const std::string root = FreshDir("claim_shared");
  auto folder = std::make_shared<RunFolder>(LogDirOptions{.save_dir = root});
  CsvLogger csv(folder);
  TensorBoardLogger tensorboard(folder);
  fs::create_directories(root + "/lightning_logs/version_0");
  ASSERT_TRUE(csv.setup().ok());
  ASSERT_TRUE(tensorboard.setup().ok());
  EXPECT_EQ(csv.log_dir(), root + "/lightning_logs/version_1");
  EXPECT_EQ(tensorboard.log_dir(), csv.log_dir());
}

TEST(RunFolderTest, AFileInTheWayIsAnErrorNamingIt) {
  const std::string root = FreshDir("claim_file");
  std::ofstream(root + "/lightning_logs");
  const absl::StatusOr<std::string> claimed = RunFolder({.save_dir = root}).Claim();
  ASSERT_FALSE(claimed.ok());
  EXPECT_NE(claimed.status().message().find(root + "/lightning_logs"), std::string::npos) << claimed.status();
}

TEST(CsvLoggerTest, WritesLightningsLayoutAndWidensTheHeader) {
  const std::string root = FreshDir("csv");
  CsvLogger logger({.save_dir = root});
  EXPECT_EQ(logger.log_dir(), root + "/lightning_logs/version_0");
  ASSERT_TRUE(logger.log_hyperparams({{"learning_rate", "0.001"}, {"model", "mlp"}}).ok());
  ASSERT_TRUE(logger.log_metrics({{"train_loss_step", 0.5}, {"epoch", 0}}, 49).ok());
  EXPECT_FALSE(fs::exists(logger.log_dir())) << "nothing is written before save()";
  ASSERT_TRUE(logger.save().ok());
  EXPECT_EQ(Read(logger.metrics_file()), "epoch,step,train_loss_step\n0,49,0.5\n");
  EXPECT_EQ(Read(logger.log_dir() + "/hparams.yaml"), "learning_rate: 0.001\nmodel: mlp\n");

  ASSERT_TRUE(logger.log_metrics({{"train_loss_step", 0.25}, {"epoch", 1}}, 99).ok());
  ASSERT_TRUE(logger.save().ok());
  EXPECT_EQ(Read(logger.metrics_file()), "epoch,step,train_loss_step\n0,49,0.5\n1,99,0.25\n");
  // A new name rewrites the file with the wider, sorted header; old rows get empty cells.
  ASSERT_TRUE(logger.log_metrics({{"val_acc", 0.1}, {"epoch", 1}}, 100).ok());
  ASSERT_TRUE(logger.save().ok());
  EXPECT_EQ(Read(logger.metrics_file()), "epoch,step,train_loss_step,val_acc\n0,49,0.5,\n1,99,0.25,\n1,100,,0.1\n");

  // The next logger in the same root takes the next version.
  EXPECT_EQ(CsvLogger({.save_dir = root}).log_dir(), root + "/lightning_logs/version_1");
}

TEST(CsvLoggerTest, RowsOfDifferentNamesKeepEachValueInItsOwnColumn) {
  CsvLogger logger({.save_dir = FreshDir("csv_columns")});
  // Two rows saved together, the second with a name that sorts first and without one of the first's.
  ASSERT_TRUE(logger.log_metrics({{"loss", 2}, {"b", 3}}, 0).ok());
  ASSERT_TRUE(logger.log_metrics({{"a", 1}, {"loss", 4}}, 1).ok());
  ASSERT_TRUE(logger.save().ok());
  EXPECT_EQ(Read(logger.metrics_file()), "a,b,loss,step\n,3,2,0\n1,,4,1\n");
  // A metric named "step" is the row's step, as Lightning's CSVLogger writes it; a row of known names is appended.
  ASSERT_TRUE(logger.log_metrics({{"step", 7}, {"loss", 0.5}}, 2).ok());
  ASSERT_TRUE(logger.save().ok());
  EXPECT_EQ(Read(logger.metrics_file()), "a,b,loss,step\n,3,2,0\n1,,4,1\n,,0.5,2\n");
}

TEST(CsvLoggerTest, ShortestDoubles) {
  EXPECT_EQ(ShortestDouble(0.1), "0.1");
  EXPECT_EQ(ShortestDouble(3.0), "3");
  EXPECT_EQ(ShortestDouble(static_cast<double>(0.1f)), "0.10000000149011612");
  EXPECT_EQ(ShortestDouble(1e-7), "1e-07");
}

TEST(HparamsYamlTest, QuotesOnlyWhatYamlWouldMisread) {
  EXPECT_EQ(HparamsYaml({}), "{}\n");
  EXPECT_EQ(HparamsYaml({{"a", "64,64"},
                         {"b", "yes"},
                         {"c", "true"},
                         {"d", "-3"},
                         {"e", "data/x.csv"},
                         {"f", "say \"hi\""},
                         {"g", ""}}),
            "a: \"64,64\"\nb: \"yes\"\nc: true\nd: -3\ne: data/x.csv\nf: \"say \\\"hi\\\"\"\ng: \"\"\n");
}

TEST(TensorBoardLoggerTest, OneEventFileInTheVersionFolder) {
  const std::string root = FreshDir("tensorboard");
  TensorBoardLogger logger({.save_dir = root, .version = 4});
  EXPECT_EQ(logger.log_dir(), root + "/lightning_logs/version_4");
  EXPECT_EQ(logger.event_file(), "");
  ASSERT_TRUE(logger.log_metrics({{"loss", 1.0}}, 1).ok());
  ASSERT_TRUE(logger.save().ok());
  const std::string name = fs::path(logger.event_file()).filename();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(fs::path(logger.event_file()).parent_path(), logger.log_dir());
  EXPECT_GT(fs::file_size(logger.event_file()), 40u);  // The file-version event and one scalar event.
  ASSERT_TRUE(logger.finalize().ok());
}

}  // namespace
}  // namespace kiln
