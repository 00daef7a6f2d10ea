// The data of `//trainer:fit`, built from --data and the other data flags (DataSpec): the built-in synthetic task,
// the UCI digits, or a CSV file; wrapped so that batches are prepared on a background thread when --num_workers > 0.
#ifndef KILN_TRAINER_CLI_DATA_FACTORY_H_
#define KILN_TRAINER_CLI_DATA_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/cli/fit_config.h"
#include "trainer/data/tabular_data.h"
#include "trainer/data/task.h"
#include "trainer/core/data_loader.h"

namespace kiln {

struct LoadedData {
  std::shared_ptr<DataModule> module;  // What the trainer gets.
  TabularData* table = nullptr;        // The table behind `module` (CSV files, digits); null for synthetic data.
  // The training rows' statistics (a table's, or a stream's); null for synthetic data.
  const TabularStatistics* statistics = nullptr;
  Task task = Task::kClassification;
  int64_t num_features = 0;
  int64_t num_outputs = 0;               // Classes, or 1 for regression.
  std::vector<std::string> class_names;  // Classification: the label of each class index.
  std::string description;               // One line for people, e.g. "digits: 1438 training rows, 359 validation rows".
};

// Loads and splits the data. Errors name the file, line and cell (CSV), how to install the digits, or the flag.
// With --predict_data, its rows (scaled like the training rows) become the predict loader's.
absl::StatusOr<LoadedData> LoadData(const DataSpec& spec);

}  // namespace kiln

#endif  // KILN_TRAINER_CLI_DATA_FACTORY_H_
