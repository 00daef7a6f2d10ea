// Checkpoints and resuming.
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/cli/flags.h"

ABSL_FLAG(
    std::string, default_root_dir, ".",
    "Where runs go: <dir>/<log_name>/version_<N>/ holds the logs, report.html and checkpoints/ (<dir>/checkpoints "
    "with --logger=none). Relative paths are taken from the directory `bazel run` was started in.");
ABSL_FLAG(std::string, ckpt_path, "",
          "A checkpoint to resume from (fit) or to load (validate, predict): a .ckpt path, or \"last\" for the "
          "newest complete checkpoint anywhere under --default_root_dir.");
ABSL_FLAG(bool, enable_checkpointing, true, "Save checkpoints (by default, at the end of every epoch).");
ABSL_FLAG(int64_t, every_n_train_steps, 0, "Also save a checkpoint every N optimizer steps (0: only at epoch ends).");
ABSL_FLAG(bool, save_last, true, "Keep checkpoints/last.ckpt up to date with every save.");
