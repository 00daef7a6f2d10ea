// Lightning's log_model argument of the loggers that keep checkpoints with a run (MLFlowLogger, WandbLogger): which
// of ModelCheckpoint's files go with the run, and when.
#ifndef KILN_TRAINER_LOGGERS_LOG_MODEL_H_
#define KILN_TRAINER_LOGGERS_LOG_MODEL_H_

#include <string>

#include "absl/status/statusor.h"

namespace kiln {

// Lightning's log_model: False (none), True (at the end of the run; with every save when save_top_k is -1) or "all"
// (with every save).
enum class LogModel { kFalse, kTrue, kAll };

// "false", "true" or "all" (and Python's spellings, False and True); InvalidArgument naming the value otherwise.
absl::StatusOr<LogModel> ParseLogModel(const std::string& text);

}  // namespace kiln

#endif  // KILN_TRAINER_LOGGERS_LOG_MODEL_H_
