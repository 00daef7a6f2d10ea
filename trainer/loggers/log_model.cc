#include "trainer/loggers/log_model.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<LogModel> ParseLogModel(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "false") return LogModel::kFalse;
  if (lower == "true") return LogModel::kTrue;
  if (lower == "all") return LogModel::kAll;
  return absl::InvalidArgumentError(absl::StrCat("log_model '", text,
                                                 "' is not one of false, true, all (Lightning's "
                                                 "False, True, \"all\")"));
}

}  // namespace kiln
