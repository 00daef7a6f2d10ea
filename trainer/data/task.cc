#include "trainer/data/task.h"

#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<Task> ParseTask(absl::string_view name) {
  if (name == "classification") return Task::kClassification;
  if (name == "regression") return Task::kRegression;
  return absl::InvalidArgumentError(absl::StrCat("unknown task '", name, "'; accepted: classification, regression"));
}

std::string TaskName(Task task) { return task == Task::kClassification ? "classification" : "regression"; }

}  // namespace kiln
