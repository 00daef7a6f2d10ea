// Deprecated (2026-12, kept for one release): kiln::WriteFileDurably (trainer/io/durable_file.h, target
// //trainer/io:durable_file), which every output of Kiln's now goes through. This header forwards to it.
#ifndef KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_
#define KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/io/durable_file.h"  // IWYU pragma: export

namespace kiln {

// Replaces `path` with `contents`, writing a symbolic link through: WriteFileDurably with its defaults (which now
// also flushes the file to the disk and creates missing folders).
[[deprecated("use kiln::WriteFileDurably (trainer/io/durable_file.h)")]] inline absl::Status WriteFileAtomically(
    const std::string& path, absl::string_view contents) {
  return WriteFileDurably(path, contents);
}

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_
