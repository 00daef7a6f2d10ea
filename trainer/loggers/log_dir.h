// Lightning's run folders: <save_dir>/<name>/version_<N>, where N counts up from 0 over the runs in the same
// <save_dir>/<name>. Each logger claims a folder of its own (a RunFolder), as Lightning's loggers do; loggers given
// one RunFolder, or one version, share it. Checkpoints go into the first logger's `checkpoints` subfolder
// (Trainer::checkpoint_dir).
//
// Two runs started at the same moment in the same folder get two versions: a version is taken by creating its
// folder, which the file system does for one process only (mkdir fails with EEXIST for the other), so the loser
// moves on to the next number. Lightning looks for the next free number and creates the folder later, which lets
// both runs take the same one.
//
// A run holds its folder while it lives (an flock on the folder, which the system drops when the process ends, however
// it ends): a run that names a version another live process holds is refused, naming that process, so that two runs
// never write into one folder. A folder of a run that has ended may be named again (Lightning's way to continue one).
#ifndef KILN_TRAINER_LOGGERS_LOG_DIR_H_
#define KILN_TRAINER_LOGGERS_LOG_DIR_H_

#include <cstdint>
#include <optional>
#include <string>

#include <sys/types.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

struct LogDirOptions {
  std::string save_dir = ".";
  std::string name = "lightning_logs";  // Empty: versions directly under save_dir.
  std::optional<int64_t> version;       // Unset: the next free version, claimed (see RunFolder).
};

// One more than the highest N of the `version_<N>` folders in <save_dir>/<name>; 0 when there are none (or the
// folder does not exist). Reads only; creates nothing.
int64_t NextVersion(const std::string& save_dir, const std::string& name);

// <save_dir>/<name>/version_<version or NextVersion>. Creates nothing.
std::string VersionDir(const LogDirOptions& options);

// Creates <save_dir>/<name>/version_<N> for the lowest N from NextVersion up whose folder this call creates itself,
// and returns N: a version another process creates at the same moment is never returned. Internal error naming the
// folder when it cannot be created (a file in the way, no permission, a name too long).
absl::StatusOr<int64_t> ClaimVersion(const std::string& save_dir, const std::string& name);

// The hold of one run folder (its device and inode).
struct FolderHold {
  dev_t device = 0;
  ino_t inode = 0;
};

// Holds `folder` (which exists) for this process until ReleaseRunFolder: FailedPrecondition naming the process and its
// command line when another process holds it. The same process may hold a folder more than once (counted).
absl::StatusOr<FolderHold> HoldRunFolder(const std::string& folder);
void ReleaseRunFolder(const FolderHold& hold);

// The folder of one run, shared by its loggers. With a version given, it is that version's folder (created, or
// reused: the user asked for it); without one, the first Claim takes a new version with ClaimVersion.
// Thread-safe. Only the process with global rank zero claims (the Trainer calls Logger::setup there alone). The
// claimed folder is held (HoldRunFolder) until the RunFolder is destroyed; Claim fails when another process holds it.
class RunFolder {
 public:
  explicit RunFolder(LogDirOptions options) : options_(std::move(options)) {}
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  // Creates the folder on the first call and returns it; later calls return the same folder.
  absl::StatusOr<std::string> Claim();
  // The claimed folder; before the first Claim, the folder it would try first (VersionDir).
  std::string path() const;
  const LogDirOptions& options() const { return options_; }

 private:
  const LogDirOptions options_;
  mutable absl::Mutex mutex_;
  std::optional<std::string> claimed_ ABSL_GUARDED_BY(mutex_);
  std::optional<FolderHold> hold_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_LOG_DIR_H_
