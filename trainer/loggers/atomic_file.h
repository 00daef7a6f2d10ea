// Writing an output file whole: through a temporary file beside it and a rename, so that a reader (or a run killed
// mid-write) never sees half a file.
#ifndef KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_
#define KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kiln {

// Replaces `path` with `contents`. The folder must exist. Internal error naming the path when it cannot.
// A symbolic link is written through: the file it points to (at the end of a chain of links, even one that does not
// exist yet) is replaced, beside itself, and the link stays; the rename alone would replace the link by a file.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_ATOMIC_FILE_H_
