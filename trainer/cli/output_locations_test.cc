#include "trainer/cli/output_locations.h"

#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string Fresh(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root != nullptr ? root : "/tmp") + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void ExpectRefused(const absl::Status& status, const std::string& expected) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(expected), std::string::npos)
      << "'" << status.message() << "' lacks '" << expected << "'";
}

TEST(OutputLocationsTest, FoldersThatExistOrCanBeCreatedPassAndNothingIsLeftBehind) {
  const std::string root = Fresh("locations_ok");
  EXPECT_TRUE(CheckFolderLocation("default_root_dir", root, 100).ok());
  EXPECT_TRUE(CheckFolderLocation("default_root_dir", root + "/new/deeper", 100).ok());
  EXPECT_FALSE(fs::exists(root + "/new")) << "the check creates nothing";
  EXPECT_TRUE(fs::is_empty(root)) << "the write probe was removed";
  EXPECT_TRUE(CheckFileLocation("summary_json", root + "/a/summary.json").ok());
}

TEST(OutputLocationsTest, EachWayALocationCannotBeWrittenIsNamed) {
  const std::string root = Fresh("locations_bad");
  std::ofstream(root + "/file") << "x";
  ExpectRefused(CheckFolderLocation("default_root_dir", root + "/file", 100),
                "--default_root_dir=" + root + "/file: '" + root + "/file' is a file, not a folder");
  ExpectRefused(CheckFolderLocation("default_root_dir", root + "/file/below", 100), "is a file, not a folder");
  ExpectRefused(CheckFolderLocation("default_root_dir", "/proc/kiln_runs", 100), "cannot create anything in '/proc'");
  ExpectRefused(CheckFolderLocation("default_root_dir", root + "/" + std::string(300, 'n'), 100),
                "characters, more than the file system's");
  ExpectRefused(CheckFolderLocation("default_root_dir", root + "/" + std::string(PATH_MAX - 120, 'x'), 100),
                "paths would pass the system's limit of 4096");
  ExpectRefused(CheckFileLocation("summary_json", root), "--summary_json=" + root + ": it is a folder");
  ExpectRefused(CheckFileLocation("predictions", root + "/file/p.csv"), "is a file, not a folder");
}

// An output written over an input destroys what the run reads (the checkpoint, the training data), with exit 0.
TEST(OutputLocationsTest, AnOutputThatIsAnInputIsRefused) {
  const std::string root = Fresh("locations_inputs");
  std::ofstream(root + "/run.ckpt") << "x";
  std::ofstream(root + "/train.csv") << "x";
  std::ofstream(root + "/rows.csv") << "x";
  fs::create_symlink(root + "/run.ckpt", root + "/link.ckpt");
  fs::create_hard_link(root + "/train.csv", root + "/hard.csv");
  FitConfig config;
  config.mode = "predict";
  config.ckpt_path = root + "/run.ckpt";
  config.data.data = root + "/train.csv";
  config.data.predict_data = root + "/rows.csv";
  config.trainer.default_root_dir = root + "/runs";
  config.outputs.predictions = root + "/predictions.csv";
  EXPECT_TRUE(CheckOutputLocations(config).ok()) << CheckOutputLocations(config);

  config.outputs.predictions = root + "/run.ckpt";
  ExpectRefused(CheckOutputLocations(config), "--predictions=" + root + "/run.ckpt: it is the file --ckpt_path names");
  config.outputs.predictions = root + "/link.ckpt";  // A symbolic link to the checkpoint.
  ExpectRefused(CheckOutputLocations(config), "it is the file --ckpt_path names");
  config.outputs.predictions = root + "/rows.csv";
  ExpectRefused(CheckOutputLocations(config), "it is the file --predict_data names");
  config.outputs.predictions = root + "/predictions.csv";
  config.outputs.summary_json = root + "/hard.csv";  // A hard link to the training data.
  ExpectRefused(CheckOutputLocations(config), "--summary_json=" + root + "/hard.csv: it is the file --data names");
  config.outputs.summary_json = root + "/digits.csv.gz";  // Read only with --data=digits.
  std::ofstream(root + "/digits.csv.gz") << "x";
  config.data.digits_path = root + "/digits.csv.gz";
  EXPECT_TRUE(CheckOutputLocations(config).ok()) << CheckOutputLocations(config);
  config.data.data = "digits";
  ExpectRefused(CheckOutputLocations(config), "it is the file --digits_path names");
  config.outputs.summary_json = root + "/./predictions.csv";  // Neither exists yet: the same path.
  ExpectRefused(CheckOutputLocations(config), "it is the file --predictions writes");
}

// The run folder's config.yaml (fit writes it when --log_version names the folder) is an output like the others:
// never the file --config names, by path, symbolic or hard link, and never an earlier run's without
// --save_config_overwrite (LightningCLI's overwrite).
TEST(OutputLocationsTest, TheRunsConfigYamlNeverReplacesTheConfigItWasGivenNorAnotherRuns) {
  const std::string root = Fresh("locations_config");
  const std::string folder = root + "/lightning_logs/version_3";
  fs::create_directories(folder);
  std::ofstream(folder + "/config.yaml") << "trainer:\n  max_epochs: 2\n";
  fs::create_symlink(folder + "/config.yaml", root + "/link.yaml");
  fs::create_hard_link(folder + "/config.yaml", root + "/hard.yaml");
  std::ofstream(root + "/mine.yaml") << "trainer:\n  max_epochs: 2\n";
  FitConfig config;
  config.trainer.default_root_dir = root;
  config.outputs.loggers = {"csv"};
  config.outputs.log_dir.save_dir = root;
  config.config_files = {root + "/mine.yaml"};
  EXPECT_TRUE(CheckOutputLocations(config).ok()) << "a new version folder holds no config.yaml";
  config.outputs.log_dir.version = 4;
  EXPECT_TRUE(CheckOutputLocations(config).ok()) << CheckOutputLocations(config);

  config.outputs.log_dir.version = 3;
  for (const std::string& given : {folder + "/config.yaml", root + "/link.yaml", root + "/hard.yaml"}) {
    config.config_files = {given};
    ExpectRefused(CheckOutputLocations(config),
                  "--config=" + given + ": it is the run folder's config.yaml (" + folder + "/config.yaml)");
    config.outputs.save_config_overwrite = true;  // Never the input, even when asked to replace.
    ExpectRefused(CheckOutputLocations(config), "fit would replace the file you wrote");
    config.outputs.save_config_overwrite = false;
  }
  config.config_files = {root + "/mine.yaml"};
  ExpectRefused(CheckOutputLocations(config), "--log_version=3: " + folder + "/config.yaml exists already");
  config.outputs.save_config_overwrite = true;
  EXPECT_TRUE(CheckOutputLocations(config).ok()) << CheckOutputLocations(config);
  // Nothing is written by the check, and fast_dev_run writes no config.yaml at all.
  config.outputs.save_config_overwrite = false;
  config.trainer.fast_dev_run = 1;
  EXPECT_TRUE(CheckOutputLocations(config).ok());
}

TEST(OutputLocationsTest, AFolderWithoutWritePermission) {
  // Root writes through permission bits, so the check runs in a child process as the user nobody when the test runs
  // as root (as in CI), and as the test's own user otherwise. The folder is under /tmp, which nobody may enter.
  std::string folder = "/tmp/kiln-read-only-XXXXXX";
  ASSERT_NE(::mkdtemp(folder.data()), nullptr);
  ASSERT_EQ(::chmod(folder.c_str(), 0555), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      std::perror("setgid/setuid(65534)");
      ::_exit(3);
    }
    const absl::Status status = CheckFolderLocation("default_root_dir", folder + "/runs", 100);
    ::_exit(status.code() == absl::StatusCode::kInvalidArgument &&
                    status.message().find("cannot create anything in '" + folder + "' (Permission denied)") !=
                        std::string::npos
                ? 0
                : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ::chmod(folder.c_str(), 0755);
  fs::remove_all(folder);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_NE(WEXITSTATUS(wait_status), 3) << "could not become the user nobody";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "a folder without write permission passed the check";
}

}  // namespace
}  // namespace kiln
