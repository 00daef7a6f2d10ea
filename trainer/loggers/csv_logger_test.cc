#include "trainer/loggers/csv_logger.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

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
