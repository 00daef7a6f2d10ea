// What the labels of a data set are: classes (trained with cross-entropy, scored by accuracy) or real values
// (trained with mean squared error, scored by mean absolute error).
#ifndef KILN_TRAINER_DATA_TASK_H_
#define KILN_TRAINER_DATA_TASK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

enum class Task { kClassification, kRegression };

// "classification" or "regression"; anything else is InvalidArgument naming the value and the accepted ones.
absl::StatusOr<Task> ParseTask(absl::string_view name);
std::string TaskName(Task task);

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_TASK_H_
