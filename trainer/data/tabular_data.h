// TabularData: a DataModule over a table of features and labels (a CSV file, the digits), split into training and
// validation rows by a seeded permutation, with features standardised by the training rows' statistics (and the
// regression target's statistics kept, for the model).
//
// The split and the statistics depend only on the table, `val_fraction` and `seed`, so a later process (resuming,
// predicting) that builds the module from the same file and flags gets the same rows and the same scaling.
// Validation, test and prediction use the validation rows, unless `set_predict_features` gives other rows to
// predict on.
#ifndef KILN_TRAINER_DATA_TABULAR_DATA_H_
#define KILN_TRAINER_DATA_TABULAR_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/csv_table.h"
#include "trainer/data/task.h"
#include "trainer/core/data_loader.h"

namespace kiln {

// The training rows' statistics: features are standardised with them, and a regression model is given the target's
// (SupervisedModule::set_target_statistics) to learn standardised targets and answer in the original units.
struct TabularStatistics {
  at::Tensor feature_mean;  // float32 [features]; undefined when features are not standardised.
  at::Tensor feature_std;   // float32 [features], every value > 0; undefined likewise.
  double target_mean = 0;   // Regression targets; 0 and 1 for classification or without `normalize`.
  double target_std = 1;    // > 0.
};

struct TabularDataOptions {
  Task task = Task::kClassification;
  double val_fraction = 0.2;  // In [0, 1): the share of rows held out for validation (rounded to whole rows).
  int64_t batch_size = 64;
  bool shuffle = true;  // Shuffle the training rows every epoch (from seed and epoch).
  uint64_t seed = 42;
  bool normalize = true;  // Standardise each feature (and a regression target) with the training rows' statistics.
  // Statistics to use instead of the training rows' (a model trained before, evaluated on this table); with
  // `normalize`.
  std::optional<TabularStatistics> statistics;
};

// A table's description as TabularData::state_dict() writes it (the keys listed there), for any data module whose
// rows are a table's (StreamingTableData, csv_stream.h), so that FromState reads them all.
c10::IValue TableState(Task task, const std::vector<std::string>& feature_names, const std::string& label_name,
                       const std::vector<std::string>& class_names, const TabularStatistics& statistics);

class TabularData final : public DataModule {
 public:
  // InvalidArgument when the options do not fit the table (no labels, a fraction outside [0, 1), a split that
  // leaves no training rows, a batch size < 1), naming the value and what is accepted.
  static absl::StatusOr<std::unique_ptr<TabularData>> Create(CsvTable table, const TabularDataOptions& options);
  // The table a checkpoint described (state_dict() below) with no rows of its own: only rows given to
  // set_predict_features are there, to predict on. InvalidArgument names what the state lacks.
  static absl::StatusOr<std::unique_ptr<TabularData>> FromState(const c10::IValue& state, int64_t batch_size);

  std::shared_ptr<DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<DataLoader> val_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> test_dataloader() override { return val_; }
  std::shared_ptr<DataLoader> predict_dataloader() override { return predict_ != nullptr ? predict_ : val_; }

  // In a checkpoint, under "TabularData": {"task", "feature_names", "label_name", "class_names", "normalize",
  // "feature_mean", "feature_std" (tensors, None without normalize), "target_mean", "target_std"}. Loading checks
  // that the table has the same task, features and classes.
  std::string state_key() const override { return "TabularData"; }
  c10::IValue state_dict() const override;
  absl::Status load_state_dict(const c10::IValue& state) override;

  // Rows to predict on instead of the validation rows (float32 [rows, num_features()]), scaled like the rest.
  absl::Status set_predict_features(const at::Tensor& features);

  int64_t num_features() const { return num_features_; }
  // Classes for classification, 1 for regression.
  int64_t num_outputs() const;
  Task task() const { return options_.task; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  int64_t num_train() const { return num_train_; }
  int64_t num_val() const { return num_val_; }
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  const TabularStatistics& statistics() const { return statistics_; }

 private:
  TabularData() = default;
  std::shared_ptr<DataLoader> MakeLoader(at::Tensor inputs, at::Tensor targets, bool training) const;

  TabularDataOptions options_;
  int64_t num_features_ = 0;
  int64_t num_train_ = 0;
  int64_t num_val_ = 0;
  std::vector<std::string> class_names_;
  std::vector<std::string> feature_names_;
  std::string label_name_;
  TabularStatistics statistics_;
  std::shared_ptr<DataLoader> train_;
  std::shared_ptr<DataLoader> val_;
  std::shared_ptr<DataLoader> predict_;
};

}  // namespace kiln

#endif  // KILN_TRAINER_DATA_TABULAR_DATA_H_
