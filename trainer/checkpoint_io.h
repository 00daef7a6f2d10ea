// Checkpoint files: atomic writes, validated reads, and finding the newest complete one.
//
// A Kiln checkpoint is a LibTorch serialize archive (the zip format torch::save writes) whose record
// "kiln_format" is "kiln.checkpoint" and "kiln_format_version" is kCheckpointFormatVersion. What else it holds is
// written by the trainer (see Trainer::save_checkpoint in trainer.h for the contents).
//
// Writing is atomic: the archive is serialised in memory, written beside the target as `<name>.tmp-<pid>`, flushed
// to disk (fsync), renamed over the target, and the folder is flushed. A crash at any moment leaves either the old
// file or the new one, never a half-written file under the checkpoint's name. A failed write (a full disk, say)
// removes its temporary file and returns an error naming the path; the previous checkpoint is untouched.
//
// Thread-safety: functions are independent; two writers to one path race only on which rename lands last.
#ifndef KILN_TRAINER_CHECKPOINT_IO_H_
#define KILN_TRAINER_CHECKPOINT_IO_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torch/serialize/input-archive.h"
#include "torch/serialize/output-archive.h"

namespace kiln {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr char kCheckpointExtension[] = ".ckpt";

// Serialises what `fill` writes (plus the format records) and writes it atomically to `path`, creating missing
// folders. `fill` may throw c10::Error; that is returned as an error and nothing is written.
absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill);

// Opens `path` and checks that it is a complete Kiln checkpoint of a version this build reads. Errors name the
// file and what is wrong: missing (NotFound), unreadable, truncated or damaged, not a Kiln checkpoint, or written
// by a newer Kiln (all InvalidArgument except NotFound). Every tensor is read onto the CPU, whichever device wrote
// it.
absl::StatusOr<std::unique_ptr<torch::serialize::InputArchive>> ReadCheckpoint(const std::string& path);

// The newest complete checkpoint under `root` (searched recursively, by modification time, newest first; damaged
// or foreign files are skipped with a warning). NotFound when there is none, naming `root`.
absl::StatusOr<std::string> FindLastCheckpoint(const std::string& root);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_IO_H_
