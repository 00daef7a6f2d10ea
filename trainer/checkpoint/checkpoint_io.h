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
// CheckpointWriter below serialises writes.
#ifndef KILN_TRAINER_CHECKPOINT_CHECKPOINT_IO_H_
#define KILN_TRAINER_CHECKPOINT_CHECKPOINT_IO_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torch/serialize/input-archive.h"
#include "torch/serialize/output-archive.h"

namespace kiln {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr char kCheckpointExtension[] = ".ckpt";

// Serialises what `fill` writes (plus the format records) into the bytes of a checkpoint file. `fill` may throw
// c10::Error; that is returned as an error naming `path` (used in messages only).
absl::StatusOr<std::string> SerializeCheckpoint(const std::string& path,
                                                const std::function<void(torch::serialize::OutputArchive&)>& fill);

// Writes `bytes` atomically to `path` (see above), creating missing folders.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

// SerializeCheckpoint, then WriteFileAtomically.
absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill);

// Writes checkpoint files on a background thread, in the order they were submitted, so that training does not wait
// for the disk (each write still goes through WriteFileAtomically, so every file on disk is complete). Removals are
// queued behind the writes, so a newer checkpoint is on disk before an older one is deleted. The first error is
// kept and returned by the next Submit/Flush; after an error, later removals are skipped (nothing older is deleted
// when something newer failed).
//
// Memory is bounded: the checkpoints waiting for the disk (and the one being written) hold at most
// `max_pending_bytes` between them, so when the disk is slower than training, Submit waits for earlier writes to
// finish instead of piling checkpoints up in memory. A single checkpoint larger than the bound is still accepted,
// once nothing else is pending.
//
// Thread-safety: Submit/SubmitRemove/Flush may be called from any thread.
class CheckpointWriter {
 public:
  // 1 GiB: room for a checkpoint being written and the next one for most models, without waiting.
  static constexpr size_t kDefaultMaxPendingBytes = size_t{1} << 30;

  explicit CheckpointWriter(size_t max_pending_bytes = kDefaultMaxPendingBytes);
  ~CheckpointWriter();  // Flushes.
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues a write, first waiting while it would take the pending bytes past the bound (see above); returns the
  // error of an earlier write, if one failed (then this write is not queued).
  absl::Status Submit(std::string path, std::string bytes);
  absl::Status SubmitRemove(std::string path);
  // Waits until everything queued is on disk; returns the first error.
  absl::Status Flush();

 private:
  struct Task;
  void Run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Task>> queue_;
  const size_t max_pending_bytes_;
  size_t pending_bytes_ = 0;  // Of the queued writes and the one in progress.
  bool busy_ = false;
  bool stopping_ = false;
  absl::Status error_;
  std::thread thread_;
};

// Opens `path` and checks that it is a complete Kiln checkpoint of a version this build reads. Errors name the
// file and what is wrong: missing (NotFound), unreadable, truncated or damaged, not a Kiln checkpoint, or written
// by a newer Kiln (all InvalidArgument except NotFound). Every tensor is read onto the CPU, whichever device wrote
// it.
absl::StatusOr<std::unique_ptr<torch::serialize::InputArchive>> ReadCheckpoint(const std::string& path);

// Removes the temporary files (`<name>.tmp-<pid>`) that writes interrupted by a crash or a kill left in `dir` (not
// recursively): those whose process no longer runs on this machine. Each file removed is logged. A missing folder
// is not an error; returns the number of files removed. Without this, every crash during a write would leave a
// checkpoint-sized file behind for good.
int RemoveStaleTemporaryFiles(const std::string& dir);

// The newest complete checkpoint under `root` (searched recursively, by modification time, newest first; damaged
// or foreign files are skipped with a warning). NotFound when there is none, naming `root`.
absl::StatusOr<std::string> FindLastCheckpoint(const std::string& root);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_CHECKPOINT_IO_H_
