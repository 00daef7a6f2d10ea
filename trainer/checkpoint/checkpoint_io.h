// Checkpoint files: atomic writes, validated reads, and finding the newest complete one.
//
// A Kiln checkpoint (format 2) is what Python's torch.save writes for a dictionary (torch_file.h), with Lightning's
// keys (state_dict, epoch, global_step, optimizer_states, lr_schedulers, callbacks, hyper_parameters, loops; see
// checkpoint_connector.h) and Kiln's own section under "kiln", whose "kiln_format" is "kiln.checkpoint" and
// "kiln_format_version" kCheckpointFormatVersion. Kiln also reads
//   - format 1, the LibTorch serialize archive (the zip format torch::save writes for an OutputArchive) that Kiln
//     wrote until format 2; its records "kiln_format" and "kiln_format_version" identify it;
//   - a torch.save dictionary in Lightning's layout that Kiln did not write: Lightning's own checkpoints, or a
//     dictionary a PyTorch program saved (format 0 below).
//
// Writing is atomic: the file is serialised in memory, written beside the target as `<name>.tmp-<pid>`, flushed
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
#include <utility>
#include <vector>

#include "ATen/core/Dict.h"
#include "ATen/core/ivalue.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torch/serialize/input-archive.h"
#include "trainer/checkpoint/format/checkpoint_file.h"  // IWYU pragma: export
#include "trainer/io/durable_file.h"

namespace kiln {

// A checkpoint as read.
struct Checkpoint {
  // 2: Kiln's torch.save dictionary; 1: the LibTorch archive earlier Kiln versions wrote (in `archive`); 0: a
  // torch.save dictionary in Lightning's layout that Kiln did not write (Lightning's, or a PyTorch program's).
  int64_t format_version = 0;
  c10::impl::GenericDict contents{c10::StringType::get(), c10::AnyType::get()};  // Formats 0 and 2.
  std::unique_ptr<torch::serialize::InputArchive> archive;                       // Format 1.
};

// Deprecated (2026-12, kept for one release): kiln::WriteFileDurably (trainer/io/durable_file.h), which every
// output of Kiln's now goes through. This wrote a checkpoint durably, creating folders, replacing a link at `path`.
[[deprecated("use kiln::WriteFileDurably (trainer/io/durable_file.h)")]] absl::Status WriteFileAtomically(
    const std::string& path, const std::string& bytes);

// A checkpoint taken at a step but not yet a dictionary: what it was taken from is copied into `build` (the state's
// tensors, as copies of their own, and plain values), and `build` makes the dictionary SerializeCheckpoint takes.
// Taking one costs the copies; the dictionary (Lightning's loops alone are 44 small dictionaries) is made where
// `build` runs (CheckpointWriter::SubmitSnapshot: on the writer's thread), or, where `pickle` is set, never: the
// writer pickles the checkpoint straight from what was taken.
struct CheckpointSnapshot {
  // The bytes of the tensors `build` holds: what CheckpointWriter's memory bound counts.
  size_t tensor_bytes = 0;
  // Makes the checkpoint's dictionary from what it holds; it must read nothing that training changes (it runs on
  // another thread, after the step). Called at most once, on any thread. (Kiln's pickler memoises nothing by use
  // count, so what `build` keeps while the file is written changes no byte of it.) An error it returns is kept as it
  // is (it should name the file); one it throws (c10::Error, std::exception) is kept as InternalError naming the
  // file.
  std::function<absl::StatusOr<c10::impl::GenericDict>()> build;
  // Optional (2026-12): writes into `out` exactly the pickle that SerializeCheckpoint writes for build()'s
  // dictionary, the format records included (WriteFormatRecords, last in the "kiln" section), without making it.
  // CheckpointWriter calls this instead of `build` when it is set; the rules for `build` hold for it too.
  std::function<absl::Status(PickleWriter& out)> pickle;
};

// Writes checkpoint files on a background thread, in the order they were submitted, so that training does not wait
// for the disk (each write still goes through WriteFileDurably, so every file on disk is complete). Removals are
// queued behind the writes, so a newer checkpoint is on disk before an older one is deleted. The first error is
// kept and returned by the next Submit/Flush; after an error, later removals are skipped (nothing older is deleted
// when something newer failed).
//
// Memory is bounded: the checkpoints waiting for the disk (and the one being written) hold at most
// `max_pending_bytes` between them, so when the disk is slower than training, Submit waits for earlier writes to
// finish instead of piling checkpoints up in memory. A single checkpoint larger than the bound is still accepted,
// once nothing else is pending.
//
// SubmitSnapshot hands over the checkpoint before it is bytes, so that the work after the step runs on the writer
// thread too: given a CheckpointSnapshot, the writer builds the dictionary, pickles it and makes the zip container
// and its CRCs, and all the training thread pays for a checkpoint is the copies of its tensors and values
// (checkpoint_connector.h's TakeCheckpointSnapshot); given a dictionary, it pickles that. The file holds the same
// bytes as Submit(path, SerializeCheckpoint(path, contents)); a build or serialisation error is kept and returned like
// a write error.
//
// SubmitCollective queues a write that the writers of every rank make together (a sharded checkpoint, whose ranks
// exchange what each wrote before rank 0 publishes it): it runs in order with the rest, and also after an earlier
// error (given that error), so that this rank still takes part and no other rank's writer waits for it in vain.
//
// Thread-safety: Submit/SubmitSnapshot/SubmitCollective/SubmitRemove/Flush may be called from any thread.
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
  // As Submit, for SerializeCheckpoint(path, contents), serialised on the writer thread. Ownership: the writer reads
  // `contents` and every tensor in it after this returns, so nothing else may change them (they must be the
  // writer's own copies, not tensors the training loop updates in place). The bound above counts their tensors'
  // bytes.
  absl::Status SubmitSnapshot(std::string path, c10::impl::GenericDict contents);
  // As Submit, for SerializeCheckpoint(path, snapshot.build()), built and serialised on the writer thread; the bound
  // above counts snapshot.tensor_bytes. A null `build` is refused (InvalidArgument). Ownership as above: what `build`
  // reads must be the writer's own.
  absl::Status SubmitSnapshot(std::string path, CheckpointSnapshot snapshot);
  // Queues `write`, called on the writer thread with the dictionary `snapshot` builds, or with the error `snapshot`
  // holds (this rank's snapshot failed), its build returns, or an earlier write's (then that error is also returned
  // here): it is queued whatever failed before, so that it takes part. What `write` returns is kept as a write's
  // error; what it or the build throws, as InternalError naming `path`. The bound counts snapshot->tensor_bytes.
  absl::Status SubmitCollective(std::string path, absl::StatusOr<CheckpointSnapshot> snapshot,
                                std::function<absl::Status(absl::StatusOr<c10::impl::GenericDict>)> write);
  absl::Status SubmitRemove(std::string path);
  // Waits until everything queued is on disk and the files it replaced are removed; returns the first error.
  absl::Status Flush();

 private:
  struct Task;
  absl::Status Enqueue(std::unique_ptr<Task> task);
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

// Opens `path` and checks that it is a complete checkpoint of a format this build reads (see above). Errors name
// the file and what is wrong: missing (NotFound), unreadable, truncated or damaged, not a checkpoint (a torch.save
// file with no "state_dict", another kind of file), or written by a newer Kiln (all InvalidArgument except NotFound).
// Every tensor is read onto the CPU, whichever device wrote it.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// Every parameter and buffer a checkpoint holds, by name, in the order stored. Throws c10::Error when that part of
// the file is damaged.
std::vector<std::pair<std::string, at::Tensor>> CheckpointStateDict(const Checkpoint& checkpoint);

// Removes the temporary files (`<name>.tmp-<pid>`) that writes interrupted by a crash or a kill left in `dir` (not
// recursively): those whose process no longer runs on this machine. Each file removed is logged. A missing folder
// is not an error; returns the number of files removed. Without this, every crash during a write would leave a
// checkpoint-sized file behind for good.
int RemoveStaleTemporaryFiles(const std::string& dir);

// The newest complete checkpoint under `root` (searched recursively, by modification time, newest first; damaged
// or foreign files are skipped with a warning). NotFound when `root` holds no .ckpt file at all (nothing to resume);
// DataLoss when it holds some but none is complete; both name `root`.
absl::StatusOr<std::string> FindLastCheckpoint(const std::string& root);

}  // namespace kiln

#endif  // KILN_TRAINER_CHECKPOINT_CHECKPOINT_IO_H_
