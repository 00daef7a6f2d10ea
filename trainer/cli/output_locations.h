// Where fit will write, checked before it trains: the run folder under --default_root_dir, --summary_json and
// --predictions. A location that cannot be written (a file where a folder must be, a folder where a file must be,
// a read-only or full file system, no permission, a path longer than the system allows) is an InvalidArgument
// naming the flag, the path and the part of it in the way, so that fit exits 2 having written nothing rather than
// failing after the training it would throw away.
//
// An output file that is one of the run's input files (--data, --digits_path, --predict_data, --model,
// --ckpt_path), or the other output file, is refused the same way: through symbolic or hard links too (the same
// inode), and by path when the output does not exist yet.
//
// Symbolic links are followed: an output that is a link writes the file it points to (WriteFileDurably, trainer/io/durable_file.h), and a folder
// that is a link is the folder it points to.
#ifndef KILN_TRAINER_CLI_OUTPUT_LOCATIONS_H_
#define KILN_TRAINER_CLI_OUTPUT_LOCATIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/cli/fit_config.h"

namespace kiln {

// Every location `config` writes to in its mode (see above).
absl::Status CheckOutputLocations(const FitConfig& config);

// `folder` is a folder, or can be created, and files can be created in it. `room` is the length of the longest
// path the run writes below it, so that those paths stay within PATH_MAX. Probes by creating and removing an empty
// folder in the nearest existing ancestor; leaves nothing behind.
absl::Status CheckFolderLocation(absl::string_view flag, const std::string& folder, size_t room);

// `file` is not a folder, and its folder passes CheckFolderLocation.
absl::Status CheckFileLocation(absl::string_view flag, const std::string& file);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_OUTPUT_LOCATIONS_H_
