// What `--mode=validate` and `--mode=predict` take from the checkpoint, so that they need only it and the data to
// run on: the model and data flags the command line leaves out are set to the values the run that saved it had
// (its hyper-parameters: model, layer sizes, task, data, batch size, seed, ...), and the table's classes and
// feature statistics come from its "TabularData" state (DataSpec::saved_state), so that a file to predict on is
// scaled as the training rows were, without the training file.
#ifndef KILN_TRAINER_CLI_SAVED_RUN_H_
#define KILN_TRAINER_CLI_SAVED_RUN_H_

#include <string>
#include <vector>

#include "ATen/core/ivalue.h"
#include "absl/status/statusor.h"

namespace kiln {

struct SavedRun {
  std::string path;                // The checkpoint ("last" resolved).
  c10::IValue data_state;          // Its "TabularData", or None.
  std::vector<std::string> taken;  // The flags set from it, as "--name=value".
};

// Reads the checkpoint `ckpt_path` ("last": the newest under `default_root_dir`) and sets every model and data flag
// that `args` (the expanded command line) does not give to the value the checkpoint's hyper-parameters hold. Errors
// name the file and what is wrong with it (missing, damaged, not a checkpoint) or the hyper-parameter whose value
// the flag refuses.
absl::StatusOr<SavedRun> ApplySavedRun(const std::string& ckpt_path, const std::string& default_root_dir,
                                       const std::vector<std::string>& args);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_SAVED_RUN_H_
