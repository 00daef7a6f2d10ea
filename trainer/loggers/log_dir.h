// Lightning's run folders: <save_dir>/<name>/version_<N>, where N counts up from 0 over the runs in the same
// <save_dir>/<name>. Loggers of one run share one folder; checkpoints go into its `checkpoints` subfolder
// (Trainer::checkpoint_dir).
#ifndef KILN_TRAINER_LOGGERS_LOG_DIR_H_
#define KILN_TRAINER_LOGGERS_LOG_DIR_H_

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

struct LogDirOptions {
  std::string save_dir = ".";
  std::string name = "lightning_logs";  // Empty: versions directly under save_dir.
  std::optional<int64_t> version;       // Unset: the next free version.
};

// One more than the highest N of the `version_<N>` folders in <save_dir>/<name>; 0 when there are none (or the
// folder does not exist). Reads only; creates nothing.
int64_t NextVersion(const std::string& save_dir, const std::string& name);

// <save_dir>/<name>/version_<version or NextVersion>. Creates nothing.
std::string VersionDir(const LogDirOptions& options);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_LOG_DIR_H_
