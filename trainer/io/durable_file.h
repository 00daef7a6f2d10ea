// Writing a file whole, once, for every output Kiln writes (checkpoints, metrics, hparams.yaml, config.yaml,
// report.html, run summaries, predictions): through a temporary file beside it (`<name>.tmp-<pid>`), flushed to the
// disk, renamed over the name (or exchanged with the file there, which a thread then removes:
// remove_replaced_later), and the folder flushed, so that neither a reader nor a crash, a kill or a power loss ever
// sees half a file. A write that fails leaves the previous file as it was and removes its temporary; one a kill
// interrupted leaves a temporary that RemoveStaleTemporaryFiles (trainer/checkpoint/checkpoint_io.h) removes later.
//
// Thread-safety: concurrent writes of different paths are safe; two threads of one process writing one path at
// once share a temporary name and must not.
#ifndef KILN_TRAINER_IO_DURABLE_FILE_H_
#define KILN_TRAINER_IO_DURABLE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kiln {

struct DurableWriteOptions {
  // The file's kind in errors: "cannot write checkpoint <path>: ...; the previous checkpoint (if any) is intact".
  absl::string_view what = "file";
  // Create the folders of `path` that are missing.
  bool create_folders = true;
  // A symbolic link at `path` is written through: the file at the end of its chain (even one that does not exist
  // yet) is replaced, beside itself, and the link stays (a user's link to where outputs go). false: the link itself
  // is replaced by the file (a checkpoint never writes into what a link points to).
  bool follow_links = true;
  // Where `path` is a file already, leave removing it (the kernel freeing its pages and blocks: 2.3 ms for 6.4 MB
  // here, as long as writing the new one) to a thread of the process: the new file takes its name with one
  // renameat2(RENAME_EXCHANGE), the old one goes under the temporary's name, and the write returns once the new one
  // is durable. The process waits for those removals before it exits (and WaitForReplacedFiles waits for them); one
  // killed first leaves the old file as a temporary, which RemoveStaleTemporaryFiles removes like any other.
  bool remove_replaced_later = false;
};

// Replaces `path` with `contents` as above. Errors name the path and the system's reason: ResourceExhausted when the
// disk (or a quota, or the file-size limit) is full, Internal otherwise.
absl::Status WriteFileDurably(const std::string& path, absl::string_view contents,
                              const DurableWriteOptions& options = {});

// The same for contents given as pieces, written in order with writev (no piece is copied): a checkpoint's headers
// and its tensors' bytes where they are (trainer/checkpoint/format/zip_writer.h). The disk starts writing each
// 256 KiB as soon as it is written, while the rest is written, so that the closing fsync waits for the last of them
// only.
absl::Status WriteFileDurably(const std::string& path, absl::Span<const absl::string_view> pieces,
                              const DurableWriteOptions& options = {});

// Returns once every file replaced by a write with remove_replaced_later is removed.
void WaitForReplacedFiles();

// Flushes `folder`'s entries to the disk (a file created or renamed in it), so that they survive a power loss; ""
// is the current folder. Internal, naming the folder and the system's reason, when it cannot be opened or flushed.
// (WriteFileDurably calls it on the file's folder, and goes on when it fails.)
absl::Status SyncFolder(const std::string& folder);

}  // namespace kiln

#endif  // KILN_TRAINER_IO_DURABLE_FILE_H_
