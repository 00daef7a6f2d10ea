// The file `--mode=predict` writes: one row per example, in the order of the predict loader.
//
//   classification:  index,prediction,prob_<class 0>,prob_<class 1>,...   (prediction: the class's label)
//   regression:      index,prediction
#ifndef KILN_TRAINER_CLI_PREDICTIONS_CSV_H_
#define KILN_TRAINER_CLI_PREDICTIONS_CSV_H_

#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "trainer/data/task.h"

namespace kiln {

// The CSV text for `batches` of predictions (classification: probabilities [N, classes]; regression: values [N]).
// InvalidArgument when a batch does not have the shape the task needs.
absl::StatusOr<std::string> PredictionsCsv(const std::vector<at::Tensor>& batches, Task task,
                                           const std::vector<std::string>& class_names);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_PREDICTIONS_CSV_H_
